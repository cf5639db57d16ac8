//! The terms of the layer kinds hybrid models add, each against a value derived by
//! hand on `terms`' round GPU (1 TB/s, 1e15 BF16 flop/s, ideal efficiencies): a gated
//! DeltaNet layer's state traffic at decode and prefill and its split under tensor
//! parallelism, FFN-only and mixer-only layers' all-reduces, chunked attention's
//! prefill pairs, a request's state reserved as KV tokens, a linear layer's host time in
//! a step launched from the host, and the checks that refuse a layer kind without its
//! table.

mod terms;

use sim::cost::{Op, OpRate};
use spec::dtype::Dtype;
use spec::model::Model;
use spec::model::{AttentionKind, FfnKind};
use spec::state::LinearAttention;
use terms::*;

/// `terms`' model with a gated DeltaNet layer before its dense-attention MoE layer: 2
/// key heads and 4 value heads of 10, a 4-tap convolution, 16-token chunks, FP32
/// state.
fn hybrid() -> Model {
    let mut m = model();
    let mut linear = m.layers[0].clone();
    linear.attention = AttentionKind::Linear;
    m.layers.insert(0, linear);
    m.linear_attention = Some(LinearAttention {
        key_heads: 2,
        key_dim: 10,
        value_heads: 4,
        value_dim: 10,
        conv_kernel: 4,
        chunk: 16,
        weight_dtype: Dtype::Bf16,
        state_dtype: Dtype::Fp32,
    });
    m
}

fn ideal_recurrent() -> sim::cost::CostParams {
    let mut p = ideal();
    p.recurrent = OpRate::new(1.0, 1.0, 0.0);
    p.recurrent_prefill = OpRate::new(1.0, 1.0, 0.0);
    p
}

/// The linear layer's state: 4 value heads x 10 x 10 x 4 B = 1600 B, and its
/// convolution's 3 past inputs of q, k (2 x 2 x 10) and v (4 x 10): 80 x 3 x 2 B = 480 B.
const STATE: f64 = 1600.0 + 480.0;
/// A token's inputs and output of the linear layer, 2 B each: q, k (40), v and its gate
/// (2 x 40), the decay and step (2 x 4); the output (40).
const IO: f64 = 2.0 * (40.0 + 80.0 + 8.0 + 40.0);

#[test]
fn a_linear_layer_reads_and_writes_its_state_at_decode() {
    let m = hybrid();
    assert_eq!(m.state_bytes_per_request(), STATE);
    // Decode at 999 cached: the dense layer reads 1000 x 100 B = 0.1 us; the linear
    // layer its state twice and one token's inputs and output: 2 x 2080 + 336 = 4496 B,
    // 4.496 ns (its 7 x 4 x 10 x 10 = 2800 flops do not bind).
    close(
        decode(&cm(m.clone(), 1, false, ideal_recurrent()), 1, 999, 0).op(Op::Attention),
        0.1e-6 + (2.0 * STATE + IO) / 1e12,
    );
    // Four requests: four states.
    close(
        decode(&cm(m, 1, false, ideal_recurrent()), 4, 999, 0).op(Op::Attention),
        4.0 * (0.1e-6 + (2.0 * STATE + IO) / 1e12),
    );
}

#[test]
fn a_linear_layer_passes_a_state_per_chunk_at_prefill() {
    // Prefill of 100 tokens: 7 chunks of 16, each a BF16 state (4 x 10 x 10 x 2 B =
    // 800 B) written and read back, the request's state read and written once, and
    // 100 tokens' inputs and outputs: 2 x 2080 + 2 x 7 x 800 + 100 x 336 = 42,960 B,
    // 42.96 ns; its flops, 100 x 4 x (2 x 16 x (30 + 20) + 600) = 880,000, do not bind.
    // The dense layer: 100 x 101 / 2 = 5050 pairs x 2 x 8 x 200 = 16.16 Mflop, 16.16
    // ns, against 100 x 100 B = 10 ns.
    let m = hybrid();
    close(
        prefill(&cm(m, 1, false, ideal_recurrent()), 100, 0).op(Op::Attention),
        (2.0 * STATE + 2.0 * 7.0 * 800.0 + 100.0 * IO) / 1e12 + 5050.0 * 2.0 * 8.0 * 200.0 / 1e15,
    );
}

#[test]
fn a_linear_layer_holds_a_host_launched_step_for_its_host_time() {
    // 1 ms of host time a linear-attention layer (`launch.linear_attn_s`), kernels
    // launched at no host cost: the prefill step, launched from the host, waits the
    // whole 1 ms for its one linear layer on top of its GPU time; decode replays CUDA
    // graphs (0 s in the ideal terms), which the term does not touch.
    let mut p = ideal_recurrent();
    p.launch.linear_attn_s = 1e-3;
    let c = cm(hybrid(), 1, false, p.clone());
    let s = prefill(&c, 100, 0);
    close(s.op(Op::Launch), 1e-3);
    close(s.host_serial_s, 1e-3);
    assert_eq!(s.host_launch_s, 0.0);
    assert_eq!(decode(&c, 1, 999, 0).op(Op::Launch), 0.0);
    // With 1 ms a kernel launched too, the kernels' launches outrun the GPU by what
    // they exceed it, and the linear layer's 1 ms still adds whole.
    p.launch.eager_s = 1e-3;
    let s = prefill(&cm(hybrid(), 1, false, p), 100, 0);
    let gpu = s.step_s - s.op(Op::Launch);
    close(s.host_launch_s, s.kernels * 1e-3);
    close(s.op(Op::Launch), s.kernels * 1e-3 - gpu + 1e-3);
}

#[test]
fn tensor_parallelism_splits_a_linear_state_by_its_value_heads() {
    // TP2: each GPU keeps 2 of the 4 value heads' state and does half the inputs and
    // outputs; the dense layer's single KV head is read whole on each GPU.
    let m = hybrid();
    close(
        decode(&tp(m.clone(), 2, false, ideal_recurrent()), 1, 999, 0).op(Op::Attention),
        0.1e-6 + (2.0 * STATE + IO) / 2.0 / 1e12,
    );
    // The state is reserved from the KV pool as KV tokens: 2080 B at 100 B a token is
    // 21 tokens (rounded up), the same at any TP (both split by heads).
    assert_eq!(
        sim::serving::kv_extra_tokens(&m, m.kv.bytes_per_token, 5000),
        21
    );
}

#[test]
fn a_layer_without_a_mixer_or_an_ffn_sums_one_partial_output_under_tp() {
    // Two layers, one attention alone and one MoE alone (Nemotron-H's blocks): under
    // TP2 one all-reduce each, of 1 token x 2 x 1000 B = 2000 B: 4000 B in all, where
    // two full layers sum 8000 B.
    let mut m = model();
    let mut moe_only = m.layers[0].clone();
    moe_only.attention = AttentionKind::None;
    m.layers[0].ffn = FfnKind::None;
    m.layers.push(moe_only);
    let c = decode(&tp(m, 2, false, ideal()), 1, 999, 0);
    assert_eq!(c.comm.nvlink_bytes, 2.0 * 2000.0);
    let mut full = model();
    full.layers[0].count = 2;
    let c = decode(&tp(full, 2, false, ideal()), 1, 999, 0);
    assert_eq!(c.comm.nvlink_bytes, 4.0 * 2000.0);
}

#[test]
fn chunked_attention_attends_within_its_chunk_at_prefill() {
    // A chunk of 64 and a prefill of 100: positions 0..63 see 1..64 keys, 64..99 see
    // 1..36: 2080 + 666 = 2746 pairs x 2 x 8 x 200 = 8.7872 Mflop, 8.7872 ns. With
    // 1-byte entries its reads (the 100 tokens of the chunks it spans, 0.1 ns) do not
    // bind.
    let mut m = model();
    m.layers[0].attention = AttentionKind::Chunked;
    m.attention.chunk = 64;
    m.attention.kv_entry_bytes = 1.0;
    close(
        prefill(&cm(m.clone(), 1, false, ideal()), 100, 0).op(Op::Attention),
        2746.0 * 2.0 * 8.0 * 200.0 / 1e15,
    );
    // At decode a chunked layer reads at most its chunk (and the new token): 65 of a
    // 999-token context, as a window of 64 would.
    m.attention.kv_entry_bytes = 100.0;
    close(
        decode(&cm(m.clone(), 1, false, ideal()), 1, 999, 0).op(Op::Attention),
        65.0 * 100.0 / 1e12,
    );
    // Its KV is reserved per request up to the chunk: 64 x 100 B = 64 KV tokens; the
    // model still needs a layer that caches every token to size the cache by.
    assert_eq!(m.local_kv_bytes(10_000), 6400.0);
    let problems = sim::validate::model(&m);
    assert!(
        problems
            .iter()
            .any(|p| p.to_string().contains("no layer caches every token")),
        "{problems:?}"
    );
}

#[test]
fn a_layer_kind_without_its_table_is_refused_by_field() {
    let mut m = hybrid();
    m.linear_attention = None;
    let p: Vec<String> = sim::validate::model(&m)
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert!(
        p.iter()
            .any(|p| p.contains("linear_attention") && p.contains("[linear_attention]")),
        "{p:?}"
    );
    let mut m = model();
    m.layers[0].attention = AttentionKind::Mamba;
    let p: Vec<String> = sim::validate::model(&m)
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert!(p.iter().any(|p| p.contains("[mamba]")), "{p:?}");
    let mut m = model();
    m.layers[0].attention = AttentionKind::Chunked;
    let p: Vec<String> = sim::validate::model(&m)
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert!(p.iter().any(|p| p.contains("attention.chunk")), "{p:?}");
}
