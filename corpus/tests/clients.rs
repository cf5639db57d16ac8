//! Benchmark clients' result files read into runs: hand-made files whose figures are
//! derived in the comments, and the real vLLM and SGLang files of
//! `tests/fixtures/bench/` checked against the console logs saved beside them.

use corpus::clients::{self, ClientRun, Deployment, Format, CONSTANT_ARRIVALS};
use corpus::record::{self, *};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/clients")
        .join(name)
}

/// The text of a file, gunzipped when it is gzip.
fn text(path: &Path) -> String {
    let bytes = corpus::io::read_bytes(path).unwrap();
    String::from_utf8(bytes).unwrap()
}

fn read(path: PathBuf) -> Vec<ClientRun> {
    let origin = path.display().to_string();
    clients::read(&text(&path), &origin).unwrap_or_else(|e| panic!("{e}"))
}

fn fig(run: &ClientRun, m: Metric, s: Stat) -> Option<f64> {
    run.measured.get(&m)?.get(&s).copied()
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() <= 1e-6 * b.abs().max(1.0))
}

fn has_note(run: &ClientRun, words: &str) -> bool {
    run.notes.iter().any(|n| n.contains(words))
}

/// 4 requests sent, the third failed (output 0, an error): the run is the 3 completed
/// ones, inputs 100, 200, 400 and outputs 11, 21, 6 in sending order. Rate inf with a
/// cap of 2 is a closed loop of 2. TTFTs 0.10, 0.20, 0.15 s: mean and median 150 ms,
/// p99 (numpy's linear rule, index 0.99 x 2 = 1.98 of [0.10, 0.15, 0.20]) 199 ms;
/// p95 is not a statistic a record holds. E2E 0.6, 1.2, 0.4 s: mean 733.33 ms, median
/// 600 ms; TPOT (0.6 - 0.1) / 10 = (1.2 - 0.2) / 20 = (0.4 - 0.15) / 5 = 50 ms.
/// Throughputs: 3 requests, 38 output and 700 + 38 tokens over 2 s.
#[test]
fn a_detailed_vllm_result_reads_as_its_completed_requests() {
    let runs = read(fixture("vllm-detailed.json"));
    assert_eq!(runs.len(), 1);
    let r = &runs[0];
    assert_eq!(r.format, Format::VllmBench);
    assert_eq!(r.client.load, Load::ClosedLoop { concurrency: 2 });
    assert_eq!(r.client.num_prompts, Some(3));
    assert_eq!(
        r.client.input,
        Lengths::Recorded {
            tokens: vec![100, 200, 400]
        }
    );
    assert_eq!(
        r.client.output,
        Lengths::Recorded {
            tokens: vec![11, 21, 6]
        }
    );
    assert!(close(fig(r, Metric::TtftMs, Stat::Mean), 150.0));
    assert!(close(fig(r, Metric::TtftMs, Stat::P50), 150.0));
    assert!(close(fig(r, Metric::TtftMs, Stat::P99), 199.0));
    assert!(close(fig(r, Metric::TpotMs, Stat::Mean), 50.0));
    assert!(close(fig(r, Metric::ItlMs, Stat::P99), 50.0));
    assert!(close(fig(r, Metric::E2eMs, Stat::Mean), 733.3333333333334));
    assert!(close(fig(r, Metric::E2eMs, Stat::P50), 600.0));
    assert!(close(fig(r, Metric::E2eMs, Stat::P99), 1188.0));
    assert!(close(fig(r, Metric::RequestS, Stat::Value), 3.0 / 2.0));
    assert!(close(fig(r, Metric::OutputTokS, Stat::Value), 38.0 / 2.0));
    assert!(close(fig(r, Metric::TotalTokS, Stat::Value), 738.0 / 2.0));
    assert_eq!(fig(r, Metric::TtftMs, Stat::P90), None);
    assert!(has_note(r, "p95_ttft_ms"), "{:?}", r.notes);
    assert!(has_note(r, "1 request(s) failed"), "{:?}", r.notes);
    assert_eq!(r.model.as_deref(), Some("meta-llama/Llama-3.1-8B-Instruct"));
    assert_eq!(r.measured_on.as_deref(), Some("2026-01-02"));
}

/// The project's summary-only vLLM file (`tests/fixtures/vllm-bench-summary-only.json`):
/// no per-request lists, so every request is the mean, 2029 / 8 = 253.6 -> 254 input
/// and 335 / 8 = 41.9 -> 42 output tokens; `request_rate` is Python's bare `Infinity`
/// and `max_concurrency` null: all 8 sent at once, a closed loop of 8. It holds
/// throughputs only.
#[test]
fn a_summary_only_vllm_result_takes_the_mean_lengths_and_says_so() {
    let runs = read(repo().join("tests/fixtures/vllm-bench-summary-only.json"));
    let r = &runs[0];
    assert_eq!(r.client.input, Lengths::Fixed { tokens: 254 });
    assert_eq!(r.client.output, Lengths::Fixed { tokens: 42 });
    assert_eq!(r.client.load, Load::ClosedLoop { concurrency: 8 });
    assert!(
        has_note(r, "saved without --save-detailed"),
        "{:?}",
        r.notes
    );
    assert!(has_note(r, "a closed loop of 8"), "{:?}", r.notes);
    assert!(close(
        fig(r, Metric::OutputTokS, Stat::Value),
        35.26315789473684
    ));
    assert_eq!(r.measured.len(), 3);
}

/// A vLLM file of a server that ran speculative decoding: 1,000 draft steps of 3,000
/// draft tokens are 3 drafts a step; 875 tokens accepted over 1,000 steps is 0.875 a
/// step, which 0.5 + 0.25 + 0.125 gives: each draft accepted at 0.5 given those
/// before it. A file without the counters has none.
#[test]
fn a_vllm_result_of_speculative_decoding_carries_its_drafts_and_acceptance() {
    let text = r#"{"date": "20261130-120000", "model_id": "m", "num_prompts": 8,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4, "duration": 9.5,
        "completed": 8, "total_input_tokens": 2048, "total_output_tokens": 512,
        "request_throughput": 0.84, "output_throughput": 53.9, "total_token_throughput": 269.5,
        "spec_decode_acceptance_rate": 29.17, "spec_decode_acceptance_length": 1.875,
        "spec_decode_num_drafts": 1000, "spec_decode_draft_tokens": 3000,
        "spec_decode_accepted_tokens": 875}"#;
    let runs = clients::read(text, "spec.json").unwrap();
    let sp = runs[0]
        .hints
        .settings
        .speculative
        .expect("speculative decoding");
    assert_eq!((sp.method, sp.draft_tokens), (SpecMethod::Mtp, 3));
    assert!(close(sp.acceptance, 0.5), "{:?}", sp.acceptance);
    assert!(
        has_note(&runs[0], "3 drafts a step, 0.88 accepted a step"),
        "{:?}",
        runs[0].notes
    );
    let plain = text.replace("\"spec_decode_num_drafts\": 1000,", "");
    let runs = clients::read(&plain, "plain.json").unwrap();
    assert_eq!(runs[0].hints.settings.speculative, None);
}

/// An SGLang line of a server that decoded with EAGLE on the model's MTP layer, 3
/// steps of top-k 1, at 1.875 tokens a verify step: 0.875 drafts accepted a step, 0.5
/// each. Without `accept_length` the drafts have no acceptance; an n-gram drafter is
/// not modelled and the run is read as plain decoding, noted.
#[test]
fn an_sglang_speculative_run_carries_its_drafts_and_acceptance() {
    let line = |alg: &str, accept: &str| {
        format!(
            r#"{{"backend": "sglang", "request_rate": Infinity, "max_concurrency": 4,
            "random_input_len": 1024, "random_output_len": 128, "random_range_ratio": 1.0,
            "server_info": {{"tp_size": 4, "speculative_algorithm": "{alg}",
            "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4, "version": "0.5.9"}},
            "duration": 5.0, "completed": 10, "total_input_tokens": 10240,
            "total_output_tokens": 1280, "mean_tpot_ms": 5.0, "accept_length": {accept}}}"#
        )
        .replace('\n', " ")
    };
    let spec = |text: String| {
        let runs = clients::read(&text, "s.jsonl").unwrap();
        (runs[0].hints.settings.speculative, runs[0].notes.clone())
    };
    let (sp, notes) = spec(line("EAGLE", "1.875"));
    let sp = sp.expect("speculative decoding");
    assert_eq!((sp.method, sp.draft_tokens), (SpecMethod::Mtp, 3));
    assert!(close(sp.acceptance, 0.5), "{:?}", sp.acceptance);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("1.88 tokens a verify step")),
        "{notes:?}"
    );
    let (sp, _) = spec(line("NEXTN", "null"));
    assert_eq!(sp.map(|s| (s.draft_tokens, s.acceptance)), Some((3, None)));
    let (sp, notes) = spec(line("NGRAM", "2.0"));
    assert_eq!(sp, None);
    assert!(
        notes.iter().any(|n| n.contains("priced as plain decoding")),
        "{notes:?}"
    );
}

/// Two runs appended to one file. The first: rate `Infinity` with a cap of 4, no
/// lists, so 10240 / 10 = 1024 and 1280 / 10 = 128 tokens; its `server_info` is an
/// SGLang 0.5.9 server, TP 2, chunked prefill 4096, 64 running requests, 0.85 of
/// memory, the radix cache off, an FP8 KV cache. The second: Poisson at 2.5 req/s with
/// no cap, the lists [5, 7] and [3, 4]; its ITLs are all 0 (no streamed gaps) and are
/// left out.
#[test]
fn sglang_lines_are_runs_of_their_own() {
    let runs = read(fixture("sglang-two-runs.jsonl"));
    assert_eq!(runs.len(), 2);
    let (a, b) = (&runs[0], &runs[1]);
    assert_eq!(a.part.as_deref(), Some("line 1"));
    assert_eq!(a.client.load, Load::ClosedLoop { concurrency: 4 });
    assert_eq!(
        (a.client.input.mean(), a.client.output.mean()),
        (1024.0, 128.0)
    );
    assert_eq!(a.client.warmup_requests, 1);
    assert!(close(fig(a, Metric::E2eMs, Stat::P90), 1950.0));
    assert!(close(fig(a, Metric::TotalTokS, Stat::Value), 2304.0));
    assert!(close(fig(a, Metric::TpotMs, Stat::Mean), 13.386));
    assert!(has_note(a, "p95_itl_ms"), "{:?}", a.notes);
    let h = &a.hints;
    assert_eq!(
        (h.engine, h.version.as_deref()),
        (Some(EngineName::Sglang), Some("0.5.9"))
    );
    assert_eq!(h.settings.max_batched_tokens, Some(4096));
    assert_eq!(h.settings.max_running, Some(64));
    assert_eq!(h.settings.prefix_caching, Some(false));
    let w = h.workers.unwrap();
    assert_eq!((w.count, w.tp, w.attention_dp), (Some(1), 2, 1));
    assert_eq!(a.model.as_deref(), Some("Qwen/Qwen3-8B"));
    assert_eq!(
        b.client.load,
        Load::Rate {
            req_s: 2.5,
            burstiness: 1.0,
            concurrency: None
        }
    );
    assert_eq!(b.client.input, Lengths::Recorded { tokens: vec![5, 7] });
    assert_eq!(fig(b, Metric::ItlMs, Stat::Mean), None);
    assert!(has_note(b, "mean_itl_ms"), "{:?}", b.notes);
}

/// aiperf 1: concurrency 8, 80 requests, 16 warm-up, lengths fixed at 1024 and 128
/// (stddev 0) with `ignore_eos`. TTFT 250.5 ms; `inter_token_latency` 12.5 ms is TPOT;
/// `inter_chunk_latency` 12500 us is an ITL of 12.5 ms; E2E 250.5 + 127 x 12.5 =
/// 1838 ms. p95 and the other percentiles are not kept.
#[test]
fn an_aiperf_export_reads_with_its_units_and_config() {
    let runs = read(fixture("profile_export_aiperf.json"));
    let r = &runs[0];
    assert_eq!(r.format, Format::Aiperf);
    assert_eq!(r.client.load, Load::ClosedLoop { concurrency: 8 });
    assert_eq!(
        (r.client.num_prompts, r.client.warmup_requests),
        (Some(80), 16)
    );
    assert_eq!(r.client.input, Lengths::Fixed { tokens: 1024 });
    assert_eq!(r.client.output, Lengths::Fixed { tokens: 128 });
    assert!(r.client.ignore_eos);
    assert!(close(fig(r, Metric::TtftMs, Stat::Mean), 250.5));
    assert!(close(fig(r, Metric::TpotMs, Stat::Mean), 12.5));
    assert!(close(fig(r, Metric::ItlMs, Stat::Mean), 12.5));
    assert!(close(fig(r, Metric::ItlMs, Stat::P99), 30.0));
    assert!(close(
        fig(r, Metric::E2eMs, Stat::Mean),
        250.5 + 127.0 * 12.5
    ));
    assert!(close(fig(r, Metric::OutputTokS, Stat::Value), 557.1));
    assert!(close(fig(r, Metric::RequestS, Stat::Value), 4.35));
    assert_eq!(r.model.as_deref(), Some("Qwen/Qwen3-8B"));
    assert_eq!(r.measured_on.as_deref(), Some("2025-10-07"));
}

/// genai-perf with a config file: `request_rate` 4 goes to perf_analyzer, whose gaps
/// are constant; the input is normal 512 +- 32 as configured; the output length is
/// unset (`""`), so it is the measured one, normal 200 +- 40; 100 requests measured,
/// 10 warm-up.
#[test]
fn a_genai_perf_export_reads_its_config_file_dialect() {
    let runs = read(fixture("profile_export_genai_perf.json"));
    let r = &runs[0];
    assert_eq!(r.format, Format::GenaiPerf);
    assert_eq!(
        r.client.load,
        Load::Rate {
            req_s: 4.0,
            burstiness: CONSTANT_ARRIVALS,
            concurrency: None
        }
    );
    assert_eq!(
        r.client.input,
        Lengths::Normal {
            mean: 512,
            stddev: 32.0
        }
    );
    assert_eq!(
        r.client.output,
        Lengths::Normal {
            mean: 200,
            stddev: 40.0
        }
    );
    assert_eq!(
        (r.client.num_prompts, r.client.warmup_requests),
        (Some(100), 10)
    );
    assert!(close(fig(r, Metric::TpotMs, Stat::P90), 22.0));
    assert_eq!(fig(r, Metric::ItlMs, Stat::Mean), None);
    assert!(has_note(r, "as generated"), "{:?}", r.notes);
}

/// Two stage reports and the summary, concatenated: two runs, the summary noted. Stage
/// 1 at 2 req/s: TTFT 0.05 s = 50 ms, TPOT 10 ms, E2E 0.05 + 63 x 0.01 = 0.68 s;
/// prompts 200 tokens, outputs 60 to 68 taken as their mean 64. A single report named
/// `stage_3_...` of the concurrent type (6 in flight) is stage 3, from before per-token
/// TPOT; the summary alone is refused.
#[test]
fn inference_perf_stages_are_runs_and_the_summary_is_not() {
    let runs = read(fixture("inference-perf-stages.json"));
    assert_eq!(runs.len(), 2);
    let s0 = &runs[0];
    assert_eq!(
        s0.client.load,
        Load::Rate {
            req_s: 2.0,
            burstiness: CONSTANT_ARRIVALS,
            concurrency: None
        }
    );
    assert!(close(fig(s0, Metric::TtftMs, Stat::Mean), 50.0));
    assert!(close(fig(s0, Metric::TpotMs, Stat::P99), 12.0));
    assert!(close(fig(s0, Metric::E2eMs, Stat::Mean), 680.0));
    assert!(close(fig(s0, Metric::OutputTokS, Stat::Value), 128.0));
    assert_eq!(fig(s0, Metric::ItlMs, Stat::Mean), None);
    assert_eq!(s0.client.input, Lengths::Fixed { tokens: 200 });
    assert_eq!(s0.client.output, Lengths::Fixed { tokens: 64 });
    assert_eq!(s0.client.num_prompts, Some(20));
    assert!(has_note(s0, "summary over all stages"), "{:?}", s0.notes);
    assert!(has_note(s0, "output_len: lengths varied"), "{:?}", s0.notes);
    assert_eq!(
        runs[1].client.load,
        Load::Rate {
            req_s: 8.0,
            burstiness: CONSTANT_ARRIVALS,
            concurrency: None
        }
    );
    let one = read(fixture("stage_3_lifecycle_metrics.json"));
    assert_eq!(one[0].part.as_deref(), Some("stage 3"));
    assert_eq!(one[0].client.load, Load::ClosedLoop { concurrency: 6 });
    assert!(
        has_note(&one[0], "predates inference-perf 3b882ba"),
        "{:?}",
        one[0].notes
    );
    let p = fixture("summary_lifecycle_metrics.json");
    let err = clients::read(&text(&p), "summary_lifecycle_metrics.json").unwrap_err();
    assert!(
        err.to_string().contains("import the stage reports"),
        "{err}"
    );
}

/// `(label, metric, stat)` of the console lines vLLM and SGLang print.
const CONSOLE: [(&str, Metric, Stat); 19] = [
    ("Mean TTFT (ms):", Metric::TtftMs, Stat::Mean),
    ("Median TTFT (ms):", Metric::TtftMs, Stat::P50),
    ("P99 TTFT (ms):", Metric::TtftMs, Stat::P99),
    ("Mean TPOT (ms):", Metric::TpotMs, Stat::Mean),
    ("Median TPOT (ms):", Metric::TpotMs, Stat::P50),
    ("P99 TPOT (ms):", Metric::TpotMs, Stat::P99),
    ("Mean ITL (ms):", Metric::ItlMs, Stat::Mean),
    ("Median ITL (ms):", Metric::ItlMs, Stat::P50),
    ("P99 ITL (ms):", Metric::ItlMs, Stat::P99),
    ("Mean E2EL (ms):", Metric::E2eMs, Stat::Mean),
    ("Median E2EL (ms):", Metric::E2eMs, Stat::P50),
    ("P99 E2EL (ms):", Metric::E2eMs, Stat::P99),
    ("Mean E2E Latency (ms):", Metric::E2eMs, Stat::Mean),
    ("Median E2E Latency (ms):", Metric::E2eMs, Stat::P50),
    ("P90 E2E Latency (ms):", Metric::E2eMs, Stat::P90),
    ("P99 E2E Latency (ms):", Metric::E2eMs, Stat::P99),
    ("Request throughput (req/s):", Metric::RequestS, Stat::Value),
    (
        "Output token throughput (tok/s):",
        Metric::OutputTokS,
        Stat::Value,
    ),
    (
        "Total token throughput (tok/s):",
        Metric::TotalTokS,
        Stat::Value,
    ),
];

/// Every figure of a console log's result table the run holds, to the log's two
/// decimals; the number of figures compared.
fn matches_console(run: &ClientRun, log: &str) -> usize {
    let mut n = 0;
    for line in log.lines() {
        let line = line.trim();
        let Some((label, metric, stat)) = CONSOLE.iter().find(|(l, ..)| line.starts_with(l)) else {
            continue;
        };
        let printed: f64 = line[label.len()..].trim().parse().unwrap();
        let ours = fig(run, *metric, *stat).unwrap_or_else(|| panic!("{label} not read"));
        assert!(
            (ours - printed).abs() <= 0.0051,
            "{label} {ours} vs {printed}"
        );
        n += 1;
    }
    n
}

#[test]
fn the_real_vllm_results_hold_the_figures_their_logs_print() {
    for name in [
        "llama31-70b-h100-tp8-c10",
        "llama31-70b-h100-tp8-c25",
        "llama31-70b-h100-tp8-c50",
        "llama31-70b-h100-tp8-c200",
        "gpt-oss-120b-h100-tp8-c10",
        "gpt-oss-120b-h100-tp8-c50",
    ] {
        let dir = repo().join("tests/fixtures/bench");
        let json = ["json", "json.gz"]
            .iter()
            .map(|e| dir.join(format!("{name}.{e}")))
            .find(|p| p.exists())
            .unwrap();
        let runs = read(json);
        let r = &runs[0];
        let log = std::fs::read_to_string(dir.join(format!("{name}.txt"))).unwrap();
        assert_eq!(matches_console(r, &log), 15, "{name}");
        let c: u32 = name.rsplit("-c").next().unwrap().parse().unwrap();
        assert_eq!(r.client.load, Load::ClosedLoop { concurrency: c }, "{name}");
        assert_eq!(r.client.num_prompts, Some(500));
        let Lengths::Recorded { tokens } = &r.client.output else {
            panic!("{name}")
        };
        assert_eq!((tokens.len(), tokens[0]), (500, 128), "{name}");
    }
}

/// gpt-oss-120b at 200 has no console log upstream: its figures are those of
/// `tests/fixtures/bench/README.md`'s table (from the same file).
#[test]
fn the_real_vllm_result_without_a_log_matches_the_readme() {
    let runs = read(repo().join("tests/fixtures/bench/gpt-oss-120b-h100-tp8-c200.json.gz"));
    let r = &runs[0];
    assert!((fig(r, Metric::TtftMs, Stat::P50).unwrap() - 1728.08).abs() < 0.005);
    assert!((fig(r, Metric::TpotMs, Stat::P99).unwrap() - 41.24).abs() < 0.005);
    assert!((fig(r, Metric::ItlMs, Stat::P99).unwrap() - 85.59).abs() < 0.005);
    assert!((fig(r, Metric::TotalTokS, Stat::Value).unwrap() - 72728.58).abs() < 0.005);
}

#[test]
fn the_real_sglang_results_hold_the_figures_their_logs_print() {
    for input in [1024, 2048, 4096, 8192] {
        let dir = repo().join("tests/fixtures/bench");
        let name = format!("sglang-llama31-70b-h100-tp8-in{input}-c100");
        let runs = read(dir.join(format!("{name}.jsonl.gz")));
        assert_eq!(runs.len(), 1);
        let r = &runs[0];
        let log = std::fs::read_to_string(dir.join(format!("{name}.txt"))).unwrap();
        // E2E 4, TTFT 3, TPOT 3, ITL 3 (P95 not kept), the 3 throughputs.
        assert_eq!(matches_console(r, &log), 16, "{name}");
        assert_eq!(r.client.load, Load::ClosedLoop { concurrency: 100 });
        let Lengths::Recorded { tokens } = &r.client.input else {
            panic!("{name}")
        };
        assert_eq!(tokens.len(), 100);
        assert_eq!(r.hints.version.as_deref(), Some("0.5.9"));
        assert_eq!(r.hints.workers.map(|w| w.tp), Some(8));
        assert_eq!(r.hints.settings.max_batched_tokens, Some(8192));
        assert_eq!(r.hints.settings.prefix_caching, Some(true));
    }
}

fn deployment() -> Deployment {
    Deployment {
        engine: Engine {
            name: EngineName::Vllm,
            version: Some("0.15.0".into()),
            image: None,
            settings: EngineSettings::default(),
        },
        model: ModelRef {
            id: "meta-llama/Llama-3.1-70B-Instruct".into(),
            config: "models/Llama-3.1-70B/config.json".into(),
            gemm: record::Format::Bf16,
            moe: None,
            kv: None,
        },
        gpu: Gpu {
            system: "h100_sxm".into(),
            hardware: "h100".into(),
        },
        layout: Layout::Aggregated {
            workers: Workers {
                count: Some(1),
                tp: 8,
                pp: 1,
                attention_dp: 1,
                moe_tp: 1,
                moe_ep: 1,
                max_batch: None,
            },
        },
    }
}

/// Every run of every hand-made and real file made a record: no problem, and the
/// corpus reads back as written.
#[test]
fn runs_become_records_that_read_back() {
    let mut runs = Vec::new();
    for f in [
        "vllm-detailed.json",
        "sglang-two-runs.jsonl",
        "profile_export_aiperf.json",
        "profile_export_genai_perf.json",
        "inference-perf-stages.json",
        "stage_3_lifecycle_metrics.json",
    ] {
        runs.extend(read(fixture(f)));
    }
    runs.extend(read(
        repo().join("tests/fixtures/bench/llama31-70b-h100-tp8-c50.json"),
    ));
    let records: Vec<RunRecord> = runs
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.into_record(format!("run-{i}"), deployment(), "hand-made".into()))
        .collect();
    for r in &records {
        assert!(r.problems().is_empty(), "{}: {:?}", r.id, r.problems());
    }
    let text = corpus::io::to_jsonl(&records, "client runs");
    let back = corpus::io::parse_jsonl(&text, "t").unwrap();
    assert_eq!(back, records);
}

/// The SGLang server's own words against a deployment that disagrees: the
/// deployment is kept, every disagreement noted; its settings fill what the deployment
/// leaves open.
#[test]
fn a_record_keeps_the_deployment_and_notes_what_the_file_says_otherwise() {
    let run = read(fixture("sglang-two-runs.jsonl")).remove(0);
    let d = deployment();
    let conflicts = run.conflicts(&d);
    // Engine sglang vs vllm, version 0.5.9 vs 0.15.0, TP 2 vs 8, FP8 KV vs the model's.
    assert_eq!(conflicts.len(), 4, "{conflicts:?}");
    let rec = run.into_record("x".into(), d, "hand-made".into());
    assert_eq!(rec.engine.name, EngineName::Vllm);
    assert_eq!(rec.engine.settings.max_batched_tokens, Some(4096));
    assert_eq!(rec.engine.settings.memory_fraction, Some(0.85));
    let notes = &rec.provenance.notes;
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.starts_with("in conflict"))
            .count(),
        4
    );
    assert!(notes
        .iter()
        .any(|n| n.contains("the file names the model `Qwen/Qwen3-8B`")));
    assert_eq!(
        rec.provenance
            .row
            .as_deref()
            .map(|r| r.ends_with("(line 1)")),
        Some(true)
    );
}
