//! The cost-model contract: what one engine step of a DEP group costs, and where the
//! time goes. The simulator asks only this trait; the analytic datasheet model and
//! models fitted from measurements (calibration profiles) both implement it.

pub mod analytic;
pub mod band;
pub mod fitted;
pub mod host;
pub mod insitu;
pub mod kernels;
pub mod memory;
pub mod params;
pub mod spread;
pub mod tables;

pub use analytic::AnalyticCostModel;
pub use fitted::FittedCostModel;
pub use kernels::overlap::LayerTimeline;
pub use params::{CostParams, OpRate};
pub use spread::{Spread, SpreadError};

use crate::serde_defaults::{one, yes};
use serde::Serialize;

/// Prefill computes KV for new prompt tokens; decode emits output tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Prefill,
    Decode,
}

/// `count` identical requests on one rank: each brings `new_tokens` tokens to this step
/// (prefill: uncached prompt tokens of this chunk; decode: 1 + draft tokens is implied,
/// leave 1) on top of `context_tokens` already in KV (cached prefix, earlier chunks, or
/// decode context).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReqSlice {
    pub new_tokens: u32,
    pub context_tokens: u64,
    pub count: u32,
}

impl ReqSlice {
    pub fn one(new_tokens: u32, context_tokens: u64) -> Self {
        ReqSlice {
            new_tokens,
            context_tokens,
            count: 1,
        }
    }
}

/// One step of a DEP group: the requests on each rank.
///
/// A mixed step (prefill chunks and decode requests in one engine step, as chunked
/// prefill runs them) is a `Prefill` step whose `decode_ranks` hold each rank's decode
/// requests: engines run it as one forward pass over both, so a cost model prices
/// the weight GEMMs once at all of its tokens and each request's attention by its
/// kind.
#[derive(Debug, Clone, Copy)]
pub struct StepShape<'a> {
    pub phase: Phase,
    /// One entry per rank of the group (its length must equal the layout's DEP size).
    pub ranks: &'a [Vec<ReqSlice>],
    /// A mixed step's decode requests, one entry per rank as `ranks` (empty: none;
    /// only with `phase` Prefill).
    pub decode_ranks: &'a [Vec<ReqSlice>],
    /// MTP draft tokens per decode request (of a decode step, or of a mixed step's
    /// decode requests; 0 = no speculation).
    pub draft_tokens: u32,
}

impl<'a> StepShape<'a> {
    /// Whether the step runs prefill chunks and decode requests together.
    pub fn is_mixed(&self) -> bool {
        self.phase == Phase::Prefill && self.decode_ranks.iter().any(|r| !r.is_empty())
    }

    /// The step's prefill chunks alone.
    pub fn prefill_part(&self) -> StepShape<'a> {
        StepShape {
            phase: Phase::Prefill,
            ranks: self.ranks,
            decode_ranks: &[],
            draft_tokens: 0,
        }
    }

    /// A mixed step's decode requests alone.
    pub fn decode_part(&self) -> StepShape<'a> {
        StepShape {
            phase: Phase::Decode,
            ranks: self.decode_ranks,
            decode_ranks: &[],
            draft_tokens: self.draft_tokens,
        }
    }
}

/// A mixed step priced as two passes, its prefill chunks' and then its decode
/// requests' (each part priced by `model`), their times and operations added: what
/// an engine that runs them one after another costs (twin's live engine does), and
/// what the test costs keep. A step that is not mixed is priced as it is.
pub fn two_passes<M: CostModel + ?Sized>(model: &M, shape: &StepShape<'_>) -> StepCost {
    if !shape.is_mixed() {
        return model.step(shape);
    }
    let mut cost = model.step(&shape.prefill_part());
    let d = model.step(&shape.decode_part());
    cost.step_s += d.step_s;
    cost.balanced_step_s += d.balanced_step_s;
    cost.unskewed_step_s += d.unskewed_step_s;
    for (a, b) in cost.op_s.iter_mut().zip(d.op_s.iter()) {
        *a += *b;
    }
    cost.kernels += d.kernels;
    cost.moe_weight_bytes_per_rank += d.moe_weight_bytes_per_rank;
    cost.tokens_processed += d.tokens_processed;
    cost
}

/// Operations the breakdown reports, in display order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Routed experts: weight reads and grouped GEMMs on the most loaded rank.
    Moe,
    SharedExpert,
    /// Core attention over the KV cache (dense, sparse top-k, compressed, window).
    Attention,
    /// Sparse-attention indexer: scores over the whole (compressed) context.
    Indexer,
    /// Recompute of cached context for sliding-window branches.
    WindowReplay,
    /// Engram hash-table gathers.
    Engram,
    /// Hyper-connection (mHC) stream mixing.
    Mhc,
    /// Dispatch/combine communication not hidden behind compute.
    Communication,
    /// Attention projections, router, dense FFN layers, embedding and LM head.
    Dense,
    /// Per-token element-wise kernels: norms, RoPE, activations, quantisation, gating
    /// and top-k, KV writes.
    Elementwise,
    /// MTP draft passes (decode with speculation).
    MtpDraft,
    /// Kernel launches: CUDA-graph gaps, or eager launch time the GPU waits for.
    Launch,
    /// Scheduling, sampling and synchronisation: fixed costs per step.
    Overhead,
}

/// Number of operations in a breakdown.
pub const OPS: usize = 13;

impl Op {
    pub const ALL: [Op; OPS] = [
        Op::Moe,
        Op::SharedExpert,
        Op::Attention,
        Op::Indexer,
        Op::WindowReplay,
        Op::Engram,
        Op::Mhc,
        Op::Communication,
        Op::Dense,
        Op::Elementwise,
        Op::MtpDraft,
        Op::Launch,
        Op::Overhead,
    ];

    /// Whether the op is compute-stream work (not communication, MTP draft passes,
    /// launches or fixed per-step costs): a step takes at least the sum of these.
    pub fn is_compute(self) -> bool {
        !matches!(
            self,
            Op::Communication | Op::MtpDraft | Op::Launch | Op::Overhead
        )
    }

    pub fn key(self) -> &'static str {
        match self {
            Op::Moe => "moe",
            Op::SharedExpert => "shared_expert",
            Op::Attention => "attention",
            Op::Indexer => "indexer",
            Op::WindowReplay => "window_replay",
            Op::Engram => "engram",
            Op::Mhc => "mhc",
            Op::Communication => "communication",
            Op::Dense => "dense",
            Op::Elementwise => "elementwise",
            Op::MtpDraft => "mtp_draft",
            Op::Launch => "launch",
            Op::Overhead => "overhead",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// What limits an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    #[default]
    None,
    Memory,
    Compute,
    Link,
    Latency,
}

impl Bound {
    pub fn name(self) -> &'static str {
        match self {
            Bound::None => "-",
            Bound::Memory => "memory",
            Bound::Compute => "compute",
            Bound::Link => "link",
            Bound::Latency => "latency",
        }
    }
}

/// Dispatch and combine of one step, by leg, and how much of it compute hid.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CommCost {
    /// Busy time of the communication stream over the step (all MoE layers, or every
    /// layer's all-reduces under TP).
    pub total_s: f64,
    /// Part of `total_s` that ran under compute.
    pub hidden_s: f64,
    /// Part the compute stream waited for (the `communication` operation).
    pub exposed_s: f64,
    /// Transfer time per leg over the step (dispatch + combine), the slower of which
    /// binds each kernel.
    pub nvlink_s: f64,
    pub rdma_s: f64,
    /// Bytes one rank sends per leg over the step.
    pub nvlink_bytes: f64,
    pub rdma_bytes: f64,
    /// Whether the step ran as two overlapped micro-batches.
    pub two_batch: bool,
    /// Low-latency (decode) kernels, or normal (prefill) ones.
    pub low_latency: bool,
    /// Tensor-parallel all-reduces instead of dispatch and combine.
    pub allreduce: bool,
}

/// The cost of one step.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepCost {
    /// Wall time of the step (the slowest rank at every synchronisation).
    pub step_s: f64,
    /// Seconds per operation, indexed by `Op::index`; sums to `step_s`.
    pub op_s: [f64; OPS],
    /// Binding resource per operation.
    pub op_bound: [Bound; OPS],
    /// The same step with every rank at the mean attention and expert load.
    pub balanced_step_s: f64,
    /// The same step with expert load at the mean but attention work as it is: the
    /// difference to `step_s` is the loss to expert-load skew.
    pub unskewed_step_s: f64,
    /// Dispatch and combine.
    pub comm: CommCost,
    /// Stage timeline of a middle layer when micro-batches overlap.
    pub timeline: Option<LayerTimeline>,
    /// One layer as an in-situ breakdown reports it (analytic model; zero otherwise).
    pub in_situ: insitu::InSituLayer,
    /// Kernel launches in the step.
    pub kernels: f64,
    /// The host's seconds launching the step's kernels where it launches them (0 where
    /// it replays CUDA graphs); `Op::Launch` is what of them outruns the GPU.
    pub host_launch_s: f64,
    /// The host's seconds the step waits for in full, among `Op::Launch` (its
    /// linear-attention layers' where it launches them): no GPU time hides them.
    pub host_serial_s: f64,
    /// Routed-expert weight bytes read per rank per step (all layers).
    pub moe_weight_bytes_per_rank: f64,
    /// Expected distinct routed experts touched per rank per MoE layer.
    pub experts_touched_per_rank: f64,
    /// Tokens through the target model in this step (all ranks).
    pub tokens_processed: u64,
}

impl StepCost {
    pub fn op(&self, op: Op) -> f64 {
        self.op_s[op.index()]
    }
    /// Time lost to rank imbalance (DP and expert load) in this step.
    pub fn imbalance_s(&self) -> f64 {
        (self.step_s - self.balanced_step_s).max(0.0)
    }
    /// Time lost to expert-load skew (hot experts and the batch's routing noise).
    pub fn skew_loss_s(&self) -> f64 {
        (self.step_s - self.unskewed_step_s).max(0.0)
    }
}

/// Anything that prices an engine step.
pub trait CostModel {
    fn step(&self, shape: &StepShape<'_>) -> StepCost;
    /// A one-line description for provenance ("analytic defaults", "profile X").
    fn describe(&self) -> String;
    /// Context lengths at which a decode request's cost stops being affine in its
    /// context (with `draft_tokens` MTP drafts), ascending. Between two consecutive
    /// breakpoints the cost of a decode step is affine in each request's context, so
    /// `n` requests of one piece cost the same as `n` requests at their mean context:
    /// the simulator prices a rank's batch as a few such aggregates instead of one
    /// slice per request. The default (none) declares the cost affine everywhere.
    fn decode_context_breakpoints(&self, draft_tokens: u32) -> Vec<u64> {
        let _ = draft_tokens;
        Vec::new()
    }
    /// Extra time of a step that starts after its group idled `idle_s` seconds: the
    /// device's wake-up (caches, clocks and threads back to speed). The default (none)
    /// suits GPUs kept busy by serving; a calibrated CPU has a measured one.
    fn wake_s(&self, idle_s: f64) -> f64 {
        let _ = idle_s;
        0.0
    }
}

/// What a host-launched step's launches add to its GPU time `gpu_s`: the host's
/// `host_s` that may run ahead of the GPU, by what they outrun it and `slack_s` (GPU
/// time of the last step left spare after that step's launches, where the engine
/// launches a step while the last runs), and all of the `serial_s` the step waits on the
/// host for.
pub fn host_launch_exposed_s(host_s: f64, serial_s: f64, gpu_s: f64, slack_s: f64) -> f64 {
    (host_s - gpu_s - slack_s).max(0.0) + serial_s
}

/// Sum over the positions `ctx+1 ..= ctx+new` of `min(position, cap)`: how many
/// entries `new` causal queries see when each sees at most `cap`.
pub fn clamped_positions(new: u64, ctx: u64, cap: u64) -> f64 {
    if new == 0 {
        return 0.0;
    }
    let lo = ctx + 1;
    let hi = ctx + new;
    if hi <= cap {
        // arithmetic series lo..=hi
        (lo + hi) as f64 * new as f64 / 2.0
    } else if lo >= cap {
        cap as f64 * new as f64
    } else {
        let below = cap - lo + 1; // positions lo..=cap
        (lo + cap) as f64 * below as f64 / 2.0 + cap as f64 * (new - below) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamped_positions_matches_a_loop() {
        for &(new, ctx, cap) in &[(1, 0, 5), (10, 0, 4), (10, 3, 100), (7, 20, 10), (5, 8, 10)] {
            let naive: u64 = (ctx + 1..=ctx + new).map(|p| p.min(cap)).sum();
            assert_eq!(
                clamped_positions(new, ctx, cap),
                naive as f64,
                "{new} {ctx} {cap}"
            );
        }
    }
}

/// How a model is spread over the GPUs of one instance: a DEP group (`dep` GPUs, each
/// an attention replica with 1/dep of the routed experts, tokens exchanged by
/// all-to-all), or one tensor-parallel replica (`tp` GPUs sharing every layer, partial
/// results summed by all-reduce).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Layout {
    /// Data-parallel attention replicas in the group; with `tp = 1`, the ranks of the
    /// data + expert parallel group (each holds an attention replica and 1/dep of the
    /// routed experts).
    pub dep: u32,
    /// GPUs that split each attention replica by heads and each dense layer by columns
    /// or rows (tensor parallelism); 1 = none. An instance has `dep * tp` GPUs. Only
    /// `dep = 1` is modelled with `tp > 1` (one tensor-parallel replica).
    #[serde(default = "one")]
    pub tp: u32,
    /// With `tp > 1`: routed experts are spread whole over the TP GPUs (vLLM's
    /// `--enable-expert-parallel`) instead of each expert being sliced over them (the
    /// engines' default).
    #[serde(default)]
    pub expert_parallel: bool,
    /// Extra copies of popular experts spread over the group (EPLB).
    #[serde(default)]
    pub redundant_experts: u32,
    /// Two micro-batches overlap communication with compute (DeepSeek/SGLang/vLLM),
    /// where it pays.
    #[serde(default = "yes")]
    pub overlap_microbatches: bool,
    /// Decode steps replay CUDA graphs (small gap per kernel) instead of launching
    /// every kernel from the host.
    #[serde(default = "yes")]
    pub decode_graphs: bool,
    /// Prefill steps replay CUDA graphs (engines launch prefill eagerly by default).
    #[serde(default)]
    pub prefill_graphs: bool,
    /// How two overlapped micro-batches of a decode step with low-latency all-to-all
    /// kernels are scheduled.
    #[serde(default)]
    pub decode_pipeline: Pipeline,
}

/// The schedule of two overlapped decode micro-batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pipeline {
    /// Four stages per micro-batch (attention, dispatch, experts, combine), the
    /// communication of one hidden behind the other's compute ([`kernels::overlap`]).
    #[default]
    TwoBatch,
    /// DeepSeek's five stages on one stream, the second micro-batch two stages behind
    /// (SGLang's decode two-batch overlap; [`kernels::pipeline`]).
    FiveStage,
}

impl Pipeline {
    pub const ALL: [Pipeline; 2] = [Pipeline::TwoBatch, Pipeline::FiveStage];

    /// The name a scenario and `--pipeline` use.
    pub fn name(self) -> &'static str {
        match self {
            Pipeline::TwoBatch => "two-batch",
            Pipeline::FiveStage => "five-stage",
        }
    }
}

impl std::str::FromStr for Pipeline {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Pipeline::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("{s:?}: expected two-batch or five-stage"))
    }
}

impl Layout {
    pub fn new(dep: u32) -> Self {
        Layout {
            dep,
            tp: 1,
            expert_parallel: false,
            redundant_experts: 0,
            overlap_microbatches: true,
            decode_graphs: true,
            prefill_graphs: false,
            decode_pipeline: Pipeline::TwoBatch,
        }
    }

    /// One tensor-parallel replica over `tp` GPUs.
    pub fn tensor_parallel(tp: u32) -> Self {
        Layout {
            tp,
            ..Layout::new(1)
        }
    }

    /// GPUs of one instance.
    pub fn gpus(&self) -> u32 {
        self.dep.max(1) * self.tp.max(1)
    }

    /// The layout's name as engines print it: `DEP8`, `TP8`, `TP8 EP`.
    pub fn name(&self) -> String {
        if self.tp > 1 {
            format!(
                "TP{}{}",
                self.tp,
                if self.expert_parallel { " EP" } else { "" }
            )
        } else {
            format!("DEP{}", self.dep)
        }
    }
}

/// Memory a deployment leaves for KV cache.
pub trait KvCapacity {
    /// Tokens of KV cache one rank can hold after weights and reserves.
    fn kv_capacity_tokens_per_rank(&self) -> u64;
    /// KV-token equivalents a request of `tokens` tokens holds beyond them (a
    /// recurrent state, its sliding-window and chunked layers' KV); 0 by default.
    fn kv_extra_tokens(&self, tokens: u64) -> u64 {
        let _ = tokens;
        0
    }
}
