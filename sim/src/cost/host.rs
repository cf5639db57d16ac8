//! Host work per engine step: scheduling, input preparation, sampling and output
//! processing, beside the GPU's kernels (their launches are the `launch` term).
//!
//! The host costs `step_fixed_{decode,prefill}_s` plus `per_request_s` for each
//! request of the busiest rank's batch (each rank's scheduler serves its own). An
//! engine that forms step N+1 while step N runs (vLLM's async scheduling, SGLang's and
//! TensorRT-LLM's overlap schedulers) hides that work under the GPU's: a share
//! `overlap` of it overlaps, and what the GPU does not cover is exposed, plus a
//! `gap_s` the hand-over leaves between steps even then. twin's own defaults: no
//! per-request cost, no overlap (the fixed cost is exposed whole).

use serde::{Deserialize, Serialize};

/// The host terms of `[cost]` keys `host.*` (with the step's fixed costs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Host {
    /// Where the values come from (empty: twin's defaults).
    #[serde(default)]
    pub source: String,
    /// Host seconds per request in the rank's batch.
    #[serde(default)]
    pub per_request_s: f64,
    /// Share of the host work that runs under the previous step's GPU time (0: all
    /// exposed; 1: an engine that schedules one step ahead).
    #[serde(default)]
    pub overlap: f64,
    /// Seconds between steps that even an overlapped host leaves.
    #[serde(default)]
    pub gap_s: f64,
}

/// Host work per request in early vLLM V1 (the gap between decode steps, 5-6 ms at
/// batch 256 for Llama-2-7B: about 21 us per request; vLLM issue #10634).
pub const VLLM_PER_REQUEST_S: f64 = 21e-6;
/// The gap async scheduling leaves (0.2-0.3 ms, the estimate in vLLM issue #10634).
pub const ASYNC_GAP_S: f64 = 0.25e-3;
/// TensorRT-LLM's host step, 45.11 ms at 1536 requests per rank (GB200, gpt-oss-120b,
/// C++ scheduler; TensorRT-LLM PR #10273): about 29 us per request.
pub const TRTLLM_PER_REQUEST_S: f64 = 45.11e-3 / 1536.0;

/// An engine's name as its terms are keyed: lower case, without any `@VERSION`
/// (`vLLM@0.11.0` is `vllm`).
pub fn engine_key(engine: &str) -> String {
    engine
        .split('@')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

impl Host {
    /// The host terms of a serving engine by name (`vllm`, `sglang`, `trtllm`, before
    /// any `@VERSION`); `None` for any other (twin's defaults stand).
    pub fn of_engine(engine: &str) -> Option<Host> {
        let (per_request_s, source) = match engine_key(engine).as_str() {
            "vllm" => (
                VLLM_PER_REQUEST_S,
                "vllm: 21 us per request (issue #10634), async scheduling on by default (PR #27614), 0.25 ms gap (issue #10634's estimate)",
            ),
            "sglang" => (
                VLLM_PER_REQUEST_S,
                "sglang: assumed as vLLM's 21 us per request (no published figure), overlap scheduler on by default (SGLang v0.4 blog), 0.25 ms gap (assumed as vLLM's)",
            ),
            "trtllm" => (
                TRTLLM_PER_REQUEST_S,
                "trtllm: 29 us per request (45.11 ms at 1536 requests, PR #10273), overlap scheduler on by default (disable_overlap_scheduler = False), 0.25 ms gap (assumed as vLLM's)",
            ),
            _ => return None,
        };
        Some(Host {
            source: source.to_string(),
            per_request_s,
            overlap: 1.0,
            gap_s: ASYNC_GAP_S,
        })
    }

    /// Exposed host seconds of a step whose fixed host cost is `fixed_s`, with
    /// `requests` on the busiest rank and `gpu_s` of GPU time (launches included).
    pub fn exposed_s(&self, fixed_s: f64, requests: f64, gpu_s: f64) -> f64 {
        let host = fixed_s + self.per_request_s * requests.max(0.0);
        let o = self.overlap.clamp(0.0, 1.0);
        let hidden = o * host.min(gpu_s.max(0.0));
        let gap = if o > 0.0 { self.gap_s } else { 0.0 };
        host - hidden + gap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twin_defaults_expose_the_fixed_cost_whole() {
        let h = Host::default();
        assert_eq!(h.exposed_s(300e-6, 64.0, 10e-3), 300e-6);
        assert!(Host::of_engine("twin").is_none());
        assert!(Host::of_engine("kernels/h100.toml.gz").is_none());
    }

    #[test]
    fn an_engine_that_schedules_ahead_hides_its_host_under_the_gpu() {
        let v = Host::of_engine("vllm@0.15.0").unwrap();
        // 0.3 ms + 50 x 21 us = 1.35 ms of host work under 13 ms of GPU: only the gap.
        assert!((v.exposed_s(300e-6, 50.0, 13e-3) - 0.25e-3).abs() < 1e-12);
        // 1024 requests: 0.3 + 21.504 ms of host over 13 ms of GPU: 8.804 ms exposed.
        let e = v.exposed_s(300e-6, 1024.0, 13e-3);
        assert!(
            (e - (0.3e-3 + 1024.0 * 21e-6 - 13e-3 + 0.25e-3)).abs() < 1e-12,
            "{e}"
        );
        // Half overlapped: half of the host work hidden at most.
        let half = Host {
            overlap: 0.5,
            ..v.clone()
        };
        let want = 1.35e-3 - 0.5 * 1.35e-3 + 0.25e-3;
        assert!((half.exposed_s(300e-6, 50.0, 13e-3) - want).abs() < 1e-12);
        let t = Host::of_engine("trtllm").unwrap();
        assert!((t.per_request_s - 29.368e-6).abs() < 1e-9);
    }
}
