//! Streaming statistics with flat memory: a log-bucketed histogram for percentiles.
//!
//! `LogHistogram` keeps counts in geometric buckets of ratio `gamma = (1+a)/(1-a)` with
//! `a = RELATIVE_ERROR` (DDSketch's construction): any reported quantile lies within
//! a relative error `a` (1%) of a value that is at that rank in the data, for values
//! in `[MIN_VALUE, MAX_VALUE]`. Smaller values fall into one "zero" bucket reported as
//! 0, larger ones are clamped to the top bucket. Count, sum, min and max are exact.
//! Memory: `BUCKETS` u64 counters whatever the number of samples.

use serde::{Deserialize, Serialize};

pub const RELATIVE_ERROR: f64 = 0.01;
pub const MIN_VALUE: f64 = 1e-6;
pub const MAX_VALUE: f64 = 1e12;

fn gamma() -> f64 {
    (1.0 + RELATIVE_ERROR) / (1.0 - RELATIVE_ERROR)
}

fn bucket_count() -> usize {
    ((MAX_VALUE / MIN_VALUE).ln() / gamma().ln()).ceil() as usize + 1
}

#[derive(Debug, Clone)]
pub struct LogHistogram {
    counts: Vec<u64>,
    zero: u64,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
    ln_gamma: f64,
    /// The last value bucketed and its bucket (samples often repeat, e.g. the
    /// inter-token gap of a whole batch); `NAN` when none.
    last_v: f64,
    last_i: usize,
}

impl Default for LogHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LogHistogram {
    pub fn new() -> Self {
        LogHistogram {
            counts: vec![0; bucket_count()],
            zero: 0,
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            ln_gamma: gamma().ln(),
            last_v: f64::NAN,
            last_i: 0,
        }
    }

    /// Adds one sample; non-finite and negative values are ignored (and not counted).
    pub fn record(&mut self, v: f64) {
        if !v.is_finite() || v < 0.0 {
            return;
        }
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        if v < MIN_VALUE {
            self.zero += 1;
            return;
        }
        let i = if v == self.last_v {
            self.last_i
        } else {
            let i = ((v / MIN_VALUE).ln() / self.ln_gamma).ceil() as usize;
            let i = i.min(self.counts.len() - 1);
            self.last_v = v;
            self.last_i = i;
            i
        };
        self.counts[i] += 1;
    }

    /// Adds `n` samples of the same value `v` (e.g. the inter-token gap every request
    /// of a decode batch saw in one step).
    pub fn record_n(&mut self, v: f64, n: u64) {
        if n == 0 || !v.is_finite() || v < 0.0 {
            return;
        }
        self.record(v);
        if n == 1 {
            return;
        }
        let extra = n - 1;
        self.count += extra;
        self.sum += v * extra as f64;
        if v < MIN_VALUE {
            self.zero += extra;
        } else {
            self.counts[self.last_i] += extra;
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    pub fn max(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.max
        }
    }

    /// The value at quantile `q` in [0, 1] (nearest rank); 0 when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = self.zero;
        if seen >= rank {
            return 0.0_f64.max(self.min.min(MIN_VALUE));
        }
        let g = gamma();
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                // Bucket i holds (MIN*g^(i-1), MIN*g^i]; its representative value.
                let upper = MIN_VALUE * g.powi(i as i32);
                let v = 2.0 * upper / (g + 1.0);
                return v.clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// The distribution as (quantile, value) points for a CDF plot: quantiles 0 to 1
    /// in steps of 0.02, and 0.99, 0.995, 0.999; empty when there are no samples.
    pub fn cdf(&self) -> Vec<(f64, f64)> {
        if self.count == 0 {
            return Vec::new();
        }
        let mut qs: Vec<f64> = (0..=50).map(|i| i as f64 / 50.0).collect();
        qs.extend([0.99, 0.995, 0.999]);
        qs.sort_by(f64::total_cmp);
        qs.iter().map(|&q| (q, self.quantile(q))).collect()
    }

    pub fn summary(&self) -> Summary {
        Summary {
            count: self.count,
            mean: self.mean(),
            p10: self.quantile(0.10),
            p50: self.quantile(0.50),
            p90: self.quantile(0.90),
            p99: self.quantile(0.99),
            max: self.max(),
        }
    }
}

/// Mean and percentiles of one quantity (its unit is in the field name that holds it).
/// Of no samples (`count` 0) the figures are written as `null`, not 0: a run that
/// completed nothing has no latency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(into = "SummaryWire", from = "SummaryWire")]
pub struct Summary {
    pub count: u64,
    pub mean: f64,
    /// The 10th percentile: of a speed (per-user tok/s), what 90% of samples reach.
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// [`Summary`] as written: its figures absent when it has no samples.
#[derive(Serialize, Deserialize)]
struct SummaryWire {
    count: u64,
    mean: Option<f64>,
    #[serde(default)]
    p10: Option<f64>,
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
    max: Option<f64>,
}

impl From<Summary> for SummaryWire {
    fn from(s: Summary) -> Self {
        let v = |x: f64| (s.count > 0).then_some(x);
        SummaryWire {
            count: s.count,
            mean: v(s.mean),
            p10: v(s.p10),
            p50: v(s.p50),
            p90: v(s.p90),
            p99: v(s.p99),
            max: v(s.max),
        }
    }
}

impl From<SummaryWire> for Summary {
    fn from(w: SummaryWire) -> Self {
        let v = |x: Option<f64>| x.unwrap_or(0.0);
        Summary {
            count: w.count,
            mean: v(w.mean),
            p10: v(w.p10),
            p50: v(w.p50),
            p90: v(w.p90),
            p99: v(w.p99),
            max: v(w.max),
        }
    }
}

/// Time-weighted or sample mean and maximum of a gauge.
#[derive(Debug, Clone, Copy, Default)]
pub struct Gauge {
    sum: f64,
    n: u64,
    max: f64,
}

impl Gauge {
    pub fn record(&mut self, v: f64) {
        self.sum += v;
        self.n += 1;
        self.max = self.max.max(v);
    }
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum / self.n as f64
        }
    }
    pub fn max(&self) -> f64 {
        self.max
    }
}

/// One point of a pool's sampled time series: the mean over the samples it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct SeriesPoint {
    /// Simulated time of the point's first sample, seconds.
    pub t_s: f64,
    /// Fraction of the interval the pool's groups spent in steps (steps count when
    /// they start, so a point may exceed 1 by part of a step).
    pub busy_fraction: f64,
    /// Requests waiting in the pool.
    pub queue_requests: f64,
    /// Requests per rank in a step (decode: running batch; prefill: queued).
    pub batch_per_rank: f64,
    /// KV used per rank, fraction of capacity.
    pub kv_used_fraction: f64,
}

/// A time series in bounded memory: at most `SERIES_POINTS` points; when full,
/// neighbours merge pairwise (means) and each point stands for twice as many samples
/// from then on. The same samples give the same series.
#[derive(Debug, Clone, Default)]
pub struct Series {
    points: Vec<SeriesPoint>,
    /// Samples per point.
    stride: u64,
    /// The point being filled and how many samples it holds.
    acc: SeriesPoint,
    n: u64,
}

/// Most points a `Series` keeps.
pub const SERIES_POINTS: usize = 256;

impl Series {
    pub fn record(&mut self, p: SeriesPoint) {
        if self.stride == 0 {
            self.stride = 1;
        }
        if self.n == 0 {
            self.acc = SeriesPoint {
                t_s: p.t_s,
                ..SeriesPoint::default()
            };
        }
        self.acc.busy_fraction += p.busy_fraction;
        self.acc.queue_requests += p.queue_requests;
        self.acc.batch_per_rank += p.batch_per_rank;
        self.acc.kv_used_fraction += p.kv_used_fraction;
        self.n += 1;
        if self.n == self.stride {
            self.points.push(mean_of(self.acc, self.n));
            self.n = 0;
            if self.points.len() == SERIES_POINTS {
                self.points = self
                    .points
                    .chunks(2)
                    .map(|c| {
                        let mut a = c[0];
                        for x in &c[1..] {
                            a.busy_fraction += x.busy_fraction;
                            a.queue_requests += x.queue_requests;
                            a.batch_per_rank += x.batch_per_rank;
                            a.kv_used_fraction += x.kv_used_fraction;
                        }
                        mean_of(a, c.len() as u64)
                    })
                    .collect();
                self.stride *= 2;
            }
        }
    }

    /// The points, the one being filled included.
    pub fn points(&self) -> Vec<SeriesPoint> {
        let mut v = self.points.clone();
        if self.n > 0 {
            v.push(mean_of(self.acc, self.n));
        }
        v
    }
}

fn mean_of(sum: SeriesPoint, n: u64) -> SeriesPoint {
    let k = n.max(1) as f64;
    SeriesPoint {
        t_s: sum.t_s,
        busy_fraction: sum.busy_fraction / k,
        queue_requests: sum.queue_requests / k,
        batch_per_rank: sum.batch_per_rank / k,
        kv_used_fraction: sum.kv_used_fraction / k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// 1000 samples of queue = i: the series halves at 256, 256 (stride 2) and 256
    /// (stride 4) points, ending with 1000 / 4 = 250 points of 4 samples, each the
    /// mean of its samples (4k + 1.5 for the point starting at sample 4k).
    #[test]
    fn series_stays_bounded_and_keeps_means() {
        let mut s = Series::default();
        for i in 0..1000 {
            s.record(SeriesPoint {
                t_s: i as f64,
                queue_requests: i as f64,
                ..SeriesPoint::default()
            });
        }
        let p = s.points();
        assert_eq!(p.len(), 250);
        for (k, x) in p.iter().enumerate() {
            assert_eq!(x.t_s, 4.0 * k as f64);
            assert!((x.queue_requests - (4.0 * k as f64 + 1.5)).abs() < 1e-9);
        }
    }
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn quantiles_are_within_the_documented_relative_error() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut h = LogHistogram::new();
        let mut xs: Vec<f64> = (0..50_000)
            .map(|_| (rng.random::<f64>() * 12.0 - 3.0).exp())
            .collect();
        for &x in &xs {
            h.record(x);
        }
        xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        for &q in &[0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
            let exact = xs[rank - 1];
            let got = h.quantile(q);
            assert!(
                (got - exact).abs() <= RELATIVE_ERROR * exact * 1.0001,
                "q={q}: got {got}, exact {exact}"
            );
        }
        assert_eq!(h.count(), 50_000);
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((h.mean() - mean).abs() < 1e-9 * mean);
    }

    #[test]
    fn empty_and_constant() {
        let h = LogHistogram::new();
        assert_eq!(h.quantile(0.5), 0.0);
        let mut h = LogHistogram::new();
        for _ in 0..10 {
            h.record(5.0);
        }
        assert_eq!(h.quantile(0.99), 5.0); // clamped to the exact min/max
        h.record(f64::NAN);
        assert_eq!(h.count(), 10);
    }
}
