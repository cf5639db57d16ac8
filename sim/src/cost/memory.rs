//! GPU memory left for the KV cache, by the serving engine's own arithmetic.
//!
//! Each engine sizes its KV pool from the memory the driver reports and a knob of
//! its own, after its weights:
//! - vLLM: `gpu_memory_utilization` (default 0.9) of the GPU's total, less the weights
//!   and what its start-up profiling finds beside them (the activation peak of a
//!   full step, CUDA graphs, NCCL and cuBLAS workspaces: `reserve`)
//!   (`vllm/v1/worker/gpu_worker.py`, `determine_available_memory`);
//! - SGLang: `mem_fraction_static` of the total holds the weights and the KV pool,
//!   the rest is left for activations and graphs. Unset, SGLang v0.4's `server_args.py`
//!   takes it from the tensor-parallel size: 0.88 (TP1), 0.87 (TP2), 0.85 (TP4), 0.81
//!   (TP8), 0.79 (TP16 and more);
//! - TensorRT-LLM: `free_gpu_memory_fraction` (default 0.9, `KvCacheConfig`) of the
//!   memory still free once the weights and the activation peak are allocated.
//!
//! The total is the memory the driver reports: a datasheet's "GB" of HBM is the
//! driver's GiB to within half a percent (H100 80 GB: 81,559 MiB in nvidia-smi;
//! H200 141 GB: 143,771 MiB; B200 180 GB: 183,359 MiB). twin's own serving (no
//! engine) keeps its rule: 92% of `hbm.usable`, less the weights.

use serde::{Deserialize, Serialize};

/// Whose arithmetic sizes the KV pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MemoryRule {
    /// twin's own: `fraction` (0.92) of `hbm.usable`, less the weights.
    #[default]
    Twin,
    /// vLLM: `fraction` of the total, less the weights and `reserve`.
    Vllm,
    /// SGLang: `fraction` of the total, less the weights.
    Sglang,
    /// TensorRT-LLM: `fraction` of what the weights and `reserve` leave free.
    Trtllm,
}

/// The KV pool's memory rule of `[cost]` keys `memory.*`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct KvMemory {
    /// Where the rule comes from (empty: twin's own).
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub rule: MemoryRule,
    /// The engine's memory knob (vLLM `gpu_memory_utilization`, SGLang
    /// `mem_fraction_static`, TensorRT-LLM `free_gpu_memory_fraction`); `None`: its
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    /// Bytes per GPU kept beside the weights before the KV pool (vLLM, TensorRT-LLM).
    #[serde(default)]
    pub reserve_bytes: f64,
}

/// twin's own share of `hbm.usable` left to weights and KV (8% kept for activations).
pub const TWIN_FRACTION: f64 = 0.92;
/// vLLM's and TensorRT-LLM's default memory fractions.
pub const VLLM_FRACTION: f64 = 0.9;
pub const TRTLLM_FRACTION: f64 = 0.9;
/// Bytes beside the weights before the KV pool, assumed: 3 GiB (a full step's
/// activation peak at 8192 tokens, about 1-2 GiB on a TP-sharded 70B model; CUDA
/// graphs 0.5-1 GiB; NCCL and cuBLAS workspaces about 1 GiB). No engine publishes it;
/// vLLM logs it at start-up.
pub const ENGINE_RESERVE_BYTES: f64 = 3.0 * GIB;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// SGLang v0.4's default `mem_fraction_static` at a tensor-parallel size.
pub fn sglang_default_fraction(tp: u32) -> f64 {
    match tp {
        0 | 1 => 0.88,
        2..=3 => 0.87,
        4..=7 => 0.85,
        8..=15 => 0.81,
        _ => 0.79,
    }
}

/// The memory the driver reports for a GPU whose datasheet gives `capacity_bytes`
/// (decimal GB): the same figure in GiB.
pub fn driver_total_bytes(capacity_bytes: f64) -> f64 {
    capacity_bytes / 1e9 * GIB
}

impl KvMemory {
    /// The rule of a serving engine by name (`vllm`, `sglang`, `trtllm`, before any
    /// `@VERSION`); `None` for any other (twin's own stands).
    pub fn of_engine(engine: &str) -> Option<KvMemory> {
        let (rule, reserve_bytes, source) = match super::host::engine_key(engine).as_str() {
            "vllm" => (
                MemoryRule::Vllm,
                ENGINE_RESERVE_BYTES,
                "vllm: gpu_memory_utilization 0.9 of the driver's total, less the weights and 3 GiB (assumed) of activations, graphs and workspaces",
            ),
            "sglang" => (
                MemoryRule::Sglang,
                0.0,
                "sglang: mem_fraction_static of the driver's total (unset: by TP size, 0.88 at TP1 to 0.79 at TP16, SGLang v0.4), less the weights",
            ),
            "trtllm" => (
                MemoryRule::Trtllm,
                ENGINE_RESERVE_BYTES,
                "trtllm: free_gpu_memory_fraction 0.9 of the memory the weights and 3 GiB (assumed) of activations leave free",
            ),
            _ => return None,
        };
        Some(KvMemory {
            source: source.to_string(),
            rule,
            fraction: None,
            reserve_bytes,
        })
    }

    /// Bytes one GPU keeps for KV: `usable` and `capacity` its HBM (`hbm.usable`,
    /// `hbm.capacity`), `weights` its weight bytes, `tp` the instance's tensor-parallel
    /// size (SGLang's default knob follows it). Negative when the weights do not fit.
    pub fn kv_bytes(&self, usable: f64, capacity: f64, weights: f64, tp: u32) -> f64 {
        let total = driver_total_bytes(capacity);
        match self.rule {
            MemoryRule::Twin => usable * self.fraction.unwrap_or(TWIN_FRACTION) - weights,
            MemoryRule::Vllm => {
                total * self.fraction.unwrap_or(VLLM_FRACTION) - weights - self.reserve_bytes
            }
            MemoryRule::Sglang => {
                total * self.fraction.unwrap_or_else(|| sglang_default_fraction(tp)) - weights
            }
            MemoryRule::Trtllm => {
                let free = total - weights - self.reserve_bytes;
                if free <= 0.0 {
                    free
                } else {
                    free * self.fraction.unwrap_or(TRTLLM_FRACTION)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each engine's pool by hand on an 80 GB GPU (85,899,345,920 B as the driver's
    /// 80 GiB) holding 16 GB of weights at TP8.
    #[test]
    fn kv_pools_by_hand() {
        let (usable, cap, w) = (76e9, 80e9, 16e9);
        let total = 80.0 * GIB;
        let twin = KvMemory::default();
        assert!((twin.kv_bytes(usable, cap, w, 8) - (76e9 * 0.92 - 16e9)).abs() < 1.0);
        let v = KvMemory::of_engine("vllm@0.15.0").unwrap();
        assert!((v.kv_bytes(usable, cap, w, 8) - (0.9 * total - 16e9 - 3.0 * GIB)).abs() < 1.0);
        let s = KvMemory::of_engine("sglang").unwrap();
        assert!((s.kv_bytes(usable, cap, w, 8) - (0.81 * total - 16e9)).abs() < 1.0);
        assert!((s.kv_bytes(usable, cap, w, 1) - (0.88 * total - 16e9)).abs() < 1.0);
        let t = KvMemory::of_engine("trtllm").unwrap();
        let free = total - 16e9 - 3.0 * GIB;
        assert!((t.kv_bytes(usable, cap, w, 8) - 0.9 * free).abs() < 1.0);
        // The knob replaces the default; weights that do not fit leave nothing.
        let v5 = KvMemory {
            fraction: Some(0.5),
            ..v.clone()
        };
        assert!((v5.kv_bytes(usable, cap, w, 8) - (0.5 * total - 16e9 - 3.0 * GIB)).abs() < 1.0);
        assert!(t.kv_bytes(usable, cap, 90e9, 8) < 0.0);
        assert!(KvMemory::of_engine("twin").is_none());
    }
}
