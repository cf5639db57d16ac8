//! `twin calibrate --from-runs CORPUS --out PROFILE`: the terms physics leaves open
//! (`crate::runs::fit::TERMS`) fitted to measured runs per engine and GPU family,
//! with leave-one-model-out and leave-one-GPU-out cross-validation printed beside the
//! in-sample fit, every figure checked by simulating the records again under the
//! terms of a fit that did not see them; bands from the cross-validated residuals.

use crate::runs::fit::{group_of, linearise_all, simulate_with, METRICS, TERMS, WEIGHTS};
use crate::runs::predict::Center;
use crate::runs::{load, Cache};
use anyhow::{bail, Result};
use calibration::runs::{band, cross_validate, fit, CvFigures, GroupFit, Obs, RunsProfile};
use corpus::filter::Filter;
use corpus::summary::tolerance;
use corpus::RunRecord;
use rayon::prelude::*;
use std::collections::BTreeMap;

#[derive(clap::Args, Debug, Clone)]
pub struct FromRunsArgs {
    /// Fit the terms physics leaves open to a corpus of measured runs (an embedded
    /// name such as `aic-silicon-train`, or a file): per engine and GPU family, with
    /// leave-one-model-out and leave-one-GPU-out cross-validation; --out writes the
    /// profile `simulate`, `plan`, `sweep` and `validate runs` take with --profile.
    #[arg(long, value_name = "CORPUS")]
    pub from_runs: Option<String>,
    /// With --from-runs: keep only records that pass (as `validate runs --filter`).
    #[arg(long = "filter", value_name = "KEY=VALUE", requires = "from_runs")]
    pub filter: Vec<String>,
    /// With --from-runs: the predicted statistic a record's central figure is compared
    /// with.
    #[arg(long, value_enum, default_value = "mean", requires = "from_runs")]
    pub center: Center,
    /// With --from-runs: the seed of every simulation.
    #[arg(long, default_value_t = 1, requires = "from_runs")]
    pub seed: u64,
}

/// The fold a record falls in under a cross-validation scheme.
type FoldOf = fn(&RunRecord) -> String;

/// The cross-validation schemes: name and the fold of a record.
const SCHEMES: [(&str, FoldOf); 2] = [
    ("leave-one-model-out", |r| r.model.id.clone()),
    ("leave-one-gpu-out", |r| r.gpu.hardware.clone()),
];

/// One record's linearised observations, by record.
struct Lin<'a> {
    rec: &'a RunRecord,
    obs: Vec<Obs>,
}

pub fn run(a: &FromRunsArgs, corpus_name: &str, out: Option<&std::path::Path>) -> Result<()> {
    let loaded = load(corpus_name)?;
    let filters = a
        .filter
        .iter()
        .map(|f| Filter::parse(f))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let records = corpus::filter::apply(&loaded.records, &filters);
    if records.is_empty() {
        bail!("{}: no record passes the filters", loaded.origin);
    }
    let cache = Cache::default();
    eprintln!(
        "linearising {} records ({} simulations each) ...",
        records.len(),
        TERMS.len() + 1
    );
    let lins = linearise_all(&records, &loaded.base, &cache, a.seed, a.center);
    let mut groups: BTreeMap<(String, String), Vec<Lin>> = BTreeMap::new();
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    for (rec, l) in records.iter().zip(lins) {
        match l {
            Ok(obs) => groups
                .entry(group_of(rec))
                .or_default()
                .push(Lin { rec, obs }),
            Err(e) => {
                *skipped
                    .entry(e.lines().next().unwrap_or_default().to_string())
                    .or_default() += 1
            }
        }
    }
    let fits: Vec<GroupFit> = groups
        .iter()
        .map(|((engine, family), lins)| fit_group(engine, family, lins, a, &loaded, &cache))
        .collect();
    print_fits(&fits, &skipped, records.len());
    let profile = RunsProfile {
        kind: RunsProfile::KIND.into(),
        version: 1,
        created_by: format!("twin {} calibrate --from-runs", env!("CARGO_PKG_VERSION")),
        created_utc: calibration::profile::utc_now(),
        corpus: loaded.origin.clone(),
        filters: a.filter.clone(),
        center: format!("{:?}", a.center).to_lowercase(),
        seed: a.seed,
        groups: fits,
    };
    if let Some(out) = out {
        let text = format!(
            "# Terms fitted to measured runs by `twin calibrate --from-runs {corpus_name}`; price with --profile {}\n{}",
            out.display(),
            toml::to_string(&profile)?
        );
        let tmp = out.with_extension("toml.partial");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, out)?;
        println!("wrote {}", out.display());
    }
    Ok(())
}

/// The log residuals (measured over predicted) of every observation of `lins` under
/// the terms each record's fold was fitted to, by simulation; `None` where the
/// simulation failed.
fn simulated_residuals(
    lins: &[Lin],
    params: &[Vec<f64>],
    a: &FromRunsArgs,
    loaded: &crate::runs::Loaded,
    cache: &Cache,
) -> Vec<Vec<Option<f64>>> {
    lins.par_iter()
        .zip(params)
        .map(|(l, p)| {
            let values: Vec<f64> = TERMS.iter().zip(p).map(|(t, x)| t.value(*x)).collect();
            let y = simulate_with(l.rec, &loaded.base, cache, a.seed, a.center, &values).ok();
            l.obs
                .iter()
                .map(|o| y.as_ref().map(|y| o.target - y[o.metric]))
                .collect()
        })
        .collect()
}

/// Per metric, the figures of residuals `res` (log measured over predicted) against
/// bands `bands` (one per observation, as factors on the prediction).
fn figures(
    lins: &[Lin],
    res: &[Vec<Option<f64>>],
    bands: Option<&[Vec<(f64, f64)>]>,
) -> BTreeMap<String, CvFigures> {
    let mut out = BTreeMap::new();
    for (m, metric) in METRICS.iter().enumerate() {
        let mut errs = Vec::new();
        let mut inside = Vec::new();
        for (i, l) in lins.iter().enumerate() {
            for (j, _) in l.obs.iter().enumerate().filter(|(_, o)| o.metric == m) {
                let Some(r) = res[i][j] else { continue };
                // predicted / measured - 1 = exp(-r) - 1.
                errs.push((-r).exp() - 1.0);
                if let Some(b) = bands {
                    let (lo, hi) = b[i][j];
                    inside.push(r >= lo.ln() && r <= hi.ln());
                }
            }
        }
        if errs.is_empty() {
            continue;
        }
        let abs: Vec<f64> = errs.iter().map(|e: &f64| e.abs()).collect();
        out.insert(
            metric.key().to_string(),
            CvFigures {
                n: errs.len(),
                within: abs.iter().filter(|e| **e <= tolerance(*metric)).count() as f64
                    / errs.len() as f64,
                median_abs_error: corpus::summary::median(&abs),
                band_coverage: (!inside.is_empty())
                    .then(|| inside.iter().filter(|b| **b).count() as f64 / inside.len() as f64),
            },
        );
    }
    out
}

/// The fit of one group, its cross-validation and bands.
fn fit_group(
    engine: &str,
    family: &str,
    lins: &[Lin],
    a: &FromRunsArgs,
    loaded: &crate::runs::Loaded,
    cache: &Cache,
) -> GroupFit {
    let all: Vec<&Obs> = lins.iter().flat_map(|l| &l.obs).collect();
    let p_all = fit(&all, &TERMS, &WEIGHTS);
    let mut cv = BTreeMap::new();
    let in_sample = simulated_residuals(lins, &vec![p_all.clone(); lins.len()], a, loaded, cache);
    cv.insert("in-sample".to_string(), figures(lins, &in_sample, None));
    let mut band_of = BTreeMap::new();
    for (name, fold_of) in SCHEMES {
        let folds: Vec<String> = lins.iter().map(|l| fold_of(l.rec)).collect();
        let params: Vec<Vec<f64>> = folds
            .iter()
            .map(|f| {
                let train: Vec<&Obs> = lins
                    .iter()
                    .zip(&folds)
                    .filter(|(_, g)| *g != f)
                    .flat_map(|(l, _)| &l.obs)
                    .collect();
                fit(&train, &TERMS, &WEIGHTS)
            })
            .collect();
        let bands = nested_bands(lins, &folds);
        let res = simulated_residuals(lins, &params, a, loaded, cache);
        cv.insert(name.to_string(), figures(lins, &res, Some(&bands)));
        if name == "leave-one-model-out" {
            band_of = profile_bands(lins, &folds);
        }
    }
    let uniq = |f: fn(&RunRecord) -> String| {
        let mut v: Vec<String> = lins.iter().map(|l| f(l.rec)).collect();
        v.sort();
        v.dedup();
        v
    };
    GroupFit {
        engine: engine.to_string(),
        family: family.to_string(),
        gpus: uniq(|r| r.gpu.hardware.clone()),
        models: uniq(|r| r.model.id.clone()),
        records: lins.len(),
        terms: TERMS
            .iter()
            .zip(&p_all)
            .map(|(t, p)| (t.key.to_string(), t.value(*p)))
            .collect(),
        band: band_of,
        cv,
    }
}

/// Per observation, the band its fold's prediction carries: the p10-p90 of the
/// cross-validated residuals of the other folds, each from a fit that saw neither
/// that fold nor this one (nested: no band is drawn from its own record's data).
fn nested_bands(lins: &[Lin], folds: &[String]) -> Vec<Vec<(f64, f64)>> {
    let mut names: Vec<&String> = folds.iter().collect();
    names.sort();
    names.dedup();
    let mut by_fold: BTreeMap<&String, [Option<(f64, f64)>; 2]> = BTreeMap::new();
    for held in &names {
        let (obs, inner): (Vec<Obs>, Vec<String>) = lins
            .iter()
            .zip(folds)
            .filter(|(_, f)| f != held)
            .flat_map(|(l, f)| l.obs.iter().map(move |o| (o.clone(), f.clone())))
            .unzip();
        let res = cross_validate(&obs, &inner, &TERMS, &WEIGHTS);
        let mut b = [None, None];
        for (m, slot) in b.iter_mut().enumerate() {
            let r: Vec<f64> = obs
                .iter()
                .zip(&res)
                .filter(|(o, _)| o.metric == m)
                .map(|(_, r)| *r)
                .collect();
            *slot = band(&r);
        }
        by_fold.insert(held, b);
    }
    lins.iter()
        .zip(folds)
        .map(|(l, f)| {
            l.obs
                .iter()
                .map(|o| by_fold[f][o.metric].unwrap_or((1.0, 1.0)))
                .collect()
        })
        .collect()
}

/// The profile's bands: per metric, the p10-p90 of the group's cross-validated
/// residuals under `folds`.
fn profile_bands(lins: &[Lin], folds: &[String]) -> BTreeMap<String, [f64; 2]> {
    let (obs, f): (Vec<Obs>, Vec<String>) = lins
        .iter()
        .zip(folds)
        .flat_map(|(l, f)| l.obs.iter().map(move |o| (o.clone(), f.clone())))
        .unzip();
    let res = cross_validate(&obs, &f, &TERMS, &WEIGHTS);
    METRICS
        .iter()
        .enumerate()
        .filter_map(|(m, metric)| {
            let r: Vec<f64> = obs
                .iter()
                .zip(&res)
                .filter(|(o, _)| o.metric == m)
                .map(|(_, r)| *r)
                .collect();
            band(&r).map(|(lo, hi)| (metric.key().to_string(), [lo, hi]))
        })
        .collect()
}

fn print_fits(fits: &[GroupFit], skipped: &BTreeMap<String, usize>, n: usize) {
    let fitted: usize = fits.iter().map(|g| g.records).sum();
    println!("fitted {fitted} of {n} records in {} groups (engine x GPU family); errors from simulating each record again:", fits.len());
    println!("  in-sample: terms fitted to every record of the group; leave-one-model-out / -gpu-out: terms fitted without the record's model / GPU");
    println!("  within: TTFT within 25%, TPOT within 15%; band: measured inside the p10-p90 band from nested cross-validated residuals");
    for g in fits {
        println!();
        println!(
            "{} on {} ({}; {} records; models: {})",
            g.engine,
            g.family,
            g.gpus.join(", "),
            g.records,
            g.models.join(", ")
        );
        let terms: Vec<String> = g
            .terms
            .iter()
            .map(|(k, v)| {
                if k.ends_with("_s") {
                    format!("{k} {:.2} ms", v * 1e3)
                } else {
                    format!("{k} {v:.3}")
                }
            })
            .collect();
        println!("  terms: {}", terms.join(", "));
        for (scheme, figs) in &g.cv {
            let cells: Vec<String> = figs
                .iter()
                .map(|(m, f)| {
                    format!(
                        "{m} within {:.0}% (|err| {:.1}%{})",
                        100.0 * f.within,
                        100.0 * f.median_abs_error,
                        f.band_coverage
                            .map(|c| format!(", band {:.0}%", 100.0 * c))
                            .unwrap_or_default()
                    )
                })
                .collect();
            println!("  {scheme:<20} {}", cells.join("; "));
        }
    }
    for (why, k) in skipped {
        println!("not fitted: {k} x {why}");
    }
}
