//! Regression tests, one per class of bug of issue #11 ("no panic on any input, no
//! silent wrong number, no corrupted calibration log"), each named after what it
//! fixes (ripgrep's `tests/regression.rs`); the calibration ones are in
//! `tests/regression_calibration.rs`, the fuzz-style tests in `tests/fuzz/main.rs`.

mod common;

use common::{calibrate, err, json, out, refused, repo, runs, twin, write};
use std::path::Path;
use std::process::{Command, Stdio};

/// A short run of the default scenario: a few seconds, few sessions.
const SHORT: [&str; 4] = ["--duration", "2", "--set", "workload.agentx.sessions=64"];

// --- Panics -------------------------------------------------------------------------

/// Issue #11: `forward --dep 4294967295` panicked in the DEP suggestion search (a
/// wrapping range, then `% 0`), after a linear scan that ran even when the range check
/// had failed. Every path to it (flag, sweep, `--set`, scenario file) is range-checked
/// first now.
#[test]
fn regression_huge_dep_is_refused_before_any_search() {
    for args in [
        vec!["forward", "--dep", "4294967295"],
        vec!["forward", "--dep", "4097"],
        vec!["forward", "--dep", "0"],
    ] {
        refused(&args, &["outside 1..=4096"]);
    }
    let (o, _) = runs(&["sweep", "--deps", "4294967295,8", "--batches", "16"]);
    assert!(o.contains("skipped DEP4294967295 batch 16"), "{o}");
    assert!(o.contains("outside 1..=4096"), "{o}");
    refused(
        &["simulate", "--set", "serving.decode.dep=4294967295"],
        &["serving.decode.dep", "1..=4096"],
    );
    let dir = tempfile::tempdir().unwrap();
    let text = twin_scenario_text().replace("dep = 24", "dep = 4294967295");
    let f = write(dir.path(), "s.toml", &text);
    refused(&["simulate", f.to_str().unwrap()], &["serving.decode.dep"]);
}

fn twin_scenario_text() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/gb300-nvl72-v4.1-flash-agentx.toml"),
    )
    .unwrap()
}

/// Issue #11: every command panicked (exit 101) when stdout could not be written
/// (`twin list > /dev/full`). Now: an error naming the stream, exit 2.
#[test]
fn regression_unwritable_stdout_is_an_error_not_a_panic() {
    let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("SKIPPED: no /dev/full on this system");
        return;
    };
    for args in [
        &["list"][..],
        &["forward", "--json"],
        &["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_twin"))
            .args(args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(e.contains("cannot write to stdout"), "{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
    // A closed pipe still ends the process quietly (SIGPIPE), as other tools do.
    let mut child = Command::new(env!("CARGO_BIN_EXE_twin"))
        .args([
            "sweep",
            "--deps",
            "8,16,32,64",
            "--batches",
            "1,2,4,8,16,32,64,128",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            status.success() || status.signal() == Some(libc_sigpipe()),
            "{status:?}"
        );
    }
    #[cfg(not(unix))]
    assert!(status.code() != Some(101));
}

#[cfg(unix)]
fn libc_sigpipe() -> i32 {
    13
}

// --- Silent wrong numbers -----------------------------------------------------------

/// Issue #11: `--context 18446744073709551615` wrapped and passed the KV check (rc 0,
/// "step 10.006 ms"). Sizes from user input are checked.
#[test]
fn regression_context_overflow_is_refused() {
    refused(
        &["forward", "--context", "18446744073709551615"],
        &["--context 18446744073709551615"],
    );
    refused(
        &[
            "forward",
            "--phase",
            "prefill",
            "--context",
            "18446744073709551000",
        ],
        &["--context"],
    );
    // Work scales with the chunks of a prefill: bounded too (with a KV size that lets
    // the prompt fit).
    refused(
        &[
            "forward",
            "--phase",
            "prefill",
            "--new-tokens",
            "4294967295",
            "--chunk",
            "1",
            "--set",
            "model.kv.bytes_per_token=1e-9",
        ],
        &["--chunk 1: 4294967295 new tokens make 4294967295 chunks; at most 100000"],
    );
}

/// Issue #11: `--set hardware.hbm.bytes_per_s=1e-300` gave "step inf ms" and
/// `"step_ms": null`. A rate outside any datasheet's range is refused naming the input;
/// an efficiency below one in a million too; and a step that still comes out
/// non-finite is an error naming the operation and the inputs that bound it (a sim
/// unit test, `non_finite_step_names_the_op_and_its_inputs`).
#[test]
fn regression_non_finite_results_are_errors_naming_their_input() {
    refused(
        &["forward", "--set", "hardware.hbm.bytes_per_s=1e-300"],
        &["hbm.bytes_per_s: 1e-300", "outside the plausible range"],
    );
    refused(
        &[
            "forward",
            "--json",
            "--set",
            "hardware.tensor.fp8_flops_per_s=inf",
        ],
        &["tensor.fp8_flops_per_s: must be finite"],
    );
    refused(
        &["forward", "--set", "cost.moe.mem_eff=1e-300"],
        &["moe.mem_eff", "[1e-6, 1]"],
    );
}

/// Issue #11: a scenario without `[serving.decode]` silently ran one DEP8 group, and
/// `--set serving.mode=aggregated` silently dropped the 48 prefill GPUs. Both are
/// stated now (stderr, and `notes` in `--json`).
#[test]
fn regression_defaults_that_change_the_gpu_count_are_stated() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "no-decode.toml",
        "name = \"x\"\nhardware = \"gb300\"\nmodel = \"deepseek-v4.1-flash\"\nworkload = \"poisson\"\nduration_s = 2\nwarmup_s = 0.5\n[serving.prefill]\ninstances = 2\ndep = 2\n",
    );
    let (_, e) = runs(&["simulate", f.to_str().unwrap()]);
    assert!(
        e.contains(
            "note: serving.decode is not set: the default decode pool runs (1 x DEP8 = 8 GPUs)"
        ),
        "{e}"
    );
    let mut args = vec!["simulate", "--set", "serving.mode=aggregated", "--json"];
    args.extend(SHORT);
    let (o, e) = runs(&args);
    let note = "mode aggregated does not run serving.prefill: its 24 x DEP2 = 48 GPUs are not used";
    assert!(e.contains(note), "{e}");
    let v: serde_json::Value = serde_json::from_str(&o).unwrap();
    assert!(
        v["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains(note)),
        "{}",
        v["notes"]
    );
}

/// Issue #11: 36 prefill instances made 96 GPUs on a 72-GPU NVL72, and it ran. A
/// scenario states its GPU budget (`serving.gpus`; the shipped GB300 scenarios say 72)
/// and a deployment that does not fit is refused with the pools' sums.
#[test]
fn regression_deployment_must_fit_its_gpu_budget() {
    refused(
        &["simulate", "--set", "serving.prefill.instances=36"],
        &[
            "serving.gpus: the deployment needs 96 GPUs (serving.prefill 36 x DEP2 = 72, serving.decode 1 x DEP24 = 24) but serving.gpus is 72",
        ],
    );
    for s in [
        "gb300-nvl72-v4.1-flash-agentx-aggregated",
        "gb300-prefill-only-agentx-c256",
    ] {
        refused(
            &["simulate", s, "--set", "serving.gpus=8"],
            &["but serving.gpus is 8"],
        );
    }
}

/// Issue #11: unsorted timestamps, `hash_ids` longer than the input and absurd output
/// lengths were accepted without a word; a trace after the run's end, or cut by it,
/// said nothing.
#[test]
fn regression_trace_repairs_drops_and_cuts_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(
        dir.path(),
        "t.jsonl",
        "{\"timestamp\": 9000, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2, 3, 4, 5]}\n\
         {\"timestamp\": 8000, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [1, 9]}\n\
         {\"timestamp\": 10000, \"input_length\": 100, \"output_length\": 4000000000}\n\
         {\"timestamp\": 60000000, \"input_length\": 100, \"output_length\": 5}\n",
    );
    let t = trace.to_str().unwrap();
    let base = [
        "simulate",
        "--set",
        "workload=mooncake-conversation",
        "--trace",
        t,
    ];
    let mut args = base.to_vec();
    // Warm-up 4 s: the records at 8 and 9 s are measured, the one at 60000 s is not.
    args.extend(["--duration", "20"]);
    let (_, e) = runs(&args);
    for n in [
        "input_length or output_length above 16000000 tokens: 1 record (first at line 3); dropped",
        "more hash_ids than input_length covers (512 tokens per block): 1 record (first at line 1); the extra ids are ignored",
        "timestamps out of order: 1 record (first at line 2)",
        "cuts the trace short: 1 of its 3 records arrive later and are not replayed",
    ] {
        assert!(e.contains(n), "lacks `{n}`:\n{e}");
    }
    let late = write(
        dir.path(),
        "late.jsonl",
        "{\"timestamp\": 5000000, \"input_length\": 100, \"output_length\": 5}\n",
    );
    refused(
        &[
            "simulate",
            "--set",
            "workload=mooncake-conversation",
            "--trace",
            late.to_str().unwrap(),
            "--duration",
            "100",
        ],
        &[
            "nothing of the trace would be measured",
            "from 5000 s to 5000 s",
        ],
    );
}

/// Issue #11: `validate published` with a NaN published value exited 0. The table
/// parser (the `fitting` crate) refuses it; the command says so.
#[test]
fn regression_published_nan_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "t.csv",
        "id,figure,metric,published,unit,role,command,baseline,source\n\
         a,x,step_ms,NaN,ms,fit,twin forward --dep 8,,test\n",
    );
    refused(&["validate", "published", f.to_str().unwrap()], &["finite"]);
}

// --- Hangs and unbounded resources -------------------------------------------------

/// Issue #11: `duration_s = 1e18` and an open-loop rate of 1e12 req/s ran forever;
/// 10M sessions allocated 1.8 GB. Every size that scales work or memory has a limit,
/// checked at load, reported with its value and how to raise it.
#[test]
fn regression_limits_are_checked_at_load_with_how_to_raise_them() {
    refused(
        &["simulate", "--set", "duration_s=1e18"],
        &[
            "duration_s = 1e18 exceeds limits.max_duration_s = 86400",
            "raise limits.max_duration_s",
        ],
    );
    refused(
        &["simulate", "--duration", "1e18"],
        &["exceeds limits.max_duration_s"],
    );
    refused(
        &[
            "simulate",
            "--set",
            "workload=poisson",
            "--set",
            "workload.open_loop.rate_per_s=1e12",
        ],
        &[
            "exceeds limits.max_requests = 100000000",
            "raise limits.max_requests",
        ],
    );
    refused(
        &["simulate", "--set", "workload.agentx.sessions=10000000"],
        &["exceeds limits.max_sessions = 1000000"],
    );
    // Raising one moves the check to the next limit in line, not past all of them.
    let e = refused(
        &[
            "simulate",
            "--set",
            "workload.agentx.sessions=10000000",
            "--set",
            "limits.max_sessions=20000000",
            "--set",
            "duration_s=1e6",
        ],
        &["limits.max_duration_s"],
    );
    assert!(!e.contains("max_sessions"), "{e}");
}

/// Issue #11: `--trace /dev/zero` read without bound.
#[test]
fn regression_trace_reading_is_bounded() {
    if !Path::new("/dev/zero").exists() {
        eprintln!("SKIPPED: no /dev/zero");
        return;
    }
    refused(
        &[
            "simulate",
            "--set",
            "workload=mooncake-conversation",
            "--trace",
            "/dev/zero",
        ],
        &["limits.max_trace_line_bytes = 1048576"],
    );
    // Input files too (a scenario, hardware or profile named /dev/zero).
    refused(&["forward", "--hardware", "/dev/zero"], &["larger than"]);
    refused(&["forward", "--profile", "/dev/zero"], &["larger than"]);
}

/// Issue #11: long runs showed nothing and Ctrl-C lost everything. SIGINT now stops
/// the run at its next look (every 65536 events), prints the report of the window up
/// to then, and exits 130.
#[cfg(unix)]
#[test]
fn regression_ctrl_c_stops_a_run_and_reports_what_it_measured() {
    let child = Command::new(env!("CARGO_BIN_EXE_twin"))
        .args(["simulate", "--duration", "3600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Past start-up (resolving takes a fraction of a second), well before the end.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let rc = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(rc.success());
    let o = child.wait_with_output().unwrap();
    let (so, se) = (out(&o), err(&o));
    assert_eq!(o.status.code(), Some(130), "{so}\n{se}");
    assert!(so.contains("INTERRUPTED at t = "), "{so}");
    assert!(so.contains("throughput per GPU"), "{so}");
    assert!(se.contains("interrupted: stopped at t = "), "{se}");
}

// --- Messages -----------------------------------------------------------------------

/// Issue #11: `duration_s = inf` and `nan` said "must be > 0".
#[test]
fn regression_non_finite_durations_say_must_be_finite() {
    refused(
        &["simulate", "--duration", "inf"],
        &["--duration inf: must be finite"],
    );
    refused(&["simulate", "--duration", "NaN"], &["must be finite"]);
    refused(
        &["simulate", "--set", "duration_s=inf"],
        &["duration_s: must be finite, got inf"],
    );
    refused(
        &["simulate", "--set", "duration_s=nan"],
        &["duration_s: must be finite, got NaN"],
    );
}

/// Issue #11: the KV-capacity advice could say "use --batch-per-rank 0 or less".
#[test]
fn regression_kv_advice_never_suggests_an_empty_batch() {
    let e = refused(
        &[
            "forward",
            "--batch-per-rank",
            "1",
            "--context",
            "1000000000000",
        ],
        &["not even one request fits: use requests of at most"],
    );
    assert!(!e.contains("--batch-per-rank 0"), "{e}");
    let e = refused(
        &[
            "forward",
            "--batch-per-rank",
            "4096",
            "--context",
            "10000000",
        ],
        &["use --batch-per-rank 24 or less"],
    );
    assert!(!e.contains("not even one"), "{e}");
}

/// Issue #11: an empty trace said "pass --trace PATH" although one was passed; a
/// byte-order mark broke the first line.
#[test]
fn regression_empty_trace_is_named_and_a_bom_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty.jsonl", "\n\n");
    let p = empty.to_str().unwrap();
    let e = refused(
        &[
            "simulate",
            "--set",
            "workload=mooncake-conversation",
            "--trace",
            p,
        ],
        &[&format!("trace `{p}` is empty: it has no records")],
    );
    assert!(!e.contains("pass it with --trace"), "{e}");
    let bom = write(
        dir.path(),
        "bom.jsonl",
        "\u{feff}{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 5}\n{\"timestamp\": 1000, \"input_length\": 100, \"output_length\": 5}\n",
    );
    runs(&[
        "simulate",
        "--set",
        "workload=mooncake-conversation",
        "--trace",
        bom.to_str().unwrap(),
        "--duration",
        "2",
    ]);
}

/// Issue #11: some OS errors were printed twice ("Is a directory (os error 21): Is a
/// directory (os error 21)"); `calibrate fit --out missing/dir/z.toml` named its
/// temporary file. And the class: no error type may print its own `source` in its
/// message (an error chain printer prints the source again).
#[test]
fn regression_os_errors_are_printed_once_naming_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    for args in [
        vec!["forward", "--hardware", d],
        vec!["forward", "--profile", d],
        vec!["calibrate", "fit", d, "--out", "x.toml"],
    ] {
        let e = refused(&args, &[]);
        assert_eq!(e.matches("os error").count(), 1, "{args:?}: {e}");
    }
    // The fit needs a real log: make one.
    let cal = dir.path().join("cal");
    assert!(calibrate(&cal).status.success());
    let target = dir.path().join("missing/dir/z.toml");
    let e = refused(
        &[
            "calibrate",
            "fit",
            cal.join("measurements.csv").to_str().unwrap(),
            "--out",
            target.to_str().unwrap(),
        ],
        &["missing/dir/z.toml: No such file or directory"],
    );
    assert!(!e.contains(".z.toml.tmp"), "{e}");
    // No `#[error("...{source}...")]` anywhere.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = Vec::new();
    for crate_dir in common::SOURCE_DIRS {
        visit(&root.join(crate_dir), &mut |p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            for (i, line) in text.lines().enumerate() {
                if line.contains("#[error(") && line.contains("{source}") {
                    offenders.push(format!("{}:{}", p.display(), i + 1));
                }
            }
        });
    }
    assert!(
        offenders.is_empty(),
        "errors that print their source twice: {offenders:?}"
    );
}

fn visit(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            visit(&p, f);
        } else if p.extension().is_some_and(|x| x == "rs") {
            f(&p);
        }
    }
}

/// Issue #11: a missing required field gave an empty field path ("line 1: : missing
/// field `name`"); `workload_set` entries were reported as `--set`; only the first of
/// several type errors was reported; very long inputs were echoed in full.
#[test]
fn regression_loader_messages_name_places_and_stay_short() {
    let dir = tempfile::tempdir().unwrap();
    let hw = write(dir.path(), "hw.toml", "description = \"no name\"\n");
    let e = refused(
        &["forward", "--hardware", hw.to_str().unwrap()],
        &["file: missing field `name`"],
    );
    assert!(!e.contains(": :"), "{e}");
    let text = twin_scenario_text().replace(
        "workload = \"agentx\"",
        "workload = \"agentx\"\nworkload_set = [\"agentx.sessions = abc\"]",
    );
    let f = write(dir.path(), "s.toml", &text);
    let e = refused(&["simulate", f.to_str().unwrap()], &["workload_set of "]);
    assert!(!e.contains("--set agentx.sessions"), "{e}");
    let e = refused(
        &[
            "forward",
            "--set",
            "model.hidden=abc",
            "--set",
            "model.vocab=xyz",
            "--set",
            "model.moe.top_k=true",
        ],
        &[
            "3 problems",
            "hidden: invalid type",
            "vocab: invalid type",
            "moe.top_k: invalid type",
        ],
    );
    assert!(e.lines().count() <= 5, "{e}");
    // A --set path thousands of fields deep nested tables past the stack.
    let deep = format!("model.{}b=1", "a.".repeat(10_000));
    refused(
        &["forward", "--set", &deep],
        &["segments in the field path"],
    );
    let long = format!("model.hidden={}", "9".repeat(20_000));
    let e = refused(&["forward", "--set", &long], &["characters"]);
    assert!(e.len() < 2_000, "{} bytes of message", e.len());
}

/// Issue #11: an overflowed expert count appeared in advice ("use a DEP that divides
/// 383": 384 + 4294967295 redundant experts wrapped in 32 bits).
#[test]
fn regression_advice_uses_unwrapped_sums() {
    let e = refused(
        &["forward", "--dep", "7", "--redundant-experts", "4294967295"],
        &[
            "384 routed + 4294967295 redundant experts",
            "divides 4294967679",
        ],
    );
    assert!(!e.contains("divides 383"), "{e}");
}

#[test]
fn regression_issue_42_a_slow_gpu_profile_is_refused_naming_op_and_ratio() {
    // The H200 calibration of 2026-12-04 (twin's own kernels: MoE weight streaming at
    // 33% of HBM, decode attention at 0.9%) made this DeepSeek-V3 decode step 538 ms
    // against 70 ms without it, silently. It is refused, naming the op and its ratio
    // over twin's kernel model of the H200; --allow-slow-profile prices with it and
    // says so in the cost model's line.
    let p = repo().join("docs/measured/live-gpu-h200-2026-12-04/h200-kernels.profile.toml");
    let p = p.to_str().unwrap();
    let step = [
        "forward",
        "--hardware",
        "h200",
        "--model",
        "deepseek-v3",
        "--phase",
        "decode",
        "--dep",
        "8",
        "--batch-per-rank",
        "64",
        "--context",
        "4096",
        "--profile",
        p,
    ];
    let e = refused(
        &step,
        &[
            "prices attention",
            "x slower than twin's kernel model of h200",
            "--allow-slow-profile",
        ],
    );
    let ratio: f64 = e
        .split("prices attention ")
        .nth(1)
        .and_then(|s| s.split('x').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no ratio in: {e}"));
    assert!(ratio > 3.0, "{e}");
    let mut allowed = step.to_vec();
    allowed.extend(["--allow-slow-profile", "--json"]);
    let o = twin(&allowed);
    assert!(o.status.success(), "{}", err(&o));
    let j = json(&o);
    let s = j.to_string();
    assert!(
        s.contains("priced with it anyway (--allow-slow-profile)"),
        "{s}"
    );
    // Without the profile the same step is several times faster (70 ms against 538).
    let mut without = step[..step.len() - 2].to_vec();
    without.push("--json");
    let (plain, _) = runs(&without);
    let plain: serde_json::Value = serde_json::from_str(&plain).unwrap();
    let (a, b) = (step_ms(&j), step_ms(&plain));
    assert!(a > 3.0 * b, "{a} ms with the profile, {b} ms without");
    // A scenario's run is refused the same way (its decode pool's probe step).
    refused(
        &[
            "simulate",
            "h100-llama-3.1-70b-tp8",
            "--set",
            "hardware=h200",
            "--engine",
            "twin",
            "--profile",
            p,
            "--set",
            "duration_s=5",
            "--set",
            "warmup_s=0",
        ],
        &[
            "x slower than twin's kernel model of h200",
            "a decode step of 64 requests per rank",
        ],
    );
}

/// A `forward --json` object's step time in ms.
fn step_ms(j: &serde_json::Value) -> f64 {
    j["step_ms"]
        .as_f64()
        .or_else(|| j["result"]["step_ms"].as_f64())
        .unwrap_or_else(|| panic!("no step_ms in {j}"))
}
