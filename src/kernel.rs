//! One kernel priced exactly as the step model prices it, reported with its public
//! benchmark's accounting: `twin kernel OP`'s arguments and evaluator, which
//! `validate` also prices the rows of `scenarios/published/kernels-public.csv` with.

use anyhow::{bail, Result};
use clap::{Args, Subcommand, ValueEnum};
use scenario::{load_hardware, Overrides};
use serde_json::json;
use sim::cost::kernels::a2a::Routing;
use sim::cost::kernels::as_benchmarked::{self, Benchmarked, CommKernel};
use sim::cost::kernels::attention::AttnKernel;
use sim::cost::kernels::GemmKind;
use sim::cost::{CostParams, Phase};
use spec::dtype::Dtype;
use spec::hardware::Hardware;

#[derive(Debug, Clone, Args)]
pub struct KernelArgs {
    #[command(subcommand)]
    pub op: KernelOp,
    /// Hardware name (`twin list`) or path to a hardware TOML (the default is
    /// `twin forward`'s).
    #[arg(long, default_value = scenario::step::DEFAULT_HARDWARE, global = true)]
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

impl AttnArg {
    /// The kernel as the output names it (`sparse decode`), not its Rust name.
    pub fn words(self) -> &'static str {
        match self {
            AttnArg::DenseDecode => "dense decode",
            AttnArg::SparseDecode => "sparse decode",
            AttnArg::DensePrefill => "dense prefill",
            AttnArg::SparsePrefill => "sparse prefill",
        }
    }
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
    pub phase: crate::step::PhaseArg,
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

/// A priced kernel and what it was.
pub struct KernelOut {
    pub what: String,
    pub result: Benchmarked,
    pub hardware: String,
    pub cost_model: String,
}

/// A kernel in words and its price.
type Priced = (String, Benchmarked);

pub fn evaluate(args: &KernelArgs) -> Result<KernelOut> {
    let (hw, p) = inputs(args)?;
    evaluate_with(args, &hw, p)
}

/// The hardware and cost parameters `args` price with.
pub fn inputs(args: &KernelArgs) -> Result<(Hardware, CostParams)> {
    let sets = Overrides::parse(&args.set)?;
    if let Some(s) = sets.first_outside(&["hardware", "cost"]) {
        bail!(
            "--set {}: the path must start with `hardware.` or `cost.`",
            s.text
        );
    }
    let hw = load_hardware(&args.hardware, &sets.hardware)?;
    // A kernel as its benchmark reports it: physics alone.
    let p = scenario::cost_params(
        &hw,
        args.profile.as_deref(),
        &sets.cost,
        args.engine.as_deref(),
        true,
    )?;
    Ok((hw, p))
}

/// The kernel `args` names, priced on `hw` with `p` (a band's draw, or its own).
pub fn evaluate_with(args: &KernelArgs, hw: &Hardware, p: CostParams) -> Result<KernelOut> {
    let hw = hw.clone();
    let (what, result) = match &args.op {
        KernelOp::Gemm(g) => gemm(&hw, &p, g)?,
        KernelOp::Dispatch(a) => all_to_all(&hw, &p, a, false)?,
        KernelOp::Combine(a) => all_to_all(&hw, &p, a, true)?,
        KernelOp::Moe(m) => moe_layer(&hw, &p, m)?,
        KernelOp::Allreduce(a) => allreduce(&hw, &p, a)?,
        KernelOp::Attention(a) => attention(&hw, &p, a)?,
    };
    if !result.time_s.is_finite() {
        bail!("the kernel's time is not finite: check the hardware figures and cost parameters");
    }
    Ok(KernelOut {
        what,
        result,
        hardware: hw.name,
        cost_model: p.source,
    })
}

fn gemm(hw: &Hardware, p: &CostParams, g: &GemmArgs) -> Result<Priced> {
    let GemmArgs {
        m,
        n,
        k,
        groups,
        layout,
        dtype,
    } = *g;
    if m == 0 || n == 0 || k == 0 || groups == 0 {
        bail!("--m, --n, --k and --groups must be at least 1");
    }
    let kind = match layout {
        GemmLayout::Dense => GemmKind::Dense,
        GemmLayout::Contiguous => GemmKind::Contiguous,
        GemmLayout::Masked => GemmKind::Masked,
    };
    Ok((
        format!(
            "{} GEMM {groups} x {m} x {n} x {k} ({})",
            kind.name(),
            Dtype::from(dtype)
        ),
        as_benchmarked::gemm(
            hw,
            p,
            kind,
            groups as f64,
            m as f64,
            n as f64,
            k as f64,
            dtype.into(),
        ),
    ))
}

fn all_to_all(hw: &Hardware, p: &CostParams, a: &A2aArgs, combine: bool) -> Result<Priced> {
    let r = &a.routed;
    if r.ep == 0 || r.tokens == 0 || r.hidden == 0 || r.experts == 0 || r.top_k == 0 {
        bail!("--ep, --tokens, --hidden, --experts and --top-k must be at least 1");
    }
    if a.groups == 0
        || a.topk_groups == 0
        || a.topk_groups > a.groups
        || !r.experts.is_multiple_of(a.groups)
    {
        bail!("--groups must divide --experts and --topk-groups lie in 1..=--groups");
    }
    if r.top_k > r.experts / a.groups * a.topk_groups {
        bail!(
            "--top-k {} exceeds the experts of {} groups",
            r.top_k,
            a.topk_groups
        );
    }
    let kernel = match a.kernels {
        CommArg::Normal => CommKernel::Normal,
        CommArg::LowLatency => CommKernel::LowLatency,
    };
    let dtype = a
        .dtype
        .map(Dtype::from)
        .unwrap_or(if combine { Dtype::Bf16 } else { Dtype::Fp8 });
    let meta =
        a.meta
            .map(|m| m as f64)
            .unwrap_or(if kernel == CommKernel::LowLatency && !combine {
                16.0
            } else {
                0.0
            });
    let b = as_benchmarked::A2a {
        kernel,
        combine,
        ep: r.ep as f64,
        tokens: r.tokens as f64,
        hidden: r.hidden as f64,
        routing: Routing {
            experts: r.experts as f64,
            top_k: r.top_k as f64,
            groups: a.groups as f64,
            topk_groups: a.topk_groups as f64,
        },
        dtype,
        meta,
    };
    Ok((
        format!(
            "{} {} EP{} of {} tokens per rank ({dtype})",
            if kernel == CommKernel::Normal {
                "normal"
            } else {
                "low-latency"
            },
            if combine { "combine" } else { "dispatch" },
            r.ep,
            r.tokens
        ),
        as_benchmarked::a2a(hw, p, &b),
    ))
}

fn moe_layer(hw: &Hardware, p: &CostParams, a: &MoeArgs) -> Result<Priced> {
    let RoutedTokens {
        ep,
        tokens,
        hidden,
        experts,
        top_k,
    } = a.routed;
    let (ffn, fused) = (a.ffn, a.fused);
    if ep == 0 || tokens == 0 || hidden == 0 || ffn == 0 || top_k == 0 || top_k > experts {
        bail!("--ep, --tokens, --hidden, --ffn and --top-k must be at least 1, --top-k at most --experts");
    }
    if experts % ep != 0 {
        bail!("--experts {experts} do not divide over --ep {ep}");
    }
    let (w, acts) = (Dtype::from(a.weights), Dtype::from(a.acts));
    let model = moe_model(hidden, experts, top_k, ffn, w, acts, fused)?;
    let phase = match a.phase {
        crate::step::PhaseArg::Decode => Phase::Decode,
        crate::step::PhaseArg::Prefill => Phase::Prefill,
    };
    let cm =
        sim::cost::AnalyticCostModel::new(hw.clone(), model, sim::cost::Layout::new(ep), p.clone());
    let (time_s, bound) = cm.moe_layer(phase, tokens as f64);
    let flops = 2.0 * 3.0 * hidden as f64 * ffn as f64 * tokens as f64 * top_k as f64;
    Ok((
        format!(
            "{}MoE layer EP{ep}, {tokens} tokens per rank, {experts} experts top-{top_k}, {w} x {acts}",
            if fused { "fused " } else { "" }
        ),
        Benchmarked {
            time_s,
            flops,
            bytes: 0.0,
            kernel: sim::cost::kernels::KernelTime {
                s: time_s,
                bound,
                ..Default::default()
            },
        },
    ))
}

fn allreduce(hw: &Hardware, p: &CostParams, a: &AllreduceArgs) -> Result<Priced> {
    let b = spec::dtype::ByteSize::parse(&a.bytes).map_err(|e| anyhow::anyhow!("--bytes: {e}"))?;
    if a.gpus < 2 || b.as_f64() <= 0.0 {
        bail!("--gpus must be at least 2 and --bytes positive");
    }
    Ok((
        format!(
            "{}all-reduce of {b} over {} GPUs",
            if a.ring { "ring " } else { "" },
            a.gpus
        ),
        as_benchmarked::allreduce(hw, p, a.gpus as f64, b.as_f64(), a.ring),
    ))
}

fn attention(hw: &Hardware, p: &CostParams, a: &AttentionArgs) -> Result<Priced> {
    let AttentionArgs {
        kind,
        batch,
        heads,
        q_tokens,
        context,
        top_k,
        kv_bytes,
        ..
    } = *a;
    let (phase, kernel) = match kind {
        AttnArg::DenseDecode => (Phase::Decode, AttnKernel::Dense),
        AttnArg::SparseDecode => (Phase::Decode, AttnKernel::Sparse),
        AttnArg::DensePrefill => (Phase::Prefill, AttnKernel::Dense),
        AttnArg::SparsePrefill => (Phase::Prefill, AttnKernel::Sparse),
    };
    if batch == 0 || heads == 0 || q_tokens == 0 || !(kv_bytes.is_finite() && kv_bytes > 0.0) {
        bail!("--batch, --heads, --q-tokens and --kv-bytes must be positive");
    }
    if kernel == AttnKernel::Sparse && top_k == 0 {
        bail!("sparse attention needs --top-k");
    }
    let shape = as_benchmarked::Attn {
        phase,
        kernel,
        batch: batch as f64,
        heads: heads as f64,
        q_tokens: q_tokens as f64,
        context: context as f64,
        top_k: top_k as f64,
        d_qk: a.dqk as f64,
        d_v: a.dv as f64,
        kv_bytes,
        dtype: a.dtype.into(),
    };
    Ok((
        format!(
            "{} attention, batch {batch}, {heads} heads, {q_tokens} queries on {context} keys",
            kind.words()
        ),
        as_benchmarked::attention(hw, p, &shape),
    ))
}

/// A one-layer MoE model with the given shapes (uniform routing: benchmarks route at
/// random).
fn moe_model(
    hidden: u32,
    experts: u32,
    top_k: u32,
    ffn: u32,
    w: Dtype,
    a: Dtype,
    fused: bool,
) -> Result<spec::model::Model> {
    let text = format!(
        r#"
name = "kernel-moe"
hidden = {hidden}
vocab = 1
embedding_dtype = "bf16"
dispatch_dtype = "{a}"
combine_dtype = "bf16"
[[layers]]
count = 1
ffn = "moe"
attention = "dense"
[attention]
heads = 1
score_dim = 64
value_dim = 64
qk_head_dim = 64
v_head_dim = 64
q_lora = 0
kv_dim = 64
weight_dtype = "bf16"
compute_dtype = "bf16"
kv_entry_bytes = 128.0
[moe]
routed_experts = {experts}
shared_experts = 0
top_k = {top_k}
expert_ffn = {ffn}
weight_dtype = "{w}"
scale_block = {scale}
shared_weight_dtype = "{w}"
activation_dtype = "{a}"
expert_load_cv = 0.0
fused = {fused}
[kv]
bytes_per_token = 128.0
"#,
        scale = if w == Dtype::Fp4 {
            32
        } else if w == Dtype::Fp8 {
            128
        } else {
            0
        },
    );
    Ok(toml::from_str(&text)?)
}

pub fn to_json(k: &KernelOut) -> serde_json::Value {
    let r = &k.result;
    json!({
        "kernel": k.what,
        "hardware": k.hardware,
        "time_us": r.time_s * 1e6,
        "tflops": r.tflops(),
        "gb_s": r.gb_s(),
        "compute_us": r.kernel.compute_s * 1e6,
        "memory_us": r.kernel.memory_s * 1e6,
        "bound": r.kernel.bound.name(),
        "cost_model": k.cost_model,
        "version": env!("CARGO_PKG_VERSION"),
    })
}
