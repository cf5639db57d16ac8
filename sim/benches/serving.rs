//! The simulator's speed. `default_scenario_1800s`: `twin simulate`'s embedded default
//! (DeepSeek-V4.1-Flash on a GB300 NVL72 rack, AgentX-like sessions, the analytic cost
//! model with gb300's fitted parameters), 1800 simulated seconds, as the binary runs
//! it (the goal: under 0.5 s of wall time on one core); `_cohort8` and `_cohort24`:
//! the same under the coarse model (`fidelity.cohort`, one of 8 or 24 copies of the
//! rack simulated; docs/fidelity.md gives its error). `gb300_rack_agentx_20s_const_cost`:
//! a short run with a constant-cost model, measuring the simulator alone. Criterion
//! reports each run's events per second as its throughput (elements).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use sim::cost::{AnalyticCostModel, CostParams};
use sim::serving::*;
use spec::{hardware::Hardware, model::Model};

fn default_scenario(c: &mut Criterion) {
    let sc: ServingScenario = toml::from_str(include_str!(
        "../../scenarios/gb300-nvl72-v4.1-flash-agentx.toml"
    ))
    .unwrap();
    assert!(
        sc.workload_set.is_empty(),
        "the bench does not apply workload_set"
    );
    let hw: Hardware = toml::from_str(include_str!("../../scenarios/hardware/gb300.toml")).unwrap();
    let m: Model = toml::from_str(include_str!(
        "../../scenarios/models/deepseek-v4.1-flash.toml"
    ))
    .unwrap();
    let wl: WorkloadConfig =
        toml::from_str(include_str!("../../scenarios/workloads/agentx.toml")).unwrap();
    let mut params = CostParams::default();
    for (k, v) in &hw.cost {
        params.set(k, *v).unwrap();
    }
    let cost = |layout| AnalyticCostModel::new(hw.clone(), m.clone(), layout, params.clone());
    let (prefill, decode) = (
        cost(sc.serving.prefill.layout()),
        cost(sc.serving.decode.layout()),
    );
    let run = Checked::new(sc.clone(), wl.clone()).expect("the default scenario is valid");
    let input = SimInput {
        run: &run,
        hardware: &hw,
        model: &m,
        prefill_cost: &prefill,
        decode_cost: &decode,
        trace: &[],
    };
    bench_run(c, "default_scenario_1800s", &input, sc.seed);
    // The coarse model (`fidelity.cohort`): one of k copies of the rack simulated.
    for k in [8, 24] {
        let mut coarse = sc.clone();
        coarse.fidelity.cohort = k;
        let run = Checked::new(coarse, wl.clone()).expect("a valid cohort");
        let input = SimInput { run: &run, ..input };
        bench_run(
            c,
            &format!("default_scenario_1800s_cohort{k}"),
            &input,
            sc.seed,
        );
    }
}

/// Times whole runs of `input` (10 samples: a run takes seconds), with the run's
/// events as throughput.
fn bench_run(c: &mut Criterion, name: &str, input: &SimInput<'_>, seed: u64) {
    let events = simulate(input, seed).unwrap().accounting.events;
    let mut g = c.benchmark_group("serving");
    g.sample_size(10);
    g.throughput(Throughput::Elements(events));
    g.bench_function(name, |b| {
        b.iter(|| simulate(input, seed).unwrap().requests_completed)
    });
    g.finish();
}

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
        ..Default::default()
    };
    let wl: WorkloadConfig =
        toml::from_str(include_str!("../../scenarios/workloads/agentx.toml")).unwrap();
    let hw = hardware(72);
    let m = model(890.0, None);
    let run = checked(&sc, &wl);
    let input = one_cost_input(&run, &hw, &m, &cost);
    bench_run(c, "gb300_rack_agentx_20s_const_cost", &input, 1);
}

criterion_group!(benches, default_scenario, rack);
criterion_main!(benches);
