//! The numbers the analytic cost model multiplies datasheets by. Defaults are documented
//! one by one; a calibration profile replaces them with values measured on a real device
//! (as fractions of that device's own measured peaks, so they carry to other hardware
//! through datasheet ratios).

use serde::{Deserialize, Serialize};

/// How well one operation uses the hardware, and what it costs regardless of size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OpRate {
    /// Achieved fraction of the datasheet memory bandwidth (HBM, or the host link for
    /// host-resident data, or the network for communication).
    pub mem_eff: f64,
    /// Achieved fraction of the datasheet tensor throughput for the operation's dtype.
    pub compute_eff: f64,
    /// Fixed cost per launch of the operation (per layer), seconds.
    pub fixed_s: f64,
}

impl OpRate {
    pub const fn new(mem_eff: f64, compute_eff: f64, fixed_s: f64) -> Self {
        OpRate { mem_eff, compute_eff, fixed_s }
    }
}

/// Efficiency factors and fixed costs of every operation the cost model prices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostParams {
    /// Where these numbers come from ("analytic defaults", a profile path and hash).
    pub source: String,
    /// Routed-expert FFN: streaming expert weights and grouped GEMMs.
    pub moe: OpRate,
    /// Dense GEMMs: attention projections, shared experts, dense FFN, LM head.
    pub gemm: OpRate,
    /// Attention over the KV cache.
    pub attention: OpRate,
    /// Sparse-attention indexer.
    pub indexer: OpRate,
    /// Engram gathers (mem_eff applies to the host link or HBM bandwidth).
    pub gather: OpRate,
    /// Dispatch/combine all-to-all (mem_eff applies to link bandwidth; fixed_s per
    /// collective call on top of the link latency).
    pub comm: OpRate,
    /// Element-wise and normalisation traffic (mHC, norms): mem_eff of HBM bandwidth.
    pub elementwise: OpRate,
    /// Fixed cost per layer for synchronisation and small kernels, per phase, seconds.
    pub layer_fixed_decode_s: f64,
    pub layer_fixed_prefill_s: f64,
    /// Fixed cost per step (scheduling, sampling, graph launch), per phase, seconds.
    pub step_fixed_decode_s: f64,
    pub step_fixed_prefill_s: f64,
}

impl Default for CostParams {
    /// Analytic defaults. Each is a first-order figure from public practice, marked so:
    /// - moe.mem_eff 0.85: grouped-GEMM kernels that stream expert weights reach 80-90%
    ///   of HBM bandwidth (DeepGEMM and CUTLASS reports); assumed.
    /// - moe.compute_eff / gemm.compute_eff 0.55: large FP8/FP4 GEMMs reach 55-75% of
    ///   dense peak; H200 bf16 measured 790 of 989 TFLOP/s on one card (reference
    ///   notes); assumed lower for grouped and skinny shapes.
    /// - attention.mem_eff 0.80 and compute_eff 0.45: FlashMLA-class decode kernels
    ///   reach about 80% of bandwidth; prefill attention well below GEMM peak; assumed.
    /// - indexer 0.80 / 0.45: same class of kernels as attention; assumed.
    /// - gather.mem_eff 0.40: random 256-byte rows reach well under half of a link's
    ///   streaming bandwidth; assumed.
    /// - comm.mem_eff 0.75, fixed 8 us: DeepEP-style all-to-all over NVLink reaches
    ///   70-80% of link bandwidth with a few microseconds per call; assumed.
    /// - elementwise.mem_eff 0.85: bandwidth-bound element-wise kernels; assumed.
    /// - per-layer and per-step fixed costs: see the published-figure fit
    ///   (`twin validate published --fit`); these defaults are assumed until fitted.
    fn default() -> Self {
        CostParams {
            source: "analytic defaults".to_string(),
            moe: OpRate::new(0.85, 0.55, 4e-6),
            gemm: OpRate::new(0.85, 0.55, 3e-6),
            attention: OpRate::new(0.80, 0.45, 3e-6),
            indexer: OpRate::new(0.80, 0.45, 3e-6),
            gather: OpRate::new(0.40, 0.0, 2e-6),
            comm: OpRate::new(0.75, 0.0, 8e-6),
            elementwise: OpRate::new(0.85, 0.0, 1e-6),
            layer_fixed_decode_s: 20e-6,
            layer_fixed_prefill_s: 40e-6,
            step_fixed_decode_s: 300e-6,
            step_fixed_prefill_s: 1e-3,
        }
    }
}
