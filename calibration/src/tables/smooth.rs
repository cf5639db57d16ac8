//! Fitting a [`Grid`] to scattered points: penalised least squares
//!
//! `min_v  sum_i (interp(v, x_i) - r_i)^2 + lambda sum (second differences of v)^2 + mu |v|^2`
//!
//! over the node values `v`: the data term pulls the interpolated surface through the
//! points, the curvature penalty fills cells without points smoothly from their
//! neighbours, and the small ridge pulls nodes far from any point back to 0 (there,
//! the physics price stands alone). Solved by conjugate gradients on the normal
//! equations, matrix-free. `lambda` and `mu` are per point per node, so their effect
//! does not depend on how many rows a table has.

use sim::cost::tables::grid::Grid;

/// Smoothing strengths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Smoothing {
    pub lambda: f64,
    pub mu: f64,
}

impl Default for Smoothing {
    fn default() -> Self {
        Smoothing {
            lambda: 0.05,
            mu: 1e-3,
        }
    }
}

/// Fits `grid`'s values (its axes given) to points `x` with values `r`.
pub fn fit(grid: &mut Grid, x: &[Vec<f64>], r: &[f64], s: Smoothing) {
    let n = grid.len();
    if n == 0 || x.is_empty() {
        return;
    }
    let mut corners = Vec::new();
    let rows: Vec<Vec<(usize, f64)>> = x
        .iter()
        .map(|p| {
            grid.corners(p, &mut corners);
            corners.clone()
        })
        .collect();
    let scale = x.len() as f64 / n as f64;
    let (lambda, mu) = (s.lambda * scale, s.mu * scale);
    let stencils = stencils(grid);
    let apply = |v: &[f64], out: &mut [f64]| {
        out.iter_mut().zip(v).for_each(|(o, &vi)| *o = mu * vi);
        for row in &rows {
            let a: f64 = row.iter().map(|&(i, w)| w * v[i]).sum();
            for &(i, w) in row {
                out[i] += w * a;
            }
        }
        for &(c, st) in &stencils {
            let l = v[c - st] - 2.0 * v[c] + v[c + st];
            out[c - st] += lambda * l;
            out[c] -= 2.0 * lambda * l;
            out[c + st] += lambda * l;
        }
    };
    let mut b = vec![0.0; n];
    for (row, &ri) in rows.iter().zip(r) {
        for &(i, w) in row {
            b[i] += w * ri;
        }
    }
    grid.values = conjugate_gradients(&b, apply);
}

/// Second-difference stencils of `grid`: (centre, stride) for every interior node of
/// each axis of 3 or more nodes.
fn stencils(grid: &Grid) -> Vec<(usize, usize)> {
    let n = grid.len();
    let strides = grid.strides();
    let mut stencils = Vec::new();
    for (d, a) in grid.axes.iter().enumerate() {
        if a.n < 3 {
            continue;
        }
        for idx in 0..n {
            let j = (idx / strides[d]) % a.n;
            if j >= 1 && j + 1 < a.n {
                stencils.push((idx, strides[d]));
            }
        }
    }
    stencils
}

/// Solves `apply(v) = b` by conjugate gradients from v = 0 (`apply` writes the
/// product into its second argument).
fn conjugate_gradients(b: &[f64], apply: impl Fn(&[f64], &mut [f64])) -> Vec<f64> {
    let n = b.len();
    let mut v = vec![0.0; n];
    let mut res = b.to_vec();
    let mut p = res.clone();
    let mut ap = vec![0.0; n];
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let mut rr = dot(&res, &res);
    let tol = 1e-12 * rr.max(1e-300);
    for _ in 0..(4 * n).clamp(50, 2000) {
        if rr <= tol {
            break;
        }
        apply(&p, &mut ap);
        let alpha = rr / dot(&p, &ap);
        for i in 0..n {
            v[i] += alpha * p[i];
            res[i] -= alpha * ap[i];
        }
        let rr2 = dot(&res, &res);
        let beta = rr2 / rr;
        rr = rr2;
        for i in 0..n {
            p[i] = res[i] + beta * p[i];
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim::cost::tables::grid::Axis;

    #[test]
    fn reproduces_a_plane_and_fills_a_gap() {
        // Points on the plane r = 0.1 x + 0.2 y over a 5 x 5 grid, the centre node
        // left out: a plane has no curvature, so the fit passes through the points and
        // the empty centre takes the plane's value.
        let axes = vec![
            Axis {
                lo: 0.0,
                step: 1.0,
                n: 5
            };
            2
        ];
        let mut g = Grid::zeros(axes);
        let (mut x, mut r) = (Vec::new(), Vec::new());
        for i in 0..5 {
            for j in 0..5 {
                if (i, j) != (2, 2) {
                    x.push(vec![i as f64, j as f64]);
                    r.push(0.1 * i as f64 + 0.2 * j as f64);
                }
            }
        }
        fit(
            &mut g,
            &x,
            &r,
            Smoothing {
                lambda: 0.1,
                mu: 0.0,
            },
        );
        assert!(
            (g.at(&[2.0, 2.0]) - 0.6).abs() < 1e-6,
            "{}",
            g.at(&[2.0, 2.0])
        );
        assert!((g.at(&[1.5, 3.25]) - 0.8).abs() < 1e-6);
    }
}
