//! End-to-end `twin calibrate` on the CPU (tiny smoke plan, so it is quick in debug
//! builds), resume, refit, and the clear failure for CUDA on a machine without a driver.

mod common;

use common::{calibrate_smoke, refused, twin};
use std::path::Path;
use std::process::Output;

fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn rows(p: &Path) -> Vec<calibration::MeasurementRecord> {
    calibration::log::read_rows(p).expect("measurements.csv parses")
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads as one story; tests are exempt
fn calibrate_cpu_writes_measurements_and_profile_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cal");
    let o = calibrate_smoke(&out, &[]);
    assert!(o.status.success(), "{}", text(&o));

    let csv = out.join("measurements.csv");
    let first = rows(&csv);
    assert!(first.len() >= 40, "only {} rows", first.len());
    for op in [
        "moe_decode",
        "grouped_gemm",
        "attn_dense",
        "attn_sparse",
        "attn_window",
        "indexer",
        "gather",
        "copy",
        "ref_stream_read",
        "ref_gemm",
    ] {
        assert!(first.iter().any(|r| r.op == op), "no {op} rows");
    }
    assert!(first
        .iter()
        .all(|r| r.median_s > 0.0 && r.device.starts_with("cpu")));
    assert!(first
        .iter()
        .filter(|r| r.op == "gather")
        .all(|r| r.note.contains("thp=")));

    let profile =
        calibration::Profile::load(&out.join("profile.toml")).expect("profile.toml loads");
    assert!(!profile.ops.is_empty(), "{profile:?}");
    assert!(profile.reference.stream_read_bytes_per_s.unwrap() > 0.0);
    assert_eq!(profile.provenance.measurement_rows, first.len());
    let params = profile.cost_params(&sim::cost::CostParams::default());
    assert!(
        params.source.starts_with("calibration profile: cpu"),
        "{}",
        params.source
    );

    // The profile prices `twin forward --profile`: its source is named, and the step
    // differs from the analytic defaults (a CPU's measured efficiencies are not a GPU's).
    let forward = |extra: &[&str]| {
        let mut args = vec![
            "forward",
            "--hardware",
            "cpu-host",
            "--model",
            "cpu-live-moe",
            "--dep",
            "8",
            "--batch-per-rank",
            "16",
            "--context",
            "2048",
            "--json",
        ];
        args.extend_from_slice(extra);
        let o = twin(&args);
        assert!(o.status.success(), "{}", text(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let plain = forward(&[]);
    let profiled = forward(&["--profile", out.join("profile.toml").to_str().unwrap()]);
    assert!(
        profiled["cost_model"]
            .as_str()
            .unwrap()
            .contains("calibration profile: cpu"),
        "{profiled}"
    );
    assert_ne!(
        plain["step_ms"], profiled["step_ms"],
        "the profile changed nothing"
    );
    // A CPU's profile on a GPU is refused, naming both.
    let p = out.join("profile.toml");
    refused(
        &[
            "forward",
            "--hardware",
            "gb300",
            "--profile",
            p.to_str().unwrap(),
        ],
        &[
            "measured on `cpu: ",
            "a CPU, but the hardware is `gb300`, a GPU",
        ],
    );

    // Rerun with the same --out: every point is already there, nothing is re-measured.
    let o = calibrate_smoke(&out, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(rows(&csv), first, "resume must not re-measure");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{n} points planned, {n} already in",
            n = first.len()
        )),
        "{err}"
    );

    // Refit without measuring.
    let refit = dir.path().join("refit.toml");
    let o = twin(&[
        "calibrate",
        "fit",
        csv.to_str().unwrap(),
        "--out",
        refit.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let p2 = calibration::Profile::load(&refit).unwrap();
    assert_eq!(p2.ops, profile.ops);
    assert_eq!(
        p2.provenance.measurements_sha256,
        profile.provenance.measurements_sha256
    );
}

#[test]
fn calibrate_cuda_without_driver_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gpu");
    match engine::Device::Cuda(0).open() {
        Ok(b) => {
            eprintln!(
                "SKIPPED no-driver check: a GPU is present ({})",
                b.info().device
            );
        }
        Err(_) => {
            let o = twin(&[
                "calibrate",
                "--device",
                "cuda:0",
                "--quick",
                "--out",
                out.to_str().unwrap(),
            ]);
            assert!(!o.status.success(), "{}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("no CUDA driver found (libcuda.so)")
                    && err.contains("use --device cpu"),
                "{}",
                text(&o)
            );
            assert!(!err.contains("panicked"), "{}", text(&o));
        }
    }
    let o = twin(&[
        "calibrate",
        "--device",
        "gpu0",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("expected `cpu` or `cuda:N`"),
        "{}",
        text(&o)
    );
    let o = twin(&[
        "calibrate",
        "fit",
        dir.path().join("missing.csv").to_str().unwrap(),
        "--out",
        "x.toml",
    ]);
    assert!(!o.status.success());
}
