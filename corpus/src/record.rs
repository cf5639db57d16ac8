//! The record of one measured serving run (`twin.run.v1`): what ran (engine, model,
//! GPU, layout), how it was loaded (the client), what was measured, and where the
//! figures come from. One JSON object per run; a corpus is a JSON Lines file of them.
//!
//! Every field is the run's own words where it has them: an unknown is absent (or
//! `None`), never a default passed off as measured.

use serde::{Deserialize, Serialize};
use spec::problem::Problem;
use std::collections::BTreeMap;

/// The record format's name and version: a reader refuses any other.
pub const SCHEMA: &str = "twin.run.v1";

/// One measured run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// Unique within its corpus.
    pub id: String,
    pub provenance: Provenance,
    pub engine: Engine,
    pub model: ModelRef,
    pub gpu: Gpu,
    pub layout: Layout,
    pub client: Client,
    pub measured: Measured,
}

/// Where the figures come from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The file or publication the run comes from (with its version or commit).
    pub source: String,
    /// The run's key in that source (a row id, a file name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<String>,
    /// When it was measured (ISO date), where the source says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    /// The source's own words on the run, verbatim (for instance its data-source
    /// column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What the importer decided, and on which evidence (a client's semantics read
    /// from its source code, a quantization label read as a format).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The serving engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineName {
    Vllm,
    Sglang,
    Trtllm,
}

impl EngineName {
    pub fn key(self) -> &'static str {
        match self {
            EngineName::Vllm => "vllm",
            EngineName::Sglang => "sglang",
            EngineName::Trtllm => "trtllm",
        }
    }

    pub fn parse(s: &str) -> Option<EngineName> {
        match s.trim().to_ascii_lowercase().as_str() {
            "vllm" => Some(EngineName::Vllm),
            "sglang" => Some(EngineName::Sglang),
            "trtllm" | "tensorrt-llm" | "tensorrt_llm" => Some(EngineName::Trtllm),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Engine {
    pub name: EngineName,
    /// The engine's version as the source gives it (`0.19.0`, `1.0.0rc3`); `None`
    /// where it gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The container image, where the source names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The server's settings the source gives (the rest are the engine's defaults).
    #[serde(default, skip_serializing_if = "EngineSettings::is_empty")]
    pub settings: EngineSettings,
}

/// Server settings that change what a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// Most tokens one step computes (vLLM `max_num_batched_tokens`, SGLang
    /// `chunked_prefill_size`, TensorRT-LLM `max_num_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batched_tokens: Option<u32>,
    /// Most requests one instance runs at once (vLLM `max_num_seqs`, SGLang
    /// `max_running_requests`, TensorRT-LLM `max_batch_size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// Most prompt tokens one prefill batch admits (SGLang `--max-prefill-tokens`; the
    /// step's budget is the smaller of it and `max_batched_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_prefill_tokens: Option<u32>,
    /// A step with prefill work runs the decode batch too (SGLang
    /// `--enable-mixed-chunk`; the other engines always do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_chunk: Option<bool>,
    /// Share of GPU memory the engine takes (vLLM `gpu_memory_utilization`, SGLang
    /// `mem_fraction_static`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_fraction: Option<f64>,
    /// Prefix caching on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_caching: Option<bool>,
    /// Decode steps between the scheduler's takes of new requests (SGLang
    /// `--scheduler-recv-interval`; absent: every step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_recv_interval: Option<u32>,
    /// Routed experts quantise their activations to 8 bits (vLLM
    /// `VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`: MXFP4 experts run W4A8, MXFP8
    /// activations, on FlashInfer's TensorRT-LLM kernel; absent: the engine's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_activations_fp8: Option<bool>,
    /// Kernels launched with programmatic dependent launch (TensorRT-LLM
    /// `TRTLLM_ENABLE_PDL=1`, off by default): each kernel starts while the one before
    /// finishes, so a CUDA graph's replay leaves no gap between them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdl: Option<bool>,
    /// The routed-expert kernel the server was told to run instead of its usual one
    /// (vLLM `VLLM_MXFP4_USE_MARLIN=1`: `marlin`; absent: the engine's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_kernel: Option<spec::kernel::MoeKernel>,
    /// Most decode steps the scheduler holds ready prompts back for a fuller context
    /// batch, and the share of the step's budget that ends the wait at once
    /// (TensorRT-LLM `batch_wait_timeout_iters`, `batch_wait_max_tokens_ratio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_wait_iters: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_wait_tokens_ratio: Option<f64>,
    /// Prompts balanced over the attention-DP ranks (TensorRT-LLM
    /// `attention_dp_config.enable_balance`, with its default `timeout_iters` 50 and
    /// `batching_wait_iters` 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adp_balance: Option<bool>,
    /// Speculative decoding the server ran (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Speculative>,
}

/// Speculative decoding as a server ran it: the drafter, the tokens it drafts a step
/// and, where the source gives it, how often each is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    pub method: SpecMethod,
    /// Tokens drafted a step, one after another (SGLang `--speculative-num-steps` with
    /// `--speculative-eagle-topk 1`; vLLM `num_speculative_tokens`).
    pub draft_tokens: u32,
    /// Acceptance of each draft given those before it were accepted, where the source
    /// measured it (absent: the model's, which twin's model files state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance: Option<f64>,
}

/// What drafts the tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpecMethod {
    /// The model's own multi-token-prediction layers (SGLang's `--speculative-algorithm
    /// EAGLE` on a checkpoint with MTP layers, vLLM's `method: mtp`, TensorRT-LLM's
    /// `decoding_type: MTP`); drafts beyond its layers reuse its last one.
    Mtp,
}

/// The KV cache an engine serves a checkpoint of GEMM format `gemm` with when nothing
/// says otherwise, where it is not the model's dtype: TensorRT-LLM serves per-tensor
/// FP8 and NVFP4 checkpoints made by NVIDIA's ModelOpt, whose `hf_ptq.py` quantises the
/// KV cache to FP8 unless told otherwise (`--kv_cache_qformat`, default `fp8`) and
/// writes `kv_cache_quant_algo: FP8` into the checkpoint's `hf_quant_config.json`,
/// which TensorRT-LLM's KV cache takes (as the per-tensor Qwen3-32B AIConfigurator
/// lists, `Qwen3-32B-FP8-Static-PerTensor`, and 20 of 23 NVIDIA NVFP4 checkpoints
/// carry). vLLM and SGLang keep the model's dtype unless `--kv-cache-dtype` says
/// otherwise: `None`.
pub fn trtllm_checkpoint_kv(engine: EngineName, gemm: Format) -> Option<Format> {
    (engine == EngineName::Trtllm && matches!(gemm, Format::Fp8Tensor | Format::Nvfp4))
        .then_some(Format::Fp8Tensor)
}

impl EngineSettings {
    pub fn is_empty(&self) -> bool {
        *self == EngineSettings::default()
    }
}

impl Engine {
    /// `vllm@0.19.0`, or `vllm@?` without a version.
    pub fn label(&self) -> String {
        format!(
            "{}@{}",
            self.name.key(),
            self.version.as_deref().unwrap_or("?")
        )
    }

    /// The engine as a scenario's `engine` names it: `vllm@0.19.0`, or `vllm` without a
    /// version (the latest of what twin ships).
    pub fn choice(&self) -> String {
        match &self.version {
            Some(v) => format!("{}@{v}", self.name.key()),
            None => self.name.key().to_string(),
        }
    }
}

/// A number format of a part of the model as served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Bf16,
    /// FP8 E4M3 with one scale per tensor (or per channel).
    Fp8Tensor,
    /// FP8 E4M3 with 128x128 block scales (DeepSeek-style).
    Fp8Block,
    /// NVFP4: FP4 E2M1 with an FP8 scale per 16 values.
    Nvfp4,
    /// MXFP4: FP4 E2M1 with an E8M0 scale per 32 values.
    Mxfp4,
    /// INT4 weights, 16-bit activations (AWQ, GPTQ).
    Int4,
}

impl Format {
    pub fn key(self) -> &'static str {
        match self {
            Format::Bf16 => "bf16",
            Format::Fp8Tensor => "fp8_tensor",
            Format::Fp8Block => "fp8_block",
            Format::Nvfp4 => "nvfp4",
            Format::Mxfp4 => "mxfp4",
            Format::Int4 => "int4",
        }
    }
}

/// The model as served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    /// The checkpoint's Hugging Face id, as the source names it.
    pub id: String,
    /// The model twin prices it as: an embedded model name (`llama-3.1-70b`), or a
    /// Hugging Face `config.json` path relative to the corpus file.
    pub config: String,
    /// Dense GEMMs' weights (attention projections, dense FFN, shared experts).
    pub gemm: Format,
    /// Routed experts' weights (`None` for a dense model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<Format>,
    /// The KV cache's format, where the source gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<Format>,
}

/// The GPU as the source names it, and as twin names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// The source's name (`h100_sxm`, `gb200`).
    pub system: String,
    /// twin's hardware name (`twin list`).
    pub hardware: String,
}

/// How the engine's workers were laid out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Layout {
    /// Prefill and decode on the same workers.
    Aggregated { workers: Workers },
    /// Prefill and decode on separate workers, KV handed over.
    Disaggregated { prefill: Workers, decode: Workers },
}

/// A pool of identical workers (engine instances).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workers {
    /// Engine instances (`None`: the source does not say).
    pub count: Option<u32>,
    /// Tensor-parallel GPUs per attention replica.
    pub tp: u32,
    /// Pipeline stages.
    pub pp: u32,
    /// Data-parallel attention replicas per instance.
    pub attention_dp: u32,
    /// Tensor-parallel slices of each routed expert.
    pub moe_tp: u32,
    /// Expert-parallel ranks the routed experts spread over.
    pub moe_ep: u32,
    /// The most requests a worker runs at once, where the source gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_batch: Option<u32>,
}

impl Workers {
    /// GPUs per instance.
    pub fn gpus_per_instance(&self) -> u32 {
        self.tp.max(1) * self.pp.max(1) * self.attention_dp.max(1)
    }
}

impl Layout {
    /// GPUs of the whole deployment, where the worker counts are known.
    pub fn gpus(&self) -> Option<u32> {
        match self {
            Layout::Aggregated { workers } => Some(workers.count? * workers.gpus_per_instance()),
            Layout::Disaggregated { prefill, decode } => Some(
                prefill.count? * prefill.gpus_per_instance()
                    + decode.count? * decode.gpus_per_instance(),
            ),
        }
    }

    pub fn mode(&self) -> &'static str {
        match self {
            Layout::Aggregated { .. } => "aggregated",
            Layout::Disaggregated { .. } => "disaggregated",
        }
    }
}

/// How lengths were drawn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum Lengths {
    /// Every request exactly `tokens`.
    Fixed { tokens: u32 },
    /// Uniform over the integers `low..=high` (`vllm bench serve --random-range-ratio
    /// r`: `[floor(L (1 - r)), ceil(L (1 + r))]`; InferenceX's and SGLang's random
    /// dataset: `[floor(L r), L]`).
    Uniform { low: u32, high: u32 },
    /// Normal with a mean and a standard deviation, rounded, at least 1 (aiperf,
    /// genai-perf).
    Normal { mean: u32, stddev: f64 },
    /// The run's own per-request lengths, in sending order.
    Recorded { tokens: Vec<u32> },
}

impl Lengths {
    /// The mean length.
    pub fn mean(&self) -> f64 {
        match self {
            Lengths::Fixed { tokens } => *tokens as f64,
            Lengths::Uniform { low, high } => (*low as f64 + *high as f64) / 2.0,
            Lengths::Normal { mean, .. } => *mean as f64,
            Lengths::Recorded { tokens } => {
                tokens.iter().map(|&t| t as f64).sum::<f64>() / tokens.len().max(1) as f64
            }
        }
    }
}

/// How the client sent its requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Load {
    /// At most `concurrency` requests in flight, the next sent as one ends.
    ClosedLoop { concurrency: u32 },
    /// Sent at `req_s` (gamma gaps of shape `burstiness`; 1 = Poisson), optionally
    /// capped at `concurrency` in flight.
    Rate {
        req_s: f64,
        #[serde(default = "one")]
        burstiness: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        concurrency: Option<u32>,
    },
    /// Rate stages in turn, each drained before the next starts (inference-perf).
    Stages { stages: Vec<Stage> },
}

fn one() -> f64 {
    1.0
}

/// One stage of a staged load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    pub req_s: f64,
    pub duration_s: f64,
}

/// The benchmark client and its semantics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Client {
    /// The client program (`aiperf`, `vllm bench serve`, `sglang.bench_serving`), or
    /// what is known of it.
    pub tool: String,
    pub load: Load,
    /// Requests sent (after the warm-up), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_prompts: Option<u64>,
    /// Requests sent before the measured ones and left out of the figures.
    #[serde(default)]
    pub warmup_requests: u64,
    pub input: Lengths,
    pub output: Lengths,
    /// Leading tokens every prompt shares (a fixed prefix).
    #[serde(default)]
    pub shared_prefix: u32,
    /// Every request generates its full output length (`--ignore-eos`).
    #[serde(default = "yes")]
    pub ignore_eos: bool,
    /// Per recorded request, its leading tokens the server already held in its
    /// prefix cache when it arrived (an earlier run on the same server, the client's
    /// warm-up); empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<u32>,
}

fn yes() -> bool {
    true
}

/// A metric a run may report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Time to first token, ms.
    TtftMs,
    /// Time per output token after the first, ms: (E2E - TTFT) / (output - 1) per
    /// request.
    TpotMs,
    /// Gaps between successive tokens of a request, ms.
    ItlMs,
    /// Request latency, ms.
    E2eMs,
    /// Output tokens per second, whole deployment.
    OutputTokS,
    /// Input plus output tokens per second, whole deployment.
    TotalTokS,
    /// Completed requests per second.
    RequestS,
}

impl Metric {
    pub const ALL: [Metric; 7] = [
        Metric::TtftMs,
        Metric::TpotMs,
        Metric::ItlMs,
        Metric::E2eMs,
        Metric::OutputTokS,
        Metric::TotalTokS,
        Metric::RequestS,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Metric::TtftMs => "ttft_ms",
            Metric::TpotMs => "tpot_ms",
            Metric::ItlMs => "itl_ms",
            Metric::E2eMs => "e2e_ms",
            Metric::OutputTokS => "output_tok_s",
            Metric::TotalTokS => "total_tok_s",
            Metric::RequestS => "request_s",
        }
    }

    pub fn parse(s: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.key() == s)
    }

    /// A per-request latency (with a distribution), or a rate of the whole run.
    pub fn is_latency(self) -> bool {
        matches!(
            self,
            Metric::TtftMs | Metric::TpotMs | Metric::ItlMs | Metric::E2eMs
        )
    }
}

/// Which statistic of a metric's per-request values a figure is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    Mean,
    P50,
    P90,
    P99,
    /// The source's central figure, whose kind (mean or median) it does not state
    /// (docs/runs-corpus.md): compared with the statistic `validate runs --center`
    /// names.
    Center,
    /// A rate of the whole run (throughput): no distribution.
    Value,
}

impl Stat {
    pub const ALL: [Stat; 6] = [
        Stat::Mean,
        Stat::P50,
        Stat::P90,
        Stat::P99,
        Stat::Center,
        Stat::Value,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P90 => "p90",
            Stat::P99 => "p99",
            Stat::Center => "center",
            Stat::Value => "value",
        }
    }

    pub fn parse(s: &str) -> Option<Stat> {
        Stat::ALL.into_iter().find(|m| m.key() == s)
    }
}

/// The measured figures: per metric, the statistics the source gives.
pub type Measured = BTreeMap<Metric, BTreeMap<Stat, f64>>;

impl RunRecord {
    /// The measured figure of `metric` at `stat`, if the run gives it.
    pub fn figure(&self, metric: Metric, stat: Stat) -> Option<f64> {
        self.measured.get(&metric)?.get(&stat).copied()
    }

    /// The request concurrency the client held (closed loop), if any.
    pub fn concurrency(&self) -> Option<u32> {
        match &self.client.load {
            Load::ClosedLoop { concurrency } => Some(*concurrency),
            Load::Rate { concurrency, .. } => *concurrency,
            Load::Stages { .. } => None,
        }
    }
}

impl Lengths {
    /// What is wrong with the lengths, if anything.
    fn problem(&self, what: &str) -> Option<Problem> {
        match self {
            Lengths::Fixed { tokens: 0 } => Some(Problem::new(what, "0 tokens")),
            Lengths::Uniform { low, high } if *low == 0 || low > high => Some(Problem::new(
                what,
                format!("uniform over {low}..={high}: needs 1 <= low <= high"),
            )),
            Lengths::Normal { mean, stddev }
                if *mean == 0 || !(stddev.is_finite() && *stddev >= 0.0) =>
            {
                Some(Problem::new(
                    what,
                    format!("normal({mean}, {stddev}): needs a mean >= 1 and a finite stddev >= 0"),
                ))
            }
            Lengths::Recorded { tokens } if tokens.is_empty() => {
                Some(Problem::new(what, "no recorded lengths"))
            }
            _ => None,
        }
    }
}

impl RunRecord {
    /// Every problem with the record's values (a reader refuses a record with any).
    pub fn problems(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        if self.id.trim().is_empty() {
            p.push(Problem::new("id", "empty"));
        }
        let workers: Vec<(&str, &Workers)> = match &self.layout {
            Layout::Aggregated { workers } => vec![("layout.workers", workers)],
            Layout::Disaggregated { prefill, decode } => {
                vec![("layout.prefill", prefill), ("layout.decode", decode)]
            }
        };
        for (name, w) in workers {
            let sizes = [
                w.count.unwrap_or(1),
                w.tp,
                w.pp,
                w.attention_dp,
                w.moe_tp,
                w.moe_ep,
            ];
            if sizes.contains(&0) {
                p.push(Problem::new(
                    name,
                    "count, tp, pp, attention_dp, moe_tp and moe_ep must be >= 1",
                ));
            }
        }
        if let Some(sp) = &self.engine.settings.speculative {
            speculative_problems(sp, &mut p);
        }
        load_problems(&self.client.load, &mut p);
        if self.client.num_prompts == Some(0) {
            p.push(Problem::new("client.num_prompts", "0"));
        }
        if !self.client.held.is_empty() {
            let n = match &self.client.input {
                Lengths::Recorded { tokens } => tokens.len(),
                _ => 0,
            };
            if n != self.client.held.len() {
                p.push(Problem::new(
                    "client.held",
                    format!(
                        "{} entries for {n} recorded input lengths (held prefixes need the run's own lengths, one each)",
                        self.client.held.len()
                    ),
                ));
            }
        }
        p.extend(self.client.input.problem("client.input"));
        p.extend(self.client.output.problem("client.output"));
        if self.measured.values().all(|s| s.is_empty()) {
            p.push(Problem::new("measured", "no measured figure"));
        }
        for (m, stats) in &self.measured {
            for (s, v) in stats {
                if !(v.is_finite() && *v > 0.0) {
                    p.push(Problem::new(
                        format!("measured.{}.{}", m.key(), s.key()),
                        format!("{v}: must be > 0"),
                    ));
                }
            }
        }
        p
    }
}

/// The problems of a record's speculative decoding, appended to `p`.
fn speculative_problems(sp: &Speculative, p: &mut Vec<Problem>) {
    if !(1..=16).contains(&sp.draft_tokens) {
        p.push(Problem::new(
            "engine.settings.speculative.draft_tokens",
            format!("{}: must be 1 to 16", sp.draft_tokens),
        ));
    }
    if let Some(a) = sp.acceptance.filter(|a| !(0.0..=1.0).contains(a)) {
        p.push(Problem::new(
            "engine.settings.speculative.acceptance",
            format!("{a}: must be in [0, 1]"),
        ));
    }
}

/// The problems of a client's load (`client.load`), appended to `p`.
fn load_problems(load: &Load, p: &mut Vec<Problem>) {
    match load {
        Load::ClosedLoop { concurrency: 0 } => p.push(Problem::new("client.load.concurrency", "0")),
        Load::Rate {
            req_s,
            burstiness,
            concurrency,
        } => {
            if !(req_s.is_finite() && *req_s > 0.0) {
                p.push(Problem::new(
                    "client.load.req_s",
                    format!("{req_s}: must be > 0"),
                ));
            }
            if !(burstiness.is_finite() && *burstiness > 0.0) {
                p.push(Problem::new(
                    "client.load.burstiness",
                    format!("{burstiness}: must be > 0"),
                ));
            }
            if *concurrency == Some(0) {
                p.push(Problem::new("client.load.concurrency", "0"));
            }
        }
        Load::Stages { stages } if stages.is_empty() => {
            p.push(Problem::new("client.load.stages", "empty"))
        }
        Load::Stages { stages } => {
            for (i, s) in stages.iter().enumerate() {
                if !(s.req_s.is_finite()
                    && s.req_s > 0.0
                    && s.duration_s.is_finite()
                    && s.duration_s > 0.0)
                {
                    p.push(Problem::new(
                        format!("client.load.stages[{i}]"),
                        "rate and duration must be > 0",
                    ));
                }
            }
        }
        _ => {}
    }
}
