//! Element-wise work per layer: the bytes and kernel counts of norms, RoPE,
//! quantisation, activations and KV writes, by layer part.

use super::Split;
use spec::dtype::Dtype;
use spec::model::Model;

/// Per-token element-wise bytes and kernel counts per layer (see
/// `cost/analytic/mod.rs`): before the router, MoE FFN, dense FFN, and per routed
/// token-expert pair.
pub(super) struct Elementwise {
    pub(super) attn_bytes: f64,
    pub(super) moe_bytes: f64,
    pub(super) pair_bytes: f64,
    pub(super) kernels_attn: f64,
    pub(super) kernels_moe: f64,
    pub(super) kernels_dense: f64,
    pub(super) elem_kernels_attn: f64,
    pub(super) elem_kernels_moe: f64,
    pub(super) elem_kernels_dense: f64,
}

impl Elementwise {
    pub(super) fn new(model: &Model, split: &Split, projections: usize) -> Elementwise {
        let a = &model.attention;
        let h = model.hidden as f64;
        let (tp, heads, rope, aw) = (split.tp, split.heads, split.rope, a.weight_dtype);
        let quant = |width: f64, w: Dtype| if w.bytes() <= 1.0 { 3.0 * width } else { 0.0 };
        let mut attn_bytes = 8.0 * h // fused residual add + RMSNorm before attention
            + quant(h, aw)
            + 4.0 * rope * (heads + 1.0) // RoPE on queries and the key
            + 2.0 * a.kv_dim as f64 + a.kv_entry_bytes // KV cache write
            + quant(heads * a.v_head_dim as f64, aw)
            + 8.0 * h; // fused residual add + RMSNorm after attention
                       // With TP, one all-reduce kernel after attention and one after the FFN.
        let ar_kernel = if tp > 1.0 { 1.0 } else { 0.0 };
        let mut kernels_attn = 6.0 + projections as f64 + ar_kernel;
        // Two norms, RoPE, the KV write and two more of the six are element-wise; the
        // attention kernel itself is not.
        let mut elem_kernels_attn = 5.0;
        if a.q_lora > 0 {
            attn_bytes += 4.0 * (a.q_lora as f64 + a.kv_dim as f64) + quant(a.q_lora as f64, aw);
            kernels_attn += 2.0;
            elem_kernels_attn += 2.0;
        }
        if aw.bytes() <= 1.0 {
            kernels_attn += 2.0;
            elem_kernels_attn += 2.0;
        }
        let (moe_bytes, pair_bytes, kernels_moe) = match &model.moe {
            Some(m) => {
                let ffn = m.expert_ffn as f64;
                let shared = 5.0 * ffn * m.shared_experts as f64 / tp;
                (
                    4.0 * m.routed_experts as f64 + 8.0 * m.top_k as f64 + 3.0 * h + shared,
                    5.0 * ffn / split.slice,
                    // router GEMM, top-k, quantisation, dispatch, two expert GEMMs,
                    // activation, combine (one kernel when fused; no dispatch or
                    // combine under TP, whose all-reduce follows), and the shared
                    // expert's three kernels.
                    match (m.fused, tp > 1.0) {
                        (true, _) => 3.0,
                        (false, false) => 8.0,
                        (false, true) => 6.0 + ar_kernel,
                    } + if m.shared_experts > 0 { 3.0 } else { 0.0 },
                )
            }
            None => (0.0, 0.0, 0.0),
        };
        // A dense FFN (its norm is the one after attention, above): with 8-bit
        // weights, the input's quantisation and an activation that writes 8-bit
        // values; with 16-bit weights (vLLM's `LlamaMLP`: gate-up GEMM, `SiluAndMul`,
        // down GEMM) no quantisation, and the activation writes 16-bit values.
        let (kernels_dense, elem_kernels_dense) = match &model.dense_ffn {
            Some(d) => {
                let quantised = if d.weight_dtype.bytes() <= 1.0 {
                    1.0
                } else {
                    0.0
                };
                (3.0 + quantised + ar_kernel, 1.0 + quantised)
            }
            None => (0.0, 0.0),
        };
        // Top-k and, with shared experts, their activation.
        let elem_kernels_moe = match &model.moe {
            Some(m) if m.fused => 0.0,
            Some(m) => 1.0 + if m.shared_experts > 0 { 1.0 } else { 0.0 },
            None => 0.0,
        };
        Elementwise {
            attn_bytes,
            moe_bytes,
            pair_bytes,
            kernels_attn,
            kernels_moe,
            kernels_dense,
            elem_kernels_attn,
            elem_kernels_moe,
            elem_kernels_dense,
        }
    }
}

/// A dense FFN's element-wise bytes per token at width `ffn` (its norm is the one after
/// attention): with 8-bit weights, the input's quantisation and an activation that
/// writes 8-bit values; with 16-bit weights (vLLM's `LlamaMLP`: gate-up GEMM,
/// `SiluAndMul`, down GEMM) no quantisation, and the activation writes 16-bit values.
pub(in crate::cost::analytic) fn dense_bytes(model: &Model, ffn: f64, tp: f64) -> f64 {
    let Some(d) = &model.dense_ffn else {
        return 0.0;
    };
    let h = model.hidden as f64;
    let q = if d.weight_dtype.bytes() <= 1.0 {
        3.0 * h
    } else {
        0.0
    };
    let act_bytes = if q > 0.0 { 5.0 } else { 6.0 };
    q + act_bytes * ffn / tp
}

/// Element-wise bytes per token and kernels (all, element-wise) of one layer of a
/// grouped-query attention with its own shape: `heads` query heads per GPU of value
/// width `v`, `kv_dim` K/V outputs and `entry` bytes of KV written per token.
pub(in crate::cost::analytic) fn shaped_attention(
    model: &Model,
    heads: f64,
    v: f64,
    kv_dim: f64,
    entry: f64,
) -> f64 {
    let h = model.hidden as f64;
    let aw = model.attention.weight_dtype;
    let quant = |width: f64| if aw.bytes() <= 1.0 { 3.0 * width } else { 0.0 };
    let rope = 64f64.min(model.attention.qk_head_dim as f64);
    16.0 * h + quant(h) + 4.0 * rope * (heads + 1.0) + 2.0 * kv_dim + entry + quant(heads * v)
}

/// Element-wise bytes per token of a recurrent mixer's layer on one GPU with input
/// projection outputs `inner` and output projection inputs `out` (per GPU), weights of
/// `w`: two fused residual adds and norms, the short convolution reading and writing
/// its inputs (BF16), the gated norm reading the output and its gate, quantisation of
/// the projections' inputs with 8-bit weights.
pub(in crate::cost::analytic) fn recurrent_bytes(
    model: &Model,
    inner: f64,
    out: f64,
    w: spec::dtype::Dtype,
) -> f64 {
    let h = model.hidden as f64;
    let quant = |width: f64| if w.bytes() <= 1.0 { 3.0 * width } else { 0.0 };
    16.0 * h + 4.0 * inner + 6.0 * out + quant(h) + quant(out)
}
