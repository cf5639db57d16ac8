//! How sure the cost parameters are: the relative spread of each kernel class's price,
//! as the fits to public kernel benchmarks measured it (`twin validate published
//! kernels-public --fit` writes it into a hardware file's `[cost.spread]`), and the
//! parameter sets drawn from it for a band (`cost::band`).
//!
//! A class's spread is the standard deviation, in log space, of the ratio of a true
//! kernel time to twin's price for a kernel of that class it was not fitted to. A draw
//! multiplies every time of one class by `exp(sd * z)` (z standard normal, independent
//! per class): its efficiencies are divided by that factor and its latencies
//! multiplied by it, one draw shared by every kernel of the class in a step, which is
//! how a fit error behaves.
//!
//! Absent classes are "no spread known" (they are priced at their point value in every
//! draw and a band says which ones it leaves out); a class with spread 0 is known to be
//! exact. A hardware file without `[cost.spread]` knows no spread at all.

use super::params::CostParams;
use crate::serving::streams::stream;
use rand::Rng;
use serde::{Deserialize, Serialize};
use spec::insitu::Category;
use std::collections::BTreeMap;

/// Largest spread a file may give (log space): `exp(3 * 1.28)`, a factor of 47 at the
/// 90th percentile, is far past any fitted kernel and surely a typo.
pub const MAX_SPREAD: f64 = 3.0;

/// The kernel classes a spread is given for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Dense and routed-expert GEMMs (the tile model: gemm, moe, tile rates).
    Gemm,
    /// Attention: dense and sparse, decode and prefill.
    Attention,
    /// The sparse-attention indexer.
    Indexer,
    /// Normal (high-throughput, prefill) all-to-all.
    A2aNormal,
    /// Low-latency (decode) all-to-all.
    A2aLowLatency,
    /// Tensor-parallel all-reduce.
    Allreduce,
    /// Element-wise and normalisation kernels.
    Elementwise,
    /// Kernel launches (eager and CUDA-graph).
    Launch,
}

/// Number of classes.
pub const CLASSES: usize = 8;

impl Class {
    pub const ALL: [Class; CLASSES] = [
        Class::Gemm,
        Class::Attention,
        Class::Indexer,
        Class::A2aNormal,
        Class::A2aLowLatency,
        Class::Allreduce,
        Class::Elementwise,
        Class::Launch,
    ];

    /// The class's place in [`Class::ALL`] (its declaration order) and in a draw's
    /// normals.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The key in `[cost.spread]`.
    pub fn key(self) -> &'static str {
        match self {
            Class::Gemm => "gemm",
            Class::Attention => "attention",
            Class::Indexer => "indexer",
            Class::A2aNormal => "a2a_normal",
            Class::A2aLowLatency => "a2a_low_latency",
            Class::Allreduce => "allreduce",
            Class::Elementwise => "elementwise",
            Class::Launch => "launch",
        }
    }

    pub fn from_key(key: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.key() == key)
    }

    /// Multiplies every time of this class in `p` by `factor`: rates divided by it,
    /// latencies multiplied by it. Shape constants (tile epilogue, small-tile ratio,
    /// roofline sharpness, diagonal waste) are not times and stay.
    pub fn scale(self, p: &mut CostParams, factor: f64) {
        fn rate(r: &mut super::OpRate, f: f64) {
            r.mem_eff /= f;
            r.compute_eff /= f;
            r.fixed_s *= f;
        }
        match self {
            Class::Gemm => {
                rate(&mut p.gemm, factor);
                rate(&mut p.moe, factor);
                p.tile.load_bytes_per_flop /= factor;
            }
            Class::Attention => {
                rate(&mut p.attention, factor);
                p.attention_compute_eff_initial /= factor;
                rate(&mut p.attention_sparse, factor);
                rate(&mut p.attention_prefill, factor);
                rate(&mut p.attention_sparse_prefill, factor);
            }
            Class::Indexer => rate(&mut p.indexer, factor),
            Class::A2aNormal => {
                rate(&mut p.comm, factor);
                p.comm_rdma_eff /= factor;
                p.comm_rdma_eff_initial /= factor;
            }
            Class::A2aLowLatency => {
                let l = &mut p.ll;
                l.nvlink_eff /= factor;
                l.rdma_eff /= factor;
                l.dispatch_s *= factor;
                l.combine_s *= factor;
                l.per_peer_s *= factor;
            }
            Class::Allreduce => {
                rate(&mut p.allreduce, factor);
                p.allreduce_ring_step_s *= factor;
            }
            Class::Elementwise => rate(&mut p.elementwise, factor),
            Class::Launch => {
                let l = &mut p.launch;
                l.eager_s *= factor;
                l.graph_node_s *= factor;
                l.graph_s *= factor;
            }
        }
    }
}

/// The spread of each kernel class's price (log-space standard deviation); absent
/// classes have no spread known.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spread {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<Class, f64>,
    /// Spread of the in-situ correction of each category (`in_situ.CATEGORY` keys: the
    /// log-space spread of a deployment's in-situ factor, for example over the layers
    /// of its trace). `Spread::draw` moves the in-situ terms behind each category by
    /// it ([`super::insitu::InSitu::scale`]), from draws of their own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub in_situ: BTreeMap<Category, f64>,
}

fn check(key: &str, v: f64) -> Result<f64, SpreadError> {
    if !v.is_finite() || !(0.0..=MAX_SPREAD).contains(&v) {
        return Err(SpreadError::Value {
            key: key.to_string(),
            value: v,
        });
    }
    Ok(v)
}

/// What is wrong with a hardware file's `[cost.spread]` table.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpreadError {
    #[error(
        "spread `{key}` = {value} must lie in [0, {MAX_SPREAD}] (a log-space standard deviation)"
    )]
    Value { key: String, value: f64 },
    #[error("unknown in-situ category `{category}` in spread key `{key}` (known: {known})", known = Category::ALL.map(|c| c.key()).join(", "))]
    Category { category: String, key: String },
    #[error("unknown spread class `{0}` (known: {known}, in_situ.CATEGORY)", known = Class::ALL.map(|c| c.key()).join(", "))]
    Class(String),
}

impl Spread {
    /// Reads a hardware file's `[cost.spread]` table: class keys (`gemm`,
    /// `attention`, ...) and `in_situ.CATEGORY` keys.
    pub fn from_table(table: &BTreeMap<String, f64>) -> Result<Spread, SpreadError> {
        let mut s = Spread::default();
        for (k, v) in table {
            if let Some(cat) = k.strip_prefix("in_situ.") {
                let c = Category::from_key(cat).ok_or_else(|| SpreadError::Category {
                    category: cat.to_string(),
                    key: k.clone(),
                })?;
                s.in_situ.insert(c, check(k, *v)?);
            } else {
                let c = Class::from_key(k).ok_or_else(|| SpreadError::Class(k.clone()))?;
                s.classes.insert(c, check(k, *v)?);
            }
        }
        Ok(s)
    }

    /// No spread is known for any class or in-situ category: no band can be drawn.
    pub fn is_unknown(&self) -> bool {
        self.classes.is_empty() && self.in_situ.is_empty()
    }

    /// The in-situ categories a draw moves (a spread above 0 and an in-situ term that
    /// prices the category).
    pub fn in_situ_drawn(&self) -> Vec<Category> {
        self.in_situ
            .iter()
            .filter(|(c, sd)| **sd > 0.0 && crate::cost::insitu::InSitu::isolated().scale(**c, 1.0))
            .map(|(c, _)| *c)
            .collect()
    }

    /// `params` with the in-situ terms behind each known category multiplied by
    /// `exp(sd * z[k])`, `k` the category's place in `in_situ` (key order).
    pub fn apply_in_situ(&self, params: &mut CostParams, z: &[f64]) {
        for ((c, sd), z) in self.in_situ.iter().zip(z) {
            if *sd > 0.0 {
                params.in_situ.scale(*c, (sd * z).exp());
            }
        }
    }

    /// The spread of `class`, if known.
    pub fn of(&self, class: Class) -> Option<f64> {
        self.classes.get(&class).copied()
    }

    /// Classes with no spread known (priced at their point value in every draw).
    pub fn unknown_classes(&self) -> Vec<Class> {
        Class::ALL
            .into_iter()
            .filter(|c| !self.classes.contains_key(c))
            .collect()
    }

    /// `params` with every known class's times multiplied by `exp(sd * z[class])`; where
    /// measured kernel tables price a class's kernels, those prices move by their own
    /// fits' training spread under the same draw (`KernelTables::training_spread`).
    pub fn apply(&self, params: &CostParams, z: &[f64; CLASSES]) -> CostParams {
        let mut p = params.clone();
        for (i, c) in Class::ALL.into_iter().enumerate() {
            if let Some(sd) = self.of(c) {
                if sd > 0.0 {
                    c.scale(&mut p, (sd * z[i]).exp());
                }
            }
        }
        if let Some(t) = &params.tables {
            p.table_draw = t.draw(
                z[Class::Gemm.index()],
                z[Class::Attention.index()],
                z[Class::Allreduce.index()],
            );
        }
        p
    }

    /// `n` draws of standard normals, one per class per draw, from the stream
    /// `cost-band` of `seed`: the same seed gives the same draws on every platform.
    pub fn normals(n: usize, seed: u64) -> Vec<[f64; CLASSES]> {
        let mut rng = stream(seed, "cost-band");
        (0..n)
            .map(|_| {
                let mut z = [0.0; CLASSES];
                fill_normals(&mut rng, &mut z);
                z
            })
            .collect()
    }

    /// `n` parameter sets drawn around `params` (seeded, deterministic).
    /// The in-situ categories' normals come from a stream of their own
    /// (`cost-band-in-situ`), so that the class draws are the same with or without
    /// them.
    pub fn draw(&self, params: &CostParams, n: usize, seed: u64) -> Vec<CostParams> {
        let mut situ = stream(seed, "cost-band-in-situ");
        let mut zs = vec![0.0; self.in_situ.len()];
        Self::normals(n, seed)
            .iter()
            .map(|z| {
                let mut p = self.apply(params, z);
                if !zs.is_empty() {
                    fill_normals(&mut situ, &mut zs);
                    self.apply_in_situ(&mut p, &zs);
                }
                p
            })
            .collect()
    }
}

/// Fills `z` with independent standard normals from `rng` (Box-Muller: two from two
/// uniforms in (0, 1]).
fn fill_normals(rng: &mut impl Rng, z: &mut [f64]) {
    for pair in z.chunks_mut(2) {
        let u1: f64 = 1.0 - rng.random::<f64>();
        let u2: f64 = rng.random::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let a = std::f64::consts::TAU * u2;
        pair[0] = r * a.cos();
        if pair.len() > 1 {
            pair[1] = r * a.sin();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_reads_classes_and_in_situ_and_names_bad_keys() {
        let mut t = BTreeMap::new();
        t.insert("gemm".to_string(), 0.1);
        t.insert("in_situ.moe".to_string(), 0.2);
        let s = Spread::from_table(&t).unwrap();
        assert_eq!(s.of(Class::Gemm), Some(0.1));
        assert_eq!(s.of(Class::Launch), None);
        assert_eq!(s.in_situ.get(&Category::Moe), Some(&0.2));
        assert_eq!(s.unknown_classes().len(), CLASSES - 1);
        assert!(!s.is_unknown());
        assert!(Spread::default().is_unknown());
        t.insert("gemmm".to_string(), 0.1);
        let e = Spread::from_table(&t).unwrap_err().to_string();
        assert!(e.contains("gemmm") && e.contains("a2a_low_latency"), "{e}");
        let mut bad = BTreeMap::new();
        bad.insert("launch".to_string(), -0.1);
        assert!(Spread::from_table(&bad)
            .unwrap_err()
            .to_string()
            .contains("launch"));
        bad.insert("launch".to_string(), f64::NAN);
        assert!(Spread::from_table(&bad).is_err());
    }

    #[test]
    fn a_class_draw_scales_its_times_only() {
        let base = CostParams::default();
        let mut s = Spread::default();
        s.classes.insert(Class::A2aLowLatency, 0.5);
        let mut z = [0.0; CLASSES];
        z[Class::A2aLowLatency as usize] = 2.0;
        z[Class::Gemm as usize] = 5.0; // no spread known for gemm: ignored
        let p = s.apply(&base, &z);
        let f = 1f64.exp(); // exp(0.5 * 2)
        assert!((p.ll.dispatch_s - base.ll.dispatch_s * f).abs() < 1e-18);
        assert!((p.ll.nvlink_eff - base.ll.nvlink_eff / f).abs() < 1e-15);
        assert_eq!(p.gemm, base.gemm);
        assert_eq!(p.launch, base.launch);
    }

    #[test]
    fn an_in_situ_draw_scales_its_category_terms_only() {
        let mut base = CostParams::default();
        base.in_situ.decode.moe = 1.3;
        base.in_situ.prefill.moe = 1.2;
        base.in_situ.ll_dispatch_s = 80e-6;
        base.in_situ.dispatch = 1.1;
        let mut s = Spread::default();
        s.in_situ.insert(Category::Moe, 0.5);
        s.in_situ.insert(Category::Dispatch, 0.25);
        // A category with no in-situ term: carried, never drawn.
        s.in_situ.insert(Category::Indexer, 0.4);
        assert!(!s.is_unknown());
        assert_eq!(s.in_situ_drawn(), vec![Category::Moe, Category::Dispatch]);
        // In Category's order (moe, indexer, dispatch), z = [2, 7, -4]: moe x exp(0.5 *
        // 2) = e, dispatch x exp(0.25 * -4) = 1/e; the indexer's 7 moves nothing.
        let mut p = base.clone();
        s.apply_in_situ(&mut p, &[2.0, 7.0, -4.0]);
        let e = 1f64.exp();
        assert!((p.in_situ.decode.moe - 1.3 * e).abs() < 1e-12);
        assert!((p.in_situ.prefill.moe - 1.2 * e).abs() < 1e-12);
        assert!((p.in_situ.dispatch - 1.1 / e).abs() < 1e-12);
        assert!((p.in_situ.ll_dispatch_s - 80e-6 / e).abs() < 1e-18);
        assert_eq!(p.in_situ.decode.attention, base.in_situ.decode.attention);
        assert_eq!(p.in_situ.combine, base.in_situ.combine);
        // Draws: seeded; the class draws are those of a spread without in-situ keys.
        let mut classes = Spread::default();
        classes.classes.insert(Class::Gemm, 0.1);
        let mut both = classes.clone();
        both.in_situ = s.in_situ.clone();
        let (a, b) = (classes.draw(&base, 8, 3), both.draw(&base, 8, 3));
        assert_eq!(both.draw(&base, 8, 3), b);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.gemm, y.gemm);
            assert_eq!(x.in_situ.decode.attention, y.in_situ.decode.attention);
        }
        assert!(b
            .iter()
            .any(|y| y.in_situ.decode.moe != base.in_situ.decode.moe));
    }

    #[test]
    fn a_class_indexes_its_place_in_all() {
        for (i, c) in Class::ALL.into_iter().enumerate() {
            assert_eq!(c.index(), i, "{c:?}");
        }
    }

    #[test]
    fn normals_are_seeded_and_standard() {
        let a = Spread::normals(4000, 7);
        assert_eq!(a, Spread::normals(4000, 7));
        assert_ne!(a[0], Spread::normals(1, 8)[0]);
        let xs: Vec<f64> = a.iter().flat_map(|z| z.iter().copied()).collect();
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        // 32000 draws: the mean's standard error is 0.0056, the variance's 0.008.
        assert!(mean.abs() < 0.03, "{mean}");
        assert!((var - 1.0).abs() < 0.04, "{var}");
    }
}
