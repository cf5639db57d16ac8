//! Attention and indexer kernels: a roofline per kernel class, with efficiencies from
//! FlashMLA's and cuDNN's published figures (dense and sparse, decode and prefill,
//! Hopper and Blackwell; see `CostParams`).
//!
//! - Decode reads each request's KV (dense: every entry; sparse: the selected top-k)
//!   and is memory-bound unless many query heads and tokens share each entry
//!   (FlashMLA's rule: compute-bound when `h_q * s_q >= rate / (2 * bandwidth)`).
//! - Causal prefill wastes part of its diagonal tiles: the efficiency at a sequence of
//!   `s` query tokens is `compute_eff * s / (s + prefill_diag_tokens)`.

use crate::cost::kernels::gemm::KernelTime;
use crate::cost::params::{CostParams, OpRate};
use crate::cost::{Bound, Phase};

/// Which kernel class runs the attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnKernel {
    /// Dense attention over every stored (or compressed, or window) entry.
    Dense,
    /// Attention over the indexer's top-k selection.
    Sparse,
    /// A recurrent mixer's state update (decode) or chunked scan (prefill): gated
    /// DeltaNet, Mamba-2.
    Recurrent,
}

/// The efficiency class for a kernel in a phase (dense decode: of the FlashMLA release
/// priced).
pub fn rate(p: &CostParams, kernel: AttnKernel, phase: Phase) -> OpRate {
    match (phase, kernel) {
        (Phase::Decode, AttnKernel::Dense) => p.dense_decode_attention(),
        (Phase::Decode, AttnKernel::Sparse) => p.attention_sparse,
        (Phase::Prefill, AttnKernel::Dense) => p.attention_prefill,
        (Phase::Prefill, AttnKernel::Sparse) => p.attention_sparse_prefill,
        (Phase::Decode, AttnKernel::Recurrent) => p.recurrent,
        (Phase::Prefill, AttnKernel::Recurrent) => p.recurrent_prefill,
    }
}

/// `max(bytes / (bw * mem_eff), flops / (rate * compute_eff * eff_scale))`.
pub fn roofline(
    bytes: f64,
    bw: f64,
    flops: f64,
    peak: f64,
    r: &OpRate,
    eff_scale: f64,
) -> KernelTime {
    let memory_s = if bytes > 0.0 {
        bytes / (bw * r.mem_eff)
    } else {
        0.0
    };
    let compute_s = if flops > 0.0 {
        flops / (peak * r.compute_eff * eff_scale)
    } else {
        0.0
    };
    KernelTime {
        s: memory_s.max(compute_s),
        compute_s,
        memory_s,
        flops,
        bytes,
        bound: if compute_s > memory_s {
            Bound::Compute
        } else if bytes > 0.0 {
            Bound::Memory
        } else {
            Bound::None
        },
    }
}

/// One attention kernel's work: its class and phase, `bytes` of KV and queries read,
/// `flops` of score and value products, `seq_tokens` query tokens per sequence
/// (prefill's diagonal waste).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnWork {
    pub kernel: AttnKernel,
    pub phase: Phase,
    pub bytes: f64,
    pub flops: f64,
    pub seq_tokens: f64,
}

/// One attention kernel's time (without its launch cost) for `w` on a GPU that reads
/// `hbm_bytes_per_s` and computes `peak_flops_per_s` at the kernel's width.
#[inline]
pub fn time(
    p: &CostParams,
    w: &AttnWork,
    hbm_bytes_per_s: f64,
    peak_flops_per_s: f64,
) -> KernelTime {
    let AttnWork {
        kernel,
        phase,
        bytes,
        flops,
        seq_tokens,
    } = *w;
    let r = rate(p, kernel, phase);
    let scale = match (phase, kernel) {
        (Phase::Prefill, AttnKernel::Dense) if seq_tokens > 0.0 => {
            seq_tokens / (seq_tokens + p.prefill_diag_tokens)
        }
        _ => 1.0,
    };
    roofline(bytes, hbm_bytes_per_s, flops, peak_flops_per_s, &r, scale)
}

#[cfg(test)]
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    #[test]
    fn decode_is_memory_bound_until_heads_share_entries() {
        // FlashMLA's rule on a round GPU: 1e15 flop/s, 1e12 B/s, ideal efficiencies.
        // 128 requests x 4096 entries x 1152 B = 604 MB: 604 us; flops with 16 heads,
        // one query: 2 * 16 * 4096 * 128 * (576 + 512) = 18.3 GFLOP: 18 us.
        let mut p = CostParams::default();
        p.attention = OpRate::new(1.0, 1.0, 0.0);
        let bytes = 128.0 * 4096.0 * 1152.0;
        let flops = 2.0 * 16.0 * 4096.0 * 128.0 * 1088.0;
        let decode = |p: &CostParams, flops: f64, peak_flops_per_s: f64| {
            let w = AttnWork {
                kernel: AttnKernel::Dense,
                phase: Phase::Decode,
                bytes,
                flops,
                seq_tokens: 1.0,
            };
            time(p, &w, 1e12, peak_flops_per_s)
        };
        let k = decode(&p, flops, 1e15);
        assert!((k.s - bytes / 1e12).abs() < 1e-15);
        assert_eq!(k.bound, Bound::Memory);
        // 128 heads x 2 queries: 16x the flops, 293 us... still below 604 us; at 1e14
        // flop/s it is compute-bound.
        let k = decode(&p, 16.0 * flops, 1e14);
        assert_eq!(k.bound, Bound::Compute);
        assert!((k.s - 16.0 * flops / 1e14).abs() < 1e-15);
        // FlashMLA before its 2025-04-22 update: compute-bound work at the initial
        // release's efficiency (0.8 here: 1.25x the time), memory-bound work unchanged.
        p.attention_compute_eff_initial = 0.8;
        p.flashmla_release = 20250221.0;
        let k = decode(&p, 16.0 * flops, 1e14);
        assert!((k.s - 16.0 * flops / 0.8e14).abs() < 1e-15);
        assert!((decode(&p, flops, 1e15).s - bytes / 1e12).abs() < 1e-15);
        // The sparse kernel is not FlashMLA's dense one.
        let sparse = AttnWork {
            kernel: AttnKernel::Sparse,
            phase: Phase::Decode,
            bytes: 0.0,
            flops,
            seq_tokens: 1.0,
        };
        assert_eq!(
            rate(&p, AttnKernel::Sparse, Phase::Decode),
            p.attention_sparse
        );
        assert_eq!(
            time(&p, &sparse, 1e12, 1e15).compute_s,
            flops / (1e15 * p.attention_sparse.compute_eff)
        );
    }

    #[test]
    fn prefill_diagonal_waste() {
        // 1000 diag tokens at 3000 query tokens: efficiency x 3/4.
        let mut p = CostParams::default();
        p.attention_prefill = OpRate::new(1.0, 0.8, 0.0);
        p.prefill_diag_tokens = 1000.0;
        let prefill = |p: &CostParams, kernel| {
            time(
                p,
                &AttnWork {
                    kernel,
                    phase: Phase::Prefill,
                    bytes: 0.0,
                    flops: 6e12,
                    seq_tokens: 3000.0,
                },
                1e12,
                1e15,
            )
        };
        let k = prefill(&p, AttnKernel::Dense);
        assert!((k.s - 6e12 / (1e15 * 0.8 * 0.75)).abs() < 1e-12);
        // Sparse prefill has no diagonal term.
        p.attention_sparse_prefill = OpRate::new(1.0, 0.8, 0.0);
        let k = prefill(&p, AttnKernel::Sparse);
        assert!((k.s - 6e12 / (1e15 * 0.8)).abs() < 1e-12);
    }
}
