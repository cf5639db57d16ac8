//! Helpers of the regression tests: run `twin`, and check a clean refusal.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn twin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_twin"))
        .args(args)
        .output()
        .expect("run twin")
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
    twin(&[
        "calibrate",
        "--device",
        "cpu",
        "--quick",
        "--smoke",
        "--ops",
        "copy",
        "--out",
        out.to_str().unwrap(),
    ])
}
