//! The terms of the analytic cost model that models other than DeepSeek's use, each
//! against a value derived by hand: grouped-query attention (KV reads, prefill flops,
//! the K/V projection under tensor parallelism), attention sinks, dense-FFN models and
//! tied embeddings. The GPU and cost parameters are `terms`' (round numbers, ideal
//! efficiencies).

mod terms;

use sim::cost::{CostModel, Op, Phase, ReqSlice, StepShape};
use spec::model::Model;
use terms::*;

/// A grouped-query model: 8 query heads and 2 KV heads of 100 dims, BF16 weights
/// without scales, BF16 KV: an entry holds K and V of both KV heads, 2 * 2 * 100 * 2 =
/// 800 B per token per layer; the K/V projection is 2 * 2 * 100 = 400 wide.
fn gqa_model() -> Model {
    let mut m = model();
    m.dense_scale_block = 0;
    let a = &mut m.attention;
    a.kv_heads = 2;
    a.kv_dim = 400;
    a.kv_entry_bytes = 800.0;
    a.weight_dtype = spec::dtype::Dtype::Bf16;
    m
}

#[test]
fn gqa_decode_reads_kv_heads_times_head_dim() {
    // Context 999 + 1: 1000 entries * 800 B = 8e5 B -> 0.8 us (flops 1000 * 2 * 8 *
    // 200 = 3.2e6 -> 3.2 ns: memory bound).
    close(
        decode(&cm(gqa_model(), 1, false, ideal()), 1, 999, 0).op(Op::Attention),
        0.8e-6,
    );
    // TP2: each GPU holds one KV head, half the bytes.
    close(
        decode(&tp(gqa_model(), 2, false, ideal()), 1, 999, 0).op(Op::Attention),
        0.4e-6,
    );
    // TP4: two KV heads cannot split four ways; each head is kept on two GPUs.
    close(
        decode(&tp(gqa_model(), 4, false, ideal()), 1, 999, 0).op(Op::Attention),
        0.4e-6,
    );
}

#[test]
fn gqa_prefill_flops_follow_the_query_heads() {
    // Prefill 100 on 900 cached: 95,050 causal pairs * 2 * 8 query heads * (100 + 100)
    // = 3.0416e8 flops -> 0.30416 us, against 1000 entries * 800 B = 8e5 B -> 0.8 us:
    // the KV heads' bytes bind.
    let s = prefill(&cm(gqa_model(), 1, false, ideal()), 100, 900);
    close(s.op(Op::Attention), 0.8e-6);
    // With 100-byte entries (MQA-sized) the flops bind, and they follow the 8 heads.
    let mut m = gqa_model();
    m.attention.kv_entry_bytes = 100.0;
    close(
        prefill(&cm(m.clone(), 1, false, ideal()), 100, 900).op(Op::Attention),
        95_050.0 * 2.0 * 8.0 * 200.0 / 1e15,
    );
    // TP2: 4 heads per GPU, half the flops.
    close(
        prefill(&tp(m, 2, false, ideal()), 100, 900).op(Op::Attention),
        95_050.0 * 2.0 * 4.0 * 200.0 / 1e15,
    );
}

#[test]
fn gqa_kv_projection_splits_by_kv_heads_under_tp() {
    // One decode token, BF16 activations and weights, no scales. Memory-bound GEMMs
    // move m*k*2 + k*n*2 + 2*m*n bytes.
    // TP2: q+kv 1000 -> 4 * 100 + 400 / 2 = 600: 2000 + 1.2e6 + 1200 = 1,203,200 B;
    // o 400 -> 1000: 800 + 800,000 + 2000 = 802,800 B; LM head (FP8) 1000 -> 500:
    // 1000 + 500,000 + 1000 = 502,000 B; the router's 18,016 B as on one GPU
    // (memory-bound on a small-M tile, `cost_terms::dense_gemms_read_weights_once...`).
    let s = decode(&tp(gqa_model(), 2, false, ideal()), 1, 0, 0);
    close(s.op(Op::Dense), (2_508_000.0 + 18_016.0) * 1e-12);
    // TP4: K/V split over min(4, 2) = 2: q+kv 1000 -> 2 * 100 + 200 = 400: 2000 +
    // 800,000 + 800 = 802,800 B; o 200 -> 1000: 400 + 400,000 + 2000 = 402,400 B;
    // LM head 1000 -> 250: 1000 + 250,000 + 500 = 251,500 B.
    let s = decode(&tp(gqa_model(), 4, false, ideal()), 1, 0, 0);
    close(s.op(Op::Dense), (1_456_700.0 + 18_016.0) * 1e-12);
}

#[test]
fn attention_sinks_add_one_softmax_term_per_query_and_head() {
    // Prefill 100 on 900 cached with 100-byte entries (compute bound): 95,050 pairs *
    // 3200 flops, plus 100 queries * 8 heads * 2 flops for the sinks.
    let mut m = model();
    m.attention.sinks = true;
    close(
        prefill(&cm(m, 1, false, ideal()), 100, 900).op(Op::Attention),
        (95_050.0 * 3200.0 + 100.0 * 8.0 * 2.0) / 1e15,
    );
}

#[test]
fn a_dense_model_prices_its_ffn_and_no_experts() {
    // One dense-FFN layer (FFN 1000, FP8 with 1/128 B of scales), no [moe]: the dense
    // op is q+kv 909,831.25 + o 809,050 + LM head 1,003,000 (as for the MoE model)
    // plus gate+up 1000 -> 2000: 1000 + 2e6 * (1 + 1/128) + 4000 = 2,020,625 B and
    // down 1000 -> 1000: 1000 + 1e6 * (1 + 1/128) + 2000 = 1,010,812.5 B, no router.
    let mut m = model();
    m.layers[0].ffn = spec::model::FfnKind::Dense;
    m.moe = None;
    m.dense_ffn = Some(spec::model::DenseFfn {
        ffn: 1000,
        weight_dtype: spec::dtype::Dtype::Fp8,
        gated: true,
    });
    let c = cm(m.clone(), 1, false, ideal());
    let s = decode(&c, 1, 0, 0);
    close(s.op(Op::Dense), 5_753_318.75e-12);
    close(s.op(Op::Moe), 0.0);
    close(s.op(Op::Communication), 0.0);
    // Its weights per GPU: projections 1.7e6 + FFN 3e6 + embedding and LM head 2e6;
    // tied embeddings keep one copy of the table.
    close(c.weight_bytes_per_rank(), 6.7e6);
    m.tied_embeddings = true;
    close(cm(m, 1, false, ideal()).weight_bytes_per_rank(), 5.7e6);
}

#[test]
fn a_sixteen_bit_dense_ffn_has_no_quantisation_kernel() {
    // One dense-FFN layer of FFN 1000 on hidden 1000, one decode token. With FP8
    // weights the FFN's element-wise work is the input's quantisation (read 2 B,
    // write 1 B: 3 x 1000 B) and an activation that writes FP8 (read 4 B, write 1 B:
    // 5 x 1000 B), two kernels; with BF16 weights (vLLM's LlamaMLP: gate-up GEMM,
    // SiluAndMul, down GEMM) only the activation, writing BF16 (6 x 1000 B), one
    // kernel. At 1e12 B/s: 8 ns against 6 ns.
    let dense = |w: spec::dtype::Dtype| {
        let mut m = model();
        m.layers[0].ffn = spec::model::FfnKind::Dense;
        m.moe = None;
        m.dense_ffn = Some(spec::model::DenseFfn {
            ffn: 1000,
            weight_dtype: w,
            gated: true,
        });
        m
    };
    let elem = |m: Model, p: sim::cost::CostParams| {
        decode(&cm(m, 1, false, p), 1, 0, 0).op(Op::Elementwise)
    };
    let (fp8, bf16) = (
        dense(spec::dtype::Dtype::Fp8),
        dense(spec::dtype::Dtype::Bf16),
    );
    close(
        elem(fp8.clone(), ideal()) - elem(bf16.clone(), ideal()),
        2e-9,
    );
    // With a floor of 1 us a kernel every kernel costs the floor: one kernel fewer.
    let mut floored = ideal();
    floored.in_situ.kernel_floor_s = 1e-6;
    close(elem(fp8, floored.clone()) - elem(bf16, floored), 1e-6);
}

/// The dense-FFN model of `a_dense_model_prices_its_ffn_and_no_experts`.
fn dense_model() -> Model {
    let mut m = model();
    m.layers[0].ffn = spec::model::FfnKind::Dense;
    m.moe = None;
    m.dense_ffn = Some(spec::model::DenseFfn {
        ffn: 1000,
        weight_dtype: spec::dtype::Dtype::Fp8,
        gated: true,
    });
    m
}

#[test]
fn issue_38_a_mixed_step_reads_its_weights_once() {
    // One rank runs a 4-token prefill chunk (on 100 cached tokens) and two decode
    // requests (contexts 500) in one step. Ideal rates: every GEMM is memory-bound
    // (m k + k n w + 2 m n bytes, linear in m but for the weights), element-wise work
    // and each request's attention are per token or per request, launches and host
    // work are free. One forward pass over all 6 tokens therefore costs the chunk's
    // step plus the decode step less one read of every weight: q+kv 900,000 + o
    // 800,000 + gate+up 2,000,000 + down 1,000,000, each with 1/128 of scales, and the
    // LM head's 1,000,000: 5,736,718.75 B, 5.73671875 us at 1e12 B/s.
    let c = cm(dense_model(), 1, false, ideal());
    let chunk = vec![vec![ReqSlice::one(4, 100)]];
    let decodes = vec![vec![ReqSlice {
        new_tokens: 1,
        context_tokens: 500,
        count: 2,
    }]];
    let step = |phase, ranks: &[Vec<ReqSlice>], decode_ranks: &[Vec<ReqSlice>]| {
        c.step(&StepShape {
            phase,
            ranks,
            decode_ranks,
            draft_tokens: 0,
        })
    };
    let p = step(Phase::Prefill, &chunk, &[]);
    let d = step(Phase::Decode, &decodes, &[]);
    let mixed = step(Phase::Prefill, &chunk, &decodes);
    let weights = (900_000.0 + 800_000.0 + 2e6 + 1e6) * (1.0 + 1.0 / 128.0) + 1e6;
    close(weights, 5_736_718.75);
    close(p.step_s + d.step_s - mixed.step_s, weights / 1e12);
    // Attention is each part's own kernel: the chunk's prefill and the decodes'.
    close(
        mixed.op(Op::Attention),
        p.op(Op::Attention) + d.op(Op::Attention),
    );
    assert_eq!(mixed.tokens_processed, 6);
}
