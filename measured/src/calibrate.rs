//! The terms physics leaves open (`crate::fit::TERMS`) fitted to measured runs per
//! engine and GPU family, with leave-one-model-out, leave-one-GPU-out and
//! leave-one-run-out cross-validation beside the in-sample fit, every figure checked by
//! simulating the records again under the terms of a fit that did not see them; bands
//! from the nested cross-validated residuals. `twin calibrate --from-runs` prints and
//! writes what [`fit_corpus`] returns.

use crate::fit::{frontend_term, group_of, simulate_with, METRICS, TERMS, WEIGHTS};
use crate::predict::Center;
use crate::{load, Cache};
use anyhow::{bail, Result};
use calibration::runs::{band_unseen, cross_validate, fit, CvFigures, GroupFit, Obs, Term};
use corpus::summary::tolerance;
use corpus::RunRecord;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What `twin calibrate --from-runs` asks of the fit (its flags, typed).
#[derive(Debug, Clone)]
pub struct FitOptions {
    /// Records kept: those that pass every filter (`KEY=VALUE`, as `validate runs`).
    pub filter: Vec<String>,
    /// The predicted statistic a record's central figure is compared with.
    pub center: Center,
    /// The seed of every simulation.
    pub seed: u64,
    /// The terms fitted (keys of [`TERMS`]; empty: all); the others stay at their priors.
    pub terms: Vec<String>,
    /// Every prior's standard deviation scaled by this.
    pub prior_scale: f64,
    /// A file the linearised records are kept in and read back from.
    pub linearised: Option<PathBuf>,
    /// The linear model's cross-validation, without simulating the records again.
    pub no_check: bool,
    /// Other term sets, each comma-separated keys, tried in order for a group whose
    /// fit of the sets before it does not beat physics alone.
    pub or_terms: Vec<String>,
}

/// A corpus fitted: every group's fit (gated or not), the records that could not be
/// fitted by reason, and the corpus's origin.
#[derive(Debug)]
pub struct CorpusFit {
    pub fits: Vec<GroupFit>,
    /// Per fit (in order), physics alone's bands: what a group the gate leaves out
    /// carries.
    pub physics_bands: Vec<PhysicsBands>,
    pub skipped: BTreeMap<String, usize>,
    /// Records that passed the filters.
    pub records: usize,
    pub origin: String,
}

/// Physics alone's bands of a group: for a model the group has not seen, each model's
/// own, and how those hold for a deployment they have not seen.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhysicsBands {
    pub band: BTreeMap<String, [f64; 2]>,
    pub models: BTreeMap<String, calibration::runs::ModelBand>,
    pub models_cv: BTreeMap<String, CvFigures>,
}

/// Fits the terms to the records of `corpus_name` (an embedded corpus or a file) that
/// pass the filters, per engine and GPU family, with every cross-validation scheme;
/// `say` is told what the slow parts do.
pub fn fit_corpus(o: &FitOptions, corpus_name: &str, say: &dyn Fn(&str)) -> Result<CorpusFit> {
    let loaded = load(corpus_name)?;
    let records = loaded.filtered(&o.filter)?;
    if records.is_empty() {
        bail!("{}: no record passes the filters", loaded.origin);
    }
    let cache = Cache::default();
    let terms = chosen_terms(&o.terms, o.prior_scale)?;
    let alternatives = o
        .or_terms
        .iter()
        .map(|set| {
            let keys: Vec<String> = set.split(',').map(|k| k.trim().to_string()).collect();
            chosen_terms(&keys, o.prior_scale)
        })
        .collect::<Result<Vec<_>>>()?;
    // The front end's curve is simulated when any term set fits it.
    let fe = frontend_term();
    let frontend_curve = std::iter::once(&terms)
        .chain(&alternatives)
        .any(|set| set[fe].sd > PINNED_SD);
    let lins =
        crate::linearised::read_or_compute(o, &records, &loaded, &cache, frontend_curve, say)?;
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
                    .entry(e.to_string().lines().next().unwrap_or_default().to_string())
                    .or_default() += 1
            }
        }
    }
    let fits: Vec<GroupFit> = groups
        .iter()
        .map(|((engine, family), lins)| {
            let fit_with = |terms: &[Term]| {
                let ctx = Ctx {
                    o,
                    loaded: &loaded,
                    cache: &cache,
                    terms,
                };
                fit_group(engine, family, lins, &ctx)
            };
            first_improving(1 + alternatives.len(), |i| {
                fit_with(if i == 0 { &terms } else { &alternatives[i - 1] })
            })
        })
        .collect();
    let physics_bands = groups.values().map(|lins| physics_bands_of(lins)).collect();
    Ok(CorpusFit {
        fits,
        physics_bands,
        records: records.len(),
        skipped,
        origin: loaded.origin.clone(),
    })
}

/// A group's bands by physics alone: for a model it has not seen, each model's own and
/// their check.
fn physics_bands_of(lins: &[Lin]) -> PhysicsBands {
    let (recs, obs) = (recs_of(lins), obs_of(lins));
    let res = physics_of(lins);
    PhysicsBands {
        band: profile_bands(lins, &model_folds(lins), &physics_residuals),
        models: crate::model_bands::of(&recs, &obs, &res),
        models_cv: crate::model_bands::coverage(&recs, &obs, &res),
    }
}

/// Each model's own band of the residuals `res` (leave-one-model-out's), with their
/// check added to the cross-validation `cv`.
fn own_model_bands(
    lins: &[Lin],
    res: &[Vec<Option<f64>>],
    cv: &mut BTreeMap<String, BTreeMap<String, CvFigures>>,
) -> BTreeMap<String, calibration::runs::ModelBand> {
    let (recs, obs) = (recs_of(lins), obs_of(lins));
    let own = crate::model_bands::coverage(&recs, &obs, res);
    if !own.is_empty() {
        cv.insert(crate::model_bands::SCHEME.to_string(), own);
    }
    crate::model_bands::of(&recs, &obs, res)
}

/// The fold a record falls in under a cross-validation scheme.
type FoldOf = fn(&RunRecord) -> String;

/// The cross-validation schemes: name and the fold of a record.
const SCHEMES: [(&str, FoldOf); 3] = [
    ("leave-one-model-out", |r| r.model.id.clone()),
    ("leave-one-gpu-out", |r| r.gpu.hardware.clone()),
    // A user's own runs are often one model on one GPU: each run under terms fitted
    // to the others.
    ("leave-one-run-out", |r| r.id.clone()),
];

/// Each record's fold when leaving one model out (the first scheme's).
fn model_folds(lins: &[Lin]) -> Vec<String> {
    lins.iter().map(|l| SCHEMES[0].1(l.rec)).collect()
}

/// The most folds a scheme's bands are nested over (one fit per pair of folds): a
/// scheme of more folds (leave-one-run-out of a large corpus) reports no band.
const MAX_NESTED_FOLDS: usize = 64;

/// An observation's p10-p90 band as factors on its prediction (`None`: no other fold
/// could give one).
type Band = Option<(f64, f64)>;

/// One record's linearised observations, by record.
struct Lin<'a> {
    rec: &'a RunRecord,
    obs: Vec<Obs>,
}

/// The fit's objective on a row of the cross-validation (`None` without both metrics):
/// the weighted sum of each metric's median |error|.
fn objective(figs: &BTreeMap<String, CvFigures>) -> Option<f64> {
    METRICS
        .iter()
        .zip(WEIGHTS)
        .map(|(m, w)| figs.get(m.key()).map(|f| w * f.median_abs_error))
        .sum()
}

/// The first of `sets` term sets whose fit (`fit(i)`, called in order and only while
/// none before it did) beats physics alone; the first set's fit when none does.
fn first_improving(sets: usize, mut fit: impl FnMut(usize) -> GroupFit) -> GroupFit {
    let first = fit(0);
    if beats_physics(&first).0 {
        return first;
    }
    (1..sets)
        .map(&mut fit)
        .find(|g| beats_physics(g).0)
        .unwrap_or(first)
}

/// Whether a group's leave-one-model-out objective beats physics alone's, and the two.
fn beats_physics(g: &GroupFit) -> (bool, Option<f64>, Option<f64>) {
    let cv = g.cv.get("leave-one-model-out").and_then(objective);
    let prior = g.cv.get("physics alone").and_then(objective);
    (
        matches!((cv, prior), (Some(c), Some(p)) if c < p),
        cv,
        prior,
    )
}

/// The groups as the gate leaves them: those whose leave-one-model-out objective
/// beats physics alone's keep their terms, the others price by physics alone and
/// carry its bands (`physics_bands`, one per fit: the band, each model's own and that
/// one's check); and a line for each group saying which and why.
pub fn gate(fits: Vec<GroupFit>, physics_bands: &[PhysicsBands]) -> (Vec<GroupFit>, Vec<String>) {
    assert_eq!(fits.len(), physics_bands.len(), "one physics band per fit");
    let mut lines = Vec::new();
    let gated = fits
        .into_iter()
        .zip(physics_bands)
        .map(|(g, physics_band)| {
            let (keep, cv, prior) = beats_physics(&g);
            let shown = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.1}%", 100.0 * x));
            lines.push(format!(
                "{} {}: leave-one-model-out {} against physics alone {} (median |error| of TPOT + TTFT / 4)",
                if keep { "kept:" } else { "left out (physics alone):" },
                g.name(),
                shown(cv),
                shown(prior)
            ));
            if keep {
                g
            } else {
                let mut cv = g.cv;
                cv.remove(crate::model_bands::SCHEME);
                if !physics_band.models_cv.is_empty() {
                    cv.insert(
                        crate::model_bands::SCHEME.to_string(),
                        physics_band.models_cv.clone(),
                    );
                }
                GroupFit {
                    terms: BTreeMap::new(),
                    fitted: Vec::new(),
                    term_spread: BTreeMap::new(),
                    band: physics_band.band.clone(),
                    model_bands: physics_band.models.clone(),
                    physics_alone: true,
                    cv,
                    ..g
                }
            }
        })
        .collect();
    (gated, lines)
}

/// The log residuals (measured over predicted) of every observation of `lins` under
/// the terms each record's fold was fitted to, by simulation; `None` where the
/// simulation failed.
fn simulated_residuals(lins: &[Lin], params: &[Vec<f64>], ctx: &Ctx) -> Vec<Vec<Option<f64>>> {
    let (o, loaded, cache) = (ctx.o, ctx.loaded, ctx.cache);
    if o.no_check {
        return lins
            .iter()
            .zip(params)
            .map(|(l, p)| {
                l.obs
                    .iter()
                    .map(|o| Some(o.target - o.predict(p, ctx.terms)))
                    .collect()
            })
            .collect();
    }
    lins.par_iter()
        .zip(params)
        .map(|(l, p)| {
            let values: Vec<f64> = ctx.terms.iter().zip(p).map(|(t, x)| t.value(*x)).collect();
            let y = simulate_with(l.rec, &loaded.base, cache, o.seed, o.center, &values).ok();
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
    bands: Option<&[Vec<Band>]>,
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
                // A fold whose band no other fold could give (one fold in all) counts
                // in neither share.
                if let Some((lo, hi)) = bands.and_then(|b| b[i][j]) {
                    inside.push(r >= lo.ln() && r <= hi.ln());
                }
            }
        }
        if errs.is_empty() {
            continue;
        }
        out.insert(
            metric.key().to_string(),
            cv_figures(*metric, &errs, &inside),
        );
    }
    out
}

/// The figures of a metric's errors `errs` (predicted over measured, less 1): the share
/// within its tolerance, the median |error|, and the share of `inside` (whether each
/// measured value lay inside its band) that holds, none when no value had a band.
pub(crate) fn cv_figures(metric: corpus::Metric, errs: &[f64], inside: &[bool]) -> CvFigures {
    let abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
    CvFigures {
        n: errs.len(),
        within: abs.iter().filter(|e| **e <= tolerance(metric)).count() as f64 / errs.len() as f64,
        median_abs_error: corpus::summary::median(&abs),
        band_coverage: (!inside.is_empty())
            .then(|| inside.iter().filter(|b| **b).count() as f64 / inside.len() as f64),
    }
}

/// What a group's fit works with.
struct Ctx<'a> {
    o: &'a FitOptions,
    loaded: &'a crate::Loaded,
    cache: &'a Cache,
    terms: &'a [Term],
}

/// The fit of one group, its cross-validation and bands.
fn fit_group(engine: &str, family: &str, lins: &[Lin], ctx: &Ctx) -> GroupFit {
    let terms = ctx.terms;
    let all: Vec<&Obs> = lins.iter().flat_map(|l| &l.obs).collect();
    let p_all = fit(&all, terms, &WEIGHTS);
    let mut cv = BTreeMap::new();
    // The priors' residuals are the linearisation's own predictions: simulations.
    let physics = physics_of(lins);
    let physics_bands = nested_bands(&obs_of(lins), &model_folds(lins), &physics_residuals);
    cv.insert(
        "physics alone".to_string(),
        figures(lins, &physics, Some(&physics_bands)),
    );
    let in_sample = simulated_residuals(lins, &vec![p_all.clone(); lins.len()], ctx);
    cv.insert("in-sample".to_string(), figures(lins, &in_sample, None));
    let mut band_of = BTreeMap::new();
    let mut model_bands = BTreeMap::new();
    let mut term_spread = BTreeMap::new();
    for (name, fold_of) in SCHEMES {
        let folds: Vec<String> = lins.iter().map(|l| fold_of(l.rec)).collect();
        let by_fold = fits_by_fold(lins, &folds, terms);
        let distinct = by_fold.len();
        let params: Vec<Vec<f64>> = folds.iter().map(|f| by_fold[f].clone()).collect();
        let cross = |obs: &[Obs], f: &[String]| cross_validate(obs, f, terms, &WEIGHTS);
        let bands =
            (distinct <= MAX_NESTED_FOLDS).then(|| nested_bands(&obs_of(lins), &folds, &cross));
        let res = simulated_residuals(lins, &params, ctx);
        cv.insert(name.to_string(), figures(lins, &res, bands.as_deref()));
        if name == "leave-one-model-out" {
            band_of = profile_bands(lins, &folds, &cross);
            model_bands = own_model_bands(lins, &res, &mut cv);
            term_spread = spread_over_folds(terms, &by_fold);
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
        terms: terms
            .iter()
            .zip(&p_all)
            // No term's time is less than none (a linear fit may step below it).
            .map(|(t, p)| (t.key.to_string(), t.value(*p).max(0.0)))
            .collect(),
        fitted: terms
            .iter()
            .filter(|t| t.sd > PINNED_SD)
            .map(|t| t.key.to_string())
            .collect(),
        band: band_of,
        physics_alone: false,
        term_spread,
        model_bands,
        cv,
    }
}

/// One fit per fold of `folds` (each record's), without any of its records (in
/// parallel: a run per fold when leaving one run out).
fn fits_by_fold<'a>(
    lins: &[Lin],
    folds: &'a [String],
    terms: &[Term],
) -> BTreeMap<&'a String, Vec<f64>> {
    let mut distinct: Vec<&String> = folds.iter().collect();
    distinct.sort();
    distinct.dedup();
    distinct
        .par_iter()
        .map(|f| {
            let train: Vec<&Obs> = lins
                .iter()
                .zip(folds)
                .filter(|(_, g)| g != f)
                .flat_map(|(l, _)| &l.obs)
                .collect();
            (*f, fit(&train, terms, &WEIGHTS))
        })
        .collect()
}

/// Per fitted term (not pinned at its prior), the lowest and highest value it takes over
/// the fits of `by_fold` (one per fold left out); none with fewer than two folds.
fn spread_over_folds(
    terms: &[Term],
    by_fold: &BTreeMap<&String, Vec<f64>>,
) -> BTreeMap<String, [f64; 2]> {
    if by_fold.len() < 2 {
        return BTreeMap::new();
    }
    terms
        .iter()
        .enumerate()
        .filter(|(_, t)| t.sd > PINNED_SD)
        .map(|(k, t)| {
            let values = by_fold.values().map(|p| t.value(p[k]));
            let lo = values.clone().fold(f64::INFINITY, f64::min);
            let hi = values.fold(f64::NEG_INFINITY, f64::max);
            (t.key.to_string(), [lo, hi])
        })
        .collect()
}

/// An observation set's residuals (log measured over predicted) as a band sees them:
/// given the observations and their folds, one residual each.
type Residuals<'a> = &'a dyn Fn(&[Obs], &[String]) -> Vec<f64>;

/// The residuals of physics alone (the linearisation's own predictions).
fn physics_residuals(obs: &[Obs], _folds: &[String]) -> Vec<f64> {
    obs.iter().map(|o| o.target - o.y0.ln()).collect()
}

/// Physics alone's residuals of every observation, by record.
fn physics_of(lins: &[Lin]) -> Vec<Vec<Option<f64>>> {
    let of = |l: &Lin| {
        physics_residuals(&l.obs, &[])
            .into_iter()
            .map(Some)
            .collect()
    };
    lins.iter().map(of).collect()
}

/// Per observation, the band its fold's prediction carries: the band for an unseen
/// fold ([`band_unseen`]) of the other folds' residuals, each cross-validated by a fit
/// that saw neither that fold nor this one (nested: no band is drawn from its own
/// record's data).
fn nested_bands(records: &[&[Obs]], folds: &[String], residuals: Residuals) -> Vec<Vec<Band>> {
    let mut names: Vec<&String> = folds.iter().collect();
    names.sort();
    names.dedup();
    let mut by_fold: BTreeMap<&String, [Option<(f64, f64)>; 2]> = BTreeMap::new();
    for held in &names {
        let (obs, inner): (Vec<Obs>, Vec<String>) = records
            .iter()
            .zip(folds)
            .filter(|(_, f)| f != held)
            .flat_map(|(r, f)| r.iter().map(move |o| (o.clone(), f.clone())))
            .unzip();
        let res = residuals(&obs, &inner);
        let mut b = [None, None];
        for (m, slot) in b.iter_mut().enumerate() {
            *slot = metric_band(&obs, &res, &inner, m);
        }
        by_fold.insert(held, b);
    }
    records
        .iter()
        .zip(folds)
        .map(|(r, f)| r.iter().map(|o| by_fold[f][o.metric]).collect())
        .collect()
}

/// Each record's observations.
fn obs_of<'a>(lins: &'a [Lin]) -> Vec<&'a [Obs]> {
    lins.iter().map(|l| l.obs.as_slice()).collect()
}

/// Each record.
fn recs_of<'a>(lins: &[Lin<'a>]) -> Vec<&'a RunRecord> {
    lins.iter().map(|l| l.rec).collect()
}

/// The profile's bands: per metric, the band for an unseen fold of the group's
/// residuals under `folds`.
fn profile_bands(
    lins: &[Lin],
    folds: &[String],
    residuals: Residuals,
) -> BTreeMap<String, [f64; 2]> {
    let (obs, f): (Vec<Obs>, Vec<String>) = lins
        .iter()
        .zip(folds)
        .flat_map(|(l, f)| l.obs.iter().map(move |o| (o.clone(), f.clone())))
        .unzip();
    let res = residuals(&obs, &f);
    METRICS
        .iter()
        .enumerate()
        .filter_map(|(m, metric)| {
            metric_band(&obs, &res, &f, m).map(|(lo, hi)| (metric.key().to_string(), [lo, hi]))
        })
        .collect()
}

/// The band for an unseen fold of metric `m`'s residuals `res` (one per observation
/// of `obs`, in the folds `folds`).
fn metric_band(obs: &[Obs], res: &[f64], folds: &[String], m: usize) -> Band {
    let (r, f): (Vec<f64>, Vec<&str>) = obs
        .iter()
        .zip(res)
        .zip(folds)
        .filter(|((o, _), _)| o.metric == m)
        .map(|((_, r), f)| (*r, f.as_str()))
        .unzip();
    band_unseen(&r, &f)
}

/// A pinned term's prior sd: it stays at its prior.
const PINNED_SD: f64 = 1e-9;

/// The terms to fit: every term of the table, those not named by `--terms` pinned at
/// their priors, every prior's sd scaled by `--prior-scale`.
fn chosen_terms(keys: &[String], prior_scale: f64) -> Result<Vec<Term>> {
    for k in keys {
        if !TERMS.iter().any(|t| t.key == k) {
            bail!(
                "--terms {k}: not a term; the terms are {}",
                TERMS.iter().map(|t| t.key).collect::<Vec<_>>().join(", ")
            );
        }
    }
    if !(prior_scale.is_finite() && prior_scale > 0.0) {
        bail!("--prior-scale {prior_scale}: must be a positive number");
    }
    Ok(TERMS
        .iter()
        .map(|t| {
            let free = keys.is_empty() || keys.iter().any(|k| k == t.key);
            Term {
                sd: if free { t.sd * prior_scale } else { PINNED_SD },
                ..*t
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tpot: f64, ttft: f64) -> BTreeMap<String, CvFigures> {
        let f = |e| CvFigures {
            n: 10,
            within: 0.5,
            median_abs_error: e,
            band_coverage: None,
        };
        BTreeMap::from([("tpot_ms".into(), f(tpot)), ("ttft_ms".into(), f(ttft))])
    }

    fn group(engine: &str, lomo: Option<(f64, f64)>, physics: (f64, f64)) -> GroupFit {
        let mut cv = BTreeMap::from([("physics alone".to_string(), row(physics.0, physics.1))]);
        if let Some((p, t)) = lomo {
            cv.insert("leave-one-model-out".into(), row(p, t));
        }
        GroupFit {
            engine: engine.into(),
            family: "hopper".into(),
            gpus: vec![],
            models: vec![],
            records: 10,
            terms: Default::default(),
            fitted: vec!["frontend_s".into()],
            band: BTreeMap::from([("tpot_ms".into(), [0.9, 1.1])]),
            physics_alone: false,
            term_spread: BTreeMap::from([("frontend_s".into(), [0.01, 0.03])]),
            model_bands: BTreeMap::from([(
                "m".to_string(),
                calibration::runs::ModelBand {
                    records: 9,
                    band: BTreeMap::from([("tpot_ms".into(), [0.95, 1.05])]),
                },
            )]),
            cv,
        }
    }

    /// The gate weighs TPOT's median |error| by 1 and TTFT's by a quarter, keeps a
    /// group's terms only strictly below physics alone, and a group's without the
    /// check (one model) never; a group left out prices by physics alone and carries
    /// physics alone's band.
    #[test]
    fn the_gate_keeps_what_beats_physics_on_unseen_models() {
        let physics: Vec<PhysicsBands> = (0..4)
            .map(|i| PhysicsBands {
                band: BTreeMap::from([("tpot_ms".into(), [0.8, 1.2 + i as f64])]),
                ..Default::default()
            })
            .collect();
        let (gated, lines) = gate(
            vec![
                // 0.10 + 0.40 / 4 = 0.20 against 0.12 + 0.40 / 4 = 0.22: kept.
                group("a", Some((0.10, 0.40)), (0.12, 0.40)),
                // 0.10 + 0.60 / 4 = 0.25 against 0.12 + 0.40 / 4 = 0.22: TTFT's loss wins.
                group("b", Some((0.10, 0.60)), (0.12, 0.40)),
                // Equal: no gain, left out.
                group("c", Some((0.12, 0.40)), (0.12, 0.40)),
                group("d", None, (0.12, 0.40)),
            ],
            &physics,
        );
        let kept: Vec<&str> = gated
            .iter()
            .filter(|g| !g.physics_alone)
            .map(|g| g.engine.as_str())
            .collect();
        assert_eq!(kept, ["a"]);
        assert_eq!(gated[0].band["tpot_ms"], [0.9, 1.1]);
        assert_eq!(gated[0].fitted, ["frontend_s"]);
        assert_eq!(gated[0].model_bands["m"].records, 9);
        assert_eq!(gated[0].term_spread["frontend_s"], [0.01, 0.03]);
        for (i, g) in gated.iter().enumerate().skip(1) {
            assert!(g.terms.is_empty() && g.fitted.is_empty(), "{}", g.engine);
            assert!(g.term_spread.is_empty(), "{}", g.engine);
            assert_eq!(g.band, physics[i].band, "{}", g.engine);
            // Physics alone's own-model bands (here none) replace the terms'.
            assert!(g.model_bands.is_empty(), "{}", g.engine);
        }
        assert_eq!(lines.len(), 4);
        assert!(
            lines[0].starts_with("kept: a on hopper: leave-one-model-out 20.0%"),
            "{}",
            lines[0]
        );
    }

    /// A fold's band is drawn from the other folds alone: changing a fold's own
    /// residuals leaves its band as it was and moves the others' (physics alone's
    /// residuals, and terms cross-validated by fits without it).
    #[test]
    fn a_folds_band_never_sees_its_own_records() {
        let obs = |target: f64, metric: usize| Obs {
            metric,
            y0: 10.0,
            grad: vec![10.0; TERMS.len()],
            target: (10.0f64).ln() + target,
            curve: None,
        };
        let folds: Vec<String> = ["a", "a", "b", "b", "c", "c"].map(String::from).to_vec();
        let make = |a_shift: f64| -> Vec<Vec<Obs>> {
            [0.1, 0.15, -0.1, -0.05, 0.3, 0.2]
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let r = if i < 2 { r + a_shift } else { *r };
                    vec![obs(r, 0), obs(2.0 * r, 1)]
                })
                .collect()
        };
        let terms = chosen_terms(&["in_situ.decode.gemm".to_string()], 1.0).unwrap();
        let cross = |o: &[Obs], f: &[String]| cross_validate(o, f, &terms, &WEIGHTS);
        let bands = |recs: &[Vec<Obs>], r: Residuals| {
            let slices: Vec<&[Obs]> = recs.iter().map(|v| v.as_slice()).collect();
            nested_bands(&slices, &folds, r)
        };
        for residuals in [&physics_residuals as Residuals, &cross] {
            let (before, after) = (bands(&make(0.0), residuals), bands(&make(1.0), residuals));
            for i in 0..2 {
                assert_eq!(before[i], after[i], "fold a, record {i}");
                assert!(before[i][0].is_some());
            }
            for i in 2..6 {
                assert_ne!(before[i], after[i], "record {i}");
            }
        }
    }

    /// A term's spread is its lowest and highest value over the fits leaving one fold
    /// out, by hand: a log term at ln 1.1 and ln 1.3 spans 1.1-1.3, a seconds term at
    /// 0.02 and 0.01 spans 0.01-0.02; a pinned term has none, nor has one fold.
    #[test]
    fn a_terms_spread_is_its_range_over_the_folds_fits() {
        let term = |key, log, sd| Term {
            key,
            log,
            prior: 1.0,
            sd,
            step: 0.1,
        };
        let terms = [
            term("a", true, 0.5),
            term("b", false, 0.01),
            term("c", true, PINNED_SD),
        ];
        let (f1, f2) = ("m1".to_string(), "m2".to_string());
        let by_fold = BTreeMap::from([
            (&f1, vec![1.1f64.ln(), 0.02, 0.0]),
            (&f2, vec![1.3f64.ln(), 0.01, 0.0]),
        ]);
        let s = spread_over_folds(&terms, &by_fold);
        assert_eq!(s.len(), 2, "{s:?}");
        let [lo, hi] = s["a"];
        assert!((lo - 1.1).abs() < 1e-12 && (hi - 1.3).abs() < 1e-12);
        assert_eq!(s["b"], [0.01, 0.02]);
        let one = BTreeMap::from([(&f1, vec![0.0, 0.0, 0.0])]);
        assert!(spread_over_folds(&terms, &one).is_empty());
    }

    /// `--or-terms`: a group takes the first term set that beats physics alone, fits
    /// no set after it, and keeps the first set's fit when none does.
    #[test]
    fn a_group_takes_the_first_term_set_that_beats_physics() {
        let sets = [
            group("all three", Some((0.10, 0.60)), (0.12, 0.40)),
            group("element-wise", Some((0.10, 0.40)), (0.12, 0.40)),
            group("never fitted", Some((0.05, 0.10)), (0.12, 0.40)),
        ];
        let mut asked = Vec::new();
        let g = first_improving(3, |i| {
            asked.push(i);
            sets[i].clone()
        });
        assert_eq!(g.engine, "element-wise");
        assert_eq!(asked, [0, 1]);
        let none = first_improving(2, |i| group(["first", "second"][i], None, (0.1, 0.1)));
        assert_eq!(none.engine, "first");
    }
}
