//! Bands drawn through the step model: zero spread gives the point price, the same seed
//! the same band bit for bit, and a spread on one class widens the band by no more than
//! that class's share of the step allows.

use sim::cost::band::{step_band, Band};
use sim::cost::spread::{Class, Spread};
use sim::cost::{AnalyticCostModel, CostModel, CostParams, Layout, Phase, ReqSlice, StepShape};
use spec::{hardware::Hardware, model::Model};

fn inputs() -> (Hardware, Model, CostParams) {
    let hw: Hardware = toml::from_str(include_str!("../../scenarios/hardware/gb300.toml")).unwrap();
    let m: Model = toml::from_str(include_str!(
        "../../scenarios/models/deepseek-v4.1-flash.toml"
    ))
    .unwrap();
    let mut p = CostParams::default();
    for (k, v) in &hw.cost {
        p.set(k, *v).unwrap();
    }
    p.spread = Spread::default();
    (hw, m, p)
}

fn ranks(dep: usize, batch: u32, context: u64) -> Vec<Vec<ReqSlice>> {
    vec![
        vec![ReqSlice {
            new_tokens: 1,
            context_tokens: context,
            count: batch,
        }];
        dep
    ]
}

#[test]
fn zero_spread_gives_the_point_price() {
    let (hw, m, mut p) = inputs();
    for c in Class::ALL {
        p.spread.classes.insert(c, 0.0);
    }
    for (dep, batch, context, seed) in [(8, 64, 131_072, 0), (8, 1, 1_000, 5), (16, 32, 20_000, 9)]
    {
        let layout = Layout::new(dep as u32);
        let r = ranks(dep, batch, context);
        let shape = StepShape {
            phase: Phase::Decode,
            ranks: &r,
            decode_ranks: &[],
            draft_tokens: 0,
        };
        let point = AnalyticCostModel::new(hw.clone(), m.clone(), layout.clone(), p.clone())
            .step(&shape)
            .step_s;
        let b = step_band(&hw, &m, &layout, &p, &shape, 16, seed).unwrap();
        assert_eq!(
            b.step_s,
            Band {
                p10: point,
                p50: point,
                p90: point
            }
        );
        assert!(b.unknown.is_empty());
    }
}

#[test]
fn a_band_is_deterministic_and_brackets_the_point() {
    let (hw, m, mut p) = inputs();
    p.spread.classes.insert(Class::Gemm, 0.1);
    p.spread.classes.insert(Class::A2aLowLatency, 0.1);
    let layout = Layout::new(8);
    let r = ranks(8, 64, 131_072);
    let shape = StepShape {
        phase: Phase::Decode,
        ranks: &r,
        decode_ranks: &[],
        draft_tokens: 0,
    };
    let a = step_band(&hw, &m, &layout, &p, &shape, 64, 1).unwrap();
    let b = step_band(&hw, &m, &layout, &p, &shape, 64, 1).unwrap();
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let c = step_band(&hw, &m, &layout, &p, &shape, 64, 2).unwrap();
    assert_ne!(a.step_s, c.step_s);
    let cost =
        AnalyticCostModel::new(hw.clone(), m.clone(), layout.clone(), p.clone()).step(&shape);
    let point = cost.step_s;
    assert!(
        a.step_s.p10 < point && point < a.step_s.p90,
        "{a:?} {point}"
    );
    // Only GEMM and all-to-all times move, each by at most exp(0.1 * 1.2816 + sampling
    // noise) at the band's ends: the band cannot be wider than the whole step moved so.
    let widest = (0.1f64 * 2.0).exp();
    assert!(
        a.step_s.p90 < point * widest && a.step_s.p10 > point / widest,
        "{a:?}"
    );
    // Rates from times: the p10 of tokens/s is the p90 step's.
    assert!(a.tokens_per_s_per_gpu.p10 < a.tokens_per_s_per_gpu.p90);
    assert_eq!(a.unknown.len(), sim::cost::spread::CLASSES - 2);
}
