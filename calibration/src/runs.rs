//! Terms fitted to measured runs (`twin calibrate --from-runs`): the few
//! interpretable corrections physics leaves open (in-situ factors per phase and op
//! family, the host's exposed time per step, the front end's per request), fitted by
//! ridge least squares on log errors, with group cross-validation and p10-p90 bands
//! from the cross-validated residuals.
//!
//! A simulation is too slow to sit inside a fit's loop, so each observation (one
//! record's prediction of one metric) is linearised once, at the prior terms, in the
//! terms' values: `Y(v) ~ Y0 + sum_k g_k (v_k - prior_k)`, the gradient by forward
//! differences of whole simulations (the binary computes them). Linear in the values
//! because a step's time is: a factor scales its op family's time, a second adds
//! itself. The fit minimises log errors of that model plus a ridge towards the priors
//! (Levenberg-Marquardt, pure arithmetic), so every cross-validation fold and band is
//! cheap; the binary simulates the fitted terms again to report true errors.
//!
//! One term is not linear: the front end's seconds per request. A closed loop's
//! requests come back in waves, and how a wave's prefills fall on step boundaries flips
//! when the front end's delay crosses a step (measured on the public H100 runs: 12 ms
//! and 45 ms give TTFT p50s 2.5x apart at the same throughput). Its observations carry
//! a [`Curve`]: the prediction simulated at a grid of its values, the other terms at
//! their priors; the fit searches that term over the grid (and between the best grid
//! points) with the other terms fitted at each value.

use fitting::lsq::solve_linear;
use serde::{Deserialize, Serialize};

/// The GPU family a fit groups hardware by: one architecture generation of one
/// vendor (kernels, libraries and engines' code paths are per generation).
pub fn family(hardware: &str) -> &'static str {
    match hardware {
        "h100" | "h200" | "h20" | "h800" => "hopper",
        "b200" | "b300" | "gb200" | "gb300" => "blackwell",
        "a100" => "ampere",
        "mi300x" | "mi325x" | "mi355x" => "cdna3",
        "l40s" | "l4" => "ada",
        "rtx-pro-6000" => "blackwell-pcie",
        _ => "other",
    }
}

/// One term: a cost key (or `frontend_s`), fitted as a log-factor or as seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Term {
    pub key: &'static str,
    /// Fitted as `ln(value)` (a factor) rather than the value (seconds).
    pub log: bool,
    /// The prior value (in the value's own units), which the ridge pulls towards.
    pub prior: f64,
    /// The prior's standard deviation, in the fitted parameter's units (`ln` for a
    /// factor, seconds else).
    pub sd: f64,
    /// Forward-difference step of the Jacobian, in the parameter's units.
    pub step: f64,
}

impl Term {
    /// The parameter of a value (`ln` of a factor).
    pub fn param(&self, value: f64) -> f64 {
        if self.log {
            value.ln()
        } else {
            value
        }
    }

    /// The value of a parameter.
    pub fn value(&self, param: f64) -> f64 {
        if self.log {
            param.exp()
        } else {
            param
        }
    }
}

/// One linearised observation: a record's prediction of one metric at the prior
/// terms (in the metric's units), its gradient in the terms' values, and the log of
/// what was measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Obs {
    /// Which metric (the caller's index).
    pub metric: usize,
    pub y0: f64,
    pub grad: Vec<f64>,
    pub target: f64,
    /// The prediction along one term simulated at several of its values (the others
    /// at their priors), for a term the linear model cannot follow; `grad` of that
    /// term is then not used.
    pub curve: Option<Curve>,
}

/// A prediction simulated at several values of one term: `points` are (value,
/// prediction), sorted by value; between them it is interpolated linearly, beyond
/// them held at the nearest.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// The term's index in the terms.
    pub term: usize,
    pub points: Vec<(f64, f64)>,
}

impl Curve {
    /// The prediction at value `x`.
    pub fn at(&self, x: f64) -> f64 {
        let pts = &self.points;
        let i = pts.partition_point(|(v, _)| *v < x);
        if i == 0 {
            return pts[0].1;
        }
        if i == pts.len() {
            return pts[pts.len() - 1].1;
        }
        let ((x0, y0), (x1, y1)) = (pts[i - 1], pts[i]);
        y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    }

    /// The slope at value `x` (of the segment it lies on; 0 beyond the ends).
    fn slope(&self, x: f64) -> f64 {
        let pts = &self.points;
        let i = pts.partition_point(|(v, _)| *v <= x);
        if i == 0 || i == pts.len() {
            return 0.0;
        }
        let ((x0, y0), (x1, y1)) = (pts[i - 1], pts[i]);
        (y1 - y0) / (x1 - x0)
    }
}

/// The least a linearised prediction may be, as a share of its prior prediction (a
/// fit must not drive a time through zero).
const FLOOR: f64 = 0.05;

impl Obs {
    /// The linear model's prediction at values `v` (priors `v0`).
    pub fn value(&self, v: &[f64], v0: &[f64]) -> f64 {
        let along = self.curve.as_ref().map(|c| c.term);
        let base = match &self.curve {
            Some(c) => c.at(v[c.term]),
            None => self.y0,
        };
        let y = base
            + self
                .grad
                .iter()
                .zip(v.iter().zip(v0))
                .enumerate()
                .filter(|(k, _)| Some(*k) != along)
                .map(|(_, (g, (x, x0)))| g * (x - x0))
                .sum::<f64>();
        y.max(FLOOR * self.y0)
    }

    /// `d Y / d v_k` at values `v`.
    fn slope(&self, k: usize, v: &[f64]) -> f64 {
        match &self.curve {
            Some(c) if c.term == k => c.slope(v[k]),
            _ => self.grad[k],
        }
    }

    /// Its log at parameters `p` (the terms' own parameterisation).
    pub fn predict(&self, p: &[f64], terms: &[Term]) -> f64 {
        let v: Vec<f64> = terms.iter().zip(p).map(|(t, x)| t.value(*x)).collect();
        let v0: Vec<f64> = terms.iter().map(|t| t.prior).collect();
        self.value(&v, &v0).ln()
    }
}

/// The parameters of the terms at their priors.
pub fn priors(terms: &[Term]) -> Vec<f64> {
    terms.iter().map(|t| t.param(t.prior)).collect()
}

/// The fit's objective at `p`: weighted squared log errors plus the ridge.
fn objective(obs: &[&Obs], terms: &[Term], weights: &[f64], p: &[f64]) -> f64 {
    let p0 = priors(terms);
    let data: f64 = obs
        .iter()
        .map(|o| {
            let w = weights.get(o.metric).copied().unwrap_or(1.0);
            w * (o.predict(p, terms) - o.target).powi(2)
        })
        .sum();
    let ridge: f64 = terms
        .iter()
        .zip(p.iter().zip(&p0))
        .map(|(t, (x, x0))| ((x - x0) / t.sd).powi(2))
        .sum();
    data + ridge
}

/// Seconds held at zero or above.
fn project(p: &mut [f64], terms: &[Term]) {
    for (x, t) in p.iter_mut().zip(terms) {
        if !t.log && *x < 0.0 {
            *x = 0.0;
        }
    }
}

/// The least sd of a term that is fitted (below it a term is pinned at its prior).
const FREE_SD: f64 = 1e-6;

/// Ridge least squares on log errors: the parameters minimising `sum w_m (ln Y(p) -
/// target)^2 + sum ((p_k - prior_k) / sd_k)^2`, `w_m` the weight of each
/// observation's metric, by Levenberg-Marquardt from the priors (seconds held at zero
/// or above). A fitted term the observations carry a [`Curve`] along is searched
/// instead: the others fitted at each of the curve's values, then golden-section
/// between the best value's neighbours. With no observation the priors stand.
pub fn fit(obs: &[&Obs], terms: &[Term], weights: &[f64]) -> Vec<f64> {
    let along = obs.iter().find_map(|o| o.curve.as_ref());
    match along {
        Some(c) if terms[c.term].sd > FREE_SD => search(obs, terms, weights, c),
        _ => lm(obs, terms, weights, None),
    }
}

/// The fit with term `c.term` searched over the curve's values and refined between
/// the best one's neighbours (the objective along it is not convex: a wave of
/// prefills flips from one step boundary to another).
fn search(obs: &[&Obs], terms: &[Term], weights: &[f64], c: &Curve) -> Vec<f64> {
    let k = c.term;
    let at = |x: f64| {
        let p = lm(obs, terms, weights, Some((k, terms[k].param(x))));
        (objective(obs, terms, weights, &p), p)
    };
    let xs: Vec<f64> = c.points.iter().map(|(x, _)| *x).collect();
    let tried: Vec<(f64, Vec<f64>)> = xs.iter().map(|x| at(*x)).collect();
    let best = (0..xs.len())
        .min_by(|a, b| tried[*a].0.total_cmp(&tried[*b].0))
        .unwrap_or(0);
    let (mut lo, mut hi) = (xs[best.saturating_sub(1)], xs[(best + 1).min(xs.len() - 1)]);
    let mut out = tried[best].clone();
    if hi - lo < 1e-9 {
        return out.1;
    }
    // Golden section: each step keeps one interior point and its fit, and fits one new.
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (hi - g * (hi - lo), lo + g * (hi - lo));
    let (mut fa, mut fb) = (at(a), at(b));
    for _ in 0..12 {
        if fa.0 <= fb.0 {
            (hi, b, fb) = (b, a, fa.clone());
            a = hi - g * (hi - lo);
            fa = at(a);
        } else {
            (lo, a, fa) = (a, b, fb.clone());
            b = lo + g * (hi - lo);
            fb = at(b);
        }
        if hi - lo < 1e-9 {
            break;
        }
    }
    for f in [fa, fb] {
        if f.0 < out.0 {
            out = f;
        }
    }
    out.1
}

/// Levenberg-Marquardt from the priors, term `fixed.0` held at parameter `fixed.1`.
fn lm(obs: &[&Obs], terms: &[Term], weights: &[f64], fixed: Option<(usize, f64)>) -> Vec<f64> {
    let p0 = priors(terms);
    let mut p = p0.clone();
    if let Some((k, x)) = fixed {
        p[k] = x;
    }
    let mut f = objective(obs, terms, weights, &p);
    let mut mu = 1e-3;
    for _ in 0..100 {
        let (a, b) = gauss_newton(obs, terms, weights, fixed, &p, &p0);
        let mut improved = false;
        for _ in 0..20 {
            let mut damped = a.clone();
            for (k, row) in damped.iter_mut().enumerate() {
                row[k] += mu * a[k][k].max(1e-12);
            }
            let Some(step) = solve_linear(damped, b.clone(), 1e-300) else {
                break;
            };
            let mut q: Vec<f64> = p.iter().zip(&step).map(|(x, d)| x + d).collect();
            project(&mut q, terms);
            let fq = objective(obs, terms, weights, &q);
            if fq < f {
                let gain = f - fq;
                p = q;
                f = fq;
                mu = (mu / 3.0).max(1e-9);
                improved = gain > 1e-12 * f.max(1e-12);
                break;
            }
            mu *= 4.0;
        }
        if !improved {
            break;
        }
    }
    p
}

/// The Gauss-Newton system `(a, b)` of the data and the ridge at `p` (priors `p0`),
/// term `fixed.0` held where given.
fn gauss_newton(
    obs: &[&Obs],
    terms: &[Term],
    weights: &[f64],
    fixed: Option<(usize, f64)>,
    p: &[f64],
    p0: &[f64],
) -> (Vec<Vec<f64>>, Vec<f64>) {
    let n = terms.len();
    let mut a = vec![vec![0.0; n]; n];
    let mut b = vec![0.0; n];
    let v: Vec<f64> = terms.iter().zip(p).map(|(t, x)| t.value(*x)).collect();
    let v0: Vec<f64> = terms.iter().map(|t| t.prior).collect();
    for o in obs {
        let w = weights.get(o.metric).copied().unwrap_or(1.0);
        let y = o.value(&v, &v0);
        let r = y.ln() - o.target;
        let floored = y <= FLOOR * o.y0;
        // d ln Y / d p_k = g_k (dv_k / dp_k) / Y.
        let j: Vec<f64> = (0..n)
            .map(|k| {
                let dv = if terms[k].log { v[k] } else { 1.0 };
                if floored || fixed.is_some_and(|(f, _)| f == k) {
                    0.0
                } else {
                    o.slope(k, &v) * dv / y
                }
            })
            .collect();
        for i in 0..n {
            b[i] -= w * j[i] * r;
            for k in 0..n {
                a[i][k] += w * j[i] * j[k];
            }
        }
    }
    for k in 0..n {
        if fixed.is_some_and(|(f, _)| f == k) {
            a[k][k] = 1.0;
            continue;
        }
        let prec = 1.0 / (terms[k].sd * terms[k].sd);
        a[k][k] += prec;
        b[k] -= prec * (p[k] - p0[k]);
    }
    (a, b)
}

/// Cross-validated residuals: each observation's `target - prediction` by the terms
/// fitted to the observations of every other fold (`fold[i]` names observation i's).
pub fn cross_validate(obs: &[Obs], fold: &[String], terms: &[Term], weights: &[f64]) -> Vec<f64> {
    let mut names: Vec<&String> = fold.iter().collect();
    names.sort();
    names.dedup();
    let mut out = vec![0.0; obs.len()];
    for name in names {
        let train: Vec<&Obs> = obs
            .iter()
            .zip(fold)
            .filter(|(_, f)| *f != name)
            .map(|(o, _)| o)
            .collect();
        let p = fit(&train, terms, weights);
        for (i, o) in obs.iter().enumerate() {
            if &fold[i] == name {
                out[i] = o.target - o.predict(&p, terms);
            }
        }
    }
    out
}

/// The `q` quantile of `xs` (statrs' order statistics); `None` when empty.
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    use statrs::statistics::{Data, OrderStatistics};
    (!xs.is_empty()).then(|| Data::new(xs.to_vec()).quantile(q.clamp(0.0, 1.0)))
}

/// A p10-p90 band of log residuals (measured over predicted), as factors on a
/// prediction: `(exp(q10), exp(q90))`.
pub fn band(residuals: &[f64]) -> Option<(f64, f64)> {
    Some((
        quantile(residuals, 0.1)?.exp(),
        quantile(residuals, 0.9)?.exp(),
    ))
}

/// Normal quantiles the spread between folds is drawn at (the midpoints of 41 equal
/// slices of probability): a fixed grid, so a band is the same every run.
const BETWEEN_DRAWS: usize = 41;

/// A p10-p90 band, as factors on a prediction, for a fold none of `residuals` (log
/// measured over predicted) came from: a model the fit has not seen. A model's
/// residuals share a bias of their own (how far the physics misses that model), so
/// pooling other models' residuals gives too narrow a band when they are few (a new
/// model's bias falls outside the range of two others' a third of the time). The band
/// is the random-effects one: each residual less its fold's median (the spread within a
/// model), plus the spread between the folds' medians as a normal of their standard
/// deviation widened by `sqrt(1 + 1/K)` for K folds (the uncertainty of their mean),
/// about the mean of the medians. With one fold there is no spread between folds to
/// know, and the band is that fold's residuals' own.
pub fn band_unseen(residuals: &[f64], folds: &[&str]) -> Option<(f64, f64)> {
    band_between(residuals, folds, |medians| {
        let k = medians.len();
        let mean = medians.iter().sum::<f64>() / k as f64;
        let spread = if k > 1 {
            let var = medians.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
            (var * (1.0 + 1.0 / k as f64)).sqrt()
        } else {
            0.0
        };
        Some((mean, spread))
    })
}

/// [`band_unseen`] with the folds' medians' centre and spread read robustly: their
/// median, and 1.4826 times their median absolute deviation (a normal's standard
/// deviation), widened by `sqrt(1 + 1/K)`. For folds of one model's deployments, where
/// a few deployments twin misses by multiples would otherwise set the spread for all:
/// those few fall outside the band instead of widening it for every run.
pub fn band_unseen_robust(residuals: &[f64], folds: &[&str]) -> Option<(f64, f64)> {
    band_between(residuals, folds, |medians| {
        let k = medians.len();
        let centre = quantile(medians, 0.5)?;
        let spread = if k > 1 {
            let dev: Vec<f64> = medians.iter().map(|m| (m - centre).abs()).collect();
            1.4826 * quantile(&dev, 0.5)? * (1.0 + 1.0 / k as f64).sqrt()
        } else {
            0.0
        };
        Some((centre, spread))
    })
}

/// The band for an unseen fold: each residual less its fold's median, plus the spread
/// between the folds' medians as a normal about their centre (`between`: the centre and
/// standard deviation it reads from the medians).
fn band_between(
    residuals: &[f64],
    folds: &[&str],
    between: impl Fn(&[f64]) -> Option<(f64, f64)>,
) -> Option<(f64, f64)> {
    use statrs::distribution::{ContinuousCDF, Normal};
    let mut by_fold: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for (r, f) in residuals.iter().zip(folds) {
        by_fold.entry(f).or_default().push(*r);
    }
    let medians: Vec<f64> = by_fold
        .values()
        .map(|v| quantile(v, 0.5))
        .collect::<Option<_>>()?;
    if medians.is_empty() {
        return None;
    }
    let (centre, spread) = between(&medians)?;
    let unit = Normal::new(0.0, 1.0).expect("the unit normal");
    let z: Vec<f64> = (0..BETWEEN_DRAWS)
        .map(|j| unit.inverse_cdf((j as f64 + 0.5) / BETWEEN_DRAWS as f64))
        .collect();
    let values: Vec<f64> = by_fold
        .values()
        .zip(&medians)
        .flat_map(|(v, m)| v.iter().map(move |r| r - m))
        .flat_map(|d| z.iter().map(move |z| centre + d + spread * z))
        .collect();
    band(&values)
}

#[cfg(test)]
#[path = "runs_tests.rs"]
mod tests;

/// What `--from-runs` writes: per fit group, the fitted terms with what they were
/// fitted to, their cross-validated figures and the bands of their residuals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsProfile {
    /// Always `"runs"`: tells this file from the other profiles `--profile` reads.
    pub kind: String,
    pub version: u32,
    pub created_by: String,
    pub created_utc: String,
    /// The corpus and filters the terms were fitted to.
    pub corpus: String,
    #[serde(default)]
    pub filters: Vec<String>,
    /// The predicted statistic a record's central figure was compared with.
    pub center: String,
    pub seed: u64,
    pub groups: Vec<GroupFit>,
}

/// The terms of one fit group (an engine on a GPU family).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupFit {
    pub engine: String,
    pub family: String,
    /// The GPUs and models of the records fitted.
    pub gpus: Vec<String>,
    pub models: Vec<String>,
    /// Records fitted (observations: one per measured metric).
    pub records: usize,
    /// The terms, by key (`frontend_s` is the scenario's `serving.frontend_s`).
    pub terms: std::collections::BTreeMap<String, f64>,
    /// The keys of the terms fitted (the others are at their priors); empty in
    /// profiles written before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fitted: Vec<String>,
    /// Per metric, the p10-p90 band (factors, measured over predicted) for a model
    /// the group has not seen ([`band_unseen`]) of the leave-one-model-out residuals,
    /// or of physics alone's in a group whose terms did not beat it.
    pub band: std::collections::BTreeMap<String, [f64; 2]>,
    /// The terms did not beat physics alone on models they had not seen: the group
    /// prices by physics alone and carries only its band and figures.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub physics_alone: bool,
    /// Per fitted term, the lowest and highest value it took in the fits that left one
    /// model out (each fitted without one model's runs): how far the term moves with
    /// the models it is fitted to (empty with one model, or in profiles written before).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub term_spread: std::collections::BTreeMap<String, [f64; 2]>,
    /// Per model of the group with enough runs, its own band: what a run of a model
    /// the group holds carries instead of `band` (empty in profiles written before).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub model_bands: std::collections::BTreeMap<String, ModelBand>,
    /// Per cross-validation scheme (`in-sample`, `leave-one-model-out`,
    /// `leave-one-gpu-out`) and metric, the figures of the simulated check.
    pub cv: std::collections::BTreeMap<String, std::collections::BTreeMap<String, CvFigures>>,
}

impl GroupFit {
    /// The group as outputs name it: `ENGINE on FAMILY` (`vllm on hopper`).
    pub fn name(&self) -> String {
        format!("{} on {}", self.engine, self.family)
    }

    /// Whether the group fitted term `key` (profiles that do not record their fitted
    /// terms count every term as fitted; a group priced by physics alone fitted none).
    pub fn fitted_term(&self, key: &str) -> bool {
        !self.physics_alone && (self.fitted.is_empty() || self.fitted.iter().any(|k| k == key))
    }
}

/// One model's own band in its group: per metric, the p10-p90 (factors, measured over
/// predicted) of its runs' residuals, each run priced as the group's band's are (by
/// terms fitted without that model, or by physics alone), over `records` runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelBand {
    pub records: usize,
    pub band: std::collections::BTreeMap<String, [f64; 2]>,
}

/// One metric's figures under one scheme.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CvFigures {
    pub n: usize,
    /// Share within the metric's tolerance (TTFT 25%, else 15%).
    pub within: f64,
    pub median_abs_error: f64,
    /// Share of measured values inside their predicted p10-p90 band.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band_coverage: Option<f64>,
}

impl RunsProfile {
    pub const KIND: &'static str = "runs";

    /// The group whose terms price `engine` on `hardware`, if the profile has one
    /// (a group priced by physics alone has none).
    pub fn group(&self, engine: &str, hardware: &str) -> Option<&GroupFit> {
        self.group_of(engine, hardware).filter(|g| !g.physics_alone)
    }

    /// The names of the groups whose terms price their runs (`physics_alone` false),
    /// or of those priced by physics alone (true).
    pub fn group_names(&self, physics_alone: bool) -> Vec<String> {
        self.groups
            .iter()
            .filter(|g| g.physics_alone == physics_alone)
            .map(GroupFit::name)
            .collect()
    }

    /// The group of `engine` on `hardware`, its terms applying or not: where a
    /// prediction's band comes from.
    pub fn group_of(&self, engine: &str, hardware: &str) -> Option<&GroupFit> {
        let engine = engine.split('@').next().unwrap_or(engine);
        let fam = family(hardware);
        self.groups
            .iter()
            .find(|g| g.engine == engine && g.family == fam)
    }

    /// Whether `text` is a runs profile (its `kind`), before reading it whole.
    pub fn is_runs_profile(text: &str) -> bool {
        text.lines()
            .map(str::trim)
            .any(|l| l.replace(' ', "") == format!("kind=\"{}\"", Self::KIND))
    }

    pub fn parse(text: &str) -> Result<RunsProfile, crate::CalibrationError> {
        use crate::CalibrationError::RunsProfile as Bad;
        let p: RunsProfile = toml::from_str(text).map_err(|e| Bad(e.to_string()))?;
        if p.kind != Self::KIND || p.version != 1 {
            return Err(Bad(format!(
                "kind `{}` version {}: this twin reads kind \"runs\" version 1",
                p.kind, p.version
            )));
        }
        for g in &p.groups {
            for (k, v) in &g.terms {
                if !v.is_finite() || *v < 0.0 {
                    return Err(Bad(format!(
                        "group {} {}: term {k} = {v}: must be finite and >= 0",
                        g.engine, g.family
                    )));
                }
            }
        }
        Ok(p)
    }
}
