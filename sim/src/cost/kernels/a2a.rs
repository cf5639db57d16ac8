//! Expert-parallel dispatch and combine, by node and by link, grounded in DeepEP's and
//! TensorRT-LLM's published kernel figures.
//!
//! Routing decides the traffic: a token goes to `top_k` experts, restricted to
//! `topk_groups` of `groups` expert groups when routing is group-limited (DeepSeek-V3:
//! 8 groups, top 4). Experts sit on ranks in order (`experts / dep` per rank) and ranks
//! on NVLink domains in order (`domain` ranks per domain, 8 on HGX, 72 on NVL72). The
//! expected number of distinct ranks and domains a token reaches follows from counting
//! (uniform choices within the kept groups), see [`fanout`].
//!
//! Two kernel families:
//! - **normal** (DeepEP high-throughput, prefill): one copy per token and remote domain
//!   over RDMA, forwarded inside the domain over NVLink to each distinct rank; the two
//!   legs are pipelined, so the slower binds: `max(rdma / (nic * rdma_eff),
//!   nvlink / (nvlink * nvlink_eff)) + fixed`. Its kernels occupy `comm_sms` SMs.
//! - **low-latency** (DeepEP low-latency, TensorRT-LLM one-sided, decode): one copy per
//!   routed expert, NVLink inside the domain and RDMA outside; a latency (fixed per
//!   kernel plus a part per peer) and the transfer overlap as a soft maximum.
//!
//! The most loaded rank receives more than the mean: `recv_skew` (>= 1) scales the
//! transfer to the hottest receiver, whose arrival every rank waits for.

use crate::cost::kernels::gemm::SoftMax;
use crate::cost::params::CostParams;

/// How tokens pick experts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Routing {
    pub experts: f64,
    pub top_k: f64,
    /// Expert groups (1 = no group limit).
    pub groups: f64,
    /// Groups a token may use.
    pub topk_groups: f64,
}

/// `C(a, k) / C(b, k)` for real `a <= b`: the chance that `k` draws without
/// replacement from `b` items all avoid `b - a` of them; 0 when fewer than `k` remain.
fn choose_ratio(a: f64, b: f64, k: f64) -> f64 {
    let mut r = 1.0;
    let mut i = 0.0;
    while i < k {
        if a - i <= 0.0 {
            return 0.0;
        }
        r *= (a - i) / (b - i);
        i += 1.0;
    }
    r
}

/// `C(n, k)` as a float (small arguments).
fn choose(n: f64, k: f64) -> f64 {
    if k < 0.0 || k > n {
        return 0.0;
    }
    let mut r = 1.0;
    let mut i = 0.0;
    while i < k {
        r *= (n - i) / (i + 1.0);
        i += 1.0;
    }
    r
}

impl Routing {
    pub fn uniform(experts: f64, top_k: f64) -> Routing {
        Routing {
            experts,
            top_k,
            groups: 1.0,
            topk_groups: 1.0,
        }
    }

    /// Experts per group.
    fn group_size(&self) -> f64 {
        self.experts / self.groups.max(1.0)
    }

    /// Chance that a token's experts include at least one of `x` of the experts in its
    /// kept groups.
    fn hit_among_kept(&self, x: f64) -> f64 {
        let kept = self.topk_groups.max(1.0) * self.group_size();
        1.0 - choose_ratio(kept - x, kept, self.top_k)
    }

    /// Chance that a token reaches a block of `m` consecutive experts (a rank's or a
    /// domain's share, aligned to group boundaries when it spans groups).
    pub fn p_hit(&self, m: f64) -> f64 {
        let (ng, tg, eg) = (
            self.groups.max(1.0),
            self.topk_groups.max(1.0),
            self.group_size(),
        );
        if m >= self.experts {
            return 1.0;
        }
        if m < eg {
            // Inside one group: that group must be kept, then one of its m experts hit.
            return tg / ng * self.hit_among_kept(m);
        }
        // Whole groups held: j of them kept ~ hypergeometric(ng, h, tg); interpolate a
        // fractional group count between its neighbours.
        let held = m / eg;
        let at = |h: f64| -> f64 {
            let mut p = 0.0;
            let mut j = 0.0;
            while j <= h.min(tg) {
                let pj = choose(h, j) * choose(ng - h, tg - j) / choose(ng, tg);
                p += pj * self.hit_among_kept(j * eg);
                j += 1.0;
            }
            p
        };
        let lo = held.floor();
        let f = held - lo;
        if f == 0.0 {
            at(lo)
        } else {
            (1.0 - f) * at(lo) + f * at(lo + 1.0)
        }
    }
}

/// Where a token's copies go, in expectation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Fanout {
    /// Distinct ranks reached (including the sender's own).
    pub ranks: f64,
    /// Distinct NVLink domains reached (including the sender's own).
    pub domains: f64,
    /// Distinct domains other than the sender's.
    pub remote_domains: f64,
    /// Ranks per domain in this group (`min(dep, domain)`).
    pub ranks_per_domain: f64,
}

/// Expected fanout of one token over a DEP group of `dep` ranks, `domain` ranks per
/// NVLink domain.
pub fn fanout(r: &Routing, dep: f64, domain: f64) -> Fanout {
    let g = dep.min(domain).max(1.0);
    let domains = (dep / g).ceil().max(1.0);
    let ranks = dep * r.p_hit(r.experts / dep);
    let p_domain = if domains > 1.0 {
        r.p_hit(r.experts / domains)
    } else {
        1.0
    };
    Fanout {
        ranks,
        domains: domains * p_domain,
        remote_domains: (domains - 1.0) * p_domain,
        ranks_per_domain: g,
    }
}

/// The links a group's all-to-all uses, per GPU and direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Links {
    pub nvlink_bytes_per_s: f64,
    pub nic_bytes_per_s: f64,
}

/// One dispatch or combine.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Leg {
    pub s: f64,
    pub nvlink_s: f64,
    pub rdma_s: f64,
    pub nvlink_bytes: f64,
    pub rdma_bytes: f64,
}

/// Normal (high-throughput) kernel: `tokens` sent by one rank, `bytes` per token copy.
pub fn normal(
    tokens: f64,
    bytes: f64,
    fan: &Fanout,
    dep: f64,
    links: &Links,
    p: &CostParams,
    recv_skew: f64,
) -> Leg {
    if dep <= 1.0 || tokens <= 0.0 {
        return Leg::default();
    }
    let g = fan.ranks_per_domain;
    let rdma_bytes = tokens * fan.remote_domains * bytes;
    let nvlink_bytes = tokens * fan.ranks * bytes * (g - 1.0) / g;
    let skew = recv_skew.max(1.0);
    let rdma_s = skew * rdma_bytes / (links.nic_bytes_per_s * p.normal_rdma_eff());
    let nvlink_s = skew * nvlink_bytes / (links.nvlink_bytes_per_s * p.comm.mem_eff);
    Leg {
        s: rdma_s.max(nvlink_s) + p.comm.fixed_s,
        nvlink_s,
        rdma_s,
        nvlink_bytes,
        rdma_bytes,
    }
}

/// What one rank sends through a low-latency kernel: `tokens`, one copy of `bytes`
/// per routed expert (`top_k`); `fixed_s` is the kernel's own latency (dispatch or
/// combine), `recv_skew` the hottest receiver's load over the mean.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LowLatencySend {
    pub tokens: f64,
    pub top_k: f64,
    pub bytes: f64,
    pub fixed_s: f64,
    pub recv_skew: f64,
}

/// Low-latency kernel: `send` from each of `dep` ranks, NVLink within domains of
/// `domain` GPUs, RDMA between them.
#[inline]
pub fn low_latency(
    send: &LowLatencySend,
    dep: f64,
    domain: f64,
    links: &Links,
    p: &CostParams,
    roof: &SoftMax,
) -> Leg {
    let LowLatencySend {
        tokens,
        top_k,
        bytes,
        fixed_s,
        recv_skew,
    } = *send;
    if dep <= 1.0 || tokens <= 0.0 {
        return Leg::default();
    }
    let g = dep.min(domain).max(1.0);
    let copies = tokens * top_k * bytes;
    let nvlink_bytes = copies * (g - 1.0) / dep;
    let rdma_bytes = copies * (dep - g) / dep;
    let skew = recv_skew.max(1.0);
    let rdma_s = skew * rdma_bytes / (links.nic_bytes_per_s * p.ll.rdma_eff);
    let nvlink_s = skew * nvlink_bytes / (links.nvlink_bytes_per_s * p.ll.nvlink_eff);
    let latency = fixed_s + p.ll.per_peer_s * (dep - 1.0);
    Leg {
        s: roof.of(latency, rdma_s.max(nvlink_s)),
        nvlink_s,
        rdma_s,
        nvlink_bytes,
        rdma_bytes,
    }
}

/// Bytes of one token copy: `hidden` elements of `elem_bytes`, FP32 scales per 128
/// elements when quantised to 8 bits or less, plus `meta` bytes.
pub fn copy_bytes(hidden: f64, elem_bytes: f64, meta: f64) -> f64 {
    let scales = if elem_bytes <= 1.0 {
        hidden / 128.0 * 4.0
    } else {
        0.0
    };
    hidden * elem_bytes + scales + meta
}

#[cfg(test)]
#[allow(clippy::field_reassign_with_default)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} vs {b}");
    }

    #[test]
    fn unrestricted_routing_hits_like_sampling_without_replacement() {
        // 8 experts, top 2, a block of 2: miss = C(6,2)/C(8,2) = 15/28.
        let r = Routing::uniform(8.0, 2.0);
        close(r.p_hit(2.0), 1.0 - 15.0 / 28.0);
        close(r.p_hit(8.0), 1.0);
        // Fanout over 4 ranks in one domain: 4 * 13/28 ranks, one domain.
        let f = fanout(&r, 4.0, 8.0);
        close(f.ranks, 4.0 * 13.0 / 28.0);
        close(f.domains, 1.0);
        close(f.remote_domains, 0.0);
    }

    #[test]
    fn group_limited_routing_caps_the_domains() {
        // V3: 256 experts in 8 groups of 32, top-4 groups, top-8 experts. On 8 domains
        // of one group each, a token reaches a domain only if its group is kept (1/2),
        // then misses it with C(96,8)/C(128,8); at most 4 domains.
        let r = Routing {
            experts: 256.0,
            top_k: 8.0,
            groups: 8.0,
            topk_groups: 4.0,
        };
        let miss = choose_ratio(96.0, 128.0, 8.0);
        close(r.p_hit(32.0), 0.5 * (1.0 - miss));
        let f = fanout(&r, 64.0, 8.0);
        close(f.domains, 8.0 * 0.5 * (1.0 - miss));
        assert!(f.domains <= 4.0);
        // Two groups per domain (4 domains): kept groups on a domain ~ hypergeometric.
        let p2: f64 = (0..=2)
            .map(|j| {
                let j = j as f64;
                choose(2.0, j) * choose(6.0, 4.0 - j) / choose(8.0, 4.0)
                    * (1.0 - choose_ratio(128.0 - 32.0 * j, 128.0, 8.0))
            })
            .sum();
        close(r.p_hit(64.0), p2);
    }

    #[test]
    fn normal_kernel_legs_by_hand() {
        // 2 domains of 4 ranks, unrestricted 8 experts top 2: per token 8 * (1 - C(7,2)/
        // C(8,2)) = 2 ranks, 2 * (1 - C(4,2)/C(8,2)) = 2 * 22/28 domains, remote
        // 22/28. 100 tokens of 1000 B: RDMA 100 * 22/28 * 1000 B; NVLink 100 * 2 *
        // 1000 * 3/4 B.
        let r = Routing::uniform(8.0, 2.0);
        let f = fanout(&r, 8.0, 4.0);
        close(f.ranks, 2.0);
        close(f.remote_domains, 22.0 / 28.0);
        let mut p = CostParams::default();
        p.comm.mem_eff = 1.0;
        p.comm_rdma_eff = 1.0;
        p.comm.fixed_s = 1e-6;
        let links = Links {
            nvlink_bytes_per_s: 1e9,
            nic_bytes_per_s: 1e8,
        };
        let leg = normal(100.0, 1000.0, &f, 8.0, &links, &p, 1.0);
        close(leg.rdma_bytes, 100.0 * 22.0 / 28.0 * 1000.0);
        close(leg.nvlink_bytes, 150_000.0);
        close(leg.rdma_s, leg.rdma_bytes / 1e8);
        close(leg.s, leg.rdma_s + 1e-6);
        // A hot receiver with 1.5x the mean load stretches the transfer.
        let hot = normal(100.0, 1000.0, &f, 8.0, &links, &p, 1.5);
        close(hot.s - 1e-6, 1.5 * leg.rdma_s);
    }

    #[test]
    fn low_latency_kernel_by_hand() {
        // DEP 16 over domains of 8: of 10 tokens x 4 copies x 100 B = 4000 B, 7/16 go
        // over NVLink and 8/16 over RDMA; latency 10 us + 15 peers x 1 us; p = 1 adds.
        let mut p = CostParams::default();
        p.ll.nvlink_eff = 1.0;
        p.ll.rdma_eff = 1.0;
        p.ll.per_peer_s = 1e-6;
        p.ll.overlap_p = 1.0;
        let links = Links {
            nvlink_bytes_per_s: 1e9,
            nic_bytes_per_s: 1e8,
        };
        let send = LowLatencySend {
            tokens: 10.0,
            top_k: 4.0,
            bytes: 100.0,
            fixed_s: 10e-6,
            recv_skew: 1.0,
        };
        let roof = SoftMax::new(1.0);
        let leg = low_latency(&send, 16.0, 8.0, &links, &p, &roof);
        close(leg.nvlink_bytes, 1750.0);
        close(leg.rdma_bytes, 2000.0);
        close(leg.s, 25e-6 + 2000.0 / 1e8);
        assert_eq!(low_latency(&send, 1.0, 8.0, &links, &p, &roof).s, 0.0);
        // DeepEP's FP8 dispatch copy at hidden 7168: 7168 + 224 scale bytes + 16 meta.
        close(copy_bytes(7168.0, 1.0, 16.0), 7408.0);
        close(copy_bytes(7168.0, 2.0, 0.0), 14336.0);
    }
}
