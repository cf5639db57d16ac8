//! Synthetic measurements from known parameters plus seeded noise are fitted back within
//! stated tolerances; error cases are reported clearly.

use calibration::families::fit_op;
use calibration::{CalibrationError, MeasurementLog, MeasurementRecord, Profile};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sim::cost::CostParams;

/// Multiplicative noise: each time is scaled by a uniform factor in [1 - NOISE, 1 + NOISE].
const NOISE: f64 = 0.02;
/// Rates and per-item costs must come back within 10%, fixed costs within 25%
/// (they are the smallest term everywhere).
const RATE_TOL: f64 = 0.10;
const FIXED_TOL: f64 = 0.25;

fn row(op: &str, shape: String, t: f64, bytes: u64, flops: u64) -> MeasurementRecord {
    MeasurementRecord {
        op: op.into(),
        shape,
        dtype: "fp8".into(),
        median_s: t,
        p10_s: t * 0.95,
        p90_s: t * 1.05,
        bytes,
        flops,
        achieved_bytes_per_s: bytes as f64 / t,
        achieved_flops_per_s: flops as f64 / t,
        device: "synthetic".into(),
        driver: "none".into(),
        timestamp: "2026-01-01T00:00:00Z".into(),
        note: String::new(),
    }
}

fn noisy(rng: &mut ChaCha8Rng, t: f64) -> f64 {
    t * (1.0 + rng.random_range(-NOISE..NOISE))
}

fn close(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        ((got - want) / want).abs() <= tol,
        "{what}: got {got:e}, want {want:e} (tol {tol})"
    );
}

const FIXED: f64 = 5e-6;
const BW: f64 = 40e9;
const F: f64 = 2e12;

fn moe_rows(rng: &mut ChaCha8Rng) -> Vec<MeasurementRecord> {
    let mut v = Vec::new();
    for experts in [1u64, 4, 16, 64] {
        for tokens in [1u64, 8, 64, 512] {
            let bytes = experts * 14_680_064 / 8 + tokens * 36_864;
            let flops = 2 * experts * tokens * 2048 * 7168 / 8;
            let t = FIXED + bytes as f64 / BW + flops as f64 / F;
            v.push(row(
                "moe_decode",
                format!("tokens={tokens};experts={experts}"),
                noisy(rng, t),
                bytes,
                flops,
            ));
        }
    }
    v
}

fn refs() -> Vec<MeasurementRecord> {
    let mut v = vec![
        row("ref_stream_read", "bytes=1".into(), 1.0, 50_000_000_000, 0),
        row("ref_stream_read", "bytes=2".into(), 1.0, 45_000_000_000, 0),
        row("ref_gemm", "m=1".into(), 1.0, 1, 4_000_000_000_000),
    ];
    // Peaks are taken at the p10 time: make it the median here so peaks are round.
    for r in &mut v {
        r.p10_s = r.median_s;
    }
    v
}

#[test]
fn reference_peaks_use_the_fastest_runs() {
    let mut rows = refs();
    rows[0].p10_s = 0.5; // 50 GB at p10 0.5 s: 100 GB/s
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    rows.extend(moe_rows(&mut rng));
    let p = Profile::fit_rows(&rows, "cd").unwrap();
    assert_eq!(p.reference.stream_read_bytes_per_s, Some(100e9));
    assert_eq!(p.reference.gemm_flops_per_s, Some(4e12));
}

#[test]
fn moe_decode_fits_back() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let rows = moe_rows(&mut rng);
    let refs: Vec<&MeasurementRecord> = rows.iter().collect();
    let f = fit_op("moe_decode", &refs).unwrap();
    close(
        f.param("bandwidth_bytes_per_s").unwrap(),
        BW,
        RATE_TOL,
        "bandwidth",
    );
    close(f.param("flops_per_s").unwrap(), F, RATE_TOL, "flop rate");
    close(f.param("fixed_s").unwrap(), FIXED, FIXED_TOL, "fixed");
    assert!(
        f.r2 > 0.99 && f.mape < 2.0 * NOISE && f.loo_mape < 3.0 * NOISE,
        "{f:?}"
    );
    assert_eq!(f.points, 16);
}

#[test]
fn linear_families_fit_back() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    // bytes/BW families.
    for op in ["attn_dense", "attn_sparse", "attn_window", "copy"] {
        let rows: Vec<MeasurementRecord> = (0..8)
            .map(|i| {
                let bytes = 4096u64 << (2 * i);
                row(
                    op,
                    format!("bytes={bytes}"),
                    noisy(&mut rng, FIXED + bytes as f64 / BW),
                    bytes,
                    0,
                )
            })
            .collect();
        let f = fit_op(op, &rows.iter().collect::<Vec<_>>()).unwrap();
        close(f.param("bandwidth_bytes_per_s").unwrap(), BW, RATE_TOL, op);
        close(f.param("fixed_s").unwrap(), FIXED, FIXED_TOL, op);
    }
    // flops/F.
    let rows: Vec<MeasurementRecord> = (0..8)
        .map(|i| {
            let flops = 1_000_000u64 << (2 * i);
            row(
                "grouped_gemm",
                format!("flops={flops}"),
                noisy(&mut rng, FIXED + flops as f64 / F),
                1,
                flops,
            )
        })
        .collect();
    let f = fit_op("grouped_gemm", &rows.iter().collect::<Vec<_>>()).unwrap();
    close(f.param("flops_per_s").unwrap(), F, RATE_TOL, "gemm rate");
    close(f.param("fixed_s").unwrap(), FIXED, FIXED_TOL, "gemm fixed");
    // Indexer: linear in positions (batch * positions).
    let per_pos = 2e-9;
    let rows: Vec<MeasurementRecord> = (0..8)
        .map(|i| {
            let (batch, pos) = (1 + i % 2, 1024u64 << i);
            let n = batch * pos;
            let t = noisy(&mut rng, FIXED + per_pos * n as f64);
            row(
                "indexer",
                format!("batch={batch};heads=64;dim=128;positions={pos};topk=2048"),
                t,
                136 * n,
                0,
            )
        })
        .collect();
    let f = fit_op("indexer", &rows.iter().collect::<Vec<_>>()).unwrap();
    close(
        f.param("per_position_s").unwrap(),
        per_pos,
        RATE_TOL,
        "per position",
    );
    close(
        f.param("bandwidth_bytes_per_s").unwrap(),
        136.0 / per_pos,
        RATE_TOL,
        "indexer bandwidth",
    );
}

#[test]
fn gather_fits_back() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (t_access, t_walk, entries) = (60e-9, 90e-9, 1024.0);
    let mut rows = Vec::new();
    for page in [4096u64, 2 << 20] {
        for e in [20u32, 22, 24, 26, 28, 30, 32] {
            let table = 1u64 << e;
            let n = 65536u64;
            let p_miss = (1.0 - entries * page as f64 / table as f64).max(0.0);
            let t = noisy(&mut rng, n as f64 * (t_access + p_miss * t_walk));
            rows.push(row(
                "gather",
                format!("placement=x;table_bytes={table};row_bytes=256;rows={n};page={page}"),
                t,
                n * 520,
                0,
            ));
        }
    }
    let f = fit_op("gather", &rows.iter().collect::<Vec<_>>()).unwrap();
    close(
        f.param("t_access_s").unwrap(),
        t_access,
        RATE_TOL,
        "t_access",
    );
    close(f.param("t_walk_s").unwrap(), t_walk, RATE_TOL, "t_walk");
    assert_eq!(f.param("tlb_entries").unwrap(), entries);
    assert_eq!(f.param("bytes_per_row").unwrap(), 520.0);
    assert_eq!(f.param("max_table_bytes").unwrap(), (1u64 << 32) as f64);
    assert_eq!(f.param("max_table_page_bytes").unwrap(), (2 << 20) as f64);
}

#[test]
fn error_cases() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let rows = moe_rows(&mut rng);
    let few: Vec<&MeasurementRecord> = rows.iter().take(3).collect();
    assert!(matches!(
        fit_op("moe_decode", &few),
        Err(CalibrationError::TooFewPoints {
            need: 4,
            got: 3,
            ..
        })
    ));

    let mut nan = rows.clone();
    nan[2].median_s = f64::NAN;
    let e = fit_op("moe_decode", &nan.iter().collect::<Vec<_>>()).unwrap_err();
    assert!(matches!(e, CalibrationError::NonFinite { .. }), "{e}");

    // Every point with the same bytes: bandwidth cannot be separated from fixed cost.
    let same: Vec<MeasurementRecord> = (0..5)
        .map(|i| row("copy", format!("i={i}"), 1e-3 + i as f64 * 1e-4, 4096, 0))
        .collect();
    let e = fit_op("copy", &same.iter().collect::<Vec<_>>()).unwrap_err();
    assert!(matches!(e, CalibrationError::ConstantData { .. }), "{e}");
    assert!(e.to_string().contains("constant data: bytes"), "{e}");

    let flat: Vec<MeasurementRecord> = (0..5)
        .map(|i| row("copy", format!("i={i}"), 1e-3, 4096 << i, 0))
        .collect();
    assert!(matches!(
        fit_op("copy", &flat.iter().collect::<Vec<_>>()),
        Err(CalibrationError::ConstantData { .. })
    ));

    let e = Profile::fit_rows(&refs(), "00").unwrap_err();
    assert!(matches!(e, CalibrationError::NothingFitted(_)), "{e}");
    let missing = vec![row("gather", "rows=1".into(), 1.0, 1, 0); 3];
    assert!(fit_op("gather", &missing.iter().collect::<Vec<_>>()).is_err());
}

#[test]
fn profile_roundtrip_and_cost_params() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("measurements.csv");
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut rows = refs();
    rows.extend(moe_rows(&mut rng));
    // A copy fit, and an op whose fit fails (listed as skipped, not fatal).
    for i in 0..5u64 {
        let b = 65536 << (2 * i);
        rows.push(row(
            "copy",
            format!("bytes={b};peers=1"),
            noisy(&mut rng, 2e-6 + b as f64 / 20e9),
            b,
            0,
        ));
    }
    rows.push(row("indexer", "batch=1;positions=10".into(), 1e-3, 10, 0));
    {
        let mut log = MeasurementLog::open(&csv, "synthetic").unwrap();
        for r in &rows {
            log.append(r).unwrap();
        }
    }
    let p = Profile::fit_csv(&csv).unwrap();
    assert!(p.ops.contains_key("moe_decode") && p.ops.contains_key("copy"));
    // Only one dtype was measured: no per-dtype fits.
    assert!(!p.ops.keys().any(|k| k.starts_with("moe_decode.")));
    assert!(
        p.skipped["indexer"].contains("too few points"),
        "{:?}",
        p.skipped
    );
    assert_eq!(p.reference.stream_read_bytes_per_s, Some(50e9));
    assert_eq!(p.provenance.measurement_rows, rows.len());
    assert_eq!(p.provenance.measurements_sha256.len(), 64);

    let out = dir.path().join("profile.toml");
    p.write(&out).unwrap();
    let back = Profile::load(&out).unwrap();
    assert_eq!(back, p);

    let base = CostParams::default();
    let c = back.cost_params(&base);
    let bw = p.ops["moe_decode"].param("bandwidth_bytes_per_s").unwrap();
    assert!((c.moe.mem_eff - bw / 50e9).abs() < 1e-12);
    let fl = p.ops["moe_decode"].param("flops_per_s").unwrap();
    assert!((c.moe.compute_eff - fl / 4e12).abs() < 1e-12);
    assert_eq!(c.moe.fixed_s, p.ops["moe_decode"].param("fixed_s").unwrap());
    close(c.comm.mem_eff, 20e9 / 50e9, RATE_TOL, "comm mem_eff");
    // Ops without fits keep the base values.
    assert_eq!(c.attention, base.attention);
    assert_eq!(c.gather, base.gather);
    assert!(
        c.source.contains("synthetic")
            && c.source.contains(&p.provenance.measurements_sha256[..16])
    );
    assert!(!c.source.contains(dir.path().to_str().unwrap()));

    // Broken profile files are errors.
    std::fs::write(&out, "not = [valid").unwrap();
    assert!(matches!(
        Profile::load(&out),
        Err(CalibrationError::Profile { .. })
    ));
    assert!(Profile::load(&dir.path().join("missing.toml")).is_err());
}

#[test]
fn log_resume_partial_line_and_device_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("measurements.csv");
    let r1 = row("copy", "bytes=16;peers=1".into(), 1e-6, 32, 0);
    let r2 = row("copy", "bytes=32;peers=1".into(), 2e-6, 64, 0);
    {
        let mut log = MeasurementLog::open(&csv, "synthetic").unwrap();
        assert!(log.is_empty());
        log.append(&r1).unwrap();
    }
    // Simulate a crash mid-row.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&csv).unwrap();
        f.write_all(b"copy,bytes=32;peers=1,u8,0.0").unwrap();
    }
    let mut log = MeasurementLog::open(&csv, "synthetic").unwrap();
    assert_eq!(log.len(), 1);
    assert!(log.contains(&r1.point()) && !log.contains(&r2.point()));
    log.append(&r2).unwrap();
    drop(log);
    let rows = calibration::log::read_rows(&csv).unwrap();
    assert_eq!(rows, vec![r1, r2]);
    let e = MeasurementLog::open(&csv, "other device").err().unwrap();
    assert!(matches!(e, CalibrationError::DeviceMismatch { .. }), "{e}");
    std::fs::write(&csv, "a,b\n1,2\n").unwrap();
    assert!(matches!(
        calibration::log::read_rows(&csv),
        Err(CalibrationError::Csv { .. })
    ));
}

#[test]
fn moe_fits_each_dtype_when_several_were_measured() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let mut rows = refs();
    for (dtype, bw) in [("fp8", 40e9), ("int4", 20e9)] {
        for mut r in moe_rows(&mut rng) {
            r.dtype = dtype.into();
            r.median_s = FIXED + r.bytes as f64 / bw + r.flops as f64 / F;
            rows.push(r);
        }
    }
    let p = Profile::fit_rows(&rows, "ab").unwrap();
    close(
        p.ops["moe_decode.fp8"]
            .param("bandwidth_bytes_per_s")
            .unwrap(),
        40e9,
        RATE_TOL,
        "fp8",
    );
    close(
        p.ops["moe_decode.int4"]
            .param("bandwidth_bytes_per_s")
            .unwrap(),
        20e9,
        RATE_TOL,
        "int4",
    );
    assert!(p.ops.contains_key("moe_decode"));
    // The cost model takes the fp8 fit.
    let c = p.cost_params(&CostParams::default());
    close(c.moe.mem_eff, 40e9 / 50e9, RATE_TOL, "moe mem_eff from fp8");
}
