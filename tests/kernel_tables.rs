//! Measured kernel tables: `twin calibrate --from-tables` fits a profile to the tests'
//! extract of AIConfigurator's H100 TensorRT-LLM tables (tests/fixtures/kernel-tables)
//! and meets the held-out targets on it; the shipped profiles load, name their source
//! and meet them on the full tables; `--engine` prices with them and says so.

mod common;

use common::*;

fn fixture() -> String {
    repo()
        .join("tests/fixtures/kernel-tables")
        .to_str()
        .unwrap()
        .to_string()
}

const H100_TRTLLM: [&str; 6] = [
    "--system",
    "h100_sxm",
    "--engine",
    "trtllm",
    "--engine-version",
    "1.3.0rc20",
];

#[test]
fn a_fit_on_the_extract_meets_the_held_out_targets() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("h100.toml.gz");
    let mut args = vec!["calibrate", "--from-tables"];
    let fx = fixture();
    args.push(&fx);
    args.extend(H100_TRTLLM);
    args.extend(["--json", "--out", out.to_str().unwrap()]);
    let o = twin(&args);
    assert!(o.status.success(), "{}", err(&o));
    let j = json(&o);
    let checks = j["checks"].as_array().unwrap();
    let families: Vec<&str> = checks
        .iter()
        .map(|c| c["family"].as_str().unwrap())
        .collect();
    assert_eq!(
        families,
        ["gemm", "decode_attention", "moe", "collective"],
        "{families:?}"
    );
    for c in checks {
        let (f, p) = (&c["fitted"], &c["physics"]);
        let fam = c["family"].as_str().unwrap();
        assert!(f["rows"].as_u64().unwrap() >= 20, "{fam}: {c}");
        assert!(f["median"].as_f64().unwrap() <= 0.10, "{fam}: {c}");
        assert!(f["within_20"].as_f64().unwrap() >= 0.80, "{fam}: {c}");
        // The correction improves on the physics alone.
        assert!(f["median"].as_f64() <= p["median"].as_f64(), "{fam}: {c}");
    }
    // Provenance: every file read, with rows and hash.
    let files = j["source"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 5, "{files:?}");
    assert!(files
        .iter()
        .all(|f| f["sha256"].as_str().unwrap().len() == 64));
    assert!(j["source"]["license"].as_str().unwrap().contains("Apache"));
    // The written profile prices a GEMM through --engine PATH, and says so.
    let k = twin(&[
        "kernel",
        "gemm",
        "--hardware",
        "h100",
        "--m",
        "4096",
        "--n",
        "4096",
        "--k",
        "4096",
        "--dtype",
        "bf16",
        "--engine",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(k.status.success(), "{}", err(&k));
    let kj = json(&k);
    let cm = kj["cost_model"].as_str().unwrap();
    assert!(
        cm.contains("trtllm 1.3.0rc20 kernel tables of h100_sxm"),
        "{cm}"
    );
}

/// A shipped profile, as `--engine` loads it.
fn shipped(name: &str) -> sim::cost::tables::KernelTables {
    use std::io::Read;
    let path = repo().join(format!("scenarios/kernel-tables/{name}.toml.gz"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    toml::from_str(&text).unwrap()
}

#[test]
fn the_shipped_h100_profile_prices_the_extract_as_measured() {
    // The extract's rows are rows of the full tables the shipped profile was fitted to
    // (training and held-out alike): it prices them within a few percent; twin's own
    // kernel model, fitted to DeepGEMM's FP8 tables, does not price these libraries'
    // BF16 GEMMs as well.
    let hw: spec::hardware::Hardware = toml::from_str(
        &std::fs::read_to_string(repo().join("scenarios/hardware/h100.toml")).unwrap(),
    )
    .unwrap();
    let prof = shipped("h100-trtllm-1.3.0rc20");
    assert_eq!(
        (prof.hardware.as_str(), prof.engine.as_str()),
        ("h100", "trtllm")
    );
    let sel = calibration::tables::Selection {
        system: "h100_sxm".into(),
        engine: "trtllm".into(),
        version: "1.3.0rc20".into(),
    };
    let read =
        calibration::tables::read(&repo().join("tests/fixtures/kernel-tables"), &sel).unwrap();
    let mut by_family: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for m in &read.rows {
        let t = prof
            .price(&hw, &m.shape)
            .expect("the profile covers the extract's keys");
        by_family
            .entry(m.shape.family().name())
            .or_default()
            .push(t / m.seconds - 1.0);
    }
    for (fam, e) in &by_family {
        let s = calibration::tables::fit::errors(e);
        assert!(s.median <= 0.05 && s.within_20 >= 0.9, "{fam}: {s:?}");
    }
    // And through the command line: `kernel gemm --engine trtllm` is the profile's
    // price of the shape.
    let o = twin(&[
        "kernel",
        "gemm",
        "--hardware",
        "h100",
        "--m",
        "1024",
        "--n",
        "4096",
        "--k",
        "16384",
        "--dtype",
        "bf16",
        "--engine",
        "trtllm",
        "--json",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    let cli = json(&o)["time_us"].as_f64().unwrap() * 1e-6;
    let shape = sim::cost::tables::family::Shape::Gemm {
        kernel: String::new(),
        format: sim::cost::tables::format::Format::Bf16,
        m: 1024.0,
        n: 4096.0,
        k: 16384.0,
    };
    let direct = prof
        .gemm_fit(sim::cost::tables::format::Format::Bf16)
        .unwrap()
        .price(&hw, &shape);
    assert!((cli / direct - 1.0).abs() < 1e-9, "{cli} {direct}");
}

#[test]
fn every_shipped_profile_meets_the_held_out_targets() {
    // The profiles store their own held-out errors on the full tables (refit with
    // scripts/fit-kernel-tables.sh); each GPU x engine, each family: median at most 10%,
    // at least 80% of rows within 20%.
    let dir = repo().join("scenarios/kernel-tables");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".toml.gz") else {
            continue;
        };
        let p = shipped(stem);
        assert_eq!(stem, format!("{}-{}-{}", p.hardware, p.engine, p.version));
        assert!(
            p.source.commit.len() == 40 && p.source.license.contains("Apache"),
            "{stem}"
        );
        assert!(p.checks.len() >= 4, "{stem}: {:?}", p.checks);
        for c in &p.checks {
            assert!(c.fitted.rows >= 50, "{stem} {:?}", c);
            assert!(
                c.fitted.median <= 0.10 && c.fitted.within_20 >= 0.80,
                "{stem} {:?}",
                c
            );
        }
        n += 1;
    }
    assert_eq!(n, 10);
}

#[test]
fn forward_names_the_tables_it_prices_with() {
    let args = |engine: &str| {
        twin(&[
            "forward",
            "--hardware",
            "h100",
            "--model",
            "llama-3.1-70b",
            "--tp",
            "8",
            "--phase",
            "decode",
            "--batch-per-rank",
            "64",
            "--context",
            "2048",
            "--engine",
            engine,
            "--json",
        ])
    };
    let (a, b) = (args("trtllm"), args("twin"));
    assert!(a.status.success(), "{}", err(&a));
    assert!(b.status.success(), "{}", err(&b));
    let (ja, jb) = (json(&a), json(&b));
    let src = ja["cost_model"].as_str().unwrap_or_default().to_string()
        + ja["source"].as_str().unwrap_or_default();
    assert!(src.contains("kernel tables"), "{ja}");
    assert_ne!(ja["step_ms"], jb["step_ms"]);
}

/// TensorRT-LLM's NVFP4 GEMM rows were timed outside its autotuner (the default
/// tactic), so its NVFP4 dense GEMMs are priced by the same GPU's vLLM fit, and the
/// cost model says so; its other formats keep its own rows.
#[test]
fn tensorrt_llm_nvfp4_gemms_are_priced_by_vllms_fit() {
    let gemm = |engine: &str, dtype: &str| {
        let o = twin(&[
            "kernel",
            "gemm",
            "--hardware",
            "b200",
            "--m",
            "8",
            "--n",
            "8192",
            "--k",
            "28672",
            "--dtype",
            dtype,
            "--engine",
            engine,
            "--json",
        ]);
        assert!(o.status.success(), "{}", err(&o));
        json(&o)
    };
    let (trt, vllm) = (gemm("trtllm", "fp4"), gemm("vllm", "fp4"));
    assert_eq!(trt["time_us"], vllm["time_us"], "{trt}\n{vllm}");
    let line = trt["cost_model"].as_str().unwrap();
    assert!(
        line.contains("nvfp4 GEMMs by vllm 0.24.0's fit") && line.contains("autotuner"),
        "{line}"
    );
    // The shipped vLLM profile's own price of the shape, unchanged by the loan.
    let hw: spec::hardware::Hardware = toml::from_str(
        &std::fs::read_to_string(repo().join("scenarios/hardware/b200.toml")).unwrap(),
    )
    .unwrap();
    let shape = sim::cost::tables::family::Shape::Gemm {
        kernel: String::new(),
        format: sim::cost::tables::format::Format::Nvfp4,
        m: 8.0,
        n: 8192.0,
        k: 28672.0,
    };
    let own = shipped("b200-vllm-0.24.0");
    let fit = own
        .gemm_fit(sim::cost::tables::format::Format::Nvfp4)
        .unwrap();
    let t = trt["time_us"].as_f64().unwrap() * 1e-6;
    assert!((t / fit.price(&hw, &shape) - 1.0).abs() < 1e-6, "{t}");
    // BF16 keeps TensorRT-LLM's own rows: the engines' prices differ.
    assert_ne!(
        gemm("trtllm", "bf16")["time_us"],
        gemm("vllm", "bf16")["time_us"]
    );
}

/// Issue 39 item 7: an engine without tables on a GPU is no error (it was): its
/// scheduler and host terms apply, its kernels are priced by the nearest tables (a
/// shipped version nearest the one named; SGLang's by vLLM's) or twin's own model,
/// and the cost model's line says which.
#[test]
fn engines_without_tables_price_from_the_nearest() {
    let line = |args: &[&str]| {
        let mut all = vec!["simulate", "h100-llama-3.1-70b-tp8", "--duration", "20"];
        all.extend(args);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_twin"))
            .args(&all)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", err(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        out.lines()
            .find(|l| l.contains("cost model:"))
            .unwrap_or_default()
            .to_string()
    };
    let l = line(&["--set", "engine=sglang"]);
    assert!(
        l.contains("vllm 0.24.0 kernel tables")
            && l.contains("engine sglang: its scheduler and host terms, kernels priced by vLLM 0.24.0's tables"),
        "{l}"
    );
    // a100 carries h100's tables (`kernels_from`); h800 carries none.
    let l = line(&["--set", "hardware=a100"]);
    assert!(
        l.contains("vllm 0.24.0 kernel tables of h100_sxm, carried to a100"),
        "{l}"
    );
    let l = line(&["--set", "hardware=h800"]);
    assert!(
        l.contains(
            "kernels priced by twin's own model: no vllm kernel tables are shipped for h800"
        ),
        "{l}"
    );
    let l = line(&["--engine", "vllm@0.11.0"]);
    assert!(
        l.contains("kernels priced by vllm 0.24.0's tables, the nearest shipped for h100 (vllm 0.11.0 has none)"),
        "{l}"
    );
}

#[test]
fn bad_choices_say_what_exists() {
    refused(
        &["forward", "--engine", "tables/none.toml"],
        &["--engine tables/none.toml: cannot read it"],
    );
    let fx = fixture();
    refused(
        &[
            "calibrate",
            "--from-tables",
            &fx,
            "--system",
            "h999",
            "--engine-version",
            "1",
        ],
        &["no system \"h999\"", "found: h100_sxm"],
    );
    refused(
        &[
            "calibrate",
            "--from-tables",
            &fx,
            "--system",
            "h100_sxm",
            "--engine",
            "vllm",
            "--engine-version",
            "0.24.0",
        ],
        &["no vllm 0.24.0 tables", "engines here: trtllm"],
    );
}

#[test]
fn a_corrupt_profile_is_refused_with_where() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.toml");
    let fx = fixture();
    let mut args = vec!["calibrate", "--from-tables", &fx];
    args.extend(H100_TRTLLM);
    args.extend(["--out", out.to_str().unwrap()]);
    let o = twin(&args);
    assert!(o.status.success(), "{}", err(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    // Cut the first correction grid to two values.
    let at = text.find("values = \"").unwrap() + "values = \"".len();
    let end = at + text[at..].find('"').unwrap();
    let bad = format!("{}1 2{}", &text[..at], &text[end..]);
    let path = dir.path().join("bad.toml");
    let gemm = [
        "kernel",
        "gemm",
        "--hardware",
        "h100",
        "--m",
        "64",
        "--n",
        "64",
        "--k",
        "64",
        "--engine",
        path.to_str().unwrap(),
    ];
    std::fs::write(&path, bad).unwrap();
    refused(
        &gemm,
        &["invalid kernel-table profile", "correction grid of"],
    );
    std::fs::write(&path, "system = 1").unwrap();
    refused(&gemm, &["not a kernel-table profile"]);
}

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

#[test]
fn tables_out_writes_tables_that_engine_dir_prices_with_and_checks() {
    // The whole `--tables-out` pipeline on the CPU (twin's f32 reference GEMM stands in
    // for cuBLASLt: same shapes, timing, tables, fit): tables in the shipped layout and
    // a profile that `--engine DIR` loads. CPU timings priced as an H200's are far
    // slower than its kernel model, so `forward` refuses them, naming the op and the
    // ratio, until --allow-slow-profile.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("measured");
    let ds = d.to_str().unwrap();
    let (o, e) = runs(&[
        "calibrate",
        "--device",
        "cpu",
        "--tables-out",
        ds,
        "--hardware",
        "h200",
        "--model",
        "tiny-moe",
        "--batches",
        "1,2,4,8",
        "--smoke",
    ]);
    assert!(e.contains("not a production library"), "{e}");
    assert!(
        o.contains("not measured") && o.contains("communication: not measured"),
        "{o}"
    );
    let csv = d.join("h200_sxm/gemm/measured");
    let version = std::fs::read_dir(&csv)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(version.join("gemm_perf.csv")).unwrap();
    assert!(
        text.starts_with("framework,version,device,kernel_source,gemm_dtype,m,n,k,latency"),
        "{text}"
    );
    assert!(
        text.contains(",fp8,") && text.contains(",bfloat16,"),
        "{text}"
    );
    assert!(d.join("kernel-tables.toml").is_file());
    let step = [
        "forward",
        "--hardware",
        "h200",
        "--model",
        "tiny-moe",
        "--dep",
        "1",
        "--batch-per-rank",
        "4",
        "--context",
        "128",
        "--engine",
        ds,
    ];
    refused(
        &step,
        &["--engine", "x slower than twin's kernel model of h200"],
    );
    let mut allowed = step.to_vec();
    allowed.push("--allow-slow-profile");
    let (o, _) = runs(&allowed);
    assert!(
        o.contains("measured") && o.contains("--allow-slow-profile"),
        "{o}"
    );
}

#[test]
fn tables_out_on_cuda_without_a_driver_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("t");
    let o = twin(&[
        "calibrate",
        "--device",
        "cuda:0",
        "--tables-out",
        d.to_str().unwrap(),
        "--hardware",
        "h200",
        "--model",
        "tiny-moe",
        "--batches",
        "1",
        "--smoke",
    ]);
    let e = err(&o);
    assert!(!e.contains("panicked"), "{e}");
    if !o.status.success() {
        // No GPU here (CI): the driver check names the cause.
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.contains("no CUDA driver found") || e.contains("CUDA device 0"),
            "{e}"
        );
    }
}
