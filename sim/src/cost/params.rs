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
        OpRate {
            mem_eff,
            compute_eff,
            fixed_s,
        }
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
    /// All-to-all cost per remote peer per dispatch or combine (message setup and
    /// signalling that grow with the group), seconds.
    pub comm_per_peer_s: f64,
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
    /// - attention.mem_eff 0.85 and compute_eff 0.65: FlashMLA reports about 3000 GB/s
    ///   memory-bound (of 3350) and 660 TFLOP/s compute-bound (of 989 BF16) on H800;
    ///   derived from those public kernel figures.
    /// - indexer 0.85 / 0.60: DeepGEMM's FP8 MQA-logits kernels, the same class;
    ///   assumed slightly below attention.
    /// - gather.mem_eff 0.40: random 256-byte rows reach well under half of a link's
    ///   streaming bandwidth; assumed.
    /// - comm.mem_eff 0.75, fixed 8 us: DeepEP-style all-to-all over NVLink reaches
    ///   70-80% of link bandwidth with a few microseconds per call; assumed.
    /// - comm_per_peer_s 0.5 us: per-destination signalling of a low-latency
    ///   all-to-all, serial (not hidden by overlap); assumed until fitted.
    /// - elementwise.mem_eff 0.85: bandwidth-bound element-wise kernels; assumed.
    /// - per-layer and per-step fixed costs: see the published-figure fit
    ///   (`twin validate published --fit`); these defaults are assumed until fitted.
    fn default() -> Self {
        CostParams {
            source: "analytic defaults".to_string(),
            moe: OpRate::new(0.85, 0.55, 4e-6),
            gemm: OpRate::new(0.85, 0.55, 3e-6),
            attention: OpRate::new(0.85, 0.65, 3e-6),
            indexer: OpRate::new(0.85, 0.60, 3e-6),
            gather: OpRate::new(0.40, 0.0, 2e-6),
            comm: OpRate::new(0.75, 0.0, 8e-6),
            elementwise: OpRate::new(0.85, 0.0, 1e-6),
            comm_per_peer_s: 0.5e-6,
            layer_fixed_decode_s: 20e-6,
            layer_fixed_prefill_s: 40e-6,
            step_fixed_decode_s: 300e-6,
            step_fixed_prefill_s: 1e-3,
        }
    }
}

impl CostParams {
    /// Every key `set` accepts.
    pub const KEYS: [&'static str; 26] = [
        "moe.mem_eff",
        "moe.compute_eff",
        "moe.fixed_s",
        "gemm.mem_eff",
        "gemm.compute_eff",
        "gemm.fixed_s",
        "attention.mem_eff",
        "attention.compute_eff",
        "attention.fixed_s",
        "indexer.mem_eff",
        "indexer.compute_eff",
        "indexer.fixed_s",
        "gather.mem_eff",
        "gather.compute_eff",
        "gather.fixed_s",
        "comm.mem_eff",
        "comm.compute_eff",
        "comm.fixed_s",
        "elementwise.mem_eff",
        "elementwise.compute_eff",
        "elementwise.fixed_s",
        "comm_per_peer_s",
        "layer_fixed_decode_s",
        "layer_fixed_prefill_s",
        "step_fixed_decode_s",
        "step_fixed_prefill_s",
    ];

    fn slot(&mut self, key: &str) -> Option<&mut f64> {
        let (group, field) = match key.split_once('.') {
            Some((g, f)) => (g, Some(f)),
            None => (key, None),
        };
        let rate = match (group, field) {
            ("comm_per_peer_s", None) => return Some(&mut self.comm_per_peer_s),
            ("layer_fixed_decode_s", None) => return Some(&mut self.layer_fixed_decode_s),
            ("layer_fixed_prefill_s", None) => return Some(&mut self.layer_fixed_prefill_s),
            ("step_fixed_decode_s", None) => return Some(&mut self.step_fixed_decode_s),
            ("step_fixed_prefill_s", None) => return Some(&mut self.step_fixed_prefill_s),
            ("moe", Some(_)) => &mut self.moe,
            ("gemm", Some(_)) => &mut self.gemm,
            ("attention", Some(_)) => &mut self.attention,
            ("indexer", Some(_)) => &mut self.indexer,
            ("gather", Some(_)) => &mut self.gather,
            ("comm", Some(_)) => &mut self.comm,
            ("elementwise", Some(_)) => &mut self.elementwise,
            _ => return None,
        };
        match field {
            Some("mem_eff") => Some(&mut rate.mem_eff),
            Some("compute_eff") => Some(&mut rate.compute_eff),
            Some("fixed_s") => Some(&mut rate.fixed_s),
            _ => None,
        }
    }

    /// Reads one parameter by key.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.clone().slot(key).map(|v| *v)
    }

    /// Sets one parameter by key; efficiencies must lie in (0, 1], fixed costs in
    /// [0, 1 s).
    pub fn set(&mut self, key: &str, value: f64) -> Result<(), String> {
        let is_eff = key.ends_with("_eff");
        let slot = self.slot(key).ok_or_else(|| {
            format!(
                "unknown cost parameter `{key}` (known: {})",
                Self::KEYS.join(", ")
            )
        })?;
        if !value.is_finite() {
            return Err(format!("cost parameter `{key}` must be a finite number"));
        }
        if is_eff && !(value > 0.0 && value <= 1.0) {
            return Err(format!("efficiency `{key}` = {value} must lie in (0, 1]"));
        }
        if !is_eff && !(0.0..1.0).contains(&value) {
            return Err(format!(
                "fixed cost `{key}` = {value} s must lie in [0, 1) seconds"
            ));
        }
        *slot = value;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_round_trips() {
        let mut p = CostParams::default();
        for (i, k) in CostParams::KEYS.iter().enumerate() {
            let v = if k.ends_with("_eff") {
                0.5 + i as f64 / 100.0
            } else {
                i as f64 * 1e-6
            };
            p.set(k, v).unwrap();
            assert_eq!(p.get(k), Some(v), "{k}");
        }
        assert!(p.set("moe.speed", 1.0).is_err());
        assert!(p.set("moe.mem_eff", 1.5).is_err());
        assert!(p.set("layer_fixed_decode_s", -1.0).is_err());
    }
}
