//! What the run measures: the measured window (one definition, `Window`), what a
//! completed request records, per-pool step statistics, and the sampled gauges.

use super::clock::{secs_to_ns, Nanos};
use super::config::SloConfig;
use super::pool::{GroupId, Role};
use super::rack::{Event, Rack};
use super::request::Request;
use super::stats::{Gauge, LogHistogram, Series, SeriesPoint};

/// The measured window: simulated time from the end of the warm-up to the end of the
/// run. Work is attributed to it by when it starts and ends:
/// - something that starts at `t` (a request's arrival, a KV transfer) is in it when
///   `start <= t <= end` (`starts_in`);
/// - work that ends at `t` (a step's tokens, an inter-token gap) is in it when
///   `start < t <= end` (`ends_in`): work ending exactly at the start was done before;
/// - a span `[s, e]` (a step's busy time, a request's whole life) is in it when it
///   starts and ends in it (`holds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub start_ns: Nanos,
    pub end_ns: Nanos,
}

impl Window {
    pub fn starts_in(&self, t: Nanos) -> bool {
        self.start_ns <= t && t <= self.end_ns
    }

    pub fn ends_in(&self, t: Nanos) -> bool {
        self.start_ns < t && t <= self.end_ns
    }

    pub fn holds(&self, s: Nanos, e: Nanos) -> bool {
        self.starts_in(s) && e <= self.end_ns
    }

    /// The window's length, seconds (at least 1 ns).
    pub fn seconds(&self) -> f64 {
        super::clock::ns_to_secs(self.end_ns - self.start_ns).max(1e-9)
    }
}

/// Latency distributions and counts over the measured window.
pub(crate) struct Metrics {
    pub ttft_ms: LogHistogram,
    pub tpot_ms: LogHistogram,
    pub itl_ms: LogHistogram,
    pub e2e_ms: LogHistogram,
    pub user_tok_s: LogHistogram,
    pub transfer_ms: LogHistogram,
    pub completed: u64,
    pub dropped: u64,
    /// Of the dropped, those refused for prompt + output over the context limit.
    pub refused_context: u64,
    /// Completed requests that met both SLOs, and their tokens (input + output).
    pub good: u64,
    pub good_tokens: u64,
    pub transfers: u64,
    pub transfer_bytes: f64,
    pub mtp_steps: u64,
    pub mtp_tokens: u64,
}

impl Metrics {
    pub fn new() -> Self {
        Metrics {
            ttft_ms: LogHistogram::new(),
            tpot_ms: LogHistogram::new(),
            itl_ms: LogHistogram::new(),
            e2e_ms: LogHistogram::new(),
            user_tok_s: LogHistogram::new(),
            transfer_ms: LogHistogram::new(),
            completed: 0,
            dropped: 0,
            refused_context: 0,
            good: 0,
            good_tokens: 0,
            transfers: 0,
            transfer_bytes: 0.0,
            mtp_steps: 0,
            mtp_tokens: 0,
        }
    }

    /// Records a request that completed at `now` if its life lies in the window
    /// (`decoded`: its output was produced; else the decode side was faked and its first
    /// token came with its prefill).
    pub fn complete(
        &mut self,
        req: &Request<'_>,
        decoded: bool,
        now: Nanos,
        window: &Window,
        slo: &SloConfig,
    ) {
        if !(req.measured && window.holds(req.arrival_ns, now)) {
            return;
        }
        let output = if decoded { req.output } else { 0 };
        let first = if decoded {
            req.decode.first_token_ns.unwrap_or(now)
        } else {
            now
        };
        let ttft_ms = (first - req.arrival_ns) as f64 / 1e6;
        let e2e_ms = (now - req.arrival_ns) as f64 / 1e6;
        let w = req.w();
        self.ttft_ms.record_n(ttft_ms, w);
        self.e2e_ms.record_n(e2e_ms, w);
        let mut tpot_ms = 0.0;
        if output > 1 {
            let span_ms = (req.decode.last_token_ns - first) as f64 / 1e6;
            tpot_ms = span_ms / (output - 1) as f64;
            self.tpot_ms.record_n(tpot_ms, w);
            if span_ms > 0.0 {
                self.user_tok_s
                    .record_n((output - 1) as f64 / (span_ms / 1e3), w);
            }
        }
        self.completed += w;
        if ttft_ms <= slo.ttft_ms && tpot_ms <= slo.tpot_ms {
            self.good += w;
            self.good_tokens += (req.input as u64 + output as u64) * w;
        }
    }
}

/// A pool's steps and tokens over the measured window, and its sampled gauges.
#[derive(Default)]
pub(crate) struct PoolStats {
    pub steps: u64,
    pub step_s: f64,
    /// Of `step_s`, the devices' wake-ups after idling ([`crate::cost::CostModel::wake_s`]).
    pub wake_s: f64,
    pub balanced_s: f64,
    pub op_s: [f64; crate::cost::OPS],
    pub busy_ns: u64,
    pub cached_tokens: u64,
    pub uncached_tokens: u64,
    pub output_tokens: u64,
    pub input_tokens_looked_up: u64,
    pub cache_hit_tokens: u64,
    pub host_hit_tokens: u64,
    pub kv_used: Gauge,
    pub kv_used_max: f64,
    /// Running requests preempted in the measured window (KV short).
    pub preemptions: u64,
    pub batch: Gauge,
    pub batch_max: f64,
    pub queue: Gauge,
    /// Sampled use over time, and the busy time at the last sample.
    pub series: Series,
    pub busy_ns_at_sample: u64,
    pub last_sample_ns: Option<Nanos>,
}

impl Rack<'_> {
    /// Samples every pool's queue, batch and KV gauges; schedules the next sample.
    pub(super) fn on_sample(&mut self) {
        let mu = self.mtp.mu;
        let state = self.state_tokens;
        let super::pool::Pools { list, groups } = &mut self.pools;
        for pool in list.iter_mut() {
            let cap = pool.kv_cap as f64;
            let mut queue = 0u64;
            let mut used = Gauge::default();
            let mut batch = Gauge::default();
            for grp in &groups[pool.groups.start as usize..pool.groups.end as usize] {
                for rk in &grp.ranks {
                    queue += (rk.prefill_q.len() + rk.pending.len()) as u64;
                    used.record(rk.kv_used_with_state(grp.dstep, mu, state) as f64 / cap);
                    batch.record(match pool.role {
                        Role::Prefill => rk.prefill_q.len() as f64,
                        _ => rk.dec.n as f64,
                    });
                }
            }
            // The simulated ranks' queues stand for every copy's.
            queue *= pool.copies as u64;
            let st = &mut pool.stats;
            // The series point of the interval since the last sample: busy time of the
            // steps that started in it, the gauges as sampled at its end.
            if let Some(last) = st.last_sample_ns.filter(|&l| self.now > l) {
                let groups = (pool.groups.end - pool.groups.start).max(1) as f64;
                let busy_s = (st.busy_ns - st.busy_ns_at_sample) as f64 / 1e9;
                st.series.record(SeriesPoint {
                    t_s: super::clock::ns_to_secs(last),
                    busy_fraction: busy_s / (super::clock::ns_to_secs(self.now - last) * groups),
                    queue_requests: queue as f64,
                    batch_per_rank: batch.mean(),
                    kv_used_fraction: used.mean(),
                });
            }
            st.busy_ns_at_sample = st.busy_ns;
            st.last_sample_ns = Some(self.now);
            st.queue.record(queue as f64);
            // Per-pool gauges: mean over ranks, max over ranks.
            st.kv_used.record(used.mean());
            st.kv_used_max = st.kv_used_max.max(used.max());
            st.batch.record(batch.mean());
            st.batch_max = st.batch_max.max(batch.max());
        }
        let next = self
            .now
            .saturating_add(secs_to_ns(self.sc.limits.sample_interval_s).max(1));
        if next <= self.window.end_ns {
            self.q.push(next, Event::Sample);
        }
    }

    /// Records rank `r`'s KV use and reservation in the run's peaks.
    pub(super) fn note_kv(&mut self, g: GroupId, r: u32) {
        let grp = self.pools.group(g);
        let cap = self.pools.pool(grp.role).kv_cap as f64;
        let rank = &grp.ranks[r as usize];
        debug_assert!(
            rank.kv_within(self.pools.pool(grp.role).kv_cap),
            "KV in use past what the rank reserved or its capacity"
        );
        let acc = &mut self.acc;
        acc.kv_peak_reserved_fraction = acc
            .kv_peak_reserved_fraction
            .max(rank.kv_reserved as f64 / cap);
        // Use is at most what is held plus the batch's reservation: only a rank that
        // could set a new peak needs its batch's context summed.
        let bound = (rank.kv_held + rank.dec.reserved) as f64 / cap;
        if bound > acc.kv_peak_used_fraction {
            let used = rank.kv_used_with_state(grp.dstep, self.mtp.mu, self.state_tokens);
            acc.kv_peak_used_fraction = acc.kv_peak_used_fraction.max(used as f64 / cap);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_edges() {
        let w = Window {
            start_ns: 10,
            end_ns: 20,
        };
        assert!(w.starts_in(10) && w.starts_in(20) && !w.starts_in(9) && !w.starts_in(21));
        assert!(!w.ends_in(10) && w.ends_in(11) && w.ends_in(20) && !w.ends_in(21));
        assert!(w.holds(10, 20) && !w.holds(9, 15) && !w.holds(15, 21));
        assert_eq!(w.seconds(), 1e-8);
    }
}
