//! A band around a price: `draws` parameter sets drawn from the cost parameters'
//! spread (`cost::spread`), each pricing the step afresh, and the 10th, 50th and 90th
//! percentiles of what they give. Pure: the same inputs and seed give the same band,
//! bit for bit.

use super::spread::{Class, Spread};
use super::{AnalyticCostModel, CostModel, CostParams, Layout, StepShape};
use serde::Serialize;
use spec::{hardware::Hardware, model::Model};

/// Draws a band takes by default.
pub const DEFAULT_DRAWS: usize = 64;

/// The seed a band draws from unless told otherwise.
pub const DEFAULT_SEED: u64 = 0;

/// Three percentiles of an ensemble.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Band {
    pub p10: f64,
    pub p50: f64,
    pub p90: f64,
}

impl Band {
    /// The percentiles of `values` (linear interpolation between order statistics,
    /// the usual "type 7" definition: `spec::stats::percentile`). Panics on an empty slice (a programmer's bug:
    /// a band has at least one draw).
    pub fn of(values: &[f64]) -> Band {
        assert!(!values.is_empty(), "a band needs at least one draw");
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let q = |p: f64| spec::stats::percentile_sorted(&v, p);
        Band {
            p10: q(0.1),
            p50: q(0.5),
            p90: q(0.9),
        }
    }

    /// Whether `x` lies in [p10, p90].
    pub fn contains(&self, x: f64) -> bool {
        self.p10 <= x && x <= self.p90
    }

    /// The band of `f(value)` for a decreasing `f` (a rate from a time): its
    /// percentiles swap ends.
    pub fn map_decreasing(&self, f: impl Fn(f64) -> f64) -> Band {
        Band {
            p10: f(self.p90),
            p50: f(self.p50),
            p90: f(self.p10),
        }
    }
}

/// What one draw priced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Priced {
    pub step_s: f64,
    pub tokens_per_s_per_gpu: f64,
}

/// The band of a step (or of anything priced from cost parameters).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepBand {
    pub step_s: Band,
    pub tokens_per_s_per_gpu: Band,
    pub draws: usize,
    pub seed: u64,
    /// Classes with no spread known: priced at their point value in every draw.
    pub unknown: Vec<Class>,
}

/// Prices `draws` parameter sets drawn from `params.spread` with `price`, and returns
/// the band of what they give; `None` when no spread is known.
pub fn ensemble(
    params: &CostParams,
    draws: usize,
    seed: u64,
    mut price: impl FnMut(CostParams) -> Priced,
) -> Option<StepBand> {
    let spread: &Spread = &params.spread;
    if spread.is_unknown() || draws == 0 {
        return None;
    }
    let priced: Vec<Priced> = spread
        .draw(params, draws, seed)
        .into_iter()
        .map(&mut price)
        .collect();
    let step: Vec<f64> = priced.iter().map(|p| p.step_s).collect();
    let tps: Vec<f64> = priced.iter().map(|p| p.tokens_per_s_per_gpu).collect();
    Some(StepBand {
        step_s: Band::of(&step),
        tokens_per_s_per_gpu: Band::of(&tps),
        draws,
        seed,
        unknown: spread.unknown_classes(),
    })
}

/// The band of one step of `layout`: each draw prices `shape` on a fresh
/// `AnalyticCostModel`. Tokens per second per GPU count the tokens through the target
/// model (`StepCost::tokens_processed`) over the step time and the layout's GPUs.
pub fn step_band(
    hardware: &Hardware,
    model: &Model,
    layout: &Layout,
    params: &CostParams,
    shape: &StepShape<'_>,
    draws: usize,
    seed: u64,
) -> Option<StepBand> {
    let gpus = layout.gpus() as f64;
    ensemble(params, draws, seed, |p| {
        let cm = AnalyticCostModel::new(hardware.clone(), model.clone(), layout.clone(), p);
        let c = cm.step(shape);
        Priced {
            step_s: c.step_s,
            tokens_per_s_per_gpu: c.tokens_processed as f64 / c.step_s / gpus,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::spread::CLASSES;

    #[test]
    fn percentiles_interpolate_between_order_statistics() {
        // 11 values 0..=10: p10 is the 2nd (1), p50 the 6th (5), p90 the 10th (9).
        let v: Vec<f64> = (0..=10).rev().map(f64::from).collect();
        assert_eq!(
            Band::of(&v),
            Band {
                p10: 1.0,
                p50: 5.0,
                p90: 9.0
            }
        );
        // 4 values: h = 0.3, 1.5, 2.7.
        let b = Band::of(&[0.0, 10.0, 20.0, 30.0]);
        assert!((b.p10 - 3.0).abs() < 1e-12 && (b.p50 - 15.0).abs() < 1e-12);
        assert!((b.p90 - 27.0).abs() < 1e-12);
        assert!(b.contains(3.1) && b.contains(26.9) && !b.contains(2.9));
    }

    /// A price made of one class only (the low-latency dispatch latency) moves by
    /// exactly that class's factor, so its band is the point price times
    /// `exp(sd * z)` at the drawn z's percentiles (a monotone map commutes with order
    /// statistics; 61 draws put p10, p50 and p90 on the 7th, 31st and 55th exactly),
    /// and those percentiles sit near the normal's +-1.2816.
    #[test]
    fn a_one_class_price_has_that_class_spread() {
        let mut params = CostParams::default();
        params.spread.classes.insert(Class::A2aLowLatency, 0.2);
        params.spread.classes.insert(Class::Gemm, 0.5);
        let point = params.ll.dispatch_s;
        let b = ensemble(&params, 61, 3, |p| Priced {
            step_s: p.ll.dispatch_s,
            tokens_per_s_per_gpu: 1.0 / p.ll.dispatch_s,
        })
        .unwrap();
        let zs: Vec<f64> = Spread::normals(61, 3)
            .iter()
            .map(|z| z[Class::A2aLowLatency as usize])
            .collect();
        let zb = Band::of(&zs);
        for (got, z) in [
            (b.step_s.p10, zb.p10),
            (b.step_s.p50, zb.p50),
            (b.step_s.p90, zb.p90),
        ] {
            let want = point * (0.2 * z).exp();
            assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
        }
        // 61 draws: a sample decile's standard error is about 0.2 in z.
        assert!(
            (zb.p10 + 1.2816).abs() < 0.5 && (zb.p90 - 1.2816).abs() < 0.5,
            "{zb:?}"
        );
        assert!(zb.p50.abs() < 0.4);
        assert_eq!(b.unknown.len(), CLASSES - 2);
    }

    #[test]
    fn no_spread_no_band() {
        let params = CostParams::default();
        assert!(ensemble(&params, 64, 0, |_| unreachable!()).is_none());
    }
}
