//! A live run against its prediction: step times (each live step's exact batch priced
//! by the cost model), then the simulation of the whole run (throughput, latency
//! percentiles, goodput), and where they disagree, whether step time or queueing
//! explains it.

use crate::metrics::{Figures, Pcts};
use crate::records::{RunDir, StepRecord};
use serde::Serialize;
use sim::cost::{CostModel, Phase, ReqSlice, StepShape};
use sim::serving::SimStep;
use std::collections::BTreeMap;

/// Signed relative error of a prediction: `(predicted - measured) / measured`.
pub fn rel(predicted: f64, measured: f64) -> f64 {
    if measured != 0.0 {
        (predicted - measured) / measured
    } else if predicted == 0.0 {
        0.0
    } else {
        f64::INFINITY
    }
}

/// A count as a size class: itself up to `exact_to`, then the doubling ranges 2-4 (or
/// from `exact_to + 1` to 4), 5-8, 9-16, ... 129-256, and >256.
pub fn size_bucket(n: u64, exact_to: u64) -> String {
    if n <= exact_to {
        n.to_string()
    } else if n <= 4 {
        format!("{}-4", exact_to + 1)
    } else if n > 256 {
        ">256".to_string()
    } else {
        let hi = n.next_power_of_two();
        format!("{}-{hi}", hi / 2 + 1)
    }
}

/// The kind of a step: its passes and the size of its batch.
pub fn step_kind(kind: &str, prefill_tokens: u64, decode_requests: usize) -> String {
    let bucket = |n: u64| size_bucket(n, 1);
    match kind {
        "prefill" => format!("prefill {} tok", bucket(prefill_tokens)),
        "decode" => format!("decode {} req", bucket(decode_requests as u64)),
        _ => format!(
            "mixed {} tok + {} req",
            bucket(prefill_tokens),
            bucket(decode_requests as u64)
        ),
    }
}

/// The cost model's time for a live step's exact batch (its prefill pass plus its
/// decode pass), seconds.
pub fn price_step(model: &dyn CostModel, s: &StepRecord) -> f64 {
    let prefill: Vec<Vec<ReqSlice>> = s
        .ranks
        .iter()
        .map(|r| {
            r.prefill
                .iter()
                .map(|c| ReqSlice::one(c[0] as u32, c[1]))
                .collect()
        })
        .collect();
    let decode: Vec<Vec<ReqSlice>> = s
        .ranks
        .iter()
        .map(|r| r.decode.iter().map(|&c| ReqSlice::one(1, c)).collect())
        .collect();
    let mut t = 0.0;
    if prefill.iter().any(|r| !r.is_empty()) {
        t += model
            .step(&StepShape {
                phase: Phase::Prefill,
                ranks: &prefill,
                decode_ranks: &[],
                draft_tokens: 0,
            })
            .step_s;
    }
    if decode.iter().any(|r| !r.is_empty()) {
        t += model
            .step(&StepShape {
                phase: Phase::Decode,
                ranks: &decode,
                decode_ranks: &[],
                draft_tokens: s.drafts as u32,
            })
            .step_s;
    }
    t
}

/// Step-time agreement of one kind of step.
#[derive(Debug, Clone, Serialize)]
pub struct KindError {
    pub kind: String,
    pub steps: usize,
    pub measured_ms_mean: f64,
    pub predicted_ms_mean: f64,
    /// Mean absolute percentage error over the kind's steps.
    pub mape: f64,
    /// Signed error of the kind's total time.
    pub bias: f64,
}

/// One figure, live and predicted.
#[derive(Debug, Clone, Serialize)]
pub struct FigureRow {
    pub figure: String,
    pub live: f64,
    pub predicted: f64,
    pub error: f64,
}

/// Simulated against live step counts and times, by kind.
#[derive(Debug, Clone, Serialize)]
pub struct SimKind {
    pub kind: String,
    pub live_steps: usize,
    pub sim_steps: usize,
    pub live_ms_mean: f64,
    pub sim_ms_mean: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// MAPE of every live step's time against its exact batch priced by the model.
    pub step_mape: f64,
    /// Signed error of the total step time.
    pub step_bias: f64,
    pub throughput_error: f64,
    pub ttft_p90_error: f64,
    pub tpot_p90_error: f64,
    pub steps: usize,
    pub by_kind: Vec<KindError>,
    pub rows: Vec<FigureRow>,
    pub sim_steps: Vec<SimKind>,
    pub live: Figures,
    pub predicted: Figures,
    /// Where prediction and run disagree, per latency figure: `step time` or
    /// `queueing`, with the evidence.
    pub attribution: BTreeMap<String, String>,
    /// How much longer the steps took than their CPU time (one-thread ranks): what other
    /// processes on the machine took from the run (`None` when not recorded).
    pub interference: Option<f64>,
    /// Step MAPE against the steps' CPU time (one-thread ranks): the engine's own work.
    pub step_mape_cpu: Option<f64>,
    /// How the machine's pace moved during the run (`None`: too few steps).
    pub pace: Option<Pace>,
    pub notes: Vec<String>,
}

/// Seconds of one window of [`Pace`].
pub const PACE_WINDOW_S: f64 = 5.0;
/// Fewest steps a window of [`Pace`] needs (fewer: it takes the run's median pace).
pub const PACE_MIN_STEPS: usize = 8;

/// The run's pace: in windows of [`PACE_WINDOW_S`] by step start, the median of each
/// step's measured over predicted time, over the same median of the whole run. A
/// machine whose speed drifts (a shared or virtual machine: other tenants, clocks)
/// moves it; the model cannot know it. Read from the model's own ratios, so a model
/// error that follows the load over time moves it too: compare two runs of the same
/// seed (their loads move together, a machine's drift does not).
#[derive(Debug, Clone, Serialize)]
pub struct Pace {
    pub window_s: f64,
    /// Each window's pace, in time order (1: the run's median).
    pub windows: Vec<f64>,
    /// Mean over steps of `|1/pace - 1|`: the step MAPE that a model exact for every
    /// batch at the run's median pace would still show.
    pub drift_mape: f64,
    /// The step MAPE with each prediction scaled by its window's pace: what remains
    /// for the model (its level over the whole run and its prices of the batches).
    pub step_mape_paced: f64,
}

fn pct_rows(rows: &mut Vec<FigureRow>, name: &str, live: &Pcts, pred: &Pcts) {
    for (q, l, p) in [
        ("p50", live.p50, pred.p50),
        ("p90", live.p90, pred.p90),
        ("p99", live.p99, pred.p99),
    ] {
        rows.push(FigureRow {
            figure: format!("{name} {q} (ms)"),
            live: l,
            predicted: p,
            error: rel(p, l),
        });
    }
}

/// Compares a run with its step-by-step re-pricing (`predicted_step_s`, one per live
/// step) and the simulation of the same scenario (`sim`, `sim_steps`).
pub fn compare(
    run: &RunDir,
    predicted_step_s: &[f64],
    sim: &Figures,
    sim_steps: &[SimStep],
) -> Comparison {
    let live = crate::metrics::live_figures(run);
    let StepErrors {
        by_kind,
        step_mape,
        step_bias,
        decode_bias,
        n,
    } = step_errors(run, predicted_step_s);
    let sim_steps_by_kind = sim_steps_by_kind(run, sim_steps);
    let rows = figure_rows(&live, sim);
    let attribution = attribution(&live, sim, step_bias, decode_bias);
    let mut notes = Vec::new();
    let pre: u64 = run.requests.iter().map(|r| r.preemptions as u64).sum();
    if pre > 0 {
        notes.push(format!(
            "{pre} preemptions in the run (KV policy vllm): the simulator reserves KV up front and never preempts"
        ));
    }
    if run.info.scenario.serving.mode != sim::serving::Mode::Aggregated {
        notes
            .push("disaggregated: KV hand-overs are priced by the profile's copy bandwidth".into());
    }
    let (interference, step_mape_cpu) = cpu_figures(run, predicted_step_s);
    let pace = pace(&run.steps, predicted_step_s);
    if let Some(i) = interference {
        notes.push(format!(
            "steps took {:+.1}% longer than their CPU time: other processes' share of the rank's core (the model prices the engine's own work)",
            100.0 * i
        ));
    }
    Comparison {
        step_mape,
        step_bias,
        throughput_error: rel(sim.token_throughput, live.token_throughput),
        ttft_p90_error: rel(sim.ttft_ms.p90, live.ttft_ms.p90),
        tpot_p90_error: rel(sim.tpot_ms.p90, live.tpot_ms.p90),
        steps: n,
        by_kind,
        rows,
        sim_steps: sim_steps_by_kind,
        live,
        predicted: sim.clone(),
        attribution,
        interference,
        step_mape_cpu,
        pace,
        notes,
    }
}

/// The run's [`Pace`] from its steps' measured over predicted times (`None` with fewer
/// than [`PACE_MIN_STEPS`] comparable steps).
pub fn pace(steps: &[StepRecord], predicted_step_s: &[f64]) -> Option<Pace> {
    // (window, measured s, predicted s) of every step with both times.
    let steps: Vec<(usize, f64, f64)> = steps
        .iter()
        .zip(predicted_step_s)
        .filter(|(s, &p)| s.step_ms > 0.0 && p > 0.0 && s.start_s >= 0.0)
        .map(|(s, &p)| ((s.start_s / PACE_WINDOW_S) as usize, s.step_ms / 1e3, p))
        .collect();
    if steps.len() < PACE_MIN_STEPS {
        return None;
    }
    let median = |v: Vec<f64>| Pcts::of(v).p50;
    let overall = median(steps.iter().map(|x| x.1 / x.2).collect());
    let n_windows = steps.iter().map(|x| x.0).max().unwrap_or(0) + 1;
    let mut ratios = vec![Vec::new(); n_windows];
    for &(w, m, p) in &steps {
        ratios[w].push(m / p);
    }
    let paces: Vec<Option<f64>> = ratios
        .into_iter()
        .map(|r| (r.len() >= PACE_MIN_STEPS).then(|| median(r) / overall))
        .collect();
    let (mut drift, mut paced) = (0.0, 0.0);
    for &(w, m, p) in &steps {
        let k = paces[w].unwrap_or(1.0);
        drift += (1.0 / k - 1.0).abs();
        paced += ((p * k - m) / m).abs();
    }
    let n = steps.len() as f64;
    Some(Pace {
        window_s: PACE_WINDOW_S,
        windows: paces.into_iter().flatten().collect(),
        drift_mape: drift / n,
        step_mape_paced: paced / n,
    })
}

/// Every live step's time against its re-pricing: by kind, overall, and for the steps
/// with a decode pass.
struct StepErrors {
    by_kind: Vec<KindError>,
    step_mape: f64,
    step_bias: f64,
    decode_bias: f64,
    /// Steps compared (those with a measured time).
    n: usize,
}

fn step_errors(run: &RunDir, predicted_step_s: &[f64]) -> StepErrors {
    let mut kinds: BTreeMap<String, (Vec<f64>, f64, f64)> = BTreeMap::new();
    let (mut ape, mut meas_total, mut pred_total, mut n) = (0.0, 0.0, 0.0, 0usize);
    let mut decode_meas = 0.0;
    let mut decode_pred = 0.0;
    for (s, &p) in run.steps.iter().zip(predicted_step_s) {
        let m = s.step_ms / 1e3;
        if m <= 0.0 {
            continue;
        }
        let e = ((p - m) / m).abs();
        ape += e;
        meas_total += m;
        pred_total += p;
        n += 1;
        if s.kind != "prefill" {
            decode_meas += m;
            decode_pred += p;
        }
        let k = kinds
            .entry(step_kind(&s.kind, s.prefill_tokens(), s.decode_requests()))
            .or_default();
        k.0.push(e);
        k.1 += m;
        k.2 += p;
    }
    let mut by_kind: Vec<KindError> = kinds
        .into_iter()
        .map(|(kind, (errs, m, p))| KindError {
            steps: errs.len(),
            measured_ms_mean: 1e3 * m / errs.len() as f64,
            predicted_ms_mean: 1e3 * p / errs.len() as f64,
            mape: errs.iter().sum::<f64>() / errs.len() as f64,
            bias: rel(p, m),
            kind,
        })
        .collect();
    by_kind.sort_by(|a, b| (b.mape * b.steps as f64).total_cmp(&(a.mape * a.steps as f64)));
    let step_mape = if n > 0 { ape / n as f64 } else { f64::NAN };
    let step_bias = rel(pred_total, meas_total);
    StepErrors {
        by_kind,
        step_mape,
        step_bias,
        decode_bias: rel(decode_pred, decode_meas),
        n,
    }
}

/// Live and simulated steps inside the measured window, by kind.
fn sim_steps_by_kind(run: &RunDir, sim_steps: &[SimStep]) -> Vec<SimKind> {
    let mut sk: BTreeMap<String, (usize, usize, f64, f64)> = BTreeMap::new();
    let (w0, end) = (run.info.warmup_s, run.info.duration_s);
    for s in run
        .steps
        .iter()
        .filter(|s| s.start_s >= w0 && s.end_s <= end)
    {
        let e = sk
            .entry(step_kind(&s.kind, s.prefill_tokens(), s.decode_requests()))
            .or_default();
        e.0 += 1;
        e.2 += s.step_ms;
    }
    for s in sim_steps
        .iter()
        .filter(|s| s.start_s >= w0 && s.start_s + s.step_s <= end)
    {
        let kind = match (s.prefill_chunks > 0, s.decode_requests > 0) {
            (true, true) => "mixed",
            (true, false) => "prefill",
            _ => "decode",
        };
        let e = sk
            .entry(step_kind(
                kind,
                s.prefill_tokens,
                s.decode_requests as usize,
            ))
            .or_default();
        e.1 += 1;
        e.3 += 1e3 * s.step_s;
    }
    sk.into_iter()
        .map(|(kind, (ln, sn, lt, st))| SimKind {
            kind,
            live_steps: ln,
            sim_steps: sn,
            live_ms_mean: if ln > 0 { lt / ln as f64 } else { 0.0 },
            sim_ms_mean: if sn > 0 { st / sn as f64 } else { 0.0 },
        })
        .collect()
}

/// Attribution: a latency error that the step-time error explains is "step time";
/// the rest comes from how requests queue and batch.
fn attribution(
    live: &Figures,
    sim: &Figures,
    step_bias: f64,
    decode_bias: f64,
) -> BTreeMap<String, String> {
    let mut attribution = BTreeMap::new();
    for (name, err, step) in [
        (
            "TTFT p90",
            rel(sim.ttft_ms.p90, live.ttft_ms.p90),
            step_bias,
        ),
        (
            "TPOT p90",
            rel(sim.tpot_ms.p90, live.tpot_ms.p90),
            decode_bias,
        ),
        (
            "throughput",
            rel(sim.token_throughput, live.token_throughput),
            -step_bias,
        ),
    ] {
        attribution.insert(name.to_string(), attribute(err, step));
    }
    attribution
}

/// How much longer the steps took than their CPU time, and the step MAPE against the
/// CPU time (one-thread ranks; `None` when not recorded).
fn cpu_figures(run: &RunDir, predicted_step_s: &[f64]) -> (Option<f64>, Option<f64>) {
    let cpu: Option<Vec<(f64, f64)>> = run
        .steps
        .iter()
        .map(|s| s.cpu_ms.map(|c| (s.step_ms, c)))
        .collect();
    let interference = cpu.filter(|v| !v.is_empty()).map(|v| {
        let (w, c): (f64, f64) = v.iter().fold((0.0, 0.0), |a, x| (a.0 + x.0, a.1 + x.1));
        rel(w, c)
    });
    let step_mape_cpu = run
        .steps
        .iter()
        .zip(predicted_step_s)
        .map(|(s, &p)| {
            s.cpu_ms
                .filter(|&c| c > 0.0)
                .map(|c| ((p - c / 1e3) / (c / 1e3)).abs())
        })
        .collect::<Option<Vec<f64>>>()
        .filter(|v| !v.is_empty())
        .map(|v| v.iter().sum::<f64>() / v.len() as f64);
    (interference, step_mape_cpu)
}

/// Where a figure's error comes from, given the step-time error that bears on it.
pub fn attribute(err: f64, step: f64) -> String {
    if !err.is_finite() {
        "not comparable (no samples on one side)".to_string()
    } else if err.abs() <= 0.05 {
        format!("agrees ({:+.1}%)", 100.0 * err)
    } else if (err - step).abs() <= err.abs() / 2.0 {
        format!(
            "step time: the model's step times are off by {:+.1}%, which explains most of the {:+.1}%",
            100.0 * step,
            100.0 * err
        )
    } else {
        format!(
            "queueing: the step-time error ({:+.1}%) does not explain it; the simulated queues and batches differ ({:+.1}%)",
            100.0 * step,
            100.0 * err
        )
    }
}

/// Throughputs, latency percentiles and goodput, measured and predicted.
pub fn figure_rows(live: &Figures, sim: &Figures) -> Vec<FigureRow> {
    let mut rows = vec![
        FigureRow {
            figure: "throughput (tok/s processed)".into(),
            live: live.token_throughput,
            predicted: sim.token_throughput,
            error: rel(sim.token_throughput, live.token_throughput),
        },
        FigureRow {
            figure: "output throughput (tok/s)".into(),
            live: live.output_throughput,
            predicted: sim.output_throughput,
            error: rel(sim.output_throughput, live.output_throughput),
        },
        FigureRow {
            figure: "requests completed (/s)".into(),
            live: live.request_throughput,
            predicted: sim.request_throughput,
            error: rel(sim.request_throughput, live.request_throughput),
        },
    ];
    pct_rows(&mut rows, "TTFT", &live.ttft_ms, &sim.ttft_ms);
    pct_rows(&mut rows, "TPOT", &live.tpot_ms, &sim.tpot_ms);
    pct_rows(&mut rows, "ITL", &live.itl_ms, &sim.itl_ms);
    pct_rows(&mut rows, "E2EL", &live.e2el_ms, &sim.e2el_ms);
    rows.push(FigureRow {
        figure: "goodput (req/s within SLO)".into(),
        live: live.goodput_req_s,
        predicted: sim.goodput_req_s,
        error: rel(sim.goodput_req_s, live.goodput_req_s),
    });
    rows
}

/// Renders figure rows as a table.
pub fn render_rows(rows: &[FigureRow]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "  {:<30} {:>12} {:>12} {:>8}",
        "figure", "measured", "predicted", "error"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "  {:<30} {:>12.2} {:>12.2} {:>+7.1}%",
            r.figure,
            r.live,
            r.predicted,
            100.0 * r.error
        );
    }
    s
}

impl Comparison {
    /// The side-by-side report.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        self.write_step_time(&mut s);
        self.write_kinds(&mut s);
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "simulated run against the live run (same scenario, seed and arrivals):"
        );
        s.push_str(&render_rows(&self.rows));
        let _ = writeln!(s);
        self.write_sim_steps(&mut s);
        let _ = writeln!(s);
        for (k, v) in &self.attribution {
            let _ = writeln!(s, "{k}: {v}");
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        s
    }

    /// Writes the step-time line (MAPE, total bias, CPU figures) and the pace line.
    fn write_step_time(&self, s: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            s,
            "step time: {} live steps re-priced with their exact batches: MAPE {:.1}%, total {:+.1}%{}",
            self.steps,
            100.0 * self.step_mape,
            100.0 * self.step_bias,
            match (self.step_mape_cpu, self.interference) {
                (Some(m), Some(i)) => format!(
                    " (against their CPU time: MAPE {:.1}%; wall {:+.1}% over CPU)",
                    100.0 * m,
                    100.0 * i
                ),
                _ => String::new(),
            }
        );
        if let Some(p) = &self.pace {
            let (lo, hi) = p
                .windows
                .iter()
                .fold((f64::INFINITY, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
            let _ = writeln!(
                s,
                "pace: steps ran at {:.2}-{:.2}x the run's median (measured over model, {:.0} s windows): the machine's drift alone misses each step by {:.1}%; with each window's pace taken out the step MAPE is {:.1}%",
                lo,
                hi,
                p.window_s,
                100.0 * p.drift_mape,
                100.0 * p.step_mape_paced
            );
        }
    }

    /// Writes the table of step kinds, worst first (at most eight).
    fn write_kinds(&self, s: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            s,
            "  {:<28} {:>6} {:>10} {:>10} {:>7} {:>7}",
            "kind (worst first)", "steps", "live ms", "model ms", "MAPE", "bias"
        );
        for k in self.by_kind.iter().take(8) {
            let _ = writeln!(
                s,
                "  {:<28} {:>6} {:>10.2} {:>10.2} {:>6.1}% {:>+6.1}%",
                k.kind,
                k.steps,
                k.measured_ms_mean,
                k.predicted_ms_mean,
                100.0 * k.mape,
                100.0 * k.bias
            );
        }
    }

    /// Writes the table of steps in the window, live against simulated, per kind.
    fn write_sim_steps(&self, s: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(s, "steps in the window, live against simulated:");
        let _ = writeln!(
            s,
            "  {:<28} {:>7} {:>7} {:>9} {:>9}",
            "kind", "live", "sim", "live ms", "sim ms"
        );
        for k in &self.sim_steps {
            let _ = writeln!(
                s,
                "  {:<28} {:>7} {:>7} {:>9.2} {:>9.2}",
                k.kind, k.live_steps, k.sim_steps, k.live_ms_mean, k.sim_ms_mean
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(start_s: f64, step_ms: f64) -> StepRecord {
        StepRecord {
            index: 0,
            group: 0,
            pool: "mixed".into(),
            kind: "decode".into(),
            start_s,
            end_s: start_s + step_ms / 1e3,
            step_ms,
            prefill_ms: 0.0,
            decode_ms: step_ms,
            import_ms: 0.0,
            cpu_ms: None,
            drafts: 1,
            ranks: Vec::new(),
        }
    }

    #[test]
    fn a_size_class_is_exact_to_its_bound_then_doubles() {
        let live: Vec<String> = [0, 1, 2, 4, 5, 8, 9, 200, 256, 257]
            .iter()
            .map(|&n| size_bucket(n, 1))
            .collect();
        assert_eq!(
            live,
            ["0", "1", "2-4", "2-4", "5-8", "5-8", "9-16", "129-256", "129-256", ">256"]
        );
        assert_eq!(size_bucket(3, 4), "3");
        assert_eq!(size_bucket(5, 4), "5-8");
        assert_eq!(size_bucket(3, 2), "3-4");
    }

    /// Three 5 s windows of ten steps each, every step predicted at 10 ms: the machine
    /// takes 10, 12 and 8 ms in them. Median ratio of the run 1.0, so the windows' paces
    /// are 1.0, 1.2, 0.8; a model exact at the median pace misses the steps by 0, 1/6
    /// and 1/4 (mean 5/36); scaled by the paces it misses none.
    #[test]
    fn pace_follows_the_machine_window_by_window() {
        let mut steps = Vec::new();
        for (w, ms) in [(0.0, 10.0), (5.0, 12.0), (10.0, 8.0)] {
            for i in 0..10 {
                steps.push(step(w + 0.4 * i as f64, ms));
            }
        }
        let predicted = vec![0.010; steps.len()];
        let p = pace(&steps, &predicted).unwrap();
        assert_eq!(p.windows.len(), 3);
        for (got, want) in p.windows.iter().zip([1.0, 1.2, 0.8]) {
            assert!((got - want).abs() < 1e-12, "{:?}", p.windows);
        }
        assert!(
            (p.drift_mape - 5.0 / 36.0).abs() < 1e-12,
            "{}",
            p.drift_mape
        );
        assert!(p.step_mape_paced.abs() < 1e-12, "{}", p.step_mape_paced);
        // The plain step MAPE of the same steps: |10/12 - 1| and |10/8 - 1|.
        let plain = (10.0 * (2.0 / 12.0) + 10.0 * (2.0 / 8.0)) / 30.0;
        assert!((p.drift_mape - plain).abs() < 1e-12);
    }

    /// A window with fewer than PACE_MIN_STEPS steps takes the run's median pace, and a
    /// run with fewer steps than that has no pace.
    #[test]
    fn sparse_windows_take_the_median_pace() {
        let mut steps: Vec<StepRecord> = (0..10).map(|i| step(0.1 * i as f64, 10.0)).collect();
        steps.extend((0..3).map(|i| step(6.0 + 0.1 * i as f64, 20.0)));
        let predicted = vec![0.010; steps.len()];
        let p = pace(&steps, &predicted).unwrap();
        assert_eq!(p.windows, vec![1.0]);
        assert!(p.drift_mape.abs() < 1e-12);
        // The three slow steps stay missed by half.
        assert!((p.step_mape_paced - 3.0 * 0.5 / 13.0).abs() < 1e-12);
        assert!(pace(&steps[..7], &predicted[..7]).is_none());
    }
}
