//! What the binary's end-to-end tests share: running `twin`, reading its output, and
//! checking a clean refusal.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `twin` with `args`, outside any scheduler (no shard index in the environment).
pub fn twin<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_twin"))
        .args(args)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .expect("run twin")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The run's JSON output; it must have succeeded.
pub fn json(o: &Output) -> Value {
    assert!(o.status.success(), "twin failed:\n{}", stderr(o));
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", stdout(o)))
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The source folders of the binary and every library crate (not their tests).
pub const SOURCE_DIRS: [&str; 10] = [
    "src",
    "spec/src",
    "sim/src",
    "engine/src",
    "kernels/src",
    "calibration/src",
    "fitting/src",
    "live/src",
    "corpus/src",
    "hf/src",
];

/// Runs `twin` expecting failure whose stderr holds every needle; returns stderr.
pub fn fails_with<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    args: &[S],
    needles: &[&str],
) -> String {
    let o = twin(args);
    assert!(
        !o.status.success(),
        "expected failure for {args:?}, got:\n{}",
        stdout(&o)
    );
    let err = stderr(&o);
    for n in needles {
        assert!(err.contains(n), "stderr of {args:?} lacks `{n}`:\n{err}");
    }
    err
}

/// A small plan: three P/D splits of the default rack (`examples/plan-space-small.toml`),
/// 30 simulated seconds each, then `extra`.
pub fn small_plan(extra: &[&str]) -> Vec<String> {
    let space = repo().join("examples/plan-space-small.toml");
    let mut v: Vec<String> = [
        "plan",
        "--duration",
        "30",
        "--set",
        "warmup_s=10",
        "--space",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(space.to_str().expect("utf-8 path").to_string());
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

pub fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `args` fail cleanly (exit 2, no panic) with every needle in stderr; returns stderr.
pub fn refused(args: &[&str], needles: &[&str]) -> String {
    let o = twin(args);
    let e = err(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {e}\n{}", out(&o));
    assert!(!e.contains("panicked"), "{args:?} panicked:\n{e}");
    for n in needles {
        assert!(e.contains(n), "stderr of {args:?} lacks `{n}`:\n{e}");
    }
    e
}

/// `args` succeed; returns (stdout, stderr).
pub fn runs(args: &[&str]) -> (String, String) {
    let o = twin(args);
    assert!(o.status.success(), "{args:?} failed:\n{}", err(&o));
    (out(&o), err(&o))
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A quick CPU calibration of the `copy` op into `out`.
pub fn calibrate(out: &Path) -> Output {
    calibrate_smoke(out, &["--ops", "copy"])
}

/// A CPU calibration of the smoke plan into `out`, with `extra` arguments.
pub fn calibrate_smoke(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["calibrate", "--device", "cpu", "--quick", "--smoke"];
    args.extend_from_slice(extra);
    args.extend(["--out", out.to_str().unwrap()]);
    twin(&args)
}

/// A shipped profile, as `--engine` loads it.
pub fn shipped(name: &str) -> sim::cost::tables::KernelTables {
    use std::io::Read;
    let path = repo().join(format!("scenarios/kernel-tables/{name}.toml.gz"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    toml::from_str(&text).unwrap()
}
