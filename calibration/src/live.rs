//! Calibration of the live engine's own ops at a model's shapes (`twin calibrate --plan
//! live --model M`), and their fits: one cost function per op and static key (the
//! widths the model fixes), linear in the call's variables with nonnegative
//! coefficients, `t = c0 + c1 * var1 + ...` (variables as `spec::call::Call`
//! names them: rows, expert groups, positions read, bytes). The simulator's fitted
//! cost model (`sim::cost::fitted`) prices a step's calls with these coefficients.
//!
//! Measurement: in situ. The engine's executor runs synthetic forward passes of the
//! model (`engine::serve::situ`: prefill chunks and decode batches over contexts of a
//! few thousand tokens) with every op call timed, so each op is measured in the cache
//! state a forward pass leaves it (weights used again only a step later, activations
//! hot), as in a run; on one thread by the thread's CPU clock. Every static key a run
//! needs comes out of these passes, but for the DEP exchange (`plan_live`).

use crate::fit::fit_linear;
use crate::log::MeasurementRecord;
use crate::plan::PlanSize;
use engine::{CopyShape, OpSpec, Point};
use serde::{Deserialize, Serialize};
use spec::call::{Call, CallKey};
use std::collections::{BTreeMap, HashMap};

/// The fitted cost function of one static key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveFit {
    /// `t = coefficients_s[0] + sum_i coefficients_s[i] * vars[i - 1]`.
    pub vars: Vec<String>,
    pub coefficients_s: Vec<f64>,
    pub points: usize,
    pub mape: f64,
    pub loo_mape: f64,
}

/// Shape text of an in-situ point: `situ;` then the call's key, `|`, its variables.
pub const SITU: &str = "situ;";

/// A measured point as the fitted cost model sees it: its static key, the names of its
/// variables and its regressors (1, then the variables). Isolated measurements of a
/// live op (`OpSpec`) and in-situ points (`situ;key|vars`) both map to one.
pub fn point_key(p: &Point) -> Option<(CallKey, Vec<String>, Vec<f64>)> {
    if let Some(rest) = p.shape.strip_prefix(SITU) {
        let (key, vars) = rest.split_once('|')?;
        let pairs = |t: &str| -> Option<Vec<(String, u64)>> {
            t.split(';')
                .filter(|x| !x.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.parse().ok()?))
                })
                .collect()
        };
        let (key, vars) = (pairs(key)?, pairs(vars)?);
        let features = std::iter::once(1.0)
            .chain(vars.iter().map(|(_, v)| *v as f64))
            .collect();
        let dtype = if p.dtype == "-" {
            String::new()
        } else {
            p.dtype.clone()
        };
        return Some((
            CallKey {
                op: p.op.clone(),
                dtype,
                key,
            },
            vars.into_iter().map(|(n, _)| n).collect(),
            features,
        ));
    }
    let c = OpSpec::from_point(p)?.call()?;
    let c = Call {
        op: c.op,
        dtype: c.dtype,
        key: c.key,
        vars: c.vars,
    };
    Some((
        c.static_key(),
        c.vars.iter().map(|(n, _)| n.to_string()).collect(),
        c.features(),
    ))
}

/// The passes an in-situ calibration of `model` times: prefill chunks up to a chunk
/// budget over contexts of a few thousand tokens, decode batches of 1 to 32 requests
/// over the same contexts.
pub fn situ_passes(size: PlanSize) -> Vec<engine::serve::situ::Pass> {
    use engine::serve::situ::Pass;
    let (tokens, batches, contexts): (&[usize], &[usize], &[usize]) = match size {
        PlanSize::Smoke => (&[8, 24], &[1, 3], &[64, 192]),
        PlanSize::Quick => (
            &[16, 64, 128, 256],
            &[1, 2, 4, 8, 16, 32],
            &[128, 512, 1024, 2048, 3072],
        ),
        PlanSize::Full => (
            &[8, 16, 32, 64, 96, 128, 192, 256],
            &[1, 2, 3, 4, 6, 8, 12, 16, 24, 32],
            &[64, 256, 512, 1024, 1536, 2048, 3072],
        ),
    };
    let mut v = Vec::new();
    for &context in std::iter::once(&0).chain(contexts) {
        for &t in tokens {
            v.push(Pass::Prefill { tokens: t, context });
        }
    }
    for &context in contexts {
        for &batch in batches {
            v.push(Pass::Decode { batch, context });
        }
    }
    v
}

/// In-situ samples as measurement rows: one row per distinct call (median, p10 and p90
/// of its samples).
pub fn situ_rows(
    samples: &[(spec::call::Call, f64)],
    device: &str,
    driver: &str,
    timestamp: &str,
) -> Vec<MeasurementRecord> {
    let mut by: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
    let text = |pairs: &[(&'static str, u64)]| engine::op::shape_text(pairs);
    for (c, t) in samples {
        let shape = format!("{SITU}{}|{}", text(&c.key), text(&c.vars));
        let dtype = c.dtype.map_or("-", |d| d.name());
        by.entry((c.op.to_string(), shape, dtype.to_string()))
            .or_default()
            .push(*t);
    }
    by.into_iter()
        .filter(|(_, v)| v.iter().all(|t| t.is_finite()))
        .map(|((op, shape, dtype), v)| {
            let note = format!("in situ: {} samples", v.len());
            sample_row(op, shape, dtype, &v, (device, driver, timestamp), note)
        })
        .collect()
}

/// A measurement row of samples: their median (at least 1 ns), p10 and p90; no bytes
/// or flops. `at`: device, driver and timestamp.
pub(crate) fn sample_row(
    op: String,
    shape: String,
    dtype: String,
    samples: &[f64],
    at: (&str, &str, &str),
    note: String,
) -> MeasurementRecord {
    let st = engine::Stats::from_samples(samples);
    MeasurementRecord {
        op,
        shape,
        dtype,
        median_s: st.median_s.max(1e-9),
        p10_s: st.p10_s,
        p90_s: st.p90_s,
        bytes: 0,
        flops: 0,
        achieved_bytes_per_s: 0.0,
        achieved_flops_per_s: 0.0,
        device: at.0.to_string(),
        driver: at.1.to_string(),
        timestamp: at.2.to_string(),
        note,
    }
}

/// Op name of the wake-up rows (`wake_rows`).
pub const WAKE_OP: &str = "wake";

/// Idle gaps the wake-up is measured after, seconds.
pub fn wake_gaps(size: PlanSize) -> Vec<f64> {
    match size {
        PlanSize::Smoke => vec![0.002, 0.05],
        _ => vec![0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8],
    }
}

/// Wake-up samples (`engine::serve::situ::wake_samples`) as measurement rows: one per
/// gap, the median extra time after it (at least 1 ns: shorter is noise).
pub fn wake_rows(
    samples: &[(f64, f64)],
    device: &str,
    driver: &str,
    timestamp: &str,
) -> Vec<MeasurementRecord> {
    let mut by: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for &(gap, extra) in samples {
        if gap.is_finite() && extra.is_finite() {
            by.entry((gap * 1e6).round() as u64)
                .or_default()
                .push(extra);
        }
    }
    by.into_iter()
        .map(|(gap_us, v)| {
            let note = format!("wake-up after idle: {} samples", v.len());
            let shape = format!("gap_us={gap_us}");
            sample_row(
                WAKE_OP.into(),
                shape,
                "-".into(),
                &v,
                (device, driver, timestamp),
                note,
            )
        })
        .collect()
}

/// The device's wake-up after idling, fitted to the wake rows:
/// `extra = max_s * (1 - exp(-gap / tau_s))`, least squares over a log grid of `tau_s`
/// (1 ms to 10 s) with `max_s` solved in closed form for each.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WakeFit {
    pub max_s: f64,
    pub tau_s: f64,
    pub points: usize,
    /// Root-mean-square residual, seconds.
    pub rms_s: f64,
}

impl WakeFit {
    pub fn wake(&self) -> sim::cost::fitted::Wake {
        sim::cost::fitted::Wake {
            max_s: self.max_s,
            tau_s: self.tau_s,
        }
    }
}

/// Fits [`WakeFit`] to the wake rows among `rows`; None with fewer than 3 gaps.
pub fn fit_wake(rows: &[MeasurementRecord]) -> Option<WakeFit> {
    let pts: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.op == WAKE_OP)
        .filter_map(|r| {
            let us: f64 = r.shape.strip_prefix("gap_us=")?.parse().ok()?;
            Some((us * 1e-6, r.median_s))
        })
        .filter(|(g, t)| g.is_finite() && t.is_finite())
        .collect();
    if pts.len() < 3 {
        return None;
    }
    let mut best: Option<WakeFit> = None;
    for i in 0..=160 {
        let tau = 1e-3 * 10f64.powf(4.0 * i as f64 / 160.0);
        let x: Vec<f64> = pts.iter().map(|(g, _)| -(-g / tau).exp_m1()).collect();
        let sxx: f64 = x.iter().map(|v| v * v).sum();
        if sxx <= 0.0 {
            continue;
        }
        let sxy: f64 = x.iter().zip(&pts).map(|(a, (_, y))| a * y).sum();
        let max = (sxy / sxx).max(0.0);
        let sse: f64 = x
            .iter()
            .zip(&pts)
            .map(|(a, (_, y))| (max * a - y).powi(2))
            .sum();
        let rms = (sse / pts.len() as f64).sqrt();
        if best.is_none_or(|b| rms < b.rms_s) {
            best = Some(WakeFit {
                max_s: max,
                tau_s: tau,
                points: pts.len(),
                rms_s: rms,
            });
        }
    }
    best
}

fn grid(size: PlanSize, smoke: &[usize], quick: &[usize], full: &[usize]) -> Vec<usize> {
    match size {
        PlanSize::Smoke => smoke.to_vec(),
        PlanSize::Quick => quick.to_vec(),
        PlanSize::Full => full.to_vec(),
    }
}

/// Isolated points the in-situ passes (one rank) cannot give: with `dep` ranks, the
/// exchange of tokens between them, priced as the `copy` op over its byte range.
pub fn plan_live(dep: usize, size: PlanSize) -> Vec<OpSpec> {
    if dep <= 1 {
        return Vec::new();
    }
    let bytes = grid(
        size,
        &[4096, 65536, 1 << 20],
        &[16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20],
        &[
            4 << 10,
            16 << 10,
            64 << 10,
            256 << 10,
            1 << 20,
            4 << 20,
            16 << 20,
        ],
    );
    bytes
        .into_iter()
        .map(|b| {
            OpSpec::AllToAll(CopyShape {
                bytes: b as u64,
                peers: 1,
            })
        })
        .collect()
}

/// Fits every static key with enough points among `rows` (live points only); keys
/// that cannot be fitted are listed with why. A variable that takes one value over all
/// of a key's points (the LM head's `groups` in a run of one group) cannot be told
/// from the intercept: it is fitted as part of it, its own coefficient 0, so the key
/// needs two points more than its varying variables, not than all of them.
pub fn fit_live(
    rows: &[MeasurementRecord],
) -> (BTreeMap<String, LiveFit>, BTreeMap<String, String>) {
    // Per key: variable names, regressors and times of its points.
    type Points = (Vec<String>, Vec<Vec<f64>>, Vec<f64>);
    let mut by_key: BTreeMap<String, Points> = BTreeMap::new();
    for r in rows {
        let Some((key, vars, features)) = point_key(&r.point()) else {
            continue;
        };
        let e = by_key
            .entry(key.to_string())
            .or_insert_with(|| (vars, Vec::new(), Vec::new()));
        e.1.push(features);
        e.2.push(r.median_s);
    }
    let mut fits = BTreeMap::new();
    let mut skipped = BTreeMap::new();
    for (key, (vars, x, t)) in by_key {
        // The intercept's column and those of the variables that vary.
        let varying: Vec<usize> = std::iter::once(0)
            .chain((1..=vars.len()).filter(|&j| x.iter().any(|r| r[j] != x[0][j])))
            .collect();
        if x.len() < varying.len() + 1 {
            skipped.insert(
                key,
                format!("{} points for {} coefficients", x.len(), varying.len()),
            );
            continue;
        }
        if t.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            skipped.insert(key, "non-finite or non-positive times".into());
            continue;
        }
        let xv: Vec<Vec<f64>> = x
            .iter()
            .map(|r| varying.iter().map(|&j| r[j]).collect())
            .collect();
        match fit_linear(&xv, &t) {
            Some(f) => {
                let mut coefficients_s = vec![0.0; vars.len() + 1];
                for (&j, b) in varying.iter().zip(&f.beta) {
                    coefficients_s[j] = *b;
                }
                fits.insert(
                    key,
                    LiveFit {
                        vars,
                        coefficients_s,
                        points: x.len(),
                        mape: f.mape,
                        loo_mape: f.loo_mape,
                    },
                );
            }
            None => {
                skipped.insert(key, "no nonnegative least-squares solution".into());
            }
        }
    }
    (fits, skipped)
}

/// A profile's live fits as the simulator's fitted cost model takes them; keys that do
/// not parse are left out (the model then reports them missing).
pub fn coefficients(fits: &BTreeMap<String, LiveFit>) -> HashMap<CallKey, Vec<f64>> {
    fits.iter()
        .filter_map(|(k, f)| Some((k.parse::<CallKey>().ok()?, f.coefficients_s.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::op::LinearShape;
    use kernels::WeightDtype;

    fn wake_row(gap_us: u64, extra_s: f64) -> MeasurementRecord {
        wake_rows(&[(gap_us as f64 * 1e-6, extra_s)], "cpu", "-", "t")
            .pop()
            .unwrap()
    }

    /// A variable constant over a key's points is fitted into the intercept: three
    /// points of `linear[bf16] n=4096 k=256` at `groups` 1 and `rows` 1, 2, 3, costing
    /// 5 us + 2 us x rows (hand-derived), give (5, 0, 2) us, where counting `groups`
    /// among the coefficients would have asked for a fourth point; a key with fewer
    /// points than its varying coefficients is still skipped, with their count.
    #[test]
    fn a_variable_that_never_varies_is_fitted_into_the_intercept() {
        let row = |groups: u64, rows: u64, s: f64| {
            let shape = format!("{SITU}n=4096;k=256|groups={groups};rows={rows}");
            let at = ("cpu", "in situ", "t");
            sample_row(
                "linear".into(),
                shape,
                "bf16".into(),
                &[s],
                at,
                String::new(),
            )
        };
        let rows: Vec<MeasurementRecord> =
            (1..=3).map(|r| row(1, r, 5e-6 + 2e-6 * r as f64)).collect();
        let (fits, skipped) = fit_live(&rows);
        assert!(skipped.is_empty(), "{skipped:?}");
        let f = fits.values().next().unwrap();
        assert_eq!(f.vars, ["groups", "rows"]);
        let want = [5e-6, 0.0, 2e-6];
        for (got, w) in f.coefficients_s.iter().zip(want) {
            assert!((got - w).abs() < 1e-12, "{:?}", f.coefficients_s);
        }
        let (fits, skipped) = fit_live(&rows[..2]);
        assert!(fits.is_empty());
        assert_eq!(
            skipped.values().next().unwrap(),
            "2 points for 2 coefficients"
        );
    }

    /// Rows drawn exactly from max 50 ms, tau 100 ms (a point of the fit's tau grid:
    /// 1 ms x 10^(4 x 80 / 160)) come back as those values with no residual; gaps far
    /// past tau give the plateau, gaps far below it almost nothing.
    #[test]
    fn the_wake_up_fit_recovers_a_saturating_curve() {
        let rows: Vec<MeasurementRecord> = [1_000u64, 10_000, 50_000, 100_000, 200_000, 800_000]
            .iter()
            .map(|&us| wake_row(us, 0.05 * (1.0 - (-(us as f64) * 1e-6 / 0.1).exp())))
            .collect();
        let w = fit_wake(&rows).unwrap();
        assert!((w.tau_s - 0.1).abs() < 1e-9, "{w:?}");
        assert!((w.max_s - 0.05).abs() < 1e-9, "{w:?}");
        assert!(w.rms_s < 1e-9 && w.points == 6);
        let sim = w.wake();
        assert!((sim.after(0.1) - 0.05 * (1.0 - (-1.0f64).exp())).abs() < 1e-12);
        assert_eq!(sim.after(0.0), 0.0);
        // Too few gaps: no fit.
        assert!(fit_wake(&rows[..2]).is_none());
    }

    #[test]
    fn fits_recover_a_known_linear_cost() {
        let spec = |r: usize, g: usize| {
            OpSpec::Linear(LinearShape {
                dtype: WeightDtype::Bf16,
                n: 64,
                k: 256,
                groups: g,
                rows: r,
                experts: 8,
                copies: 1,
            })
        };
        let mut rows = Vec::new();
        for r in [1, 4, 16, 64] {
            for g in [1, 2, 4] {
                let t = 2e-6 + 3e-6 * g as f64 + 5e-7 * r as f64;
                let p = spec(r, g).point();
                rows.push(MeasurementRecord {
                    op: p.op,
                    shape: p.shape,
                    dtype: p.dtype,
                    median_s: t,
                    p10_s: t,
                    p90_s: t,
                    bytes: 1,
                    flops: 1,
                    achieved_bytes_per_s: 1.0,
                    achieved_flops_per_s: 1.0,
                    device: "d".into(),
                    driver: "x".into(),
                    timestamp: "t".into(),
                    note: String::new(),
                });
            }
        }
        let (fits, skipped) = fit_live(&rows);
        assert!(skipped.is_empty(), "{skipped:?}");
        let f = &fits["linear[bf16] n=64 k=256"];
        assert_eq!(f.vars, vec!["groups", "rows"]);
        for (got, want) in f.coefficients_s.iter().zip([2e-6, 3e-6, 5e-7]) {
            assert!(
                (got - want).abs() < 1e-9 * want.max(1e-9) + 1e-12,
                "{:?}",
                f.coefficients_s
            );
        }
        let c = coefficients(&fits);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn in_situ_rows_aggregate_samples_and_parse_back() {
        let call = |rows: u64| spec::call::Call {
            op: spec::call::CallOp::Rmsnorm,
            dtype: None,
            key: vec![("dim", 512), ("residual", 1)],
            vars: vec![("rows", rows)],
        };
        let samples = vec![
            (call(2), 3e-6),
            (call(2), 1e-6),
            (call(2), 2e-6),
            (call(8), 5e-6),
        ];
        let rows = situ_rows(&samples, "d", "x", "t");
        assert_eq!(rows.len(), 2);
        let r2 = rows.iter().find(|r| r.shape.ends_with("rows=2")).unwrap();
        assert_eq!(r2.median_s, 2e-6);
        assert_eq!(r2.shape, "situ;dim=512;residual=1|rows=2");
        let (key, vars, x) = point_key(&r2.point()).unwrap();
        assert_eq!(key.to_string(), "rmsnorm dim=512 residual=1");
        assert_eq!((vars, x), (vec!["rows".to_string()], vec![1.0, 2.0]));
        assert!(situ_passes(PlanSize::Quick).len() > 20);
    }
}
