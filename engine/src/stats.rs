//! Timing statistics: median, 10th and 90th percentile of repeated runs after warm-up.

use crate::Result;
use std::time::Instant;

/// How many times to run an op, and for how long at most.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimingConfig {
    /// Untimed runs first (caches, clocks, lazy initialisation).
    pub warmup: usize,
    /// Timed runs (at most).
    pub reps: usize,
    /// Stop timing after this many seconds once `min_reps` runs are done.
    pub max_seconds: f64,
    pub min_reps: usize,
    /// Rotate inputs over copies larger than the cache (off only for smoke tests of the
    /// pipeline, whose numbers are not meant to be meaningful).
    pub rotate: bool,
    /// Time host runs by the calling thread's CPU time instead of the wall clock: for a
    /// one-thread measurement on a shared machine, what the op itself costs, without
    /// what other processes take of the core (CPU backend only).
    pub thread_cpu: bool,
}

impl TimingConfig {
    pub const QUICK: TimingConfig = TimingConfig {
        warmup: 1,
        reps: 11,
        max_seconds: 0.5,
        min_reps: 3,
        rotate: true,
        thread_cpu: false,
    };
    pub const FULL: TimingConfig = TimingConfig {
        warmup: 3,
        reps: 25,
        max_seconds: 3.0,
        min_reps: 5,
        rotate: true,
        thread_cpu: false,
    };
    /// Pipeline smoke tests: two runs, no rotation (numbers not meaningful).
    pub const SMOKE: TimingConfig = TimingConfig {
        warmup: 0,
        reps: 2,
        max_seconds: 0.05,
        min_reps: 1,
        rotate: false,
        thread_cpu: false,
    };
}

/// Summary of the timed runs, seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub median_s: f64,
    pub p10_s: f64,
    pub p90_s: f64,
    pub samples: usize,
}

impl Stats {
    /// Percentiles by linear interpolation between order statistics
    /// (`spec::stats::percentile`). `samples` must be finite; NaN when empty.
    pub fn from_samples(samples: &[f64]) -> Stats {
        let mut s: Vec<f64> = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let q = |f: f64| {
            if s.is_empty() {
                return f64::NAN;
            }
            spec::stats::percentile_sorted(&s, f)
        };
        Stats {
            median_s: q(0.5),
            p10_s: q(0.1),
            p90_s: q(0.9),
            samples: s.len(),
        }
    }
}

/// CPU time the calling thread has used, seconds (NaN where unavailable).
pub fn thread_cpu_s() -> f64 {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes one timespec.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
        }
    }
    f64::NAN
}

/// Times `run(i)` on the host clock (or the thread's CPU clock, `cfg.thread_cpu`):
/// `cfg.warmup` untimed calls, then up to `cfg.reps` timed calls (stopping after
/// `cfg.max_seconds` of wall time once `cfg.min_reps` are done). `i` counts all calls so
/// callers can rotate over input copies.
pub fn time_host(cfg: &TimingConfig, mut run: impl FnMut(usize) -> Result<()>) -> Result<Stats> {
    time_settled(cfg, &mut (), |_, i| run(i), |_| Ok(()))
}

/// [`time_host`] for work that completes asynchronously on `dev`: `settle(dev)` waits
/// for it after the warm-up calls and inside the timing of every timed call.
pub fn time_settled<D: ?Sized>(
    cfg: &TimingConfig,
    dev: &mut D,
    mut run: impl FnMut(&mut D, usize) -> Result<()>,
    mut settle: impl FnMut(&mut D) -> Result<()>,
) -> Result<Stats> {
    let mut i = 0;
    for _ in 0..cfg.warmup {
        run(dev, i)?;
        i += 1;
    }
    settle(dev)?;
    let start = Instant::now();
    let mut samples = Vec::with_capacity(cfg.reps);
    for _ in 0..cfg.reps.max(1) {
        let (t, c) = (Instant::now(), cfg.thread_cpu.then(thread_cpu_s));
        run(dev, i)?;
        settle(dev)?;
        samples.push(match c {
            Some(c0) => thread_cpu_s() - c0,
            None => t.elapsed().as_secs_f64(),
        });
        i += 1;
        if samples.len() >= cfg.min_reps && start.elapsed().as_secs_f64() > cfg.max_seconds {
            break;
        }
    }
    Ok(Stats::from_samples(&samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let s = Stats::from_samples(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!(s.median_s, 3.0);
        assert!((s.p10_s - 1.4).abs() < 1e-12);
        assert!((s.p90_s - 4.6).abs() < 1e-12);
        assert_eq!(s.samples, 5);
        let one = Stats::from_samples(&[2.0]);
        assert_eq!((one.median_s, one.p10_s, one.p90_s), (2.0, 2.0, 2.0));
    }

    #[test]
    fn time_host_counts_calls_and_stops() {
        let mut calls = Vec::new();
        let cfg = TimingConfig {
            warmup: 2,
            reps: 4,
            max_seconds: 10.0,
            min_reps: 1,
            rotate: true,
            thread_cpu: false,
        };
        let s = time_host(&cfg, |i| {
            calls.push(i);
            Ok(())
        })
        .unwrap();
        assert_eq!(calls, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(s.samples, 4);
        let cfg = TimingConfig {
            warmup: 0,
            reps: 1000,
            max_seconds: 0.0,
            min_reps: 2,
            rotate: true,
            thread_cpu: false,
        };
        let s = time_host(&cfg, |_| Ok(())).unwrap();
        assert_eq!(s.samples, 2);
    }
}
