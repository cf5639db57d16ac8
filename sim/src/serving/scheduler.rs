//! Engine schedulers: how a serving engine forms each step of an aggregated (mixed)
//! pool from its running and waiting requests. Each engine does it its own way; the
//! rules below are read from the engines' own source (files and commits in
//! `docs/engine-schedulers.md`). The budgets themselves are the pool's fields, named
//! there by each engine's flag: `chunk_tokens_per_rank` is vLLM's
//! `max_num_batched_tokens`, SGLang's `chunked_prefill_size` and TensorRT-LLM's
//! `max_num_tokens`; `max_batch_per_rank` is `max_num_seqs`, `max_running_requests` and
//! `max_batch_size`.
//!
//! | rule | twin | vllm | sglang | trtllm |
//! | --- | --- | --- | --- | --- |
//! | decode tokens use the step's token budget first | no | yes | no (decode waits) | yes |
//! | a prefilling request holds a running slot | no | yes | yes | yes |
//! | a step with prefill work runs no decode | no | no | yes | no |
//! | a prompt is scheduled whole (no chunking) | no | no | no | yes |
//! | the next step is formed while this one runs | no | yes | yes | yes |
//! | the first token comes with the last prompt chunk | no | yes | yes | yes |
//!
//! Every engine here serves waiting requests first come, first served. TensorRT-LLM
//! (`GUARANTEED_NO_EVICT`), SGLang and twin's own reserve a request's KV (input +
//! output) when it is admitted; vLLM allocates it as the request grows and preempts
//! when it runs short ([`Scheduler::kv_on_demand`]). SGLang's admission reserves part
//! of the running requests' remaining output (`new_token_ratio`, 0.7 decaying to 0.1)
//! and retracts requests when short: twin's full reservation is its conservative
//! bound.

use super::config::ServingScenario;
use serde::{Deserialize, Serialize};

/// `serving.scheduler`: which engine's scheduler forms the mixed pool's steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerChoice {
    /// The scenario's `engine` (`vllm`, `sglang`, `trtllm`, with or without a
    /// version); twin's own policy when it names none of them.
    #[default]
    Auto,
    Twin,
    Vllm,
    Sglang,
    Trtllm,
}

impl SchedulerChoice {
    pub fn is_auto(&self) -> bool {
        *self == SchedulerChoice::Auto
    }
}

/// The scheduler a run uses, resolved from [`SchedulerChoice`] and the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scheduler {
    /// twin's own policy: each step runs the whole decode batch and, beside it, prefill
    /// chunks within their own token budget.
    #[default]
    Twin,
    /// vLLM V1: running requests first (decode, then partial prefills), then waiting
    /// ones, all within `max_num_batched_tokens`; chunked prefill on.
    Vllm,
    /// SGLang: prefill first; a step with prefill work is an extend batch alone
    /// (`enable_mixed_chunk` off by default), decode runs when no prefill is ready.
    Sglang,
    /// TensorRT-LLM: in-flight batching, generation requests first within
    /// `max_num_tokens`, context requests whole (`enable_chunked_prefill` off).
    Trtllm,
}

/// vLLM's V1 front end per request: the request preprocessing time, "~12-15 ms (almost
/// always >12)" at a batch of 96 (vLLM PR #21139, 2025-07-17), its lower end.
pub const VLLM_FRONTEND_S: f64 = 12e-3;

/// An engine API server's seconds per streamed chunk (`super::frontend`): none until
/// fitted (`twin calibrate --from-runs`, term `frontend_chunk_s`).
pub const ENGINE_FRONTEND_CHUNK_S: f64 = 0.0;

/// An engine API server's tokenisation, seconds per prompt token on its one tokenizer
/// thread: Hugging Face `tokenizers` encodes a 4 MB document (about a million tokens)
/// in 1.1 s on one thread (charlesxu.io, "3.3x Faster HuggingFace Tokenizers for Single
/// Sequence", its serial baseline). Requests sent together pass one after another,
/// this apart a prompt token (2.3 ms for 2,048 tokens): what starts the first of a
/// burst alone.
pub const ENGINE_TOKENIZE_S_PER_TOKEN: f64 = 1.1e-6;

/// twin's own prefix-cache block, in tokens: the Mooncake traces' block.
pub const TWIN_KV_BLOCK_TOKENS: u64 = super::workload::TRACE_BLOCK_TOKENS;

impl Scheduler {
    /// The scheduler of `choice`, `Auto` taking the engine's name (before any
    /// `@VERSION`; a profile path names none).
    pub fn resolve(choice: SchedulerChoice, engine: Option<&str>) -> Scheduler {
        match choice {
            SchedulerChoice::Twin => Scheduler::Twin,
            SchedulerChoice::Vllm => Scheduler::Vllm,
            SchedulerChoice::Sglang => Scheduler::Sglang,
            SchedulerChoice::Trtllm => Scheduler::Trtllm,
            SchedulerChoice::Auto => Scheduler::of_engine(engine.unwrap_or("")),
        }
    }

    /// The scheduler an engine name stands for (`vllm@0.11.0` is vLLM's).
    pub fn of_engine(engine: &str) -> Scheduler {
        match crate::cost::host::engine_key(engine).as_str() {
            "vllm" => Scheduler::Vllm,
            "sglang" => Scheduler::Sglang,
            "trtllm" | "tensorrt-llm" | "tensorrt_llm" => Scheduler::Trtllm,
            _ => Scheduler::Twin,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Twin => "twin",
            Scheduler::Vllm => "vllm",
            Scheduler::Sglang => "sglang",
            Scheduler::Trtllm => "trtllm",
        }
    }

    /// One line for outputs: whose policy forms the steps.
    pub fn describe(self) -> &'static str {
        match self {
            Scheduler::Twin => "twin's own (decode batch + prefill chunks within their own budget)",
            Scheduler::Vllm => "vLLM V1 (decode first, then chunked prefill, in one token budget)",
            Scheduler::Sglang => "SGLang (prefill first; decode waits while prefill runs)",
            Scheduler::Trtllm => "TensorRT-LLM (in-flight batching, decode first, prompts whole)",
        }
    }

    /// Whether the running decode requests take their tokens (1 + draft tokens each)
    /// from the step's token budget before any prefill chunk.
    pub fn decode_in_budget(self) -> bool {
        matches!(self, Scheduler::Vllm | Scheduler::Trtllm)
    }

    /// Whether a request being prefilled counts against the batch limit.
    pub fn prefill_holds_slot(self) -> bool {
        !matches!(self, Scheduler::Twin)
    }

    /// Whether a step that runs prefill runs no decode.
    pub fn prefill_pauses_decode(self) -> bool {
        matches!(self, Scheduler::Sglang)
    }

    /// Whether the engine forms step N+1 while step N runs (vLLM's async scheduling,
    /// default on since PR #27614; SGLang's overlap scheduler and TensorRT-LLM's
    /// overlap scheduler, both default on): a request that arrives during step N
    /// first runs in step N+2. twin's own policy forms each step when the last ends.
    pub fn schedules_ahead(self) -> bool {
        !matches!(self, Scheduler::Twin)
    }

    /// Whether the engine of `engine` (`vllm@0.12.0`) forms each step while the last
    /// runs by default: [`Scheduler::schedules_ahead`], except vLLM before 0.14.0, where
    /// async scheduling was opt-in (`--async-scheduling`; vLLM 0.14.0's release notes
    /// list "Async scheduling is now enabled by default", PR #27614, among its breaking
    /// changes). An engine without a version that reads as one is taken as the latest.
    /// Where steps are not formed ahead, the engine's host work is exposed whole
    /// (`scenario::resolve`).
    pub fn schedules_ahead_at(self, engine: Option<&str>) -> bool {
        if self != Scheduler::Vllm {
            return self.schedules_ahead();
        }
        let version = engine.and_then(|e| e.split_once('@')).map(|(_, v)| v);
        version
            .and_then(spec::version::major_minor)
            .is_none_or(|v| v >= (0, 14))
    }

    /// Whether KV is allocated as requests grow, not reserved at admission: vLLM V1
    /// admits a waiting request when the free blocks hold its prompt (less a watermark
    /// of 1% of the pool, `KVCacheManager`), grows a running request's blocks step by
    /// step, and when they run short preempts the running request scheduled last (its
    /// blocks freed; it waits at the queue's head and recomputes its prompt and the
    /// output it had when it returns: `Scheduler._preempt_request`, recompute mode).
    pub fn kv_on_demand(self) -> bool {
        matches!(self, Scheduler::Vllm)
    }

    /// Whether a request's first token is sampled by the step that computes its last
    /// prompt chunk (every engine here), not by its first decode step (twin's own
    /// convention, as a disaggregated decode pool produces it).
    pub fn first_token_at_prefill(self) -> bool {
        !matches!(self, Scheduler::Twin)
    }

    /// The engine's front end per request, seconds (`serving.frontend_s` when unset):
    /// vLLM's request preprocessing in its V1 front end ([`VLLM_FRONTEND_S`]), the
    /// output side not counted: a lower bound. SGLang's and TensorRT-LLM's are assumed as vLLM's (a
    /// Python API server that tokenises and hands the request over, by the same
    /// design; no published figure). twin's own: none.
    pub fn frontend_s(self) -> f64 {
        match self {
            Scheduler::Twin => 0.0,
            Scheduler::Vllm | Scheduler::Sglang | Scheduler::Trtllm => VLLM_FRONTEND_S,
        }
    }

    /// An API server's seconds per streamed chunk (`serving.frontend_chunk_s` when
    /// unset): [`ENGINE_FRONTEND_CHUNK_S`] for the engines, none for twin's own.
    pub fn frontend_chunk_s(self) -> f64 {
        match self {
            Scheduler::Twin => 0.0,
            Scheduler::Vllm | Scheduler::Sglang | Scheduler::Trtllm => ENGINE_FRONTEND_CHUNK_S,
        }
    }

    /// An API server's tokenisation per prompt token, its requests one after another
    /// (`serving.frontend_token_s` when unset): [`ENGINE_TOKENIZE_S_PER_TOKEN`] for
    /// the engines, none for twin's own.
    pub fn frontend_token_s(self) -> f64 {
        match self {
            Scheduler::Twin => 0.0,
            Scheduler::Vllm | Scheduler::Sglang | Scheduler::Trtllm => ENGINE_TOKENIZE_S_PER_TOKEN,
        }
    }

    /// Tokens per prefix-cache block, the engine's default (`serving.kv_block_tokens`
    /// when unset); a cached prefix is a whole number of them:
    /// - vLLM: `--block-size`, 16 on CUDA (`CacheConfig.block_size`; some attention
    ///   backends raise it, FlashMLA to 64: set the knob then);
    /// - SGLang: the radix cache's `--page-size`, 1 by default (`ServerArgs.page_size`):
    ///   a prefix is matched token by token;
    /// - TensorRT-LLM: `KvCacheConfig.tokens_per_block`, 32 by default
    ///   (`tensorrt_llm/llmapi/llm_args.py`, NVIDIA/TensorRT-LLM@fcd3f31); partial
    ///   reuse of a block (`enable_partial_reuse`) is not modelled;
    /// - twin's own: 512, the Mooncake traces' `hash_ids` granularity (the AgentX
    ///   workload's token mix is tuned on it).
    pub fn kv_block_tokens(self) -> u64 {
        match self {
            Scheduler::Twin => TWIN_KV_BLOCK_TOKENS,
            Scheduler::Vllm => 16,
            Scheduler::Sglang => 1,
            Scheduler::Trtllm => 32,
        }
    }

    /// Whether a prompt's uncached tokens must fit one step's budget whole.
    pub fn whole_prompts(self) -> bool {
        matches!(self, Scheduler::Trtllm)
    }

    /// The prefill token budget of a step on a rank with `decoding` running requests,
    /// each producing `1 + draft_tokens` tokens, out of `budget` tokens; `mixed`: the
    /// decode batch runs in a prefill step and takes its tokens first whatever the
    /// scheduler (SGLang's mixed chunk).
    pub fn prefill_budget(self, budget: u32, decoding: u32, draft_tokens: u32, mixed: bool) -> u32 {
        if self.decode_in_budget() || mixed {
            let used = decoding as u64 * (1 + draft_tokens as u64);
            budget.saturating_sub(used.min(u32::MAX as u64) as u32)
        } else {
            budget
        }
    }

    /// The tokens of a waiting prompt with `remaining` uncached tokens a step may
    /// compute now, out of `left` of the step's `budget`; `first`: nothing else is
    /// prefilled on the rank this step. `None`: the prompt waits for a later step. A
    /// whole-prompt scheduler runs a prompt longer than the whole budget alone, in
    /// chunks (TensorRT-LLM refuses such prompts unless chunked prefill is on).
    pub fn chunk(self, remaining: u32, left: u32, budget: u32, first: bool) -> Option<u32> {
        if left == 0 {
            return None;
        }
        if self.whole_prompts() && remaining > left && !(first && remaining > budget) {
            return None;
        }
        Some(remaining.min(left))
    }
}

impl ServingScenario {
    /// The scheduler of the mixed pool: `serving.scheduler`, or the engine's.
    pub fn scheduler(&self) -> Scheduler {
        Scheduler::resolve(self.serving.scheduler, self.engine.as_deref())
    }

    /// Whether the mixed pool forms each step while the last runs:
    /// `serving.async_scheduling`, or the scheduler's default.
    pub fn schedules_ahead(&self) -> bool {
        self.serving
            .async_scheduling
            .unwrap_or_else(|| self.scheduler().schedules_ahead_at(self.engine.as_deref()))
    }

    /// Tokens per prefix-cache block: `serving.kv_block_tokens`, or the engine's (that
    /// of the scheduler it resolves to).
    pub fn kv_block_tokens(&self) -> u64 {
        self.serving
            .kv_block_tokens
            .unwrap_or_else(|| self.scheduler().kv_block_tokens())
            .max(1)
    }

    /// The front end's seconds per request: `serving.frontend_s`, or the engine's
    /// (that of the scheduler it resolves to).
    pub fn frontend_s(&self) -> f64 {
        self.serving
            .frontend_s
            .unwrap_or_else(|| self.scheduler().frontend_s())
    }

    /// An API server's seconds per streamed chunk: `serving.frontend_chunk_s`, or the
    /// engine's.
    pub fn frontend_chunk_s(&self) -> f64 {
        self.serving
            .frontend_chunk_s
            .unwrap_or_else(|| self.scheduler().frontend_chunk_s())
    }

    /// An API server's tokenisation per prompt token: `serving.frontend_token_s`, or
    /// the engine's.
    pub fn frontend_token_s(&self) -> f64 {
        self.serving
            .frontend_token_s
            .unwrap_or_else(|| self.scheduler().frontend_token_s())
    }

    /// One line on the mixed pool's scheduler, for outputs.
    pub fn scheduler_line(&self) -> String {
        let fe = self.frontend_s();
        let mixed =
            self.serving.mixed_chunk == Some(true) && self.scheduler().prefill_pauses_decode();
        format!(
            "{}{}{}",
            if mixed {
                "SGLang with mixed chunk (prefill first; the decode batch runs beside each prefill chunk)"
            } else {
                self.scheduler().describe()
            },
            if self.schedules_ahead() {
                "; each step formed while the last runs"
            } else {
                ""
            },
            if fe > 0.0 {
                // A fitted front end prints to a tenth of a millisecond.
                let ms = fe * 1e3;
                let shown = if (ms - ms.round()).abs() < 1e-9 {
                    crate::validate::show(ms.round())
                } else {
                    format!("{ms:.1}")
                };
                let tokens = self.token_words().map(|w| format!(", {w}"));
                format!(
                    "; front end {shown} ms a request{}{}",
                    self.chunk_words(),
                    tokens.unwrap_or_default()
                )
            } else if let Some(w) = self.token_words() {
                // No intake work, but the prompts still wait for their tokenisation.
                format!("; front end: {w}")
            } else {
                String::new()
            }
        )
    }

    /// The front end's tokenisation, requests one after another, for the scheduler's
    /// line (none without it).
    fn token_words(&self) -> Option<String> {
        let t = self.frontend_token_s();
        (t > 0.0).then(|| {
            format!(
                "prompts tokenised one after another ({:.1} us a token)",
                t * 1e6
            )
        })
    }

    /// The front end's streaming cost, for the scheduler's line (none without one).
    fn chunk_words(&self) -> String {
        let c = self.frontend_chunk_s();
        if c <= 0.0 {
            return String::new();
        }
        let servers = self.serving.api_servers.unwrap_or(1);
        format!(
            ", {:.1} us of its API server a streamed chunk ({servers} API server{} an instance)",
            c * 1e6,
            if servers == 1 { "" } else { "s" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_follows_the_engine_name() {
        let r = |e: Option<&str>| Scheduler::resolve(SchedulerChoice::Auto, e);
        assert_eq!(r(None), Scheduler::Twin);
        assert_eq!(r(Some("vllm@0.24.0")), Scheduler::Vllm);
        assert_eq!(r(Some("SGLang")), Scheduler::Sglang);
        assert_eq!(r(Some("trtllm@1.3.0rc20")), Scheduler::Trtllm);
        assert_eq!(r(Some("profiles/h100.toml.gz")), Scheduler::Twin);
        assert_eq!(r(Some("twin")), Scheduler::Twin);
        let explicit = Scheduler::resolve(SchedulerChoice::Sglang, Some("vllm"));
        assert_eq!(explicit, Scheduler::Sglang);
    }

    #[test]
    fn vllm_forms_steps_ahead_from_0_14() {
        let v = Scheduler::Vllm;
        assert!(!v.schedules_ahead_at(Some("vllm@0.12.0")));
        assert!(!v.schedules_ahead_at(Some("vllm@0.13.1")));
        assert!(v.schedules_ahead_at(Some("vllm@0.14.0")));
        assert!(v.schedules_ahead_at(Some("vllm@1.0")));
        assert!(v.schedules_ahead_at(Some("vllm")));
        assert!(v.schedules_ahead_at(Some("vllm@nightly-5b8c30d6")));
        assert!(Scheduler::Sglang.schedules_ahead_at(Some("sglang@0.4.0")));
        assert!(!Scheduler::Twin.schedules_ahead_at(None));
    }

    #[test]
    fn decode_first_budgets_leave_prefill_the_rest() {
        // 8192 tokens, 50 decoding requests with 1 draft token: 100 tokens of decode.
        assert_eq!(Scheduler::Vllm.prefill_budget(8192, 50, 1, false), 8092);
        assert_eq!(Scheduler::Trtllm.prefill_budget(8192, 50, 0, false), 8142);
        assert_eq!(Scheduler::Twin.prefill_budget(8192, 50, 1, false), 8192);
        assert_eq!(Scheduler::Sglang.prefill_budget(8192, 50, 1, false), 8192);
        // SGLang's mixed chunk: the decode batch's tokens come first.
        assert_eq!(Scheduler::Sglang.prefill_budget(8192, 50, 1, true), 8092);
        assert_eq!(Scheduler::Vllm.prefill_budget(100, 200, 0, false), 0);
    }

    #[test]
    fn whole_prompts_wait_for_room_unless_they_can_never_fit() {
        let t = Scheduler::Trtllm;
        assert_eq!(t.chunk(3000, 2000, 8192, false), None);
        assert_eq!(t.chunk(3000, 2000, 8192, true), None);
        assert_eq!(t.chunk(2000, 2000, 8192, false), Some(2000));
        // Longer than the whole budget: alone, in chunks.
        assert_eq!(t.chunk(9000, 8192, 8192, true), Some(8192));
        assert_eq!(t.chunk(9000, 8000, 8192, false), None);
        assert_eq!(Scheduler::Vllm.chunk(3000, 2000, 8192, false), Some(2000));
        assert_eq!(Scheduler::Vllm.chunk(3000, 0, 8192, true), None);
    }
}
