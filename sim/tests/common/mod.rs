//! Fixtures shared by the serving tests and bench: small cost models with known
//! behaviour, and hardware/model values built in code.
#![allow(dead_code)]

use sim::cost::{CostModel, KvCapacity, Op, Phase, StepCost, StepShape};
use sim::serving::*;
use spec::hardware::Hardware;
use spec::model::Model;
use std::collections::BTreeMap;

/// A step costs a fixed time per phase whatever its contents.
pub struct ConstCost {
    pub prefill_s: f64,
    pub decode_s: f64,
    pub kv_tokens_per_rank: u64,
}

impl CostModel for ConstCost {
    fn step(&self, shape: &StepShape<'_>) -> StepCost {
        // A mixed step: its prefill and decode parts, added.
        if shape.is_mixed() {
            return sim::cost::two_passes(self, shape);
        }
        let s = match shape.phase {
            Phase::Prefill => self.prefill_s,
            Phase::Decode => self.decode_s,
        };
        let mut op_s = [0.0; sim::cost::OPS];
        op_s[Op::Moe.index()] = 0.75 * s;
        op_s[Op::Attention.index()] = 0.25 * s;
        StepCost {
            step_s: s,
            op_s,
            balanced_step_s: s,
            ..Default::default()
        }
    }
    fn describe(&self) -> String {
        "constant test cost".into()
    }
}

impl KvCapacity for ConstCost {
    fn kv_capacity_tokens_per_rank(&self) -> u64 {
        self.kv_tokens_per_rank
    }
}

/// Each rank's time is `fixed + per_token * new tokens + per_ctx * context tokens`
/// (decode: (1 + drafts) tokens per request); the step is the slowest rank, the
/// balanced step the mean rank.
pub struct LinearCost {
    pub fixed_s: f64,
    pub per_token_s: f64,
    pub per_ctx_s: f64,
    pub kv_tokens_per_rank: u64,
}

impl CostModel for LinearCost {
    fn step(&self, shape: &StepShape<'_>) -> StepCost {
        // A mixed step: its prefill and decode parts, added.
        if shape.is_mixed() {
            return sim::cost::two_passes(self, shape);
        }
        let per_q = match shape.phase {
            Phase::Prefill => 1,
            Phase::Decode => 1 + shape.draft_tokens,
        };
        let times: Vec<f64> = shape
            .ranks
            .iter()
            .map(|slices| {
                slices
                    .iter()
                    .map(|s| {
                        s.count as f64
                            * (self.per_token_s * (s.new_tokens * per_q) as f64
                                + self.per_ctx_s * s.context_tokens as f64)
                    })
                    .sum::<f64>()
            })
            .collect();
        let max = times.iter().cloned().fold(0.0, f64::max);
        let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
        let step_s = self.fixed_s + max;
        let mut op_s = [0.0; sim::cost::OPS];
        op_s[Op::Overhead.index()] = self.fixed_s;
        op_s[Op::Moe.index()] = max;
        StepCost {
            step_s,
            op_s,
            balanced_step_s: self.fixed_s + mean,
            ..Default::default()
        }
    }
    fn describe(&self) -> String {
        "linear test cost".into()
    }
}

impl KvCapacity for LinearCost {
    fn kv_capacity_tokens_per_rank(&self) -> u64 {
        self.kv_tokens_per_rank
    }
}

/// The repository's GB300 file with zero NVLink latency (so hand-derived transfer
/// times are pure bandwidth) and the given NVLink domain size.
pub fn hardware(domain_gpus: u32) -> Hardware {
    let mut h: Hardware = toml::from_str(include_str!("../../../scenarios/hardware/gb300.toml"))
        .expect("gb300 parses");
    h.nvlink.latency_s = 0.0;
    h.scaleout = spec::hardware::Link {
        bytes_per_s: 100e9,
        latency_s: 5e-6,
    };
    h.nvlink_domain_gpus = domain_gpus;
    h.price.hyperscaler_usd_per_gpu_hour = 2.65;
    h
}

/// The repository's tiny test model with the given KV bytes per token and MTP.
pub fn model(kv_bytes_per_token: f64, mtp: Option<(u32, Vec<f64>)>) -> Model {
    let mut m: Model = toml::from_str(include_str!("../../../scenarios/models/tiny-moe.toml"))
        .expect("tiny-moe parses");
    m.kv.bytes_per_token = kv_bytes_per_token;
    m.mtp = mtp.map(|(draft_tokens, acceptance)| spec::model::Mtp {
        draft_tokens,
        acceptance,
        modules: 1,
    });
    m
}

pub fn pool(instances: u32, dep: u32) -> PoolConfig {
    PoolConfig {
        instances,
        dep,
        ..PoolConfig::default_decode()
    }
}

pub fn scenario(
    mode: Mode,
    prefill: PoolConfig,
    decode: PoolConfig,
    duration_s: f64,
    warmup_s: f64,
) -> ServingScenario {
    ServingScenario {
        name: "test".into(),
        description: String::new(),
        hardware: "test-gpu".into(),
        model: "tiny-moe".into(),
        workload: "test".into(),
        engine: None,
        moe_kernel: None,
        pdl: None,
        workload_set: Vec::new(),
        seed: 1,
        duration_s,
        warmup_s,
        serving: ServingConfig {
            max_model_len: None,
            gpu_memory_utilization: None,
            kv_block_tokens: None,
            mode,
            prefill,
            decode,
            kv_transfer: KvTransferConfig::default(),
            mtp: MtpConfig::default(),
            scheduler: Default::default(),
            async_scheduling: None,
            frontend_s: None,
            frontend_chunk_s: None,
            frontend_token_s: None,
            api_servers: None,
            scheduler_recv_interval: None,
            mixed_chunk: None,
            batch_wait_iters: None,
            batch_wait_tokens_ratio: None,
            adp_balance: None,
            adp_timeout_iters: None,
            adp_batching_iters: None,
            gpus: None,
        },
        router: RouterConfig::default(),
        slo: SloConfig::default(),
        price: PriceConfig::default(),
        limits: Limits::default(),
        fidelity: Fidelity::default(),
        live: Default::default(),
        provenance: BTreeMap::new(),
    }
}

pub fn closed_loop(concurrency: u32, input: f64, output: f64) -> WorkloadConfig {
    WorkloadConfig {
        name: "closed".into(),
        description: String::new(),
        closed_loop: Some(ClosedLoop {
            concurrency,
            input_tokens: Dist::fixed(input),
            output_tokens: Dist::fixed(output),
            shared_prefix_tokens: 0,
            think_time_s: Dist::fixed(0.0),
        }),
        open_loop: None,
        agentx: None,
        trace: None,
        bench: None,
        rate_curve: None,
        provenance: BTreeMap::new(),
    }
}

/// `sc` under `wl`, checked: a test's scenario is a valid one.
pub fn checked(sc: &ServingScenario, wl: &WorkloadConfig) -> Checked {
    Checked::new(sc.clone(), wl.clone())
        .unwrap_or_else(|r| panic!("invalid scenario: {:?}", r.lines()))
}

/// The input of a run of `run` with `cost` pricing both pools, without trace records.
pub fn one_cost_input<'a>(
    run: &'a Checked,
    hw: &'a Hardware,
    m: &'a Model,
    cost: &'a dyn PoolCost,
) -> SimInput<'a> {
    SimInput {
        run,
        hardware: hw,
        model: m,
        prefill_cost: cost,
        decode_cost: cost,
        trace: &[],
    }
}

/// Runs `sc` under `wl` (and `trace`) with `cost` pricing both pools, on
/// `hardware(72)`: the report, with its accounts checked, and every step started.
pub fn run_recorded(
    sc: &ServingScenario,
    wl: &WorkloadConfig,
    m: &Model,
    cost: &dyn PoolCost,
    trace: &[TraceRecord],
) -> (Report, Vec<SimStep>) {
    let hw = hardware(72);
    let run = checked(sc, wl);
    let input = SimInput {
        trace,
        ..one_cost_input(&run, &hw, m, cost)
    };
    let (r, steps) = simulate_with(&input, sc.seed, &Control::default(), Record::STEPS)
        .map(|o| (o.report, o.steps))
        .expect("simulation runs");
    assert_eq!(r.accounting.violations(), Vec::<String>::new());
    (r, steps)
}

/// A trace replay at the recorded pace.
pub fn trace_workload() -> WorkloadConfig {
    WorkloadConfig::trace_replay("trace")
}
