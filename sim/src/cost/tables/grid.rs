//! A smooth correction over a few log2 shape axes: values at the nodes of a regular
//! grid, read between them by multilinear interpolation and clamped to the grid's
//! edges outside it. The kernel tables' profiles store one per op family and key: the
//! natural log of measured over physics-priced time, fitted to the training rows
//! (`calibration::tables`), so the correction is multiplicative and its absence (0)
//! leaves the physics price.

use serde::{Deserialize, Serialize};

/// One axis: `n` nodes at `lo, lo + step, ...` (log2 units).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Axis {
    pub lo: f64,
    pub step: f64,
    pub n: usize,
}

impl Axis {
    /// The axis covering `[min, max]` with nodes `step` apart, from `floor(min)`.
    pub fn covering(min: f64, max: f64, step: f64) -> Axis {
        let lo = (min / step).floor() * step;
        let n = (((max - lo) / step).ceil() as usize + 1).max(1);
        Axis { lo, step, n }
    }

    /// The cell a coordinate falls in and the fraction across it, clamped.
    #[inline]
    pub fn locate(&self, x: f64) -> (usize, f64) {
        if self.n <= 1 {
            return (0, 0.0);
        }
        let u = ((x - self.lo) / self.step).clamp(0.0, (self.n - 1) as f64);
        let i = (u as usize).min(self.n - 2);
        (i, u - i as f64)
    }
}

/// Node values over the product of `axes`, the first axis slowest.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Grid {
    pub axes: Vec<Axis>,
    /// Stored as text: integers in thousandths, space-separated, a run of `n` zeros
    /// as `zn` (see [`encode`]).
    #[serde(with = "compact")]
    pub values: Vec<f64>,
}

/// The values as thousandths, space-separated, zero runs as `z<count>`.
pub fn encode(values: &[f64]) -> String {
    let mut out = Vec::new();
    let mut zeros = 0usize;
    for v in values {
        let q = (v * 1000.0).round() as i64;
        if q == 0 {
            zeros += 1;
            continue;
        }
        if zeros > 0 {
            out.push(if zeros == 1 {
                "0".to_string()
            } else {
                format!("z{zeros}")
            });
            zeros = 0;
        }
        out.push(q.to_string());
    }
    if zeros > 0 {
        out.push(if zeros == 1 {
            "0".to_string()
        } else {
            format!("z{zeros}")
        });
    }
    out.join(" ")
}

/// A token of an encoded grid that is neither a value nor a run of zeros.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GridError {
    #[error("bad zero run {0:?}")]
    ZeroRun(String),
    #[error("bad value {0:?}")]
    Value(String),
}

/// The inverse of [`encode`].
pub fn decode(text: &str) -> Result<Vec<f64>, GridError> {
    let mut v = Vec::new();
    for tok in text.split_ascii_whitespace() {
        if let Some(n) = tok.strip_prefix('z') {
            let n: usize = n.parse().map_err(|_| GridError::ZeroRun(tok.into()))?;
            v.extend(std::iter::repeat_n(0.0, n));
        } else {
            let q: i64 = tok.parse().map_err(|_| GridError::Value(tok.into()))?;
            v.push(q as f64 / 1000.0);
        }
    }
    Ok(v)
}

mod compact {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let text = String::deserialize(d)?;
        super::decode(&text).map_err(serde::de::Error::custom)
    }
}

impl Grid {
    /// A grid of zeros (no correction).
    pub fn zeros(axes: Vec<Axis>) -> Grid {
        let n = axes.iter().map(|a| a.n).product();
        Grid {
            axes,
            values: vec![0.0; n],
        }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Index strides of the axes.
    pub fn strides(&self) -> Vec<usize> {
        let mut s = vec![1; self.axes.len()];
        for d in (0..self.axes.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * self.axes[d + 1].n;
        }
        s
    }

    /// The nodes around `x` and their weights (at most `2^dims`, weights summing to 1).
    pub fn corners(&self, x: &[f64], out: &mut Vec<(usize, f64)>) {
        out.clear();
        out.push((0, 1.0));
        let strides = self.strides();
        for (d, a) in self.axes.iter().enumerate() {
            let (i, f) = a.locate(x[d]);
            let len = out.len();
            for j in 0..len {
                let (idx, w) = out[j];
                out[j] = (idx + i * strides[d], w * (1.0 - f));
                if a.n > 1 {
                    out.push((idx + (i + 1) * strides[d], w * f));
                }
            }
        }
    }

    /// The value at `x` (log2 coordinates, one per axis).
    pub fn at(&self, x: &[f64]) -> f64 {
        if self.values.is_empty() {
            return 0.0;
        }
        let mut c = Vec::with_capacity(1 << self.axes.len());
        self.corners(x, &mut c);
        c.iter().map(|&(i, w)| w * self.values[i]).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_by_hand() {
        // 2 x 3 nodes: x in {0, 1}, y in {0, 2, 4}; values v(x, y) = x + y / 2.
        let axes = vec![
            Axis {
                lo: 0.0,
                step: 1.0,
                n: 2,
            },
            Axis {
                lo: 0.0,
                step: 2.0,
                n: 3,
            },
        ];
        let mut g = Grid::zeros(axes);
        for i in 0..2 {
            for j in 0..3 {
                g.values[i * 3 + j] = i as f64 + j as f64;
            }
        }
        // A plane is reproduced exactly between nodes.
        assert!((g.at(&[0.25, 3.0]) - (0.25 + 1.5)).abs() < 1e-12);
        // Clamped outside: as at the nearest edge.
        assert!((g.at(&[-5.0, 9.0]) - 2.0).abs() < 1e-12);
        assert_eq!(Grid::default().at(&[1.0]), 0.0);
        let v = [0.0, 0.0, 0.0, 0.0123, -0.5, 0.0, 0.25, 0.0, 0.0];
        assert_eq!(encode(&v), "z3 12 -500 0 250 z2");
        assert_eq!(
            decode(&encode(&v)).unwrap(),
            vec![0.0, 0.0, 0.0, 0.012, -0.5, 0.0, 0.25, 0.0, 0.0]
        );
        assert!(decode("1 zx").is_err());
        let a = Axis::covering(0.3, 4.1, 1.0);
        assert_eq!((a.lo, a.n), (0.0, 6));
    }
}
