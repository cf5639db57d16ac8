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

use super::grid::Axis;
use crate::cost::kernels::gemm::{self, Device, Gemm, GemmKind, SoftMax};
use crate::cost::params::{OpRate, TileParams};
use crate::units::Dtype;
use crate::Hardware;
use serde::{Deserialize, Serialize};

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

/// Operand formats of the tables' GEMMs and MoE layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Bf16,
    /// FP8 with per-tensor scales.
    Fp8,
    /// FP8 with 1x128 activation and 128x128 weight block scales.
    Fp8Block,
    /// NVFP4: FP4 values, an FP8 scale per 16.
    Nvfp4,
    /// MXFP4 weights (an 8-bit scale per 32) with BF16 activations.
    W4a16Mxfp4,
    /// MXFP4 weights with FP8 activations.
    W4a8Mxfp4,
    /// INT4 weights (a BF16 scale per 128) with BF16 activations.
    Int4Wo,
}

impl Format {
    /// The format of a GEMM with `a` bytes per activation and `b` per weight (scales
    /// in), as the step model builds it; `None` for mixed formats the tables' dense
    /// GEMMs do not time.
    pub fn of_gemm(a: f64, b: f64) -> Option<Format> {
        match (a, b) {
            (a, b) if a >= 1.9 && b >= 1.9 => Some(Format::Bf16),
            (a, b) if (0.9..1.2).contains(&a) && b == 1.0 => Some(Format::Fp8),
            (a, b) if (0.9..1.2).contains(&a) && b > 1.0 && b < 1.2 => Some(Format::Fp8Block),
            (a, b) if a < 0.7 && b < 0.7 => Some(Format::Nvfp4),
            _ => None,
        }
    }

    /// The tables' name of the format.
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "bfloat16" | "bf16" | "float16" => Format::Bf16,
            "fp8" => Format::Fp8,
            "fp8_block" => Format::Fp8Block,
            "nvfp4" => Format::Nvfp4,
            "w4a16_mxfp4" => Format::W4a16Mxfp4,
            "w4a8_mxfp4_fp8" | "w4a8_mxfp4_mxfp8" | "w4a8_mxfp4" => Format::W4a8Mxfp4,
            "int4_wo" => Format::Int4Wo,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Bf16 => "bfloat16",
            Format::Fp8 => "fp8",
            Format::Fp8Block => "fp8_block",
            Format::Nvfp4 => "nvfp4",
            Format::W4a16Mxfp4 => "w4a16_mxfp4",
            Format::W4a8Mxfp4 => "w4a8_mxfp4",
            Format::Int4Wo => "int4_wo",
        }
    }

    /// Bytes per activation element entering the GEMM (scales in).
    pub fn act_bytes(self) -> f64 {
        match self {
            Format::Bf16 | Format::W4a16Mxfp4 | Format::Int4Wo => 2.0,
            Format::Fp8 => 1.0,
            Format::Fp8Block => 1.0 + 4.0 / 128.0,
            Format::Nvfp4 => 0.5 + 1.0 / 16.0,
            Format::W4a8Mxfp4 => 1.0,
        }
    }

    /// Bytes per weight element (scales in).
    pub fn weight_bytes(self) -> f64 {
        match self {
            Format::Bf16 => 2.0,
            Format::Fp8 => 1.0,
            Format::Fp8Block => 1.0 + 4.0 / (128.0 * 128.0),
            Format::Nvfp4 => 0.5 + 1.0 / 16.0,
            Format::W4a16Mxfp4 | Format::W4a8Mxfp4 => 0.5 + 1.0 / 32.0,
            Format::Int4Wo => 0.5 + 2.0 / 128.0,
        }
    }

    /// The tensor rate it runs at.
    pub fn rate(self, hw: &Hardware) -> f64 {
        let d = match self {
            Format::Bf16 | Format::W4a16Mxfp4 | Format::Int4Wo => Dtype::Bf16,
            Format::Fp8 | Format::Fp8Block | Format::W4a8Mxfp4 => Dtype::Fp8,
            Format::Nvfp4 => Dtype::Fp4,
        };
        hw.tensor.flops_per_s(d)
    }

    /// Whether the engine quantises BF16 activations before the GEMM.
    pub fn quantises(self) -> bool {
        !matches!(self, Format::Bf16 | Format::W4a16Mxfp4 | Format::Int4Wo)
    }
}

/// A collective's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveOp {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
}

impl CollectiveOp {
    pub fn parse(s: &str) -> Option<CollectiveOp> {
        Some(match s {
            "all_reduce" => CollectiveOp::AllReduce,
            "all_gather" => CollectiveOp::AllGather,
            "reduce_scatter" => CollectiveOp::ReduceScatter,
            "alltoall" | "all_to_all" => CollectiveOp::AllToAll,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "all_reduce",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter => "reduce_scatter",
            CollectiveOp::AllToAll => "alltoall",
        }
    }

    /// Bytes one GPU sends for a buffer of `bytes` over `n` GPUs (NCCL's bus bytes).
    pub fn bus_bytes(self, bytes: f64, n: f64) -> f64 {
        let share = (n - 1.0) / n;
        match self {
            CollectiveOp::AllReduce => 2.0 * share * bytes,
            _ => share * bytes,
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

    /// The correction grid's node spacing per axis (log2 units).
    pub fn steps(&self) -> Vec<f64> {
        match self.family() {
            Family::Gemm => vec![1.0, 1.0, 1.0],
            Family::DecodeAttention => vec![2.0, 2.0, 1.0, 2.0],
            Family::PrefillAttention => vec![1.0, 1.0, 1.0],
            Family::Moe => vec![2.0, 2.0, 2.0, 2.0],
            Family::Collective => vec![1.0],
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
            } => {
                let (me, ce, fixed, p, per_seq) =
                    (params[0], params[1], params[2], params[3], params[4]);
                let ctx = effective_context(context, window);
                let kvb = if kv_fp8 { 1.0 } else { 2.0 };
                let bytes = batch * kv_heads * ctx * head_dim * 2.0 * kvb
                    + batch * heads * head_dim * 2.0 * 2.0;
                let flops = 4.0 * batch * heads * ctx * head_dim;
                let t_m = bytes / (hw.hbm.bytes_per_s * me);
                let t_c = flops / (hw.tensor.bf16_flops_per_s * ce);
                gemm::soft_max(t_c, t_m, p) + fixed + per_seq * batch
            }
            Shape::PrefillAttention {
                batch,
                isl,
                heads,
                kv_heads,
                head_dim,
                window,
                fp8,
                ..
            } => {
                let (ce, me, fixed, diag, p) =
                    (params[0], params[1], params[2], params[3], params[4]);
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
        let steps = first.steps();
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
    let dev = Device::of(hw);
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
    let t = gemm::time(&g, &Device::of(hw), &rate, &tile, &prep.roof).s;
    if format.quantises() {
        let q_bytes = m * k * (2.0 + format.act_bytes());
        t + params[7] + q_bytes / (hw.hbm.bytes_per_s * params[1])
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round-number GPU: 100 SMs, 1 TB/s of HBM, 1 PFLOP/s BF16 and 2 FP8, 100 GB/s
    /// of NVLink.
    fn gpu() -> Hardware {
        let mut h: Hardware =
            toml::from_str(include_str!("../../../../scenarios/hardware/h200.toml")).unwrap();
        h.sms = 100;
        h.hbm.bytes_per_s = 1e12;
        h.tensor.bf16_flops_per_s = 1e15;
        h.tensor.fp8_flops_per_s = 2e15;
        h.nvlink.bytes_per_s = 1e11;
        h
    }

    fn prep(family: Family, set: &[(&str, f64)]) -> Prepared {
        let params = family
            .params()
            .iter()
            .map(|p| set.iter().find(|s| s.0 == p.0).map_or(p.1, |s| s.1))
            .collect();
        Prepared::new(family, params)
    }

    fn gemm(format: Format, m: f64, n: f64, k: f64) -> Shape {
        Shape::Gemm {
            kernel: String::new(),
            format,
            m,
            n,
            k,
        }
    }

    #[test]
    fn fp8_gemms_pay_for_quantising_their_activations() {
        // The engines' FP8 GEMMs quantise BF16 activations first: a read of 2 bytes and
        // a write of 1 per activation element, at mem_eff of HBM, plus a launch.
        // M = 1024, K = 4096: 1024 * 4096 * 3 B = 12.582912 MB at 0.5 TB/s = 25.165824
        // us, plus quant_s 2 us, on top of the tile model's price.
        let hw = gpu();
        let p = prep(Family::Gemm, &[("mem_eff", 0.5), ("quant_s", 2e-6)]);
        let fp8 = gemm(Format::Fp8, 1024.0, 4096.0, 4096.0).physics(&hw, &p);
        let (rate, tile) = tile_rates(&p.params);
        let g = Gemm {
            kind: GemmKind::Dense,
            groups: 1.0,
            m: 1024.0,
            n: 4096.0,
            k: 4096.0,
            a_bytes: 1.0,
            b_bytes: 1.0,
            out_bytes: 2.0,
            rate: 2e15,
            rows_vary: false,
        };
        let tile_only = gemm::time(&g, &Device::of(&hw), &rate, &tile, &p.roof).s;
        assert!(
            (fp8 - tile_only - 27.165824e-6).abs() < 1e-12,
            "{}",
            fp8 - tile_only
        );
        // BF16 operands need no quantisation.
        assert!(!Format::Bf16.quantises() && Format::Fp8Block.quantises());
    }

    #[test]
    fn gemm_time_steps_with_row_tiles() {
        // Compute-bound (HBM made fast): 65 rows need a 128-row tile where 64 rows fit a
        // 64-row one, so the price jumps between them and stays flat up to 128 rows (one
        // tile row).
        let mut hw = gpu();
        hw.hbm.bytes_per_s = 1e16;
        let p = prep(Family::Gemm, &[("small_tile_eff", 1.0), ("fixed_s", 1e-7)]);
        let t = |m| gemm(Format::Bf16, m, 1024.0, 65536.0).physics(&hw, &p);
        assert!(t(65.0) > 1.5 * t(64.0), "{} {}", t(65.0), t(64.0));
        assert!(
            (t(128.0) / t(100.0) - 1.0).abs() < 0.02,
            "{} {}",
            t(128.0),
            t(100.0)
        );
    }

    #[test]
    fn small_collectives_cost_their_latency() {
        // fixed 10 us + 1 us per peer; 7 peers: 17 us however few bytes. 8 GPUs
        // all-reduce 8 MB: bus bytes 2 * 7/8 * 8 MB = 14 MB at 0.5 * 100 GB/s = 280 us.
        let hw = gpu();
        let p = prep(
            Family::Collective,
            &[("fixed_s", 10e-6), ("per_peer_s", 1e-6), ("link_eff", 0.5)],
        );
        let c = |op, bytes| Shape::Collective {
            library: "nccl half".into(),
            op,
            gpus: 8.0,
            bytes,
        };
        let tiny = c(CollectiveOp::AllReduce, 16.0).physics(&hw, &p);
        assert!((tiny - 17e-6).abs() < 1e-9, "{tiny}");
        let big = c(CollectiveOp::AllReduce, 8e6).physics(&hw, &p);
        assert!((big - (17e-6 + 280e-6)).abs() < 1e-12, "{big}");
        // An all-gather moves half the all-reduce's bus bytes.
        let ag = c(CollectiveOp::AllGather, 8e6).physics(&hw, &p);
        assert!((ag - (17e-6 + 140e-6)).abs() < 1e-12, "{ag}");
    }

    #[test]
    fn decode_attention_reads_the_window_in_its_kv_dtype() {
        // Batch 8, 8 KV heads of 128, 4096 cached tokens, BF16 KV: 8 * 8 * 4096 * 128 *
        // 2 (K and V) * 2 B = 134.217728 MB, plus Q and O (8 * 32 heads * 128 * 2 * 2 B =
        // 131072 B), at 0.5 TB/s: 268.697 us. A 1024-token window reads a quarter of
        // the KV; FP8 KV half of it. Memory-bound (p large, compute negligible).
        let hw = gpu();
        let p = prep(
            Family::DecodeAttention,
            &[
                ("mem_eff", 0.5),
                ("compute_eff", 1.0),
                ("fixed_s", 1e-7),
                ("overlap_p", 8.0),
                ("per_seq_s", 1e-10),
            ],
        );
        let a = |window, kv_fp8| Shape::DecodeAttention {
            kernel: String::new(),
            batch: 8.0,
            heads: 32.0,
            kv_heads: 8.0,
            head_dim: 128.0,
            context: 4096.0,
            window,
            kv_fp8,
        };
        let q_o = 131072.0;
        let full = a(0.0, false).physics(&hw, &p);
        let want = (134217728.0 + q_o) / 0.5e12;
        assert!((full / want - 1.0).abs() < 0.01, "{full} {want}");
        let win = a(1024.0, false).physics(&hw, &p);
        assert!((win / ((134217728.0 / 4.0 + q_o) / 0.5e12) - 1.0).abs() < 0.01);
        let fp8 = a(0.0, true).physics(&hw, &p);
        assert!((fp8 / ((134217728.0 / 2.0 + q_o) / 0.5e12) - 1.0).abs() < 0.01);
    }

    #[test]
    fn windowed_prefill_computes_a_band() {
        // 4096 tokens, a 1024 window: 4096 * 1024 - 1024^2 / 2 = 3,670,016 query-key
        // pairs against 4096^2 / 2 = 8,388,608 causal: compute-bound, so the price
        // scales by their ratio (diag_tokens ~0, fixed ~0; HBM made fast).
        let mut hw = gpu();
        hw.hbm.bytes_per_s = 1e16;
        let p = prep(
            Family::PrefillAttention,
            &[("diag_tokens", 1.0), ("fixed_s", 1e-7), ("overlap_p", 8.0)],
        );
        let a = |window| Shape::PrefillAttention {
            kernel: String::new(),
            batch: 1.0,
            isl: 4096.0,
            heads: 32.0,
            kv_heads: 8.0,
            head_dim: 128.0,
            window,
            fp8: false,
            kv_fp8: false,
        };
        let r = a(1024.0).physics(&hw, &p) / a(0.0).physics(&hw, &p);
        assert!((r - 3670016.0 / 8388608.0).abs() < 0.01, "{r}");
    }

    #[test]
    fn moe_weights_of_touched_experts_only() {
        // One token, top-2 of 64 experts on one GPU: two experts hold rows, so at small
        // batch the shard reads about 2 experts' weights, not 64; many tokens touch all.
        let hw = gpu();
        let p = prep(Family::Moe, &[]);
        let m = |tokens| Shape::Moe {
            kernel: String::new(),
            format: Format::Bf16,
            tokens,
            hidden: 4096.0,
            inter: 1024.0,
            top_k: 2.0,
            experts: 64.0,
            tp: 1.0,
            ep: 1.0,
            skew: 0.0,
            gated: true,
        };
        let one = m(1.0).physics(&hw, &p);
        let many = m(4096.0).physics(&hw, &p);
        // 64 experts' weights: 64 * 3 * 4096 * 1024 * 2 B = 1.61 GB at <= 1 TB/s >= 1.6 ms.
        assert!(many > 1.6e-3, "{many}");
        assert!(one < many / 10.0, "{one} {many}");
        assert_eq!(
            Format::of_gemm(1.0, 1.0 + 4.0 / 16384.0),
            Some(Format::Fp8Block)
        );
        assert_eq!(Format::of_gemm(2.0, 2.0), Some(Format::Bf16));
        assert_eq!(Format::of_gemm(2.0, 0.5), None);
    }
}
