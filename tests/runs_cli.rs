//! Measured runs at the command line: `twin runs import` reads AIConfigurator's CSV and
//! benchmark clients' result files into a corpus, `twin validate runs` prices every
//! record it can and lists every other with its reason, `twin calibrate --from-runs`
//! writes a profile that `simulate --profile` prices with.

mod common;

use common::*;

fn fixture(rel: &str) -> String {
    repo().join(rel).to_str().unwrap().to_string()
}

/// The hand-made rows: the duplicate folds, the pipeline-parallel and the worker-less
/// disaggregated rows are kept as records and refused at pricing with their reasons;
/// the one left is priced (both its TTFT and TPOT compared).
/// `twin simulate h100-gpt-oss-120b-tp8 --duration 20` with `extra` flags, which must
/// succeed.
/// The gpt-oss deployment at 256 users (below vLLM's largest CUDA graph, 512 a rank:
/// its 1,024 would be host-launched and finish nothing in 20 s).
fn simulate_gpt_oss(extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "simulate",
        "h100-gpt-oss-120b-tp8",
        "--duration",
        "20",
        "--set",
        "workload.closed_loop.concurrency=256",
    ];
    args.extend_from_slice(extra);
    let o = twin(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    o
}

#[test]
fn an_aic_csv_imports_and_validates_with_every_refusal_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.jsonl");
    let out_s = out.to_str().unwrap();
    let csv = fixture("tests/fixtures/runs/aic-rows.csv");
    let o = twin(&["runs", "import", &csv, "--out", out_s]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("3 records (1 rows folded in"),
        "{}",
        stderr(&o)
    );
    let o = twin(&["validate", "runs", out_s]);
    let text = stdout(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(text.contains("priced 1 of 3"), "{text}");
    assert!(
        text.contains("pipeline parallelism (pp 2) is not modelled"),
        "{text}"
    );
    assert!(text.contains("the record gives no worker count"), "{text}");
    let v = json(&twin(&["validate", "runs", out_s, "--json"]));
    let recs = v["records"].as_array().unwrap();
    assert_eq!(recs.len(), 3);
    let priced = &recs[0];
    assert_eq!(priced["id"], "hand_l8b_h100_trtllm_c4");
    let metrics: Vec<&str> = priced["compared"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["ttft_ms", "tpot_ms"]);
    assert!(priced["pricing"].as_str().unwrap().contains("trtllm"));
    // Its throughput's weight arithmetic is a share of its GPUs' peak; the records
    // that cannot be set up have none.
    let share = priced["implied_peak_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 0.8, "{share}");
    assert!(recs[1]["implied_peak_share"].is_null());
    assert!(!text.contains("implausible as described"), "{text}");
    assert_eq!(v["center"], "mean");
    assert_eq!(v["summary"][0][0]["records"], 3);
    assert_eq!(v["summary"][0][0]["priced"], 1);
}

/// `validate runs --steps-out --requests-out` writes each priced record's simulated
/// steps and requests, named by its id, and none for the records it cannot price; the
/// table is the same as without them. Every prompt token the requests hold was
/// prefilled in some step.
#[test]
fn validate_runs_writes_each_priced_records_steps_and_requests() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("c.jsonl");
    let csv = fixture("tests/fixtures/runs/aic-rows.csv");
    let c = corpus.to_str().unwrap();
    assert!(twin(&["runs", "import", &csv, "--out", c]).status.success());
    let (steps, reqs) = (dir.path().join("steps"), dir.path().join("reqs"));
    let o = twin(&[
        "validate",
        "runs",
        c,
        "--steps-out",
        steps.to_str().unwrap(),
        "--requests-out",
        reqs.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), stdout(&twin(&["validate", "runs", c])));
    assert!(
        stderr(&o).contains("wrote the simulated runs of 1 of 3 records"),
        "{}",
        stderr(&o)
    );
    let names = |d: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&steps), ["hand_l8b_h100_trtllm_c4.steps.csv"]);
    assert_eq!(names(&reqs), ["hand_l8b_h100_trtllm_c4.requests.csv"]);
    let column = |path: std::path::PathBuf, name: &str| -> Vec<u64> {
        let text = std::fs::read_to_string(path).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let i = header.iter().position(|h| *h == name).unwrap();
        lines
            .map(|l| l.split(',').nth(i).unwrap().parse().unwrap())
            .collect()
    };
    let prefilled: u64 = column(
        steps.join("hand_l8b_h100_trtllm_c4.steps.csv"),
        "prefill_tokens",
    )
    .iter()
    .sum();
    let prompts = column(
        reqs.join("hand_l8b_h100_trtllm_c4.requests.csv"),
        "input_tokens",
    );
    assert!(!prompts.is_empty());
    assert!(prefilled >= prompts.iter().sum::<u64>(), "{prefilled}");
}

/// A filter that leaves nothing is an error; a bad filter names the keys.
#[test]
fn filters_are_checked() {
    fails_with(
        &[
            "validate",
            "runs",
            "h100-public-bench",
            "--filter",
            "engine=trtllm",
        ],
        &["no record passes the filters"],
    );
    fails_with(
        &[
            "validate",
            "runs",
            "h100-public-bench",
            "--filter",
            "colour=red",
        ],
        &["KEY one of id, engine"],
    );
    fails_with(
        &["validate", "runs", "no-such-corpus"],
        &["not an embedded corpus (aic-silicon-train, h100-public-bench)"],
    );
}

/// A benchmark result file says nothing of its deployment: the flags it lacks are
/// named; given them, the run is a record whose prediction is a simulation of it.
#[test]
fn a_vllm_result_file_needs_its_deployment_and_then_validates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mine.jsonl");
    let out_s = out.to_str().unwrap();
    let file = fixture("tests/fixtures/bench/llama31-70b-h100-tp8-c10.json.gz");
    fails_with(
        &["runs", "import", &file, "--out", out_s],
        &["give --engine, --gpu, --model"],
    );
    let model = fixture("scenarios/runs/models/Llama-3.1-70B/config.json");
    let o = twin(&[
        "runs",
        "import",
        &file,
        "--engine",
        "vllm@0.15.0",
        "--gpu",
        "h100",
        "--model",
        &model,
        "--tp",
        "8",
        "--out",
        out_s,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&twin(&["validate", "runs", out_s, "--json"]));
    let compared = v["records"][0]["compared"].as_array().unwrap();
    // The file's mean, median and p99 of TTFT, TPOT, ITL and E2E, and its three
    // throughputs.
    assert_eq!(compared.len(), 15, "{compared:?}");
}

/// A vLLM result of a server that ran speculative decoding is priced with its drafts
/// at the acceptance its counters give (3 drafts, 0.875 tokens accepted a step: 0.5
/// each), on a model with MTP layers; on one without, the record is listed with why.
#[test]
fn a_speculative_vllm_run_is_priced_at_its_measured_acceptance() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spec.json");
    std::fs::write(
        &file,
        r#"{"date": "20261130-120000", "model_id": "m", "num_prompts": 16,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4, "duration": 9.5,
        "completed": 16, "total_input_tokens": 4096, "total_output_tokens": 1024,
        "mean_tpot_ms": 5.0, "median_tpot_ms": 5.0,
        "spec_decode_num_drafts": 1000, "spec_decode_draft_tokens": 3000,
        "spec_decode_accepted_tokens": 875}"#,
    )
    .unwrap();
    let import = |model: &str, out: &std::path::Path| {
        let o = twin(&[
            "runs",
            "import",
            file.to_str().unwrap(),
            "--engine",
            "vllm@0.15.0",
            "--gpu",
            "h100",
            "--model",
            model,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    };
    let (mtp, plain) = (dir.path().join("mtp.jsonl"), dir.path().join("plain.jsonl"));
    import("tiny-moe", &mtp);
    import("gpt-oss-120b", &plain);
    let v = json(&twin(&[
        "validate",
        "runs",
        mtp.to_str().unwrap(),
        "--json",
    ]));
    let pricing = v["records"][0]["pricing"].as_str().unwrap();
    assert!(
        pricing.contains(
            "speculative decoding: 3 MTP drafts a step, each accepted at 0.500 (the record's)"
        ),
        "{pricing}"
    );
    let o = twin(&["validate", "runs", plain.to_str().unwrap()]);
    assert!(
        stdout(&o).contains("which gpt-oss-120b does not have"),
        "{}",
        stdout(&o)
    );
}

/// A TensorRT-LLM run of a per-tensor FP8 checkpoint takes the FP8 KV cache ModelOpt
/// writes into it, and says so; vLLM's of the same weights, or `--kv bf16`, the
/// model's own.
#[test]
fn a_trtllm_fp8_run_imports_with_its_checkpoints_fp8_kv_cache() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixture("tests/fixtures/bench/llama31-70b-h100-tp8-c10.json.gz");
    let model = fixture("scenarios/runs/models/Llama-3.1-70B/config.json");
    let kv_of = |engine: &str, extra: &[&str]| {
        let out = dir.path().join(format!("{engine}{}.jsonl", extra.len()));
        let out_s = out.to_str().unwrap();
        let mut args = vec![
            "runs",
            "import",
            &file,
            "--engine",
            engine,
            "--gpu",
            "h100",
            "--model",
            &model,
            "--weights",
            "fp8-tensor",
            "--tp",
            "8",
            "--out",
            out_s,
        ];
        args.extend_from_slice(extra);
        let o = twin(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let rec = std::fs::read_to_string(&out).unwrap();
        let rec = rec
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap()
            .to_string();
        let v: serde_json::Value = serde_json::from_str(&rec).unwrap();
        (v["model"]["kv"].clone(), stderr(&o))
    };
    let (kv, err) = kv_of("trtllm@1.2.0", &[]);
    assert_eq!(kv, "fp8_tensor");
    assert!(
        err.contains("--kv: fp8, as TensorRT-LLM serves a ModelOpt"),
        "{err}"
    );
    assert!(kv_of("vllm@0.15.0", &[]).0.is_null());
    assert_eq!(kv_of("trtllm@1.2.0", &["--kv", "bf16"]).0, "bf16");
}

/// The shipped public runs: `runs show` counts them by engine and model.
#[test]
fn the_embedded_public_runs_show() {
    let o = twin(&["runs", "show", "h100-public-bench"]);
    let text = stdout(&o);
    assert!(text.contains("11 records"), "{text}");
    assert!(
        text.contains("by engine: sglang@0.5.9 4, vllm@0.15.0 7"),
        "{text}"
    );
}

/// `calibrate --from-runs` of the three public gpt-oss runs with `extra` flags, into a
/// profile in a fresh folder (kept while the folder lives); the command's output.
fn gpt_oss_profile(
    extra: &[&str],
) -> (tempfile::TempDir, std::path::PathBuf, std::process::Output) {
    let dir = tempfile::tempdir().unwrap();
    let prof = dir.path().join("p.toml");
    let mut args = vec![
        "calibrate",
        "--from-runs",
        "h100-public-bench",
        "--filter",
        "model~gpt-oss",
        "--out",
        prof.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = twin(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    (dir, prof, o)
}

/// A profile fitted to runs prices `simulate` (its terms and front end named) and is
/// refused by `validate runs` when it is not one.
#[test]
fn a_runs_profile_prices_simulate() {
    let (_dir, prof, o) = gpt_oss_profile(&[]);
    let prof_s = prof.to_str().unwrap();
    let text = stdout(&o);
    assert!(text.contains("vllm on hopper (h100; 3 records"), "{text}");
    assert!(text.contains("leave-one-model-out"), "{text}");
    let o = simulate_gpt_oss(&["--profile", prof_s]);
    assert!(
        stdout(&o).contains("terms fitted to 3 measured runs of vllm on hopper"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("the front end takes"), "{}", stderr(&o));
    let other = fixture("tests/fixtures/runs/aic-rows.csv");
    fails_with(
        &["validate", "runs", "h100-public-bench", "--profile", &other],
        &["not a profile of terms fitted to runs"],
    );
}

/// `simulate --requests-out` writes one row per completed request, in the columns a
/// client's per-request file holds; the report's own figures are those of a run
/// without it (20 requests of 1,000 prompt tokens and 50 output tokens each).
#[test]
fn simulate_writes_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("req.csv");
    let out_s = out.to_str().unwrap();
    let bench =
        "vllm --num-prompts 20 --max-concurrency 4 --random-input-len 1000 --random-output-len 50";
    let with = twin(&[
        "simulate",
        "h100-llama-3.1-70b-tp8",
        "--bench",
        bench,
        "--requests-out",
        out_s,
    ]);
    let without = twin(&["simulate", "h100-llama-3.1-70b-tp8", "--bench", bench]);
    assert!(with.status.success(), "{}", stderr(&with));
    assert_eq!(stdout(&with), stdout(&without));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("serial,arrival_s,first_token_s,finish_s,input_tokens,output_tokens,cached_tokens,measured,weight")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 20);
    for r in &rows {
        assert_eq!(
            (r[4], r[5], r[6], r[7]),
            ("1000", "50", "0", "true"),
            "{r:?}"
        );
        let (a, f, e): (f64, f64, f64) = (
            r[1].parse().unwrap(),
            r[2].parse().unwrap(),
            r[3].parse().unwrap(),
        );
        assert!(a <= f && f < e, "{r:?}");
    }
}

/// Issue 39, item 8: a summary-only `vllm bench serve` result (the common public form)
/// is compared on what it holds, and the rest is named, instead of refused.
#[test]
fn validate_bench_compares_a_summary_only_result() {
    let file = fixture("tests/fixtures/vllm-bench-summary-only.json");
    let o = twin(&["validate", "bench", &file, "--scenario", "cpu-live-poisson"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for needle in [
        "a summary without per-request lists",
        "output_tok_s value                      35.26",
        "request_s value",
        "every request taken as the mean, 254 input and 42 output tokens",
        "not compared: per-request TTFT",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    let v = json(&twin(&[
        "validate",
        "bench",
        &file,
        "--scenario",
        "cpu-live-poisson",
        "--json",
    ]));
    assert_eq!(v["summary_only"], true);
    assert_eq!(v["rows"].as_array().unwrap().len(), 3);
}

/// The API server's time per streamed chunk, set on a run, shows on `validate bench`'s
/// scheduler line with how busy the server was as requests arrived: for a file with
/// per-request lists as for its summary alone.
#[test]
fn validate_bench_says_how_busy_the_api_server_was() {
    let detailed = fixture("tests/fixtures/bench/llama31-70b-h100-tp8-c50.json");
    let mut summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&detailed).unwrap()).unwrap();
    summary
        .as_object_mut()
        .unwrap()
        .retain(|_, v| !v.is_array());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("summary.json");
    std::fs::write(&path, summary.to_string()).unwrap();
    for file in [detailed, path.display().to_string()] {
        let o = twin(&[
            "validate",
            "bench",
            &file,
            "--scenario",
            "h100-llama-3.1-70b-tp8",
            "--set",
            "serving.frontend_chunk_s=50e-6",
        ]);
        assert!(o.status.success(), "{file}: {}", stderr(&o));
        let text = stdout(&o);
        let line = text
            .lines()
            .find(|l| l.starts_with("scheduler: "))
            .expect("a scheduler line");
        assert!(
            line.contains("front end 12 ms a request, 50.0 us of its API server a streamed chunk (1 API server an instance), prompts tokenised one after another (1.1 us a token); its API server streaming ")
                && line.contains("busy as requests arrived"),
            "{file}: {line}"
        );
    }
}

/// A scenario of an engine on a GPU family the shipped runs profile has a group for
/// carries that group's band around its means (the factors applied to the report's
/// own means); `--physics-only` prices without the profile and gives none.
#[test]
fn simulate_gives_the_measured_runs_band_of_its_engine_and_gpu() {
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&stdout(&simulate_gpt_oss(&args))).unwrap()
    };
    let v = json(&[]);
    let b = &v["runs_band"];
    assert_eq!(b["group"], "vllm on hopper", "{b}");
    // As the shipped profile's gate left the group: by its terms or by physics alone.
    let g = scenario::runs_profile::shipped()
        .and_then(|p| p.group_of("vllm", "h100"))
        .unwrap();
    let by = if g.physics_alone {
        "physics alone"
    } else {
        "terms"
    };
    assert_eq!(b["priced_by"], by, "{b}");
    for metric in ["ttft_ms", "tpot_ms"] {
        let f = &b["band"][metric]["factors"];
        let (lo, hi) = (f[0].as_f64().unwrap(), f[1].as_f64().unwrap());
        assert!(lo > 0.0 && lo < hi, "{metric}: {f}");
        let mean = v[metric]["mean"].as_f64().unwrap();
        let ms = &b["band"][metric]["mean_ms"];
        assert!((ms[0].as_f64().unwrap() - lo * mean).abs() < 1e-9 * mean);
        assert!((ms[1].as_f64().unwrap() - hi * mean).abs() < 1e-9 * mean);
    }
    assert!(json(&["--physics-only"]).get("runs_band").is_none());
    // gpt-oss-120b is one of the group's models: the band names it and is its own
    // runs', the group's for another model beside it.
    assert_eq!(b["includes_model"], "openai/gpt-oss-120b", "{b}");
    let own = &g.model_bands["openai/gpt-oss-120b"];
    assert_eq!(b["own_model_runs"], own.records, "{b}");
    // The same factors, to the last bit or two of their decimal round trip.
    let same = |a: &serde_json::Value, b: [f64; 2], what: &str| {
        for (x, y) in a.as_array().unwrap().iter().zip(b) {
            let x = x.as_f64().unwrap();
            assert!(
                (x - y).abs() <= 1e-12 * y.abs(),
                "{what}: {a} against {b:?}"
            );
        }
    };
    for metric in ["ttft_ms", "tpot_ms"] {
        same(&b["band"][metric]["factors"], own.band[metric], metric);
        same(&b["unseen_model_band"][metric], g.band[metric], metric);
    }
}

/// A band names the group's model the scenario's model is (its own runs say more than
/// a band for a model the group has not seen), and only then: Llama-3.1-70B is among
/// vLLM on Hopper's models, not among SGLang on Hopper's.
#[test]
fn a_runs_band_names_the_scenarios_model_when_the_group_holds_it() {
    let band = |extra: &[&str]| -> (serde_json::Value, String) {
        let mut args = vec!["simulate", "h100-llama-3.1-70b-tp8", "--duration", "20"];
        args.extend_from_slice(extra);
        let o = twin(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let line = stdout(&o)
            .lines()
            .find(|l| l.starts_with("measured-runs band"))
            .unwrap_or_default()
            .to_string();
        let mut args = args.clone();
        args.push("--json");
        let v: serde_json::Value = serde_json::from_str(&stdout(&twin(&args))).unwrap();
        (v["runs_band"].clone(), line)
    };
    let (v, line) = band(&[]);
    assert_eq!(v["includes_model"], "meta-llama/Llama-3.1-70B", "{v}");
    assert!(
        line.contains("measured runs of meta-llama/Llama-3.1-70B among the ")
            && line.contains("`twin validate runs aic-silicon-train --filter model=meta-llama/llama-3.1-70b` gives them one by one"),
        "{line}"
    );
    let (v, line) = band(&["--set", "engine=sglang"]);
    assert_eq!(v["group"], "sglang on hopper", "{v}");
    assert!(v.get("includes_model").is_none(), "{v}");
    assert!(!line.contains("one of them"), "{line}");
}

/// `plan` gives the same band around its best's means: the band of the scenario's
/// engine on the best's GPU (one mean per metric under both ends), in the text under
/// the best and as `best.runs_band`; none with `--physics-only`.
#[test]
fn plan_gives_the_measured_runs_band_around_its_best() {
    let plan = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "h100-gpt-oss-120b-tp8",
            "--space",
            "examples/plan-space-h100-node.toml",
            "--duration",
            "20",
        ];
        args.extend_from_slice(extra);
        let o = twin(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let v: serde_json::Value = serde_json::from_str(&plan(&["--json"])).unwrap();
    let b = &v["best"]["runs_band"];
    assert_eq!(b["group"], "vllm on hopper", "{b}");
    let sim: serde_json::Value =
        serde_json::from_str(&stdout(&simulate_gpt_oss(&["--json"]))).unwrap();
    for metric in ["ttft_ms", "tpot_ms"] {
        let f = &b["band"][metric]["factors"];
        assert_eq!(f, &sim["runs_band"]["band"][metric]["factors"], "{metric}");
        let ms = &b["band"][metric]["mean_ms"];
        let mean_lo = ms[0].as_f64().unwrap() / f[0].as_f64().unwrap();
        let mean_hi = ms[1].as_f64().unwrap() / f[1].as_f64().unwrap();
        assert!(
            mean_lo > 0.0 && (mean_lo - mean_hi).abs() < 1e-9 * mean_lo,
            "{b}"
        );
    }
    let text = plan(&[]);
    let best = text.split("best: ").nth(1).unwrap();
    let band_line = best
        .lines()
        .find(|l| l.contains("measured-runs band"))
        .unwrap();
    assert!(band_line.contains("vllm on hopper"), "{band_line}");
    let v: serde_json::Value = serde_json::from_str(&plan(&["--json", "--physics-only"])).unwrap();
    assert!(v["best"].get("runs_band").is_none(), "{}", v["best"]);
    assert!(!plan(&["--physics-only"]).contains("measured-runs band"));
}

/// `twin CMD --engine vllm --hardware h100 --model llama-3.1-70b EXTRA`'s stdout.
fn vllm_llama(cmd: &str, extra: &[&str]) -> String {
    let mut args = vec![cmd, "--engine", "vllm", "--hardware", "h100"];
    args.extend_from_slice(&["--model", "llama-3.1-70b"]);
    args.extend_from_slice(extra);
    let o = twin(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

/// [`vllm_llama`] with `--json`, read.
fn vllm_llama_json(cmd: &str, extra: &[&str]) -> serde_json::Value {
    let mut e = extra.to_vec();
    e.push("--json");
    serde_json::from_str(&vllm_llama(cmd, &e)).unwrap()
}

/// The shipped TPOT band of Llama-3.1-70B's own runs in vLLM on Hopper, and whether `a`
/// is `b` to 1e-9.
fn vllm_hopper_tpot() -> ([f64; 2], impl Fn(&serde_json::Value, f64) -> bool) {
    let g = scenario::runs_profile::shipped()
        .and_then(|p| p.group_of("vllm", "h100"))
        .unwrap();
    let close = |a: &serde_json::Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-9 * b;
    (
        g.model_bands["meta-llama/Llama-3.1-70B"].band["tpot_ms"],
        close,
    )
}

/// `forward` puts the TPOT band of its engine's group on the step's GPU family around a
/// decode step (the step's time times the factors, its rates divided by them), in the
/// text under the step line and as `runs_band`; none by twin's own kernel model, with
/// `--physics-only`, or for a prefill step.
#[test]
fn forward_gives_the_measured_runs_band_of_its_engine() {
    let ([lo, hi], close) = vllm_hopper_tpot();
    let v = vllm_llama_json("forward", &["--tp", "8"]);
    let b = &v["runs_band"];
    assert_eq!(b["group"], "vllm on hopper", "{b}");
    let step = v["step_ms"].as_f64().unwrap();
    let gpu = v["tokens_per_s_per_gpu"].as_f64().unwrap();
    assert!(
        close(&b["step_ms"][0], step * lo) && close(&b["step_ms"][1], step * hi),
        "{b}"
    );
    assert!(close(&b["tokens_per_s_per_gpu"][0], gpu / hi), "{b}");
    assert!(close(&b["tokens_per_s_per_gpu"][1], gpu / lo), "{b}");
    let text = vllm_llama("forward", &["--tp", "8"]);
    let line = text.lines().nth(3).unwrap();
    let head = format!(
        "measured-runs band  step {:.3}-{:.3} ms",
        step * lo,
        step * hi
    );
    assert!(
        line.starts_with(&head) && line.contains("TPOT's p10-p90"),
        "{text}"
    );
    let none = |extra: &[&str]| vllm_llama_json("forward", extra).get("runs_band").is_none();
    assert!(none(&["--tp", "8", "--physics-only"]));
    assert!(none(&["--tp", "8", "--phase", "prefill"]));
    let own = [
        "forward",
        "--engine",
        "twin",
        "--hardware",
        "h100",
        "--model",
        "llama-3.1-70b",
        "--tp",
        "8",
        "--json",
    ];
    let v: serde_json::Value = serde_json::from_str(&stdout(&twin(&own))).unwrap();
    assert!(v.get("runs_band").is_none());
}

/// `sweep` puts the same factors around each point: in its JSON per point, and as one
/// line under the table.
#[test]
fn sweep_gives_each_point_the_measured_runs_band_of_its_engine() {
    let ([lo, hi], close) = vllm_hopper_tpot();
    let v = vllm_llama_json(
        "sweep",
        &["--deps", "1", "--tps", "8", "--batches", "16,64"],
    );
    assert_eq!(v["runs_band"]["tpot_factors"][0].as_f64(), Some(lo), "{v}");
    let points = v["points"].as_array().unwrap();
    assert!(!points.is_empty());
    for p in points {
        let step = p["step_ms"].as_f64().unwrap();
        let user = p["tokens_per_s_per_user"].as_f64().unwrap();
        assert!(close(&p["step_ms_runs_band"][1], step * hi), "{p}");
        assert!(
            close(&p["tokens_per_s_per_user_runs_band"][0], user / hi),
            "{p}"
        );
    }
    let text = vllm_llama("sweep", &["--deps", "1", "--tps", "8", "--batches", "16"]);
    let factors = format!("each point's step ms x{lo:.2}-{hi:.2}");
    assert!(text.contains(&factors), "{text}");
}

/// `--only-improving` keeps a group whose terms cannot be checked on another model (the
/// three gpt-oss runs are one model) as priced by physics alone, with physics alone's
/// band: `validate runs` and `simulate` then apply none of its terms and give its band.
#[test]
fn a_group_the_gate_leaves_out_prices_by_physics_with_its_band() {
    let (_dir, prof, o) = gpt_oss_profile(&["--only-improving"]);
    let prof_s = prof.to_str().unwrap();
    assert!(
        stdout(&o).contains("left out (physics alone): vllm on hopper"),
        "{}",
        stdout(&o)
    );
    let p: toml::Value = toml::from_str(&std::fs::read_to_string(&prof).unwrap()).unwrap();
    let g = &p["groups"][0];
    assert_eq!(g["physics_alone"].as_bool(), Some(true), "{g}");
    assert!(g["terms"].as_table().unwrap().is_empty(), "{g}");
    assert!(g["band"].get("tpot_ms").is_some(), "{g}");
    let o = twin(&[
        "validate",
        "runs",
        "h100-public-bench",
        "--filter",
        "model~gpt-oss",
        "--profile",
        prof_s,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("(no group's terms apply; by physics alone, with its band: vllm on hopper)"),
        "{text}"
    );
    assert!(text.contains(" band "), "{text}");
    let text = stdout(&simulate_gpt_oss(&["--profile", prof_s]));
    assert!(!text.contains("terms fitted to"), "{text}");
    assert!(
        text.contains("measured-runs band") && text.contains("priced by physics alone"),
        "{text}"
    );
}
