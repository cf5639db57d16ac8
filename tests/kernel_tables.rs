//! Measured kernel tables: `twin calibrate --from-tables` fits a profile to the tests'
//! extract of AIConfigurator's H100 TensorRT-LLM tables (tests/fixtures/kernel-tables)
//! and meets the held-out targets on it; the shipped profiles load, name their source
//! and meet them on the full tables; `--engine` names them (and what it borrows or
//! substitutes), refuses a bad or corrupt one, and `--tables-out` writes tables it reads
//! back. What they price step by step: `tests/kernel_tables_pricing.rs`.

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

/// `twin forward --json` of a decode step of Llama-3.1-70B on 8 x H100 (TP8, 64
/// requests at 2,048 tokens of context), priced by `engine`.
fn forward_llama70b_tp8(engine: &str) -> std::process::Output {
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
}

#[test]
fn forward_names_the_tables_it_prices_with() {
    let (a, b) = (forward_llama70b_tp8("trtllm"), forward_llama70b_tp8("twin"));
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

#[test]
fn tables_laid_over_an_engines_keep_their_own_fits_and_take_the_rest() {
    // `--from-tables ... --base vllm`: the extract's TensorRT-LLM fits (GEMMs of its
    // formats, decode attention, MoE, collectives) stay; vLLM's H100 tables price what
    // the extract has no fit for (prefill attention, GEMM formats it lacks), and the
    // cost model's line says which is which.
    let dir = tempfile::tempdir().unwrap();
    let (own, laid) = (dir.path().join("own.toml"), dir.path().join("laid.toml"));
    calibrate_own_and_laid(&own, &laid);
    let (own, laid) = (read_tables(&own), read_tables(&laid));
    assert!(own.base.is_none());
    let base = laid.base.as_ref().expect("a base section");
    assert!(
        base.tables
            .starts_with("vllm 0.24.0 kernel tables of h100_sxm"),
        "{base:?}"
    );
    // Every own fit is kept, and none of vLLM's for a family the extract fits (but GEMMs).
    assert_laid_keeps_own_fits(&own, &laid);
    let path = dir.path().join("laid.toml");
    // Checked against vLLM's shipped tables, the tables it is laid over (not twin's
    // kernel model, against which vLLM's own attention prices 7x slower): not refused.
    let (text, _) = runs(&[
        "forward",
        "--hardware",
        "h100",
        "--model",
        "llama-3.1-8b",
        "--tp",
        "1",
        "--engine",
        path.to_str().unwrap(),
    ]);
    assert!(
        text.contains("decode attention, moe, collective measured; the rest by vllm 0.24.0 kernel tables of h100_sxm"),
        "{text}"
    );
    // --base goes with the tables' commands only.
    assert_base_is_refused_without_tables(&path);
}

/// Calibrates the H100 TensorRT-LLM extract into `own` (no base) and into `laid`
/// (laid over vLLM's tables), asserting both succeed.
fn calibrate_own_and_laid(own: &std::path::Path, laid: &std::path::Path) {
    let fx = fixture();
    for (out, base) in [(own, None), (laid, Some("vllm"))] {
        let mut args = vec!["calibrate", "--from-tables", &fx];
        args.extend(H100_TRTLLM);
        args.extend(["--out", out.to_str().unwrap()]);
        if let Some(b) = base {
            args.extend(["--base", b]);
        }
        runs(&args);
    }
}

/// Reads a kernel-tables file.
fn read_tables(p: &std::path::Path) -> sim::cost::tables::KernelTables {
    toml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Asserts that `laid` keeps every fit of `own` and adds some, none of them (but
/// GEMMs) of a family `own` fits.
fn assert_laid_keeps_own_fits(
    own: &sim::cost::tables::KernelTables,
    laid: &sim::cost::tables::KernelTables,
) {
    for f in &own.fits {
        assert!(laid.fits.contains(f), "{} {}", f.family.name(), f.key);
    }
    let added: Vec<_> = laid.fits.iter().filter(|f| !own.fits.contains(f)).collect();
    assert!(!added.is_empty());
    for f in &added {
        let owned = own.fits.iter().any(|o| o.family == f.family);
        assert!(
            !owned || f.family == sim::cost::tables::family::Family::Gemm,
            "{} {}",
            f.family.name(),
            f.key
        );
    }
}

/// Asserts that `--base` on a command other than the tables' is refused, saying why.
fn assert_base_is_refused_without_tables(path: &std::path::Path) {
    let args = [
        "calibrate",
        "--device",
        "cpu",
        "--out",
        path.to_str().unwrap(),
        "--base",
        "vllm",
    ];
    refused(
        &args,
        &["--base lays measured kernel tables over an engine's"],
    );
}

/// `forward` prices a step as the engine runs it by default: vLLM before 0.14.0 forms
/// each step after the last ends (async scheduling was opt-in), so its host work (0.3 ms
/// + 21 us a request) is exposed whole; from 0.14.0 only the 0.25 ms hand-over gap is.
#[test]
fn forward_exposes_the_host_work_of_vllm_before_async_scheduling() {
    let overhead = |engine: &str| -> f64 {
        let o = forward_llama70b_tp8(engine);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["breakdown_ms"]["overhead"].as_f64().unwrap()
    };
    assert!((overhead("vllm@0.15.0") - 0.25).abs() < 1e-9);
    assert!((overhead("vllm@0.12.0") - (0.3 + 64.0 * 0.021)).abs() < 1e-9);
}
