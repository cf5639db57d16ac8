//! Fitting a table profile: per op family and key, the physics parameters by pattern
//! search on the training rows' log errors, then the correction grid on their
//! residuals; errors on the held-out rows, physics alone and corrected.
//!
//! The split is by distinct shape: the shapes of a key, sorted, and every fifth held
//! out (all of a shape's rows go the same way), so a check row's shape was never seen.
//! Where a key has few distinct shapes (collectives: a size sweep), leave-one-out over
//! them is reported too.

use super::read::{Measured, Read, Selection};
use super::smooth::{self, Smoothing};
use sim::cost::tables::family::{Family, Prepared, Shape};
use sim::cost::tables::fit::{config_key, split_sweep, Errors, Fit, Sweep};
use sim::cost::tables::grid::{Axis, Grid};
use sim::cost::tables::{FamilyCheck, KernelTables, TableSource};
use spec::hardware::Hardware;
use std::collections::BTreeMap;

/// How a profile is fitted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Every `holdout`-th distinct shape is held out (0: none).
    pub holdout: usize,
    pub smoothing: Smoothing,
    /// The physics search uses at most this many training rows per key (evenly spaced).
    pub search_rows: usize,
    /// Leave-one-out where a key has at most this many distinct shapes.
    pub loo_shapes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            holdout: 5,
            smoothing: Smoothing::default(),
            search_rows: 2000,
            loo_shapes: 40,
        }
    }
}

/// `|predicted / measured - 1|` summarised.
pub fn errors(rel: &[f64]) -> Errors {
    if rel.is_empty() {
        return Errors::default();
    }
    let a: Vec<f64> = rel.iter().map(|e| e.abs()).collect();
    let n = a.len();
    Errors {
        rows: n,
        median: spec::stats::median(&a),
        within_20: a.iter().filter(|&&e| e <= 0.2).count() as f64 / n as f64,
    }
}

/// The physics parameters minimising the mean squared log error over `rows`.
fn search(hw: &Hardware, family: Family, rows: &[&Measured]) -> Vec<f64> {
    let spec = family.params();
    let mut x: Vec<f64> = spec.iter().map(|p| p.1).collect();
    let cost = |x: &[f64]| {
        let prep = Prepared::new(family, x.to_vec());
        rows.iter()
            .map(|m| {
                let e = (m.shape.physics(hw, &prep) / m.seconds).ln();
                if e.is_finite() {
                    e * e
                } else {
                    1e6
                }
            })
            .sum::<f64>()
    };
    let mut best = cost(&x);
    let mut step: f64 = 4.0;
    while step > 1.005 {
        let mut improved = false;
        for i in 0..x.len() {
            for f in [step, 1.0 / step] {
                let mut y = x.clone();
                y[i] = (y[i] * f).clamp(spec[i].2, spec[i].3);
                if y[i] == x[i] {
                    continue;
                }
                let c = cost(&y);
                if c < best {
                    best = c;
                    x = y;
                    improved = true;
                }
            }
        }
        if !improved {
            step = step.sqrt();
        }
    }
    x
}

/// One key's fit from its training rows.
fn fit_key(hw: &Hardware, family: Family, key: &str, train: &[&Measured], o: &Options) -> Fit {
    let stride = (train.len() / o.search_rows.max(1)).max(1);
    let sample: Vec<&Measured> = train.iter().step_by(stride).copied().collect();
    let params = search(hw, family, &sample);
    let prep = Prepared::new(family, params.clone());
    let shapes: Vec<&Shape> = train.iter().map(|m| &m.shape).collect();
    let mut grid = Grid::zeros(Shape::axes(&shapes));
    let x: Vec<Vec<f64>> = train.iter().map(|m| m.shape.features()).collect();
    let r: Vec<f64> = train
        .iter()
        .map(|m| (m.seconds / m.shape.physics(hw, &prep)).ln())
        .collect();
    smooth::fit(&mut grid, &x, &r, o.smoothing);
    let mut fit = Fit::new(family, key.to_string(), params, grid);
    if let Some(axis) = family.sweep_axis() {
        fit.sweeps = sweeps(&fit, axis, &x, &r, o);
    }
    fit
}

/// Per configuration (the features but the sweep axis), a 1-D correction of what the
/// coarse grid leaves, where the configuration has at least three sweep points.
fn sweeps(fit: &Fit, axis: usize, x: &[Vec<f64>], r: &[f64], o: &Options) -> Vec<Sweep> {
    // Per configuration: its coordinates, and its points' sweep values and residuals.
    type Points = (Vec<f64>, Vec<Vec<f64>>, Vec<f64>);
    let mut by: BTreeMap<Vec<i64>, Points> = BTreeMap::new();
    for (xi, ri) in x.iter().zip(r) {
        let (at, along) = split_sweep(xi, axis);
        let e = by
            .entry(config_key(&at))
            .or_insert_with(|| (at, Vec::new(), Vec::new()));
        e.1.push(vec![along]);
        e.2.push(ri - fit.correction.at(xi));
    }
    by.into_values()
        .filter_map(|(at, xs, rs)| {
            let mut pts: Vec<f64> = xs.iter().map(|p| p[0]).collect();
            pts.sort_by(f64::total_cmp);
            pts.dedup();
            if pts.len() < 3 {
                return None;
            }
            let axis = Axis::covering(pts[0], pts[pts.len() - 1], 1.0);
            let mut g = Grid::zeros(vec![axis]);
            smooth::fit(&mut g, &xs, &rs, o.smoothing);
            Some(Sweep { at, grid: g })
        })
        .collect()
}

/// Relative errors of `fit` on `rows`: physics alone and corrected.
fn rel_errors(hw: &Hardware, fit: &Fit, rows: &[&Measured]) -> (Vec<f64>, Vec<f64>) {
    rows.iter()
        .map(|m| {
            (
                fit.physics(hw, &m.shape) / m.seconds - 1.0,
                fit.price(hw, &m.shape) / m.seconds - 1.0,
            )
        })
        .unzip()
}

/// Fits a profile to `read`'s rows, pricing the physics on `hw`.
pub fn fit(
    hw: &Hardware,
    sel: &Selection,
    read: &Read,
    source: TableSource,
    o: &Options,
) -> KernelTables {
    let mut fits = Vec::new();
    let mut by_family: BTreeMap<Family, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for ((family, key), rows) in groups(read) {
        let names = distinct_shapes(&rows);
        let (check, train) = split(&rows, o.holdout);
        let mut f = fit_key(hw, family, &key, &train, o);
        let (pt, ft) = rel_errors(hw, &f, &train);
        let (pc, fc) = rel_errors(hw, &f, &check);
        f.fit_physics = errors(&pt);
        f.fit = errors(&ft);
        f.check_physics = errors(&pc);
        f.check = errors(&fc);
        if names.len() <= o.loo_shapes && names.len() >= 3 {
            let mut loo = Vec::new();
            for name in &names {
                let (out, keep): (Vec<&Measured>, Vec<&Measured>) =
                    rows.iter().partition(|m| &shape_id(&m.shape) == name);
                let g = fit_key(hw, family, &key, &keep, o);
                loo.extend(rel_errors(hw, &g, &out).1);
            }
            f.leave_one_out = Some(errors(&loo));
        }
        let e = by_family.entry(family).or_default();
        e.0.extend(pc);
        e.1.extend(fc);
        fits.push(f);
    }
    let checks = by_family
        .into_iter()
        .map(|(family, (p, f))| FamilyCheck {
            family,
            physics: errors(&p),
            fitted: errors(&f),
        })
        .collect();
    KernelTables::new(
        sel.system.clone(),
        hw.name.clone(),
        sel.engine.clone(),
        sel.version.clone(),
        source,
        checks,
        fits,
    )
}

/// The rows by family and key (each key is fitted on its own).
pub fn groups(read: &Read) -> BTreeMap<(Family, String), Vec<&Measured>> {
    let mut groups: BTreeMap<(Family, String), Vec<&Measured>> = BTreeMap::new();
    for m in &read.rows {
        groups
            .entry((m.shape.family(), m.shape.key()))
            .or_default()
            .push(m);
    }
    groups
}

/// A key's distinct shapes, sorted by their description.
fn distinct_shapes(rows: &[&Measured]) -> Vec<String> {
    let mut names: Vec<String> = rows.iter().map(|m| shape_id(&m.shape)).collect();
    names.sort();
    names.dedup();
    names
}

/// A key's rows as `(held out, fitted)`: every `holdout`-th distinct shape held out.
#[allow(clippy::type_complexity)]
pub fn split<'a>(rows: &[&'a Measured], holdout: usize) -> (Vec<&'a Measured>, Vec<&'a Measured>) {
    let names = distinct_shapes(rows);
    let held: std::collections::HashSet<&String> = if holdout > 0 && names.len() >= holdout {
        names
            .iter()
            .enumerate()
            .filter(|(i, _)| i % holdout == holdout - 1)
            .map(|(_, n)| n)
            .collect()
    } else {
        Default::default()
    };
    rows.iter()
        .partition(|m| held.contains(&shape_id(&m.shape)))
}

/// A shape's identity for the split (its fields, exactly).
fn shape_id(s: &Shape) -> String {
    format!("{s:?}")
}
