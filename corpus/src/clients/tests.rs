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
        (r#"{"input_config": {"loadgen": {}}}"#, Format::Aiperf),
        (
            r#"{"aiperf_version": "0.7", "input_config": {}}"#,
            Format::Aiperf,
        ),
        (
            r#"{"input_config": {"perf_analyzer": {}}}"#,
            Format::GenaiPerf,
        ),
        (r#"{"input_config": {"concurrency": 4}}"#, Format::GenaiPerf),
        (
            r#"{"load_summary": {}, "successes": {}}"#,
            Format::InferencePerf,
        ),
    ];
    for (text, want) in cases {
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(Format::of(&v), Some(want), "{text}");
    }
    assert_eq!(Format::of(&serde_json::json!({"a": 1})), None);
    for f in Format::ALL {
        assert_eq!(Format::parse(f.key()), Some(f));
    }
    assert_eq!(Format::parse("Genai_Perf"), Some(Format::GenaiPerf));
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

/// An SGLang summary of the random dataset draws its lengths as `bench_serving` does
/// (input uniform on [max(floor(L r), 1), L], output on [floor(O r), O], at least 1),
/// where the file's mean lengths agree; otherwise every request is the mean. Means of
/// 100 requests: 505 input (512.5 expected, standard error 29.6) and 61 output (64.5,
/// 3.7); 300 input tokens a request is 7 standard errors off.
#[test]
fn an_sglang_random_summary_draws_the_datasets_lengths() {
    let line = |input_total: u64| {
        format!(
            r#"{{"backend": "sglang", "dataset_name": "random", "random_input_len": 1024, "random_output_len": 128, "random_range_ratio": 0.0, "request_rate": Infinity, "max_concurrency": 100, "completed": 100, "total_input_tokens": {input_total}, "total_output_tokens": 6100, "mean_e2e_latency_ms": 10.0}}"#
        )
    };
    let runs = read(&line(50_500), "f").unwrap();
    assert_eq!(
        runs[0].client.input,
        Lengths::Uniform { low: 1, high: 1024 }
    );
    assert_eq!(
        runs[0].client.output,
        Lengths::Uniform { low: 1, high: 128 }
    );
    assert!(runs[0]
        .notes
        .iter()
        .any(|n| n.contains("drawn from the run's dataset")));
    let runs = read(&line(30_000), "f").unwrap();
    assert_eq!(runs[0].client.input, Lengths::Fixed { tokens: 300 });
    assert_eq!(runs[0].client.output, Lengths::Fixed { tokens: 61 });
    // A range ratio of 1: every request its length.
    let fixed = line(102_400).replace("\"random_range_ratio\": 0.0", "\"random_range_ratio\": 1.0");
    let runs = read(&fixed.replace("6100", "12800"), "f").unwrap();
    assert_eq!(runs[0].client.input, Lengths::Fixed { tokens: 1024 });
    assert_eq!(runs[0].client.output, Lengths::Fixed { tokens: 128 });
}

/// aiperf's units are checked; a block of an unknown unit and a missing config are
/// named; forcing a format reads a file as that format.
#[test]
fn aiperf_units_and_configs_are_checked() {
    let text = r#"{"aiperf_version": "0.3", "time_to_first_token": {"unit": "furlongs", "avg": 3.0},
        "request_latency": {"unit": "ms", "avg": -1.0}}"#;
    let p = problems(text);
    assert!(
        p.iter().any(|m| m.starts_with("input_config: missing")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|m| m.contains("`furlongs`: not a unit of ttft_ms")),
        "{p:?}"
    );
    assert!(
        p.contains(&"request_latency.avg: -1: must not be negative".to_string()),
        "{p:?}"
    );
    let forced = read_as(r#"{"completed": 1}"#, "x", Format::SglangBench).unwrap_err();
    assert!(
        forced.to_string().contains("request_rate: missing"),
        "{forced}"
    );
}

/// aiperf 2's phases: the profiling phase's gamma load and the warm-up's requests;
/// genai-perf's command-line namespace with an unset output mean (-1).
#[test]
fn aiperf_phases_and_genai_perf_arguments_are_read() {
    let v2 = r#"{"schema_version": "1.4", "input_config": {"models": {"items": [{"name": "m"}]},
        "phases": {"warmup": {"type": "concurrency", "kind": "warmup", "requests": 12, "concurrency": 4},
                   "profiling": {"type": "gamma", "rate": 3.0, "smoothness": 0.5, "requests": 300, "concurrency": 64}}},
        "time_to_first_token": {"unit": "ms", "avg": 40.0},
        "input_sequence_length": {"unit": "tokens", "avg": 300.0, "std": 0.0, "min": 300, "max": 300},
        "output_sequence_length": {"unit": "tokens", "avg": 99.6, "std": 3.0, "min": 90, "max": 100},
        "request_count": {"unit": "requests", "avg": 300}}"#;
    let r = read(v2, "v2.json").unwrap().remove(0);
    assert_eq!(
        r.client.load,
        Load::Rate {
            req_s: 3.0,
            burstiness: 0.5,
            concurrency: Some(64)
        }
    );
    assert_eq!(r.client.warmup_requests, 12);
    assert_eq!(r.client.input, Lengths::Fixed { tokens: 300 });
    assert_eq!(
        r.client.output,
        Lengths::Normal {
            mean: 100,
            stddev: 3.0
        }
    );
    assert_eq!(r.model.as_deref(), Some("m"));
    let gp = r#"{"input_config": {"model": ["m"], "concurrency": 16, "request_rate": null,
        "synthetic_input_tokens_mean": 2048, "synthetic_input_tokens_stddev": 0,
        "output_tokens_mean": -1, "output_tokens_stddev": 0, "warmup_request_count": 0,
        "extra_inputs": {"max_tokens": 256}},
        "inter_token_latency": {"unit": "ms", "avg": 9.0},
        "output_sequence_length": {"unit": "tokens", "avg": 256.0, "std": 0.0, "min": 256, "max": 256}}"#;
    let r = read(gp, "gp.json").unwrap().remove(0);
    assert_eq!(r.format, Format::GenaiPerf);
    assert_eq!(r.client.load, Load::ClosedLoop { concurrency: 16 });
    assert_eq!(r.client.input, Lengths::Fixed { tokens: 2048 });
    assert_eq!(r.client.output, Lengths::Fixed { tokens: 256 });
    let two = v2.replace(r#""kind": "warmup", "#, r#""kind": "profiling", "#);
    let p = problems(&two);
    assert!(p.iter().any(|m| m.contains("2 profiling phases")), "{p:?}");
}
