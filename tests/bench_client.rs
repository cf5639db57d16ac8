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
    let path = repo().join("tests/fixtures/bench").join(file);
    let o = twin(&[
        "validate",
        "bench",
        path.to_str().unwrap(),
        "--scenario",
        scenario,
        "--json",
    ]);
    assert!(o.status.success(), "{file}: {}", err(&o));
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
            "SGLang's scheduler",
        ] {
            assert!(notes.contains(want), "{file}: {want}: {notes}");
        }
        assert_eq!(v["predicted"]["completed"], 100, "{file}");
    }
}
