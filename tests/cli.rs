//! The `twin` binary end to end: `forward`'s contract, errors on bad scenario files and
//! impossible configurations, `sweep` and `simulate`'s contracts.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;

#[test]
fn forward_json_has_the_contract_fields() {
    let v = json(&twin(&[
        "forward",
        "--dep",
        "32",
        "--batch-per-rank",
        "64",
        "--context",
        "131072",
        "--set",
        "model.moe.fused=false",
        "--json",
    ]));
    let step = v["step_ms"].as_f64().unwrap();
    assert!(step > 0.0);
    for key in ["moe", "attention", "indexer"] {
        assert!(
            v["breakdown_ms"][key].as_f64().unwrap() > 0.0,
            "breakdown_ms.{key}"
        );
    }
    let sum: f64 = v["breakdown_ms"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_f64().unwrap())
        .sum();
    assert!(
        (sum - step).abs() < 1e-9 * step.max(1.0),
        "breakdown {sum} != step {step}"
    );
    assert!(v["tokens_per_s_per_gpu"].as_f64().unwrap() > 0.0);
    assert_eq!(
        v["bound"]["moe"], "memory",
        "decode MoE at 64 per rank reads weights"
    );
}

/// `--tp 1` is one GPU (a tensor-parallel replica of one), not the default DEP group of
/// 8 ranks that pricing without `--tp` gives; `--dep` still wins where both are given.
#[test]
fn forward_tp_1_prices_one_gpu() {
    let dep_of = |extra: &[&str]| {
        let mut args = vec!["forward", "--hardware", "h100", "--model", "llama-3.1-8b"];
        args.extend_from_slice(extra);
        args.push("--json");
        json(&twin(&args))["inputs"]["spec"]["dep"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(dep_of(&["--tp", "1"]), 1);
    assert_eq!(dep_of(&[]), 8);
    assert_eq!(dep_of(&["--tp", "1", "--dep", "4"]), 4);
    assert_eq!(dep_of(&["--tp", "2"]), 1);
}

#[test]
fn forward_is_deterministic_and_set_overrides_any_field() {
    let args = [
        "forward",
        "--phase",
        "prefill",
        "--dep",
        "2",
        "--requests",
        "1",
        "--new-tokens",
        "32768",
        "--chunk",
        "4096",
        "--json",
    ];
    let a = stdout(&twin(&args));
    assert_eq!(a, stdout(&twin(&args)), "same input, same bytes");
    let small = json(&twin(&args));
    let mut big_args = args.to_vec();
    big_args.extend(["--set", "model.engram.page_size=2MiB"]);
    let big = json(&twin(&big_args));
    assert!(
        big["breakdown_ms"]["engram"].as_f64().unwrap()
            < small["breakdown_ms"]["engram"].as_f64().unwrap()
    );
    let mut hw_args = args.to_vec();
    hw_args.extend(["--set", "hardware.hbm.bytes_per_s=4e12"]);
    assert!(
        json(&twin(&hw_args))["step_ms"].as_f64().unwrap() > small["step_ms"].as_f64().unwrap()
    );
}

fn write_model(dir: &Path, edit: impl Fn(String) -> String) -> String {
    let text =
        std::fs::read_to_string(repo().join("scenarios/models/deepseek-v4.1-flash.toml")).unwrap();
    let path = dir.join("bad-model.toml");
    std::fs::write(&path, edit(text)).unwrap();
    path.to_string_lossy().into_owned()
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle in file")
        + 1
}

#[test]
fn unknown_fields_are_all_reported_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let edited = |t: String| {
        t.replacen("top_k = 6\n", "top_k = 6\ntop_kk = 7\n", 1)
            .replacen(
                "[mhc]\nstreams = 4\n",
                "[mhc]\nstreams = 4\nstream_width = 2\n",
                1,
            )
    };
    let path = write_model(dir.path(), edited);
    let text = std::fs::read_to_string(&path).unwrap();
    let err = fails_with(
        &["forward", "--model", &path],
        &[
            &path,
            "2 problems",
            "moe.top_kk",
            "mhc.stream_width",
            "unknown field",
        ],
    );
    assert!(
        err.contains(&format!("line {}", line_of(&text, "top_kk"))),
        "{err}"
    );
    assert!(
        err.contains(&format!("line {}", line_of(&text, "stream_width"))),
        "{err}"
    );
}

#[test]
fn bad_values_and_bad_toml_say_where() {
    let dir = tempfile::tempdir().unwrap();
    // A semantic problem and a type problem in one file: both named, with lines.
    let path = write_model(dir.path(), |t| {
        t.replacen("routed_experts = 384", "routed_experts = 4", 1)
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let err = fails_with(
        &["forward", "--model", &path],
        &["moe.top_k", "must lie in 1..=4"],
    );
    assert!(
        err.contains(&format!("line {}", line_of(&text, "top_k = 6"))),
        "{err}"
    );
    let path = write_model(dir.path(), |t| {
        t.replacen("hidden = 4096", "hidden = \"wide\"", 1)
    });
    fails_with(&["forward", "--model", &path], &["hidden", "line 5"]);
    let path = write_model(dir.path(), |t| t.replacen("[mhc]", "[mhc", 1));
    fails_with(&["forward", "--model", &path], &["not valid TOML", "line"]);
    fails_with(
        &["forward", "--model", "no-such-model"],
        &["unknown model `no-such-model`", "deepseek-v4.1-flash"],
    );
    fails_with(
        &["forward", "--set", "model.moe.top_kk=3"],
        &["moe.top_kk", "--set model.moe.top_kk=3", "unknown field"],
    );
    fails_with(
        &["forward", "--set", "model.engram.page_size=3 parsecs"],
        &["engram.page_size", "byte unit"],
    );
    fails_with(&["forward", "--set", "nonsense"], &["PATH=VALUE"]);
    // An override that creates an unknown table is blamed on the override, not a line.
    fails_with(
        &["forward", "--set", "model.mtpp.draft_tokens=2"],
        &["--set model.mtpp.draft_tokens=2: mtpp: unknown field"],
    );
}

#[test]
fn impossible_configurations_say_what_to_change() {
    fails_with(
        &["forward", "--dep", "36"],
        &[
            "384 routed + 0 redundant experts do not divide over 36 ranks",
            "--dep 32",
            "add 12 more redundant experts",
        ],
    );
    assert!(
        twin(&["forward", "--dep", "36", "--redundant-experts", "12"])
            .status
            .success()
    );
    fails_with(
        &["forward", "--dep", "96"],
        &["larger than the 72-GPU gb300 rack", "--dep 72 or less"],
    );
    fails_with(
        &[
            "forward",
            "--dep",
            "8",
            "--batch-per-rank",
            "4096",
            "--context",
            "1000000",
        ],
        &["GB of KV per GPU", "--batch-per-rank", "or less"],
    );
    // Tensor parallelism: heads must divide, one replica per instance, no EPLB.
    fails_with(
        &["forward", "--tp", "3"],
        &["64 attention heads do not divide over 3 GPUs", "2, 4, 8"],
    );
    fails_with(
        &["forward", "--tp", "4", "--dep", "2"],
        &[
            "TP4 with 2 data-parallel replicas is not modelled",
            "--dep 1",
        ],
    );
    fails_with(
        &["forward", "--tp", "4", "--redundant-experts", "8"],
        &["--redundant-experts 0"],
    );
    fails_with(
        &["forward", "--expert-parallel"],
        &["--expert-parallel applies to a TP replica"],
    );
    // DeepSeek-V3's weights do not fit one H100 at TP2 or DEP1.
    for (layout, size, advice) in [
        ("--tp", "2", "use a larger TP"),
        ("--dep", "1", "use a larger DEP"),
    ] {
        let args = [
            "forward",
            "--hardware",
            "h100",
            "--model",
            "deepseek-v3",
            layout,
            size,
        ];
        fails_with(&args, &["weights need", advice]);
    }
    fails_with(
        &["forward", "--mtp", "5"],
        &["acceptance rates for 3 draft tokens", "--mtp 3 or less"],
    );
}

/// Block-FP8 experts sliced into partial 128-wide scale blocks are refused, as vLLM and
/// SGLang refuse them: DeepSeek-V3's 2048-wide experts over 32 GPUs are 64 wide; kept
/// whole by expert parallelism they run.
#[test]
fn block_fp8_experts_sliced_mid_block_are_refused() {
    let sliced = [
        "forward",
        "--hardware",
        "h100",
        "--model",
        "deepseek-v3",
        "--tp",
        "32",
    ];
    fails_with(
        &sliced,
        &[
            "cut into 64-wide shards over 32 GPUs, not whole 128-wide scale blocks",
            "keep the experts whole with --expert-parallel",
            "(2, 4, 8, 16)",
        ],
    );
    let whole = [&sliced[..], &["--expert-parallel"]].concat();
    assert!(twin(&whole).status.success());
}

#[test]
fn sweep_marks_the_frontier_and_lists_what_it_skipped() {
    let v = json(&twin(&[
        "sweep",
        "--deps",
        "8,32,36",
        "--batches",
        "16,128",
        "--context",
        "131072",
        "--json",
    ]));
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 4, "DEP36 cannot hold 384 experts: {v}");
    assert!(points.iter().any(|p| p["pareto"] == true));
    // Within a DEP size, a bigger batch buys throughput per GPU with speed per user.
    for dep in [8, 32] {
        let at = |b: u64| {
            points
                .iter()
                .find(|p| p["dep"] == dep && p["batch_per_rank"] == b)
                .unwrap()
                .clone()
        };
        let (small, big) = (at(16), at(128));
        assert!(big["tokens_per_s_per_gpu"].as_f64() > small["tokens_per_s_per_gpu"].as_f64());
        assert!(big["tokens_per_s_per_user"].as_f64() < small["tokens_per_s_per_user"].as_f64());
    }
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2);
    assert!(skipped[0]["why"]
        .as_str()
        .unwrap()
        .contains("do not divide over 36 ranks"));
}

/// `--tps` alone sweeps TP layouts only. Given neither `--deps` nor `--tps`, a dense
/// model (Llama-3.1-70B) tries TP 1, 2, 4 and 8: its DEP ranks would each hold all of
/// it (none fits an H100), and at TP1 and TP2 its 141 GB do not fit either.
#[test]
fn a_tp_sweep_tries_no_dep_layout_unless_asked() {
    let sweep = |extra: &[&str]| {
        let mut a = vec!["sweep", "--model", "llama-3.1-70b", "--hardware", "h100"];
        a.extend_from_slice(&["--batches", "16", "--json"]);
        a.extend_from_slice(extra);
        json(&twin(&a))
    };
    let v = sweep(&["--tps", "4,8"]);
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{v}");
    assert!(points.iter().all(|p| p["dep"] == 1), "{v}");
    assert!(v["skipped"].as_array().unwrap().is_empty(), "{v}");
    let v = sweep(&["--tps", "8", "--deps", "8"]);
    assert_eq!(v["skipped"].as_array().unwrap().len(), 1, "{v}");
    let v = sweep(&[]);
    let layout = |key: &str| -> Vec<(u64, u64)> {
        v[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["dep"].as_u64().unwrap(), p["tp"].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(layout("points"), [(1, 4), (1, 8)], "{v}");
    assert_eq!(layout("skipped"), [(1, 1), (1, 2)], "{v}");
}

#[test]
fn a_sweep_names_a_refused_layout_by_its_own_flags() {
    // DeepSeek-V3 at TP3: 128 heads do not divide over 3 GPUs, and its block-FP8
    // experts (2048 wide) would be cut into 682.7-wide shards; the sweep asked with
    // --tps, so that is the flag it names, not forward's --tp.
    let v = json(&twin(&[
        "sweep",
        "--model",
        "deepseek-v3",
        "--hardware",
        "h200",
        "--deps",
        "8",
        "--tps",
        "3",
        "--batches",
        "8",
        "--json",
    ]));
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{v}");
    let why = skipped[0]["why"].as_str().unwrap();
    assert!(
        why.starts_with("impossible configuration: --tps: 128 attention heads"),
        "{why}"
    );
    assert!(why.contains("682.7-wide shards over 3 GPUs"), "{why}");
    assert!(
        why.contains("or use a --tps whose shards are whole blocks (2)"),
        "{why}"
    );
    assert!(!why.contains("--tp:") && !why.contains("--tp "), "{why}");
}

#[test]
fn simulate_json_is_deterministic_and_has_the_contract_fields() {
    let args = [
        "simulate",
        "--duration",
        "8",
        "--set",
        "warmup_s=2",
        "--json",
    ];
    let a = twin(&args);
    assert_eq!(stdout(&a), stdout(&twin(&args)), "same seed, same bytes");
    let v = json(&a);
    assert_eq!(v["gpus"], 72);
    assert!(v["requests_completed"].as_u64().unwrap() > 0);
    for k in ["total", "cached_input", "uncached_input", "output"] {
        assert!(
            v["throughput_tok_s_per_gpu"][k].as_f64().unwrap() > 0.0,
            "throughput_tok_s_per_gpu.{k}"
        );
    }
    for k in ["p50", "p90"] {
        assert!(v["per_user_tok_s"][k].as_f64().unwrap() > 0.0);
    }
    for m in ["ttft_ms", "tpot_ms"] {
        for k in ["p50", "p90", "p99"] {
            assert!(v[m][k].as_f64().unwrap() > 0.0, "{m}.{k}");
        }
    }
    assert!(v["revenue_usd_per_gpu_hour"].as_f64().unwrap() > 0.0);
    assert!(v["cost_usd_per_gpu_hour"].as_f64().unwrap() > 0.0);
    assert!(
        v["version"].is_string() && v["seed"].is_u64() && v["resolved"]["scenario"].is_object()
    );
    let seeded = [&args[..], &["--seed", "7"]].concat();
    let other = stdout(&twin(&seeded));
    assert_ne!(stdout(&a), other, "another seed, another run");
}

/// `--seeds N` runs N consecutive seeds from `--seed` and reports each figure's
/// values per seed, the same as single runs of those seeds give; conflicting or
/// impossible requests are refused.
#[test]
fn simulate_seeds_reports_the_spread_of_single_runs() {
    let base = ["simulate", "--duration", "8", "--set", "warmup_s=2"];
    let o = twin(&[&base[..], &["--seeds", "2", "--seed", "5", "--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["replicas"]["seeds"], serde_json::json!([5, 6]));
    let figures = v["replicas"]["figures"].as_array().unwrap();
    let tput = figures
        .iter()
        .find(|f| f["figure"] == "throughput per GPU")
        .expect("throughput figure");
    for (i, seed) in ["5", "6"].iter().enumerate() {
        let single = json(&twin(&[&base[..], &["--seed", seed, "--json"]].concat()));
        assert_eq!(
            tput["values"][i], single["throughput_tok_s_per_gpu"]["total"],
            "seed {seed}: the replication is the single run"
        );
    }
    let (a, b) = (
        tput["values"][0].as_f64().unwrap(),
        tput["values"][1].as_f64().unwrap(),
    );
    assert_eq!(tput["mean"].as_f64().unwrap(), (a + b) / 2.0);
    // Two runs: t(0.975, 1) * |a - b| / sqrt(2) / sqrt(2).
    let want = 12.706 * (a - b).abs() / 2.0;
    assert!((tput["ci95"].as_f64().unwrap() - want).abs() <= 1e-9 * want.max(1.0));
    let text = stdout(&twin(&[&base[..], &["--seeds", "2"]].concat()));
    assert!(
        text.contains("2 runs, seeds 1..=2") && text.contains("TTFT p90"),
        "{text}"
    );
    refused(
        &[&base[..], &["--seeds", "0"]].concat(),
        &["--seeds 0", "1 to 64"],
    );
    refused(
        &[&base[..], &["--seeds", "2", "--report", "/tmp/x"]].concat(),
        &["--report describes one run"],
    );
    refused(
        &[&base[..], &["--seeds", "2", "--decode-deps", "16,24"]].concat(),
        &["--decode-deps"],
    );
}

/// A scenario's `pdl = true` (TensorRT-LLM's TRTLLM_ENABLE_PDL=1) prices its pools'
/// steps with no gap between a CUDA graph's kernels and says so in each pool's cost
/// model, and its steps' launches shrink (a chat workload's decode steps replay graphs);
/// without it nothing says PDL.
#[test]
fn simulate_pdl_says_so_and_leaves_no_gap_between_kernels() {
    let base = [
        "simulate",
        "h100-gpt-oss-120b-chat",
        "--duration",
        "8",
        "--set",
        "warmup_s=2",
        "--json",
    ];
    let plain = json(&twin(&base));
    let pdl = json(&twin(&[&base[..], &["--set", "pdl=true"]].concat()));
    let line = |v: &serde_json::Value| v["pools"][0]["cost_model"].as_str().unwrap().to_string();
    assert!(
        line(&pdl).ends_with("; kernels launched with PDL: no gap between them in a graph"),
        "{}",
        line(&pdl)
    );
    assert!(!line(&plain).contains("PDL"), "{}", line(&plain));
    let step = |v: &serde_json::Value| v["pools"][0]["step_ms_mean"].as_f64().unwrap();
    assert!(
        step(&pdl) < step(&plain),
        "{} ms with PDL, {} without",
        step(&pdl),
        step(&plain)
    );
}

/// `--cohort K` is `--set fidelity.cohort=K`: the coarse model, named in the report;
/// an explicit `--set` wins; a count out of range is refused with its field.
#[test]
fn simulate_cohort_runs_the_coarse_model() {
    let base = [
        "simulate",
        "--duration",
        "20",
        "--set",
        "warmup_s=5",
        "--json",
    ];
    let flag = twin(&[&base[..], &["--cohort", "8"]].concat());
    assert!(flag.status.success(), "{}", stderr(&flag));
    let set = twin(&[&base[..], &["--set", "fidelity.cohort=8"]].concat());
    let (v, w) = (json(&flag), json(&set));
    assert_eq!(v["cohort"], 8);
    assert_eq!(v["throughput_tok_s_per_gpu"], w["throughput_tok_s_per_gpu"]);
    assert_eq!(v["ttft_ms"], w["ttft_ms"]);
    let exact = json(&twin(&base));
    assert!(
        exact.get("cohort").is_none(),
        "an exact run has no cohort field"
    );
    let overridden = json(&twin(
        &[&base[..], &["--cohort", "8", "--set", "fidelity.cohort=1"]].concat(),
    ));
    assert_eq!(
        overridden["throughput_tok_s_per_gpu"],
        exact["throughput_tok_s_per_gpu"]
    );
    let o = twin(&[
        "simulate",
        "--duration",
        "20",
        "--set",
        "warmup_s=5",
        "--cohort",
        "16",
    ]);
    let text = stdout(&o);
    assert!(
        text.contains("fidelity  coarse: one of 8 identical copies of the rack"),
        "16 does not divide the 24 prefill instances: 8 does\n{text}"
    );
    assert!(
        stderr(&o).contains("the pools split into 8 copies"),
        "{}",
        stderr(&o)
    );
    refused(
        &[&base[..], &["--cohort", "0"]].concat(),
        &["fidelity.cohort", "1..=1024"],
    );
}

/// `--decode-deps` runs one simulation per P/D split, in the order given; a split that
/// cannot run says why and does not stop the others; the prefill pool fills the rest.
#[test]
fn simulate_compares_pd_splits() {
    let v = json(&twin(&[
        "simulate",
        "--duration",
        "20",
        "--set",
        "warmup_s=5",
        "--decode-deps",
        "24,40,48",
        "--json",
    ]));
    let runs = v.as_array().unwrap();
    let deps: Vec<u64> = runs
        .iter()
        .map(|r| r["decode_dep"].as_u64().unwrap())
        .collect();
    assert_eq!(deps, [24, 40, 48]);
    assert!(runs[1]["error"]
        .as_str()
        .unwrap()
        .contains("do not divide over 40"));
    for (r, prefill) in [(&runs[0], 24), (&runs[2], 12)] {
        assert_eq!(r["prefill_instances"], prefill);
        let rep = &r["report"];
        assert_eq!(rep["gpus"], 72);
        assert_eq!(rep["pools"][0]["instances"], prefill);
        assert_eq!(rep["pools"][1]["dep"], r["decode_dep"]);
        assert!(rep["throughput_tok_s_per_gpu"]["total"].as_f64().unwrap() > 0.0);
        assert!(r["pareto"].is_boolean());
    }
    let aggregated = twin(&[
        "simulate",
        "gb300-nvl72-v4.1-flash-agentx-aggregated",
        "--decode-deps",
        "8",
    ]);
    assert!(!aggregated.status.success());
    assert!(stderr(&aggregated).contains("needs serving.mode = \"disaggregated\""));
}

/// Tensor-parallel layouts: `forward --tp` names the layout and its all-reduces, and
/// `sweep --tps` puts TP replicas beside DEP groups; for one user a TP replica is
/// faster than a DEP group of as many GPUs (no all-to-all latency per layer), and for
/// a large batch the DEP group gives more tokens per GPU.
#[test]
fn tensor_parallel_layouts_price_and_sweep() {
    let o = twin(&[
        "forward",
        "--tp",
        "8",
        "--requests",
        "1",
        "--context",
        "8192",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains(", TP8, 1 request over the group"), "{text}");
    assert!(
        text.contains("communication (all-reduce kernels, serial)"),
        "{text}"
    );
    let j = json(&twin(&[
        "sweep",
        "--deps",
        "8",
        "--tps",
        "8",
        "--batches",
        "1,128",
        "--json",
    ]));
    let point = |tp: u64, batch: u64| {
        j["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["tp"] == tp && p["batch_per_rank"] == batch)
            .unwrap_or_else(|| panic!("no point tp {tp} batch {batch}: {j}"))
            .clone()
    };
    let user = |p: &Value| p["tokens_per_s_per_user"].as_f64().unwrap();
    let gpu = |p: &Value| p["tokens_per_s_per_gpu"].as_f64().unwrap();
    assert!(user(&point(8, 1)) > user(&point(1, 1)));
    assert!(gpu(&point(1, 128)) > gpu(&point(8, 128)));
}

/// Users see user words: the attention kernel is named as the flag names it, not by
/// its Rust enum (`SparseDecode`).
#[test]
fn kernel_attention_names_its_kind_in_user_words() {
    let o = twin(&[
        "kernel",
        "attention",
        "--kind",
        "sparse-decode",
        "--heads",
        "64",
        "--q-tokens",
        "2",
        "--context",
        "8192",
        "--top-k",
        "2048",
        "--dqk",
        "576",
        "--dv",
        "512",
        "--kv-bytes",
        "656",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with("sparse decode attention, batch 1"),
        "{text}"
    );
    assert!(!text.contains("SparseDecode"), "{text}");
}

#[test]
fn reports_and_refusals_name_modes_and_prices_in_the_scenarios_words() {
    // The simulate report's run and money lines, and a refusal naming a mode, spell
    // them as a scenario does (`serving.mode = "prefill-only"`, `price.basis =
    // "hyperscaler"`), not as Rust enums (PrefillOnly, Hyperscaler).
    let (out, _) = runs(&[
        "simulate",
        "gb300-prefill-only-agentx-c256",
        "--set",
        "duration_s=4",
        "--set",
        "warmup_s=1",
    ]);
    assert!(out.contains(", prefill-only)"), "{out}");
    assert!(out.contains(", hyperscaler GPU cost)"), "{out}");
    for internal in ["PrefillOnly", "Hyperscaler", "Disaggregated"] {
        assert!(!out.contains(internal), "{internal} in:\n{out}");
    }
    let e = refused(
        &[
            "simulate",
            "gb300-prefill-only-agentx-c256",
            "--decode-deps",
            "16",
        ],
        &["serving.mode = \"prefill-only\""],
    );
    assert!(!e.contains("PrefillOnly"), "{e}");
}

#[test]
fn a_scenario_without_a_price_sheet_is_told_which_one_values_its_tokens() {
    let short = ["--set", "duration_s=4", "--set", "warmup_s=1"];
    let mut a = vec!["simulate", "h100-llama-3.1-70b-tp8"];
    a.extend(short);
    let (_, e) = runs(&a);
    assert!(
        e.contains("price.sheet is not set and twin knows no public API price sheet of model `llama-3.1-70b`, so revenue is not computed"),
        "{e}"
    );
    // The default rack names its sheet: no note.
    let mut a = vec!["simulate"];
    a.extend(short);
    let (_, e) = runs(&a);
    assert!(!e.contains("price.sheet is not set"), "{e}");
}

#[test]
fn a_run_that_completes_nothing_says_so_and_has_no_latency() {
    let a = [
        "simulate",
        "--set",
        "duration_s=0.2",
        "--set",
        "warmup_s=0.1",
    ];
    let (out, e) = runs(&a);
    assert!(
        e.contains("note: no request completed in the 0.1 s measured window"),
        "{e}"
    );
    let ttft = out.lines().find(|l| l.starts_with("TTFT (ms)")).unwrap();
    assert!(!ttft.contains("0.0") && ttft.contains('-'), "{ttft}");
    let mut a = a.to_vec();
    a.push("--json");
    let o = twin(&a);
    let j = json(&o);
    assert_eq!(j["requests_completed"], 0);
    assert!(
        j["ttft_ms"]["p50"].is_null() && j["tpot_ms"]["mean"].is_null(),
        "{}",
        j["ttft_ms"]
    );
    assert!(
        j["notes"].to_string().contains("no request completed"),
        "{}",
        j["notes"]
    );
}

#[test]
fn sweep_refuses_the_forward_flags_it_would_ignore() {
    for (flag, needle) in [
        (
            &["--batch-per-rank", "4"][..],
            "--batch-per-rank is replaced by the grid",
        ),
        // Given explicitly, even at the forward default.
        (
            &["--batch-per-rank", "64"][..],
            "--batch-per-rank is replaced by the grid",
        ),
        (
            &["--trace-out", "x.json"][..],
            "--trace-out describes one step",
        ),
        (
            &["--in-situ-layer"][..],
            "--in-situ-layer describes one step",
        ),
        (&["--no-band"][..], "--no-band describes one step"),
    ] {
        let mut a = vec!["sweep", "--deps", "8", "--batches", "16"];
        a.extend(flag);
        refused(&a, &[needle]);
    }
}
