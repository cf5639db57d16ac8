//! A rack-sized serving simulation with a constant-cost model: measures the simulator,
//! not the cost model. 72 GPUs (12 x DEP2 prefill, DEP48 decode), AgentX-like sessions.

use criterion::{criterion_group, criterion_main, Criterion};

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use sim::serving::*;

fn rack(c: &mut Criterion) {
    let cost = ConstCost {
        prefill_s: 0.05,
        decode_s: 0.010,
        kv_tokens_per_rank: 200_000_000,
    };
    let mut sc = scenario(Mode::Disaggregated, pool(12, 2), pool(1, 48), 20.0, 5.0);
    sc.serving.mtp = MtpConfig {
        draft_tokens: Some(3),
        acceptance: Some(vec![0.87, 0.8, 0.75]),
    };
    let wl: WorkloadConfig =
        toml::from_str(include_str!("../../scenarios/workloads/agentx.toml")).unwrap();
    let hw = hardware(72);
    let m = model(890.0, None);
    let input = SimInput {
        scenario: &sc,
        workload: &wl,
        hardware: &hw,
        model: &m,
        prefill_cost: &cost,
        decode_cost: &cost,
        trace: &[],
    };
    let mut g = c.benchmark_group("serving");
    g.sample_size(10);
    g.bench_function("gb300_rack_agentx_20s_const_cost", |b| {
        b.iter(|| simulate(&input, 1).unwrap().requests_completed)
    });
    g.finish();
}

criterion_group!(benches, rack);
criterion_main!(benches);
