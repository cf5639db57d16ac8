//! Regression tests of issue #11 for calibration: the measurement log (lock, checks
//! before repairs, whole and cut last rows) and profiles that never hold a value that
//! is not a finite number.

mod common;

use common::{calibrate, err, refused, twin};
use std::process::Command;

/// Issue #11: a calibration CSV with a bad shape was fitted into `inf`, and
/// `profile.toml` held `bandwidth_bytes_per_s = inf`. A fit with a non-finite value is
/// left out (with why); a profile with one is refused when written and when read.
#[test]
fn regression_profiles_never_hold_non_finite_values() {
    use calibration::MeasurementRecord;
    // Copy times that do not grow with the bytes: the bandwidth term fits to zero,
    // an infinite bandwidth.
    let row = |op: &str, shape: &str, bytes: u64, t: f64| MeasurementRecord {
        op: op.into(),
        shape: shape.into(),
        dtype: "u8".into(),
        median_s: t,
        p10_s: t,
        p90_s: t,
        bytes,
        flops: 0,
        achieved_bytes_per_s: 0.0,
        achieved_flops_per_s: 0.0,
        device: "cpu: test".into(),
        driver: "test".into(),
        timestamp: "2026-01-01T00:00:00Z".into(),
        note: String::new(),
    };
    let mut rows: Vec<MeasurementRecord> = [1u64 << 16, 1 << 18, 1 << 20, 1 << 22]
        .iter()
        .map(|&b| row("copy", &format!("bytes={b};peers=1"), b, 1e-3))
        .collect();
    rows.push(row("ref_stream_read", "bytes=1048576", 1 << 20, 1e-4));
    match calibration::Profile::fit_rows(&rows, "x") {
        Ok(p) => assert!(p.non_finite().is_empty(), "{:?}", p.non_finite()),
        Err(e) => assert!(e.to_string().contains("copy"), "{e}"),
    }
    // Written: refused. Read: refused.
    let dir = tempfile::tempdir().unwrap();
    let mut rows2 = rows.clone();
    for (i, r) in rows2.iter_mut().take(4).enumerate() {
        r.median_s = 1e-3 * (i + 1) as f64;
        r.p10_s = r.median_s;
        r.p90_s = r.median_s;
    }
    let mut p = calibration::Profile::fit_rows(&rows2, "x").expect("a finite fit");
    p.ops
        .get_mut("copy")
        .unwrap()
        .params
        .insert("bandwidth_bytes_per_s".into(), f64::INFINITY);
    let path = dir.path().join("p.toml");
    let e = p.write(&path).unwrap_err().to_string();
    assert!(e.contains("ops.copy.bandwidth_bytes_per_s = inf"), "{e}");
    assert!(!path.exists());
    let text = p.to_toml().unwrap();
    std::fs::write(&path, text).unwrap();
    let e = calibration::Profile::load(&path).unwrap_err().to_string();
    assert!(e.contains("not finite"), "{e}");
    refused(
        &["forward", "--profile", path.to_str().unwrap()],
        &["ops.copy.bandwidth_bytes_per_s = inf"],
    );
}

/// Issue #11: two runs on one `--out` interleaved their rows (two headers, every row
/// twice), and every later run failed. A run takes a lock on the directory; a second
/// one refuses naming the first's pid; a killed run's lock is taken over, saying so.
#[test]
fn regression_second_calibrate_run_refuses_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cal");
    std::fs::create_dir_all(&out).unwrap();
    {
        let (_held, _) = calibration::DirLock::acquire(&out).unwrap();
        let o = calibrate(&out);
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.contains(&format!(
                "another `twin calibrate` (pid {}) is writing there",
                std::process::id()
            )),
            "{e}"
        );
        assert!(
            !out.join("measurements.csv").exists(),
            "the refused run wrote"
        );
    }
    // A pid left by a process that is gone (as a killed run leaves it).
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    std::fs::write(out.join(calibration::log::LOCK_FILE), format!("{pid}\n")).unwrap();
    let o = calibrate(&out);
    let e = err(&o);
    assert!(o.status.success(), "{e}");
    assert!(
        e.contains(&format!(
            "took over the lock of {} from pid {pid}",
            out.display()
        )),
        "{e}"
    );
    let text = std::fs::read_to_string(out.join("measurements.csv")).unwrap();
    assert_eq!(text.matches("op,shape").count(), 1, "{text}");
}

/// Issue #11: a run that failed trimmed the CSV's binary tail before erroring out. The
/// log is checked first and repaired only once it is known good.
#[test]
fn regression_failing_calibrate_run_leaves_the_log_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cal");
    assert!(calibrate(&out).status.success());
    let csv = out.join("measurements.csv");
    // Rows of another device, and a binary tail.
    let mut bytes = std::fs::read_to_string(&csv)
        .unwrap()
        .replacen(",cpu:", ",gpu:", 1)
        .into_bytes();
    bytes.extend_from_slice(b"\x00\x01\x02partial");
    std::fs::write(&csv, &bytes).unwrap();
    let o = calibrate(&out);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        err(&o).contains("holds measurements from device"),
        "{}",
        err(&o)
    );
    assert_eq!(
        std::fs::read(&csv).unwrap(),
        bytes,
        "a failing run changed the log"
    );
}

/// Issue #11: a complete last row without its newline was taken for a partial one and
/// thrown away; and `calibrate fit` dropped a truncated row without a word.
#[test]
fn regression_last_row_without_newline_is_kept_and_cut_rows_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cal");
    assert!(calibrate(&out).status.success());
    let csv = out.join("measurements.csv");
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows = text.lines().count() - 1;
    // Whole last row, no newline: kept by fit, and by a rerun (which ends the line).
    let whole = text.trim_end_matches('\n');
    std::fs::write(&csv, whole).unwrap();
    let log = calibration::log::read_log(&csv).unwrap();
    assert_eq!((log.rows.len(), log.cut.is_none()), (rows, true));
    let o = calibrate(&out);
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        err(&o).contains(&format!("{rows} already in")),
        "{}",
        err(&o)
    );
    assert_eq!(std::fs::read_to_string(&csv).unwrap(), text);
    // A row cut short: `calibrate fit` says which line it left out.
    let cut = &text[..text.len() - 30];
    std::fs::write(&csv, cut).unwrap();
    let p = dir.path().join("p.toml");
    let o = twin(&[
        "calibrate",
        "fit",
        csv.to_str().unwrap(),
        "--out",
        p.to_str().unwrap(),
    ]);
    let e = err(&o);
    assert!(
        e.contains(&format!("line {} (", rows + 1))
            && e.contains("is not a whole row")
            && e.contains("left out"),
        "{e}"
    );
}
