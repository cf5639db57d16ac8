//! Every term of the analytic cost model against a value derived by hand.
//!
//! The GPU here is synthetic with round numbers (100 SMs; HBM 1e12 B/s; BF16 1e15, FP8
//! 2e15, FP4 4e15 flop/s; NVLink 1e11 B/s per direction in domains of 2 GPUs, a NIC
//! of 1e10 B/s; host link 1e11 B/s) and the cost parameters are ideal (every efficiency
//! 1, every fixed cost and launch 0, GEMM tiles never load-bound, the roofline a hard
//! maximum) unless a test sets one, so each expected value follows from the formula in
//! its comment. The synthetic GPU, model and parameters are `terms/`; the terms of
//! other models (GQA, sinks, dense FFNs) are in `cost_terms_models.rs`, kernel launches in
//! `cost_terms_launch.rs`.

mod terms;

use sim::cost::kernels::skew::expected_max_normal;
use sim::cost::{AnalyticCostModel, KvCapacity, Layout, Op, Pipeline};
use spec::model::Model;
use terms::*;

#[test]
fn moe_reads_the_experts_that_tokens_touch() {
    // One token, top-2 of 8: experts hit = 8 * (1 - (1 - 2/8)^1) = 2, one token each.
    // Gate+up (1000 -> 2000) and down (1000 -> 1000) over 2 groups, memory-bound:
    // 2 * (1000 + 2e6 + 4000) + 2 * (1000 + 1e6 + 2000) = 6,016,000 B -> 6.016 us.
    let c = cm(model(), 1, false, ideal());
    let s = decode(&c, 1, 0, 0);
    close(s.experts_touched_per_rank, 2.0);
    close(s.op(Op::Moe), 6.016e-6);
    close(s.moe_weight_bytes_per_rank, 2.0 * 3e6);
    // Four tokens: 8 * (1 - 0.75^4) = 5.46875 experts share 8 pairs.
    let s = decode(&c, 4, 0, 0);
    let (g, m) = (5.46875, 8.0 / 5.46875);
    let bytes = grouped_bytes(g, m, 2000.0, 1000.0, 1.0) + grouped_bytes(g, m, 1000.0, 1000.0, 1.0);
    close(s.op(Op::Moe), bytes / 1e12);
}

#[test]
fn issue_38_experts_at_a_few_tokens_each_stream_their_weights() {
    // MXFP4 experts (0.5 + 1/32 B a weight) with BF16 activations, as gpt-oss runs
    // them; 4 decode tokens: 8 * (1 - 0.75^4) = 5.46875 experts of 8/5.46875 =
    // 1.4629 rows each. Operand loads of 2e10 B/s per SM (2e12 over the 100 SMs, twice
    // HBM: load_bytes_per_flop 1e-3 of the 2e13 FP8 flop/s per SM).
    // Before, each expert's rows filled a 64-row tile: gate+up (N 2000, K 1000) ran
    // 98.4 tiles of 64 x 112 in one wave, each 7.8125 K blocks of (64 x 2 + 112 x
    // 0.53125) x 128 B = 24,000 B at 2e10 B/s: 9.375 us, compute bound.
    // Now 8-token tiles of 128 weight rows: 5.46875 x 16 = 87.5 tiles x 7.8125 blocks
    // over 100 SMs, 7 each of (8 x 2 + 128 x 0.53125) x 128 = 10,752 B: 3.763 us, under
    // the HBM time, so both GEMMs stream their weights: the experts cost their bytes,
    // g (2 m k + k n w + 2 m n) per GEMM, at 1e12 B/s.
    let mut m = model();
    let e = m.moe.as_mut().unwrap();
    e.weight_dtype = spec::dtype::Dtype::Fp4;
    e.scale_block = 32;
    e.activation_dtype = spec::dtype::Dtype::Bf16;
    let mut p = ideal();
    p.tile.load_bytes_per_flop = 1e-3;
    let c = cm(m, 1, false, p);
    let (g, rows, w) = (5.46875, 8.0 / 5.46875, 0.5 + 1.0 / 32.0);
    let bytes = |n: f64, k: f64| g * (2.0 * rows * k + k * n * w + 2.0 * rows * n);
    let s = decode(&c, 4, 0, 0);
    close(
        s.op(Op::Moe),
        (bytes(2000.0, 1000.0) + bytes(1000.0, 1000.0)) / 1e12,
    );
    assert_eq!(s.op_bound[Op::Moe.index()], sim::cost::Bound::Memory);
}

#[test]
fn wide_ep_cuts_the_weight_bytes_per_rank() {
    // DEP2, 2 tokens per rank (4 in the group): each rank holds 4 experts, of which
    // 4 * (1 - 0.75^4) = 2.734375 are hit -> 8.203125e6 B of weights.
    let c = cm(model(), 2, false, ideal());
    close(
        decode(&c, 2, 0, 0).moe_weight_bytes_per_rank,
        2.734375 * 3e6,
    );
}

#[test]
fn moe_compute_at_large_batch_pays_tile_padding_and_waves() {
    // 12,800 tokens on one rank, HBM fast enough (1e14 B/s) that compute binds: every
    // expert is hit, 3200 tokens each. Scattered counts pad 3200/128 + 1/2 = 25.5 row
    // tiles of 128 per expert: 204 row tiles.
    // Gate+up (N 2000): 13 columns of 160 -> 2652 tiles, 27 waves on 100 SMs; a tile:
    // 1000/128 K blocks x 2 * 128 * 160 * 128 / 2e13 = 2.048 us; x 27 = 55.296 us.
    // Down (N 1000): 7 columns (width ceil(1000/7/8)*8 = 144) -> 1428 tiles, 15 waves;
    // 7.8125 x 2 * 128 * 144 * 128 / 2e13 = 1.8432 us; x 15 = 27.648 us.
    // 82.944 us against 76.8 us for the flops alone (1.536e11 at 2e15).
    let mut h = hw();
    h.hbm.bytes_per_s = 1e14;
    let c = AnalyticCostModel::new(
        h,
        model(),
        Layout {
            overlap_microbatches: false,
            ..Layout::new(1)
        },
        ideal(),
    );
    let s = prefill(&c, 12_800, 0);
    close(s.op(Op::Moe), 82.944e-6);
    assert_eq!(s.op_bound[Op::Moe.index()], sim::cost::Bound::Compute);
}

#[test]
fn expert_popularity_skew_loads_the_hottest_rank() {
    // DEP4, cv 0: only sampling noise. 2500 tokens per rank, top-2: 20,000 pairs,
    // mean 5000 per rank; the hottest is z_4 standard deviations above, 5000 + z_4 *
    // sqrt(5000 * 3/4) (the skew module's own tests check that formula). Skew loss
    // > 0; with a popularity spread (cv 0.5) the loss grows, and 4 redundant experts
    // (EPLB) shrink it again.
    let c = cm(model(), 4, false, ideal());
    let s = decode(&c, 2500, 0, 0);
    assert!(s.skew_loss_s() > 0.0);
    assert!(s.imbalance_s() >= s.skew_loss_s() - 1e-15);
    let mut skewed = model();
    skewed.moe.as_mut().unwrap().expert_load_cv = 0.5;
    let a = decode(&cm(skewed.clone(), 4, false, ideal()), 2500, 0, 0);
    assert!(a.skew_loss_s() > s.skew_loss_s());
    let eplb = AnalyticCostModel::new(
        hw(),
        skewed,
        Layout {
            redundant_experts: 4,
            overlap_microbatches: false,
            ..Layout::new(4)
        },
        ideal(),
    );
    let b = decode(&eplb, 2500, 0, 0);
    assert!(
        b.skew_loss_s() < a.skew_loss_s(),
        "{} !< {}",
        b.skew_loss_s(),
        a.skew_loss_s()
    );
}

#[test]
fn dense_gemms_read_weights_once_at_small_batch() {
    // One decode token, memory-bound GEMMs (FP8 weights carry 1/128 B of scales):
    // q+kv 1000 -> 900: 1000 + 900,000 * (1 + 1/128) + 1800 = 909,831.25 B;
    // o 800 -> 1000: 800 + 800,000 * (1 + 1/128) + 2000 = 809,050 B;
    // LM head (FP8) 1000 -> 1000: 1000 + 1e6 + 2000 = 1,003,000 B.
    // The router (BF16, 1000 -> 8) reads 18,016 B (18.016 ns). On row tiles it was
    // tile-bound (one 64 x 16 tile, its 7.8125 K blocks split over 8 SMs, each block
    // 2 * 64 * 16 * 128 / 1e13 = 26.2144 ns: 25.6 ns); a small-M tile of 8 tokens by
    // 64 weight rows spreads its 7.8125 blocks over the SMs, one each of
    // 2 * 8 * 64 * 128 / 1e13 = 13.1072 ns: memory-bound at its read (issue 38).
    // Sum 2,721,881.25 + 18,016 B -> 2.73989725 us.
    let c = cm(model(), 1, false, ideal());
    close(decode(&c, 1, 0, 0).op(Op::Dense), 2.73989725e-6);
}

#[test]
fn shared_expert_costs_its_weights() {
    // One shared expert: gate+up 1000 -> 2000 and down 1000 -> 1000, FP8 with scales:
    // (1000 + 2e6 * (1 + 1/128) + 4000) + (1000 + 1e6 * (1 + 1/128) + 2000).
    let mut m = model();
    m.moe.as_mut().unwrap().shared_experts = 1;
    let c = cm(m, 1, false, ideal());
    let bytes =
        1000.0 + 2e6 * (1.0 + 1.0 / 128.0) + 4000.0 + 1000.0 + 1e6 * (1.0 + 1.0 / 128.0) + 2000.0;
    close(decode(&c, 1, 0, 0).op(Op::SharedExpert), bytes / 1e12);
}

#[test]
fn elementwise_kernels_move_every_token() {
    // Per token and layer: two fused residual-add + RMSNorm (8h each) 16,000 B; FP8
    // quantisation of the attention input (3h) 3000 B; RoPE on 8 heads + the key, 64
    // dims (4 * 64 * 9) 2304 B; KV write (2 * 100 + 100) 300 B; quantisation of the
    // output-projection input (3 * 8 * 100) 2400 B; router top-k (4 * 8 + 8 * 2) 48 B
    // and dispatch quantisation (3h) 3000 B; per routed pair activation and
    // quantisation (5 * 1000) 5000 B. One token, 2 pairs: 37,052 B -> 37.052 ns.
    let c = cm(model(), 1, false, ideal());
    close(decode(&c, 1, 0, 0).op(Op::Elementwise), 37_052e-12);
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
    m.layers[0].attention = spec::model::AttentionKind::Sparse;
    m.layers[0].compress_ratio = 4;
    m.attention.indexer = Some(spec::model::Indexer {
        heads: 4,
        head_dim: 32,
        dtype: spec::dtype::Dtype::Fp8,
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
fn attention_kernels_have_their_own_efficiency() {
    // 64 requests at context 10,000, 3 queries each (2 drafts): sparse attention flops
    // 64 * 3 queries * 64 entries... = 64 * (3 * 64) pairs * 3200 = 3.93e7 at 1e15
    // (39.3 ns) against bytes 64 * min(2500, 192) * 100 = 1.2288e6 (1.2288 us):
    // memory-bound; at a sparse memory efficiency of 0.5, twice as long.
    let mut p = ideal();
    let c = cm(sparse_model(), 1, false, p.clone());
    let a = decode(&c, 64, 10_000, 2).op(Op::Attention);
    close(a, 1.2288e-6);
    p.attention_sparse.mem_eff = 0.5;
    let c = cm(sparse_model(), 1, false, p);
    close(decode(&c, 64, 10_000, 2).op(Op::Attention), 2.0 * a);
}

#[test]
fn compressed_and_window_attention() {
    // Compressed 128:1, context 12,799 + 1: 100 entries * 100 B = 1e4 B -> 10 ns.
    let mut m = model();
    m.layers[0].attention = spec::model::AttentionKind::Compressed;
    m.layers[0].compress_ratio = 128;
    let c = cm(m, 1, false, ideal());
    close(decode(&c, 1, 12_799, 0).op(Op::Attention), 10e-9);
    // Window of 128 with 50-byte entries, context 1000: min(1001, 128 + 1) = 129
    // entries * 50 B = 6450 B -> 6.45 ns.
    let mut m = model();
    m.layers[0].attention = spec::model::AttentionKind::Window;
    m.attention.window = 128;
    m.attention.window_entry_bytes = 50.0;
    let c = cm(m, 1, false, ideal());
    close(decode(&c, 1, 1000, 0).op(Op::Attention), 6.45e-9);
}

#[test]
fn prefill_attention_is_causal_over_the_prefix() {
    // Prefill 100 new tokens on 900 cached: pairs = sum_{p=901..1000} p = 95,050;
    // flops = 95,050 * 2 * 8 * 200 = 3.0416e8 -> 0.30416 us at 1e15;
    // bytes = 1000 entries * 100 B = 1e5 -> 0.1 us: compute bound. With 100 diagonal
    // tokens of waste, efficiency 100 / (100 + 100): twice as long.
    let c = cm(model(), 1, false, ideal());
    close(
        prefill(&c, 100, 900).op(Op::Attention),
        95_050.0 * 3200.0 / 1e15,
    );
    let mut p = ideal();
    p.prefill_diag_tokens = 100.0;
    let c = cm(model(), 1, false, p);
    close(
        prefill(&c, 100, 900).op(Op::Attention),
        2.0 * 95_050.0 * 3200.0 / 1e15,
    );
}

/// An MLA model: absorbed widths 576/512 at decode, un-absorbed 192/128 at prefill,
/// the latent KV (512) up-projected to 8 heads x (64 + 128) per context token.
fn mla_model() -> Model {
    let mut m = model();
    let a = &mut m.attention;
    a.score_dim = 576;
    a.value_dim = 512;
    a.qk_head_dim = 192;
    a.v_head_dim = 128;
    a.kv_dim = 576;
    a.kv_up_params = 512 * 8 * (128 + 128);
    m
}

#[test]
fn mla_computes_unabsorbed_at_prefill_and_absorbed_at_decode() {
    // Prefill 1000 tokens, no context: pairs 500,500. Un-absorbed attention flops
    // 500,500 * 2 * 8 * (192 + 128) = 2.56256e9 -> 2.56256 us at 1e15, plus the
    // up-projection; absorbed would cost 500,500 * 2 * 8 * 1088 = 8.7127e9 (8.71 us).
    // The cheaper path is taken: attention prices at the un-absorbed width.
    let c = cm(mla_model(), 1, false, ideal());
    close(
        prefill(&c, 1000, 0).op(Op::Attention),
        500_500.0 * 16.0 * 320.0 / 1e15,
    );
    // Decode at context 9999: 1e4 pairs * 2 * 8 * 1088 = 1.7408e8 flops (0.174 us) vs
    // 1e4 entries * 100 B = 1e6 B (1 us): absorbed widths, memory-bound.
    close(decode(&c, 1, 9999, 0).op(Op::Attention), 1e-6);
}

#[test]
fn dispatch_and_combine_by_domain_and_link() {
    // 16 experts top-2 on DEP4 over domains of 2 GPUs (2 domains, 4 experts per rank,
    // 8 per domain). Per token: ranks reached 4 * (1 - C(12,2)/C(16,2)) = 1.8;
    // domains 2 * (1 - C(8,2)/C(16,2)) = 2 * 92/120, remote 92/120.
    // Prefill of 100 tokens per rank (normal kernels, serial): dispatch copies of
    // 1000 FP8 + 1000/128 * 4 scale bytes = 1031.25 B: RDMA 100 * 92/120 * 1031.25 B
    // at 1e10 (7.906 us) against NVLink 100 * 1.8 * 1031.25 * 1/2 at 1e11 (0.928 us);
    // combine in BF16 (2000 B): RDMA 15.333 us. The hottest receiver carries the
    // batch's routing noise: 800 pairs, 200 mean per rank, + z_4 * sqrt(150).
    let mut m = model();
    m.moe.as_mut().unwrap().routed_experts = 16;
    let c = cm(m, 4, false, ideal());
    let s = prefill(&c, 100, 0);
    let skew = 1.0 + expected_max_normal(4.0) * 150f64.sqrt() / 200.0;
    let remote = 92.0 / 120.0;
    let rdma = 100.0 * remote * (1031.25 + 2000.0) / 1e10;
    close(s.op(Op::Communication), skew * rdma);
    close(s.comm.rdma_s, skew * rdma);
    // Bytes are those of the busiest side: the hottest receiver's.
    close(s.comm.rdma_bytes, skew * 100.0 * remote * 3031.25);
    close(s.comm.nvlink_bytes, skew * 100.0 * 1.8 * 3031.25 * 0.5);
    // Inside one NVLink domain (domains of 4): no RDMA leg.
    let mut h = hw();
    h.nvlink_domain_gpus = 4;
    let mut m = model();
    m.moe.as_mut().unwrap().routed_experts = 16;
    let c = AnalyticCostModel::new(
        h,
        m,
        Layout {
            overlap_microbatches: false,
            ..Layout::new(4)
        },
        ideal(),
    );
    let s = prefill(&c, 100, 0);
    assert_eq!(s.comm.rdma_bytes, 0.0);
    close(s.comm.nvlink_bytes, skew * 100.0 * 1.8 * 3031.25 * 0.75);
}

#[test]
fn group_limited_routing_reaches_fewer_domains() {
    // The same 16 experts in 4 groups of 4 (one per rank, two per domain), a token
    // keeping 1 group: all its experts sit on one domain, the sender's own with
    // probability 2/4, so remote domains per token are 1/2 (against 92/120 unlimited).
    let mut m = model();
    let e = m.moe.as_mut().unwrap();
    e.routed_experts = 16;
    e.groups = 4;
    e.topk_groups = 1;
    let c = cm(m, 4, false, ideal());
    let s = prefill(&c, 100, 0);
    let skew = 1.0 + expected_max_normal(4.0) * 150f64.sqrt() / 200.0;
    close(s.comm.rdma_bytes, skew * 100.0 * 0.5 * 3031.25);
}

#[test]
fn low_latency_kernels_pay_latency_per_kernel() {
    // Decode, DEP4 over 2 domains, 1 token per rank: one copy per routed expert (2):
    // dispatch 2 * (1031.25 + 16) B, combine 2 * 2000 B; 1/4 of the copies cross
    // NVLink, 2/4 the NIC. Latency 10 us per dispatch and 20 us per combine adds.
    let mut p = ideal();
    p.ll.dispatch_s = 10e-6;
    p.ll.combine_s = 20e-6;
    let c = cm(model(), 4, false, p);
    let s = decode(&c, 1, 0, 0);
    let skew = 1.0 + expected_max_normal(4.0) * (2.0f64 * 0.75).sqrt() / 2.0;
    let rdma = 2.0 * (1047.25 + 2000.0) * 0.5 / 1e10;
    close(s.op(Op::Communication), 30e-6 + skew * rdma);
    // In situ the kernels' send and receive work (4 and 6 us on the compute stream) is
    // part of that latency (it runs from launch until all data is received): the data
    // flies for the rest, 6 and 14 us. Run serially the step is the same; the
    // communication operation still holds the whole latency.
    let mut q = c.params.clone();
    q.in_situ.ll_dispatch_s = 4e-6;
    q.in_situ.ll_combine_s = 6e-6;
    let situ = cm(model(), 4, false, q);
    let t = decode(&situ, 1, 0, 0);
    use spec::insitu::{Category, Stream};
    close(t.in_situ.get(Stream::Compute, Category::Dispatch), 4e-6);
    close(t.in_situ.get(Stream::Compute, Category::Combine), 6e-6);
    close(t.op(Op::Communication), 30e-6 + skew * rdma);
    close(t.step_s, s.step_s);
}

#[test]
fn two_micro_batches_hide_communication_where_it_pays() {
    // A slow NIC (1e8 B/s) and slow HBM (1e11 B/s): prefill communication (47 ms a
    // layer) and compute (1.4 ms a layer) both matter; the two-batch schedule hides compute under the
    // communication and is chosen although half batches carry relatively more routing
    // noise to their hottest receiver. The step is never faster than either stream,
    // nor slower than the serial schedule.
    let mut h = hw();
    h.scaleout.bytes_per_s = 1e8;
    h.hbm.bytes_per_s = 1e11;
    let mut m = model();
    m.moe.as_mut().unwrap().routed_experts = 16;
    // Ten layers: the pipeline's steady state, not its first stage, decides.
    m.layers[0].count = 10;
    let serial = AnalyticCostModel::new(
        h.clone(),
        m.clone(),
        Layout {
            overlap_microbatches: false,
            ..Layout::new(4)
        },
        ideal(),
    );
    let both = AnalyticCostModel::new(h.clone(), m.clone(), Layout::new(4), ideal());
    let a = prefill(&serial, 2000, 0);
    let b = prefill(&both, 2000, 0);
    assert!(b.comm.two_batch);
    assert!(b.step_s < a.step_s);
    assert!(b.comm.hidden_s > 0.0);
    assert!(b.step_s >= b.comm.total_s);
    close(b.comm.total_s, b.comm.hidden_s + b.comm.exposed_s);
    // Normal kernels take SMs from compute while they overlap it: with a fifth of the
    // SMs taken, every compute stage beside a dispatch or combine loses a fifth of that
    // kernel's time, counted as communication (a fifth of all the transfers' time);
    // the compute operations do not change.
    let mut p = ideal();
    p.comm_sms = 20.0;
    let fifth = AnalyticCostModel::new(h, m, Layout::new(4), p);
    let d = prefill(&fifth, 2000, 0);
    assert!(d.comm.two_batch);
    close(d.op(Op::Attention), b.op(Op::Attention));
    close(
        d.op(Op::Communication),
        d.comm.exposed_s + 0.2 * d.comm.total_s,
    );
    assert!(d.step_s > b.step_s);
}

fn engram_model(page: &str) -> Model {
    let mut m = model();
    m.engram = Some(spec::model::Engram {
        at_layers: vec![0],
        orders: vec![2],
        heads_per_order: 1,
        dim_per_order: 100,
        rows_per_table: 1_000_000,
        dtype: spec::dtype::Dtype::Fp8,
        host_resident: true,
        page_size: spec::dtype::ByteSize::parse(page).unwrap(),
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
    m.mhc = Some(spec::model::Mhc {
        streams: 4,
        fused: true,
    });
    close(
        decode(&cm(m.clone(), 1, false, ideal()), 10, 0, 0).op(Op::Mhc),
        0.2e-6,
    );
    m.mhc = Some(spec::model::Mhc {
        streams: 4,
        fused: false,
    });
    close(
        decode(&cm(m, 1, false, ideal()), 10, 0, 0).op(Op::Mhc),
        0.4e-6,
    );
}

#[test]
fn fixed_cost_per_step() {
    let mut p = ideal();
    p.step_fixed_decode_s = 300e-6;
    close(
        decode(&cm(model(), 1, false, p), 1, 0, 0).op(Op::Overhead),
        300e-6,
    );
}

#[test]
fn mtp_verifies_drafts_and_runs_draft_passes() {
    // Expected tokens per step with acceptance [0.8, 0.5] and 2 drafts:
    // 1 + 0.8 + 0.8 * 0.5 = 2.2.
    let mtp = spec::model::Mtp {
        draft_tokens: 2,
        acceptance: vec![0.8, 0.5],
        modules: 1,
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
    // replays min(ctx, 128 * (2 - 1)) = 128 tokens: 228 token-layers. A replayed
    // token runs the layer's GEMMs (2 * (1.7e6 + 2 * 3e6) flops) at the efficiency
    // this step's projections reach, its element-wise kernels, and attends to 128
    // window entries (128 * 3200 flops at 1e15).
    let mut m = model();
    m.layers[0].count = 2;
    m.layers[0].attention = spec::model::AttentionKind::Window;
    m.attention.window = 128;
    m.attention.window_entry_bytes = 100.0;
    m.attention.replay = Some(spec::model::Replay {
        bounded_tokens: 100,
        bounded_layers: 1,
    });
    let c = cm(m, 1, false, ideal());
    let s = prefill(&c, 1, 10_000);
    assert!(s.op(Op::WindowReplay) > 228.0 * 128.0 * 3200.0 / 1e15);
    // No cached context, no replay.
    assert_eq!(prefill(&c, 1, 0).op(Op::WindowReplay), 0.0);
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

#[test]
fn tensor_parallelism_splits_the_layers_and_sums_by_all_reduce() {
    // TP2, one decode token. Per GPU, memory-bound GEMMs (FP8 weights with 1/128 B of
    // scales): q+kv 1000 -> 8/2 * 100 + 100 (the KV projection stays whole): 1000 +
    // 500,000 * (1 + 1/128) + 1000 = 505,906.25 B; o 400 -> 1000: 400 + 400,000 *
    // (1 + 1/128) + 2000 = 405,525 B; LM head 1000 -> 500: 1000 + 500,000 + 1000 =
    // 502,000 B; the router stays whole (18,016 B, as on one GPU).
    let mut p = ideal();
    p.allreduce.fixed_s = 1e-6;
    let c = tp(model(), 2, false, p);
    let s = decode(&c, 1, 999, 0);
    close(s.op(Op::Dense), (1_413_431.25 + 18_016.0) * 1e-12);
    // Both experts the token picks, each sliced in two: gate+up 1000 -> 1000 and down
    // 500 -> 1000: 2 * (1000 + 1e6 + 2000) + 2 * (500 + 500,000 + 2000) B.
    close(s.experts_touched_per_rank, 2.0);
    close(s.moe_weight_bytes_per_rank, 2.0 * 1.5e6);
    close(s.op(Op::Moe), 3_011_000e-12);
    // Attention: 4 heads per GPU, but the one KV head's 1000 entries * 100 B are read
    // whole on both GPUs.
    close(s.op(Op::Attention), 1e-7);
    // Two all-reduces (after attention, after the FFN) of 1 token * 1000 * 2 B: the
    // ring moves 2 * (2 - 1) / 2 of it over NVLink (1e11 B/s), after 1 us: 1.02 us each.
    close(s.op(Op::Communication), 2.0 * (1e-6 + 2000.0 / 1e11));
    assert!(s.comm.allreduce && !s.comm.two_batch && !s.comm.low_latency);
    // The overlapped micro-batches of DEP do not apply: the step is the sum.
    let ops: f64 = Op::ALL.iter().map(|&o| s.op(o)).sum();
    close(s.step_s, ops);
}

#[test]
fn a_layer_wide_qk_norm_all_reduces_its_sums_of_squares_under_tensor_parallelism() {
    // As above (TP2, one decode token, 1 us an all-reduce), the model's one layer
    // normalising queries and keys over every head (MiniMax-M2): a third all-reduce,
    // before attention, of the token's two FP32 sums of squares, 8 B: 1 us + 2 * (2 - 1)
    // / 2 * 8 B at 1e11 B/s.
    let mut p = ideal();
    p.allreduce.fixed_s = 1e-6;
    let mut m = model();
    m.attention.layer_qk_norm = true;
    let plain = decode(&tp(model(), 2, false, p.clone()), 1, 999, 0);
    let s = decode(&tp(m.clone(), 2, false, p.clone()), 1, 999, 0);
    let qk = 1e-6 + 8.0 / 1e11;
    close(s.op(Op::Communication), 2.0 * (1e-6 + 2000.0 / 1e11) + qk);
    close(s.step_s - plain.step_s, qk);
    close(s.comm.nvlink_bytes - plain.comm.nvlink_bytes, 8.0);
    // Every other operation as without the norm.
    for op in Op::ALL.into_iter().filter(|&o| o != Op::Communication) {
        close(s.op(op), plain.op(op));
    }
    // One GPU holds every head: nothing to sum.
    close(
        decode(&cm(m, 1, false, p.clone()), 1, 999, 0).step_s,
        decode(&cm(model(), 1, false, p), 1, 999, 0).step_s,
    );
}

#[test]
fn tensor_parallel_all_reduce_crosses_domains_on_the_nics() {
    // TP4 over two 2-GPU domains, one token (2000 B): NVLink 2 * (2 - 1) / 2 * 2000 B
    // at 1e11 = 20 ns; then the NICs carry 2 * (2 - 1) / 2 of each GPU's half, 1000 B
    // at 1e10 = 100 ns, plus the NIC's 5 us latency. Two all-reduces.
    let c = tp(model(), 4, false, ideal());
    close(
        decode(&c, 1, 0, 0).op(Op::Communication),
        2.0 * (20e-9 + 100e-9 + 5e-6),
    );
}

#[test]
fn tensor_parallel_expert_parallelism_keeps_experts_whole() {
    // TP2 with expert parallelism: 4 whole experts per GPU; one token's 2 picks land
    // 1 per GPU on average: 4 * (1 - (1 - 2/8)^1) = 1 expert touched, 3e6 B.
    let c = tp(model(), 2, true, ideal());
    let s = decode(&c, 1, 0, 0);
    close(s.experts_touched_per_rank, 1.0);
    close(s.moe_weight_bytes_per_rank, 3e6);
}

#[test]
fn tensor_parallel_weights_and_kv_per_gpu() {
    // TP2: projections 100,000 (KV, whole) + 1.6e6 / 2 = 900,000 B; experts 8 * 3e6 /
    // 2 = 1.2e7 B; embedding and LM head 2 * 1e6 / 2 = 1e6 B: 1.39e7 B per GPU.
    let c = tp(model(), 2, false, ideal());
    close(c.weight_bytes_per_rank(), 1.39e7);
    // One KV head: each GPU keeps every token whole, 100 B each.
    let whole = c.kv_capacity_tokens_per_rank();
    assert_eq!(whole, ((0.92 * 1e11 - 1.39e7) / 100.0) as u64);
    // Eight KV heads (grouped-query): each GPU keeps half of a token's bytes, so the
    // replica holds twice the tokens.
    // The K/V projection (100,000 B) splits over the GPUs too, by KV heads:
    // 50,000 + 800,000 + 1.2e7 + 1e6 = 1.385e7 B per GPU.
    let mut m = model();
    m.attention.kv_heads = 8;
    let c = tp(m, 2, false, ideal());
    close(c.weight_bytes_per_rank(), 1.385e7);
    assert_eq!(
        c.kv_capacity_tokens_per_rank(),
        ((0.92 * 1e11 - 1.385e7) / 50.0) as u64
    );
    // And half the bytes read per token of context.
    close(decode(&c, 1, 999, 0).op(Op::Attention), 0.5e-7);
}

#[test]
fn five_stage_decode_hides_the_combine_behind_attention() {
    // Decode with low-latency kernels whose combine flies 200 us and dispatch 50 us:
    // the two-batch schedule hides the combine behind the other micro-batch's experts,
    // the five-stage pipeline behind its attention core. With a long context (attention
    // long against the experts) the pipeline is faster; with none it is slower. Both
    // run the same kernels: the compute operations do not change, only the waiting.
    // The hand-traced schedules are `sim::cost::kernels::pipeline`'s unit tests.
    let mut p = ideal();
    p.ll.dispatch_s = 50e-6;
    p.ll.combine_s = 200e-6;
    let mut m = model();
    m.layers[0].count = 10;
    let two = cm(m.clone(), 4, true, p.clone());
    let five = AnalyticCostModel::new(
        hw(),
        m,
        Layout {
            decode_pipeline: Pipeline::FiveStage,
            ..Layout::new(4)
        },
        p,
    );
    let long = (decode(&two, 64, 200_000, 0), decode(&five, 64, 200_000, 0));
    assert!(long.0.comm.two_batch && long.1.comm.two_batch);
    let tl = long.1.timeline.expect("a five-stage timeline");
    assert!(tl.pipeline == Pipeline::FiveStage && tl.named().any(|(n, _)| n == "K1"));
    for op in [Op::Attention, Op::Moe, Op::Dense, Op::Elementwise] {
        close(long.1.op(op), long.0.op(op));
    }
    assert!(
        long.1.step_s < long.0.step_s,
        "{} {}",
        long.1.step_s,
        long.0.step_s
    );
    let short = (decode(&two, 64, 0, 0), decode(&five, 64, 0, 0));
    assert!(
        short.1.step_s > short.0.step_s,
        "{} {}",
        short.1.step_s,
        short.0.step_s
    );
    // Prefill (normal kernels) keeps the two-batch schedule.
    assert_eq!(
        prefill(&five, 2000, 0).step_s,
        prefill(&two, 2000, 0).step_s
    );
}

#[test]
fn issue_38_a_mixed_steps_experts_see_the_groups_tokens_once() {
    // DEP2: rank 0 runs a 4-token chunk and two decode requests, rank 1 two decode
    // requests. The routed experts (and their dispatch and combine, the normal
    // kernels of a step that prefills) see the group's 8 tokens once, 6 from rank 0:
    // the same as a prefill step of 6 and 2 tokens. Its attention is the chunk's plus
    // each rank's decodes', and its tokens are 8.
    use sim::cost::{CostModel, Phase, ReqSlice, StepShape};
    let c = cm(model(), 2, false, ideal());
    let two = ReqSlice {
        new_tokens: 1,
        context_tokens: 300,
        count: 2,
    };
    let step = |phase, ranks: &[Vec<ReqSlice>], decode_ranks: &[Vec<ReqSlice>]| {
        c.step(&StepShape {
            phase,
            ranks,
            decode_ranks,
            draft_tokens: 0,
        })
    };
    let mixed = step(
        Phase::Prefill,
        &[vec![ReqSlice::one(4, 100)], vec![]],
        &[vec![two], vec![two]],
    );
    let as_chunks = step(
        Phase::Prefill,
        &[vec![ReqSlice::one(6, 100)], vec![ReqSlice::one(2, 100)]],
        &[],
    );
    assert_eq!(mixed.tokens_processed, 8);
    close(mixed.op(Op::Moe), as_chunks.op(Op::Moe));
    close(
        mixed.moe_weight_bytes_per_rank,
        as_chunks.moe_weight_bytes_per_rank,
    );
    close(mixed.comm.nvlink_bytes, as_chunks.comm.nvlink_bytes);
    let chunk = step(Phase::Prefill, &[vec![ReqSlice::one(4, 100)], vec![]], &[]);
    let decodes = step(Phase::Decode, &[vec![two], vec![two]], &[]);
    // The slowest rank's: rank 0's chunk and its two decodes (each rank's decodes
    // alike).
    close(
        mixed.op(Op::Attention),
        chunk.op(Op::Attention) + decodes.op(Op::Attention),
    );
}
