//! A square fit: each parameter belongs to one row, and the parameters are solved in
//! turn, each by a one-dimensional least-squares solve of its row's relative error,
//! until no parameter moves by more than 0.1% (a Gauss-Seidel least-squares fit).
//! Parameters of one non-zero `group` are solved together: the product of their
//! integer grids, the point of least summed squared error over their rows.

use crate::solve1d::{solve, Solve};

/// One parameter of a square fit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Param {
    pub lo: f64,
    pub hi: f64,
    pub solve: Solve,
    /// 0: solved alone; otherwise solved with the other parameters of its group.
    pub group: u8,
    /// Whether this round fits the parameter (others keep their values).
    pub active: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RoundsError<E> {
    #[error("{0}")]
    Eval(E),
    /// No value in the parameter's range could be evaluated.
    #[error("no valid value in {lo}..={hi} for parameter {index}")]
    NoValue { index: usize, lo: f64, hi: f64 },
}

/// The grid of a parameter's values (a continuous one is cut in 64 steps).
fn grid(p: &Param) -> Vec<f64> {
    let step = match p.solve {
        Solve::Grid(s) | Solve::Bisect(s) => s,
        Solve::Continuous => (p.hi - p.lo) / 64.0,
    };
    let mut g = Vec::new();
    let mut v = p.lo;
    while v <= p.hi + 1e-9 {
        g.push(v);
        v += step.max(1e-12);
    }
    g
}

/// Fits the active parameters in `values` (starting values in, fitted values out).
/// `error(i, values)` is the relative error of parameter `i`'s row with `values`
/// (`Ok(None)`: those values cannot be evaluated, e.g. an invalid scenario on a grid).
pub fn gauss_seidel<E>(
    params: &[Param],
    values: &mut [f64],
    max_rounds: usize,
    mut error: impl FnMut(usize, &[f64]) -> Result<Option<f64>, E>,
) -> Result<(), RoundsError<E>> {
    for _ in 0..max_rounds {
        let before = values.to_vec();
        let mut groups_done: Vec<u8> = Vec::new();
        for i in 0..params.len() {
            let p = &params[i];
            if !p.active {
                continue;
            }
            if p.group != 0 {
                if !groups_done.contains(&p.group) {
                    groups_done.push(p.group);
                    joint(params, p.group, values, &mut error)?;
                }
                continue;
            }
            let snapshot = values.to_vec();
            let solved = solve(p.solve, p.lo, p.hi, |v| {
                let mut vals = snapshot.clone();
                vals[i] = v;
                error(i, &vals)
            })
            .map_err(RoundsError::Eval)?;
            values[i] = solved.ok_or(RoundsError::NoValue {
                index: i,
                lo: p.lo,
                hi: p.hi,
            })?;
        }
        let moved = values
            .iter()
            .zip(&before)
            .any(|(a, b)| (a - b).abs() > 1e-3 * b.abs().max(1e-12));
        if !moved {
            break;
        }
    }
    Ok(())
}

/// Solves the active parameters of `group` together over the product of their grids.
fn joint<E>(
    params: &[Param],
    group: u8,
    values: &mut [f64],
    error: &mut impl FnMut(usize, &[f64]) -> Result<Option<f64>, E>,
) -> Result<(), RoundsError<E>> {
    let idx: Vec<usize> = (0..params.len())
        .filter(|&i| params[i].group == group && params[i].active)
        .collect();
    let grids: Vec<Vec<f64>> = idx.iter().map(|&i| grid(&params[i])).collect();
    let mut best: Option<(f64, Vec<f64>)> = None;
    let mut at = vec![0usize; idx.len()];
    'points: loop {
        let mut vals = values.to_vec();
        for (k, &i) in idx.iter().enumerate() {
            vals[i] = grids[k][at[k]];
        }
        let mut ss = Some(0.0);
        for &i in &idx {
            match error(i, &vals).map_err(RoundsError::Eval)? {
                Some(e) if e.is_finite() => ss = ss.map(|s| s + e * e),
                _ => ss = None,
            }
        }
        if let Some(ss) = ss {
            if best.as_ref().is_none_or(|b| ss < b.0) {
                best = Some((ss, idx.iter().map(|&i| vals[i]).collect()));
            }
        }
        // The next point of the product.
        let mut k = 0;
        loop {
            if k == at.len() {
                break 'points;
            }
            at[k] += 1;
            if at[k] < grids[k].len() {
                break;
            }
            at[k] = 0;
            k += 1;
        }
    }
    let (_, b) = best.ok_or(RoundsError::NoValue {
        index: idx[0],
        lo: params[idx[0]].lo,
        hi: params[idx[0]].hi,
    })?;
    for (k, &i) in idx.iter().enumerate() {
        values[i] = b[k];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(lo: f64, hi: f64, solve: Solve, group: u8) -> Param {
        Param {
            lo,
            hi,
            solve,
            group,
            active: true,
        }
    }

    #[test]
    fn coupled_rows_converge() {
        // Row 0: x + 0.1 y = 2; row 1: y - 0.2 x = 1 (relative errors against 2 and 1).
        // Solution x = 1.882..., y = 1.376...
        let params = [
            p(0.0, 10.0, Solve::Continuous, 0),
            p(0.0, 10.0, Solve::Continuous, 0),
        ];
        let mut v = vec![5.0, 5.0];
        gauss_seidel::<()>(&params, &mut v, 20, |i, x| {
            Ok(Some(match i {
                0 => (x[0] + 0.1 * x[1] - 2.0) / 2.0,
                _ => (x[1] - 0.2 * x[0]) - 1.0,
            }))
        })
        .unwrap();
        let x = (2.0 - 0.1) / (1.0 + 0.02);
        let y = 1.0 + 0.2 * x;
        assert!((v[0] - x).abs() < 1e-3 && (v[1] - y).abs() < 1e-3, "{v:?}");
    }

    #[test]
    fn a_group_is_searched_as_a_product() {
        // Two integer parameters whose rows each depend on both: the best pair of the
        // grid minimises the summed squares: a + b = 7 and a - b = 1 -> (4, 3).
        let params = [
            p(0.0, 8.0, Solve::Grid(1.0), 1),
            p(0.0, 8.0, Solve::Grid(1.0), 1),
        ];
        let mut v = vec![0.0, 0.0];
        gauss_seidel::<()>(&params, &mut v, 3, |i, x| {
            Ok(Some(if i == 0 {
                x[0] + x[1] - 7.0
            } else {
                x[0] - x[1] - 1.0
            }))
        })
        .unwrap();
        assert_eq!(v, vec![4.0, 3.0]);
        // Nothing evaluable: an error naming the parameter.
        let e = gauss_seidel::<&str>(&params, &mut v, 1, |_, _| Ok(None)).unwrap_err();
        assert!(e.to_string().contains("no valid value"), "{e}");
    }
}
