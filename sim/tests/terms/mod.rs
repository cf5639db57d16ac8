//! The synthetic GPU, model and ideal cost parameters the hand-derived term tests
//! share (`cost_terms.rs`, `cost_terms_models.rs`); every figure of them is round so
//! each expected value follows from the formula in its test's comment.

#![allow(dead_code)]

use sim::cost::params::{Launch, LowLatency, TileParams};
use sim::cost::{
    AnalyticCostModel, CostModel, CostParams, Layout, OpRate, Phase, ReqSlice, StepShape,
};
use spec::{hardware::Hardware, model::Model};

pub const HW: &str = r#"
name = "unit"
nvlink_domain_gpus = 2
sms = 100
power_w = 1000.0
[hbm]
capacity = "100GB"
usable = "100GB"
bytes_per_s = 1.0e12
[tensor]
bf16_flops_per_s = 1.0e15
fp8_flops_per_s = 2.0e15
fp4_flops_per_s = 4.0e15
[nvlink]
bytes_per_s = 1.0e11
latency_s = 1.0e-6
[scaleout]
bytes_per_s = 1.0e10
latency_s = 5.0e-6
[host]
memory = "100GB"
link_bytes_per_s = 1.0e11
link_latency_s = 1.0e-6
[tlb]
entries = 1000
miss_s = 1.0e-8
[price]
hyperscaler_usd_per_gpu_hour = 1.0
neocloud_usd_per_gpu_hour = 1.0
rental_3yr_usd_per_gpu_hour = 1.0
"#;

/// One MoE layer with dense attention; hidden 1000, 8 experts top-2 of FFN 1000 in FP8.
pub const MODEL: &str = r#"
name = "unit-moe"
hidden = 1000
vocab = 1000
embedding_dtype = "fp8"
dispatch_dtype = "fp8"
combine_dtype = "bf16"
[[layers]]
count = 1
ffn = "moe"
attention = "dense"
[attention]
heads = 8
score_dim = 100
value_dim = 100
qk_head_dim = 100
v_head_dim = 100
q_lora = 0
kv_dim = 100
weight_dtype = "fp8"
compute_dtype = "bf16"
kv_entry_bytes = 100.0
[moe]
routed_experts = 8
shared_experts = 0
top_k = 2
expert_ffn = 1000
weight_dtype = "fp8"
shared_weight_dtype = "fp8"
expert_load_cv = 0.0
[kv]
bytes_per_token = 100.0
"#;

pub fn hw() -> Hardware {
    toml::from_str(HW).unwrap()
}

pub fn model() -> Model {
    toml::from_str(MODEL).unwrap()
}

pub fn ideal() -> CostParams {
    let r = OpRate::new(1.0, 1.0, 0.0);
    CostParams {
        source: "ideal".into(),
        moe: r,
        gemm: r,
        attention: r,
        attention_sparse: r,
        attention_prefill: r,
        attention_sparse_prefill: r,
        indexer: r,
        gather: r,
        comm: r,
        allreduce: r,
        elementwise: r,
        comm_rdma_eff: 1.0,
        comm_sms: 0.0,
        prefill_diag_tokens: 0.0,
        step_fixed_decode_s: 0.0,
        step_fixed_prefill_s: 0.0,
        tile: TileParams {
            load_bytes_per_flop: 1e9,
            epilogue_k: 0.0,
            small_tile_eff: 1.0,
            overlap_p: 1e9,
        },
        ll: LowLatency {
            nvlink_eff: 1.0,
            rdma_eff: 1.0,
            dispatch_s: 0.0,
            combine_s: 0.0,
            per_peer_s: 0.0,
            overlap_p: 1.0,
        },
        launch: Launch {
            eager_s: 0.0,
            graph_node_s: 0.0,
            graph_s: 0.0,
            triton_moe_s: 0.0,
            linear_attn_s: 0.0,
            graph_tokens: 0.0,
        },
        ..CostParams::default()
    }
}

pub fn cm(model: Model, dep: u32, overlap: bool, params: CostParams) -> AnalyticCostModel {
    let layout = Layout {
        overlap_microbatches: overlap,
        ..Layout::new(dep)
    };
    AnalyticCostModel::new(hw(), model, layout, params)
}

pub fn decode(c: &AnalyticCostModel, per_rank: u32, ctx: u64, draft: u32) -> sim::cost::StepCost {
    let ranks = vec![
        vec![ReqSlice {
            new_tokens: 1,
            context_tokens: ctx,
            count: per_rank
        }];
        c.layout.dep as usize
    ];
    c.step(&StepShape {
        phase: Phase::Decode,
        ranks: &ranks,
        decode_ranks: &[],
        draft_tokens: draft,
    })
}

pub fn prefill(c: &AnalyticCostModel, new: u32, ctx: u64) -> sim::cost::StepCost {
    let ranks = vec![vec![ReqSlice::one(new, ctx)]; c.layout.dep as usize];
    c.step(&StepShape {
        phase: Phase::Prefill,
        ranks: &ranks,
        decode_ranks: &[],
        draft_tokens: 0,
    })
}

pub fn close(a: f64, b: f64) {
    assert!((a - b).abs() <= 1e-9 * b.abs().max(1e-15), "{a:e} != {b:e}");
}

/// Bytes a grouped GEMM moves as the model counts them: per group the activations
/// (`m k`, FP8), the weights (`k n`) and the BF16 output (`2 m n`).
pub fn grouped_bytes(groups: f64, m: f64, n: f64, k: f64, w: f64) -> f64 {
    groups * (m * k + k * n * w + 2.0 * m * n)
}

pub fn tp(model: Model, tp: u32, expert_parallel: bool, params: CostParams) -> AnalyticCostModel {
    let layout = Layout {
        expert_parallel,
        ..Layout::tensor_parallel(tp)
    };
    AnalyticCostModel::new(hw(), model, layout, params)
}
