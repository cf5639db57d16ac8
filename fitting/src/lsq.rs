//! Several parameters against several rows: bounded Levenberg-Marquardt.
//!
//! Parameters move in unit coordinates `u` in `[0, 1]` mapped onto their bounds
//! (geometrically for positive bounds spanning more than a factor of 10, linearly
//! otherwise), so rates in bytes per second and latencies in microseconds step alike.
//! The Jacobian is taken by forward differences; each step solves
//! `(J^T J + lambda diag(J^T J)) d = -J^T r` and is kept only if the sum of squares
//! falls. Deterministic: same start, same result.

/// A parameter's range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub lo: f64,
    pub hi: f64,
}

impl Bounds {
    fn geometric(&self) -> bool {
        self.lo > 0.0 && self.hi / self.lo > 10.0
    }
    fn unit_of(&self, v: f64) -> f64 {
        let v = v.clamp(self.lo, self.hi);
        if self.geometric() {
            (v / self.lo).ln() / (self.hi / self.lo).ln()
        } else if self.hi > self.lo {
            (v - self.lo) / (self.hi - self.lo)
        } else {
            0.0
        }
    }
    fn value_at(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        if self.geometric() {
            self.lo * (self.hi / self.lo).powf(u)
        } else {
            self.lo + u * (self.hi - self.lo)
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LsqError<E> {
    #[error("{0}")]
    Eval(E),
    #[error("no parameters or no residuals to fit")]
    Empty,
    #[error("a residual is not finite at the start point")]
    NotFinite,
}

fn sum_sq(r: &[f64]) -> f64 {
    r.iter().map(|x| x * x).sum()
}

/// Solves the `n x n` system `a x = b` by Gauss-Jordan elimination with partial
/// pivoting (the last largest candidate pivots); `None` when a pivot is smaller than
/// `min_pivot` in magnitude (singular, or too nearly so for the caller). The one linear
/// solve of the workspace: Levenberg-Marquardt's steps here, and `calibration`'s
/// nonnegative least squares on its normal equations.
pub fn solve_linear(mut a: Vec<Vec<f64>>, mut b: Vec<f64>, min_pivot: f64) -> Option<Vec<f64>> {
    let n = b.len();
    for c in 0..n {
        let p = (c..n).max_by(|&i, &j| a[i][c].abs().total_cmp(&a[j][c].abs()))?;
        if a[p][c].abs() < min_pivot {
            return None;
        }
        a.swap(c, p);
        b.swap(c, p);
        let (pivot, pivot_b) = (a[c].clone(), b[c]);
        for (r, row) in a.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, p) in row[c..n].iter_mut().zip(&pivot[c..n]) {
                    *x -= f * p;
                }
                b[r] -= f * pivot_b;
            }
        }
    }
    Some((0..n).map(|i| b[i] / a[i][i]).collect())
}

/// Minimises the sum of squared `residuals(x)` over `x` within `bounds`, from `start`.
/// Residuals that cannot be evaluated at a trial point make that trial fail (it is
/// treated as worse); an error from `residuals` stops the fit.
pub fn least_squares<E>(
    bounds: &[Bounds],
    start: &[f64],
    mut residuals: impl FnMut(&[f64]) -> Result<Vec<f64>, E>,
) -> Result<Vec<f64>, LsqError<E>> {
    let n = bounds.len();
    if n == 0 || start.len() != n {
        return Err(LsqError::Empty);
    }
    let to_x =
        |u: &[f64]| -> Vec<f64> { u.iter().zip(bounds).map(|(u, b)| b.value_at(*u)).collect() };
    let mut u: Vec<f64> = start
        .iter()
        .zip(bounds)
        .map(|(v, b)| b.unit_of(*v))
        .collect();
    let mut r = residuals(&to_x(&u)).map_err(LsqError::Eval)?;
    if r.is_empty() {
        return Err(LsqError::Empty);
    }
    if r.iter().any(|x| !x.is_finite()) {
        return Err(LsqError::NotFinite);
    }
    let mut cost = sum_sq(&r);
    let mut lambda = 1e-3;
    for _ in 0..200 {
        let (jtj, jtr) = normal_equations(&u, &r, to_x, &mut residuals)?;
        let mut improved = false;
        for _ in 0..30 {
            let mut a = jtj.clone();
            for (k, row) in a.iter_mut().enumerate() {
                row[k] += lambda * jtj[k][k].max(1e-12);
            }
            let neg: Vec<f64> = jtr.iter().map(|x| -x).collect();
            let Some(d) = solve_linear(a, neg, 1e-300) else {
                lambda *= 10.0;
                continue;
            };
            let trial: Vec<f64> = u
                .iter()
                .zip(&d)
                .map(|(u, d)| (u + d).clamp(0.0, 1.0))
                .collect();
            let rt = residuals(&to_x(&trial)).map_err(LsqError::Eval)?;
            let ct = if rt.iter().all(|x| x.is_finite()) {
                sum_sq(&rt)
            } else {
                f64::INFINITY
            };
            if ct < cost {
                let gain = (cost - ct) / cost.max(1e-300);
                u = trial;
                r = rt;
                cost = ct;
                lambda = (lambda / 10.0).max(1e-12);
                improved = gain > 1e-12;
                break;
            }
            lambda *= 10.0;
        }
        if !improved || cost < 1e-24 {
            break;
        }
    }
    Ok(to_x(&u))
}

/// A linear system `(a, b)` of `a x = b`: the normal equations of a step.
type NormalEquations = (Vec<Vec<f64>>, Vec<f64>);

/// The normal equations `(J^T J, J^T r)` at unit point `u`, whose residuals are `r`:
/// the Jacobian by forward differences in unit coordinates, stepping inward at the
/// upper bound.
fn normal_equations<E>(
    u: &[f64],
    r: &[f64],
    to_x: impl Fn(&[f64]) -> Vec<f64>,
    residuals: &mut impl FnMut(&[f64]) -> Result<Vec<f64>, E>,
) -> Result<NormalEquations, LsqError<E>> {
    let n = u.len();
    let m = r.len();
    let mut jac = vec![vec![0.0; n]; m];
    for j in 0..n {
        let h = if u[j] > 1.0 - 1e-6 { -1e-6 } else { 1e-6 };
        let mut up = u.to_vec();
        up[j] += h;
        let rp = residuals(&to_x(&up)).map_err(LsqError::Eval)?;
        for i in 0..m {
            jac[i][j] = (rp[i] - r[i]) / h;
        }
    }
    let mut jtj = vec![vec![0.0; n]; n];
    let mut jtr = vec![0.0; n];
    for i in 0..m {
        for a in 0..n {
            jtr[a] += jac[i][a] * r[i];
            for b in 0..n {
                jtj[a][b] += jac[i][a] * jac[i][b];
            }
        }
    }
    Ok((jtj, jtr))
}

/// Leave-one-out: for each of `n_rows` rows, the values a fit on the other rows gives
/// (from `start`). `residuals(x, rows)` returns the residuals of the listed rows at
/// `x`. Only meaningful with more rows than parameters.
pub fn leave_one_out<E>(
    bounds: &[Bounds],
    start: &[f64],
    n_rows: usize,
    mut residuals: impl FnMut(&[f64], &[usize]) -> Result<Vec<f64>, E>,
) -> Result<Vec<Vec<f64>>, LsqError<E>> {
    (0..n_rows)
        .map(|left| {
            let rest: Vec<usize> = (0..n_rows).filter(|&r| r != left).collect();
            least_squares(bounds, start, |x| residuals(x, &rest))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first column's pivot is the second row (a zero stands first); both
    /// unknowns are 1, exactly. Proportional rows have no solution.
    #[test]
    fn solve_linear_pivots_and_refuses_singular_systems() {
        let a = vec![vec![0.0, 1.0], vec![2.0, 1.0]];
        assert_eq!(solve_linear(a, vec![1.0, 3.0], 1e-12), Some(vec![1.0, 1.0]));
        let singular = vec![vec![1.0, 2.0], vec![2.0, 4.0]];
        assert_eq!(solve_linear(singular, vec![1.0, 2.0], 1e-12), None);
    }

    #[test]
    fn recovers_a_known_curve() {
        // y = a / (1 + b x) sampled without noise at 6 points: a = 3, b = 0.5.
        let xs = [0.0, 1.0, 2.0, 4.0, 8.0, 16.0];
        let ys: Vec<f64> = xs.iter().map(|x| 3.0 / (1.0 + 0.5 * x)).collect();
        let bounds = [Bounds { lo: 0.1, hi: 100.0 }, Bounds { lo: 0.0, hi: 2.0 }];
        let p = least_squares::<()>(&bounds, &[1.0, 1.0], |p| {
            Ok(xs
                .iter()
                .zip(&ys)
                .map(|(x, y)| (p[0] / (1.0 + p[1] * x) / y).ln())
                .collect())
        })
        .unwrap();
        assert!(
            (p[0] - 3.0).abs() < 1e-5 && (p[1] - 0.5).abs() < 1e-5,
            "{p:?}"
        );
    }

    #[test]
    fn leave_one_out_refits_without_each_row() {
        // A constant fitted to [1, 2, 3, 10] (log residuals): leaving the outlier out
        // gives the geometric mean of 1, 2, 3.
        let ys = [1.0, 2.0, 3.0, 10.0f64];
        let b = [Bounds { lo: 0.1, hi: 100.0 }];
        let fits = leave_one_out::<()>(&b, &[1.0], 4, |x, rows| {
            Ok(rows.iter().map(|&r| (x[0] / ys[r]).ln()).collect())
        })
        .unwrap();
        assert!(
            (fits[3][0] - 6f64.powf(1.0 / 3.0)).abs() < 1e-6,
            "{:?}",
            fits[3]
        );
        assert_eq!(fits.len(), 4);
    }

    #[test]
    fn respects_bounds_and_reports_errors() {
        // The optimum (a = 5) lies above the bound 4: the fit stops at the bound.
        let p = least_squares::<()>(&[Bounds { lo: 0.0, hi: 4.0 }], &[1.0], |p| {
            Ok(vec![p[0] - 5.0])
        })
        .unwrap();
        assert!((p[0] - 4.0).abs() < 1e-9);
        let e = least_squares(&[Bounds { lo: 0.0, hi: 4.0 }], &[1.0], |_| {
            Err::<Vec<f64>, _>("boom")
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "boom");
        assert!(matches!(
            least_squares::<()>(&[], &[], |_| Ok(vec![])),
            Err(LsqError::Empty)
        ));
        // Geometric mapping round-trips.
        let b = Bounds { lo: 1e9, hi: 1e12 };
        assert!((b.value_at(b.unit_of(3e10)) - 3e10).abs() < 1.0);
    }
}
