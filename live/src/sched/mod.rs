//! The live scheduler: which requests each step of each group runs. Pure logic (no
//! threads, no clock): the run loop (`run.rs`) feeds it arrivals and finished steps and
//! executes the plans it forms.
//!
//! It follows the simulator's serving semantics (`sim::serving`), so that a simulation
//! of the same scenario predicts it:
//! - routing: prefill instance by prefix affinity (queued prefill tokens plus this
//!   request's weighted uncached tokens there), least load or round robin; a rank of
//!   the instance by least queued tokens (mixed pools: least requests); decode rank by
//!   least requests, round robin or least tokens;
//! - continuous batching with chunked prefill: each step, every rank works through its
//!   prefill queue in order within `chunk_tokens_per_rank` and
//!   `max_prefill_requests_per_rank`, and runs every request of its decode batch;
//!   requests join the batch at a step boundary while it has fewer than
//!   `max_batch_per_rank`; a mixed step runs the prefill pass, then the decode pass;
//! - admission (policy `reserve`, the simulator's): a request is admitted when the
//!   rank's reserved KV plus its input, output and drafts fit `kv_capacity_tokens_per_rank`,
//!   in arrival order, and its pages are allocated then, so decode never runs out;
//!   policy `vllm` (aggregated only) admits by free pages for the prompt and allocates
//!   decode pages on demand, preempting the most recently admitted request (recomputed
//!   later) when a rank runs out;
//! - prefix cache keyed by the prompt's block hashes (`blocks.rs`): looked up at
//!   arrival (the hit blocks are held from then on), full prompt blocks inserted when
//!   the prefill finishes;
//! - the first token comes from the first decode step (the prefill computes the KV of
//!   every prompt token but the last; the decode pass starts from the last one);
//! - MTP: each decode row set is the last token plus the drafts; how many drafts a step
//!   accepts follows the declared rule (`accepted`), the emitted tokens are the
//!   accepted drafts plus the target model's token, capped at the request's output.

mod admit;
mod route;
mod step;

use crate::blocks::KvPages;
use engine::serve::{Seq, SeqOut};
use sim::serving::streams::hash_words;
use sim::serving::{Mode, NewRequest, Origin, PrefillRouter, ServingScenario, TRACE_BLOCK_TOKENS};
use std::collections::VecDeque;
use std::sync::Arc;

/// How KV is admitted and what happens when it runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvPolicy {
    /// The simulator's: input + output reserved at admission; no preemption.
    Reserve,
    /// vLLM's: pages for the prompt at admission, decode pages on demand, preemption
    /// (recompute) when a rank runs out. Aggregated mode only.
    Vllm,
}

impl KvPolicy {
    /// The policy as run records and `--kv-policy` name it.
    pub fn name(self) -> &'static str {
        match self {
            KvPolicy::Reserve => "reserve",
            KvPolicy::Vllm => "vllm",
        }
    }
}

/// The pool a group belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Prefill,
    Decode,
    Mixed,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::Mixed => "mixed",
        }
    }
}

/// Where a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for admission on a mixed rank, or for a decode rank (disaggregated).
    Pending,
    /// In a prefill queue.
    Prefill,
    /// KV on its way to the decode rank.
    Transfer,
    /// Ready to join the decode batch.
    Joining,
    Running,
    Done,
}

#[derive(Debug, Clone)]
pub struct Req {
    pub id: u32,
    pub origin: Origin,
    pub arrival_s: f64,
    pub input: u32,
    pub output: u32,
    pub blocks: Arc<Vec<u64>>,
    /// Leading prompt tokens found in the prefix cache.
    pub cached: u32,
    /// Prompt tokens prefilled beyond the cached ones.
    pub computed: u32,
    pub state: State,
    pub pf: (usize, usize),
    pub dec: (usize, usize),
    /// Block table on the rank holding the request's KV now, and how it holds it.
    pub table: Vec<u32>,
    pub held: Vec<u64>,
    pub private: Vec<u32>,
    /// Disaggregated: the prefill rank's pages, released once the KV left.
    pub pf_private: Vec<u32>,
    /// Decode: tokens in KV, the last token, the drafts, steps done.
    pub pos: usize,
    pub last: u32,
    pub drafts: Vec<u32>,
    pub dsteps: u32,
    pub generated: u32,
    /// Generated tokens (for recomputation after a preemption).
    pub gen_tokens: Vec<u32>,
    pub reserved: u64,
    pub prefill_start_s: Option<f64>,
    pub prefill_done_s: Option<f64>,
    pub token_times: Vec<f64>,
    pub finish_s: Option<f64>,
    pub preemptions: u32,
    pub transfer_bytes: u64,
}

/// Per-rank queues and KV.
#[derive(Debug)]
pub struct Rank {
    pub prefill_q: VecDeque<u32>,
    pub prefill_tokens: u64,
    pub pending: VecDeque<u32>,
    pub transferring: u32,
    pub joining: VecDeque<u32>,
    pub running: Vec<u32>,
    pub reserved: u64,
    pub kv: KvPages,
}

impl Rank {
    fn requests(&self) -> usize {
        self.prefill_q.len()
            + self.pending.len()
            + self.transferring as usize
            + self.joining.len()
            + self.running.len()
    }
}

#[derive(Debug)]
pub struct Group {
    pub role: Role,
    pub ranks: Vec<Rank>,
    pub busy: bool,
}

/// One rank's part of a step.
#[derive(Debug, Clone, Default)]
pub struct RankPlan {
    pub prefill: Vec<Seq>,
    pub decode: Vec<Seq>,
    /// Request of each prefill and decode sequence.
    pub prefill_reqs: Vec<(u32, u32)>,
    pub decode_reqs: Vec<u32>,
}

/// A step of a group.
#[derive(Debug, Clone)]
pub struct StepPlan {
    pub group: usize,
    pub ranks: Vec<RankPlan>,
    pub drafts: usize,
}

/// What the caller must do after an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Tell the workload driver that a request ended.
    End {
        origin: Origin,
        completed: bool,
        context: u64,
    },
    /// Move request `req`'s KV (`pages` on prefill rank `from`) to `to_pages` on decode
    /// rank `to`.
    Transfer {
        req: u32,
        from: (usize, usize),
        pages: Vec<u32>,
        to: (usize, usize),
        to_pages: Vec<u32>,
    },
}

/// What the scheduler is built from.
#[derive(Debug, Clone)]
pub struct SchedConfig {
    pub scenario: ServingScenario,
    pub policy: KvPolicy,
    pub page: usize,
    pub vocab: usize,
    pub drafts: usize,
    pub acceptance: Vec<f64>,
    pub seed: u64,
    /// KV capacity per rank (tokens) of the prefill and decode (or mixed) pools.
    pub kv_cap: (u64, u64),
    /// Prefix-cache space per rank (tokens) on prefill / mixed ranks.
    pub cache_tokens: u64,
}

pub struct Scheduler {
    pub cfg: SchedConfig,
    pub groups: Vec<Group>,
    pub reqs: Vec<Req>,
    /// Groups of the entry pool (prefill or mixed) and of the decode pool.
    entry: std::ops::Range<usize>,
    decode: std::ops::Range<usize>,
    waiting_entry: u64,
    waiting_decode: u64,
    live: u64,
    rr: (u64, u64),
    pub dropped: u64,
    pub preemptions: u64,
}

/// The prompt token at position `pos`: a hash of its block's identity and offset, so
/// equal block hashes mean equal tokens (the prefix cache's KV is valid to reuse).
pub fn prompt_token(blocks: &[u64], pos: usize, vocab: usize) -> u32 {
    let b = blocks
        .get(pos / TRACE_BLOCK_TOKENS as usize)
        .copied()
        .unwrap_or(0);
    (hash_words(&[b, (pos % TRACE_BLOCK_TOKENS as usize) as u64]) % vocab as u64) as u32
}

/// Drafts accepted by decode step `step` of request `req` under the declared rule (the
/// simulator's [`sim::serving::mtp::keyed_accepted`], which `twin validate live`
/// simulates the run with): random weights make real acceptance meaningless; this
/// reproduces the scenario's acceptance rates.
pub use sim::serving::mtp::keyed_accepted as accepted;

impl Scheduler {
    pub fn new(cfg: SchedConfig) -> Scheduler {
        let sc = &cfg.scenario;
        let mut groups = Vec::new();
        let ppb = TRACE_BLOCK_TOKENS as usize / cfg.page;
        let mut add = |role: Role, pool: &sim::serving::PoolConfig, cap: u64, cache: u64| {
            let start = groups.len();
            for _ in 0..pool.instances {
                let ranks = (0..pool.dep)
                    .map(|_| {
                        let pages = (cap as usize).div_ceil(cfg.page)
                            + (cache as usize).div_ceil(cfg.page * ppb) * ppb;
                        Rank {
                            prefill_q: VecDeque::new(),
                            prefill_tokens: 0,
                            pending: VecDeque::new(),
                            transferring: 0,
                            joining: VecDeque::new(),
                            running: Vec::new(),
                            reserved: 0,
                            kv: KvPages::new(pages, cfg.page, TRACE_BLOCK_TOKENS as usize),
                        }
                    })
                    .collect();
                groups.push(Group {
                    role,
                    ranks,
                    busy: false,
                });
            }
            start..groups.len()
        };
        let (entry, decode) = match sc.serving.mode {
            Mode::Aggregated => {
                let e = add(
                    Role::Mixed,
                    &sc.serving.decode,
                    cfg.kv_cap.1,
                    cfg.cache_tokens,
                );
                (e.clone(), e.end..e.end)
            }
            _ => {
                let e = add(
                    Role::Prefill,
                    &sc.serving.prefill,
                    cfg.kv_cap.0,
                    cfg.cache_tokens,
                );
                let d = add(Role::Decode, &sc.serving.decode, cfg.kv_cap.1, 0);
                (e, d)
            }
        };
        Scheduler {
            cfg,
            groups,
            reqs: Vec::new(),
            entry,
            decode,
            waiting_entry: 0,
            waiting_decode: 0,
            live: 0,
            rr: (0, 0),
            dropped: 0,
            preemptions: 0,
        }
    }

    fn sc(&self) -> &ServingScenario {
        &self.cfg.scenario
    }

    /// Requests alive (queued, prefilling, decoding).
    pub fn live(&self) -> u64 {
        self.live
    }

    fn entry_pool(&self) -> &sim::serving::PoolConfig {
        match self.groups[self.entry.start].role {
            Role::Mixed => &self.sc().serving.decode,
            _ => &self.sc().serving.prefill,
        }
    }

    fn pool_of(&self, g: usize) -> &sim::serving::PoolConfig {
        match self.groups[g].role {
            Role::Prefill => &self.sc().serving.prefill,
            _ => &self.sc().serving.decode,
        }
    }

    fn kv_cap(&self, g: usize) -> u64 {
        match self.groups[g].role {
            Role::Prefill => self.cfg.kv_cap.0,
            _ => self.cfg.kv_cap.1,
        }
    }

    /// KV a decoding request needs: input, output and the positions drafts write.
    fn kv_need(&self, r: &Req) -> u64 {
        r.input as u64 + r.output as u64 + self.cfg.drafts as u64
    }

    /// A request arrives at `now`. Returns the driver notification when it is dropped.
    pub fn arrive(&mut self, now: f64, nr: NewRequest) -> Vec<Action> {
        let id = self.reqs.len() as u32;
        let limits = &self.sc().limits;
        let entry_q = self.entry_pool().max_queued_requests as u64;
        let mixed = self.groups[self.entry.start].role == Role::Mixed;
        let mut req = Req {
            id,
            origin: nr.origin,
            arrival_s: now,
            input: nr.input_tokens.max(1),
            output: nr.output_tokens.max(1),
            blocks: Arc::new((0..nr.prompt.len()).map(|i| nr.prompt.get(i)).collect()),
            cached: 0,
            computed: 0,
            state: State::Prefill,
            pf: (0, 0),
            dec: (0, 0),
            table: Vec::new(),
            held: Vec::new(),
            private: Vec::new(),
            pf_private: Vec::new(),
            pos: 0,
            last: 0,
            drafts: Vec::new(),
            dsteps: 0,
            generated: 0,
            gen_tokens: Vec::new(),
            reserved: 0,
            prefill_start_s: None,
            prefill_done_s: None,
            token_times: Vec::new(),
            finish_s: None,
            preemptions: 0,
            transfer_bytes: 0,
        };
        let too_big = mixed && self.kv_need(&req) > self.cfg.kv_cap.1;
        if self.live >= limits.max_live_requests || self.waiting_entry >= entry_q || too_big {
            req.state = State::Done;
            req.finish_s = Some(now);
            let origin = req.origin;
            self.reqs.push(req);
            self.dropped += 1;
            return vec![Action::End {
                origin,
                completed: false,
                context: 0,
            }];
        }
        self.live += 1;
        self.waiting_entry += 1;
        let g = self.route_prefill(&req);
        let r = self.pick_rank(g);
        // Prefix cache: the leading cached blocks, held from now on. A request never
        // writes into a cached block: at most the blocks before its last token.
        let rank = &mut self.groups[g].ranks[r];
        let usable = ((req.input as u64 - 1) / TRACE_BLOCK_TOKENS) as usize;
        let hits = rank.kv.peek(&req.blocks[..usable.min(req.blocks.len())]);
        req.held = req.blocks[..hits].to_vec();
        req.table = rank.kv.acquire(&req.held);
        req.cached = (hits as u64 * TRACE_BLOCK_TOKENS) as u32;
        req.pf = (g, r);
        if mixed {
            req.state = State::Pending;
            rank.pending.push_back(id);
        } else {
            rank.prefill_q.push_back(id);
            rank.prefill_tokens += (req.input - 1 - req.cached) as u64;
        }
        self.reqs.push(req);
        if mixed {
            self.admit_mixed(g, r);
        }
        Vec::new()
    }

    /// Whether any group has queued work it could run.
    pub fn idle_groups(&self) -> Vec<usize> {
        (0..self.groups.len())
            .filter(|&g| !self.groups[g].busy)
            .collect()
    }

    /// KV pages in use and capacity per rank of group `g`.
    pub fn kv_use(&self, g: usize) -> Vec<(usize, usize)> {
        self.groups[g]
            .ranks
            .iter()
            .map(|r| (r.kv.used(), r.kv.total()))
            .collect()
    }
}
