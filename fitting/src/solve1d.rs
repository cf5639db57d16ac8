//! One parameter, one row: the least-squares solution of a single relative error.

/// How a parameter's one-dimensional problem is solved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Solve {
    /// Bisection on the sign of a monotone error, stored to 5 significant digits.
    Continuous,
    /// Integers on a grid of this step: the point of least squared error.
    Grid(f64),
    /// Integers: bisection until the bracket is this narrow (each evaluation may be a
    /// whole simulation), rounded to a multiple of it.
    Bisect(f64),
}

impl Solve {
    pub fn integer(self) -> bool {
        self != Solve::Continuous
    }
}

/// Rounds to 5 significant digits, so stored values read cleanly.
pub fn round5(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let mag = 10f64.powf(4.0 - v.abs().log10().floor());
    (v * mag).round() / mag
}

/// Solves `eval(v) = 0` in the least-squares sense over `[lo, hi]`. `eval` returns
/// `Ok(None)` for a value that cannot be evaluated (skipped on a grid), `Err` to stop.
pub fn solve<E>(
    method: Solve,
    lo: f64,
    hi: f64,
    mut eval: impl FnMut(f64) -> Result<Option<f64>, E>,
) -> Result<Option<f64>, E> {
    if let Solve::Grid(step) = method {
        let mut best: Option<(f64, f64)> = None;
        let mut v = lo;
        while v <= hi + 1e-9 {
            if let Some(e) = eval(v)? {
                if e.is_finite() && best.is_none_or(|(b, _)| e * e < b) {
                    best = Some((e * e, v));
                }
            }
            v += step;
        }
        return Ok(best.map(|b| b.1));
    }
    // A monotone error: bisection on its sign is the least-squares solution (zero
    // residual when bracketed); the nearer end otherwise.
    let (mut a, mut b) = (lo, hi);
    let (Some(ea), Some(eb)) = (eval(a)?, eval(b)?) else {
        return Ok(None);
    };
    if ea.signum() == eb.signum() {
        return Ok(Some(if ea.abs() < eb.abs() { a } else { b }));
    }
    let tol = match method {
        Solve::Bisect(t) => t,
        _ => 0.0,
    };
    for _ in 0..60 {
        if b - a <= tol {
            break;
        }
        let mid = 0.5 * (a + b);
        match eval(mid)? {
            Some(e) if e.signum() == ea.signum() => a = mid,
            Some(_) => b = mid,
            None => return Ok(None),
        }
    }
    let mid = 0.5 * (a + b);
    Ok(Some(if tol > 0.0 {
        (mid / tol).round() * tol
    } else {
        round5(mid)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bisection_grid_and_bounds() {
        let f = |v: f64| Ok::<_, ()>(Some(v * v - 2.0));
        let r = solve(Solve::Continuous, 0.0, 4.0, f).unwrap().unwrap();
        assert!((r - 2f64.sqrt()).abs() < 1e-4, "{r}");
        // Not bracketed: the nearer end.
        assert_eq!(solve(Solve::Continuous, 2.0, 4.0, f).unwrap(), Some(2.0));
        // Grid: least squares at integers of step 2, skipping unevaluable points.
        let g = |v: f64| Ok::<_, ()>(if v == 4.0 { None } else { Some(v - 4.5) });
        assert_eq!(solve(Solve::Grid(2.0), 0.0, 8.0, g).unwrap(), Some(6.0));
        // Bisect to a step of 16, rounded.
        let h = |v: f64| Ok::<_, ()>(Some(v - 1000.0));
        // Brackets [0, 4096] halve to [992, 1008] (width 16), mid 1000 -> 62.5 -> 63 x 16.
        assert_eq!(
            solve(Solve::Bisect(16.0), 0.0, 4096.0, h).unwrap(),
            Some(1008.0)
        );
        assert_eq!(round5(0.000123456789), 0.00012346);
    }
}
