//! What the binary's end-to-end tests share: running `twin` and reading its output.
#![allow(dead_code)]

use serde_json::Value;
use std::path::PathBuf;
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
