//! `--engine` prices with the measured kernel tables: `twin forward`'s routed experts,
//! GQA attention (decode, prefill, sliding window) and block-FP8 and MXFP4 kernels at
//! the shipped profiles' fits, and a band that moves them by their training spread.

mod common;

use common::*;

#[test]
fn forward_prices_routed_experts_at_the_tables_moe_fit() {
    // gpt-oss-120b, TP8 decode on H100 with vLLM's tables: each of the 36 MoE layers is
    // one call of the tables' MoE kernel over the replica's 10 tokens (MXFP4 weights,
    // BF16 activations, gated, 8 GPUs of tensor parallelism, under the deployed
    // power-law load), and H100's in-situ factors leave a tensor-parallel step's prices
    // as they are: the step's `moe` line is 36 times the fit's price of that shape.
    let j = forward_json("vllm", &tp8("gpt-oss-120b", &DECODE_10_AT_2100));
    let moe_ms = j["breakdown_ms"]["moe"].as_f64().unwrap();
    let hw: spec::hardware::Hardware = toml::from_str(
        &std::fs::read_to_string(repo().join("scenarios/hardware/h100.toml")).unwrap(),
    )
    .unwrap();
    let prof = shipped("h100-vllm-0.24.0");
    use sim::cost::tables::family::Shape;
    use sim::cost::tables::format::Format;
    use sim::cost::tables::DEPLOYED_MOE_SKEW;
    let format = Format::of_experts(spec::dtype::Dtype::Fp4, 32, spec::dtype::Dtype::Bf16).unwrap();
    let shape = Shape::Moe {
        kernel: String::new(),
        format,
        tokens: 10.0,
        hidden: 2880.0,
        inter: 2880.0,
        top_k: 4.0,
        experts: 128.0,
        tp: 8.0,
        ep: 1.0,
        skew: DEPLOYED_MOE_SKEW,
        gated: true,
    };
    let per_layer = prof
        .price_moe(&hw, &shape)
        .expect("vLLM's H100 tables time MXFP4 MoE");
    let want = 36.0 * per_layer * 1e3;
    assert!(
        (moe_ms / want - 1.0).abs() < 1e-3,
        "{moe_ms} ms, want {want} ms"
    );
}

#[test]
fn marlin_experts_are_priced_no_faster_than_marlins_arithmetic_rate() {
    // `--moe-kernel marlin` (vLLM's VLLM_MXFP4_USE_MARLIN=1) on gpt-oss-120b, TP8 on
    // H100 with vLLM's tables: each of the 36 MoE layers of an 8192-token prefill
    // computes 8192 tokens x 4 experts through 2880 x (2 x 360) and 360 x 2880 (the
    // 2880-wide experts sliced over 8 GPUs), 2 FLOPs a multiply-add, at the Marlin
    // fit's compute efficiency of H100's BF16 rate: that floor is above the usual
    // (Triton) kernel's price there, so it is the layer's price. A 10-request decode
    // step is far from it: priced by the usual kernel as without the flag.
    let hw: spec::hardware::Hardware = toml::from_str(
        &std::fs::read_to_string(repo().join("scenarios/hardware/h100.toml")).unwrap(),
    )
    .unwrap();
    let prof = shipped("h100-vllm-0.24.0");
    let eff = prof
        .fits
        .iter()
        .find(|f| {
            f.key
                .starts_with("vllm_compressedtensorsw4a4mxfp4moe_marlin")
                && f.key.contains("power law 1.01")
        })
        .and_then(|f| f.params.get("compute_eff").copied())
        .expect("vLLM's H100 tables time Marlin's MXFP4 experts");
    let flops = 2.0 * 8192.0 * 4.0 * 2880.0 * 360.0 * 3.0;
    let floor_ms = 36.0 * flops / (hw.tensor.bf16_flops_per_s * eff) * 1e3;
    let (usual, marlin) = with_and_without_marlin("vllm", &PREFILL_8192);
    let moe = |j: &serde_json::Value| j["breakdown_ms"]["moe"].as_f64().unwrap();
    assert!(
        moe(&usual) < floor_ms,
        "{} ms, floor {floor_ms} ms",
        moe(&usual)
    );
    assert!(
        (moe(&marlin) / floor_ms - 1.0).abs() < 1e-3,
        "{} ms, want {floor_ms} ms",
        moe(&marlin)
    );
    let (usual, decode) = with_and_without_marlin("vllm", &DECODE_10_AT_2100);
    assert_eq!(moe(&decode), moe(&usual));
}

#[test]
fn an_expert_kernel_the_tables_lack_is_said_and_changes_nothing() {
    // TensorRT-LLM's H100 tables time no Marlin kernel for MXFP4 experts: the line says
    // so and the step is priced as without the flag.
    let (usual, marlin) = with_and_without_marlin("trtllm", &PREFILL_8192);
    assert_eq!(usual["breakdown_ms"], marlin["breakdown_ms"]);
    let line = marlin["cost_model"].as_str().unwrap_or_default();
    assert!(
        line.contains("the tables time no marlin kernel for w4a16_mxfp4 experts"),
        "{marlin}"
    );
}

#[test]
fn pdl_leaves_no_gap_between_a_graphs_kernels_and_says_so() {
    // `--pdl` (TensorRT-LLM's TRTLLM_ENABLE_PDL=1) on gpt-oss-120b, a TP8 decode step on
    // H100: the CUDA graph's replay keeps its own launch but loses the gap after each of
    // its kernels, so the launch line falls by kernels x the hardware's gap per graph
    // node and nothing else moves; the cost model's line says why.
    let usual = forward_json("trtllm", &tp8("gpt-oss-120b", &DECODE_10_AT_2100));
    let mut args = tp8("gpt-oss-120b", &DECODE_10_AT_2100);
    args.push("--pdl");
    let pdl = forward_json("trtllm", &args);
    let launch = |j: &serde_json::Value| j["breakdown_ms"]["launch"].as_f64().unwrap();
    let kernels = usual["kernels"].as_f64().unwrap();
    assert_eq!(kernels, pdl["kernels"].as_f64().unwrap());
    let gap_s = sim::cost::CostParams::default().launch.graph_node_s;
    let fell_ms = launch(&usual) - launch(&pdl);
    assert!(
        (fell_ms - kernels * gap_s * 1e3).abs() < 1e-9,
        "launch fell {fell_ms} ms for {kernels} kernels"
    );
    let graph_ms = sim::cost::CostParams::default().launch.graph_s * 1e3;
    assert!((launch(&pdl) - graph_ms).abs() < 1e-12, "{}", launch(&pdl));
    for op in ["moe", "attention", "dense", "communication", "elementwise"] {
        assert_eq!(usual["breakdown_ms"][op], pdl["breakdown_ms"][op], "{op}");
    }
    let line = pdl["cost_model"].as_str().unwrap_or_default();
    assert!(line.contains("kernels launched with PDL"), "{line}");
    assert!(!usual["cost_model"]
        .as_str()
        .unwrap_or_default()
        .contains("PDL"));
}

/// `twin forward`'s JSON for gpt-oss-120b on one TP8 replica of H100 under `engine`'s
/// tables, `rest` after: without and with `--moe-kernel marlin`.
fn with_and_without_marlin(engine: &str, rest: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let usual = forward_json(engine, &tp8("gpt-oss-120b", rest));
    let mut args = tp8("gpt-oss-120b", rest);
    args.extend(["--moe-kernel", "marlin"]);
    (usual, forward_json(engine, &args))
}

/// A prefill of one 8192-token prompt.
const PREFILL_8192: [&str; 6] = [
    "--phase",
    "prefill",
    "--requests",
    "1",
    "--new-tokens",
    "8192",
];

/// `twin forward`'s JSON for `args` (on H100 with vLLM's tables).
fn forward_json(engine: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec![
        "forward",
        "--hardware",
        "h100",
        "--engine",
        engine,
        "--json",
    ];
    all.extend_from_slice(args);
    let o = twin(&all);
    assert!(o.status.success(), "{}", err(&o));
    json(&o)
}

/// `twin forward` arguments for `model` on one TP8 replica, then `rest`.
fn tp8<'a>(model: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["--model", model, "--tp", "8"];
    a.extend_from_slice(rest);
    a
}

/// Decode of 10 requests per rank with 2100 cached tokens each.
const DECODE_10_AT_2100: [&str; 6] = [
    "--phase",
    "decode",
    "--batch-per-rank",
    "10",
    "--context",
    "2100",
];

/// A GQA decode attention shape as the step model asks the tables for it.
fn decode_shape(
    batch: f64,
    head_dim: f64,
    context: f64,
    window: f64,
) -> sim::cost::tables::family::Shape {
    // TP8 of 64 query heads and 8 KV heads: 8 and 1 per GPU, a BF16 cache.
    sim::cost::tables::family::Shape::DecodeAttention {
        kernel: String::new(),
        batch,
        heads: 8.0,
        kv_heads: 1.0,
        head_dim,
        context,
        window,
        kv_fp8: false,
    }
}

fn h100() -> spec::hardware::Hardware {
    toml::from_str(&std::fs::read_to_string(repo().join("scenarios/hardware/h100.toml")).unwrap())
        .unwrap()
}

#[test]
fn forward_prices_gqa_decode_attention_at_the_tables_fit() {
    // Llama-3.1-70B, TP8 decode on H100 with vLLM's tables: 10 requests, each reading
    // its 2100 cached tokens and the new one, 64/8 = 8 query heads and 8/8 = 1 KV head
    // of 128 on each GPU, a BF16 cache, full attention; H100's in-situ factors leave a
    // tensor-parallel step's prices as they are: the `attention` line is 80 layers
    // times the fit's price of that shape.
    let j = forward_json("vllm", &tp8("llama-3.1-70b", &DECODE_10_AT_2100));
    let got = j["breakdown_ms"]["attention"].as_f64().unwrap();
    let per_layer = shipped("h100-vllm-0.24.0")
        .price_attention(&h100(), &decode_shape(10.0, 128.0, 2101.0, 0.0))
        .expect("vLLM's H100 tables time BF16-cache decode attention of head 128");
    let want = 80.0 * per_layer * 1e3;
    assert!((got / want - 1.0).abs() < 1e-6, "{got} ms, want {want} ms");
}

#[test]
fn forward_prices_gqa_prefill_attention_at_the_tables_fit() {
    // One 8192-token prompt of Llama-3.1-70B on TP8: 8192 x 8193 / 2 causal query-key
    // pairs (the diagonal included) are those of a prompt of sqrt(8192 x 8193) tokens in
    // the tables' accounting (L^2 / 2): 80 layers at the fit's price of that length.
    let j = forward_json(
        "vllm",
        &tp8(
            "llama-3.1-70b",
            &[
                "--phase",
                "prefill",
                "--batch-per-rank",
                "1",
                "--new-tokens",
                "8192",
            ],
        ),
    );
    let got = j["breakdown_ms"]["attention"].as_f64().unwrap();
    let shape = sim::cost::tables::family::Shape::PrefillAttention {
        kernel: String::new(),
        batch: 1.0,
        isl: (8192.0f64 * 8193.0).sqrt(),
        heads: 8.0,
        kv_heads: 1.0,
        head_dim: 128.0,
        window: 0.0,
        fp8: false,
        kv_fp8: false,
    };
    let per_layer = shipped("h100-vllm-0.24.0")
        .price_attention(&h100(), &shape)
        .expect("vLLM's H100 tables time BF16 prefill attention of head 128");
    let want = 80.0 * per_layer * 1e3;
    assert!((got / want - 1.0).abs() < 1e-6, "{got} ms, want {want} ms");
}

#[test]
fn forward_prices_sliding_window_layers_at_the_tables_window_fit() {
    // gpt-oss-120b alternates 18 sliding-window layers (128 tokens) with 18 full ones,
    // heads of 64, 64/8 = 8 query heads and 8/8 = 1 KV head per GPU on TP8. At decode
    // with 2100 cached tokens a full layer reads 2101 entries and a window layer 129
    // (the window and the new token): 18 x each fit's price.
    let j = forward_json("vllm", &tp8("gpt-oss-120b", &DECODE_10_AT_2100));
    let got = j["breakdown_ms"]["attention"].as_f64().unwrap();
    let t = shipped("h100-vllm-0.24.0");
    let price = |context: f64, window: f64| {
        t.price_attention(&h100(), &decode_shape(10.0, 64.0, context, window))
            .expect("vLLM's H100 tables time head-64 decode attention, full and windowed")
    };
    let want = 18.0 * (price(2101.0, 0.0) + price(129.0, 128.0)) * 1e3;
    assert!((got / want - 1.0).abs() < 1e-6, "{got} ms, want {want} ms");
    // Without the tables, twin's own attention model prices the same step.
    let own = forward_json("twin", &tp8("gpt-oss-120b", &DECODE_10_AT_2100))["breakdown_ms"]
        ["attention"]
        .as_f64()
        .unwrap();
    assert!(
        (own / want - 1.0).abs() > 1e-3,
        "{own} ms: the tables were not used"
    );
}

#[test]
fn a_band_moves_the_tables_prices_by_their_training_spread() {
    // Llama-3.1-70B's TP8 decode step with vLLM's tables is priced by them almost
    // whole (GEMMs, attention, all-reduce): its band has width, and the line says the
    // tables' prices move by their fits' training errors; without the all-reduce's
    // spread known to the hardware file, the tables' collective fits supply it.
    let o = twin(&[
        "forward",
        "--hardware",
        "h100",
        "--engine",
        "vllm",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "8",
        "--batch-per-rank",
        "10",
        "--context",
        "2100",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    let text = out(&o);
    let line = text
        .lines()
        .find(|l| l.starts_with("band p10-p90: "))
        .unwrap_or_else(|| panic!("no band line:\n{text}"));
    assert!(
        line.contains("the kernel tables' prices by their fits' training errors"),
        "{line}"
    );
    assert!(!line.contains("allreduce"), "{line}");
    let (lo, hi) = line["band p10-p90: ".len()..]
        .split(" ms")
        .next()
        .unwrap()
        .split_once('-')
        .unwrap();
    let (lo, hi): (f64, f64) = (lo.parse().unwrap(), hi.parse().unwrap());
    assert!(hi > lo * 1.01, "{line}");
}

#[test]
fn issue_38_block_fp8_gemms_on_vllm_tables_price_as_the_engine_runs_them() {
    // Llama-3.1-70B in block FP8 (128 x 128) on 8 B200, 4 decode requests: the vLLM
    // tables' block-FP8 rows were timed without CUDA graphs (the host's launch path,
    // not fitted), so its GEMMs price by the profile's per-tensor FP8 fit, as the
    // per-tensor checkpoint's do and TensorRT-LLM's block-FP8 tables do: a few ms of
    // dense GEMMs per step, not the 67.5 ms the eager rows gave.
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("l70-fp8.toml");
    let imported = twin(&[
        "model",
        "import",
        repo()
            .join("tests/fixtures/models-hf/Llama-3.1-70B/config.json")
            .to_str()
            .unwrap(),
        "--weights",
        "fp8",
        "--name",
        "l70-fp8",
        "--out",
        model.to_str().unwrap(),
    ]);
    assert!(imported.status.success(), "{}", err(&imported));
    let dense = |engine: &str| {
        let o = twin(&[
            "forward",
            "--hardware",
            "b200",
            "--engine",
            engine,
            "--model",
            model.to_str().unwrap(),
            "--tp",
            "8",
            "--requests",
            "4",
            "--context",
            "1024",
            "--no-band",
            "--json",
        ]);
        assert!(o.status.success(), "{}", err(&o));
        let j = json(&o);
        let cm = j["cost_model"].as_str().unwrap().to_string();
        (j["breakdown_ms"]["dense"].as_f64().unwrap(), cm)
    };
    let (vllm, cm) = dense("vllm");
    let (trtllm, _) = dense("trtllm");
    assert!(cm.contains("fp8_block GEMMs by its fp8 fit"), "{cm}");
    assert!(
        vllm < 1.25 * trtllm && trtllm < 1.25 * vllm,
        "{vllm} {trtllm}"
    );
}

#[test]
fn issue_38_mxfp4_experts_at_a_few_tokens_each_price_near_their_weight_read() {
    // gpt-oss-120b (MXFP4 experts) on 2 B200 (TP2), 32 decode requests: about 81 of the
    // 128 experts are hit per layer, 19 GB of expert weights a step per GPU, 2.4 ms at
    // 8 TB/s. TensorRT-LLM runs them with MXFP8 activations on Blackwell (its
    // `w4a8_mxfp4` tables: weight streaming, 153 us for 32 tokens on one B200), and
    // twin's own grouped GEMMs take small-M tiles: both within 1.6x of that read, where
    // they gave 16.0 ms (the BF16-activation tables, untuned) and 8.6 ms (64-row tiles).
    let moe = |engine: &str| {
        let o = twin(&[
            "forward",
            "--hardware",
            "b200",
            "--engine",
            engine,
            "--model",
            "gpt-oss-120b",
            "--tp",
            "2",
            "--requests",
            "32",
            "--context",
            "1024",
            "--no-band",
            "--json",
        ]);
        assert!(o.status.success(), "{}", err(&o));
        let j = json(&o);
        let read_ms = j["moe_weight_bytes_per_rank"].as_f64().unwrap() / 8e12 * 1e3;
        (j["breakdown_ms"]["moe"].as_f64().unwrap(), read_ms)
    };
    for engine in ["trtllm", "twin"] {
        let (ms, read) = moe(engine);
        assert!(read > 2.0 && read < 3.0, "{engine}: {read} ms of reads");
        assert!(
            ms < 1.6 * read,
            "{engine}: {ms} ms against {read} ms of reads"
        );
    }
}
