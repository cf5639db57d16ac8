//! Records simulated as they were measured, in parallel (rayon; results in the
//! corpus's order, each a function of its record and the seed alone), and read back
//! as the statistics the records give.

use super::load::Base;
use super::setup::{setup, Cache, Setup};
use super::MeasuredError;
use calibration::runs::RunsProfile;
use corpus::summary::Compared;
use corpus::{Metric, RunRecord, Stat};
use rayon::prelude::*;
use sim::serving::{simulate_with, Control, Outcome, Record};
use std::collections::BTreeMap;

/// What twin predicts of one run: every statistic of every metric it simulates.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicted {
    pub figures: BTreeMap<(Metric, Stat), f64>,
    /// Requests the simulation completed, of those the client sent.
    pub completed: u64,
    pub sent: u64,
}

impl Predicted {
    pub fn get(&self, m: Metric, s: Stat) -> Option<f64> {
        self.figures.get(&(m, s)).copied()
    }
}

/// One record's prediction, or why there is none.
pub struct Prediction {
    /// What priced it (empty when it could not be set up).
    pub pricing: String,
    pub result: Result<Predicted, MeasuredError>,
    /// The whole simulated report, kept when the caller asked (one record looked at
    /// closely).
    pub report: Option<Box<sim::serving::Report>>,
    /// Per metric, the p10-p90 band (as factors on the prediction) of the profile's
    /// group of its engine and GPU family (its terms, or physics alone where they did
    /// not beat it); empty without.
    pub band: std::collections::BTreeMap<String, [f64; 2]>,
    /// The share of its GPUs' dense peak its measured throughput implies
    /// ([`crate::plausible`]), where it could be set up and its figures say.
    pub peak_share: Option<f64>,
}

/// A set-up record's run, recording what `record` asks.
fn run(s: &Setup, record: Record) -> Result<Outcome, MeasuredError> {
    let r = &s.resolved;
    let costs = r.pool_costs(&r.params);
    let input = r.input(&costs, &[]);
    simulate_with(&input, r.seed, &Control::default(), record)
        .map_err(|e| MeasuredError::Simulation(format!("simulation: {e}")))
}

/// The simulation of one set-up record.
pub fn simulate_setup(s: &Setup) -> Result<(Predicted, sim::serving::Report), MeasuredError> {
    let r = &s.resolved;
    let report = run(s, Record::default())?.report;
    let sent = r
        .workload()
        .bench
        .as_ref()
        .map_or(0, |b| b.requests.len() as u64);
    if report.requests_completed == 0 {
        return Err(MeasuredError::Simulation(format!(
            "simulation: no request of {sent} completed within the run's limit of {:.0} s",
            r.scenario().duration_s
        )));
    }
    let mut figures = BTreeMap::new();
    for (m, s) in [
        (Metric::TtftMs, &report.ttft_ms),
        (Metric::TpotMs, &report.tpot_ms),
        (Metric::ItlMs, &report.itl_ms),
        (Metric::E2eMs, &report.e2e_ms),
    ] {
        for (stat, v) in [
            (Stat::Mean, s.mean),
            (Stat::P50, s.p50),
            (Stat::P90, s.p90),
            (Stat::P99, s.p99),
        ] {
            figures.insert((m, stat), v);
        }
    }
    let gpus = report.gpus as f64;
    let t = &report.throughput_tok_s_per_gpu;
    figures.insert((Metric::OutputTokS, Stat::Value), t.output * gpus);
    figures.insert((Metric::TotalTokS, Stat::Value), t.total * gpus);
    figures.insert((Metric::RequestS, Stat::Value), report.requests_per_s);
    let p = Predicted {
        figures,
        completed: report.requests_completed,
        sent,
    };
    Ok((p, report))
}

/// A record set up to simulate, priced with the terms of `profile` where it has a
/// group for the record's engine and GPU, with that group (when its terms price it)
/// and its band (the group's whether its terms price the record or physics alone does).
struct Priced<'p> {
    setup: Result<Setup, MeasuredError>,
    group: Option<&'p calibration::runs::GroupFit>,
    band: BTreeMap<String, [f64; 2]>,
}

fn priced<'p>(
    rec: &RunRecord,
    base: &Base,
    cache: &Cache,
    seed: u64,
    profile: Option<&'p RunsProfile>,
) -> Priced<'p> {
    let of = profile.and_then(|p| p.group_of(rec.engine.name.key(), &rec.gpu.hardware));
    let band = of.map(|g| g.band.clone()).unwrap_or_default();
    let group = of.filter(|g| !g.physics_alone);
    let setup = setup(rec, base, cache, seed).and_then(|mut s| {
        if let Some(g) = group {
            super::fit::apply_group(&mut s, g)?;
        }
        Ok(s)
    });
    Priced { setup, group, band }
}

/// Every record predicted, in order, with the terms of `profile` where it has a group
/// for the record's engine and GPU; each whole report kept when `keep_reports`.
pub fn predict_all(
    records: &[&RunRecord],
    base: &Base,
    cache: &Cache,
    seed: u64,
    profile: Option<&RunsProfile>,
    keep_reports: bool,
) -> Vec<Prediction> {
    records
        .par_iter()
        .map(|rec| (rec, priced(rec, base, cache, seed, profile)))
        .map(|(rec, p)| match p.setup {
            Ok(s) => {
                let (result, report) = match simulate_setup(&s) {
                    Ok((p, r)) => (Ok(p), keep_reports.then(|| Box::new(r))),
                    Err(e) => (Err(e), None),
                };
                Prediction {
                    pricing: match p.group {
                        Some(g) => format!(
                            "{} + terms fitted to {} runs of {}",
                            s.pricing,
                            g.records,
                            g.name()
                        ),
                        None => s.pricing.clone(),
                    },
                    result,
                    report,
                    band: p.band,
                    peak_share: crate::plausible::implied_peak_share(
                        rec,
                        &s.resolved.model,
                        &s.resolved.hardware,
                    ),
                }
            }
            Err(e) => Prediction {
                pricing: String::new(),
                result: Err(e),
                report: None,
                band: Default::default(),
                peak_share: None,
            },
        })
        .collect()
}

/// Each record simulated as [`predict_all`] prices it, recording what `record` asks
/// (its steps, its requests), handed to `each` with the record as soon as its run
/// ends (in parallel; `each` writes it out, so no run's record is held longer).
/// A record that cannot be set up or simulated is handed its error.
pub fn record_all<F>(
    records: &[&RunRecord],
    base: &Base,
    seed: u64,
    profile: Option<&RunsProfile>,
    record: Record,
    each: F,
) where
    F: Fn(&RunRecord, Result<Outcome, MeasuredError>) + Sync,
{
    let cache = Cache::default();
    records.par_iter().for_each(|rec| {
        let out = priced(rec, base, &cache, seed, profile)
            .setup
            .and_then(|s| run(&s, record));
        each(rec, out);
    });
}

/// Which predicted statistic a record's [`Stat::Center`] is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Center {
    /// The median (p50).
    P50,
    Mean,
}

/// The record's measured figures against the prediction (those twin predicts), each
/// with its band where `band` has one for its metric.
pub fn compare(
    measured: &corpus::Measured,
    p: &Predicted,
    center: Center,
    band: &std::collections::BTreeMap<String, [f64; 2]>,
) -> Vec<Compared> {
    let mut out = Vec::new();
    for (m, stats) in measured {
        for (s, v) in stats {
            let as_predicted = match s {
                Stat::Center if center == Center::Mean => Stat::Mean,
                Stat::Center => Stat::P50,
                other => *other,
            };
            if let Some(pred) = p.get(*m, as_predicted) {
                out.push(Compared {
                    metric: *m,
                    stat: *s,
                    measured: *v,
                    predicted: pred,
                    band: band.get(m.key()).map(|[lo, hi]| (pred * lo, pred * hi)),
                });
            }
        }
    }
    out
}
