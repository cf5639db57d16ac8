//! The flags of one exact step (`twin forward`'s, which `sweep`, `validate` and
//! `calibrate --from-trace` share) and the request they make ([`crate::step`] checks
//! and prices it).

use crate::step::{StepRequest, DEFAULT_HARDWARE};
use crate::Overrides;
use anyhow::Result;
use clap::{Args, ValueEnum};
use sim::cost::Phase;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PhaseArg {
    Prefill,
    Decode,
}

#[derive(Debug, Clone, Args)]
pub struct ForwardArgs {
    /// Hardware name (`twin list`) or path to a hardware TOML.
    #[arg(long, default_value = DEFAULT_HARDWARE)]
    pub hardware: String,
    /// Model name (`twin list`) or path to a model TOML.
    #[arg(long, default_value = "deepseek-v4.1-flash")]
    pub model: String,
    /// Which step: decode (one token per request, plus MTP drafts) or prefill.
    #[arg(long, value_enum, default_value = "decode")]
    pub phase: PhaseArg,
    /// Ranks in the data + expert parallel group (default 8; 1 with --tp).
    #[arg(long)]
    pub dep: Option<u32>,
    /// GPUs of one tensor-parallel replica (heads and dense layers split over them,
    /// all-reduce after attention and after the FFN) instead of a DEP group; `--tp 1`
    /// is one GPU (without it, a DEP group of --dep ranks).
    #[arg(long)]
    pub tp: Option<u32>,
    /// With --tp: routed experts whole on each GPU (expert parallelism) instead of
    /// sliced over the TP GPUs.
    #[arg(long)]
    pub expert_parallel: bool,
    /// Redundant expert copies spread over the group (EPLB).
    #[arg(long, default_value_t = 0)]
    pub redundant_experts: u32,
    /// Requests per rank [default: 64].
    #[arg(long)]
    pub batch_per_rank: Option<u32>,
    /// Requests over the whole group, placed round-robin over the ranks (instead of
    /// --batch-per-rank); `--requests 1` on DEP2 times one request, one rank idle.
    #[arg(long)]
    pub requests: Option<u32>,
    /// Tokens already in KV per request (decode context or cached prefix).
    #[arg(long, default_value_t = 0)]
    pub context: u64,
    /// Prefill: new tokens per request.
    #[arg(long, default_value_t = 8192)]
    pub new_tokens: u32,
    /// Prefill: chunk budget per request per step (default: the whole prompt in one step).
    #[arg(long)]
    pub chunk: Option<u32>,
    /// Decode: MTP draft tokens per step (default: the model's `mtp.draft_tokens`).
    #[arg(long)]
    pub mtp: Option<u32>,
    /// Do not overlap dispatch/combine with compute (no two-micro-batch overlap).
    #[arg(long)]
    pub no_overlap: bool,
    /// How two overlapped decode micro-batches are scheduled: `two-batch` (four stages
    /// each) or `five-stage` (DeepSeek's decode pipeline, as SGLang runs it).
    #[arg(long, value_name = "SCHEDULE", default_value = "two-batch", value_parser = str::parse::<sim::cost::Pipeline>)]
    pub pipeline: sim::cost::Pipeline,
    /// Launch decode kernels eagerly from the host instead of replaying CUDA graphs.
    #[arg(long)]
    pub eager_decode: bool,
    /// Replay prefill steps as CUDA graphs instead of launching kernels eagerly.
    #[arg(long)]
    pub prefill_graphs: bool,
    /// The routed-expert kernel the deployment runs instead of the engine's usual one
    /// (`marlin`: vLLM's `VLLM_MXFP4_USE_MARLIN=1`; `triton`: OpenAI's `triton_kernels`,
    /// the usual one for MXFP4 experts on Hopper, whose host time a MoE layer binds in
    /// steps launched from the host); where the engine's tables time it, its arithmetic
    /// rate bounds the experts' price from below.
    #[arg(long, value_name = "KERNEL", value_parser = str::parse::<spec::kernel::MoeKernel>)]
    pub moe_kernel: Option<spec::kernel::MoeKernel>,
    /// The deployment launches kernels with programmatic dependent launch
    /// (TensorRT-LLM's `TRTLLM_ENABLE_PDL=1`): a CUDA graph leaves no gap between them.
    #[arg(long)]
    pub pdl: bool,
    /// Override any field: `model.engram.page_size=2MiB`, `hardware.hbm.bytes_per_s=7e12`,
    /// `cost.moe.mem_eff=0.9` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub pricing: super::PricingArgs,
    /// Price every kernel at its isolated-benchmark price: leave out the hardware's
    /// in-situ terms (`[cost.in_situ]`).
    #[arg(long)]
    pub isolated: bool,
    /// Also print one layer as an in-situ breakdown reports it: ms per stream and
    /// category, bubbles, launch gaps.
    #[arg(long)]
    pub in_situ_layer: bool,
    /// Write the predicted step as a Chrome trace (open it in Perfetto beside a
    /// profiler trace of the real run; `twin calibrate --from-trace` reads it back).
    #[arg(long, value_name = "FILE.json")]
    pub trace_out: Option<std::path::PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Do not draw the p10-p90 band from the hardware's kernel-fit spreads.
    #[arg(long)]
    pub no_band: bool,
}

impl ForwardArgs {
    /// The step these flags ask for, `--set` parsed once.
    pub fn request(&self) -> Result<StepRequest> {
        Ok(StepRequest {
            hardware: self.hardware.clone(),
            model: self.model.clone(),
            phase: self.phase.into(),
            // Naming --tp, even 1, prices a tensor-parallel replica: one DEP rank.
            dep: self.dep.or(self.tp.map(|_| 1)),
            tp: self.tp.unwrap_or(1),
            expert_parallel: self.expert_parallel,
            redundant_experts: self.redundant_experts,
            batch_per_rank: self.batch_per_rank,
            requests: self.requests,
            context: self.context,
            new_tokens: self.new_tokens,
            chunk: self.chunk,
            mtp: self.mtp,
            no_overlap: self.no_overlap,
            pipeline: self.pipeline,
            eager_decode: self.eager_decode,
            prefill_graphs: self.prefill_graphs,
            moe_kernel: self.moe_kernel,
            pdl: self.pdl,
            sets: Overrides::parse(&self.set)?,
            pricing: self.pricing.pricing(),
            isolated: self.isolated,
            trace: self.trace_out.is_some(),
        })
    }
}

impl From<PhaseArg> for Phase {
    fn from(p: PhaseArg) -> Phase {
        match p {
            PhaseArg::Prefill => Phase::Prefill,
            PhaseArg::Decode => Phase::Decode,
        }
    }
}
