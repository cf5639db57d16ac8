//! `twin kernel OP`'s flags, and the typed request they make
//! ([`crate::kernel::KernelRequest`], which prices it); `validate` parses the rows
//! of `scenarios/published/kernels-public.csv` with them.

use crate::kernel::{self as k, KernelRequest};
use crate::Overrides;
use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use sim::cost::kernels::as_benchmarked::CommKernel;
use sim::cost::kernels::attention::AttnKernel;
use sim::cost::kernels::GemmKind;
use sim::cost::Phase;
use spec::dtype::Dtype;

#[derive(Debug, Clone, Args)]
pub struct KernelArgs {
    #[command(subcommand)]
    pub op: KernelOp,
    /// Hardware name (`twin list`) or path to a hardware TOML (the default is
    /// `twin forward`'s).
    #[arg(long, default_value = crate::step::DEFAULT_HARDWARE, global = true)]
    pub hardware: String,
    /// Override a hardware field or cost parameter: `cost.tile.overlap_p=2`,
    /// `hardware.nvlink.bytes_per_s=4e11` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE", global = true)]
    pub set: Vec<String>,
    /// A calibration profile to price with.
    #[arg(long, value_name = "PROFILE", global = true)]
    pub profile: Option<String>,
    /// Serving engine whose measured kernel tables price the GEMM and all-reduce
    /// (`trtllm`, `vllm`, `ENGINE@VERSION` or a profile path; default `twin`, twin's
    /// own kernel model); one without tables on the GPU prices by the nearest shipped
    /// (SGLang by vLLM's) or twin's own model.
    #[arg(long, value_name = "ENGINE[@VERSION]", global = true)]
    pub engine: Option<String>,
    /// Print one JSON object.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GemmLayout {
    Dense,
    Contiguous,
    Masked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    Fp4,
    Fp8,
    Bf16,
}

impl From<DtypeArg> for Dtype {
    fn from(d: DtypeArg) -> Dtype {
        match d {
            DtypeArg::Fp4 => Dtype::Fp4,
            DtypeArg::Fp8 => Dtype::Fp8,
            DtypeArg::Bf16 => Dtype::Bf16,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CommArg {
    /// High-throughput kernels (DeepEP normal, prefill).
    Normal,
    /// Low-latency kernels (DeepEP low-latency, TensorRT-LLM one-sided, decode).
    LowLatency,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttnArg {
    DenseDecode,
    SparseDecode,
    DensePrefill,
    SparsePrefill,
}

// The tokens an expert-parallel kernel routes, and to how many experts: what the
// all-to-all kernels and the MoE layer share.
#[derive(Debug, Clone, Args)]
pub struct RoutedTokens {
    /// Ranks in the expert-parallel group.
    #[arg(long)]
    pub ep: u32,
    /// Tokens per rank.
    #[arg(long)]
    pub tokens: u32,
    /// Hidden size: the width of one token's activation.
    #[arg(long, default_value_t = 7168)]
    pub hidden: u32,
    /// Routed experts over the group.
    #[arg(long, default_value_t = 256)]
    pub experts: u32,
    /// Experts each token is routed to.
    #[arg(long, default_value_t = 8)]
    pub top_k: u32,
}

#[derive(Debug, Clone, Args)]
pub struct A2aArgs {
    /// Which kernels: normal (prefill, throughput) or low-latency (decode).
    #[arg(long, value_enum, default_value = "normal")]
    pub kernels: CommArg,
    #[command(flatten)]
    pub routed: RoutedTokens,
    /// Expert groups (group-limited routing); 1 = none.
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    /// Groups a token's experts may come from (group-limited routing).
    #[arg(long, default_value_t = 1)]
    pub topk_groups: u32,
    /// Payload type (default: FP8 for dispatch, BF16 for combine).
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
    /// Metadata bytes per copy (default: 16 for low-latency dispatch, else 0).
    #[arg(long)]
    pub meta: Option<u32>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum KernelOp {
    /// A GEMM or grouped GEMM (DeepGEMM accounting).
    Gemm(GemmArgs),
    /// Expert-parallel dispatch (DeepEP / TensorRT-LLM accounting).
    Dispatch(A2aArgs),
    /// Expert-parallel combine.
    Combine(A2aArgs),
    /// One MoE layer: routed experts of the hottest rank with dispatch and combine
    /// (or one fused kernel, DeepGEMM's Mega MoE), as the step model prices it.
    Moe(MoeArgs),
    /// A tensor-parallel all-reduce (NCCL accounting: busbw over 2 (n - 1) / n of the
    /// buffer).
    Allreduce(AllreduceArgs),
    /// An attention kernel (FlashMLA / cuDNN accounting).
    Attention(AttentionArgs),
}

#[derive(Debug, Clone, Args)]
pub struct GemmArgs {
    /// Rows of the activations (tokens), per group.
    #[arg(long)]
    pub m: u64,
    /// Output columns (the weight's output width).
    #[arg(long)]
    pub n: u64,
    /// Reduction width (the weight's input width).
    #[arg(long)]
    pub k: u64,
    /// Groups (experts) of a grouped GEMM; 1 = one GEMM.
    #[arg(long, default_value_t = 1)]
    pub groups: u32,
    /// dense, or a grouped layout: contiguous (prefill) or masked (decode).
    #[arg(long, value_enum, default_value = "dense")]
    pub layout: GemmLayout,
    /// Operand dtype (the tensor rate it runs at).
    #[arg(long, value_enum, default_value = "fp8")]
    pub dtype: DtypeArg,
}

#[derive(Debug, Clone, Args)]
pub struct MoeArgs {
    #[command(flatten)]
    pub routed: RoutedTokens,
    /// Expert FFN width.
    #[arg(long, default_value_t = 2048)]
    pub ffn: u32,
    /// Dtype of the expert weights.
    #[arg(long, value_enum, default_value = "fp8")]
    pub weights: DtypeArg,
    /// Dtype of the activations entering the expert GEMMs.
    #[arg(long, value_enum, default_value = "fp8")]
    pub acts: DtypeArg,
    /// Dispatch, GEMMs, activation and combine in one kernel.
    #[arg(long)]
    pub fused: bool,
    /// Decode (low-latency all-to-all, masked GEMMs) or prefill (normal kernels,
    /// contiguous GEMMs).
    #[arg(long, value_enum, default_value = "decode")]
    pub phase: super::forward::PhaseArg,
}

#[derive(Debug, Clone, Args)]
pub struct AllreduceArgs {
    /// GPUs in the all-reduce.
    #[arg(long)]
    pub gpus: u32,
    /// Buffer size in bytes (`1000000`, `4GiB`).
    #[arg(long)]
    pub bytes: String,
    /// NCCL's ring algorithm (a latency per step, as its large benchmarks run)
    /// instead of the one-shot kernel engines run in their graphs.
    #[arg(long)]
    pub ring: bool,
}

#[derive(Debug, Clone, Args)]
pub struct AttentionArgs {
    /// Which attention kernel: dense or sparse, decode or prefill.
    #[arg(long, value_enum)]
    pub kind: AttnArg,
    /// Sequences in the batch.
    #[arg(long, default_value_t = 1)]
    pub batch: u32,
    /// Query heads.
    #[arg(long)]
    pub heads: u32,
    /// Query tokens per sequence (decode: 1 + MTP; prefill: the sequence length).
    #[arg(long)]
    pub q_tokens: u64,
    /// Keys per sequence (decode: the context; prefill: KV length).
    #[arg(long, default_value_t = 0)]
    pub context: u64,
    /// Sparse kernels: entries each query attends to.
    #[arg(long, default_value_t = 0)]
    pub top_k: u64,
    /// Per-head width of the query-key product.
    #[arg(long)]
    pub dqk: u32,
    /// Per-head width of the value product.
    #[arg(long)]
    pub dv: u32,
    /// Bytes of one cached entry (decode) or of one head's key and value (prefill).
    #[arg(long)]
    pub kv_bytes: f64,
    /// Arithmetic of the attention kernel.
    #[arg(long, value_enum, default_value = "bf16")]
    pub dtype: DtypeArg,
}

impl KernelArgs {
    /// The kernel these flags ask for, `--set` parsed once.
    pub fn request(&self) -> Result<KernelRequest> {
        let op = match &self.op {
            KernelOp::Gemm(g) => k::KernelOp::Gemm(k::Gemm {
                m: g.m,
                n: g.n,
                k: g.k,
                groups: g.groups,
                kind: match g.layout {
                    GemmLayout::Dense => GemmKind::Dense,
                    GemmLayout::Contiguous => GemmKind::Contiguous,
                    GemmLayout::Masked => GemmKind::Masked,
                },
                dtype: g.dtype.into(),
            }),
            KernelOp::Dispatch(a) => k::KernelOp::Dispatch(a.typed()),
            KernelOp::Combine(a) => k::KernelOp::Combine(a.typed()),
            KernelOp::Moe(m) => k::KernelOp::Moe(k::MoeLayer {
                routed: m.routed.typed(),
                ffn: m.ffn,
                weights: m.weights.into(),
                acts: m.acts.into(),
                fused: m.fused,
                phase: m.phase.into(),
            }),
            KernelOp::Allreduce(a) => k::KernelOp::Allreduce(k::Allreduce {
                gpus: a.gpus,
                bytes: a.bytes.clone(),
                ring: a.ring,
            }),
            KernelOp::Attention(a) => k::KernelOp::Attention(a.typed()),
        };
        Ok(KernelRequest {
            op,
            hardware: self.hardware.clone(),
            sets: Overrides::parse(&self.set)?,
            profile: self.profile.clone(),
            engine: self.engine.clone(),
        })
    }
}

impl RoutedTokens {
    fn typed(&self) -> k::RoutedTokens {
        k::RoutedTokens {
            ep: self.ep,
            tokens: self.tokens,
            hidden: self.hidden,
            experts: self.experts,
            top_k: self.top_k,
        }
    }
}

impl A2aArgs {
    fn typed(&self) -> k::A2a {
        k::A2a {
            kernel: match self.kernels {
                CommArg::Normal => CommKernel::Normal,
                CommArg::LowLatency => CommKernel::LowLatency,
            },
            routed: self.routed.typed(),
            groups: self.groups,
            topk_groups: self.topk_groups,
            dtype: self.dtype.map(Dtype::from),
            meta: self.meta,
        }
    }
}

impl AttentionArgs {
    fn typed(&self) -> k::Attention {
        let (phase, kernel) = match self.kind {
            AttnArg::DenseDecode => (Phase::Decode, AttnKernel::Dense),
            AttnArg::SparseDecode => (Phase::Decode, AttnKernel::Sparse),
            AttnArg::DensePrefill => (Phase::Prefill, AttnKernel::Dense),
            AttnArg::SparsePrefill => (Phase::Prefill, AttnKernel::Sparse),
        };
        k::Attention {
            phase,
            kernel,
            batch: self.batch,
            heads: self.heads,
            q_tokens: self.q_tokens,
            context: self.context,
            top_k: self.top_k,
            dqk: self.dqk,
            dv: self.dv,
            kv_bytes: self.kv_bytes,
            dtype: self.dtype.into(),
        }
    }
}
