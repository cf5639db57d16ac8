//! The noise floor of live runs: how far two runs of the same scenario, seed and
//! duration (back to back on one machine) land from each other, measured against
//! measured, in the figures `twin validate live` scores a prediction by. A model's
//! error below this distance is within what the machine itself varies by.

use crate::compare::{rel, step_kind};
use crate::records::RunDir;
use serde::Serialize;
use std::collections::BTreeMap;

/// One step class (`compare::step_kind`) in two runs: its steps and mean time in each,
/// and the second's mean against the first's.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KindDistance {
    pub kind: String,
    pub steps_a: usize,
    pub steps_b: usize,
    pub ms_mean_a: f64,
    pub ms_mean_b: f64,
    /// `(b - a) / a` of the class's mean step time.
    pub distance: f64,
}

/// Run `b` against run `a`: signed relative distances (`(b - a) / a`) of the figures,
/// and of the mean step time per step class. A latency percentile that one run has no
/// samples of (no request completed in its window) has no distance (NaN; `null` in
/// JSON).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunDistance {
    pub throughput_distance: f64,
    pub ttft_p90_distance: f64,
    pub tpot_p90_distance: f64,
    /// Mean over both runs' steps of the absolute distance of their class's mean step
    /// time (classes in both runs only): the step-time noise floor, beside a model's
    /// step MAPE.
    pub step_distance: f64,
    pub by_kind: Vec<KindDistance>,
}

/// Steps and total milliseconds per step class.
fn by_kind(run: &RunDir) -> BTreeMap<String, (usize, f64)> {
    let mut m: BTreeMap<String, (usize, f64)> = BTreeMap::new();
    for s in run.steps.iter().filter(|s| s.step_ms > 0.0) {
        let e = m
            .entry(step_kind(&s.kind, s.prefill_tokens(), s.decode_requests()))
            .or_default();
        e.0 += 1;
        e.1 += s.step_ms;
    }
    m
}

/// `rel(b, a)` of two percentiles, NaN unless both runs had samples (a percentile of
/// none reads 0).
fn sampled(b: f64, a: f64) -> f64 {
    if a > 0.0 && b > 0.0 {
        rel(b, a)
    } else {
        f64::NAN
    }
}

/// How far run `b` is from run `a` (see [`RunDistance`]).
pub fn run_distance(a: &RunDir, b: &RunDir) -> RunDistance {
    let (fa, fb) = (
        crate::metrics::live_figures(a),
        crate::metrics::live_figures(b),
    );
    let (ka, kb) = (by_kind(a), by_kind(b));
    let mut kinds = Vec::new();
    let (mut weighted, mut steps) = (0.0, 0usize);
    for (kind, &(na, ta)) in &ka {
        let Some(&(nb, tb)) = kb.get(kind) else {
            continue;
        };
        let (ma, mb) = (ta / na as f64, tb / nb as f64);
        let d = rel(mb, ma);
        weighted += d.abs() * (na + nb) as f64;
        steps += na + nb;
        kinds.push(KindDistance {
            kind: kind.clone(),
            steps_a: na,
            steps_b: nb,
            ms_mean_a: ma,
            ms_mean_b: mb,
            distance: d,
        });
    }
    kinds.sort_by(|x, y| {
        let w = |k: &KindDistance| k.distance.abs() * (k.steps_a + k.steps_b) as f64;
        w(y).total_cmp(&w(x))
    });
    RunDistance {
        throughput_distance: rel(fb.token_throughput, fa.token_throughput),
        ttft_p90_distance: sampled(fb.ttft_ms.p90, fa.ttft_ms.p90),
        tpot_p90_distance: sampled(fb.tpot_ms.p90, fa.tpot_ms.p90),
        step_distance: if steps > 0 {
            weighted / steps as f64
        } else {
            f64::NAN
        },
        by_kind: kinds,
    }
}

impl RunDistance {
    /// The distances as text: the figures, then the classes (largest first).
    pub fn render(&self) -> String {
        let pct = |x: f64| format!("{:+.1}%", 100.0 * x);
        let mut s = format!(
            "run-to-run distance (second run against the first): throughput {}, TTFT p90 {}, TPOT p90 {}, step time by class {:.1}%\n",
            pct(self.throughput_distance),
            pct(self.ttft_p90_distance),
            pct(self.tpot_p90_distance),
            100.0 * self.step_distance
        );
        s.push_str("  kind                          steps a  steps b   a ms   b ms  distance\n");
        for k in &self.by_kind {
            s.push_str(&format!(
                "  {:<28} {:>8} {:>8} {:>6.2} {:>6.2} {:>9}\n",
                k.kind,
                k.steps_a,
                k.steps_b,
                k.ms_mean_a,
                k.ms_mean_b,
                pct(k.distance)
            ));
        }
        s
    }
}
