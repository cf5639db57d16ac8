//! Replications: one scenario run under several seeds, and how far each headline
//! figure moves between them.
//!
//! A single run's figure carries sampling noise that its own length does not show:
//! with sticky (prefix-affinity) routing, the sessions a seed places on each prefill
//! instance stay there for their lifetime, so a run's queueing is set early and does
//! not average out over a long window. The spread between independent seeds measures
//! it. Each figure gets its mean over the seeds, the smallest and largest value, the
//! sample standard deviation and the half-width of its 95% confidence interval,
//! `t(0.975, n - 1) * sd / sqrt(n)` (Student's t, as for any mean of independent
//! replications).

use serde::Serialize;

use super::report::Report;

/// One headline figure over the replications.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Spread {
    pub figure: &'static str,
    pub unit: &'static str,
    /// Per seed, in the order of `Replicas::seeds`.
    pub values: Vec<f64>,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Sample standard deviation (n - 1); 0 for one run.
    pub sd: f64,
    /// Half-width of the 95% confidence interval of the mean (0 for one run).
    pub ci95: f64,
}

impl Spread {
    /// `ci95` relative to the mean (0 when the mean is 0).
    pub fn ci95_fraction(&self) -> f64 {
        if self.mean != 0.0 {
            self.ci95 / self.mean.abs()
        } else {
            0.0
        }
    }
}

/// The headline figures of runs of one scenario under `seeds`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Replicas {
    pub scenario: String,
    pub seeds: Vec<u64>,
    pub figures: Vec<Spread>,
}

/// Student's t at 0.975 for 1..=30 degrees of freedom (the standard table).
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// Student's t at 0.975 for `dof` degrees of freedom (above 30: the table's last
/// entry, within 4% of the limit 1.960).
fn t975(dof: usize) -> f64 {
    T975[dof.clamp(1, T975.len()) - 1]
}

/// The spread of `values` (one per run).
pub fn spread(figure: &'static str, unit: &'static str, values: Vec<f64>) -> Spread {
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n.max(1) as f64;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (sd, ci95) = if n > 1 {
        let var = values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64;
        let sd = var.sqrt();
        (sd, t975(n - 1) * sd / (n as f64).sqrt())
    } else {
        (0.0, 0.0)
    };
    Spread {
        figure,
        unit,
        values,
        mean,
        min: if n > 0 { min } else { 0.0 },
        max: if n > 0 { max } else { 0.0 },
        sd,
        ci95,
    }
}

impl Replicas {
    /// The headline figures of `runs` (seed and report each; one scenario).
    pub fn of(runs: &[(u64, &Report)]) -> Replicas {
        let take = |f: fn(&Report) -> f64| runs.iter().map(|(_, r)| f(r)).collect::<Vec<_>>();
        let figures = vec![
            spread(
                "throughput per GPU",
                "tok/s",
                take(|r| r.throughput_tok_s_per_gpu.total),
            ),
            spread(
                "output per GPU",
                "tok/s",
                take(|r| r.throughput_tok_s_per_gpu.output),
            ),
            spread("requests completed", "req/s", take(|r| r.requests_per_s)),
            spread("TTFT mean", "ms", take(|r| r.ttft_ms.mean)),
            spread("TTFT p50", "ms", take(|r| r.ttft_ms.p50)),
            spread("TTFT p90", "ms", take(|r| r.ttft_ms.p90)),
            spread("TTFT p99", "ms", take(|r| r.ttft_ms.p99)),
            spread("TPOT mean", "ms", take(|r| r.tpot_ms.mean)),
            spread("TPOT p90", "ms", take(|r| r.tpot_ms.p90)),
            spread("per-user p10", "tok/s", take(|r| r.per_user_tok_s.p10)),
            spread("per-user p50", "tok/s", take(|r| r.per_user_tok_s.p50)),
            spread("per-user p90", "tok/s", take(|r| r.per_user_tok_s.p90)),
            spread("end-to-end p90", "ms", take(|r| r.e2e_ms.p90)),
            spread("goodput", "%", take(|r| 100.0 * r.goodput.fraction)),
            spread("revenue", "$/GPU-h", take(|r| r.revenue_usd_per_gpu_hour)),
            spread("margin", "$/GPU-h", take(|r| r.margin_usd_per_gpu_hour)),
        ];
        Replicas {
            scenario: runs
                .first()
                .map(|(_, r)| r.scenario.clone())
                .unwrap_or_default(),
            seeds: runs.iter().map(|(s, _)| *s).collect(),
            figures,
        }
    }

    /// The table `twin simulate --seeds` prints.
    pub fn render_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let seeds = match (self.seeds.first(), self.seeds.last()) {
            (Some(a), Some(b)) if self.seeds.len() > 1 => format!("seeds {a}..={b}"),
            (Some(a), _) => format!("seed {a}"),
            _ => "no seeds".to_string(),
        };
        let _ = writeln!(
            out,
            "scenario  {}  ({} runs, {seeds}); ±95%: half-width of the mean's 95% confidence interval",
            self.scenario,
            self.seeds.len()
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<20} {:>8} {:>11} {:>11} {:>11} {:>10} {:>7}",
            "figure", "unit", "mean", "min", "max", "±95%", "rel"
        );
        for f in &self.figures {
            let _ = writeln!(
                out,
                "{:<20} {:>8} {:>11} {:>11} {:>11} {:>10} {:>6.2}%",
                f.figure,
                f.unit,
                fmt(f.mean),
                fmt(f.min),
                fmt(f.max),
                fmt(f.ci95),
                100.0 * f.ci95_fraction()
            );
        }
        out
    }
}

/// Four significant digits, thousands as K.
fn fmt(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.3}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}K", v / 1e3)
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-derived: values 10, 12, 14 have mean 12, sample sd 2, and a 95% half-width
    /// of t(0.975, 2) * 2 / sqrt(3) = 4.303 * 1.1547 = 4.9687.
    #[test]
    fn spread_of_three_runs() {
        let s = spread("x", "u", vec![10.0, 12.0, 14.0]);
        assert_eq!(s.mean, 12.0);
        assert_eq!((s.min, s.max), (10.0, 14.0));
        assert!((s.sd - 2.0).abs() < 1e-12);
        assert!((s.ci95 - 4.303 * 2.0 / 3f64.sqrt()).abs() < 1e-12);
        assert!((s.ci95 - 4.9687).abs() < 1e-4);
        assert!((s.ci95_fraction() - 4.9687 / 12.0).abs() < 1e-4);
    }

    #[test]
    fn one_run_has_no_interval() {
        let s = spread("x", "u", vec![5.0]);
        assert_eq!(
            (s.mean, s.sd, s.ci95, s.min, s.max),
            (5.0, 0.0, 0.0, 5.0, 5.0)
        );
    }

    #[test]
    fn t_table_ends_near_the_normal_quantile() {
        assert_eq!(t975(1), 12.706);
        assert_eq!(t975(30), 2.042);
        assert_eq!(t975(200), 2.042);
        assert!(T975.windows(2).all(|w| w[0] > w[1]), "decreasing in dof");
    }
}
