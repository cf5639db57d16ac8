//! Every GEMM of the compiled model: its fixed shape and operands ([`GemmSpec`]), and
//! the GEMMs (per GPU, as [`Split`] divides them) of the attention
//! projections, MLA's absorbed up-projections, the routed and shared experts, the dense
//! FFNs and the LM head.

use super::Split;
use crate::cost::kernels::gemm::{Gemm, GemmKind};
use crate::cost::tables::format::Format;
use spec::dtype::Dtype;
use spec::{hardware::Hardware, model::Model};

/// A GEMM's fixed part: everything but the rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(in crate::cost::analytic) struct GemmSpec {
    pub kind: GemmKind,
    pub groups: f64,
    pub n: f64,
    pub k: f64,
    pub a_bytes: f64,
    pub b_bytes: f64,
    pub rate: f64,
    /// Row counts scatter between groups (routed experts).
    pub rows_vary: bool,
    /// Its operands' format in the engine's kernel tables (`None`: a mix the tables do
    /// not time).
    pub format: Option<Format>,
    /// Its table in the cost model's memo (`Compiled::number_gemms`); the routed
    /// experts, priced at varying group counts, have none.
    pub slot: Option<u8>,
}

impl GemmSpec {
    pub fn at(&self, m: f64) -> Gemm {
        Gemm {
            kind: self.kind,
            groups: self.groups,
            m,
            n: self.n,
            k: self.k,
            a_bytes: self.a_bytes,
            b_bytes: self.b_bytes,
            out_bytes: 2.0,
            rate: self.rate,
            rows_vary: self.rows_vary,
        }
    }
}

/// The rate of a GEMM whose operands are `a` and `b`: the wider one sets it.
pub(super) fn pair_rate(hw: &Hardware, a: Dtype, b: Dtype) -> f64 {
    let wide = if a.bytes() >= b.bytes() { a } else { b };
    hw.tensor.flops_per_s(wide)
}

/// Bytes per weight with block scales.
pub(super) fn weight_bytes(dtype: Dtype, scale_block: u32) -> f64 {
    dtype.bytes()
        + if scale_block > 0 {
            1.0 / scale_block as f64
        } else {
            0.0
        }
}

/// The activations' dtype of a GEMM of `w` weights with a block scale per
/// `scale_block` weights on `hw`. NVFP4 checkpoints (FP4, an FP8 scale per 16) run
/// W4A4 where the GPU multiplies FP4 (ModelOpt's NVFP4 linear layers quantise each
/// input to NVFP4 with its static input scale; vLLM's `ModelOptNvFp4LinearMethod`
/// and TensorRT-LLM's `NVFP4LinearMethod` then run one FP4 x FP4 GEMM); other
/// 8-bit or narrower float weights take FP8 activations; weight-only INT4 GEMMs take
/// BF16 activations (W4A16).
pub(super) fn act_dtype(hw: &Hardware, w: Dtype, scale_block: u32) -> Dtype {
    if w == Dtype::Int4 {
        Dtype::Bf16
    } else if w == Dtype::Fp4 && scale_block == 16 && hw.tensor.fp4_flops_per_s.is_some() {
        Dtype::Fp4
    } else if w.bytes() <= 1.0 {
        Dtype::Fp8
    } else {
        w
    }
}

pub(super) fn dense(hw: &Hardware, n: f64, k: f64, w: Dtype, scale_block: u32) -> GemmSpec {
    let a = act_dtype(hw, w, scale_block);
    GemmSpec {
        format: Format::of_gemm(a, w, scale_block),
        kind: GemmKind::Dense,
        groups: 1.0,
        n,
        k,
        a_bytes: a.bytes(),
        b_bytes: weight_bytes(w, scale_block),
        rate: pair_rate(hw, a, w),
        rows_vary: false,
        slot: None,
    }
}

/// The attention projections before the router (q, kv, o), per GPU; the latent/KV
/// down-projections stay whole on every GPU.
pub(super) fn projection_gemms(hw: &Hardware, model: &Model, split: &Split) -> Vec<GemmSpec> {
    let a = &model.attention;
    let h = model.hidden as f64;
    let (tp, heads, aw) = (split.tp, split.heads, a.weight_dtype);
    let sb = model.dense_scale_block;
    let mut proj = Vec::new();
    if a.q_lora > 0 {
        proj.push(dense(hw, a.q_lora as f64 + a.kv_dim as f64, h, aw, sb));
        proj.push(dense(
            hw,
            heads * a.qk_head_dim as f64,
            a.q_lora as f64,
            aw,
            sb,
        ));
    } else {
        // An output gate is one more query-wide output of the same projection.
        let q = if a.output_gate { 2.0 } else { 1.0 } * heads * a.qk_head_dim as f64;
        proj.push(dense(hw, q + a.kv_dim as f64 / split.kv_split, h, aw, sb));
    }
    match (a.o_lora, a.o_groups.unwrap_or(1).max(1)) {
        (Some(r), 1) => {
            proj.push(dense(hw, r as f64, heads * a.v_head_dim as f64, aw, sb));
            proj.push(dense(hw, h, r as f64 / tp, aw, sb));
        }
        // Grouped: each group's heads to its own rank (the groups split over TP),
        // then all the ranks to the hidden state.
        (Some(r), g) => {
            let (g, r) = (g as f64, r as f64);
            let group_in = a.heads as f64 * a.v_head_dim as f64 / g;
            proj.push(dense(hw, g * r / tp, group_in, aw, sb));
            proj.push(dense(hw, h, g * r / tp, aw, sb));
        }
        (None, _) => proj.push(dense(hw, h, heads * a.v_head_dim as f64, aw, sb)),
    }
    proj
}

/// MLA: the latent KV's up-projection, absorbed into the query and output at decode
/// (batched GEMMs per head), applied to every context token at un-absorbed prefill.
/// Neither without MLA.
pub(super) fn mla_gemms(
    hw: &Hardware,
    model: &Model,
    split: &Split,
) -> (Vec<GemmSpec>, Option<GemmSpec>) {
    let a = &model.attention;
    if a.kv_up_params == 0 {
        return (Vec::new(), None);
    }
    let kv_lora = a.value_dim as f64;
    let nope = (a.qk_head_dim as f64 - split.rope).max(1.0);
    let batched = |n: f64, k: f64| GemmSpec {
        format: Format::of_gemm(Dtype::Bf16, Dtype::Bf16, 0),
        kind: GemmKind::Masked,
        groups: split.heads,
        n,
        k,
        a_bytes: 2.0,
        b_bytes: 2.0,
        rate: hw.tensor.flops_per_s(Dtype::Bf16),
        rows_vary: false,
        slot: None,
    };
    (
        vec![
            batched(kv_lora, nope),
            batched(a.v_head_dim as f64, kv_lora),
        ],
        Some(dense(
            hw,
            a.kv_up_params as f64 / kv_lora / split.tp,
            kv_lora,
            a.weight_dtype,
            128,
        )),
    )
}

/// The MoE FFN's GEMMs and routed-expert sizes per GPU (none without MoE).
#[derive(Default)]
pub(super) struct MoeGemms {
    pub(super) router: Option<GemmSpec>,
    pub(super) shared: Vec<GemmSpec>,
    /// Routed experts: gate+up, then down.
    pub(super) experts: Vec<GemmSpec>,
    pub(super) expert_bytes: f64,
    pub(super) expert_params: f64,
}

pub(super) fn moe_gemms(hw: &Hardware, model: &Model, split: &Split) -> MoeGemms {
    let Some(m) = &model.moe else {
        return MoeGemms::default();
    };
    let h = model.hidden as f64;
    // The experts' input width: the latent of a latent MoE, else the hidden state.
    let ew = model.expert_width() as f64;
    let ffn = m.expert_ffn as f64;
    let act = m.activation_dtype;
    let wb = weight_bytes(m.weight_dtype, m.scale_block);
    let grouped = |n: f64, k: f64| GemmSpec {
        format: Format::of_gemm(act, m.weight_dtype, m.scale_block),
        kind: GemmKind::Masked,
        groups: 1.0,
        n,
        k,
        a_bytes: act.bytes(),
        b_bytes: wb,
        rate: pair_rate(hw, act, m.weight_dtype),
        rows_vary: true,
        slot: None,
    };
    let sw = m.shared_weight_dtype;
    let sb = model.dense_scale_block;
    let sffn = match m.shared_ffn {
        None => ffn * m.shared_experts as f64 / split.tp,
        Some(w) => w as f64 / split.tp,
    };
    // Gate and up together (up alone when not gated), then down.
    let up = m.matrices() - 1.0;
    let mut shared = if m.shared_width() > 0 {
        vec![dense(hw, up * sffn, h, sw, sb), dense(hw, h, sffn, sw, sb)]
    } else {
        Vec::new()
    };
    if let Some(l) = m.latent {
        // A latent MoE projects every token down before the experts and back up
        // after them (whole on every GPU).
        shared.push(dense(hw, l as f64, h, sw, sb));
        shared.push(dense(hw, h, l as f64, sw, sb));
    }
    let slice = split.slice;
    MoeGemms {
        router: Some(dense(hw, m.routed_experts as f64, h, Dtype::Bf16, 0)),
        shared,
        experts: vec![grouped(up * ffn / slice, ew), grouped(ew, ffn / slice)],
        expert_bytes: model.expert_bytes() / slice,
        expert_params: model.expert_params() / slice,
    }
}

/// The dense FFN's gate+up and down GEMMs per GPU at width `ffn` (up and down when not
/// gated).
pub(super) fn dense_ffn_gemms(hw: &Hardware, model: &Model, ffn: f64, tp: f64) -> Vec<GemmSpec> {
    let h = model.hidden as f64;
    match &model.dense_ffn {
        Some(d) => vec![
            dense(
                hw,
                (d.matrices() - 1.0) * ffn / tp,
                h,
                d.weight_dtype,
                model.dense_scale_block,
            ),
            dense(hw, h, ffn / tp, d.weight_dtype, model.dense_scale_block),
        ],
        None => Vec::new(),
    }
}

pub(super) fn lm_head_gemm(hw: &Hardware, model: &Model, tp: f64) -> GemmSpec {
    let ed = model.embedding_dtype;
    // Activations narrower than a byte enter as FP8.
    let act = if ed.bytes() < 1.0 { Dtype::Fp8 } else { ed };
    GemmSpec {
        format: Format::of_gemm(act, ed, 0),
        kind: GemmKind::Dense,
        groups: 1.0,
        n: model.vocab as f64 / tp,
        k: model.hidden as f64,
        a_bytes: ed.bytes().max(1.0),
        b_bytes: ed.bytes(),
        rate: hw.tensor.flops_per_s(ed),
        rows_vary: false,
        slot: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hw(text: &str) -> Hardware {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn nvfp4_dense_gemms_run_w4a4_where_the_gpu_multiplies_fp4() {
        let b200 = hw(include_str!("../../../../../scenarios/hardware/b200.toml"));
        let h100 = hw(include_str!("../../../../../scenarios/hardware/h100.toml"));
        // NVFP4 (an FP8 scale per 16 weights) on Blackwell: FP4 activations, the
        // tables' NVFP4 rows, FP4's tensor rate, half a byte an activation.
        let g = dense(&b200, 8192.0, 8192.0, Dtype::Fp4, 16);
        assert_eq!(g.format, Some(Format::Nvfp4));
        assert_eq!(g.rate, 9e15);
        assert_eq!(g.a_bytes, 0.5);
        assert_eq!(g.b_bytes, 0.5 + 1.0 / 16.0);
        // Hopper has no FP4 tensor rate: FP8 activations, which no table times.
        let g = dense(&h100, 8192.0, 8192.0, Dtype::Fp4, 16);
        assert_eq!((g.format, g.a_bytes), (None, 1.0));
        // FP4 weights scaled per 32 (MXFP4) keep FP8 activations on Blackwell too.
        assert_eq!(dense(&b200, 8192.0, 8192.0, Dtype::Fp4, 32).a_bytes, 1.0);
        // FP8 weights: FP8 activations, per tensor or in blocks.
        assert_eq!(
            dense(&b200, 8192.0, 8192.0, Dtype::Fp8, 0).format,
            Some(Format::Fp8)
        );
    }
}
