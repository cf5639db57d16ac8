//! Expert-load skew: how much more than the mean the most loaded rank of a DEP group
//! receives, from persistent expert popularity and from the sampling noise of a batch.
//!
//! - **Popularity.** Experts are not equally popular, and the hot ones stay hot for
//!   hundreds of steps (TensorRT-LLM's EP study of DeepSeek-R1). Popularity is drawn
//!   log-normal with coefficient of variation `cv` (the model's `moe.expert_load_cv`).
//!   Without redundant experts, rank `r` holds experts `[r E/D, (r+1) E/D)`; with `R`
//!   redundant experts, EPLB's documented procedure replicates the expert with the
//!   highest load per copy `R` times and packs the copies onto ranks (`(E+R)/D` slots
//!   each), heaviest first onto the least loaded rank with a free slot. The expected
//!   hottest-rank share over the mean is averaged over seeded draws: deterministic.
//! - **Sampling.** A batch of `P` token-expert pairs puts a multinomial count on each
//!   rank; the hottest of `D` is about `z_D` standard deviations above its mean, with
//!   `z_D` the expected maximum of `D` standard normals (Blom's approximation).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Seeded draws of expert popularity averaged per layout.
const DRAWS: u64 = 32;

/// Inverse of the standard normal CDF (Acklam's rational approximation; absolute error
/// below 1e-4, ample for an expected maximum).
#[allow(clippy::excessive_precision)]
pub fn inv_norm(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e+01,
        2.209460984245205e+02,
        -2.759285104469687e+02,
        1.383577518672690e+02,
        -3.066479806614716e+01,
        2.506628277459239e+00,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e+01,
        1.615858368580409e+02,
        -1.556989798598866e+02,
        6.680131188771972e+01,
        -1.328068155288572e+01,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e+00,
        -2.549671010224316e+00,
        4.374664141464968e+00,
        2.938163982698783e+00,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-03,
        3.224671290700398e-01,
        2.445134137142996e+00,
        3.754408661907416e+00,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let lo = 0.02425;
    if p < lo {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - lo {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -inv_norm(1.0 - p)
    }
}

/// Expected maximum of `n` independent standard normals (Blom: `Phi^-1((n - 0.375) /
/// (n + 0.25))`); 0 for one.
pub fn expected_max_normal(n: f64) -> f64 {
    if n <= 1.0 {
        0.0
    } else {
        inv_norm((n - 0.375) / (n + 0.25))
    }
}

/// A load with an index, ordered for a max-heap by load.
#[derive(PartialEq)]
struct Item(f64, usize);
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then(o.1.cmp(&self.1))
    }
}

/// The hottest rank's load over the mean for one popularity draw.
fn hottest(pop: &[f64], ranks: usize, redundant: usize) -> f64 {
    let e = pop.len();
    let total: f64 = pop.iter().sum();
    let mean = total / ranks as f64;
    if redundant == 0 {
        let per = e / ranks;
        let max = pop
            .chunks(per.max(1))
            .map(|c| c.iter().sum::<f64>())
            .fold(0.0, f64::max);
        return max / mean;
    }
    // Replicate: the expert with the highest load per copy gets the next copy.
    let mut copies = vec![1usize; e];
    let mut heap: BinaryHeap<Item> = pop.iter().enumerate().map(|(i, &l)| Item(l, i)).collect();
    for _ in 0..redundant {
        let Item(_, i) = heap.pop().expect("experts");
        copies[i] += 1;
        heap.push(Item(pop[i] / copies[i] as f64, i));
    }
    // Pack the copies heaviest first onto the least loaded rank with a free slot.
    let mut items: Vec<f64> = Vec::with_capacity(e + redundant);
    for (i, &l) in pop.iter().enumerate() {
        for _ in 0..copies[i] {
            items.push(l / copies[i] as f64);
        }
    }
    items.sort_by(|a, b| b.total_cmp(a));
    let slots = (e + redundant).div_ceil(ranks);
    let mut free = vec![slots; ranks];
    // Min-heap of rank loads (negated for the max-heap).
    let mut loads: BinaryHeap<Item> = (0..ranks).map(|r| Item(-0.0, r)).collect();
    let mut max: f64 = 0.0;
    for l in items {
        let Item(neg, r) = loop {
            match loads.pop() {
                Some(it) if free[it.1] > 0 => break it,
                Some(_) => {} // full: leaves the heap
                None => unreachable!("enough slots for every copy"),
            }
        };
        let load = -neg + l;
        free[r] -= 1;
        max = max.max(load);
        loads.push(Item(-load, r));
    }
    max / mean
}

/// Expected hottest-rank load over the mean from expert popularity alone, for `experts`
/// on `ranks` with `redundant` extra copies, popularity CV `cv`. 1 for one rank or
/// `cv = 0` without redundancy.
pub fn popularity_skew(experts: u32, ranks: u32, redundant: u32, cv: f64) -> f64 {
    if ranks <= 1 || experts == 0 || cv <= 0.0 {
        return 1.0;
    }
    let sigma2 = (1.0 + cv * cv).ln();
    let (mu, sigma) = (-sigma2 / 2.0, sigma2.sqrt());
    // One stream per layout, so a layout always sees the same draws.
    let seed = (experts as u64) << 40 ^ (ranks as u64) << 20 ^ redundant as u64 ^ cv.to_bits();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut pop = vec![0.0; experts as usize];
    let mut sum = 0.0;
    for _ in 0..DRAWS {
        for x in pop.iter_mut() {
            // Box-Muller from two uniforms.
            let u1: f64 = rng.random::<f64>().max(1e-300);
            let u2: f64 = rng.random();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            *x = (mu + sigma * z).exp();
        }
        sum += hottest(&pop, ranks as usize, redundant as usize);
    }
    sum / DRAWS as f64
}

/// The hottest rank's token-expert pairs when the group routes `pairs` pairs over
/// `ranks` ranks with popularity skew `s`: `mean * s + z_D * sqrt(mean * s)`.
pub fn hottest_pairs(pairs: f64, ranks: f64, s: f64, z: f64) -> f64 {
    let mean = pairs / ranks.max(1.0);
    let m = mean * s;
    m + z * (m * (1.0 - 1.0 / ranks.max(1.0))).max(0.0).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantiles() {
        assert!(inv_norm(0.5).abs() < 1e-9);
        assert!(
            (inv_norm(0.975) - 1.959963985).abs() < 1e-4,
            "{}",
            inv_norm(0.975)
        );
        assert!(
            (inv_norm(0.01) + 2.326347874).abs() < 1e-4,
            "{}",
            inv_norm(0.01)
        );
        assert!(
            (inv_norm(0.99) - 2.326347874).abs() < 1e-4,
            "{}",
            inv_norm(0.99)
        );
        // Blom for 2: Phi^-1(1.625/2.25) = Phi^-1(0.7222) = 0.589 (exact 0.564).
        assert!((expected_max_normal(2.0) - 0.5894).abs() < 1e-3);
        assert_eq!(expected_max_normal(1.0), 0.0);
    }

    #[test]
    fn hottest_rank_by_hand() {
        // 4 experts on 2 ranks: loads [3, 1 | 1, 1] -> rank loads 4 and 2, mean 3.
        assert!((hottest(&[3.0, 1.0, 1.0, 1.0], 2, 0) - 4.0 / 3.0).abs() < 1e-12);
        // Two redundant copies of [4, 2, 1, 1] (3 slots per rank): the 4 splits into
        // 2 + 2, then ties with the 2 and (lower index first) splits again into three
        // 4/3. Copies heaviest first onto the least loaded rank: 2 -> r0; 4/3 -> r1;
        // 4/3 -> r1 (8/3); 4/3 -> r0 (10/3); 1 -> r1 (11/3, full); 1 -> r0 (13/3).
        // Hottest 13/3 over the mean 4.
        let h = hottest(&[4.0, 2.0, 1.0, 1.0], 2, 2);
        assert!((h - 13.0 / 12.0).abs() < 1e-12, "{h}");
    }

    #[test]
    fn redundancy_reduces_and_cv_raises_the_skew() {
        let base = popularity_skew(256, 32, 0, 0.4);
        let eplb = popularity_skew(256, 32, 32, 0.4);
        let flat = popularity_skew(256, 32, 0, 0.1);
        assert!(
            base > 1.0 && eplb < base && flat < base,
            "{base} {eplb} {flat}"
        );
        assert_eq!(popularity_skew(256, 1, 0, 0.4), 1.0);
        // Deterministic.
        assert_eq!(base, popularity_skew(256, 32, 0, 0.4));
        // hottest_pairs: 800 pairs over 4 ranks, no skew, z = 1: 200 + sqrt(150).
        assert!((hottest_pairs(800.0, 4.0, 1.0, 1.0) - (200.0 + 150f64.sqrt())).abs() < 1e-12);
    }
}
