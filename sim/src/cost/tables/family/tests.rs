//! The physics terms by hand, on a round-number GPU.

use super::*;
use spec::dtype::Dtype;

/// A round-number GPU: 100 SMs, 1 TB/s of HBM, 1 PFLOP/s BF16 and 2 FP8, 100 GB/s
/// of NVLink.
fn gpu() -> Hardware {
    let mut h: Hardware =
        toml::from_str(include_str!("../../../../../scenarios/hardware/h200.toml")).unwrap();
    h.sms = 100;
    h.hbm.bytes_per_s = 1e12;
    h.tensor.bf16_flops_per_s = 1e15;
    h.tensor.fp8_flops_per_s = 2e15;
    h.nvlink.bytes_per_s = 1e11;
    h
}

fn prep(family: Family, set: &[(&str, f64)]) -> Prepared {
    let params = family
        .params()
        .iter()
        .map(|p| set.iter().find(|s| s.0 == p.0).map_or(p.1, |s| s.1))
        .collect();
    Prepared::new(family, params)
}

fn gemm(format: Format, m: f64, n: f64, k: f64) -> Shape {
    Shape::Gemm {
        kernel: String::new(),
        format,
        m,
        n,
        k,
    }
}

#[test]
fn fp8_gemms_pay_for_quantising_their_activations() {
    // The engines' FP8 GEMMs quantise BF16 activations first: a read of 2 bytes and
    // a write of 1 per activation element, at mem_eff of HBM, plus a launch.
    // M = 1024, K = 4096: 1024 * 4096 * 3 B = 12.582912 MB at 0.5 TB/s = 25.165824
    // us, plus quant_s 2 us, on top of the tile model's price.
    let hw = gpu();
    let p = prep(Family::Gemm, &[("mem_eff", 0.5), ("quant_s", 2e-6)]);
    let fp8 = gemm(Format::Fp8, 1024.0, 4096.0, 4096.0).physics(&hw, &p);
    let (rate, tile) = tile_rates(&p.params);
    let g = Gemm {
        kind: GemmKind::Dense,
        groups: 1.0,
        m: 1024.0,
        n: 4096.0,
        k: 4096.0,
        a_bytes: 1.0,
        b_bytes: 1.0,
        out_bytes: 2.0,
        rate: 2e15,
        rows_vary: false,
    };
    let tile_only = gemm::time(&g, &KernelDevice::of(&hw), &rate, &tile, &p.roof).s;
    assert!(
        (fp8 - tile_only - 27.165824e-6).abs() < 1e-12,
        "{}",
        fp8 - tile_only
    );
    // BF16 operands need no quantisation.
    assert!(!Format::Bf16.quantises() && Format::Fp8Block.quantises());
}

#[test]
fn gemm_time_steps_with_row_tiles() {
    // Compute-bound (HBM made fast): 65 rows need a 128-row tile where 64 rows fit a
    // 64-row one, so the price jumps between them and stays flat up to 128 rows (one
    // tile row).
    let mut hw = gpu();
    hw.hbm.bytes_per_s = 1e16;
    let p = prep(Family::Gemm, &[("small_tile_eff", 1.0), ("fixed_s", 1e-7)]);
    let t = |m| gemm(Format::Bf16, m, 1024.0, 65536.0).physics(&hw, &p);
    assert!(t(65.0) > 1.5 * t(64.0), "{} {}", t(65.0), t(64.0));
    assert!(
        (t(128.0) / t(100.0) - 1.0).abs() < 0.02,
        "{} {}",
        t(128.0),
        t(100.0)
    );
}

#[test]
fn small_collectives_cost_their_latency() {
    // fixed 10 us + 1 us per peer; 7 peers: 17 us however few bytes. 8 GPUs
    // all-reduce 8 MB: bus bytes 2 * 7/8 * 8 MB = 14 MB at 0.5 * 100 GB/s = 280 us.
    let hw = gpu();
    let p = prep(
        Family::Collective,
        &[("fixed_s", 10e-6), ("per_peer_s", 1e-6), ("link_eff", 0.5)],
    );
    let c = |op, bytes| Shape::Collective {
        library: "nccl half".into(),
        op,
        gpus: 8.0,
        bytes,
    };
    let tiny = c(CollectiveOp::AllReduce, 16.0).physics(&hw, &p);
    assert!((tiny - 17e-6).abs() < 1e-9, "{tiny}");
    let big = c(CollectiveOp::AllReduce, 8e6).physics(&hw, &p);
    assert!((big - (17e-6 + 280e-6)).abs() < 1e-12, "{big}");
    // An all-gather moves half the all-reduce's bus bytes.
    let ag = c(CollectiveOp::AllGather, 8e6).physics(&hw, &p);
    assert!((ag - (17e-6 + 140e-6)).abs() < 1e-12, "{ag}");
}

#[test]
fn decode_attention_reads_the_window_in_its_kv_dtype() {
    // Batch 8, 8 KV heads of 128, 4096 cached tokens, BF16 KV: 8 * 8 * 4096 * 128 *
    // 2 (K and V) * 2 B = 134.217728 MB, plus Q and O (8 * 32 heads * 128 * 2 * 2 B =
    // 131072 B), at 0.5 TB/s: 268.697 us. A 1024-token window reads a quarter of
    // the KV; FP8 KV half of it. Memory-bound (p large, compute negligible).
    let hw = gpu();
    let p = prep(
        Family::DecodeAttention,
        &[
            ("mem_eff", 0.5),
            ("compute_eff", 1.0),
            ("fixed_s", 1e-7),
            ("overlap_p", 8.0),
            ("per_seq_s", 1e-10),
        ],
    );
    let a = |window, kv_fp8| Shape::DecodeAttention {
        kernel: String::new(),
        batch: 8.0,
        heads: 32.0,
        kv_heads: 8.0,
        head_dim: 128.0,
        context: 4096.0,
        window,
        kv_fp8,
    };
    let q_o = 131072.0;
    let full = a(0.0, false).physics(&hw, &p);
    let want = (134217728.0 + q_o) / 0.5e12;
    assert!((full / want - 1.0).abs() < 0.01, "{full} {want}");
    let win = a(1024.0, false).physics(&hw, &p);
    assert!((win / ((134217728.0 / 4.0 + q_o) / 0.5e12) - 1.0).abs() < 0.01);
    let fp8 = a(0.0, true).physics(&hw, &p);
    assert!((fp8 / ((134217728.0 / 2.0 + q_o) / 0.5e12) - 1.0).abs() < 0.01);
}

#[test]
fn windowed_prefill_computes_a_band() {
    // 4096 tokens, a 1024 window: 4096 * 1024 - 1024^2 / 2 = 3,670,016 query-key
    // pairs against 4096^2 / 2 = 8,388,608 causal: compute-bound, so the price
    // scales by their ratio (diag_tokens ~0, fixed ~0; HBM made fast).
    let mut hw = gpu();
    hw.hbm.bytes_per_s = 1e16;
    let p = prep(
        Family::PrefillAttention,
        &[("diag_tokens", 1.0), ("fixed_s", 1e-7), ("overlap_p", 8.0)],
    );
    let a = |window| Shape::PrefillAttention {
        kernel: String::new(),
        batch: 1.0,
        isl: 4096.0,
        heads: 32.0,
        kv_heads: 8.0,
        head_dim: 128.0,
        window,
        fp8: false,
        kv_fp8: false,
    };
    let r = a(1024.0).physics(&hw, &p) / a(0.0).physics(&hw, &p);
    assert!((r - 3670016.0 / 8388608.0).abs() < 0.01, "{r}");
}

#[test]
fn moe_weights_of_touched_experts_only() {
    // One token, top-2 of 64 experts on one GPU: two experts hold rows, so at small
    // batch the shard reads about 2 experts' weights, not 64; many tokens touch all.
    let hw = gpu();
    let p = prep(Family::Moe, &[]);
    let m = |tokens| Shape::Moe {
        kernel: String::new(),
        format: Format::Bf16,
        tokens,
        hidden: 4096.0,
        inter: 1024.0,
        top_k: 2.0,
        experts: 64.0,
        tp: 1.0,
        ep: 1.0,
        skew: 0.0,
        gated: true,
    };
    let one = m(1.0).physics(&hw, &p);
    let many = m(4096.0).physics(&hw, &p);
    // 64 experts' weights: 64 * 3 * 4096 * 1024 * 2 B = 1.61 GB at <= 1 TB/s >= 1.6 ms.
    assert!(many > 1.6e-3, "{many}");
    assert!(one < many / 10.0, "{one} {many}");
    assert_eq!(
        Format::of_gemm(Dtype::Fp8, Dtype::Fp8, 128),
        Some(Format::Fp8Block)
    );
    assert_eq!(
        Format::of_gemm(Dtype::Fp8, Dtype::Fp8, 0),
        Some(Format::Fp8)
    );
    assert_eq!(
        Format::of_gemm(Dtype::Bf16, Dtype::Bf16, 0),
        Some(Format::Bf16)
    );
    assert_eq!(Format::of_gemm(Dtype::Bf16, Dtype::Int4, 128), None);
    assert_eq!(Format::of_gemm(Dtype::Fp8, Dtype::Fp4, 16), None);
}

#[test]
fn moe_row_tiles_pad_half_a_tile_per_expert_when_counts_scatter() {
    // 2048 tokens, top-1 of 8 experts on one GPU: 256 rows per expert on average.
    // Exact counts fill two 128-row tiles per expert (16 row tiles); counts that scatter
    // around 256 (routing, and more so a power-law load) pad half a tile per expert in
    // expectation: 2.5 per expert, 20 row tiles.
    use crate::cost::kernels::gemm::{tiling, GemmKind};
    let row_tiles = |vary: bool| {
        let t = tiling(GemmKind::Contiguous, 8.0, 256.0, 4096.0, 100.0, vary);
        t.tiles / (4096.0 / t.bn).ceil()
    };
    assert_eq!(row_tiles(false), 16.0);
    assert_eq!(row_tiles(true), 20.0);
    // A load distribution is its own key, so its own fit and correction carry what the
    // distribution does beyond the padding (the busiest expert's extra rows): the
    // physics is shared, the keys are not.
    let m = |skew| Shape::Moe {
        kernel: "k".into(),
        format: Format::Bf16,
        tokens: 2048.0,
        hidden: 4096.0,
        inter: 2048.0,
        top_k: 1.0,
        experts: 8.0,
        tp: 1.0,
        ep: 1.0,
        skew,
        gated: true,
    };
    let (hw, p) = (gpu(), prep(Family::Moe, &[]));
    assert_eq!(m(0.0).physics(&hw, &p), m(1.01).physics(&hw, &p));
    assert_eq!(m(0.0).key(), "k, bfloat16, balanced, gated");
    assert_eq!(m(1.01).key(), "k, bfloat16, power law 1.01, gated");
}

#[test]
fn a_sliced_moe_shard_is_priced_as_its_whole_experts_where_no_row_was_sliced() {
    use crate::cost::tables::fit::Fit;
    use crate::cost::tables::grid::{Axis, Grid};
    let hw = gpu();
    // gpt-oss-120b's experts (hidden = inter = 2880, top-4 of 128), 1024 tokens,
    // sliced over 4 GPUs: on each, 1024 x 4 pairs through a quarter of every expert.
    let moe = |tp: f64, ep: f64| Shape::Moe {
        kernel: String::new(),
        format: Format::Bf16,
        tokens: 1024.0,
        hidden: 2880.0,
        inter: 2880.0,
        top_k: 4.0,
        experts: 128.0,
        tp,
        ep,
        skew: 0.0,
        gated: true,
    };
    let sliced = moe(4.0, 1.0);
    // Its whole experts: 32 a GPU, a quarter of the pairs each, the same arithmetic.
    let whole = sliced.moe_whole_experts().unwrap();
    assert_eq!(whole, moe(1.0, 4.0));
    assert_eq!(sliced.moe_flops(), whole.moe_flops());
    assert_eq!(moe(1.0, 4.0).moe_whole_experts(), None);
    // A correction of zeros over the four MoE axes; the slicing axis (log2 of
    // hidden x tp / inter: 0 for whole experts, 2 for the 4-way slice) at `slicing`.
    let fit = |slicing: Axis| {
        let axes = vec![
            Axis {
                lo: -2.0,
                step: 2.0,
                n: 2,
            },
            Axis {
                lo: 0.0,
                step: 2.0,
                n: 2,
            },
            Axis {
                lo: 22.0,
                step: 2.0,
                n: 2,
            },
            slicing,
        ];
        let nodes = axes.iter().map(|a| a.n).product();
        let params = Family::Moe.params().iter().map(|p| p.1).collect();
        let grid = Grid {
            axes,
            values: vec![0.0; nodes],
        };
        Fit::new(Family::Moe, "bf16".into(), params, grid)
    };
    // Every row timed whole experts (one node at 0): the slice is priced as them,
    // not by the tile physics of its narrower GEMMs.
    let whole_only = fit(Axis {
        lo: 0.0,
        step: 2.0,
        n: 1,
    });
    assert!(whole_only.physics(&hw, &sliced) > 1.01 * whole_only.physics(&hw, &whole));
    assert_eq!(whole_only.measured_equivalent(&sliced), Some(whole.clone()));
    assert_eq!(
        whole_only.price(&hw, &sliced),
        whole_only.physics(&hw, &whole)
    );
    assert_eq!(whole_only.measured_equivalent(&whole), None);
    // Rows of slices too (nodes at 0 and 2): the slice's own physics stands.
    let sliced_too = fit(Axis {
        lo: 0.0,
        step: 2.0,
        n: 2,
    });
    assert_eq!(sliced_too.measured_equivalent(&sliced), None);
    assert_eq!(
        sliced_too.price(&hw, &sliced),
        sliced_too.physics(&hw, &sliced)
    );
}
