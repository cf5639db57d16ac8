//! The screen's queueing model: one rank's prefill at full chunks, the decode step by
//! batch, M/M/c waits (Erlang C), and a candidate's response at any arrival rate (the
//! fixed points the screen's module comment derives).

use crate::cost::{Phase, ReqSlice, StepShape};
use crate::serving::{Mode, PoolCost};

/// One rank's prefill: requests per second at full chunks, and one request's time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Prefill {
    pub(super) rate_per_rank: f64,
    pub(super) service_s: f64,
    /// A full step: its seconds and the prefill tokens it computes per rank.
    pub(super) step_s: f64,
    pub(super) step_tokens: f64,
}

/// Decode step time by batch per rank, sampled and interpolated.
pub(super) struct DecodeCurve {
    pub(super) points: Vec<(f64, f64)>,
}

impl DecodeCurve {
    pub(super) fn new(cost: &dyn PoolCost, dep: u32, cap: u32, ctx: u64, drafts: u32) -> Self {
        let mut bs: Vec<u32> = std::iter::successors(Some(1u32), |b| b.checked_mul(2))
            .take_while(|&b| b < cap)
            .collect();
        bs.push(cap);
        let points = bs
            .iter()
            .map(|&b| {
                let ranks = vec![
                    vec![ReqSlice {
                        new_tokens: 1,
                        context_tokens: ctx,
                        count: b,
                    }];
                    dep as usize
                ];
                let c = cost.step(&StepShape {
                    phase: Phase::Decode,
                    ranks: &ranks,
                    decode_ranks: &[],
                    draft_tokens: drafts,
                });
                (b as f64, c.step_s)
            })
            .collect();
        DecodeCurve { points }
    }

    /// Step seconds at `b` requests per rank (linear between samples, flat below 1).
    pub(super) fn at(&self, b: f64) -> f64 {
        let p = &self.points;
        if b <= p[0].0 {
            return p[0].1;
        }
        for w in p.windows(2) {
            if b <= w[1].0 {
                let f = (b - w[0].0) / (w[1].0 - w[0].0);
                return w[0].1 + f * (w[1].1 - w[0].1);
            }
        }
        p[p.len() - 1].1
    }

    pub(super) fn cap(&self) -> f64 {
        self.points[self.points.len() - 1].0
    }
}

/// Probability that an arrival waits in an M/M/c queue with offered load `a` =
/// lambda / mu (Erlang C, through the Erlang B recursion); 1 at or past saturation.
pub fn erlang_c(c: u64, a: f64) -> f64 {
    if c == 0 || a >= c as f64 {
        return 1.0;
    }
    let mut b = 1.0;
    for k in 1..=c {
        b = a * b / (k as f64 + a * b);
    }
    let rho = a / c as f64;
    b / (1.0 - rho * (1.0 - b))
}

/// The P90 and mean wait of an M/M/c queue: `c` servers of rate `mu`, arrivals
/// `lambda` (below saturation).
pub fn mmc_wait_s(c: u64, mu: f64, lambda: f64) -> (f64, f64) {
    let cm = c as f64 * mu;
    if lambda <= 0.0 {
        return (0.0, 0.0);
    }
    let pw = erlang_c(c, lambda / mu);
    let gap = cm - lambda;
    let mean = pw / gap;
    let p90 = if pw > 0.1 { (pw / 0.1).ln() / gap } else { 0.0 };
    (p90, mean)
}

/// Smallest x in [lo, hi] with f(x) >= 0 for increasing f (60 halvings).
pub(super) fn bisect(mut lo: f64, mut hi: f64, f: impl Fn(f64) -> f64) -> f64 {
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if f(mid) >= 0.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// A response at arrival rate lambda.
#[derive(Debug, Clone, Copy)]
pub(super) struct Response {
    pub(super) ttft_mean_s: f64,
    pub(super) ttft_p90_s: f64,
    pub(super) decode_s: f64,
    pub(super) step_s: f64,
    pub(super) batch: f64,
    pub(super) prefill_util: f64,
}

/// The candidate's queueing model, built once, evaluated at any rate.
pub(super) struct QueueModel {
    pub(super) mode: Mode,
    pub(super) decode: DecodeCurve,
    pub(super) decode_ranks: f64,
    pub(super) steps_per_request: f64,
    pub(super) mu_tokens: f64,
    pub(super) prefill: Prefill,
    pub(super) prefill_ranks: u64,
    pub(super) uncached: f64,
    /// Ranks per instance of the pool that prefills (lock-step).
    pub(super) group_dep: u32,
}

impl QueueModel {
    /// The largest rate the deployment carries (just below saturation).
    pub(super) fn capacity(&self) -> f64 {
        let cap = self.decode.cap();
        let dec = cap * self.decode_ranks / (self.steps_per_request * self.decode.at(cap));
        match self.mode {
            Mode::Aggregated => {
                // The prefill must fit in the steps and the batch within the cap.
                let per_token = self.prefill.step_s / self.prefill.step_tokens;
                let pre = self.decode_ranks / (self.uncached * per_token);
                bisect(0.0, pre.min(dec * 10.0), |l| {
                    if self.respond(l).is_none() {
                        1.0
                    } else {
                        -1.0
                    }
                })
            }
            _ => dec.min(self.prefill_ranks as f64 * self.prefill.rate_per_rank),
        }
    }

    /// The response at rate `lambda`; None past saturation.
    pub(super) fn respond(&self, lambda: f64) -> Option<Response> {
        let cap = self.decode.cap();
        match self.mode {
            Mode::Aggregated => {
                // Each rank needs `need` prefill tokens a second; a step carries a
                // full prefill part whenever any rank of the group has prefill work
                // (lock-step), so with f the share of steps a rank has work,
                // s = s_dec(B) + (1 - (1 - f)^dep) t_chunk and f = need s / tokens.
                let lr = lambda / self.decode_ranks;
                let need = lr * self.uncached;
                let (tc, ctok) = (self.prefill.step_s, self.prefill.step_tokens);
                let dep = self.group_dep as i32;
                let mean_step = |b: f64| -> Option<(f64, f64)> {
                    let sd = self.decode.at(b);
                    let q = |f: f64| 1.0 - (1.0 - f).powi(dep);
                    let phi = |f: f64| need * (sd + q(f) * tc) / ctok - f;
                    if phi(1.0) > 0.0 {
                        return None;
                    }
                    let f = bisect(0.0, 1.0, |f| -phi(f));
                    Some((sd + q(f) * tc, f))
                };
                mean_step(cap)?;
                let h = |b: f64| {
                    b - lr * self.steps_per_request * mean_step(b).map_or(f64::MAX, |x| x.0)
                };
                if h(cap) < 0.0 {
                    return None;
                }
                let batch = bisect(0.0, cap, h);
                let (s, f) = mean_step(batch)?;
                // Prefill work waits per rank: an M/M/1 queue busy a share f.
                let svc = (self.uncached / ctok).ceil() * (self.decode.at(batch) + tc);
                let wait_mean = f / (1.0 - f) * svc;
                let wait_p90 = if f > 0.1 {
                    svc * (f / 0.1).ln() / (1.0 - f)
                } else {
                    0.0
                };
                Some(Response {
                    ttft_mean_s: wait_mean + svc + s,
                    ttft_p90_s: wait_p90 + svc + s,
                    decode_s: self.steps_per_request * s,
                    step_s: s,
                    batch,
                    prefill_util: f,
                })
            }
            _ => {
                let c = self.prefill_ranks;
                let mu = self.prefill.rate_per_rank;
                if lambda >= c as f64 * mu {
                    return None;
                }
                let h = |b: f64| {
                    b - lambda * self.steps_per_request * self.decode.at(b) / self.decode_ranks
                };
                if h(cap) < 0.0 {
                    return None;
                }
                let batch = bisect(0.0, cap, h);
                let s = self.decode.at(batch);
                let (p90, mean) = mmc_wait_s(c, mu, lambda);
                Some(Response {
                    ttft_mean_s: mean + self.prefill.service_s + s,
                    ttft_p90_s: p90 + self.prefill.service_s + s,
                    decode_s: self.steps_per_request * s,
                    step_s: s,
                    batch,
                    prefill_util: lambda / (c as f64 * mu),
                })
            }
        }
    }
}

/// The prefill of the mean request on ranks with full steps.
pub(super) fn prefill_rate(
    cost: &dyn PoolCost,
    dep: u32,
    chunk: u32,
    uncached: f64,
    cached: f64,
) -> Prefill {
    let u = uncached.round().max(1.0) as u64;
    let ctx = cached.round().max(0.0) as u64;
    let step = |new: u64, context: u64, count: u32| {
        let ranks = vec![
            vec![ReqSlice {
                new_tokens: new.min(u32::MAX as u64) as u32,
                context_tokens: context,
                count,
            }];
            dep as usize
        ];
        cost.step(&StepShape {
            phase: Phase::Prefill,
            ranks: &ranks,
            decode_ranks: &[],
            draft_tokens: 0,
        })
        .step_s
    };
    let chunk = chunk.max(1) as u64;
    if u <= chunk {
        let k = (chunk / u).max(1) as u32;
        let t = step(u, ctx, k);
        Prefill {
            rate_per_rank: k as f64 / t,
            service_s: t,
            step_s: t,
            step_tokens: (k as u64 * u) as f64,
        }
    } else {
        let mut t = 0.0;
        let mut done = 0;
        let mut steps = 0;
        while done < u {
            let n = chunk.min(u - done);
            t += step(n, ctx + done, 1);
            done += n;
            steps += 1;
        }
        Prefill {
            rate_per_rank: 1.0 / t,
            service_s: t,
            step_s: t / steps as f64,
            step_tokens: u as f64 / steps as f64,
        }
    }
}
