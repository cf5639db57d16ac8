//! From evaluated candidates to the answer: feasibility after simulation, the Pareto
//! frontier, the best on the objective, and when nothing is feasible, what binds.
//! Shards' records merge here into exactly one run's.

use super::{
    Candidate, Estimate, Header, Metrics, PlanError, Ranking, Reason, Record, Sizing, Status,
};
use crate::forward::pareto_max;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Requests dropped (of those that arrived) beyond which a run is infeasible.
pub const MAX_DROPPED_FRACTION: f64 = 0.001;

/// A target rate counts as carried when the run achieves this share of it.
pub const RATE_MET_FRACTION: f64 = 0.95;

/// How many candidates ended where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Counts {
    pub screened: usize,
    pub rejected_by_screen: usize,
    pub ranked_out: usize,
    pub simulated: usize,
    pub simulation_failed: usize,
    pub rejected_after_simulation: usize,
    pub feasible: usize,
    /// Rejections by rule (a candidate counts once per rule it broke).
    pub by_rule: BTreeMap<String, usize>,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub header: Header,
    /// Every candidate, by index; simulated ones carry their post-simulation reasons.
    pub records: Vec<Record>,
    /// Position in `records` of the best feasible candidate.
    pub best: Option<usize>,
    /// Positions of the simulated candidates on the Pareto frontier (tokens/s per GPU
    /// against the tokens/s per user 90% of users reach, their p10), by tokens/s per
    /// GPU.
    pub frontier: Vec<usize>,
    pub counts: Counts,
}

impl Outcome {
    pub fn feasible(&self, i: usize) -> bool {
        let r = &self.records[i];
        r.status == Status::Simulated && r.reasons.is_empty()
    }
}

/// Why simulated figures `m` miss the plan (empty: feasible).
pub fn simulated_reasons(h: &Header, m: &Metrics) -> Vec<Reason> {
    let mut out = Vec::new();
    // Latencies of no request are zeros, which would meet any SLO.
    if m.requests_per_s.is_nan() || m.requests_per_s <= 0.0 {
        out.push(Reason::new(
            "completed",
            "no request completed in the measured window: the deployment is overloaded, or the run is too short for its requests (raise --duration)".to_string(),
        ));
        return out;
    }
    for (name, limit, larger_better) in h.slo.constraints() {
        let v = m.slo_value(name);
        let miss = if larger_better { v < limit } else { v > limit };
        if miss {
            out.push(Reason::new(
                name,
                format!("simulated {name} {v:.1} misses the SLO {limit}"),
            ));
        }
    }
    if m.dropped_fraction > MAX_DROPPED_FRACTION {
        out.push(Reason::new(
            "dropped",
            format!(
                "{:.2}% of requests dropped (queues full)",
                100.0 * m.dropped_fraction
            ),
        ));
    }
    let achieved = match h.sizing {
        Sizing::Gpus(_) => None,
        Sizing::RequestsPerS(r) => Some((m.requests_per_s, r, "req/s")),
        Sizing::TokensPerS(t) => Some((m.tok_s_per_gpu * m.gpus as f64, t, "tok/s")),
    };
    if let Some((got, want, unit)) = achieved {
        if got < RATE_MET_FRACTION * want {
            out.push(Reason::new(
                "rate",
                format!("carried {got:.1} {unit} of the {want} {unit} targeted"),
            ));
        }
    }
    out
}

/// Which screened candidates to simulate: at most `k` of those the screen kept, best
/// first on the objective's estimate, with two rules. Candidates whose estimates are
/// identical (they differ only in a setting that does not bind at the estimated load,
/// such as a batch cap above the batch) are simulated once, the last of them (the
/// largest setting) standing for the others. Candidates whose prefill (or mixed)
/// ranks would run above `target_utilisation` rank after all others: the screen's
/// steady-state estimates are least reliable near saturation (rank imbalance and
/// cache misses it does not model take the difference). Returned in index order.
pub fn to_simulate(
    screened: &[(Candidate, Estimate, Vec<Reason>)],
    ranking: Ranking,
    k: usize,
    target_utilisation: f64,
) -> Vec<usize> {
    let mut rep: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (_, e, why)) in screened.iter().enumerate() {
        if why.is_empty() {
            rep.insert(serde_json::to_string(e).unwrap_or_default(), i);
        }
    }
    let mut ok: Vec<usize> = rep.into_values().collect();
    let as_metrics = |e: &Estimate| Metrics {
        gpus: e.gpus,
        tok_s_per_gpu: e.tok_s_per_gpu,
        usd_per_m_tokens: e.usd_per_m_tokens,
        tpot_p90_ms: e.tpot_ms,
        ttft_p90_ms: e.ttft_p90_ms,
        ..Metrics::default()
    };
    let risky = |i: usize| screened[i].1.prefill_utilisation > target_utilisation;
    ok.sort();
    let (risky, safe): (Vec<usize>, Vec<usize>) = ok.into_iter().partition(|&i| risky(i));
    let ranked = |set: Vec<usize>| -> Vec<usize> {
        let ms: Vec<Metrics> = set.iter().map(|&i| as_metrics(&screened[i].1)).collect();
        ranking.order(&ms).into_iter().map(|j| set[j]).collect()
    };
    let mut ok = ranked(safe);
    ok.extend(ranked(risky));
    ok.truncate(k);
    ok.sort();
    ok
}

/// Relative miss of `v` against an SLO limit (0 when met).
fn miss(v: f64, limit: f64, larger_better: bool) -> f64 {
    let m = if larger_better {
        (limit - v) / limit
    } else {
        (v - limit) / limit
    };
    m.max(0.0)
}

/// The answer from every candidate's record (sorted and checked by the caller, or
/// by `merge`); an error saying what binds when nothing is feasible.
pub fn select(header: Header, records: Vec<Record>) -> Result<Outcome, PlanError> {
    let out = outcome(header, records);
    if out.best.is_none() {
        return Err(PlanError::Infeasible(diagnose(&out)));
    }
    Ok(out)
}

/// Every candidate's verdict, the frontier and the best (none when nothing is
/// feasible: then [`diagnose`] says why).
pub fn outcome(header: Header, mut records: Vec<Record>) -> Outcome {
    records.sort_by_key(|r| r.index);
    let mut counts = Counts {
        screened: records.len(),
        ..Counts::default()
    };
    for r in records.iter_mut() {
        if r.status == Status::Simulated {
            if let Some(m) = &r.metrics {
                r.reasons = simulated_reasons(&header, m);
            }
        }
        match r.status {
            Status::RejectedByScreen => counts.rejected_by_screen += 1,
            Status::RankedOut => counts.ranked_out += 1,
            Status::Simulated => {
                counts.simulated += 1;
                if r.reasons.is_empty() {
                    counts.feasible += 1;
                } else {
                    counts.rejected_after_simulation += 1;
                }
            }
            Status::SimulationFailed => counts.simulation_failed += 1,
        }
        let mut rules: Vec<&str> = r.reasons.iter().map(|x| x.rule.as_str()).collect();
        rules.dedup();
        for rule in rules {
            *counts.by_rule.entry(rule.to_string()).or_default() += 1;
        }
    }
    let simulated: Vec<usize> = (0..records.len())
        .filter(|&i| records[i].status == Status::Simulated && records[i].metrics.is_some())
        .collect();
    let metrics = |i: usize| records[i].metrics.expect("simulated");
    let pts: Vec<(f64, f64)> = simulated
        .iter()
        .map(|&i| (metrics(i).tok_s_per_gpu, metrics(i).user_tok_s_p10))
        .collect();
    let mut frontier: Vec<usize> = simulated
        .iter()
        .zip(pareto_max(&pts))
        .filter(|(_, on)| *on)
        .map(|(&i, _)| i)
        .collect();
    frontier.sort_by(|&a, &b| {
        metrics(a)
            .tok_s_per_gpu
            .total_cmp(&metrics(b).tok_s_per_gpu)
            .then(a.cmp(&b))
    });
    let feasible: Vec<usize> = simulated
        .iter()
        .copied()
        .filter(|&i| records[i].reasons.is_empty())
        .collect();
    let ms: Vec<Metrics> = feasible.iter().map(|&i| metrics(i)).collect();
    let best = Ranking::of(&header)
        .order(&ms)
        .first()
        .map(|&j| feasible[j]);
    Outcome {
        header,
        records,
        best,
        frontier,
        counts,
    }
}

/// Which constraint binds when nothing is feasible, and how close the best came.
pub fn diagnose(o: &Outcome) -> String {
    let cons = o.header.slo.constraints();
    let simulated: Vec<&Record> = o
        .records
        .iter()
        .filter(|r| r.status == Status::Simulated && r.metrics.is_some())
        .collect();
    let rules = o
        .counts
        .by_rule
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let failed = failures(o);
    if simulated.is_empty() {
        if !failed.is_empty() {
            return format!(
                "no configuration could be simulated ({} screened; rejections by rule: {rules}){failed}",
                o.counts.screened
            );
        }
        return screen_diagnosis(o, &cons, &rules);
    }
    let worst = |r: &Record| worst_miss(r, &cons);
    let closest = simulated
        .iter()
        .min_by(|a, b| worst(a).0.total_cmp(&worst(b).0))
        .expect("non-empty");
    let (gap, binds) = worst(closest);
    let mut s = format!(
        "no configuration meets the SLOs ({} simulated, {} rejected by the screen; rejections by rule: {rules})",
        simulated.len(),
        o.counts.rejected_by_screen
    );
    if let Some(&(name, limit, _)) = cons.iter().find(|c| c.0 == binds) {
        let v = closest.metrics.expect("simulated").slo_value(name);
        s.push_str(&format!(
            "; {name} binds: the closest, {}, has {name} {v:.1} against {limit} ({:.1}% off)",
            closest.candidate.label(),
            100.0 * gap
        ));
    } else if let Some(r) = closest.reasons.first() {
        s.push_str(&format!(
            "; the closest, {}, fails on {}: {}",
            closest.candidate.label(),
            r.rule,
            r.message
        ));
    }
    push_best_simulated(&mut s, &simulated, &cons);
    s.push_str(&failed);
    s
}

/// Appends to `s` the best simulated value of each constraint (or that none has one).
fn push_best_simulated(s: &mut String, simulated: &[&Record], cons: &[(&'static str, f64, bool)]) {
    // A candidate that completed nothing has no latency or speed: its zeros are no
    // figures, so the best is taken over those that completed requests.
    let completed: Vec<&Metrics> = simulated
        .iter()
        .map(|r| r.metrics.as_ref().expect("simulated"))
        .filter(|m| completed_any(m))
        .collect();
    for &(name, limit, lb) in cons {
        let best = completed.iter().map(|m| m.slo_value(name)).reduce(|a, v| {
            if lb {
                a.max(v)
            } else {
                a.min(v)
            }
        });
        match best {
            Some(best) => s.push_str(&format!("; best {name} simulated: {best:.1} (SLO {limit})")),
            None => s.push_str(&format!(
                "; {name} has no simulated value: no candidate completed a request in its window"
            )),
        }
    }
}

/// Whether a simulated candidate completed any request in its measured window (else
/// its latencies and speeds are absent, not 0).
pub fn completed_any(m: &Metrics) -> bool {
    m.requests_per_s > 0.0
}

/// The simulations that failed, with their errors (the first three), as a clause to
/// append; empty when none failed.
fn failures(o: &Outcome) -> String {
    let failed: Vec<&Record> = o
        .records
        .iter()
        .filter(|r| r.status == Status::SimulationFailed)
        .collect();
    if failed.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = failed
        .iter()
        .take(3)
        .map(|r| {
            let why: Vec<&str> = r.reasons.iter().map(|x| x.message.as_str()).collect();
            format!("{}: {}", r.candidate.label(), why.join("; "))
        })
        .collect();
    format!(
        "; {} simulation{} failed: {}{}",
        failed.len(),
        if failed.len() == 1 { "" } else { "s" },
        shown.join("; "),
        if failed.len() > 3 { "; ..." } else { "" }
    )
}

/// Nothing reached the simulator: the screen's rejections, and how close its
/// estimates came to each constraint.
fn screen_diagnosis(o: &Outcome, cons: &[(&'static str, f64, bool)], rules: &str) -> String {
    let mut s = format!(
        "no configuration passed the screen ({} screened; rejections by rule: {rules})",
        o.counts.screened
    );
    for &(name, limit, lb) in cons {
        let est = |r: &Record| match name {
            "ttft_p90_ms" => r.estimate.ttft_p90_ms,
            "tpot_p90_ms" => r.estimate.tpot_ms,
            _ => r.estimate.user_tok_s,
        };
        let best = o
            .records
            .iter()
            .filter(|r| est(r) > 0.0)
            .min_by(|a, b| miss(est(a), limit, lb).total_cmp(&miss(est(b), limit, lb)));
        if let Some(r) = best {
            s.push_str(&format!(
                "; best estimated {name}: {:.1} against {limit} ({})",
                est(r),
                r.candidate.label()
            ));
        }
    }
    s
}

/// A simulated record's worst relative miss and the constraint it misses (`dropped`
/// for too many drops, `rate` for a missed target rate, empty for none).
fn worst_miss(r: &Record, cons: &[(&'static str, f64, bool)]) -> (f64, &'static str) {
    let m = r.metrics.expect("simulated");
    if !completed_any(&m) {
        // Nothing completed: the farthest from any SLO, whatever its zeros say.
        return (f64::INFINITY, "");
    }
    let mut w = (0.0, "");
    for &(name, limit, lb) in cons {
        let x = miss(m.slo_value(name), limit, lb);
        if x > w.0 {
            w = (x, name);
        }
    }
    if m.dropped_fraction > MAX_DROPPED_FRACTION && w.1.is_empty() {
        w = (m.dropped_fraction, "dropped");
    }
    if w.1.is_empty() {
        if let Some(r) = r.reasons.first() {
            w = (0.0, if r.rule == "rate" { "rate" } else { "" });
        }
    }
    w
}

/// One shard's file: where it came from, its header, its records.
pub struct ShardFile {
    pub name: String,
    pub header: Header,
    pub records: Vec<Record>,
}

/// Combines shards of one grid into every record, once each, by index. Fails on
/// shards of different grids, conflicting records and missing candidates.
pub fn merge(files: Vec<ShardFile>) -> Result<(Header, Vec<Record>), PlanError> {
    let Some(first) = files.first() else {
        return Err(PlanError::Merge("no shard files".into()));
    };
    let header = first.header.clone();
    let first_name = first.name.clone();
    let mut by_index: BTreeMap<usize, Record> = BTreeMap::new();
    for f in files {
        if f.header != header {
            return Err(PlanError::Merge(format!(
                "{} is from another grid than {first_name} (grid {} against {}): shards must come from the same scenario, space, sizing, SLOs, objective, seed and version",
                f.name, f.header.grid, header.grid
            )));
        }
        for r in f.records {
            if r.grid != header.grid {
                return Err(PlanError::Merge(format!(
                    "{}: a record of grid {} in a file of grid {}",
                    f.name, r.grid, header.grid
                )));
            }
            if r.index >= header.candidates {
                return Err(PlanError::Merge(format!(
                    "{}: record index {} beyond the grid's {} candidates",
                    f.name, r.index, header.candidates
                )));
            }
            match by_index.get(&r.index) {
                Some(old) if old != &r => {
                    return Err(PlanError::Merge(format!(
                        "{}: two different records for candidate {} ({})",
                        f.name,
                        r.index,
                        r.candidate.label()
                    )));
                }
                _ => {
                    by_index.insert(r.index, r);
                }
            }
        }
    }
    let missing: Vec<usize> = (0..header.candidates)
        .filter(|i| !by_index.contains_key(i))
        .collect();
    if !missing.is_empty() {
        let shown: Vec<String> = missing.iter().take(8).map(|i| i.to_string()).collect();
        return Err(PlanError::Merge(format!(
            "{} of {} candidates missing (indices {}{}): run their shards (or resume them) first",
            missing.len(),
            header.candidates,
            shown.join(", "),
            if missing.len() > 8 { ", ..." } else { "" }
        )));
    }
    Ok((header, by_index.into_values().collect()))
}
