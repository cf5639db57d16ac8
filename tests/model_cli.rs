//! Models from Hugging Face configs at the command line: `twin model import` writes a
//! model file that loads back as the same model, `twin model show` counts it, every
//! command that takes a model takes a `config.json`, and a `tp`-only scenario is a DEP1
//! deployment.

mod common;

use common::*;

fn config(name: &str) -> String {
    repo()
        .join(format!("tests/fixtures/models-hf/{name}/config.json"))
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn import_writes_a_file_that_prices_as_the_config_itself() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("qwen3.toml");
    let out_s = out.to_str().unwrap();
    let cfg = config("Qwen3-235B-A22B-FP8");
    let (_, e) = runs(&["model", "import", &cfg, "--out", out_s]);
    assert!(e.contains("wrote"), "{e}");
    // The file is kept unless --force.
    refused(
        &["model", "import", &cfg, "--out", out_s],
        &["exists; give --force"],
    );
    let step = |model: &str| {
        let o = twin(&[
            "forward",
            "--hardware",
            "h100",
            "--model",
            model,
            "--tp",
            "8",
            "--expert-parallel",
            "--batch-per-rank",
            "32",
            "--context",
            "4096",
            "--json",
            "--no-band",
        ]);
        assert!(o.status.success(), "{}", err(&o));
        (json(&o)["step_ms"].as_f64().unwrap(), err(&o))
    };
    let (from_file, quiet) = step(out_s);
    let (from_config, note) = step(&cfg);
    assert_eq!(from_file, from_config);
    assert!(!quiet.contains("imported"), "{quiet}");
    // The in-memory import says so, once.
    assert_eq!(note.matches("note: imported").count(), 1, "{note}");
}

#[test]
fn show_counts_parameters_weights_and_kv() {
    let o = twin(&[
        "model",
        "show",
        "llama-3.1-8b",
        "--kv-dtype",
        "fp8",
        "--json",
    ]);
    assert!(o.status.success(), "{}", err(&o));
    let v = json(&o);
    // 8.03B (Meta's "8B"): embedding and head 2 x 128,256 x 4096 plus 32 layers of
    // attention 2 x 4096^2 + 4096 x 2048 and FFN 3 x 4096 x 14,336.
    let by_hand = 2.0 * 128_256.0 * 4096.0
        + 32.0 * (2.0 * 4096.0 * 4096.0 + 4096.0 * 2048.0 + 3.0 * 4096.0 * 14_336.0);
    assert_eq!(v["total_params"].as_f64().unwrap(), by_hand);
    // BF16 weights, no scales.
    assert_eq!(v["weight_bytes"].as_f64().unwrap(), 2.0 * by_hand);
    assert_eq!(v["kv_bytes_per_token"].as_f64().unwrap(), 131_072.0);
    assert_eq!(
        v["kv_bytes_per_token_at"]["bytes"].as_f64().unwrap(),
        65_536.0
    );
    let text = stdout(&twin(&["model", "show", "mixtral-8x7b"]));
    assert!(
        text.contains("46.70B total, 12.88B active per token"),
        "{text}"
    );
    assert!(
        text.contains("layers: 32 (32 x full attention + MoE FFN)"),
        "{text}"
    );
}

#[test]
fn a_config_of_an_unknown_architecture_is_refused_with_what_twin_reads() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("config.json");
    std::fs::write(
        &p,
        r#"{"architectures": ["MambaForCausalLM"], "hidden_size": 768}"#,
    )
    .unwrap();
    let p = p.to_str().unwrap();
    refused(
        &["model", "import", p],
        &[
            "MambaForCausalLM is not one twin imports",
            "supported: DeepseekV3ForCausalLM",
            "docs/adding-a-model.md",
        ],
    );
    refused(
        &["forward", "--model", p],
        &["MambaForCausalLM is not one twin imports"],
    );
    refused(
        &["model", "import", "/nonexistent/config.json"],
        &["cannot read /nonexistent/config.json"],
    );
}

/// The README's quickstart swaps the default scenario's model on the command line; the
/// scenario asks for three MTP drafts, which a model without an MTP module cannot make:
/// refused, naming the model and the setting that turns the drafts off, with which it
/// runs.
#[test]
fn a_model_without_mtp_in_a_scenario_with_drafts_says_how_to_turn_them_off() {
    let swap = [
        "simulate",
        "--set",
        "hardware=h100",
        "--set",
        "model=qwen3-32b",
    ];
    refused(
        &swap,
        &[
            "model qwen3-32b has no MTP module",
            "--set serving.mtp.draft_tokens=0",
        ],
    );
    let mut off = swap.to_vec();
    off.extend([
        "--set",
        "serving.mtp.draft_tokens=0",
        "--set",
        "workload=chat-closed-loop",
    ]);
    off.extend(["--duration", "6", "--set", "warmup_s=1"]);
    let (text, _) = runs(&off);
    assert!(text.contains("MTP: off (no draft tokens)"), "{text}");
}

#[test]
fn a_tp_only_scenario_is_dep_one_and_a_config_json_model_simulates() {
    let dir = tempfile::tempdir().unwrap();
    let sc = dir.path().join("s.toml");
    std::fs::write(
        &sc,
        format!(
            r#"name = "llama8b-tp2"
hardware = "h100"
model = "{}"
workload = "chat-closed-loop"
workload_set = ["closed_loop.concurrency = 16"]
duration_s = 20.0
warmup_s = 5.0
[serving]
mode = "aggregated"
gpus = 2
[serving.decode]
instances = 1
tp = 2
"#,
            config("Llama-3.1-8B")
        ),
    )
    .unwrap();
    let o = twin(&["simulate", sc.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(err(&o).contains("note: imported"), "{}", err(&o));
    let v = json(&o);
    // One instance of DEP1 x TP2: two GPUs, every request served.
    let pool = &v["pools"][0];
    assert_eq!(
        (pool["dep"].as_u64(), pool["gpus"].as_u64()),
        (Some(1), Some(2)),
        "{pool}"
    );
    assert!(v["requests_completed"].as_u64().unwrap() > 0);
}

#[test]
fn validate_bench_refuses_a_benchmark_of_another_model() {
    let bench = repo().join("tests/fixtures/bench/llama31-70b-h100-tp8-c50.json");
    let bench = bench.to_str().unwrap();
    // The default scenario prices DeepSeek-V4.1-Flash; the file ran Llama-3.1-70B.
    refused(
        &[
            "validate",
            "bench",
            bench,
            "--scenario",
            "gb300-nvl72-v4.1-flash-agentx",
        ],
        &[
            "benchmarked model `/root/models/Llama-3.1-70B-Instruct`",
            "prices model `deepseek-v4.1-flash`",
            "--allow-model-mismatch",
        ],
    );
    let (out, _) = runs(&[
        "validate",
        "bench",
        bench,
        "--scenario",
        "gb300-nvl72-v4.1-flash-agentx",
        "--allow-model-mismatch",
    ]);
    assert!(out.contains("note: the file benchmarked model"), "{out}");
    // Its own scenario names the model: no note about it.
    let (out, _) = runs(&[
        "validate",
        "bench",
        bench,
        "--scenario",
        "h100-llama-3.1-70b-tp8",
    ]);
    assert!(!out.contains("benchmarked model"), "{out}");
}

/// `twin cost` of a deployment some TCO preset cannot price (the owned NVL72 preset
/// has no H100 capex) prices it under the others and says which it skipped; naming
/// that preset is still an error.
#[test]
fn cost_skips_a_tco_preset_that_cannot_price_the_hardware() {
    let args = [
        "cost",
        "h100-gpt-oss-120b-chat",
        "--duration",
        "20",
        "--set",
        "warmup_s=5",
    ];
    let (out, _) = runs(&args);
    assert!(
        out.contains("note: TCO `owned-nvl72` has no capex for hardware `h100`"),
        "{out}"
    );
    assert!(out.contains("preset skipped"), "{out}");
    assert!(out.contains("hyperscaler-tco"), "{out}");
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let v = json(&twin(&json_args));
    assert_eq!(v["skipped"].as_array().unwrap().len(), 1, "{v}");
    let mut named = args.to_vec();
    named.extend(["--tco", "owned-nvl72"]);
    refused(&named, &["has no capex for hardware `h100`"]);
}
