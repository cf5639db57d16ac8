//! The format told from the content, and bad files named with every problem at once.

use super::*;

fn problems(text: &str) -> Vec<String> {
    match read(text, "f.json") {
        Err(CorpusError::File { origin, problems }) => {
            assert_eq!(origin, "f.json");
            problems
        }
        other => panic!("expected the file's problems, got {other:?}"),
    }
}

#[test]
fn the_format_is_told_from_keys_only_its_tool_writes() {
    let cases = [
        (r#"{"model_id": "m", "completed": 1}"#, Format::VllmBench),
        (
            r#"{"server_info": {}, "completed": 1}"#,
            Format::SglangBench,
        ),
        (r#"{"mean_e2e_latency_ms": 1}"#, Format::SglangBench),
    ];
    for (text, want) in cases {
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(Format::of(&v), Some(want), "{text}");
    }
    assert_eq!(Format::of(&serde_json::json!({"a": 1})), None);
    for f in Format::ALL {
        assert_eq!(Format::parse(f.key()), Some(f));
    }
    assert_eq!(Format::parse("SGLang"), Some(Format::SglangBench));
}

#[test]
fn an_unknown_or_empty_file_is_named() {
    let p = problems(r#"{"hello": "world"}"#);
    assert!(p[0].starts_with("not a result file"), "{p:?}");
    assert_eq!(problems("  \n")[0], "no result in the file");
    assert!(problems("{oops")[0].starts_with("line 1: not JSON"));
}

/// A vLLM file with four problems names all four: `completed` missing, a negative
/// mean TTFT, a NaN p99 TPOT (Python's bare token), a rate of the wrong type.
#[test]
fn every_problem_of_a_vllm_file_is_named_at_once() {
    let text = r#"{"model_id": "m", "request_rate": [1], "total_input_tokens": 10,
        "total_output_tokens": 5, "mean_ttft_ms": -3.0, "p99_tpot_ms": NaN}"#;
    let p = problems(text);
    assert_eq!(p.len(), 4, "{p:?}");
    assert!(p.contains(&"completed: missing".to_string()), "{p:?}");
    assert!(
        p.contains(&"mean_ttft_ms: -3: must not be negative".to_string()),
        "{p:?}"
    );
    assert!(
        p.contains(&"p99_tpot_ms: NaN: not a finite number".to_string()),
        "{p:?}"
    );
    assert!(
        p.iter().any(|m| m.starts_with("request_rate: [1]")),
        "{p:?}"
    );
}

/// A ramped load, and an old file's E2E mean and median (possibly swapped) left out.
#[test]
fn vllm_ramps_are_refused_and_old_e2e_centres_are_left_out() {
    let ramp = r#"{"model_id": "m", "completed": 2, "request_rate": "inf", "burstiness": 1.0,
        "ramp_up_strategy": "linear", "total_input_tokens": 10, "total_output_tokens": 4,
        "mean_ttft_ms": 5.0}"#;
    assert!(problems(ramp)[0].starts_with("ramp_up_strategy"));
    let old = r#"{"model_id": "m", "completed": 2, "num_prompts": 2, "request_rate": 4.0,
        "total_input_tokens": 10, "total_output_tokens": 4, "mean_e2el_ms": 50.0,
        "median_e2el_ms": 40.0, "p99_e2el_ms": 60.0, "mean_ttft_ms": 5.0}"#;
    let run = read(old, "old.json").unwrap().remove(0);
    let e2e = &run.measured[&Metric::E2eMs];
    assert_eq!(e2e.keys().copied().collect::<Vec<_>>(), vec![Stat::P99]);
    assert!(run.notes.iter().any(|n| n.contains("PR #9984")));
    assert_eq!(
        run.client.load,
        Load::Rate {
            req_s: 4.0,
            burstiness: 1.0,
            concurrency: None
        }
    );
}

/// Every bad line of an SGLang file is named with its line: line 2 is not JSON, line
/// 3 lacks `completed` and has a zero concurrency cap, line 4 replays a trace.
#[test]
fn every_bad_line_of_an_sglang_file_is_named() {
    let good = r#"{"backend": "sglang", "request_rate": Infinity, "max_concurrency": 2, "completed": 2, "total_input_tokens": 8, "total_output_tokens": 4, "mean_e2e_latency_ms": 10.0}"#;
    let no_completed = good
        .replace(r#""completed": 2, "#, "")
        .replace(r#""max_concurrency": 2"#, r#""max_concurrency": 0"#);
    let trace = good.replace("Infinity", r#""trace""#);
    let text = format!("{good}\n{{oops\n{no_completed}\n{trace}\n");
    let p = problems(&text);
    assert_eq!(
        p.len(),
        1,
        "a line that is not JSON is reported alone: {p:?}"
    );
    assert!(p[0].starts_with("line 2: not JSON"), "{p:?}");
    let text = format!("{good}\n{no_completed}\n{trace}\n");
    let p = problems(&text);
    assert!(
        p.contains(&"line 2: completed: missing".to_string()),
        "{p:?}"
    );
    assert!(
        p.contains(&"line 2: max_concurrency: 0: must be > 0".to_string()),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|m| m.starts_with("line 3: request_rate: \"trace\"")),
        "{p:?}"
    );
}

/// Forcing a format reads a file as that format, whatever its keys.
#[test]
fn a_forced_format_reads_the_file_as_that_format() {
    let forced = read_as(r#"{"completed": 1}"#, "x", Format::SglangBench).unwrap_err();
    assert!(
        forced.to_string().contains("request_rate: missing"),
        "{forced}"
    );
}
