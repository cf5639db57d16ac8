//! Scenario configuration of the serving simulator, as read from a full scenario file
//! (`scenarios/*.toml`). Deserialization only fills defaults; `validate` returns every
//! problem at once with its field path.

use crate::cost::Layout;
use serde::{Deserialize, Serialize};
use spec::hardware::PriceBasis;
use std::collections::BTreeMap;

use super::money::PriceConfig;
use super::scheduler::SchedulerChoice;
use crate::serde_defaults::{one, yes};
use spec::problem::Problem;

use super::limits::Limits;

mod problems;
pub(crate) use problems::{check, check_num, finite_nonneg};
pub use problems::{MAX_KV_BLOCK_TOKENS, MAX_RECV_INTERVAL};

/// One serving experiment: hardware, model and workload by name (files the caller
/// loads), the deployment, the router, the SLOs and the price sheet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServingScenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Name of a `scenarios/hardware/*.toml` file (or a path).
    pub hardware: String,
    /// Name of a `scenarios/models/*.toml` file (or a path).
    pub model: String,
    /// Name of a `scenarios/workloads/*.toml` file (or a path).
    pub workload: String,
    /// The serving engine whose measured kernel tables price the GPU's kernels
    /// (`trtllm`, `vllm`, `ENGINE@VERSION`, or a profile path); absent: twin's own
    /// kernel model. `--engine` wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The routed-expert kernel the deployment runs instead of the engine's usual one
    /// for the experts' format (`"marlin"`: vLLM's `VLLM_MXFP4_USE_MARLIN=1`; `"triton"`:
    /// OpenAI's `triton_kernels`); where the engine's tables time it, its arithmetic rate
    /// bounds the experts' price from below. Absent: the engine's usual kernel (for
    /// MXFP4 experts on Hopper, `triton`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_kernel: Option<spec::kernel::MoeKernel>,
    /// The deployment launches its kernels with programmatic dependent launch
    /// (TensorRT-LLM's `TRTLLM_ENABLE_PDL=1`): each kernel starts while the one before
    /// finishes, so a CUDA graph's replay leaves no gap between them (the launch
    /// term's `graph_node_s` is 0). Absent or false: the hardware's gap per graph node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pdl: Option<bool>,
    /// Overrides of the workload's fields, `PATH = VALUE` as with `--set workload.PATH`
    /// (for example `agentx.sessions = 256`); a command line `--set` wins.
    #[serde(default)]
    pub workload_set: Vec<String>,
    #[serde(default)]
    pub seed: u64,
    /// Simulated seconds in all, warm-up included.
    pub duration_s: f64,
    /// Leading seconds excluded from every metric.
    #[serde(default)]
    pub warmup_s: f64,
    pub serving: ServingConfig,
    #[serde(default)]
    pub router: RouterConfig,
    #[serde(default)]
    pub slo: SloConfig,
    #[serde(default)]
    pub price: PriceConfig,
    #[serde(default)]
    pub limits: Limits,
    /// How finely the run is simulated: exact unless set (left out of the scenario's
    /// serialized form then, so plan grids keep their hashes).
    #[serde(default, skip_serializing_if = "Fidelity::is_exact")]
    pub fidelity: Fidelity,
    /// How a live run (`twin live`) of the scenario runs; the simulator ignores it (left
    /// out of the serialized form at its defaults, so plan grids keep their hashes).
    #[serde(default, skip_serializing_if = "LiveSection::is_default")]
    pub live: LiveSection,
    #[serde(default)]
    pub provenance: BTreeMap<String, String>,
}

/// The `[live]` section: settings of a live run of the scenario only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveSection {
    /// How the live run's threads wait for work: `spin` (busy-poll, as a serving
    /// engine's loop does: no wake-up latency, a core kept busy) or `sleep` (block).
    #[serde(default)]
    pub idle: IdleMode,
}

impl LiveSection {
    pub fn is_default(&self) -> bool {
        *self == LiveSection::default()
    }
}

/// How a live run's rank threads and serving loop wait when idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleMode {
    /// Busy-poll (the default).
    #[default]
    Spin,
    /// Block until work comes (the OS wakes the thread).
    Sleep,
}

impl IdleMode {
    pub fn name(self) -> &'static str {
        match self {
            IdleMode::Spin => "spin",
            IdleMode::Sleep => "sleep",
        }
    }
}

/// A coarse setting that trades a measured error for speed (docs/fidelity.md).
/// The default simulates every request on every instance and rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fidelity {
    /// At most this many identical copies of the rack, of which one is simulated
    /// (mean field): each pool's instances, and the decode pool's ranks where its
    /// instances do not divide, split into the copies; the workload's sessions, users,
    /// rate or trace records into as many shares. Every simulated request stands for
    /// one in each copy, and a copy of a decode rank steps with the simulated rank's
    /// batch. The run takes the largest divisor of `cohort` the pools split into
    /// (`ServingScenario::copies`).
    #[serde(default = "one")]
    pub cohort: u32,
}

impl Default for Fidelity {
    fn default() -> Self {
        Fidelity { cohort: 1 }
    }
}

impl Fidelity {
    pub fn is_exact(&self) -> bool {
        *self == Fidelity::default()
    }
}

/// How a pool splits into `k` copies: (instances, ranks) each simulated instance and
/// rank stand for. `gcd(instances, k)` instances; the rest of `k` from the DEP ranks
/// when `ranks` allows it (a decode pool: its batches are large, so a copy with the
/// same batch changes little), else none. None if the pool does not split so.
pub fn pool_copies(pool: &PoolConfig, k: u32, ranks: bool) -> Option<(u32, u32)> {
    let g = gcd(pool.instances.max(1), k.max(1));
    let r = k.max(1) / g;
    (pool.dep.max(1).is_multiple_of(r) && (ranks || r == 1)).then_some((g, r))
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Prefill and decode in separate pools; KV moves from prefill to decode.
    #[default]
    Disaggregated,
    /// One pool (`serving.decode`) runs prefill chunks and decode in the same steps.
    Aggregated,
    /// Only the prefill pool; the decode side is faked (as the reference report's
    /// prefill benchmarks do): a request completes when its prefill does, with its
    /// first token, and its session continues as if it had produced its output.
    PrefillOnly,
}

impl Mode {
    /// The mode as a scenario writes it (`serving.mode`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Disaggregated => "disaggregated",
            Mode::Aggregated => "aggregated",
            Mode::PrefillOnly => "prefill-only",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServingConfig {
    #[serde(default)]
    pub mode: Mode,
    /// The prefill pool (unused in aggregated mode).
    #[serde(default = "PoolConfig::default_prefill")]
    pub prefill: PoolConfig,
    /// The decode pool; in aggregated mode the single mixed pool.
    #[serde(default = "PoolConfig::default_decode")]
    pub decode: PoolConfig,
    #[serde(default)]
    pub kv_transfer: KvTransferConfig,
    #[serde(default)]
    pub mtp: MtpConfig,
    /// Whose scheduler forms the mixed pool's steps (`super::scheduler`): `auto` (the
    /// engine's, else twin's own), `twin`, `vllm`, `sglang` or `trtllm`.
    #[serde(default, skip_serializing_if = "SchedulerChoice::is_auto")]
    pub scheduler: SchedulerChoice,
    /// Whether the next step is formed while the current one runs (async scheduling,
    /// overlap scheduler); absent: the scheduler's default (on for vllm, sglang,
    /// trtllm; off for twin's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub async_scheduling: Option<bool>,
    /// The engine's front end per request, seconds: from the client's send to the
    /// engine's queue (the API server's parsing, tokenisation and hand-over) plus from
    /// the first token to the client (output processing, streaming), taken as one delay
    /// before the queue: both add to TTFT, and in a closed loop both delay the next send.
    /// TTFT still runs from the send. Absent: the engine's
    /// ([`super::scheduler::Scheduler::frontend_s`]; 0 for twin's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_s: Option<f64>,
    /// API-server seconds per streamed chunk (one a running request a step that sends
    /// it tokens: detokenising, formatting and sending it), taken from the same loop
    /// that takes requests in, so a request's front end stretches with the share of
    /// the loop the streams take (`super::frontend`). Absent: the engine's
    /// ([`super::scheduler::Scheduler::frontend_chunk_s`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_chunk_s: Option<f64>,
    /// API-server seconds per prompt token of the one thread that tokenises requests in
    /// turn (vLLM's tokenizer executor, one worker; SGLang's tokenizer manager), so
    /// requests sent together pass the front end one after another, each its
    /// tokenisation after the one before (`super::frontend`). Absent: the engine's
    /// ([`super::scheduler::Scheduler::frontend_token_s`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_token_s: Option<f64>,
    /// API server processes per instance of the entry pool, sharing its streams
    /// (vLLM's `--api-server-count`). Absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_servers: Option<u32>,
    /// Whether a step with prefill work runs the decode batch beside it, the decode
    /// tokens taken from the step's budget first (SGLang's `--enable-mixed-chunk`; off
    /// by default, when SGLang's prefill-first policy pauses decode during a prefill
    /// step). The other engines' schedulers mix them anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed_chunk: Option<bool>,
    /// How often the scheduler takes in new requests, in decode steps (SGLang's
    /// `--scheduler-recv-interval`, `SchedulerRecvSkipper`): a decode-only step counts
    /// one, a step with prefill work the whole interval (SGLang weighs any other forward
    /// mode 1000), and an idle engine takes them at once; a request that reached the
    /// engine waits in its queue until the next take. Absent or 1: every step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_recv_interval: Option<u32>,
    /// Most decode steps the scheduler holds ready prompts back, waiting for a fuller
    /// context batch, while requests are decoding (TensorRT-LLM's
    /// `batch_wait_timeout_iters`): a step that would take prompts runs its decodes
    /// alone until it has waited this many steps or the prompts and decodes reach
    /// `batch_wait_tokens_ratio` of the step's token budget. Absent or 0: no wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_wait_iters: Option<u32>,
    /// The share of the step's token budget whose prompt and decode tokens end a batch
    /// wait at once, in [0, 1] (TensorRT-LLM's `batch_wait_max_tokens_ratio`; 0: only
    /// `batch_wait_iters` ends it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_wait_tokens_ratio: Option<f64>,
    /// Balance prompts over a DEP group's attention-DP ranks (TensorRT-LLM's
    /// `attention_dp_config.enable_balance`, `PyExecutor._balance_adp_requests`): while
    /// every rank decodes, a step takes prompts only when every rank has one to take
    /// and room to decode it, else holds them, up to `adp_timeout_iters` steps; when
    /// all have, it still holds them `adp_batching_iters` steps for fuller batches. A
    /// group of one rank, or one without it, takes them at once. Absent: off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adp_balance: Option<bool>,
    /// Most steps a balanced group holds prompts waiting for every rank to have one
    /// (TensorRT-LLM's `timeout_iters`; absent: its default, 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adp_timeout_iters: Option<u32>,
    /// Steps a balanced group holds prompts once every rank has one, for fuller
    /// batches (TensorRT-LLM's `batching_wait_iters`; absent: its default, 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adp_batching_iters: Option<u32>,
    /// GPUs the deployment may occupy, e.g. 72 for one GB300 NVL72 rack: the pools the
    /// mode runs (instances x DEP each) must fit in them. Unset: no budget is checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u64>,
    /// The longest request, prompt plus output tokens, the engine accepts (vLLM's
    /// `--max-model-len`, SGLang's `--context-length`, TensorRT-LLM's `max_seq_len`): a
    /// longer one is refused on arrival, as the engine answers it with an error, and
    /// counted with its reason. Absent: the model's `max_position_embeddings`, the
    /// engines' default; neither known: no limit. More than the model's positions is an
    /// error (vLLM refuses it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
    /// The engine's memory knob: the share of GPU memory it sizes its KV pool from
    /// (vLLM's `--gpu-memory-utilization`, SGLang's `--mem-fraction-static`,
    /// TensorRT-LLM's `free_gpu_memory_fraction`; each engine's own arithmetic,
    /// `sim::cost::memory`). Absent: the engine's default; twin's own serving keeps
    /// 92% of `hbm.usable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_utilization: Option<f64>,
    /// Tokens per prefix-cache block, the engine's own: a prompt's cached prefix is a
    /// whole number of them (vLLM's `--block-size`, SGLang's `--page-size`,
    /// TensorRT-LLM's `tokens_per_block`). Absent: the engine's default
    /// ([`super::scheduler::Scheduler::kv_block_tokens`]: vLLM 16, SGLang 1,
    /// TensorRT-LLM 32; twin's own 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_block_tokens: Option<u64>,
}

/// A pool of identical DEP groups or tensor-parallel replicas ("instances").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolConfig {
    pub instances: u32,
    /// Ranks per instance: data-parallel attention, expert-parallel MoE (with `tp`
    /// 1, one GPU each); absent = 1 (a `tp`-only deployment).
    #[serde(default = "one")]
    pub dep: u32,
    /// GPUs per rank splitting its layers (tensor parallelism; `dep` must then be 1).
    #[serde(default = "one")]
    pub tp: u32,
    /// With `tp` > 1: routed experts spread whole over the TP GPUs instead of sliced.
    #[serde(default)]
    pub expert_parallel: bool,
    #[serde(default)]
    pub redundant_experts: u32,
    #[serde(default = "yes")]
    pub overlap_microbatches: bool,
    /// How overlapped decode micro-batches are scheduled: `"two-batch"` (default) or
    /// `"five-stage"` (DeepSeek's decode pipeline, as SGLang runs it).
    #[serde(default)]
    pub decode_pipeline: crate::cost::Pipeline,
    /// Decode: most requests one rank runs in a step.
    #[serde(default = "d_max_batch")]
    pub max_batch_per_rank: u32,
    /// Prefill: token budget per rank per step (chunked prefill).
    #[serde(default = "d_chunk")]
    pub chunk_tokens_per_rank: u32,
    /// Prefill: most requests one rank works on in a step.
    #[serde(default = "d_prefill_reqs")]
    pub max_prefill_requests_per_rank: u32,
    /// Overrides the cost model's KV capacity per rank, tokens.
    #[serde(default)]
    pub kv_capacity_tokens_per_rank: Option<u64>,
    /// Prefix-cache capacity per instance in HBM, tokens; default: the instance's KV
    /// capacity (dep x per-rank capacity).
    #[serde(default)]
    pub prefix_cache_tokens: Option<u64>,
    /// Second prefix-cache tier in host memory per instance, tokens (0 = none).
    #[serde(default)]
    pub host_cache_tokens: u64,
    /// Requests waiting in this pool beyond which new ones are dropped.
    #[serde(default = "d_max_queued")]
    pub max_queued_requests: u32,
}

fn d_max_batch() -> u32 {
    256
}
fn d_chunk() -> u32 {
    8192
}
fn d_prefill_reqs() -> u32 {
    64
}
fn d_max_queued() -> u32 {
    100_000
}

impl PoolConfig {
    pub fn default_prefill() -> Self {
        PoolConfig {
            instances: 1,
            dep: 2,
            ..Self::default_decode()
        }
    }
    pub fn default_decode() -> Self {
        PoolConfig {
            instances: 1,
            dep: 8,
            tp: 1,
            expert_parallel: false,
            redundant_experts: 0,
            overlap_microbatches: true,
            decode_pipeline: Default::default(),
            max_batch_per_rank: d_max_batch(),
            chunk_tokens_per_rank: d_chunk(),
            max_prefill_requests_per_rank: d_prefill_reqs(),
            kv_capacity_tokens_per_rank: None,
            prefix_cache_tokens: None,
            host_cache_tokens: 0,
            max_queued_requests: d_max_queued(),
        }
    }
    /// The cost-model layout of one instance.
    pub fn layout(&self) -> Layout {
        Layout {
            dep: self.dep,
            tp: self.tp,
            expert_parallel: self.expert_parallel,
            redundant_experts: self.redundant_experts,
            overlap_microbatches: self.overlap_microbatches,
            decode_pipeline: self.decode_pipeline,
            ..Layout::new(self.dep)
        }
    }
    pub fn gpus(&self) -> u64 {
        // u32 x u32 x (tp <= 64): no overflow.
        self.instances as u64 * self.dep as u64 * self.tp.clamp(1, 64) as u64
    }

    /// Every problem with the pool at `name` (`serving.decode`), appended to `p`.
    pub fn problems(&self, name: &str, p: &mut Vec<Problem>) {
        check(
            p,
            self.instances >= 1,
            &format!("{name}.instances"),
            "must be >= 1",
        );
        check(
            p,
            self.dep >= 1 && self.dep <= crate::validate::MAX_DEP,
            &format!("{name}.dep"),
            &format!("must be in 1..={}", crate::validate::MAX_DEP),
        );
        check(
            p,
            self.tp >= 1 && self.tp <= crate::validate::MAX_TP,
            &format!("{name}.tp"),
            &format!("must be in 1..={}", crate::validate::MAX_TP),
        );
        check(
            p,
            self.max_batch_per_rank >= 1,
            &format!("{name}.max_batch_per_rank"),
            "must be >= 1",
        );
        check(
            p,
            self.chunk_tokens_per_rank >= 1,
            &format!("{name}.chunk_tokens_per_rank"),
            "must be >= 1",
        );
        check(
            p,
            self.max_prefill_requests_per_rank >= 1,
            &format!("{name}.max_prefill_requests_per_rank"),
            "must be >= 1",
        );
        check(
            p,
            self.max_queued_requests >= 1,
            &format!("{name}.max_queued_requests"),
            "must be >= 1",
        );
        if let Some(c) = self.kv_capacity_tokens_per_rank {
            check(
                p,
                c >= 1,
                &format!("{name}.kv_capacity_tokens_per_rank"),
                "must be >= 1",
            );
        }
    }
}

/// KV transfer from prefill to decode ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvTransferConfig {
    /// GPUs per NVLink domain for placement; default: the hardware's
    /// `nvlink_domain_gpus`. GPUs are numbered prefill pool first, then decode.
    #[serde(default)]
    pub domain_gpus: Option<u32>,
    /// Fraction of the link's datasheet bandwidth a transfer achieves.
    #[serde(default = "d_link_eff")]
    pub link_efficiency: f64,
    /// Fixed cost per transfer on top of the link latency (handshake, block table).
    #[serde(default)]
    pub setup_s: f64,
}

fn d_link_eff() -> f64 {
    0.8
}

impl Default for KvTransferConfig {
    fn default() -> Self {
        KvTransferConfig {
            domain_gpus: None,
            link_efficiency: d_link_eff(),
            setup_s: 0.0,
        }
    }
}

/// MTP speculative decoding; unset fields come from the model's `mtp` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MtpConfig {
    #[serde(default)]
    pub draft_tokens: Option<u32>,
    /// Acceptance of draft i given all before it were accepted.
    #[serde(default)]
    pub acceptance: Option<Vec<f64>>,
    /// How the simulation draws them: `sampled` (default) or `per-request` (`twin
    /// live`'s keyed rule: [`super::mtp::MtpDraws`]).
    #[serde(default)]
    pub draws: super::mtp::MtpDraws,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DecodeRouter {
    /// Fewest requests on the rank (running, joining, in transfer and waiting).
    #[default]
    LeastRequests,
    RoundRobin,
    /// Fewest KV tokens reserved on the rank.
    LeastTokens,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PrefillRouter {
    /// Cache-aware least work: the instance minimising queued prefill tokens plus this
    /// request's uncached tokens there (its longest cached prefix counts).
    #[default]
    PrefixAffinity,
    /// Fewest queued prefill tokens.
    LeastLoad,
    RoundRobin,
}

/// How a prefill instance places a request on one of its ranks (data-parallel
/// attention replicas); the request stays there for all its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PrefillRank {
    /// Fewest queued uncached tokens.
    #[default]
    LeastTokens,
    /// Fewest queued requests (vLLM's DP balancing counts requests).
    LeastRequests,
    /// Least estimated queued time: each request priced alone on a rank by the cost
    /// model (cached context included) when it is placed.
    LeastCost,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouterConfig {
    #[serde(default)]
    pub decode: DecodeRouter,
    #[serde(default)]
    pub prefill: PrefillRouter,
    #[serde(default)]
    pub prefill_rank: PrefillRank,
    /// Prefix affinity: weight of the request's own uncached tokens against the tokens
    /// queued ahead of it. Above 1, recomputing a context elsewhere must save more than
    /// it costs the pool, which keeps sessions on their cached instance and stops
    /// migration cascades (a migrant's recompute load pushing that instance's own
    /// sessions away in turn).
    #[serde(default = "d_recompute_weight")]
    pub prefill_recompute_weight: f64,
}

fn d_recompute_weight() -> f64 {
    2.0
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            decode: DecodeRouter::default(),
            prefill: PrefillRouter::default(),
            prefill_rank: PrefillRank::default(),
            prefill_recompute_weight: d_recompute_weight(),
        }
    }
}

/// Service-level objectives for goodput: a request counts when it meets both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloConfig {
    #[serde(default = "d_ttft")]
    pub ttft_ms: f64,
    #[serde(default = "d_tpot")]
    pub tpot_ms: f64,
}

fn d_ttft() -> f64 {
    10_000.0
}
fn d_tpot() -> f64 {
    20.0
}

impl Default for SloConfig {
    fn default() -> Self {
        SloConfig {
            ttft_ms: d_ttft(),
            tpot_ms: d_tpot(),
        }
    }
}

impl ServingScenario {
    /// The pools the mode runs, with their scenario paths.
    pub fn pools(&self) -> Vec<(&'static str, &PoolConfig)> {
        match self.serving.mode {
            Mode::Disaggregated => vec![
                ("serving.prefill", &self.serving.prefill),
                ("serving.decode", &self.serving.decode),
            ],
            Mode::Aggregated => vec![("serving.decode", &self.serving.decode)],
            Mode::PrefillOnly => vec![("serving.prefill", &self.serving.prefill)],
        }
    }

    /// The copies of the rack a run simulates one of: the largest divisor of
    /// `fidelity.cohort` every pool splits into (`pool_copies`; only the decode pool of
    /// a disaggregated rack may split its ranks), 1 for an exact run.
    pub fn copies(&self) -> u32 {
        let k = self.fidelity.cohort.max(1);
        (1..=k)
            .rev()
            .filter(|&d| k.is_multiple_of(d))
            .find(|&d| {
                self.pools()
                    .iter()
                    .all(|&(_, pool)| self.pool_copies(pool, d).is_some())
            })
            .unwrap_or(1)
    }

    /// `pool_copies` of one of the scenario's pools, with its rank rule.
    pub fn pool_copies(&self, pool: &PoolConfig, k: u32) -> Option<(u32, u32)> {
        let ranks =
            self.serving.mode == Mode::Disaggregated && std::ptr::eq(pool, &self.serving.decode);
        pool_copies(pool, k, ranks)
    }

    /// GPUs the deployment occupies (saturating: a sum of user-given sizes).
    pub fn gpus(&self) -> u64 {
        self.pools()
            .iter()
            .fold(0u64, |a, (_, p)| a.saturating_add(p.gpus()))
    }

    pub fn price_basis(&self) -> PriceBasis {
        self.price.basis
    }
}

#[cfg(test)]
mod user_word_tests {
    use super::*;

    #[test]
    fn modes_and_price_bases_print_as_scenarios_write_them() {
        for m in [Mode::Disaggregated, Mode::Aggregated, Mode::PrefillOnly] {
            assert_eq!(serde_json::to_value(m).unwrap(), m.name());
        }
        use spec::hardware::PriceBasis;
        for b in [
            PriceBasis::Hyperscaler,
            PriceBasis::Neocloud,
            PriceBasis::Rental3yr,
        ] {
            assert_eq!(serde_json::to_value(b).unwrap(), b.name());
        }
    }
}
