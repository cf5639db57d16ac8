//! A profile fitted in situ from a live run's own op trace (`twin calibrate fit-trace
//! TRACE --out PROFILE`): the Chrome trace `twin live` writes (`live::trace`,
//! `trace.json.gz`, gzip or plain), whose `live::<op>` slices are the executor's timed
//! op calls.
//!
//! The slices become the rows `twin calibrate --plan live` records from its synthetic
//! passes (`crate::live::situ_rows`: one row per distinct call, shape
//! `situ;<key>|<vars>`, the median, p10 and p90 of its samples), and the profile is
//! fitted from them exactly as `calibrate --plan live` fits its rows
//! ([`Profile::fit_rows`]: one linear cost per static key). Its provenance names the
//! trace (sha256 of the file) and the run (scenario, seed, cores) in
//! `provenance.source`; its device is the run's, so `twin validate live` accepts it for
//! runs on the same device.
//!
//! No reference peaks and no wake-up fit come out of a trace: the profile prices the
//! live engine's own ops only.

use crate::live::SITU;
use crate::log::MeasurementRecord;
use crate::profile::Profile;
use crate::CalibrationError;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// `otherData.producer` of a trace `twin live` wrote.
pub const PRODUCER: &str = "twin live";
/// Largest trace read, compressed or not (bytes).
pub const MAX_TRACE_BYTES: u64 = 1 << 30;
/// Slice name prefix of a live op call.
pub const SLICE_PREFIX: &str = "live::";

/// What reading or fitting a live trace can fail with.
#[derive(Debug, thiserror::Error)]
pub enum LiveTraceError {
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "{path}: larger than {max} bytes (after decompression): not a trace `twin live` wrote"
    )]
    TooLarge { path: PathBuf, max: u64 },
    #[error("{path}: not a Chrome trace JSON: {msg}")]
    Malformed { path: PathBuf, msg: String },
    #[error("{path}: not a `twin live` trace (otherData.producer is {producer:?}, not \"twin live\"); profiler traces of other engines are imported with `twin calibrate --from-trace`")]
    NotLive { path: PathBuf, producer: String },
    #[error("{path}: traceEvents[{index}] ({name}): {msg}")]
    BadSlice {
        path: PathBuf,
        index: usize,
        name: String,
        msg: String,
    },
    #[error("{path}: no `live::` op slices: nothing to fit (was the run traced? `twin live` writes them unless --no-trace)")]
    Empty { path: PathBuf },
    /// The fit's error is part of the message, not a `source` (printed once).
    #[error("{path}: {error}")]
    Fit {
        path: PathBuf,
        error: CalibrationError,
    },
}

/// Pairs of a JSON object in document order (the order a call's key and variables
/// have, which the fitted functions' regressors follow).
#[derive(Debug, Clone, Default, PartialEq)]
struct Pairs(Vec<(String, u64)>);

impl<'de> Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Pairs, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of non-negative integers")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Pairs, A::Error> {
                let mut v = Vec::new();
                while let Some((k, x)) = m.next_entry::<String, u64>()? {
                    v.push((k, x));
                }
                Ok(Pairs(v))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Debug, Deserialize)]
struct SliceArgs {
    step: Option<u64>,
    layer: Option<i64>,
    op: Option<String>,
    dtype: Option<String>,
    key: Option<Pairs>,
    vars: Option<Pairs>,
}

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(default)]
    ph: String,
    #[serde(default)]
    name: String,
    dur: Option<f64>,
    args: Option<SliceArgs>,
}

/// `otherData` of a live trace: who wrote it, and the run.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RunMeta {
    #[serde(default)]
    pub producer: String,
    #[serde(default)]
    pub scenario: String,
    #[serde(default)]
    pub device: String,
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub cores: usize,
    #[serde(default)]
    pub written_utc: String,
    /// How the calls were timed (absent in traces written before 2026-12-04).
    #[serde(default)]
    pub clock: String,
}

#[derive(Debug, Deserialize)]
struct TraceFile<E> {
    #[serde(rename = "traceEvents")]
    events: E,
    #[serde(rename = "otherData", default)]
    other: Option<RunMeta>,
}

/// One op call of the trace: op, dtype, static key, variables and seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct TracedSample {
    pub op: String,
    pub dtype: String,
    pub key: Vec<(String, u64)>,
    pub vars: Vec<(String, u64)>,
    pub seconds: f64,
    /// The step's index in the run's `steps.jsonl`, and the layer (-1 outside the
    /// layers), when the slice says.
    pub step: Option<u64>,
    pub layer: Option<i64>,
}

/// A live trace read back: the run it came from and its op calls.
#[derive(Debug, Clone)]
pub struct LiveTrace {
    pub meta: RunMeta,
    pub samples: Vec<TracedSample>,
    /// SHA-256 of the file as stored (compressed or not), lowercase hex.
    pub sha256: String,
}

/// The file's bytes, decompressed when gzip (by its magic), within
/// [`MAX_TRACE_BYTES`], and the stored bytes' sha256.
fn read_text(path: &Path) -> Result<(Vec<u8>, String), LiveTraceError> {
    let io = |error| LiveTraceError::Io {
        path: path.into(),
        error,
    };
    let too_large = || LiveTraceError::TooLarge {
        path: path.into(),
        max: MAX_TRACE_BYTES,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    let mut raw = Vec::new();
    f.take(MAX_TRACE_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(io)?;
    if raw.len() as u64 > MAX_TRACE_BYTES {
        return Err(too_large());
    }
    let sha: String = Sha256::digest(&raw)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok((raw, sha));
    }
    let mut text = Vec::new();
    flate2::read::MultiGzDecoder::new(&raw[..])
        .take(MAX_TRACE_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| LiveTraceError::Malformed {
            path: path.into(),
            msg: format!("gzip: {e}"),
        })?;
    if text.len() as u64 > MAX_TRACE_BYTES {
        return Err(too_large());
    }
    Ok((text, sha))
}

fn malformed(path: &Path, e: serde_json::Error) -> LiveTraceError {
    LiveTraceError::Malformed {
        path: path.into(),
        msg: e.to_string(),
    }
}

/// Whether `path` is a trace `twin live` wrote (`otherData.producer`); false for
/// anything unreadable.
pub fn is_live_trace(path: &Path) -> bool {
    let Ok((text, _)) = read_text(path) else {
        return false;
    };
    serde_json::from_slice::<TraceFile<IgnoredAny>>(&text)
        .ok()
        .and_then(|t| t.other)
        .is_some_and(|o| o.producer == PRODUCER)
}

/// Reads a live trace: every `live::` slice as a sample (each must carry its op,
/// dtype, key and variables and a finite, non-negative duration).
pub fn read_live_trace(path: &Path) -> Result<LiveTrace, LiveTraceError> {
    let (text, sha256) = read_text(path)?;
    let t: TraceFile<Vec<Event>> = serde_json::from_slice(&text).map_err(|e| malformed(path, e))?;
    let meta = t.other.unwrap_or_default();
    if meta.producer != PRODUCER {
        return Err(LiveTraceError::NotLive {
            path: path.into(),
            producer: meta.producer,
        });
    }
    let mut samples = Vec::new();
    for (index, e) in t.events.into_iter().enumerate() {
        let Some(op_name) = e.name.strip_prefix(SLICE_PREFIX) else {
            continue;
        };
        if e.ph != "X" {
            continue;
        }
        let bad = |msg: &str| LiveTraceError::BadSlice {
            path: path.into(),
            index,
            name: e.name.clone(),
            msg: msg.into(),
        };
        let dur_us = e
            .dur
            .filter(|d| d.is_finite() && *d >= 0.0)
            .ok_or_else(|| bad("no finite, non-negative dur"))?;
        let a = e.args.ok_or_else(|| bad("no args"))?;
        let (Some(op), Some(dtype), Some(key), Some(vars)) = (a.op, a.dtype, a.key, a.vars) else {
            return Err(bad("args lack op, dtype, key or vars"));
        };
        if op != op_name {
            return Err(bad("args.op differs from the slice's name"));
        }
        samples.push(TracedSample {
            op,
            dtype,
            key: key.0,
            vars: vars.0,
            seconds: dur_us * 1e-6,
            step: a.step,
            layer: a.layer,
        });
    }
    if samples.is_empty() {
        return Err(LiveTraceError::Empty { path: path.into() });
    }
    Ok(LiveTrace {
        meta,
        samples,
        sha256,
    })
}

fn text(pairs: &[(String, u64)]) -> String {
    let v: Vec<(&str, u64)> = pairs.iter().map(|(k, x)| (k.as_str(), *x)).collect();
    engine::op::shape_text(&v)
}

/// The samples as in-situ measurement rows, as `calibrate --plan live` writes them:
/// one per distinct call (op, key and variables), its median (at least 1 ns), p10
/// and p90, on `device` at `timestamp`.
pub fn trace_rows(
    samples: &[TracedSample],
    device: &str,
    timestamp: &str,
) -> Vec<MeasurementRecord> {
    let mut by: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
    for s in samples {
        let shape = format!("{SITU}{}|{}", text(&s.key), text(&s.vars));
        let dtype = if s.dtype.is_empty() { "-" } else { &s.dtype };
        by.entry((s.op.clone(), shape, dtype.to_string()))
            .or_default()
            .push(s.seconds);
    }
    by.into_iter()
        .map(|((op, shape, dtype), v)| {
            let note = format!("live trace: {} samples", v.len());
            let at = (device, "in situ: twin live trace", timestamp);
            crate::live::sample_row(op, shape, dtype, &v, at, note)
        })
        .collect()
}

/// Fits a profile from a live trace, as `calibrate --plan live` fits its rows; its
/// provenance names the trace and the run.
pub fn profile_from_live_trace(path: &Path) -> Result<Profile, LiveTraceError> {
    let t = read_live_trace(path)?;
    let m = &t.meta;
    let rows = trace_rows(&t.samples, &m.device, &m.written_utc);
    let mut p = Profile::fit_rows(&rows, &t.sha256).map_err(|error| LiveTraceError::Fit {
        path: path.into(),
        error,
    })?;
    let file = path
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let clock = if m.clock.is_empty() {
        String::new()
    } else {
        format!(", timed by {}", m.clock)
    };
    p.provenance.source = Some(format!(
        "in situ, from a live trace ({PRODUCER}): {file}, sha256 {}; run of scenario {}, seed {}, {} cores; {} op calls in {} distinct calls{clock}",
        t.sha256,
        m.scenario,
        m.seed,
        m.cores,
        t.samples.len(),
        rows.len()
    ));
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A trace of calls with known costs: `linear[bf16] n=64 k=256` at
    /// 2 us + 3 us x groups + 0.5 us x rows, `rmsnorm dim=64 residual=1` at
    /// 1 us + 20 ns x rows, and `attn_dense heads=4 dim=32 page=16` at
    /// 4 us + 1 us x rows + 10 ns x positions (its variables in the call's order,
    /// rows before positions, which is not alphabetical).
    fn synthetic() -> String {
        let mut ev = Vec::new();
        let mut ts = 0.0;
        let mut push = |op: &str, dtype: &str, key: &str, vars: String, dur_us: f64| {
            ev.push(format!(
                "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"live::{op}\",\"ts\":{ts},\"dur\":{dur_us},\"pid\":0,\"tid\":0,\"args\":{{\"stream\":0,\"layer\":0,\"step\":0,\"op\":\"{op}\",\"dtype\":\"{dtype}\",\"key\":{{{key}}},\"vars\":{{{vars}}}}}}}"
            ));
            ts += dur_us;
        };
        for r in [1u64, 4, 16, 64] {
            for g in [1u64, 2, 4] {
                let t = 2.0 + 3.0 * g as f64 + 0.5 * r as f64;
                push(
                    "linear",
                    "bf16",
                    "\"n\":64,\"k\":256",
                    format!("\"groups\":{g},\"rows\":{r}"),
                    t,
                );
            }
            push(
                "rmsnorm",
                "",
                "\"dim\":64,\"residual\":1",
                format!("\"rows\":{r}"),
                1.0 + 0.02 * r as f64,
            );
            for p in [100u64, 1000, 5000] {
                push(
                    "attn_dense",
                    "",
                    "\"heads\":4,\"dim\":32,\"page\":16",
                    format!("\"rows\":{r},\"positions\":{p}"),
                    4.0 + r as f64 + 0.01 * p as f64,
                );
            }
        }
        ev.push("{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"step 0 decode 1 req\",\"ts\":0,\"dur\":5,\"pid\":0,\"tid\":0}".into());
        format!(
            "{{\"traceEvents\": [{}], \"displayTimeUnit\": \"ms\", \"otherData\": {{\"producer\": \"twin live\", \"scenario\": \"s\", \"device\": \"cpu test\", \"seed\": 3, \"cores\": 2, \"written_utc\": \"2026-12-02T00:00:00Z\", \"clock\": \"the host's wall clock\"}}}}",
            ev.join(",")
        )
    }

    fn check(fit: &crate::live::LiveFit, want: &[f64]) {
        for (got, w) in fit.coefficients_s.iter().zip(want) {
            assert!(
                (got - w).abs() <= 0.01 * w,
                "{:?} vs {want:?}",
                fit.coefficients_s
            );
        }
    }

    #[test]
    fn a_synthetic_trace_fits_its_known_linear_costs_back() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("trace.json");
        std::fs::write(&plain, synthetic()).unwrap();
        let gz = dir.path().join("trace.json.gz");
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(synthetic().as_bytes()).unwrap();
        std::fs::write(&gz, e.finish().unwrap()).unwrap();
        for path in [&plain, &gz] {
            assert!(is_live_trace(path));
            let p = profile_from_live_trace(path).unwrap();
            check(&p.live["linear[bf16] n=64 k=256"], &[2e-6, 3e-6, 5e-7]);
            check(&p.live["rmsnorm dim=64 residual=1"], &[1e-6, 2e-8]);
            let a = &p.live["attn_dense heads=4 dim=32 page=16"];
            assert_eq!(a.vars, vec!["rows", "positions"]);
            check(a, &[4e-6, 1e-6, 1e-8]);
            assert_eq!(p.provenance.device, "cpu test");
            let src = p.provenance.source.as_deref().unwrap();
            assert!(src.contains("live trace") && src.contains("scenario s, seed 3, 2 cores"));
            assert!(
                src.ends_with("distinct calls, timed by the host's wall clock"),
                "{src}"
            );
            assert!(src.contains(&p.provenance.measurements_sha256));
        }
    }

    #[test]
    fn bad_traces_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.json.gz");
        let e = profile_from_live_trace(&missing).unwrap_err().to_string();
        assert!(e.contains("none.json.gz"), "{e}");
        assert!(!is_live_trace(&missing));
        let corrupt = dir.path().join("corrupt.json");
        std::fs::write(&corrupt, "{\"traceEvents\": [").unwrap();
        let e = profile_from_live_trace(&corrupt).unwrap_err().to_string();
        assert!(
            e.contains("corrupt.json") && e.contains("not a Chrome trace"),
            "{e}"
        );
        let bad_gz = dir.path().join("bad.json.gz");
        std::fs::write(&bad_gz, [0x1f, 0x8b, 8, 0, 1, 2, 3]).unwrap();
        let e = profile_from_live_trace(&bad_gz).unwrap_err().to_string();
        assert!(e.contains("gzip"), "{e}");
        let other = dir.path().join("other.json");
        std::fs::write(&other, synthetic().replace("twin live", "torch")).unwrap();
        assert!(!is_live_trace(&other));
        let e = profile_from_live_trace(&other).unwrap_err().to_string();
        assert!(e.contains("\"torch\""), "{e}");
        let no_dur = dir.path().join("nodur.json");
        std::fs::write(&no_dur, synthetic().replacen("\"dur\":", "\"durX\":", 1)).unwrap();
        let e = profile_from_live_trace(&no_dur).unwrap_err().to_string();
        assert!(
            e.contains("traceEvents[0] (live::linear)") && e.contains("dur"),
            "{e}"
        );
    }
}
