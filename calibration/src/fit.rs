//! Linear least squares with nonnegative coefficients, weighted by relative error, and
//! the goodness-of-fit figures reported in profiles.
//!
//! Model: `t_i ≈ Σ_j β_j x_ij` with every `β_j >= 0`. Times span orders of magnitude,
//! so the objective is the sum of squared *relative* residuals
//! `Σ_i ((t_i - x_i·β) / t_i)^2`, which keeps small points (fixed costs) from being
//! drowned by large ones and matches the MAPE we report. The nonnegative solution is
//! found exactly by trying every subset of free coefficients (at most 2^3 here), solving
//! the weighted normal equations on column-scaled features (`fitting::lsq::solve_linear`),
//! and keeping the best feasible subset.

use fitting::lsq::solve_linear;
use statrs::statistics::Statistics;

/// A subset whose scaled normal equations meet a pivot below this is skipped as
/// singular.
const MIN_PIVOT: f64 = 1e-12;

/// Coefficients and figures of a linear fit.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearFit {
    pub beta: Vec<f64>,
    /// Coefficient of determination on the raw times.
    pub r2: f64,
    /// Mean absolute percentage error (fraction, 0.05 = 5%).
    pub mape: f64,
    /// Leave-one-out MAPE: each point predicted by a fit without it.
    pub loo_mape: f64,
    /// Weighted objective (sum of squared relative residuals).
    pub objective: f64,
}

/// Nonnegative relative-error least squares; `None` when no subset is solvable.
pub fn nnls_relative(x: &[Vec<f64>], t: &[f64]) -> Option<(Vec<f64>, f64)> {
    let p = x.first()?.len();
    // Rows divided by t: minimise |A β - 1|^2 with A_ij = x_ij / t_i.
    let a: Vec<Vec<f64>> = x
        .iter()
        .zip(t)
        .map(|(row, &ti)| row.iter().map(|v| v / ti).collect())
        .collect();
    let scale: Vec<f64> = (0..p)
        .map(|j| a.iter().map(|r| r[j].abs()).fold(0.0, f64::max))
        .collect();
    let mut best: Option<(Vec<f64>, f64)> = None;
    for mask in 1u32..(1 << p) {
        let free: Vec<usize> = (0..p)
            .filter(|j| mask & (1 << j) != 0 && scale[*j] > 0.0)
            .collect();
        if free.len() != mask.count_ones() as usize {
            continue;
        }
        let k = free.len();
        let mut m = vec![vec![0.0; k]; k];
        let mut rhs = vec![0.0; k];
        for row in &a {
            for (u, &ju) in free.iter().enumerate() {
                let au = row[ju] / scale[ju];
                for (v, &jv) in free.iter().enumerate() {
                    m[u][v] += au * row[jv] / scale[jv];
                }
                rhs[u] += au;
            }
        }
        let Some(sol) = solve_linear(m, rhs, MIN_PIVOT) else {
            continue;
        };
        if sol.iter().any(|&b| b < 0.0 || !b.is_finite()) {
            continue;
        }
        let mut beta = vec![0.0; p];
        for (u, &j) in free.iter().enumerate() {
            beta[j] = sol[u] / scale[j];
        }
        let obj: f64 = a
            .iter()
            .map(|r| (r.iter().zip(&beta).map(|(x, b)| x * b).sum::<f64>() - 1.0).powi(2))
            .sum();
        if best.as_ref().is_none_or(|(_, o)| obj < *o) {
            best = Some((beta, obj));
        }
    }
    best
}

pub fn predict(x: &[f64], beta: &[f64]) -> f64 {
    x.iter().zip(beta).map(|(a, b)| a * b).sum()
}

/// R² and MAPE of predictions against observations.
pub fn r2_mape(pred: &[f64], t: &[f64]) -> (f64, f64) {
    let mean = t.iter().copied().mean();
    let ss_tot: f64 = t.iter().map(|v| (v - mean).powi(2)).sum();
    let ss_res: f64 = pred.iter().zip(t).map(|(p, v)| (v - p).powi(2)).sum();
    let r2 = if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else {
        f64::NAN
    };
    let mape = pred
        .iter()
        .zip(t)
        .map(|(p, v)| ((p - v) / v).abs())
        .collect::<Vec<_>>()
        .mean();
    (r2, mape)
}

/// Fits and scores; `None` when the full fit has no solution.
pub fn fit_linear(x: &[Vec<f64>], t: &[f64]) -> Option<LinearFit> {
    let (beta, objective) = nnls_relative(x, t)?;
    let pred: Vec<f64> = x.iter().map(|r| predict(r, &beta)).collect();
    let (r2, mape) = r2_mape(&pred, t);
    let mut loo = Vec::with_capacity(t.len());
    for i in 0..t.len() {
        let xs: Vec<Vec<f64>> = x
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, r)| r.clone())
            .collect();
        let ts: Vec<f64> = t
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, v)| *v)
            .collect();
        let (b, _) = nnls_relative(&xs, &ts)?;
        loo.push(((predict(&x[i], &b) - t[i]) / t[i]).abs());
    }
    Some(LinearFit {
        beta,
        r2,
        mape,
        loo_mape: loo.mean(),
        objective,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_recovery_and_nonnegativity() {
        // t = 2 + 3 a
        let x: Vec<Vec<f64>> = (1..6).map(|a| vec![1.0, a as f64]).collect();
        let t: Vec<f64> = (1..6).map(|a| 2.0 + 3.0 * a as f64).collect();
        let f = fit_linear(&x, &t).unwrap();
        assert!(
            (f.beta[0] - 2.0).abs() < 1e-9 && (f.beta[1] - 3.0).abs() < 1e-9,
            "{:?}",
            f.beta
        );
        assert!(f.r2 > 0.999999 && f.mape < 1e-9 && f.loo_mape < 1e-9);
        // Unconstrained intercept would be negative: t = -1 + 2a -> clamp intercept to 0.
        let t2: Vec<f64> = (1..6).map(|a| -1.0 + 2.0 * a as f64 + 0.001).collect();
        let f2 = fit_linear(&x, &t2).unwrap();
        assert!(f2.beta.iter().all(|&b| b >= 0.0), "{:?}", f2.beta);
        assert_eq!(f2.beta[0], 0.0);
    }
}
