//! Every term of the analytic cost model against a value derived by hand.
//!
//! The GPU here is synthetic with round numbers (HBM 1e12 B/s; BF16 1e15, FP8 2e15,
//! FP4 4e15 flop/s; link 1e11 B/s and 1 us; host link 1e11 B/s) and the cost
//! parameters are ideal (every efficiency 1, every fixed cost 0) unless a test sets
//! one, so each expected value below follows from the formula in its comment.

use sim::cost::{
    AnalyticCostModel, CostModel, CostParams, KvCapacity, Layout, Op, OpRate, Phase, ReqSlice,
    StepShape,
};
use sim::{Hardware, Model};

const HW: &str = r#"
name = "unit"
nvlink_domain_gpus = 72
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
const MODEL: &str = r#"
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
load_dispersion = 1.0
[kv]
bytes_per_token = 100.0
"#;

fn hw() -> Hardware {
    toml::from_str(HW).unwrap()
}

fn model() -> Model {
    toml::from_str(MODEL).unwrap()
}

fn ideal() -> CostParams {
    let r = OpRate::new(1.0, 1.0, 0.0);
    CostParams {
        source: "ideal".into(),
        moe: r,
        gemm: r,
        attention: r,
        indexer: r,
        gather: r,
        comm: r,
        elementwise: r,
        comm_per_peer_s: 0.0,
        layer_fixed_decode_s: 0.0,
        layer_fixed_prefill_s: 0.0,
        step_fixed_decode_s: 0.0,
        step_fixed_prefill_s: 0.0,
    }
}

fn cm(model: Model, dep: u32, overlap: bool, params: CostParams) -> AnalyticCostModel {
    let layout = Layout {
        dep,
        redundant_experts: 0,
        overlap_microbatches: overlap,
    };
    AnalyticCostModel::new(hw(), model, layout, params)
}

fn decode(c: &AnalyticCostModel, per_rank: u32, ctx: u64, draft: u32) -> sim::StepCost {
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
        draft_tokens: draft,
    })
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() <= 1e-9 * b.abs().max(1e-15), "{a:e} != {b:e}");
}

#[test]
fn moe_reads_the_experts_that_tokens_touch() {
    // One token, top-2 of 8: expected experts hit = 8 * (1 - (1 - 2/8)^1) = 2.
    // Bytes = 2 experts * 3 * 1000 * 1000 weights * 1 B = 6e6 B -> 6e6 / 1e12 = 6 us.
    // Flops = 2 * 3e6 * 2 pairs = 1.2e7 -> 6 ns at 2e15: memory bound.
    let c = cm(model(), 1, false, ideal());
    let s = decode(&c, 1, 0, 0);
    close(s.experts_touched_per_rank, 2.0);
    close(s.op(Op::Moe), 6e-6);
    close(s.moe_weight_bytes_per_rank, 6e6);
    // Four tokens: 8 * (1 - 0.75^4) = 5.46875 experts -> 16.40625 us.
    let s = decode(&c, 4, 0, 0);
    close(s.op(Op::Moe), 5.46875 * 3e6 / 1e12);
}

#[test]
fn wide_ep_cuts_the_weight_bytes_per_rank() {
    // DEP2, 2 tokens per rank (4 in the group): each rank holds 4 experts, of which
    // 4 * (1 - 0.75^4) = 2.734375 are hit -> 8.203125e6 B -> 8.203125 us.
    let c = cm(model(), 2, false, ideal());
    let s = decode(&c, 2, 0, 0);
    close(s.moe_weight_bytes_per_rank, 2.734375 * 3e6);
    close(s.op(Op::Moe), 2.734375 * 3e6 / 1e12);
}

#[test]
fn moe_compute_binds_at_large_batch() {
    // 10,000 tokens on one rank: every expert is hit (1 - 0.75^10000 = 1):
    // bytes 2.4e7 -> 24 us; flops 2 * 3e6 * 20,000 pairs = 1.2e11 -> 60 us at 2e15.
    let c = cm(model(), 1, false, ideal());
    let s = decode(&c, 10_000, 0, 0);
    close(s.op(Op::Moe), 60e-6);
    assert_eq!(s.op_bound[Op::Moe.index()], sim::cost::Bound::Compute);
}

#[test]
fn expert_load_imbalance_raises_the_slowest_rank() {
    // DEP4 with 2500 tokens per rank, compute bound. Pairs in the group 20,000, mean
    // 5000 per rank; sigma = sqrt(5000 * (1 - 1/4) * 1.0) = 61.237; the expected max
    // over 4 ranks is mean + sigma * sqrt(2 ln 4) = 5000 + 61.237 * 1.66511 = 5101.97.
    // MoE = 2 * 3e6 * 5101.97 / 2e15; balanced = 2 * 3e6 * 5000 / 2e15 = 15 us.
    let c = cm(model(), 4, false, ideal());
    let s = decode(&c, 2500, 0, 0);
    let max_pairs = 5000.0 + (5000.0f64 * 0.75).sqrt() * (2.0 * 4f64.ln()).sqrt();
    close(s.op(Op::Moe), 2.0 * 3e6 * max_pairs / 2e15);
    assert!(s.imbalance_s() > 0.0);
    assert!((s.step_s - s.balanced_step_s - (s.op(Op::Moe) - 15e-6)).abs() < 1e-12);
}

#[test]
fn dense_attention_reads_the_whole_context() {
    // Context 999 + 1 new token: 1000 entries * 100 B = 1e5 B -> 0.1 us at 1e12;
    // flops 1000 pairs * 2 * 8 heads * (100 + 100) = 3.2e6 -> 3.2 ns: memory bound.
    let c = cm(model(), 1, false, ideal());
    close(decode(&c, 1, 999, 0).op(Op::Attention), 1e-7);
    // Ten times the context, ten times the time.
    close(decode(&c, 1, 9999, 0).op(Op::Attention), 1e-6);
}

fn sparse_model() -> Model {
    let mut m = model();
    m.layers[0].attention = sim::model::AttentionKind::Sparse;
    m.layers[0].compress_ratio = 4;
    m.attention.indexer = Some(sim::model::Indexer {
        heads: 4,
        head_dim: 32,
        dtype: sim::units::Dtype::Fp8,
        top_k: 64,
        key_bytes: 16.0,
    });
    m
}

#[test]
fn sparse_attention_reads_top_k_and_the_indexer_scans_everything() {
    // Context 4095 + 1: 4096 / 4 = 1024 compressed entries.
    // Attention reads min(1024, 64) = 64 entries * 100 B = 6400 B -> 6.4 ns.
    // Indexer reads 1024 keys * 16 B = 16,384 B -> 16.384 ns (flops 1024 * 2*4*32 =
    // 262,144 -> 0.13 ns at 2e15: memory bound).
    let c = cm(sparse_model(), 1, false, ideal());
    let s = decode(&c, 1, 4095, 0);
    close(s.op(Op::Attention), 6.4e-9);
    close(s.op(Op::Indexer), 16.384e-9);
    // 4x the context: the indexer grows 4x, attention stays at top-k.
    let s = decode(&c, 1, 4 * 4096 - 1, 0);
    close(s.op(Op::Attention), 6.4e-9);
    close(s.op(Op::Indexer), 4.0 * 16.384e-9);
}

#[test]
fn compressed_and_window_attention() {
    // Compressed 128:1, context 12,799 + 1: 100 entries * 100 B = 1e4 B -> 10 ns.
    let mut m = model();
    m.layers[0].attention = sim::model::AttentionKind::Compressed;
    m.layers[0].compress_ratio = 128;
    let c = cm(m, 1, false, ideal());
    close(decode(&c, 1, 12_799, 0).op(Op::Attention), 10e-9);
    // Window of 128 with 50-byte entries, context 1000: min(1001, 128 + 1) = 129
    // entries * 50 B = 6450 B -> 6.45 ns.
    let mut m = model();
    m.layers[0].attention = sim::model::AttentionKind::Window;
    m.attention.window = 128;
    m.attention.window_entry_bytes = 50.0;
    let c = cm(m, 1, false, ideal());
    close(decode(&c, 1, 1000, 0).op(Op::Attention), 6.45e-9);
}

#[test]
fn prefill_attention_is_causal_over_the_prefix() {
    // Prefill 100 new tokens on 900 cached: pairs = sum_{p=901..1000} p = 95,050;
    // flops = 95,050 * 2 * 8 * 200 = 3.0416e8 -> 0.30416 us at 1e15;
    // bytes = 1000 entries * 100 B = 1e5 -> 0.1 us: compute bound.
    let c = cm(model(), 1, false, ideal());
    let ranks = vec![vec![ReqSlice::one(100, 900)]];
    let s = c.step(&StepShape {
        phase: Phase::Prefill,
        ranks: &ranks,
        draft_tokens: 0,
    });
    close(s.op(Op::Attention), 95_050.0 * 3200.0 / 1e15);
}

#[test]
fn dense_gemms_read_weights_once_and_scale_with_tokens() {
    // Projections without q_lora: q 1000*8*100 + kv 1000*100 + o 8*100*1000 = 1.7e6
    // params in FP8 = 1.7e6 B -> 1.7 us; LM head 1000 * 1000 FP8 = 1e6 B -> 1 us.
    // One decode token: compute is negligible, so dense = 2.7 us.
    let c = cm(model(), 1, false, ideal());
    close(decode(&c, 1, 0, 0).op(Op::Dense), 2.7e-6);
}

#[test]
fn shared_expert_costs_its_weights() {
    // One shared expert of 3e6 FP8 params: 3e6 B -> 3 us at one token.
    let mut m = model();
    m.moe.as_mut().unwrap().shared_experts = 1;
    let c = cm(m, 1, false, ideal());
    close(decode(&c, 1, 0, 0).op(Op::SharedExpert), 3e-6);
}

#[test]
fn dispatch_and_combine_cross_the_link() {
    // DEP4, one token per rank, top-2 of 8: distinct remote ranks per token =
    // 4 * (1 - (3/4)^2) * 3/4 = 1.3125; bytes = 1.3125 * 1000 * (1 + 2) = 3937.5 B
    // -> 39.375 ns at 1e11, plus 2 * 1 us latency = 2.039375 us (no overlap).
    let c = cm(model(), 4, false, ideal());
    close(decode(&c, 1, 0, 0).op(Op::Communication), 2.039375e-6);
    // Per-peer signalling is serial: + 2 * 3 peers * 1 us = 6 us more.
    let mut p = ideal();
    p.comm_per_peer_s = 1e-6;
    let c = cm(model(), 4, false, p);
    close(decode(&c, 1, 0, 0).op(Op::Communication), 8.039375e-6);
}

#[test]
fn overlap_hides_communication_behind_compute() {
    // With two micro-batches, only comm beyond the layer's compute shows. At one token
    // per rank compute (about 9 us of weight reads) exceeds the 2.04 us transfer.
    let c = cm(model(), 4, true, ideal());
    assert_eq!(decode(&c, 1, 0, 0).op(Op::Communication), 0.0);
}

fn engram_model(page: &str) -> Model {
    let mut m = model();
    m.engram = Some(sim::model::Engram {
        at_layers: vec![0],
        orders: vec![2],
        heads_per_order: 1,
        dim_per_order: 100,
        rows_per_table: 1_000_000,
        dtype: sim::units::Dtype::Fp8,
        host_resident: true,
        page_size: sim::units::ByteSize::parse(page).unwrap(),
    });
    m
}

#[test]
fn engram_gathers_pay_tlb_misses_past_the_reach() {
    // One table of 1e6 rows * 100 B = 1e8 B in host memory; one gather per token.
    // 4 KiB pages: reach 1000 * 4096 = 4.096e6 B; p_miss = 1 - 4.096e6/1e8 = 0.95904.
    // 1000 tokens: bytes 1e5 -> 1 us on the 1e11 link; misses 1000 * 0.95904 * 10 ns.
    let c = cm(engram_model("4KiB"), 1, false, ideal());
    let s = decode(&c, 1000, 0, 0);
    close(s.op(Op::Engram), 1e-6 + 1000.0 * 0.95904 * 1e-8);
    // 2 MiB pages: reach 2.097e9 B covers the table: no misses.
    let c = cm(engram_model("2MiB"), 1, false, ideal());
    close(decode(&c, 1000, 0, 0).op(Op::Engram), 1e-6);
}

#[test]
fn mhc_moves_stream_activations() {
    // 4 streams fused: (2*4 + 2) * 1000 elements * 2 B = 20 kB per token per layer;
    // 10 tokens -> 2e5 B -> 0.2 us. Unfused: (4*4 + 4) -> 0.4 us.
    let mut m = model();
    m.mhc = Some(sim::model::Mhc {
        streams: 4,
        fused: true,
    });
    close(
        decode(&cm(m.clone(), 1, false, ideal()), 10, 0, 0).op(Op::Mhc),
        0.2e-6,
    );
    m.mhc = Some(sim::model::Mhc {
        streams: 4,
        fused: false,
    });
    close(
        decode(&cm(m, 1, false, ideal()), 10, 0, 0).op(Op::Mhc),
        0.4e-6,
    );
}

#[test]
fn fixed_costs_per_layer_and_step() {
    // 1 layer * 20 us + 300 us per decode step = 320 us of overhead.
    let mut p = ideal();
    p.layer_fixed_decode_s = 20e-6;
    p.step_fixed_decode_s = 300e-6;
    close(
        decode(&cm(model(), 1, false, p), 1, 0, 0).op(Op::Overhead),
        320e-6,
    );
}

#[test]
fn mtp_verifies_drafts_and_runs_draft_passes() {
    // Expected tokens per step with acceptance [0.8, 0.5] and 2 drafts:
    // 1 + 0.8 + 0.8 * 0.5 = 2.2.
    let mtp = sim::model::Mtp {
        draft_tokens: 2,
        acceptance: vec![0.8, 0.5],
    };
    close(mtp.expected_tokens_per_step(2), 2.2);
    close(mtp.expected_tokens_per_step(0), 1.0);
    // With 2 drafts the target sees 3 tokens per request, and 2 draft passes follow.
    let mut m = model();
    m.mtp = Some(mtp);
    let c = cm(m, 1, false, ideal());
    let s = decode(&c, 1, 0, 2);
    assert_eq!(s.tokens_processed, 3);
    assert!(s.op(Op::MtpDraft) > 0.0);
    close(s.step_s, Op::ALL.iter().map(|o| s.op(*o)).sum::<f64>());
}

#[test]
fn window_replay_recomputes_cached_context() {
    // Two window layers, window 128; bounded replay of 100 tokens below layer 1.
    // Layer 0 (bounded) replays min(ctx, 100) = 100 tokens; layer 1 (unbounded)
    // replays min(ctx, 128 * (2 - 1)) = 128 tokens: 228 token-layers.
    // Per token-layer: dense flops 2 * (1.7e6 projections + 2 * 3e6 routed experts)
    // = 1.54e7 at 2e15 (FP8) -> 7.7 ns; a window layer's replayed token attends to
    // 0 (own kind: window) + 128 window entries: 128 * 3200 flops at 1e15 (BF16).
    let mut m = model();
    m.layers[0].count = 2;
    m.layers[0].attention = sim::model::AttentionKind::Window;
    m.attention.window = 128;
    m.attention.window_entry_bytes = 100.0;
    m.attention.replay = Some(sim::model::Replay {
        bounded_tokens: 100,
        bounded_layers: 1,
    });
    let c = cm(m, 1, false, ideal());
    let ranks = vec![vec![ReqSlice::one(1, 10_000)]];
    let s = c.step(&StepShape {
        phase: Phase::Prefill,
        ranks: &ranks,
        draft_tokens: 0,
    });
    let per_token_layer = 2.0 * (1.7e6 + 2.0 * 3e6) / 2e15 + 128.0 * 3200.0 / 1e15;
    close(s.op(Op::WindowReplay), 228.0 * per_token_layer);
    // No cached context, no replay.
    let ranks = vec![vec![ReqSlice::one(1, 0)]];
    let s = c.step(&StepShape {
        phase: Phase::Prefill,
        ranks: &ranks,
        draft_tokens: 0,
    });
    assert_eq!(s.op(Op::WindowReplay), 0.0);
}

#[test]
fn kv_capacity_is_what_weights_leave() {
    // Weights: 8 experts * 3e6 + projections 1.7e6 + 2 * 1e6 embedding/LM head =
    // 2.77e7 B; 0.92 * 1e11 usable - 2.77e7 = 9.19723e10 B / 100 B per token.
    let c = cm(model(), 1, false, ideal());
    assert_eq!(
        c.kv_capacity_tokens_per_rank(),
        (9.19723e10f64 / 100.0) as u64
    );
}
