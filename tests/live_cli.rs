//! Live runs end to end: a short run of the engine (at most ~10 s), its records checked
//! for completeness and consistency, its validation against a prediction (finite
//! errors; only a loose throughput bound here: accuracy goals live in docs/fidelity.md's
//! measured note), a vLLM benchmark file, and every bad input refused with nothing
//! overwritten.

use live::records::RunDir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn twin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_twin"))
        .args(args)
        .output()
        .expect("run twin")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "twin failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(args: &[&str], needles: &[&str]) {
    let o = twin(args);
    assert!(!o.status.success(), "expected failure for {args:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    for n in needles {
        assert!(err.contains(n), "stderr of {args:?} lacks `{n}`:\n{err}");
    }
}

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// Files of a directory and their contents (to check nothing was overwritten).
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.display().to_string(), std::fs::read(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

fn copy_dir(from: &Path, to: &Path, skip: &[&str]) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if !skip.contains(&name.as_str()) {
            std::fs::copy(&p, to.join(name)).unwrap();
        }
    }
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads as one story; tests are exempt
fn a_short_live_run_is_recorded_consistently_and_validates() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let prof = tmp.path().join("prof");
    let r = run.to_str().unwrap();
    ok(&twin(&[
        "live",
        "cpu-live-poisson",
        "--duration",
        "8",
        "--set",
        "model=tiny-moe",
        "--set",
        "workload.open_loop.input_tokens.mean=100",
        "--set",
        "workload.open_loop.rate_per_s=2",
        "--out",
        r,
    ]));
    let d = RunDir::load(&run).unwrap();
    assert!(d.problems().is_empty(), "{:?}", d.problems());
    let done = d.requests.iter().filter(|q| q.completed).count();
    assert!(done >= 3, "{done} requests completed");
    for q in d.requests.iter().filter(|q| q.completed) {
        assert_eq!(
            q.token_times_s.len(),
            q.output_tokens as usize,
            "request {}",
            q.id
        );
        assert!(q.first_token_s <= q.finish_s);
    }
    for s in &d.steps {
        for rk in &s.ranks {
            assert!(rk.kv_pages_used <= rk.kv_pages_total, "step {}", s.index);
        }
    }
    assert!(d.info.mtp_rule.contains("random weights"));
    assert_eq!(d.info.idle, "spin", "the default idle mode");
    check_op_trace(&d, &run.join("trace.json.gz"));
    check_noise_floor(&d);
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("result.json")).unwrap()).unwrap();
    for k in [
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "mean_tpot_ms",
        "p99_itl_ms",
        "median_e2el_ms",
    ] {
        assert!(
            result[k].as_f64().is_some_and(|v| v.is_finite()),
            "result.json {k}"
        );
    }
    // A profile of the same device (pipeline-sized: numbers not meaningful).
    ok(&twin(&[
        "calibrate",
        "--device",
        "cpu",
        "--plan",
        "live",
        "--model",
        "tiny-moe",
        "--smoke",
        "--out",
        prof.to_str().unwrap(),
    ]));
    let p = prof.join("profile.toml");
    let v: Value = serde_json::from_str(&ok(&twin(&[
        "validate",
        "live",
        r,
        "--profile",
        p.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    for k in [
        "step_mape",
        "throughput_error",
        "ttft_p90_error",
        "tpot_p90_error",
    ] {
        assert!(
            v[k].as_f64().is_some_and(|x| x.is_finite()),
            "{k}: {}",
            v[k]
        );
    }
    let te = v["throughput_error"].as_f64().unwrap();
    assert!(te.abs() < 0.3, "throughput error {te}");
    // The run's pace: one positive figure per window, and its two step MAPEs.
    let pace = &v["pace"];
    let windows = pace["windows"].as_array().expect("pace.windows");
    assert!(
        !windows.is_empty() && windows.iter().all(|w| w.as_f64().is_some_and(|x| x > 0.0)),
        "{pace}"
    );
    for k in ["drift_mape", "step_mape_paced"] {
        assert!(pace[k].as_f64().is_some_and(|x| x >= 0.0), "{k}: {pace}");
    }
    let text = ok(&twin(&[
        "validate",
        "live",
        r,
        "--profile",
        p.to_str().unwrap(),
    ]));
    assert!(text.contains("MAPE") && text.contains("TTFT p90"), "{text}");

    // In situ: a profile fitted from the run's own trace validates the run.
    let tp = tmp.path().join("trace-profile.toml");
    let trace = run.join("trace.json.gz");
    let fitted = ok(&twin(&[
        "calibrate",
        "fit-trace",
        trace.to_str().unwrap(),
        "--out",
        tp.to_str().unwrap(),
    ]));
    assert!(fitted.contains("from a live trace"), "{fitted}");
    let v: Value = serde_json::from_str(&ok(&twin(&[
        "validate",
        "live",
        r,
        "--profile",
        tp.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    let mape = v["step_mape"].as_f64().unwrap();
    assert!(mape.is_finite() && mape >= 0.0, "step MAPE {mape}");
    assert!(
        v["profile"]["source"]
            .as_str()
            .is_some_and(|s| s.contains("live trace")),
        "{}",
        v["profile"]
    );

    // Bad inputs, each refused with nothing overwritten.
    let before = snapshot(&run);
    fails(
        &[
            "live",
            "--device",
            "gpu0",
            "--out",
            tmp.path().join("x").to_str().unwrap(),
        ],
        &["invalid device"],
    );
    assert!(!tmp.path().join("x").exists());
    fails(
        &[
            "live",
            "--set",
            "fidelity.cohort=2",
            "--out",
            tmp.path().join("x").to_str().unwrap(),
        ],
        &["fidelity.cohort = 2", "serves every request"],
    );
    assert!(!tmp.path().join("x").exists());
    fails(&["live", "--duration", "1", "--out", r], &["not empty"]);
    assert_eq!(
        snapshot(&run),
        before,
        "an existing run is never overwritten"
    );
    let other = tmp.path().join("other.toml");
    let text = std::fs::read_to_string(&p).unwrap();
    let dev = d.info.device_name.clone();
    std::fs::write(&other, text.replace(&dev, "cuda:0: NVIDIA H200 (sm_90)")).unwrap();
    fails(
        &["validate", "live", r, "--profile", other.to_str().unwrap()],
        &["another device"],
    );
    let missing = tmp.path().join("missing");
    copy_dir(&run, &missing, &["steps.jsonl"]);
    fails(
        &[
            "validate",
            "live",
            missing.to_str().unwrap(),
            "--profile",
            p.to_str().unwrap(),
        ],
        &["steps.jsonl", "missing"],
    );
    let corrupt = tmp.path().join("corrupt");
    copy_dir(&run, &corrupt, &[]);
    let mut req = std::fs::read_to_string(corrupt.join("requests.jsonl")).unwrap();
    req.push_str("{\"id\": \"not a record\"\n");
    std::fs::write(corrupt.join("requests.jsonl"), req).unwrap();
    let n_lines = std::fs::read_to_string(corrupt.join("requests.jsonl"))
        .unwrap()
        .lines()
        .count();
    fails(
        &[
            "validate",
            "live",
            corrupt.to_str().unwrap(),
            "--profile",
            p.to_str().unwrap(),
        ],
        &["requests.jsonl", &format!("line {n_lines}")],
    );
    assert_eq!(snapshot(&run), before);
}

/// The run's op trace: one slice per op call the executor ran in each traced step (as
/// many as the forward pass's calls for the step's batch, which the composition test
/// checks against the executor's own trace), times positive, every step of the first
/// ones traced, the run named in `otherData`.
fn check_op_trace(d: &RunDir, trace: &Path) {
    use sim::cost::fitted::LiveModelExt;
    use sim::cost::{Phase, ReqSlice, StepShape};
    use spec::live_model::LiveModel;
    let info = d
        .info
        .op_trace
        .as_ref()
        .expect("run.json names the op trace");
    assert_eq!(info.file, "trace.json.gz");
    assert!(calibration::live_trace::is_live_trace(trace));
    let t = calibration::live_trace::read_live_trace(trace).unwrap();
    assert_eq!(t.meta.device, d.info.device_name);
    assert_eq!(
        (t.meta.seed, t.meta.scenario.as_str()),
        (d.info.seed, d.info.scenario_origin.as_str())
    );
    assert!(t
        .samples
        .iter()
        .all(|s| s.seconds > 0.0 && s.seconds.is_finite()));
    let mut per_step = std::collections::BTreeMap::<u64, usize>::new();
    for s in &t.samples {
        *per_step.entry(s.step.expect("a step")).or_default() += 1;
    }
    assert_eq!(per_step.len(), info.sampling.steps_kept);
    assert_eq!(t.samples.len(), info.sampling.slices);
    let first = info.sampling.first_steps.min(d.steps.len() as u64);
    assert!(
        (0..first).all(|i| per_step.contains_key(&i)),
        "the first steps are all traced"
    );
    let lm = LiveModel::from_model(&d.info.model, d.info.page_tokens).unwrap();
    for (&i, &n) in &per_step {
        let s = &d.steps[i as usize];
        let r = &s.ranks[0];
        let prefill: Vec<ReqSlice> = r
            .prefill
            .iter()
            .map(|c| ReqSlice::one(c[0] as u32, c[1]))
            .collect();
        let decode: Vec<ReqSlice> = r.decode.iter().map(|&c| ReqSlice::one(1, c)).collect();
        let calls = |phase, rs: Vec<ReqSlice>, drafts| {
            if rs.is_empty() {
                return 0;
            }
            let ranks = vec![rs];
            lm.step_calls(
                &StepShape {
                    phase,
                    ranks: &ranks,
                    decode_ranks: &[],
                    draft_tokens: drafts,
                },
                0,
            )
            .len()
        };
        let want =
            calls(Phase::Prefill, prefill, 0) + calls(Phase::Decode, decode, s.drafts as u32);
        assert_eq!(
            n, want,
            "step {i} ({}): slices vs the executor's calls",
            s.kind
        );
    }
}

/// A run is at distance zero from itself; with every step 10% slower, each step class's
/// mean is 10% further and so is the step distance.
fn check_noise_floor(d: &RunDir) {
    let same = live::noise::run_distance(d, d);
    assert_eq!((same.throughput_distance, same.step_distance), (0.0, 0.0));
    // A percentile without samples (none completed in the window) has no distance.
    let f = live::metrics::live_figures(d);
    for (dist, p90) in [
        (same.ttft_p90_distance, f.ttft_ms.p90),
        (same.tpot_p90_distance, f.tpot_ms.p90),
    ] {
        if p90 > 0.0 {
            assert_eq!(dist, 0.0);
        } else {
            assert!(dist.is_nan());
        }
    }
    let mut slow = d.clone();
    for s in &mut slow.steps {
        s.step_ms *= 1.1;
    }
    let far = live::noise::run_distance(d, &slow);
    assert!(
        (far.step_distance - 0.1).abs() < 1e-9,
        "{}",
        far.step_distance
    );
    assert!(!far.by_kind.is_empty());
    assert!(far
        .by_kind
        .iter()
        .all(|k| (k.distance - 0.1).abs() < 1e-9 && k.steps_a == k.steps_b));
    assert_eq!(far.throughput_distance, 0.0, "the requests did not change");
}

#[test]
fn the_idle_mode_is_a_scenario_setting_and_a_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let x = tmp.path().join("x");
    let xs = x.to_str().unwrap();
    fails(
        &["live", "--idle", "nap", "--out", xs],
        &["--idle", "nap", "spin", "sleep"],
    );
    fails(
        &["live", "--set", "live.idle=nap", "--out", xs],
        &["live.idle", "nap"],
    );
    assert!(!x.exists());
    // Sleeping, untraced: run.json says so and no trace is written.
    let run = tmp.path().join("sleep");
    ok(&twin(&[
        "live",
        "cpu-live-poisson",
        "--duration",
        "2",
        "--set",
        "model=tiny-moe",
        "--set",
        "warmup_s=0.5",
        "--set",
        "live.idle=spin",
        "--idle",
        "sleep",
        "--no-trace",
        "--out",
        run.to_str().unwrap(),
    ]));
    let d = RunDir::load(&run).unwrap();
    assert_eq!(d.info.idle, "sleep", "--idle wins over the scenario");
    assert!(d.info.op_trace.is_none() && !run.join("trace.json.gz").exists());
}

#[test]
fn fit_trace_refuses_a_missing_or_corrupt_trace_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("p.toml");
    let o = out.to_str().unwrap();
    let missing = tmp.path().join("nothing.json.gz");
    fails(
        &[
            "calibrate",
            "fit-trace",
            missing.to_str().unwrap(),
            "--out",
            o,
        ],
        &["nothing.json.gz", "No such file"],
    );
    let corrupt = tmp.path().join("corrupt.json.gz");
    std::fs::write(&corrupt, b"{\"traceEvents\": [{\"ph\": \"X\",").unwrap();
    fails(
        &[
            "calibrate",
            "fit-trace",
            corrupt.to_str().unwrap(),
            "--out",
            o,
        ],
        &["corrupt.json.gz", "not a Chrome trace"],
    );
    let empty = tmp.path().join("empty.json");
    std::fs::write(
        &empty,
        b"{\"traceEvents\": [], \"otherData\": {\"producer\": \"twin live\"}}",
    )
    .unwrap();
    fails(
        &[
            "calibrate",
            "fit-trace",
            empty.to_str().unwrap(),
            "--out",
            o,
        ],
        &["empty.json", "no `live::` op slices"],
    );
    assert!(!out.exists(), "no profile written");
}

#[test]
fn a_vllm_benchmark_with_per_request_data_validates_and_a_summary_says_what_it_lacks() {
    let f = fixture("vllm-bench-small.json");
    let v: Value = serde_json::from_str(&ok(&twin(&[
        "validate",
        "bench",
        &f,
        "--scenario",
        "cpu-live-poisson",
        "--json",
    ])))
    .unwrap();
    assert!(v["step_mape"].is_null());
    // The file records no send times: its steps cannot be read back, and it says so.
    assert_eq!(
        v["steps"]["unreadable"],
        "the file records no send times (`start_times`)"
    );
    for k in ["throughput_error", "ttft_p90_error", "tpot_p90_error"] {
        assert!(
            v[k].as_f64().is_some_and(|x| x.is_finite()),
            "{k}: {}",
            v[k]
        );
    }
    assert_eq!(v["measured"]["completed"], 8);
    // A summary-only result (issue 39 item 8) compares what it holds and says what
    // needs the per-request lists.
    let o = twin(&[
        "validate",
        "bench",
        &fixture("vllm-bench-summary-only.json"),
        "--scenario",
        "cpu-live-poisson",
    ]);
    let out = format!("{}{}", ok(&o), String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains("no per-request lists (saved without --save-detailed)"),
        "{out}"
    );
    assert!(
        out.contains("not compared: per-request TTFT, TPOT and ITL beyond the percentiles listed"),
        "{out}"
    );
}
