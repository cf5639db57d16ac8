//! `simulate --trace` of the request traces users have: Azure's LLM inference CSV, a
//! `vllm bench serve` result, BurstGPT's CSV (detected, or `--trace-format`), with their
//! notes, clear refusals, and hash-less records under the coarse model.

mod common;

use common::{json, refused, repo, write};

fn path(rel: &str) -> String {
    repo().join(rel).display().to_string()
}

fn replay(trace: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "simulate",
        "--set",
        "workload=trace-replay",
        "--set",
        "duration_s=200",
        "--set",
        "warmup_s=0",
        "--json",
        "--trace",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(trace.to_string());
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run_json(args: &[String]) -> serde_json::Value {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = common::twin(&a);
    assert!(o.status.success(), "{a:?}: {}", common::err(&o));
    json(&o)
}

#[test]
fn an_azure_trace_replays_with_its_format_and_unit_named() {
    let t = path("examples/traces/azure-code-2023-100.csv");
    let j = run_json(&replay(&t, &[]));
    // Its 100 records arrive over 192 s: all inside the 200 s run.
    assert_eq!(j["requests_completed"], 100, "{}", j["notes"]);
    let notes = j["notes"].to_string();
    assert!(
        notes.contains("read as Azure LLM inference CSV, 100 records"),
        "{notes}"
    );
    assert!(
        notes.contains("each record is a prefix family of its own"),
        "{notes}"
    );
    // No prefix information: nothing is cached.
    assert_eq!(j["token_mix"]["cached_input"], 0.0, "{}", j["token_mix"]);
}

#[test]
fn a_vllm_bench_result_replays_as_the_trace_of_its_sends() {
    let t = path("tests/fixtures/bench/llama31-70b-h100-tp8-c50.json");
    let mut a = replay(&t, &[]);
    a.insert(1, "h100-llama-3.1-70b-tp8".into());
    let j = run_json(&a);
    assert_eq!(j["requests_completed"], 500, "{}", j["notes"]);
    assert!(j["notes"]
        .to_string()
        .contains("read as vllm bench serve result, 500 records"));
}

#[test]
fn a_burstgpt_trace_is_read_in_seconds_and_its_failures_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "burst.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
         5,ChatGPT,472,18,490,Conversation log\n\
         6,GPT-4,1087,0,1087,Conversation log\n\
         9.5,ChatGPT,417,176,593,API log\n",
    );
    let j = run_json(&replay(f.to_str().unwrap(), &[]));
    assert_eq!(j["requests_completed"], 2);
    let notes = j["notes"].to_string();
    assert!(
        notes.contains(
            "0 output tokens (a failed or empty request): 1 record (first at line 3); dropped"
        ),
        "{notes}"
    );
}

#[test]
fn a_wrong_or_unknown_format_is_refused_with_what_and_where() {
    let t = path("examples/traces/azure-code-2023-100.csv");
    let a = replay(&t, &["--trace-format", "burstgpt"]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    refused(
        &a,
        &["(BurstGPT CSV;", "line 1: no `request tokens` column"],
    );
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "x.csv", "id,prompt,completion\n1,2,3\n");
    let a = replay(f.to_str().unwrap(), &[]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    refused(
        &a,
        &["none of the trace formats twin reads", "--trace-format"],
    );
    // Mooncake timestamps in seconds.
    let f = write(
        dir.path(),
        "s.jsonl",
        "{\"timestamp\": 0.5, \"input_length\": 10, \"output_length\": 2}\n",
    );
    let a = replay(f.to_str().unwrap(), &[]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    refused(
        &a,
        &["line 1", "Mooncake timestamps are whole milliseconds"],
    );
}

#[test]
fn the_coarse_model_keeps_hash_less_records_on_every_seed() {
    // Every Azure record is its own prefix family, so each copy of the rack keeps about
    // one record in two whatever the seed (a single shared family would keep all or
    // none of them).
    let t = path("examples/traces/azure-code-2023-100.csv");
    for seed in ["1", "2", "3", "4"] {
        let j = run_json(&replay(&t, &["--cohort", "2", "--seed", seed]));
        let n = j["requests_completed"].as_u64().unwrap();
        // Kept records count twice: a binomial 50 +- 5 records, 100 +- 10 requests.
        assert!((60..=140).contains(&n), "seed {seed}: {n} requests");
    }
}
