//! Shared numerics, defined once: percentiles, the median, a stable hash, bisection.
//!
//! - [`percentile`] is the one percentile definition: linear interpolation between
//!   order statistics ("type 7" of Hyndman and Fan, numpy's and R's default), as vLLM's
//!   benchmark reports its percentiles. Bands, live figures, kernel timings and the
//!   in-situ factors all use it.
//! - [`median`] is the middle value, or the mean of the two middle values: equal to
//!   `percentile(v, 0.5)` up to rounding.
//! - [`fnv1a64`] is a hash that does not change between runs, machines or Rust
//!   versions (unlike `std`'s `DefaultHasher`).
//! - [`bisect`] finds where an increasing function crosses zero.
//!
//! Two estimators stay elsewhere on purpose: the run validation's residual bands
//! (`calibration::runs::quantile`) take statrs' median-unbiased quantile ("type 8"),
//! and the simulator's latency histograms (`sim::serving::stats`) keep no samples, so
//! their quantiles are nearest-rank over log-spaced buckets.

/// The `q` (0..=1) percentile of `sorted` (ascending), by linear interpolation between
/// order statistics: with `h = q (n - 1)`, `v[floor h] + (h - floor h) (v[floor h + 1]
/// - v[floor h])`. Panics on an empty slice (callers decide what an empty sample means).
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    let h = q * (sorted.len() - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// [`percentile_sorted`] of `values` in any order (sorted by `f64::total_cmp`).
pub fn percentile(values: &[f64], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    percentile_sorted(&v, q)
}

/// The median of `values` in any order: the middle value, or the mean of the two
/// middle values; NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// FNV-1a, 64 bits: a stable hash for keys and seeds that must not change between
/// runs, machines or Rust versions.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The smallest `x` in `[lo, hi]` with `f(x) >= 0`, for an increasing `f`, by 60
/// halvings of the bracket (the upper end of the last one): `hi` when `f` never
/// changes sign.
pub fn bisect(mut lo: f64, mut hi: f64, f: impl Fn(f64) -> f64) -> f64 {
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if f(mid) >= 0.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_order_statistics() {
        // 11 values 0..=10: p10 is the 2nd (1), p50 the 6th (5), p90 the 10th (9).
        let v: Vec<f64> = (0..=10).rev().map(f64::from).collect();
        assert_eq!([0.1, 0.5, 0.9].map(|q| percentile(&v, q)), [1.0, 5.0, 9.0]);
        // 5 values: h = 0.4 and 3.6 (numpy.percentile gives 1.4 and 4.6).
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert!((percentile(&v, 0.1) - 1.4).abs() < 1e-12);
        assert!((percentile(&v, 0.9) - 4.6).abs() < 1e-12);
        assert_eq!((percentile(&v, 0.0), percentile(&v, 1.0)), (1.0, 5.0));
        assert_eq!(percentile(&[2.0], 0.99), 2.0);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn bisection_finds_the_crossing() {
        let x = bisect(0.0, 10.0, |x| x * x - 2.0);
        assert!((x - 2f64.sqrt()).abs() < 1e-12 && x * x >= 2.0, "{x}");
        assert_eq!(bisect(0.0, 1.0, |x| x - 5.0), 1.0);
    }

    #[test]
    fn fnv_matches_the_published_vectors() {
        // The reference implementation's test vectors (FNV-1a, 64 bits).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
