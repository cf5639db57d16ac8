//! One decode step of DeepSeek-V4.1-Flash (40 layers) on GB300, priced by the analytic
//! cost model. Goal: under 1 us per step for a DEP group whose ranks each hold a batch
//! (NVIDIA's AIConfigurator Rust core reports 17-94 us per engine step).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use sim::cost::{
    AnalyticCostModel, CostModel, CostParams, Layout, Phase, Pipeline, ReqSlice, StepShape,
};
use spec::{hardware::Hardware, model::Model};

fn model() -> (Hardware, Model) {
    let hw: Hardware = toml::from_str(include_str!("../../scenarios/hardware/gb300.toml")).unwrap();
    let m: Model = toml::from_str(include_str!(
        "../../scenarios/models/deepseek-v4.1-flash.toml"
    ))
    .unwrap();
    (hw, m)
}

fn bench(c: &mut Criterion) {
    let (hw, m) = model();
    let mut params = CostParams::default();
    for (k, v) in &hw.cost {
        params.set(k, *v).unwrap();
    }
    for (dep, label) in [(8u32, "dep8"), (32, "dep32")] {
        let cm = AnalyticCostModel::new(hw.clone(), m.clone(), Layout::new(dep), params.clone());
        // Every rank: 64 requests at 128K context, described as one slice.
        let uniform = vec![
            vec![ReqSlice {
                new_tokens: 1,
                context_tokens: 131_072,
                count: 64
            }];
            dep as usize
        ];
        for draft in [0u32, 3] {
            c.bench_function(
                &format!("decode_step/{label}/b64_uniform/mtp{draft}"),
                |b| {
                    b.iter(|| {
                        cm.step(black_box(&StepShape {
                            phase: Phase::Decode,
                            ranks: &uniform,
                            decode_ranks: &[],
                            draft_tokens: draft,
                        }))
                    })
                },
            );
        }
        // As the simulator calls it: 64 individual requests per rank, mixed contexts.
        let each: Vec<Vec<ReqSlice>> = (0..dep)
            .map(|r| {
                (0..64)
                    .map(|i| ReqSlice::one(1, 50_000 + 3_000 * ((r as u64 * 64 + i) % 97)))
                    .collect()
            })
            .collect();
        c.bench_function(&format!("decode_step/{label}/b64_per_request/mtp3"), |b| {
            b.iter(|| {
                cm.step(black_box(&StepShape {
                    phase: Phase::Decode,
                    ranks: &each,
                    decode_ranks: &[],
                    draft_tokens: 3,
                }))
            })
        });
    }
}

/// DeepSeek-V3 decode on H800, DEP128 with low-latency all-to-all: the two-batch
/// schedule against DeepSeek's five-stage pipeline (one step each, 32 requests per
/// rank at a 16K context).
fn pipelines(c: &mut Criterion) {
    let hw: Hardware = toml::from_str(include_str!("../../scenarios/hardware/h800.toml")).unwrap();
    let m: Model = toml::from_str(include_str!("../../scenarios/models/deepseek-v3.toml")).unwrap();
    let mut params = CostParams::default();
    for (k, v) in &hw.cost {
        params.set(k, *v).unwrap();
    }
    let dep = 128u32;
    let ranks = vec![
        vec![ReqSlice {
            new_tokens: 1,
            context_tokens: 16_384,
            count: 32
        }];
        dep as usize
    ];
    for pipeline in [Pipeline::TwoBatch, Pipeline::FiveStage] {
        let layout = Layout {
            decode_pipeline: pipeline,
            ..Layout::new(dep)
        };
        let cm = AnalyticCostModel::new(hw.clone(), m.clone(), layout, params.clone());
        c.bench_function(
            &format!("decode_step/v3-h800-dep128/b32_{}", pipeline.name()),
            |b| {
                b.iter(|| {
                    cm.step(black_box(&StepShape {
                        phase: Phase::Decode,
                        ranks: &ranks,
                        decode_ranks: &[],
                        draft_tokens: 0,
                    }))
                })
            },
        );
    }
}

criterion_group!(benches, bench, pipelines);
criterion_main!(benches);
