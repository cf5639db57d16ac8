//! `twin plan` and `twin cost` end to end: the JSON contract and determinism, shards
//! and their merge, the errors of bad input, the cost arithmetic by hand, and the
//! scheduler manifests. Runs are short (30 simulated seconds, a three-candidate space).

mod common;

use common::*;
use serde_json::Value;
use std::process::Command;

#[test]
fn plan_json_has_the_contract_and_is_deterministic() {
    let args = small_plan(&["--slo", "tpot_p90_ms=20", "--json"]);
    let a = twin(&args);
    assert_eq!(stdout(&a), stdout(&twin(&args)), "same seed, same bytes");
    let v = json(&a);
    let best = &v["best"];
    for k in [
        "gpus",
        "tok_s_per_gpu",
        "ttft_p90_ms",
        "tpot_p90_ms",
        "usd_per_m_tokens",
    ] {
        assert!(best[k].as_f64().unwrap() > 0.0, "best.{k}: {best}");
    }
    assert!(
        best["config"]["decode"]["dep"].is_u64() && best["config"]["prefill"]["instances"].is_u64()
    );
    assert_eq!(best["gpus"], 72);
    let ev = &v["evaluated"];
    assert_eq!(
        (ev["screened"].as_u64(), ev["simulated"].as_u64()),
        (Some(3), Some(3))
    );
    assert_eq!(
        ev["feasible"].as_u64().unwrap() + ev["rejected_after_simulation"].as_u64().unwrap(),
        3
    );
    // The best is feasible, on the frontier, and no feasible point beats it.
    let frontier = v["frontier"].as_array().unwrap();
    assert!(!frontier.is_empty());
    assert!(frontier.iter().any(|p| p["config"] == best["config"]));
    let tok = best["tok_s_per_gpu"].as_f64().unwrap();
    for p in v["simulated"].as_array().unwrap() {
        assert!(p["tpot_p90_ms"].as_f64().unwrap() > 0.0);
        if p["feasible"] == true {
            assert!(p["tok_s_per_gpu"].as_f64().unwrap() <= tok);
        }
        assert!(p["estimate"]["tok_s_per_gpu"].as_f64().unwrap() > 0.0);
    }
    // The vLLM starting point carries the planned sizes.
    let cmds = best["vllm"].as_array().unwrap();
    let decode = cmds.iter().find(|c| c["role"] == "decode").unwrap();
    let dep = best["config"]["decode"]["dep"].as_u64().unwrap();
    assert!(decode["command"].as_str().unwrap().contains(&format!(
        "--data-parallel-size {dep} --enable-expert-parallel"
    )));
    // Another seed, another run.
    let other = twin(&small_plan(&[
        "--slo",
        "tpot_p90_ms=20",
        "--json",
        "--seed",
        "7",
    ]));
    assert_ne!(stdout(&a), stdout(&other));
}

/// `--seeds 2`: every simulated candidate's figures are the means of its runs under
/// the two seeds (each what a one-seed plan of that seed gives), with 95% half-widths
/// t(0.975, 1) * |a - b| / 2; one seed leaves the half-widths out.
#[test]
fn plan_seeds_average_the_single_seed_runs() {
    let by_label = |v: &Value| -> Vec<(String, f64, f64, Value)> {
        v["simulated"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["label"].as_str().unwrap().to_string(),
                    p["tok_s_per_gpu"].as_f64().unwrap(),
                    p["ttft_p90_ms"].as_f64().unwrap(),
                    p["ci95"].clone(),
                )
            })
            .collect()
    };
    let both = json(&twin(&small_plan(&[
        "--json", "--seed", "3", "--seeds", "2",
    ])));
    assert_eq!(both["seeds"], 2);
    for p in both["simulated"].as_array().unwrap() {
        assert_eq!(
            p["slos_within_noise"],
            serde_json::json!([]),
            "no SLO, none unsettled"
        );
    }
    let one = by_label(&json(&twin(&small_plan(&["--json", "--seed", "3"]))));
    let two = by_label(&json(&twin(&small_plan(&["--json", "--seed", "4"]))));
    let mean = by_label(&both);
    assert_eq!(mean.len(), 3);
    for (((label, tok, ttft, ci), a), b) in mean.iter().zip(&one).zip(&two) {
        assert_eq!((label, label), (&a.0, &b.0));
        assert!(a.3.is_null(), "one seed: no half-widths");
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * y.abs().max(1.0);
        assert!(
            close(*tok, (a.1 + b.1) / 2.0),
            "{label}: {tok} vs {} {}",
            a.1,
            b.1
        );
        assert!(close(*ttft, (a.2 + b.2) / 2.0), "{label}: TTFT");
        assert_eq!(ci["seeds"], 2);
        let want = 12.706 * (a.1 - b.1).abs() / 2.0;
        assert!(
            close(ci["tok_s_per_gpu"].as_f64().unwrap(), want),
            "{label}: ci {ci} vs {want}"
        );
    }
    let e = err(&twin(&small_plan(&["--seeds", "0"])));
    assert!(e.contains("--seeds 0"), "{e}");
}

/// Two shards merged give the unsharded answer byte for byte; a rerun of a shard
/// resumes (appends nothing); shards of another grid, missing shards and an index out
/// of range are refused.
#[test]
fn shards_merge_into_the_unsharded_answer() {
    let dir = tempfile::tempdir().unwrap();
    let out = |i: usize| {
        dir.path()
            .join(format!("plan-{i}.jsonl"))
            .to_str()
            .unwrap()
            .to_string()
    };
    let base = small_plan(&["--slo", "tpot_p90_ms=20"]);
    for i in 0..2 {
        let o = twin(&sharded(&base, &format!("{i}/2"), out(i)));
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let lines = |i: usize| std::fs::read_to_string(out(i)).unwrap().lines().count();
    // Header + candidates 0 and 2; header + candidate 1.
    assert_eq!((lines(0), lines(1)), (3, 2));
    assert!(twin(&sharded(&base, "0/2", out(0))).status.success());
    assert_eq!(lines(0), 3, "a rerun resumes: nothing appended");
    // A run killed mid-line: the partial record is cut off and evaluated again.
    assert_partial_line_is_redone(&base, out(1));
    let mut whole = base.clone();
    whole.push("--json".into());
    let unsharded = stdout(&twin(&whole));
    let merged = twin(&["plan", "merge", &out(0), &out(1), "--json"]);
    assert!(merged.status.success(), "{}", stderr(&merged));
    assert_eq!(stdout(&merged), unsharded, "merge = unsharded run");
    fails_with(
        &["plan", "merge", &out(0)],
        &["1 of 3 candidates missing (indices 1)"],
    );
    // A shard of another grid (another seed).
    let mut other = base.clone();
    let o2 = dir.path().join("other.jsonl").to_str().unwrap().to_string();
    other.extend(["--seed".into(), "9".into()]);
    assert!(twin(&sharded(&other, "1/2", o2.clone())).status.success());
    fails_with(&["plan", "merge", &out(0), &o2], &["is from another grid"]);
    // Resuming into a file of another grid is refused too.
    fails_with(
        &sharded(&base, "1/2", o2),
        &["holds records of another grid"],
    );
    fails_with(
        &sharded(&base, "2/2", out(5)),
        &["shard index 2 is out of range for 2 shards"],
    );
    // The index from the scheduler's environment.
    assert_index_from_environment(&base, out(6), out(1));
}

/// `base` with `--shard SHARD --out OUT` appended.
fn sharded(base: &[String], shard: &str, out: String) -> Vec<String> {
    let mut a = base.to_vec();
    a.extend(["--shard".into(), shard.into(), "--out".into(), out]);
    a
}

/// Cuts shard 1/2's file `out` in its last line, as a run killed mid-line leaves it,
/// and asserts a rerun says so and writes the file again as it was.
fn assert_partial_line_is_redone(base: &[String], out: String) {
    let whole_1 = std::fs::read_to_string(&out).unwrap();
    let (head, last) = whole_1.trim_end().rsplit_once('\n').unwrap();
    std::fs::write(&out, format!("{head}\n{}", &last[..last.len() / 2])).unwrap();
    let o = twin(&sharded(base, "1/2", out.clone()));
    assert!(
        stderr(&o).contains("ended in a partial line"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), whole_1);
}

/// Runs `--shard 2` into `out` with the index from `JOB_COMPLETION_INDEX` (1) and
/// asserts it writes what shard 1/2 wrote into `shard_1`.
fn assert_index_from_environment(base: &[String], out: String, shard_1: String) {
    let env = sharded(base, "2", out.clone());
    let o = Command::new(env!("CARGO_BIN_EXE_twin"))
        .args(&env)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env("JOB_COMPLETION_INDEX", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(out).unwrap(),
        std::fs::read_to_string(shard_1).unwrap()
    );
}

#[test]
fn plan_errors_say_what_and_where() {
    // The closest configuration's TPOT is above 3.5 ms in simulation: TPOT binds.
    let tight = small_plan(&["--slo", "tpot_p90_ms=3.5"]);
    fails_with(
        &tight,
        &[
            "no configuration meets the SLOs",
            "tpot_p90_ms binds",
            "best tpot_p90_ms simulated",
        ],
    );
    // Far below anything the screen estimates: nothing is simulated.
    let hopeless = small_plan(&["--slo", "tpot_p90_ms=0.5"]);
    fails_with(
        &hopeless,
        &[
            "no configuration passed the screen",
            "tpot_p90_ms 3",
            "best estimated tpot_p90_ms",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space.toml");
    std::fs::write(&space, "decode_deps = []\nmodes = [\"disaggregated\"]\n").unwrap();
    fails_with(
        &["plan", "--space", space.to_str().unwrap()],
        &["empty search space", "decode_deps is empty"],
    );
    std::fs::write(&space, "decode_depz = [8]\n").unwrap();
    fails_with(
        &["plan", "--space", space.to_str().unwrap()],
        &["decode_depz"],
    );
    fails_with(
        &["plan", "--slo", "ttft_p99_ms=3"],
        &["unknown SLO `ttft_p99_ms`"],
    );
    fails_with(&["plan", "--target-rate", "fast"], &["--target-rate fast"]);
    fails_with(&["plan", "--shard", "1/2"], &["--shard needs --out"]);
    fails_with(
        &["plan", "--shard", "4"],
        &["neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX"],
    );
}

/// Without `--space` a dense model's layouts are tensor-parallel replicas: Llama-3.1-70B
/// on 8 H100s (whose DEP ranks would each need all 141 GB) finds its best among TP
/// layouts, and every candidate it simulated is one.
#[test]
fn a_dense_models_default_space_is_tensor_parallel() {
    let v = json(&twin(&[
        "plan",
        "h100-llama-3.1-70b-tp8",
        "--slo",
        "tpot_p90_ms=50",
        "--duration",
        "30",
        "--set",
        "warmup_s=5",
        "--json",
    ]));
    // An aggregated deployment's one pool is its decode pool.
    let best = &v["best"]["config"];
    assert!(best["decode"]["tp"].as_u64().unwrap() >= 4, "{best}");
    assert!(v["evaluated"]["simulated"].as_u64().unwrap() > 0, "{v}");
}

/// Sizing for a target rate: the prefill pool is sized, the load scaled to the rate.
#[test]
fn plan_sizes_pools_for_a_target_rate() {
    let v = json(&twin(&small_plan(&[
        "--target-rate",
        "300req/s",
        "--objective",
        "gpus",
        "--json",
    ])));
    let best = &v["best"];
    assert!(
        best["gpus"].as_u64().unwrap() < 72,
        "300 req/s needs less than the rack: {best}"
    );
    assert!(best["requests_per_s"].as_f64().unwrap() >= 0.95 * 300.0);
    assert_eq!(v["objective"], "gpus");
}

/// `twin cost --from` a simulate run, owned NVL72 by hand: capex 48611 x 0.1 / (1 -
/// 1.1^-4) / 8760 = $1.75062/h, power 2.1 kW x 1.3 x $0.08 = $0.2184/h, hosting
/// $150 x 2.1 x 12 / 8760 = $0.43151/h, network $0.15, operations $0.20: $2.75052/h.
#[test]
fn cost_arithmetic_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let run_json = dir.path().join("run.json");
    let sim = twin(&[
        "simulate",
        "--duration",
        "8",
        "--set",
        "warmup_s=2",
        "--json",
    ]);
    assert!(sim.status.success(), "{}", stderr(&sim));
    std::fs::write(&run_json, &sim.stdout).unwrap();
    let v = json(&twin(&[
        "cost",
        "--from",
        run_json.to_str().unwrap(),
        "--tco",
        "owned-nvl72",
        "--json",
    ]));
    let f = &v["finance"][0];
    let total = assert_owned_nvl72_cost(&f["cost_usd_per_gpu_hour"]);
    // Revenue: tokens per GPU-hour by kind at the off-peak sheet (0.003 / 0.15 / 0.60).
    let sim_v: Value = serde_json::from_slice(&sim.stdout).unwrap();
    let t = &sim_v["throughput_tok_s_per_gpu"];
    let m = |k: &str| t[k].as_f64().unwrap() * 3600.0 / 1e6;
    let revenue = m("cached_input") * 0.003 + m("uncached_input") * 0.15 + m("output") * 0.60;
    assert!(near(&f["revenue_usd_per_gpu_hour"], revenue));
    assert!(near(&f["margin_usd_per_gpu_hour"], revenue - total));
    assert!(near(&f["break_even_utilisation"], total / revenue));
    assert!(near(
        &f["usd_per_m_tokens"]["cost_all_tokens"],
        total / m("total")
    ));
    // The simulation's own money agrees with the hyperscaler preset, same code.
    assert_hyperscaler_preset_is_the_simulations(&run_json, &sim_v);
    fails_with(
        &["cost", "--from", "/nonexistent.json"],
        &["cannot read /nonexistent.json"],
    );
    fails_with(
        &[
            "cost",
            "--set",
            "tco.pue=0.5",
            "--tco",
            "owned-nvl72",
            "--duration",
            "4",
        ],
        &["pue", "must be >= 1"],
    );
}

/// Whether the number `x` is `want` to nine digits (absolutely, below 1).
fn near(x: &Value, want: f64) -> bool {
    (x.as_f64().unwrap() - want).abs() < 1e-9 * want.max(1.0)
}

/// Asserts the owned NVL72's cost per GPU-hour `c` component by component, as worked
/// by hand in `cost_arithmetic_by_hand`'s doc; returns the total.
fn assert_owned_nvl72_cost(c: &Value) -> f64 {
    let annuity = 0.1 / (1.0 - 1.1f64.powf(-4.0));
    let capex = 48611.0 * annuity / 8760.0;
    assert!(near(&c["capex"], capex), "{c}");
    assert!(near(&c["power"], 2.1 * 1.3 * 0.08));
    assert!(near(&c["hosting"], 150.0 * 2.1 * 12.0 / 8760.0));
    let total = capex + 0.2184 + 150.0 * 2.1 * 12.0 / 8760.0 + 0.15 + 0.20;
    assert!(near(&c["total"], total));
    assert!((total - 2.75052).abs() < 1e-5);
    total
}

/// Asserts `twin cost --from run_json` lists the TCO presets and that the hyperscaler
/// preset's cost and revenue are the simulation's own (`sim_v`).
fn assert_hyperscaler_preset_is_the_simulations(run_json: &std::path::Path, sim_v: &Value) {
    let all = json(&twin(&[
        "cost",
        "--from",
        run_json.to_str().unwrap(),
        "--json",
    ]));
    let names: Vec<&str> = all["finance"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["tco"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "hyperscaler-tco",
            "neocloud-tco",
            "owned-nvl72",
            "rental-3yr"
        ]
    );
    let hyper = &all["finance"][0];
    assert!(near(
        &hyper["cost_usd_per_gpu_hour"]["total"],
        sim_v["cost_usd_per_gpu_hour"].as_f64().unwrap()
    ));
    assert!(near(
        &hyper["revenue_usd_per_gpu_hour"],
        sim_v["revenue_usd_per_gpu_hour"].as_f64().unwrap()
    ));
}

#[test]
fn scheduler_manifests_run_shards_and_say_how_to_merge() {
    let sbatch = std::fs::read_to_string(repo().join("deploy/slurm/plan.sbatch")).unwrap();
    for needle in [
        "#SBATCH --array=0-7",
        "SHARDS=8",
        "twin plan",
        "--shard \"$SHARDS\"",
        "--out \"results/plan-${SLURM_ARRAY_TASK_ID}.jsonl\"",
        "twin plan merge",
    ] {
        assert!(sbatch.contains(needle), "plan.sbatch lacks `{needle}`");
    }
    let job = std::fs::read_to_string(repo().join("deploy/k8s/plan-job.yaml")).unwrap();
    for needle in [
        "kind: Job",
        "completionMode: Indexed",
        "completions: 8",
        "--shard 8",
        "/results/plan-${JOB_COMPLETION_INDEX}.jsonl",
        "twin plan merge",
    ] {
        assert!(job.contains(needle), "plan-job.yaml lacks `{needle}`");
    }
}
