//! Benchmark clients at the command line: `twin simulate --bench` runs a client's own
//! command line, `twin validate bench` reads the public sweeps (gzipped or not) and
//! reproduces vLLM's own summary from their per-request lists, and bad specs are
//! refused with what and where.

mod common;

use common::*;

/// The public sweeps of `tests/fixtures/bench/` with vLLM's printed median TTFT and
/// TPOT (ms, from each file's own summary fields), and the scenario of each.
const SWEEP: [(&str, &str, f64, f64); 7] = [
    (
        "llama31-70b-h100-tp8-c10.json.gz",
        "h100-llama-3.1-70b-tp8",
        756.21,
        11.98,
    ),
    (
        "llama31-70b-h100-tp8-c25.json.gz",
        "h100-llama-3.1-70b-tp8",
        1328.86,
        18.13,
    ),
    (
        "llama31-70b-h100-tp8-c50.json",
        "h100-llama-3.1-70b-tp8",
        1670.81,
        33.74,
    ),
    (
        "llama31-70b-h100-tp8-c200.json.gz",
        "h100-llama-3.1-70b-tp8",
        2045.63,
        137.95,
    ),
    (
        "gpt-oss-120b-h100-tp8-c10.json.gz",
        "h100-gpt-oss-120b-tp8",
        227.52,
        4.58,
    ),
    (
        "gpt-oss-120b-h100-tp8-c50.json.gz",
        "h100-gpt-oss-120b-tp8",
        548.79,
        10.33,
    ),
    (
        "gpt-oss-120b-h100-tp8-c200.json.gz",
        "h100-gpt-oss-120b-tp8",
        1728.08,
        31.27,
    ),
];

/// `twin validate bench` of a fixture under `scenario`, as JSON.
fn validate_json(file: &str, scenario: &str) -> serde_json::Value {
    bench_json(
        &repo().join("tests/fixtures/bench").join(file),
        scenario,
        &[],
    )
}

/// `twin validate bench PATH --scenario SCENARIO --json EXTRA...`, which must succeed.
fn bench_json(path: &std::path::Path, scenario: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "validate",
        "bench",
        path.to_str().unwrap(),
        "--scenario",
        scenario,
        "--json",
    ];
    args.extend(extra);
    let o = twin(&args);
    assert!(o.status.success(), "{}: {}", path.display(), err(&o));
    json(&o)
}

#[test]
fn every_public_sweep_point_reads_back_its_own_summary_and_runs_as_the_client_sent_it() {
    for (file, scenario, ttft, tpot) in SWEEP {
        let v = validate_json(file, scenario);
        let m = &v["measured"];
        let near = |a: f64, b: f64| (a - b).abs() <= 0.006 + 1e-4 * b.abs();
        assert!(
            near(m["ttft_ms"]["p50"].as_f64().unwrap(), ttft),
            "{file}: {m}"
        );
        assert!(
            near(m["tpot_ms"]["p50"].as_f64().unwrap(), tpot),
            "{file}: {m}"
        );
        // Every request of the file was simulated, under vLLM's scheduler.
        let p = &v["predicted"];
        assert_eq!(p["completed"], m["completed"], "{file}");
        assert!(
            v["scheduler"].as_str().unwrap().starts_with("vLLM V1"),
            "{file}"
        );
        check_steps(file, &v);
        // gpt-oss-120b at 50 and 200 users stops three times for about 1.1 s (every
        // decoding request sees the same gap at the same instant); no other run does.
        let notes = v["notes"].to_string();
        let paused = file.starts_with("gpt-oss-120b-h100-tp8-c50")
            || file.starts_with("gpt-oss-120b-h100-tp8-c200");
        assert_eq!(
            notes.contains("the run sent no token for"),
            paused,
            "{file}: {notes}"
        );
        if paused {
            assert_eq!(
                notes.matches(" requests in flight)").count(),
                3,
                "{file}: {notes}"
            );
        }
    }
}

/// A public run's steps read back from its token times (`steps` of `validate bench
/// --json`): the kinds hold every step compared, the commonest is a decode batch
/// taking the file's own median gap between a request's tokens, and the front end the
/// token times allow.
fn check_steps(file: &str, v: &serde_json::Value) {
    let m = &v["measured"];
    let steps = &v["steps"];
    let kinds = steps["kinds"].as_array().unwrap();
    let counted: u64 = kinds
        .iter()
        .map(|k| k["measured_steps"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, steps["back_to_back"].as_u64().unwrap(), "{file}");
    assert!(kinds[0]["kind"].as_str().unwrap().starts_with("decode, "));
    let itl = m["itl_ms"]["p50"].as_f64().unwrap();
    let step = kinds[0]["measured_ms_p50"].as_f64().unwrap();
    assert!(
        (step / itl - 1.0).abs() < 0.05,
        "{file}: {step} ms against {itl}"
    );
    assert!(
        kinds
            .iter()
            .any(|k| k["kind"].as_str().unwrap().contains("done")
                && k["twin_steps"].as_u64().unwrap() > 0),
        "{file}: {steps}"
    );
    // Every read-back decode step priced at its own batch: step_mape is theirs.
    let priced = &steps["decode_steps_priced"];
    assert!(priced["steps"].as_u64().unwrap() > 0, "{file}: {priced}");
    assert_eq!(v["step_mape"], priced["mape"], "{file}");
    assert!(v["step_mape"].as_f64().unwrap() < 0.5, "{file}: {priced}");
    // The front end the token times allow under vLLM's async scheduling: Llama's
    // at 25 and 50 users lies in one range (lower bound under the upper); at 200
    // users no constant front end fits (the client and server lag under load).
    let fe = &steps["front_end"];
    if file.starts_with("llama31-70b-h100-tp8-c25") || file.starts_with("llama31-70b-h100-tp8-c50")
    {
        assert!(
            fe["lower_ms"].as_f64().unwrap() < fe["upper_ms"].as_f64().unwrap(),
            "{file}: {fe}"
        );
        assert_eq!(fe["steps_formed_ahead"], true);
    }
    if file.contains("-c200") {
        assert!(
            fe["lower_ms"].as_f64().unwrap() > fe["upper_ms"].as_f64().unwrap(),
            "{file}: {fe}"
        );
    }
}

#[test]
fn simulate_bench_sends_the_clients_prompts_and_ends_with_the_last() {
    let o = twin(&[
        "simulate",
        "h100-gpt-oss-120b-tp8",
        "--bench",
        "vllm --num-prompts 30 --max-concurrency 8 --random-input-len 1000 --random-output-len 20 --random-range-ratio 0.5",
        "--json",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    let r = json(&o);
    assert_eq!(r["requests_completed"], 30, "{r}");
    assert_eq!(r["requests_dropped"], 0, "{r}");
    // Over when the last request is: far short of the 86400 s bound.
    assert!(
        r["measured_s"].as_f64().unwrap() < 60.0,
        "{}",
        r["measured_s"]
    );
    // Same seed, same run, byte for byte.
    let again = twin(&[
        "simulate",
        "h100-gpt-oss-120b-tp8",
        "--bench",
        "vllm --num-prompts 30 --max-concurrency 8 --random-input-len 1000 --random-output-len 20 --random-range-ratio 0.5",
        "--json",
    ]);
    assert_eq!(o.stdout, again.stdout);
}

#[test]
fn bad_bench_specs_are_refused_with_what_and_where() {
    refused(
        &[
            "simulate",
            "h100-llama-3.1-70b-tp8",
            "--bench",
            "vllm --num-prompts two",
        ],
        &["--bench vllm", "--num-prompts two", "not a number"],
    );
    refused(
        &[
            "simulate",
            "h100-llama-3.1-70b-tp8",
            "--bench",
            "tgi --num-prompts 3",
        ],
        &["unknown client `tgi`"],
    );
    refused(
        &[
            "simulate",
            "--set",
            "workload=mooncake-conversation",
            "--trace",
            "examples/traces/mooncake-conversation-500.jsonl",
            "--bench",
            "vllm",
        ],
        &["--bench and --trace"],
    );
}

#[test]
fn an_sglang_result_runs_under_sglangs_scheduler_with_its_servers_own_arguments() {
    // (file, SGLang's own median TTFT in the file, ms)
    for (file, ttft) in [
        ("sglang-llama31-70b-h100-tp8-in1024-c100.jsonl.gz", 1473.93),
        ("sglang-llama31-70b-h100-tp8-in2048-c100.jsonl.gz", 1446.06),
        ("sglang-llama31-70b-h100-tp8-in4096-c100.jsonl.gz", 2586.14),
        ("sglang-llama31-70b-h100-tp8-in8192-c100.jsonl.gz", 4617.56),
    ] {
        let v = validate_json(file, "h100-llama-3.1-70b-tp8");
        let got = v["measured"]["ttft_ms"]["p50"].as_f64().unwrap();
        assert!((got - ttft).abs() < 0.006, "{file}: {got}");
        assert!(
            v["scheduler"].as_str().unwrap().starts_with("SGLang"),
            "{file}"
        );
        let notes = v["notes"].to_string();
        for want in [
            "chunked_prefill_size 8192",
            "SGLang 0.5.9",
            "priced as engine sglang@0.5.9",
        ] {
            assert!(notes.contains(want), "{file}: {want}: {notes}");
        }
        // The scenario's engine is vLLM: the file is priced with SGLang's shipped terms.
        let cost = v["cost_model"].as_str().unwrap();
        assert!(cost.contains("runs of sglang on hopper"), "{file}: {cost}");
        assert_eq!(v["predicted"]["completed"], 100, "{file}");
    }
}

#[test]
fn an_sglang_summary_runs_as_sglang_with_its_servers_budget() {
    // The public 1,024-token SGLang run without its per-request lists (as
    // `bench_serving` writes it without --output-details), under a vLLM scenario: the
    // summary path prices it as the SGLang version its server_info names, under
    // SGLang's scheduler, with the server's budget.
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(
        std::fs::File::open(
            repo().join("tests/fixtures/bench/sglang-llama31-70b-h100-tp8-in1024-c100.jsonl.gz"),
        )
        .unwrap(),
    )
    .read_to_string(&mut text)
    .unwrap();
    // Python's JSON writes the infinite request rate as `Infinity`, which serde_json
    // does not read: held as a string while the lists are taken out.
    let first = text
        .lines()
        .next()
        .unwrap()
        .replace(": Infinity", ": \"inf\"");
    let mut line: serde_json::Value = serde_json::from_str(&first).unwrap();
    for k in [
        "ttfts",
        "itls",
        "input_lens",
        "output_lens",
        "generated_texts",
        "errors",
    ] {
        line.as_object_mut().unwrap().remove(k);
    }
    let dir = tempfile::tempdir().unwrap();
    let summary = line.to_string().replace(":\"inf\"", ":Infinity");
    let file = write(dir.path(), "summary.jsonl", &summary);
    let run = |extra: &[&str]| bench_json(&file, "h100-llama-3.1-70b-tp8", extra);
    let v = run(&[]);
    assert_eq!(v["summary_only"], true);
    let notes = v["notes"].to_string();
    for want in [
        "priced as engine sglang@0.5.9",
        "a budget of 8192 tokens a step",
    ] {
        assert!(notes.contains(want), "{want}: {notes}");
    }
    let cost = v["cost_model"].as_str().unwrap();
    assert!(cost.contains("runs of sglang on hopper"), "{cost}");
    // Named by the user, another engine prices it by physics alone, still under
    // SGLang's scheduler.
    let v = run(&["--engine", "vllm"]);
    let cost = v["cost_model"].as_str().unwrap();
    assert!(!cost.contains("measured runs"), "{cost}");
    assert!(
        v["notes"]
            .to_string()
            .contains("SGLang's scheduler forms the steps"),
        "{}",
        v["notes"]
    );
}

#[test]
fn a_files_speculative_counters_set_the_drafts_or_refuse_a_model_without_mtp() {
    // vLLM's spec-decode counters: 200 tokens drafted in 100 steps, 150 accepted: 2
    // drafts a step, 1.5 accepted a step. The small CPU MoE has MTP layers: priced
    // with 2 drafts, said in a note, and its steps yield more than one token (a lower
    // TPOT than without the counters). Llama-3.1-70B has none: refused, saying why.
    let add = |path: &std::path::Path, counters: bool| -> serde_json::Value {
        let text = if path.extension().is_some_and(|e| e == "gz") {
            use std::io::Read;
            let mut t = String::new();
            flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
                .read_to_string(&mut t)
                .unwrap();
            t
        } else {
            std::fs::read_to_string(path).unwrap()
        };
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        if counters {
            let o = v.as_object_mut().unwrap();
            o.insert("spec_decode_num_drafts".into(), 100.into());
            o.insert("spec_decode_draft_tokens".into(), 200.into());
            o.insert("spec_decode_accepted_tokens".into(), 150.into());
        }
        v
    };
    let dir = tempfile::tempdir().unwrap();
    let small = repo().join("tests/fixtures/vllm-bench-small.json");
    let tpot = |counters: bool| {
        let f = write(dir.path(), "small.json", &add(&small, counters).to_string());
        let v = bench_json(&f, "cpu-live-poisson", &[]);
        let said = v["notes"].to_string().contains("2 drafts a step");
        assert_eq!(said, counters, "{}", v["notes"]);
        v["predicted"]["tpot_ms"]["mean"].as_f64().unwrap()
    };
    assert!(tpot(true) < tpot(false));
    let llama = repo().join("tests/fixtures/bench/llama31-70b-h100-tp8-c10.json.gz");
    let f = write(dir.path(), "llama.json", &add(&llama, true).to_string());
    refused(
        &[
            "validate",
            "bench",
            f.to_str().unwrap(),
            "--scenario",
            "h100-llama-3.1-70b-tp8",
        ],
        &[
            "decoded speculatively (2 drafts a step)",
            "MTP layers",
            "llama-3.1-70b",
        ],
    );
}

#[test]
fn after_earlier_runs_of_the_same_server_their_shared_prefixes_are_held() {
    // The SGLang sweep ran on one server process (the same server_info.random_seed)
    // without flushing its radix cache: the 4096-token run's prompts begin with the
    // 2048-token run's (one client seed). Held, they are not computed again: fewer
    // prefill tokens, so an earlier first token and a shorter run.
    let dir = repo().join("tests/fixtures/bench");
    let f = |n: u32| {
        dir.join(format!("sglang-llama31-70b-h100-tp8-in{n}-c100.jsonl.gz"))
            .to_str()
            .unwrap()
            .to_string()
    };
    let run = |after: &[u32]| {
        let mut args: Vec<String> = ["validate", "bench", &f(4096)]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for &n in after {
            args.extend(["--after".to_string(), f(n)]);
        }
        args.extend(["--scenario", "h100-llama-3.1-70b-tp8", "--json"].map(String::from));
        let o = twin(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(o.status.success(), "{}", err(&o));
        json(&o)
    };
    let cold = run(&[]);
    let warm = run(&[1024, 2048]);
    let notes = warm["notes"].to_string();
    assert!(
        notes.contains("108829 of the run's 209181 prompt tokens were sent before"),
        "{notes}"
    );
    let p = |v: &serde_json::Value, k: &str| v["predicted"][k]["p50"].as_f64().unwrap();
    assert!(p(&warm, "ttft_ms") < 0.8 * p(&cold, "ttft_ms"));
    let tput = |v: &serde_json::Value| v["predicted"]["token_throughput"].as_f64().unwrap();
    assert!(tput(&warm) > 1.2 * tput(&cold));
    // A vLLM run is not an earlier run of an SGLang server.
    let vllm = dir.join("llama31-70b-h100-tp8-c10.json.gz");
    let o = twin(&[
        "validate",
        "bench",
        &f(4096),
        "--after",
        vllm.to_str().unwrap(),
        "--scenario",
        "h100-llama-3.1-70b-tp8",
    ]);
    assert!(!o.status.success());
    assert!(
        err(&o).contains("not an SGLang bench_serving run"),
        "{}",
        err(&o)
    );
}

/// `validate bench` gives the measured-runs band of the scenario's engine on its GPU
/// family around the predicted means, and says whether each measured mean lies in it.
#[test]
fn a_bench_comparison_says_whether_the_measured_means_lie_in_the_runs_band() {
    let v = validate_json("llama31-70b-h100-tp8-c10.json.gz", "h100-llama-3.1-70b-tp8");
    // The client counted each prompt without Llama's beginning-of-text token, which
    // the server runs: said, and priced.
    assert!(
        v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().starts_with(
                "prompts: each recorded length and the 1 token the model's tokenizer adds"
            )),
        "{}",
        v["notes"]
    );
    let b = &v["runs_band"];
    assert_eq!(b["group"], "vllm on hopper", "{b}");
    for metric in ["ttft_ms", "tpot_ms"] {
        let f = &b["band"][metric]["factors"];
        let (lo, hi) = (f[0].as_f64().unwrap(), f[1].as_f64().unwrap());
        let p = v["predicted"][metric]["mean"].as_f64().unwrap();
        let m = v["measured"][metric]["mean"].as_f64().unwrap();
        assert_eq!(
            b["band"][metric]["holds_measured"].as_bool(),
            Some(m >= p * lo && m <= p * hi),
            "{metric}: {b}"
        );
    }
}

/// `--front-end-from` prices a run with the front end another run of the deployment
/// allows: Llama-3.1-70B at 50 users with the one read from the run at 25 users (the
/// middle of 24.8-35.6 ms), said in a note and in the scheduler line; a file without
/// send times is refused with why.
#[test]
fn a_front_end_read_from_another_run_prices_this_one() {
    let dir = repo().join("tests/fixtures/bench");
    let c25 = dir.join("llama31-70b-h100-tp8-c25.json.gz");
    let c50 = dir.join("llama31-70b-h100-tp8-c50.json");
    let run_from = |from: &std::path::Path, json: bool| {
        let mut a = vec![
            "validate".to_string(),
            "bench".into(),
            c50.display().to_string(),
            "--scenario".into(),
            "h100-llama-3.1-70b-tp8".into(),
            "--front-end-from".into(),
            from.display().to_string(),
        ];
        if json {
            a.push("--json".into());
        }
        a
    };
    let args = run_from(&c25, true);
    let o = twin(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", err(&o));
    let v = json(&o);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("front end 30.2 ms (serving.frontend_s), read from"),
        "{notes}"
    );
    assert!(notes.contains("the middle of 24.8-35.6 ms"), "{notes}");
    assert!(
        v["scheduler"]
            .as_str()
            .unwrap()
            .contains("front end 30.2 ms"),
        "{}",
        v["scheduler"]
    );
    let small = repo().join("tests/fixtures/vllm-bench-small.json");
    let args = run_from(&small, false);
    fails_with(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
        &["--front-end-from", "the file records no send times"],
    );
}
