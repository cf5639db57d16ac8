//! The spread of each kernel class's price, estimated from the kernel table's errors
//! on rows the parameters were not fitted to: every `check` row's error, and every
//! `fit` row's leave-one-out error (its group refitted without it). Rows are pooled by
//! class and by architecture (SM90: H800, H200, H100; SM100: B200, GB200, GB300: the
//! same kernels on the same die), and the pool's spread is written into the
//! `[cost.spread]` of every GPU of that architecture.
//!
//! Estimator: the root mean square of the log errors `ln(predicted / published)` (about
//! zero, not about their mean: a bias is an error a band must hold), raised to its 90%
//! upper confidence bound under a normal model, `rms * sqrt(n / chi2_0.10(n))`. With
//! few rows the plain RMS understates the spread often (with 3 rows, one time in ten it
//! is below 0.5 of the true one); the bound is conservative by design, and tends to
//! the RMS as rows accumulate (x1.15 at 100 rows). A class with no such row on an
//! architecture gets no spread there ("no spread known"), never a guess.

use sim::cost::spread::Class;
use statrs::distribution::{ChiSquared, ContinuousCDF};

/// Kernel-table rows by id prefix: the class of kernel each prices.
pub const CLASS_OF: &[(&str, Class)] = &[
    ("deepgemm-", Class::Gemm),
    ("megamoe-", Class::Gemm),
    ("deepep-normal-", Class::A2aNormal),
    ("deepep-initial-", Class::A2aNormal),
    ("deepep-v2-", Class::A2aNormal),
    ("deepep-ll-", Class::A2aLowLatency),
    ("trtllm-onesided-", Class::A2aLowLatency),
    ("nccl-allreduce-", Class::Allreduce),
    ("flashmla-", Class::Attention),
    ("cudnn-", Class::Attention),
];

/// GPUs that share kernels: a row on one is evidence for all.
pub const ARCHITECTURES: &[(&str, &[&str])] = &[
    ("SM90", &["h800", "h200", "h100"]),
    ("SM100", &["b200", "gb200", "gb300"]),
];

/// The class of the kernel a row prices.
pub fn class_of(id: &str) -> Option<Class> {
    CLASS_OF
        .iter()
        .find(|(p, _)| id.starts_with(p))
        .map(|(_, c)| *c)
}

/// The architecture a hardware belongs to.
pub fn architecture(hw: &str) -> Option<(&'static str, &'static [&'static str])> {
    ARCHITECTURES
        .iter()
        .find(|(_, gpus)| gpus.contains(&hw))
        .copied()
}

/// One out-of-sample error.
#[derive(Debug, Clone)]
pub struct Held {
    pub id: String,
    pub hardware: String,
    pub class: Class,
    /// `ln(predicted / published)`.
    pub log_error: f64,
    /// A check row (else a fit row left out).
    pub check: bool,
}

/// A class's spread on one architecture.
#[derive(Debug, Clone)]
pub struct ClassSpread {
    pub class: Class,
    pub architecture: &'static str,
    pub rows: Vec<Held>,
    pub rms: f64,
    pub spread: f64,
}

impl ClassSpread {
    /// GPUs of the architecture with rows of their own.
    pub fn hardware_with_rows(&self) -> Vec<String> {
        let mut v: Vec<String> = self.rows.iter().map(|r| r.hardware.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// What the value was estimated from, for the provenance line of `hw`.
    pub fn provenance(&self, table: &str, hw: &str) -> String {
        let checks = self.rows.iter().filter(|r| r.check).count();
        let loo = self.rows.len() - checks;
        let on = self.hardware_with_rows();
        let what = format!(
            "{} rows of {table} on {} ({checks} check rows, {loo} fit rows left out one at a time): RMS log error {:.4}, raised to its 90% upper confidence bound (chi-square, n = {})",
            self.rows.len(),
            on.join(", "),
            self.rms,
            self.rows.len()
        );
        if on.iter().any(|h| h == hw) {
            format!("fitted: {what} (`twin validate published kernels-public --fit`)")
        } else {
            format!(
                "assumed: the {} siblings' spread, no rows of this GPU's own; {what} (`twin validate published kernels-public --fit`)",
                self.architecture
            )
        }
    }
}

/// The 90% upper confidence bound factor of an RMS of `n` normal errors:
/// `sqrt(n / chi2_0.10(n))`.
pub fn upper_bound_factor(n: usize) -> f64 {
    let n = n as f64;
    (n / chi2_quantile(0.10, n)).sqrt()
}

/// Spreads by class and architecture from `held`, one per pair with rows.
pub fn estimate(held: &[Held]) -> Vec<ClassSpread> {
    let mut out = Vec::new();
    for (arch, gpus) in ARCHITECTURES {
        for class in Class::ALL {
            let rows: Vec<Held> = held
                .iter()
                .filter(|h| h.class == class && gpus.contains(&h.hardware.as_str()))
                .cloned()
                .collect();
            if rows.is_empty() {
                continue;
            }
            let n = rows.len();
            let rms = (rows.iter().map(|r| r.log_error.powi(2)).sum::<f64>() / n as f64).sqrt();
            out.push(ClassSpread {
                class,
                architecture: arch,
                rms,
                spread: rms * upper_bound_factor(n),
                rows,
            });
        }
    }
    out
}

/// Held-out coverage of the estimator: for each row, the spread of its pool without
/// it, and whether the row's error falls inside that pool's p10-p90 (+-1.2816 sd).
/// Returns (inside, rows judged); pools of one row are not judged (no spread left).
pub fn held_out_coverage(held: &[Held]) -> (usize, usize) {
    const Z90: f64 = 1.281_551_565_545;
    let (mut inside, mut judged) = (0, 0);
    for (i, h) in held.iter().enumerate() {
        let Some((_, gpus)) = architecture(&h.hardware) else {
            continue;
        };
        let others: Vec<f64> = held
            .iter()
            .enumerate()
            .filter(|(j, o)| *j != i && o.class == h.class && gpus.contains(&o.hardware.as_str()))
            .map(|(_, o)| o.log_error)
            .collect();
        if others.is_empty() {
            continue;
        }
        let n = others.len();
        let rms = (others.iter().map(|e| e * e).sum::<f64>() / n as f64).sqrt();
        judged += 1;
        if h.log_error.abs() <= Z90 * rms * upper_bound_factor(n) {
            inside += 1;
        }
    }
    (inside, judged)
}

/// The `p` quantile of the chi-square distribution with `k` degrees of freedom, by
/// bisection on statrs' distribution function (statrs' own `inverse_cdf` loses its
/// way above about 260 degrees of freedom).
pub fn chi2_quantile(p: f64, k: f64) -> f64 {
    let d = ChiSquared::new(k).expect("degrees of freedom are positive");
    spec::stats::bisect(0.0, k + 20.0 * k.sqrt() + 50.0, |x| d.cdf(x) - p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chi_square_quantiles_match_the_tables() {
        // Published 10% points of chi-square (any statistics table).
        for (k, want) in [
            (1.0, 0.01579),
            (2.0, 0.2107),
            (5.0, 1.6103),
            (10.0, 4.8652),
            (30.0, 20.599),
        ] {
            let got = chi2_quantile(0.10, k);
            assert!(
                (got - want).abs() < 1e-3 * want.max(1.0),
                "k {k}: {got} vs {want}"
            );
        }
        // 2 degrees of freedom is exponential: P = 1 - exp(-x/2), so x = -2 ln 0.9.
        assert!((chi2_quantile(0.10, 2.0) + 2.0 * 0.9f64.ln()).abs() < 1e-9);
        // Many degrees of freedom: the Wilson-Hilferty approximation (about 1e-5 off at
        // 300), k (1 - 2/(9k) + z sqrt(2/(9k)))^3 with z the normal 10% point.
        let (k, z) = (300.0f64, -1.281_551_565_545);
        let wh = k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3);
        let got = chi2_quantile(0.10, k);
        assert!((got - wh).abs() < 1e-4 * wh, "k {k}: {got} vs {wh}");
    }

    fn held(id: &str, hw: &str, e: f64) -> Held {
        Held {
            id: id.into(),
            hardware: hw.into(),
            class: class_of(id).unwrap(),
            log_error: e,
            check: true,
        }
    }

    #[test]
    fn pools_by_class_and_architecture() {
        // Two SM90 GEMM rows at +-0.1: RMS 0.1, raised by sqrt(2 / 0.2107) = 3.081.
        let h = vec![
            held("deepgemm-a", "h800", 0.1),
            held("deepgemm-b", "h200", -0.1),
            held("megamoe-c", "b200", 0.3),
            held("nccl-allreduce-d", "h800", 0.05),
        ];
        let s = estimate(&h);
        assert_eq!(s.len(), 3);
        let g = s
            .iter()
            .find(|c| c.class == Class::Gemm && c.architecture == "SM90")
            .unwrap();
        assert!((g.rms - 0.1).abs() < 1e-12);
        assert!(
            (g.spread - 0.1 * (2.0f64 / 0.210_721).sqrt()).abs() < 1e-4,
            "{}",
            g.spread
        );
        assert!(g
            .provenance("t", "h800")
            .starts_with("fitted: 2 rows of t on h200, h800"));
        assert!(g
            .provenance("t", "h100")
            .starts_with("assumed: the SM90 siblings'"));
        // Held out: each GEMM row against the other alone (n = 1: bound 0.1 * 7.96).
        assert_eq!(held_out_coverage(&h), (2, 2));
    }

    #[test]
    fn every_table_row_has_a_class() {
        let text = include_str!("../../scenarios/published/kernels-public.csv");
        let rows = fitting::read_table("kernels-public", text).unwrap();
        for r in rows {
            assert!(
                class_of(&r.id).is_some(),
                "row {} has no kernel class",
                r.id
            );
        }
    }
}
