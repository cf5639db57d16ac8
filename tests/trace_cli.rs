//! `twin calibrate --from-trace`: text, JSON, the per-layer lines, and clean refusals.

mod common;

use common::{json, refused, repo, runs, twin, write};

fn fixture(name: &str) -> String {
    repo()
        .join("calibration/tests/data/traces")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn the_text_report_of_the_vllm_trace_names_its_layers_and_categories() {
    let f = fixture("vllm-b200-gpt-oss-120b-tp8-prefill.json.gz");
    let (out, _) = runs(&["calibrate", "--from-trace", &f]);
    assert!(out.starts_with(&format!("trace: {f}\n")), "{out}");
    assert!(
        out.contains("\nlayers: 36, from one \"vllm::unified_attention_with_output\" per layer"),
        "{out}"
    );
    assert!(out.contains("\nmean layer (of 36): "), "{out}");
    for c in ["moe ", "attention ", "gemm ", "allreduce ", "launch "] {
        assert!(out.lines().any(|l| l.starts_with(c)), "no {c}row:\n{out}");
    }
    assert!(out.contains("\nunmapped kernels: none\n"), "{out}");
    // No per-layer lines without --layers-detail; 36 with it.
    assert!(!out.contains("ms by stream:category"));
    let (detail, _) = runs(&["calibrate", "--from-trace", &f, "--layers-detail"]);
    let after = detail
        .split("ms by stream:category\n")
        .nth(1)
        .expect("a per-layer table");
    let rows = after.lines().take_while(|l| !l.is_empty()).count();
    assert_eq!(rows, 36, "{detail}");
}

#[test]
fn json_holds_the_same_figures_as_the_library() {
    let f = fixture("twin-two-streams.json");
    let v = json(&twin(&["calibrate", "--from-trace", &f, "--json"]));
    assert_eq!(v["layers_found"], 2);
    assert_eq!(v["micro_batches"], 2);
    assert_eq!(v["layer_source"]["kind"], "gpu_ranges");
    assert!(v["layer_source_text"]
        .as_str()
        .unwrap()
        .starts_with("GPU annotation ranges"));
    assert!(v.get("per_layer").is_none());
    // Mean layer: 100 us wall; compute bubble 10 us (derived by hand in
    // calibration/tests/trace_import.rs).
    assert!((v["layer"]["layer_s"].as_f64().unwrap() - 100e-6).abs() < 1e-12);
    let bubble = v["layer"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["stream"] == "compute" && e["category"] == "bubble")
        .unwrap();
    assert!((bubble["seconds"].as_f64().unwrap() - 10e-6).abs() < 1e-12);
    assert_eq!(v["unmapped"][0]["name"], "mystery_kernel");
    let d = json(&twin(&[
        "calibrate",
        "--from-trace",
        &f,
        "--json",
        "--layers-detail",
    ]));
    assert_eq!(d["per_layer"].as_array().unwrap().len(), 2);
}

#[test]
fn a_rules_file_maps_what_the_shipped_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let rules = write(
        dir.path(),
        "mine.toml",
        "[[rule]]\nmatch = '^mystery_'\ncategory = \"gather\"\n",
    );
    let f = fixture("twin-two-streams.json");
    let (out, _) = runs(&[
        "calibrate",
        "--from-trace",
        &f,
        "--rules",
        rules.to_str().unwrap(),
    ]);
    assert!(out.contains("\nunmapped kernels: none\n"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("gather ")), "{out}");
    let bad = write(
        dir.path(),
        "bad.toml",
        "[[rule]]\nmatch = '^x'\ncategory = \"tea\"\n",
    );
    refused(
        &[
            "calibrate",
            "--from-trace",
            &f,
            "--rules",
            bad.to_str().unwrap(),
        ],
        &["bad.toml: rule 1 (match = \"^x\"): unknown category \"tea\""],
    );
}

#[test]
fn bad_inputs_and_mixed_forms_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let cut = write(
        dir.path(),
        "cut.json",
        "{\"traceEvents\": [{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"ts\":1,\"dur\":1},",
    );
    refused(
        &["calibrate", "--from-trace", cut.to_str().unwrap()],
        &["cut.json: invalid trace JSON in event 1"],
    );
    refused(
        &["calibrate", "--from-trace", "nope.json"],
        &["nope.json: "],
    );
    let f = fixture("twin-two-streams.json");
    refused(
        &["calibrate", "--from-trace", &f, "--device", "cpu"],
        &["'--from-trace <FILE>' cannot be used with '--device <DEVICE>'"],
    );
    refused(
        &["calibrate", "--json", "--device", "cpu", "--out", "x"],
        &["go with --from-trace FILE"],
    );
    refused(&["calibrate"], &["--device <DEVICE>", "--out <OUT>"]);
}

/// A fit to a real trace prints each factor's spread over the trace's layers as the
/// `[cost.spread]` keys that draw forward's band: the log-normal standard deviation of
/// the factor's coefficient of variation in the JSON.
#[test]
fn a_fit_prints_its_factors_spreads_for_the_band() {
    let f = fixture("vllm-b200-gpt-oss-120b-tp8-prefill.json.gz");
    let dep = "--hardware b200 --model gpt-oss-120b --tp 8 --dep 1 --phase prefill --requests 1 --new-tokens 888";
    let (out, _) = runs(&["calibrate", "--from-trace", &f, "--deployment", dep]);
    let line = out
        .lines()
        .find(|l| l.starts_with("their spread over the trace's layers"))
        .unwrap_or_else(|| panic!("{out}"));
    let v = json(&twin(&[
        "calibrate",
        "--from-trace",
        &f,
        "--deployment",
        dep,
        "--json",
    ]));
    let rows = v["in_situ_fit"]["factors"].as_array().expect("factors");
    let moe = rows.iter().find(|r| r["category"] == "moe").unwrap();
    let cv = moe["cv"].as_f64().unwrap();
    assert!(cv > 0.0, "{moe}");
    let sd = (1.0 + cv * cv).ln().sqrt();
    assert!(
        line.contains(&format!("\"in_situ.moe\" = {sd:.4}")),
        "{line}"
    );
    // A category without an in-situ key (the all-reduce) has no spread to give.
    assert!(!line.contains("allreduce"), "{line}");
}

/// The deployment of vLLM's eager gpt-oss-120b trace, in `twin forward`'s flags.
const EAGER_DEPLOYMENT: &str = "--hardware b200 --model gpt-oss-120b --tp 8 --dep 1 --phase prefill --requests 1 --new-tokens 888";

/// `calibrate --from-trace` of vLLM's eager gpt-oss-120b trace against its deployment,
/// the section written to `out`: what it prints.
fn eager_trace_fitted(out: &str) -> String {
    let f = fixture("vllm-b200-gpt-oss-120b-tp8-prefill.json.gz");
    let args = [
        "calibrate",
        "--from-trace",
        &f,
        "--deployment",
        EAGER_DEPLOYMENT,
        "--out",
        out,
    ];
    runs(&args).0
}

/// The eager trace's layers were bound by the host launching kernels: the section's
/// host time a kernel (over twin's kernels a layer) prices the step as the trace's 36
/// layers took it, 36 x 2.102 ms, within the rest twin prices beside them.
#[test]
fn an_eager_traces_host_time_prices_its_step() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("host.toml");
    let out = out.to_str().unwrap();
    let text = eager_trace_fitted(out);
    let dep = EAGER_DEPLOYMENT;
    assert!(
        text.contains("host: launching kernels held 85% of the traced layer"),
        "{text}"
    );
    assert!(text.contains(" --set cost.launch.eager_s="), "{text}");
    let mut args: Vec<&str> = vec!["forward", "--json", "--profile", out];
    args.extend(dep.split(' '));
    let step = json(&twin(&args))["step_ms"].as_f64().unwrap();
    assert!((step / (36.0 * 2.102) - 1.0).abs() < 0.02, "{step}");
}

/// The `[in_situ]` section `--out` writes is a profile: `forward --profile SECTION`
/// prices exactly as the printed `--set` flags do, and its band draws the section's
/// spreads.
#[test]
fn the_written_section_prices_as_its_set_flags() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("insitu.toml");
    let out = out.to_str().unwrap();
    let text = eager_trace_fitted(out);
    let dep = EAGER_DEPLOYMENT;
    let sets: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("price with them: "))
        .unwrap_or_else(|| panic!("{text}"))
        .split(' ')
        .filter(|w| *w != "--set")
        .collect();
    assert!(
        sets.iter()
            .any(|s| s.starts_with("cost.in_situ.prefill.moe=")),
        "{sets:?}"
    );
    let step = |extra: &[&str]| {
        let mut args: Vec<&str> = vec!["forward", "--json"];
        args.extend(dep.split(' '));
        args.extend_from_slice(extra);
        json(&twin(&args))
    };
    let mut flagged = Vec::new();
    for s in &sets {
        flagged.extend(["--set", s]);
    }
    let by_flags = step(&flagged);
    let by_profile = step(&["--profile", out]);
    // The flags print 4 decimals: the same step within their rounding.
    let (a, b) = (
        by_flags["step_ms"].as_f64().unwrap(),
        by_profile["step_ms"].as_f64().unwrap(),
    );
    assert!((a - b).abs() <= 1e-4 * a, "{a} {b}");
    assert!(by_profile["cost_model"]
        .as_str()
        .unwrap()
        .contains("in-situ factors of trace vllm-b200-gpt-oss-120b-tp8-prefill.json.gz"));
    let (text, _) = runs(&[
        "forward",
        "--hardware",
        "b200",
        "--model",
        "gpt-oss-120b",
        "--tp",
        "8",
        "--dep",
        "1",
        "--phase",
        "prefill",
        "--requests",
        "1",
        "--new-tokens",
        "888",
        "--profile",
        out,
    ]);
    assert!(
        text.contains("; in-situ spreads of moe, attention, gemm, elementwise)"),
        "{text}"
    );
}

/// The five-stage decode pipeline's predicted trace reads back as it was priced: its
/// stages named in forward's timeline, the low-latency kernels' send and receive
/// halves as the dispatch and combine (no kernel while the data flies), and an unknown
/// schedule refused.
#[test]
fn a_five_stage_trace_reads_back_its_low_latency_halves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("five.json");
    let path = path.to_str().unwrap();
    let dep = "--hardware h800 --model deepseek-v3 --phase decode --dep 128 --batch-per-rank 64 --context 4096 --pipeline five-stage";
    let mut args: Vec<&str> = vec!["forward"];
    args.extend(dep.split(' '));
    args.extend(["--no-band", "--trace-out", path]);
    let (out, _) = runs(&args);
    assert!(
        out.contains("two micro-batches in the five-stage pipeline"),
        "{out}"
    );
    assert!(out.contains(", K0 ") && out.contains(", R1 "), "{out}");
    let v = json(&twin(&[
        "calibrate",
        "--from-trace",
        path,
        "--deployment",
        dep,
        "--json",
    ]));
    let rows = v["in_situ_fit"]["factors"].as_array().expect("factors");
    for cat in ["dispatch", "combine"] {
        let r = rows.iter().find(|r| r["category"] == cat).unwrap();
        let (m, t) = (
            r["measured_ms"].as_f64().unwrap(),
            r["twin_ms"].as_f64().unwrap(),
        );
        assert!((m - t).abs() < 1e-6, "{r}");
    }
    // The H800's own in-situ attention factor, read back.
    let h800: toml::Value = std::fs::read_to_string(repo().join("scenarios/hardware/h800.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let stored = h800["cost"]["in_situ.decode.attention"].as_float().unwrap();
    let r = rows.iter().find(|r| r["category"] == "attention").unwrap();
    assert!((r["factor"].as_f64().unwrap() - stored).abs() < 1e-4, "{r}");
    // On one stream the waits for the transfers are gaps between kernels: read back as
    // launch time, priced as twin's launch gaps and compute-stream bubble together
    // (twin's own launch gaps alone are 0.03 ms of the layer's 0.5).
    let launch = rows.iter().find(|r| r["category"] == "launch").unwrap();
    let ratio = launch["measured_ms"].as_f64().unwrap() / launch["twin_ms"].as_f64().unwrap();
    assert!((0.5..2.0).contains(&ratio), "{launch}");
    refused(
        &["forward", "--model", "deepseek-v3", "--pipeline", "five"],
        &["\"five\": expected two-batch or five-stage"],
    );
    let five = [
        "forward",
        "--model",
        "deepseek-v3",
        "--pipeline",
        "five-stage",
    ];
    refused(
        &[&five[..], &["--phase", "prefill"]].concat(),
        &["--pipeline five-stage schedules decode steps"],
    );
    refused(
        &[&five[..], &["--phase", "decode", "--no-overlap"]].concat(),
        &["--no-overlap runs none"],
    );
}
