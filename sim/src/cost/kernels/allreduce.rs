//! Tensor-parallel all-reduce: a latency and the ring's traffic. A GPU sends and
//! receives `2 (n - 1) / n` of the data (reduce-scatter then all-gather; NCCL's "bus
//! bytes"), over NVLink inside a domain; across `m` domains, hierarchically, the NICs
//! carry `2 (m - 1) / m` of each GPU's 1/domain share, after the NIC's latency.
//!
//! Engines' in-graph all-reduces (one- or two-shot kernels over NVLink) pay one
//! latency; NCCL's ring, which its large benchmarks run, passes the data through
//! `2 (n - 1)` steps, each with its own latency (`ring`).

use crate::cost::OpRate;
use spec::hardware::Hardware;

/// Bytes each GPU moves in an all-reduce of `bytes` over `gpus` (NCCL's bus bytes).
pub fn bus_bytes(bytes: f64, gpus: f64) -> f64 {
    if gpus <= 1.0 {
        0.0
    } else {
        2.0 * (gpus - 1.0) / gpus * bytes
    }
}

/// Seconds of one all-reduce of `bytes` over `gpus` GPUs of `hw`; `rate.fixed_s` is
/// the latency, `rate.mem_eff` the achieved fraction of each link's bandwidth.
pub fn time(bytes: f64, gpus: f64, hw: &Hardware, rate: &OpRate) -> f64 {
    ring(bytes, gpus, hw, rate, 0.0)
}

/// As [`time`], with `step_s` more latency for each of the ring's `2 (n - 1)` steps.
pub fn ring(bytes: f64, gpus: f64, hw: &Hardware, rate: &OpRate, step_s: f64) -> f64 {
    if gpus <= 1.0 || bytes <= 0.0 {
        return 0.0;
    }
    let domain = (hw.nvlink_domain_gpus.max(1) as f64).min(gpus);
    let domains = (gpus / domain).ceil();
    let nvlink = bus_bytes(bytes, domain) / (hw.nvlink.bytes_per_s * rate.mem_eff);
    let nic = if domains > 1.0 {
        bus_bytes(bytes / domain, domains) / (hw.scaleout.bytes_per_s * rate.mem_eff)
            + hw.scaleout.latency_s
    } else {
        0.0
    };
    rate.fixed_s + 2.0 * (gpus - 1.0) * step_s + nvlink + nic
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hw(domain: u32) -> Hardware {
        let mut h: Hardware =
            toml::from_str(include_str!("../../../../scenarios/hardware/h200.toml")).unwrap();
        h.nvlink_domain_gpus = domain;
        h.nvlink.bytes_per_s = 1e11;
        h.scaleout.bytes_per_s = 1e10;
        h.scaleout.latency_s = 5e-6;
        h
    }

    #[test]
    fn ring_traffic_and_latency() {
        let r = OpRate::new(0.5, 1.0, 2e-6);
        // 8 GPUs in one domain, 1 MB: 2 * 7/8 MB at 0.5 * 1e11 B/s = 35 us, plus 2 us.
        let t = time(1e6, 8.0, &hw(8), &r);
        assert!((t - 37e-6).abs() < 1e-12, "{t}");
        // Alone, or nothing to sum: free.
        assert_eq!(time(1e6, 1.0, &hw(8), &r), 0.0);
        assert_eq!(time(0.0, 8.0, &hw(8), &r), 0.0);
        // 16 GPUs in two domains of 8: NVLink as above; the NICs carry 2 * 1/2 of
        // 1 MB / 8 at 0.5 * 1e10 B/s = 25 us, after 5 us.
        let t = time(1e6, 16.0, &hw(8), &r);
        assert!((t - (37e-6 + 25e-6 + 5e-6)).abs() < 1e-12, "{t}");
        assert_eq!(bus_bytes(8.0, 4.0), 12.0);
        // A ring of 8 adds 14 steps of latency.
        let t = ring(1e6, 8.0, &hw(8), &r, 1e-6);
        assert!((t - 51e-6).abs() < 1e-12, "{t}");
    }
}
