//! The op families of the measured kernel tables, each priced by twin's own physics
//! with a handful of fitted parameters:
//! - GEMM: the tile model (`kernels::gemm`), and for FP8/FP4 operands the activation
//!   quantisation kernel the engines run before it (a read of the BF16 activations and a
//!   write of the quantised ones, plus a launch);
//! - decode attention: the KV read (window-limited, by KV dtype) against the score and
//!   value products, a soft roofline;
//! - prefill attention: causal (or windowed) score and value products with the diagonal
//!   tiles' waste, against the Q/K/V/O traffic;
//! - MoE: one GPU's expert shard (the tables exclude communication): its two grouped
//!   GEMMs over the experts that receive tokens in the tile model, rows padded per
//!   expert (scattered counts under a skewed load), a cost per token-expert pair
//!   (routing, permutation) and per active expert; each load distribution is its own
//!   key;
//! - collectives: a latency, a latency per peer, and the traffic at a fraction of NVLink.

use super::format::{CollectiveOp, Format};
use super::grid::Axis;
use crate::cost::kernels::gemm::{self, Gemm, GemmKind, KernelDevice, SoftMax};
use crate::cost::params::{OpRate, TileParams};
use serde::{Deserialize, Serialize};
use spec::hardware::Hardware;

/// The op families a table profile prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Gemm,
    DecodeAttention,
    PrefillAttention,
    Moe,
    Collective,
}

impl Family {
    pub const ALL: [Family; 5] = [
        Family::Gemm,
        Family::DecodeAttention,
        Family::PrefillAttention,
        Family::Moe,
        Family::Collective,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Family::Gemm => "gemm",
            Family::DecodeAttention => "decode attention",
            Family::PrefillAttention => "prefill attention",
            Family::Moe => "moe",
            Family::Collective => "collective",
        }
    }

    /// The correction grid's node spacing per axis (log2 units), one per feature.
    pub fn steps(self) -> &'static [f64] {
        match self {
            Family::Gemm | Family::PrefillAttention => &[1.0, 1.0, 1.0],
            Family::DecodeAttention => &[2.0, 2.0, 1.0, 2.0],
            Family::Moe => &[2.0, 2.0, 2.0, 2.0],
            Family::Collective => &[1.0],
        }
    }

    /// The feature along which each measured configuration gets its own correction
    /// (the tables sweep it for every configuration).
    pub fn sweep_axis(self) -> Option<usize> {
        match self {
            Family::Moe => Some(0),
            Family::DecodeAttention => Some(2),
            _ => None,
        }
    }

    /// The physics parameters: name, starting value, lower and upper bound. Fractions
    /// of datasheet rates, seconds, tokens or exponents.
    pub fn params(self) -> &'static [(&'static str, f64, f64, f64)] {
        match self {
            Family::Gemm => &[
                ("compute_eff", 0.7, 0.05, 1.0),
                ("mem_eff", 0.8, 0.05, 1.0),
                ("fixed_s", 3e-6, 1e-7, 1e-4),
                ("small_tile_eff", 0.7, 0.05, 1.0),
                ("load_bytes_per_flop", 0.0075, 1e-4, 0.1),
                ("epilogue_k", 200.0, 1.0, 4000.0),
                ("overlap_p", 1.5, 1.0, 8.0),
                ("quant_s", 3e-6, 1e-7, 1e-4),
            ],
            Family::DecodeAttention => &[
                ("mem_eff", 0.7, 0.02, 1.0),
                ("compute_eff", 0.4, 0.01, 1.0),
                ("fixed_s", 5e-6, 1e-7, 1e-3),
                ("overlap_p", 2.0, 1.0, 8.0),
                ("per_seq_s", 1e-8, 1e-10, 1e-5),
            ],
            Family::PrefillAttention => &[
                ("compute_eff", 0.5, 0.01, 1.0),
                ("mem_eff", 0.7, 0.02, 1.0),
                ("fixed_s", 8e-6, 1e-7, 1e-3),
                ("diag_tokens", 64.0, 1.0, 4096.0),
                ("overlap_p", 2.0, 1.0, 8.0),
            ],
            Family::Moe => &[
                ("compute_eff", 0.6, 0.02, 1.0),
                ("mem_eff", 0.7, 0.02, 1.0),
                ("fixed_s", 2e-5, 1e-7, 1e-3),
                ("small_tile_eff", 0.7, 0.05, 1.0),
                ("load_bytes_per_flop", 0.0075, 1e-4, 0.1),
                ("epilogue_k", 200.0, 1.0, 4000.0),
                ("overlap_p", 1.5, 1.0, 8.0),
                ("per_expert_s", 1e-7, 1e-10, 1e-4),
                ("per_token_s", 1e-9, 1e-12, 1e-6),
            ],
            Family::Collective => &[
                ("fixed_s", 8e-6, 1e-7, 1e-3),
                ("per_peer_s", 5e-7, 1e-9, 1e-4),
                ("link_eff", 0.6, 0.01, 1.0),
            ],
        }
    }
}
/// One measured (or asked-for) kernel of a family, in the tables' terms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Shape {
    Gemm {
        /// The kernel (library path) the table timed.
        kernel: String,
        format: Format,
        m: f64,
        n: f64,
        k: f64,
    },
    /// Heads per GPU; `context` cached tokens; `window` 0 = full attention.
    DecodeAttention {
        kernel: String,
        batch: f64,
        heads: f64,
        kv_heads: f64,
        head_dim: f64,
        context: f64,
        window: f64,
        kv_fp8: bool,
    },
    PrefillAttention {
        kernel: String,
        batch: f64,
        isl: f64,
        heads: f64,
        kv_heads: f64,
        head_dim: f64,
        window: f64,
        fp8: bool,
        kv_fp8: bool,
    },
    /// One GPU's shard of an MoE layer; `skew` is the table's load distribution's
    /// power-law exponent (0 = balanced); `gated` three weight matrices, else two.
    Moe {
        kernel: String,
        format: Format,
        tokens: f64,
        hidden: f64,
        inter: f64,
        top_k: f64,
        experts: f64,
        tp: f64,
        ep: f64,
        skew: f64,
        gated: bool,
    },
    /// `library` is NCCL or the engine's own all-reduce; `bytes` the buffer.
    Collective {
        library: String,
        op: CollectiveOp,
        gpus: f64,
        bytes: f64,
    },
}

#[inline]
fn lg(x: f64) -> f64 {
    x.max(1e-30).log2()
}

impl Shape {
    pub fn family(&self) -> Family {
        match self {
            Shape::Gemm { .. } => Family::Gemm,
            Shape::DecodeAttention { .. } => Family::DecodeAttention,
            Shape::PrefillAttention { .. } => Family::PrefillAttention,
            Shape::Moe { .. } => Family::Moe,
            Shape::Collective { .. } => Family::Collective,
        }
    }

    /// An MoE shard's useful arithmetic, FLOPs: its token-expert pairs (tokens x top-k
    /// over the expert ranks) through one expert's slice (gate and up, then down; two
    /// matrices where not gated), without padding. `None` for other shapes.
    pub fn moe_flops(&self) -> Option<f64> {
        let Shape::Moe {
            tokens,
            hidden,
            inter,
            top_k,
            tp,
            ep,
            gated,
            ..
        } = *self
        else {
            return None;
        };
        let matrices = if gated { 3.0 } else { 2.0 };
        Some(2.0 * tokens * top_k / ep.max(1.0) * hidden * inter / tp.max(1.0) * matrices)
    }

    /// An MoE shard of experts sliced over `tp` GPUs as the shard of whole experts that
    /// does the same work: `experts / (tp x ep)` whole experts on each GPU and its
    /// share of the token-expert pairs (the same arithmetic, and on average the same
    /// weight bytes, as the slice of every expert). `None` for other shapes or an
    /// unsliced shard.
    pub fn moe_whole_experts(&self) -> Option<Shape> {
        let Shape::Moe { tp, ep, .. } = *self else {
            return None;
        };
        if tp <= 1.0 {
            return None;
        }
        let mut whole = self.clone();
        if let Shape::Moe { tp: t, ep: e, .. } = &mut whole {
            *t = 1.0;
            *e = ep.max(1.0) * tp;
        }
        Some(whole)
    }

    /// The fit this shape belongs to within its family: physics parameters and
    /// correction are fitted per key.
    pub fn key(&self) -> String {
        let kv = |f: bool| if f { "fp8" } else { "bf16" };
        match self {
            Shape::Gemm { format, kernel, .. } => format!("{}, {kernel}", format.name()),
            Shape::DecodeAttention {
                kernel,
                head_dim,
                window,
                kv_fp8,
                ..
            } => format!(
                "{kernel}, kv {}, head {head_dim}, {}",
                kv(*kv_fp8),
                if *window > 0.0 { "window" } else { "full" }
            ),
            Shape::PrefillAttention {
                kernel,
                head_dim,
                window,
                fp8,
                kv_fp8,
                ..
            } => format!(
                "{kernel}, {}, kv {}, head {head_dim}, {}",
                kv(*fp8),
                kv(*kv_fp8),
                if *window > 0.0 { "window" } else { "full" }
            ),
            Shape::Moe {
                kernel,
                format,
                skew,
                gated,
                ..
            } => format!(
                "{kernel}, {}, {}, {}",
                format.name(),
                if *skew > 0.0 {
                    format!("power law {skew}")
                } else {
                    "balanced".to_string()
                },
                if *gated { "gated" } else { "non-gated" }
            ),
            Shape::Collective {
                library, op, gpus, ..
            } => format!("{library} {} x{gpus}", op.name()),
        }
    }

    /// The correction grid's coordinates (log2).
    pub fn features(&self) -> Vec<f64> {
        match *self {
            Shape::Gemm { m, n, k, .. } => vec![lg(m), lg(n), lg(k)],
            Shape::DecodeAttention {
                batch,
                heads,
                kv_heads,
                context,
                window,
                ..
            } => vec![
                lg(batch),
                lg(kv_heads),
                lg(effective_context(context, window) + 1.0),
                lg(heads / kv_heads),
            ],
            Shape::PrefillAttention {
                batch, isl, heads, ..
            } => vec![lg(batch), lg(isl), lg(heads)],
            Shape::Moe {
                tokens,
                hidden,
                inter,
                top_k,
                experts,
                tp,
                ep,
                ..
            } => vec![
                lg(tokens * top_k / ep).max(-2.0),
                lg(experts / ep),
                lg(hidden * inter / tp),
                lg(hidden * tp / inter),
            ],
            Shape::Collective { bytes, .. } => vec![lg(bytes)],
        }
    }

    /// The physics price, seconds, with `prep`'s parameters.
    pub fn physics(&self, hw: &Hardware, prep: &Prepared) -> f64 {
        let params = &prep.params[..];
        match *self {
            Shape::Gemm {
                format, m, n, k, ..
            } => gemm_time(hw, prep, format, m, n, k),
            Shape::DecodeAttention {
                batch,
                heads,
                kv_heads,
                head_dim,
                context,
                window,
                kv_fp8,
                ..
            } => decode_attention_time(
                hw, params, batch, heads, kv_heads, head_dim, context, window, kv_fp8,
            ),
            Shape::PrefillAttention {
                batch,
                isl,
                heads,
                kv_heads,
                head_dim,
                window,
                fp8,
                ..
            } => prefill_attention_time(
                hw, params, batch, isl, heads, kv_heads, head_dim, window, fp8,
            ),
            Shape::Moe {
                format,
                tokens,
                hidden,
                inter,
                top_k,
                experts,
                tp,
                ep,
                skew,
                gated,
                ..
            } => moe_time(
                hw,
                prep,
                format,
                tokens,
                hidden,
                inter / tp,
                top_k,
                experts,
                ep,
                skew,
                gated,
            ),
            Shape::Collective {
                op, gpus, bytes, ..
            } => {
                let (fixed, per_peer, eff) = (params[0], params[1], params[2]);
                fixed
                    + per_peer * (gpus - 1.0)
                    + op.bus_bytes(bytes, gpus) / (hw.nvlink.bytes_per_s * eff)
            }
        }
    }

    /// The grid axes covering `shapes` (all of one family), at this family's spacing.
    pub fn axes(shapes: &[&Shape]) -> Vec<Axis> {
        let Some(first) = shapes.first() else {
            return Vec::new();
        };
        let steps = first.family().steps();
        let feats: Vec<Vec<f64>> = shapes.iter().map(|s| s.features()).collect();
        (0..steps.len())
            .map(|d| {
                let (lo, hi) = feats.iter().fold((f64::MAX, f64::MIN), |(lo, hi), f| {
                    (lo.min(f[d]), hi.max(f[d]))
                });
                Axis::covering(lo, hi, steps[d])
            })
            .collect()
    }
}

/// The physics price of a decode attention kernel, seconds.
#[allow(clippy::too_many_arguments)]
fn decode_attention_time(
    hw: &Hardware,
    params: &[f64],
    batch: f64,
    heads: f64,
    kv_heads: f64,
    head_dim: f64,
    context: f64,
    window: f64,
    kv_fp8: bool,
) -> f64 {
    let (me, ce, fixed, p, per_seq) = (params[0], params[1], params[2], params[3], params[4]);
    let ctx = effective_context(context, window);
    let kvb = if kv_fp8 { 1.0 } else { 2.0 };
    let bytes =
        batch * kv_heads * ctx * head_dim * 2.0 * kvb + batch * heads * head_dim * 2.0 * 2.0;
    let flops = 4.0 * batch * heads * ctx * head_dim;
    let t_m = bytes / (hw.hbm.bytes_per_s * me);
    let t_c = flops / (hw.tensor.bf16_flops_per_s * ce);
    gemm::soft_max(t_c, t_m, p) + fixed + per_seq * batch
}

/// The physics price of a prefill attention kernel, seconds.
#[allow(clippy::too_many_arguments)]
fn prefill_attention_time(
    hw: &Hardware,
    params: &[f64],
    batch: f64,
    isl: f64,
    heads: f64,
    kv_heads: f64,
    head_dim: f64,
    window: f64,
    fp8: bool,
) -> f64 {
    let (ce, me, fixed, diag, p) = (params[0], params[1], params[2], params[3], params[4]);
    let pairs = if window > 0.0 && window < isl {
        isl * window - window * window / 2.0
    } else {
        isl * isl / 2.0
    };
    let flops = 4.0 * batch * heads * head_dim * pairs;
    let rate = if fp8 {
        hw.tensor.fp8_flops_per_s
    } else {
        hw.tensor.bf16_flops_per_s
    };
    let eff = ce * isl / (isl + diag);
    let bytes = batch * isl * (2.0 * heads + 2.0 * kv_heads) * head_dim * 2.0;
    let t_c = flops / (rate * eff);
    let t_m = bytes / (hw.hbm.bytes_per_s * me);
    gemm::soft_max(t_c, t_m, p) + fixed
}

/// Keys a decode kernel reads: the window, when there is one.
pub fn effective_context(context: f64, window: f64) -> f64 {
    if window > 0.0 {
        context.min(window)
    } else {
        context
    }
}

/// A family's physics parameters (in [`Family::params`] order), ready to price with.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub params: Vec<f64>,
    roof: SoftMax,
}

impl Prepared {
    pub fn new(family: Family, params: Vec<f64>) -> Prepared {
        let p = match family {
            Family::Gemm | Family::Moe => params[6],
            _ => 1.0,
        };
        Prepared {
            params,
            roof: SoftMax::new(p),
        }
    }
}

/// The tile model's rates from parameters in the GEMM order (compute_eff, mem_eff,
/// fixed_s, small_tile_eff, load_bytes_per_flop, epilogue_k, overlap_p).
fn tile_rates(params: &[f64]) -> (OpRate, TileParams) {
    (
        OpRate::new(params[1], params[0], params[2]),
        TileParams {
            load_bytes_per_flop: params[4],
            epilogue_k: params[5],
            small_tile_eff: params[3],
            overlap_p: params[6],
        },
    )
}

/// One GPU's MoE shard as its two grouped GEMMs (gate and up fused, then down) over the
/// experts that receive tokens, in the tile model: contiguous layout, each expert's
/// rows padded to its row tiles, plus a routing cost per token-expert pair (permute,
/// activation, unpermute) and a cost per active expert.
#[allow(clippy::too_many_arguments)]
fn moe_time(
    hw: &Hardware,
    prep: &Prepared,
    format: Format,
    tokens: f64,
    hidden: f64,
    inter: f64,
    top_k: f64,
    experts: f64,
    ep: f64,
    skew: f64,
    gated: bool,
) -> f64 {
    let params = &prep.params[..];
    let (mut rate, tile) = tile_rates(params);
    rate.fixed_s = 0.0;
    let local = (experts / ep).max(1.0);
    let pairs = tokens * top_k / ep;
    let touched = (local * (1.0 - (1.0 - 1.0 / experts).powf(tokens * top_k))).max(1.0);
    // Skewed loads: the groups' rows scatter (padding as for unequal counts).
    let m = (pairs / touched).max(1.0);
    let up = if gated { 2.0 * inter } else { inter };
    let g = |n: f64, k: f64| Gemm {
        kind: GemmKind::Contiguous,
        groups: touched,
        m,
        n,
        k,
        a_bytes: format.act_bytes(),
        b_bytes: format.weight_bytes(),
        out_bytes: 2.0,
        rate: format.rate(hw),
        rows_vary: skew > 0.0 || m > 1.0,
    };
    let dev = KernelDevice::of(hw);
    let t = gemm::time(&g(up, hidden), &dev, &rate, &tile, &prep.roof).s
        + gemm::time(&g(hidden, inter), &dev, &rate, &tile, &prep.roof).s;
    t + params[2] + params[7] * touched + params[8] * pairs * hidden / 1024.0
}

fn gemm_time(hw: &Hardware, prep: &Prepared, format: Format, m: f64, n: f64, k: f64) -> f64 {
    let params = &prep.params[..];
    let (rate, tile) = tile_rates(params);
    let g = Gemm {
        kind: GemmKind::Dense,
        groups: 1.0,
        m,
        n,
        k,
        a_bytes: format.act_bytes(),
        b_bytes: format.weight_bytes(),
        out_bytes: 2.0,
        rate: format.rate(hw),
        rows_vary: false,
    };
    let t = gemm::time(&g, &KernelDevice::of(hw), &rate, &tile, &prep.roof).s;
    if format.quantises() {
        let q_bytes = m * k * (2.0 + format.act_bytes());
        t + params[7] + q_bytes / (hw.hbm.bytes_per_s * params[1])
    } else {
        t
    }
}

#[cfg(test)]
mod tests;
