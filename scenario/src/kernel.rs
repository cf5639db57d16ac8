//! One kernel priced exactly as the step model prices it, reported with its public
//! benchmark's accounting: the typed request of `twin kernel OP` (the binary's flags
//! build it) and its evaluation, which `validate` also prices the rows of
//! `scenarios/published/kernels-public.csv` with.

use crate::{load_hardware, Overrides};
use anyhow::{bail, Result};
use serde_json::json;
use sim::cost::kernels::a2a::Routing;
use sim::cost::kernels::as_benchmarked::{self, Benchmarked, CommKernel};
use sim::cost::kernels::attention::AttnKernel;
use sim::cost::kernels::GemmKind;
use sim::cost::{CostParams, Phase};
use spec::dtype::Dtype;
use spec::hardware::Hardware;

/// One kernel, as asked: the operation and its shapes, the hardware and what prices it.
#[derive(Debug, Clone)]
pub struct KernelRequest {
    pub op: KernelOp,
    /// Hardware name or path.
    pub hardware: String,
    /// `--set` overrides (`hardware.` and `cost.` only).
    pub sets: Overrides,
    pub profile: Option<String>,
    pub engine: Option<String>,
}

/// The kernel priced.
#[derive(Debug, Clone)]
pub enum KernelOp {
    Gemm(Gemm),
    Dispatch(A2a),
    Combine(A2a),
    Moe(MoeLayer),
    Allreduce(Allreduce),
    Attention(Attention),
}

/// A GEMM or grouped GEMM: rows (per group), output columns, reduction width.
#[derive(Debug, Clone, Copy)]
pub struct Gemm {
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub groups: u32,
    pub kind: GemmKind,
    pub dtype: Dtype,
}

/// The tokens an expert-parallel kernel routes, and to how many experts.
#[derive(Debug, Clone, Copy)]
pub struct RoutedTokens {
    pub ep: u32,
    pub tokens: u32,
    pub hidden: u32,
    pub experts: u32,
    pub top_k: u32,
}

/// An expert-parallel dispatch or combine.
#[derive(Debug, Clone, Copy)]
pub struct A2a {
    pub kernel: CommKernel,
    pub routed: RoutedTokens,
    pub groups: u32,
    pub topk_groups: u32,
    /// Payload type (default: FP8 for dispatch, BF16 for combine).
    pub dtype: Option<Dtype>,
    /// Metadata bytes per copy (default: 16 for low-latency dispatch, else 0).
    pub meta: Option<u32>,
}

/// One MoE layer: routed experts of the hottest rank with dispatch and combine.
#[derive(Debug, Clone, Copy)]
pub struct MoeLayer {
    pub routed: RoutedTokens,
    pub ffn: u32,
    pub weights: Dtype,
    pub acts: Dtype,
    pub fused: bool,
    pub phase: Phase,
}

/// A tensor-parallel all-reduce of `bytes` (`1000000`, `4GiB`).
#[derive(Debug, Clone)]
pub struct Allreduce {
    pub gpus: u32,
    pub bytes: String,
    pub ring: bool,
}

/// An attention kernel.
#[derive(Debug, Clone, Copy)]
pub struct Attention {
    pub phase: Phase,
    pub kernel: AttnKernel,
    pub batch: u32,
    pub heads: u32,
    pub q_tokens: u64,
    pub context: u64,
    pub top_k: u64,
    pub dqk: u32,
    pub dv: u32,
    pub kv_bytes: f64,
    pub dtype: Dtype,
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

pub fn evaluate(req: &KernelRequest) -> Result<KernelOut> {
    let (hw, p) = inputs(req)?;
    evaluate_with(req, &hw, p)
}

/// The hardware and cost parameters `req` prices with.
pub fn inputs(req: &KernelRequest) -> Result<(Hardware, CostParams)> {
    let sets = &req.sets;
    if let Some(s) = sets.first_outside(&["hardware", "cost"]) {
        bail!(
            "--set {}: the path must start with `hardware.` or `cost.`",
            s.text
        );
    }
    let hw = load_hardware(&req.hardware, &sets.hardware)?;
    // A kernel as its benchmark reports it: physics alone.
    let p = crate::cost_params(
        &hw,
        req.profile.as_deref(),
        &sets.cost,
        req.engine.as_deref(),
        true,
    )?;
    Ok((hw, p))
}

/// The kernel `req` names, priced on `hw` with `p` (a band's draw, or its own).
pub fn evaluate_with(req: &KernelRequest, hw: &Hardware, p: CostParams) -> Result<KernelOut> {
    let hw = hw.clone();
    let (what, result) = match &req.op {
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

fn gemm(hw: &Hardware, p: &CostParams, g: &Gemm) -> Result<Priced> {
    let Gemm {
        m,
        n,
        k,
        groups,
        kind,
        dtype,
    } = *g;
    if m == 0 || n == 0 || k == 0 || groups == 0 {
        bail!("--m, --n, --k and --groups must be at least 1");
    }
    Ok((
        format!("{} GEMM {groups} x {m} x {n} x {k} ({dtype})", kind.name()),
        as_benchmarked::gemm(
            hw,
            p,
            kind,
            groups as f64,
            m as f64,
            n as f64,
            k as f64,
            dtype,
        ),
    ))
}

fn all_to_all(hw: &Hardware, p: &CostParams, a: &A2a, combine: bool) -> Result<Priced> {
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
    let kernel = a.kernel;
    let dtype = a
        .dtype
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

fn moe_layer(hw: &Hardware, p: &CostParams, a: &MoeLayer) -> Result<Priced> {
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
    let (w, acts) = (a.weights, a.acts);
    let model = moe_model(hidden, experts, top_k, ffn, w, acts, fused)?;
    let phase = a.phase;
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

fn allreduce(hw: &Hardware, p: &CostParams, a: &Allreduce) -> Result<Priced> {
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

fn attention(hw: &Hardware, p: &CostParams, a: &Attention) -> Result<Priced> {
    let Attention {
        phase,
        kernel,
        batch,
        heads,
        q_tokens,
        context,
        top_k,
        kv_bytes,
        ..
    } = *a;
    if batch == 0 || heads == 0 || q_tokens == 0 || !(kv_bytes.is_finite() && kv_bytes > 0.0) {
        bail!("--batch, --heads, --q-tokens and --kv-bytes must be positive");
    }
    if kernel == AttnKernel::Recurrent {
        bail!("a recurrent mixer is no attention kernel: price it with `twin forward`");
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
        dtype: a.dtype,
    };
    Ok((
        format!(
            "{} {} attention, batch {batch}, {heads} heads, {q_tokens} queries on {context} keys",
            match kernel {
                AttnKernel::Dense => "dense",
                AttnKernel::Sparse => "sparse",
                AttnKernel::Recurrent => "recurrent",
            },
            if phase == Phase::Decode {
                "decode"
            } else {
                "prefill"
            },
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
