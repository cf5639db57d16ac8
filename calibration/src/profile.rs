//! `profile.toml`: fitted parameters per op, reference peaks and provenance, and the
//! conversion into the cost model's [`sim::cost::CostParams`].

use crate::error::{io_err, CalibrationError, Result};
use crate::families::{fit_op, fitted_ops, OpFit};
use crate::log::{read_rows, MeasurementRecord};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sim::cost::{CostParams, OpRate};
use std::collections::BTreeMap;
use std::path::Path;

/// Where a profile's numbers come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub device: String,
    pub driver: String,
    /// When the profile was fitted (UTC, RFC 3339).
    pub date: String,
    /// Earliest and latest measurement timestamps.
    pub measured_from: String,
    pub measured_to: String,
    pub twin_version: String,
    /// SHA-256 of the measurements CSV the fits were made from.
    pub measurements_sha256: String,
    pub measurement_rows: usize,
    /// Where the measurements came from when not a `twin calibrate` run (a live run's
    /// trace: `crate::live_trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The device's own measured peaks; efficiencies are fractions of these.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Reference {
    /// Peak achievable streaming-read bandwidth (`ref_stream_read`), bytes/s: the best
    /// point, each at its 10th-percentile time (the fastest runs, least disturbed by
    /// other load), so efficiencies against it are not flattered.
    pub stream_read_bytes_per_s: Option<f64>,
    /// Peak achievable dense GEMM rate (`ref_gemm`), flop/s, the same way.
    pub gemm_flops_per_s: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub provenance: Provenance,
    pub reference: Reference,
    /// Fits per op name (see [`crate::families`]).
    pub ops: BTreeMap<String, OpFit>,
    /// Ops with measurements that could not be fitted, and why.
    #[serde(default)]
    pub skipped: BTreeMap<String, String>,
    /// Fits of the live engine's ops, per static key (`calibrate --plan live`).
    #[serde(default)]
    pub live: BTreeMap<String, crate::live::LiveFit>,
    /// The device's wake-up after idling (`calibrate --plan live`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<crate::live::WakeFit>,
}

/// SHA-256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let bytes = crate::log::read_bounded(path, crate::log::MAX_LOG_BYTES)?;
    let digest = Sha256::digest(&bytes);
    Ok(digest.iter().map(|b| format!("{b:02x}")).collect())
}

/// Current UTC time as RFC 3339 (seconds): `YYYY-MM-DDThh:mm:ssZ`.
pub fn utc_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Seconds since the Unix epoch to `YYYY-MM-DDThh:mm:ssZ` (proleptic Gregorian);
/// empty past chrono's last year (262143).
pub fn format_utc(secs: u64) -> String {
    i64::try_from(secs)
        .ok()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

impl Profile {
    /// Fits every op in `rows`. Ops that cannot be fitted are listed in `skipped`; it is
    /// an error only when nothing at all can be fitted. All rows must share one device.
    pub fn fit_rows(rows: &[MeasurementRecord], sha256: &str) -> Result<Profile> {
        let first = rows
            .first()
            .ok_or_else(|| CalibrationError::NothingFitted("no measurements".into()))?;
        if let Some(r) = rows.iter().find(|r| r.device != first.device) {
            return Err(CalibrationError::DeviceMismatch {
                path: "measurements".into(),
                found: r.device.clone(),
                expected: first.device.clone(),
            });
        }
        let mut by_op: BTreeMap<&str, Vec<&MeasurementRecord>> = BTreeMap::new();
        for r in rows {
            by_op.entry(r.op.as_str()).or_default().push(r);
        }
        let best = |op: &str, f: fn(&MeasurementRecord) -> f64| {
            by_op.get(op).and_then(|rs| {
                rs.iter()
                    .map(|r| f(r))
                    .filter(|v| v.is_finite() && *v > 0.0)
                    .reduce(f64::max)
            })
        };
        let reference = Reference {
            stream_read_bytes_per_s: best("ref_stream_read", |r| r.bytes as f64 / r.p10_s),
            gemm_flops_per_s: best("ref_gemm", |r| r.flops as f64 / r.p10_s),
        };
        let OpFits { ops, mut skipped } = fit_families(&by_op);
        let (live, live_skipped) = crate::live::fit_live(rows);
        let wake = crate::live::fit_wake(rows);
        skipped.extend(live_skipped);
        if ops.is_empty() && live.is_empty() {
            let why: Vec<String> = skipped.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            return Err(CalibrationError::NothingFitted(if why.is_empty() {
                "only reference measurements".into()
            } else {
                why.join("; ")
            }));
        }
        let mut stamps: Vec<&str> = rows.iter().map(|r| r.timestamp.as_str()).collect();
        stamps.sort_unstable();
        Ok(Profile {
            provenance: Provenance {
                device: first.device.clone(),
                driver: first.driver.clone(),
                date: utc_now(),
                measured_from: stamps.first().unwrap_or(&"").to_string(),
                measured_to: stamps.last().unwrap_or(&"").to_string(),
                twin_version: env!("CARGO_PKG_VERSION").to_string(),
                measurements_sha256: sha256.to_string(),
                measurement_rows: rows.len(),
                source: None,
            },
            reference,
            ops,
            skipped,
            live,
            wake,
        })
    }

    /// Reads and fits a measurements CSV.
    pub fn fit_csv(csv: &Path) -> Result<Profile> {
        let rows = read_rows(csv)?;
        Profile::fit_rows(&rows, &sha256_file(csv)?)
    }

    pub fn to_toml(&self) -> Result<String> {
        toml::to_string_pretty(self).map_err(|e| CalibrationError::Profile {
            path: "<profile>".into(),
            msg: e.to_string(),
        })
    }

    /// Every value that is not a finite number, by its path (`ops.copy.r2`).
    pub fn non_finite(&self) -> Vec<String> {
        let mut bad = Vec::new();
        let r = &self.reference;
        for (k, v) in [
            ("stream_read_bytes_per_s", r.stream_read_bytes_per_s),
            ("gemm_flops_per_s", r.gemm_flops_per_s),
        ] {
            if let Some(v) = v.filter(|v| !v.is_finite()) {
                bad.push(format!("reference.{k} = {v}"));
            }
        }
        if let Some(w) = &self.wake {
            for (k, v) in [("max_s", w.max_s), ("tau_s", w.tau_s), ("rms_s", w.rms_s)] {
                if !v.is_finite() {
                    bad.push(format!("wake.{k} = {v}"));
                }
            }
        }
        for (op, f) in &self.ops {
            bad.extend(
                non_finite_values(f)
                    .into_iter()
                    .map(|kv| format!("ops.{op}.{kv}")),
            );
        }
        bad
    }

    /// An error at `path` unless every value is a finite number (`non_finite`).
    fn check_finite(&self, path: &Path, what: &str) -> Result<()> {
        let bad = self.non_finite();
        if bad.is_empty() {
            return Ok(());
        }
        Err(CalibrationError::Profile {
            path: path.into(),
            msg: format!("{what}: values that are not finite: {}", bad.join(", ")),
        })
    }

    /// Writes atomically (temporary file in the same directory, then rename). A
    /// profile with a value that is not a finite number is refused.
    pub fn write(&self, path: &Path) -> Result<()> {
        self.check_finite(path, "not written")?;
        let text = self.to_toml()?;
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let tmp = dir.join(format!(
            ".{}.tmp",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("profile.toml")
        ));
        // Errors name the profile asked for; the temporary file is a detail.
        let written = (|| {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io_err(path)(e)
        })
    }

    pub fn load(path: &Path) -> Result<Profile> {
        let bytes = crate::log::read_bounded(path, crate::log::MAX_PROFILE_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|_| CalibrationError::Profile {
            path: path.into(),
            msg: "not UTF-8 text".into(),
        })?;
        let p: Profile = toml::from_str(&text).map_err(|e| CalibrationError::Profile {
            path: path.into(),
            msg: e.to_string(),
        })?;
        p.check_finite(path, "refit it with `twin calibrate fit`")?;
        Ok(p)
    }

    /// Path-independent description for `CostParams::source`.
    pub fn source(&self) -> String {
        let h = &self.provenance.measurements_sha256;
        let what = match self.provenance.source {
            Some(_) => "profile fitted from a live trace",
            None => "calibration profile",
        };
        format!(
            "{what}: {}, {}, measurements sha256 {}",
            self.provenance.device,
            self.provenance.date,
            &h[..h.len().min(16)]
        )
    }

    /// `base` with the efficiencies and fixed costs of every op this profile has fits
    /// for replaced by measured ones:
    /// - `mem_eff` = fitted bandwidth / reference stream-read bandwidth,
    /// - `compute_eff` = fitted flop rate / reference GEMM rate,
    /// - `fixed_s` = fitted fixed cost.
    ///
    /// Mapping: `moe` <- `moe_decode.fp8` when fp8 was fitted on its own (the expert
    /// format of the reference models), else `moe_decode` (bandwidth, fixed), and
    /// `grouped_gemm` (flop rate; the MoE fit's own flop rate when no grouped GEMM was
    /// fitted); `gemm` <-
    /// `grouped_gemm` (flop rate, fixed); `attention` <- `attn_dense`, else
    /// `attn_sparse`, else `attn_window`; `indexer` <- `indexer` (derived bandwidth,
    /// fixed); `gather` <- `gather` (mem_eff from `bytes_per_row` over the fitted time
    /// per row at the largest measured table with its page size, i.e. at that table's
    /// TLB miss rate; fixed kept); `comm` <- `copy` (the one-device stand-in:
    /// local copy bandwidth over read bandwidth, fixed). Rates fitted as infinite (the
    /// term explained nothing) and efficiencies without a reference leave `base`'s
    /// value. Efficiencies are capped at 1: a fit above the reference peak means the
    /// reference under-measured.
    pub fn cost_params(&self, base: &CostParams) -> CostParams {
        let mut p = base.clone();
        let bw_ref = self.reference.stream_read_bytes_per_s;
        let fl_ref = self.reference.gemm_flops_per_s;
        let eff = |rate: Option<f64>, reference: Option<f64>| match (rate, reference) {
            (Some(r), Some(re)) if r.is_finite() && r > 0.0 && re > 0.0 => Some((r / re).min(1.0)),
            _ => None,
        };
        let fit = |op: &str| self.ops.get(op);
        let gg = fit("grouped_gemm");
        if let Some(m) = fit("moe_decode.fp8").or_else(|| fit("moe_decode")) {
            let comp = eff(gg.and_then(|g| g.param("flops_per_s")), fl_ref)
                .or_else(|| eff(m.param("flops_per_s"), fl_ref));
            set_rate(
                &mut p.moe,
                eff(m.param("bandwidth_bytes_per_s"), bw_ref),
                comp,
                m.param("fixed_s"),
            );
        } else if let Some(g) = gg {
            set_rate(&mut p.moe, None, eff(g.param("flops_per_s"), fl_ref), None);
        }
        if let Some(g) = gg {
            set_rate(
                &mut p.gemm,
                None,
                eff(g.param("flops_per_s"), fl_ref),
                g.param("fixed_s"),
            );
        }
        if let Some(a) = fit("attn_dense")
            .or_else(|| fit("attn_sparse"))
            .or_else(|| fit("attn_window"))
        {
            set_rate(
                &mut p.attention,
                eff(a.param("bandwidth_bytes_per_s"), bw_ref),
                None,
                a.param("fixed_s"),
            );
        }
        if let Some(i) = fit("indexer") {
            set_rate(
                &mut p.indexer,
                eff(i.param("bandwidth_bytes_per_s"), bw_ref),
                None,
                i.param("fixed_s"),
            );
        }
        if let Some(g) = fit("gather") {
            set_rate(&mut p.gather, eff(gather_bandwidth(g), bw_ref), None, None);
        }
        if let Some(c) = fit("copy") {
            set_rate(
                &mut p.comm,
                eff(c.param("bandwidth_bytes_per_s"), bw_ref),
                None,
                c.param("fixed_s"),
            );
        }
        p.source = self.source();
        p
    }
}

/// Sets the efficiencies and fixed cost of `rate` that are given (a fixed cost only
/// when finite).
fn set_rate(rate: &mut OpRate, mem: Option<f64>, comp: Option<f64>, fixed: Option<f64>) {
    if let Some(m) = mem {
        rate.mem_eff = m;
    }
    if let Some(c) = comp {
        rate.compute_eff = c;
    }
    if let Some(f) = fixed.filter(|f| f.is_finite()) {
        rate.fixed_s = f;
    }
}

/// The bandwidth a gather fit gives: bytes per row over the fitted time per row at
/// the largest measured table with its page size; `None` when a value is missing or
/// the time is not positive.
fn gather_bandwidth(g: &OpFit) -> Option<f64> {
    let per_row = |table: f64, page: f64| {
        let p_miss = (1.0 - g.param("tlb_entries")? * page / table).max(0.0);
        Some(g.param("t_access_s")? + p_miss * g.param("t_walk_s")?)
    };
    let table = g.param("max_table_bytes").unwrap_or(f64::INFINITY);
    let page = g.param("max_table_page_bytes").unwrap_or(4096.0);
    match (g.param("bytes_per_row"), per_row(table, page)) {
        (Some(b), Some(t)) if t > 0.0 => Some(b / t),
        _ => None,
    }
}

/// The fits of every op with a fit family in `by_op` (rows by op), and why each op
/// that has none, or whose fit failed, was skipped. `moe_decode` and `grouped_gemm`
/// are also fitted per weight dtype when several were measured.
fn fit_families(by_op: &BTreeMap<&str, Vec<&MeasurementRecord>>) -> OpFits {
    let mut fits = OpFits::default();
    let fitted = fitted_ops();
    for (op, rs) in by_op {
        if op.starts_with("ref_") || *op == crate::live::WAKE_OP {
            continue;
        }
        if !fitted.contains(op) {
            if engine::op::op_info(op).is_none_or(|o| o.role != engine::OpRole::Live) {
                let why = "no fit family for this op".to_string();
                fits.skipped.insert(op.to_string(), why);
            }
            continue;
        }
        insert_fit(
            &mut fits,
            op.to_string(),
            fit_op(op, rs).and_then(|f| finite_fit(op, f)),
        );
        // Expert weight formats decode at different costs: also fit each dtype on
        // its own (`moe_decode.fp8`, ...) when several were measured. The all-dtype
        // fit stays the one `cost_params` uses.
        if *op == "moe_decode" || *op == "grouped_gemm" {
            fit_by_dtype(op, rs, &mut fits);
        }
    }
    fits
}

/// Fits by op key, and why each op key was skipped.
#[derive(Default)]
struct OpFits {
    ops: BTreeMap<String, OpFit>,
    skipped: BTreeMap<String, String>,
}

/// Fits `op` on the rows of each weight dtype alone (`op.dtype`), when `rs` holds
/// several.
fn fit_by_dtype(op: &str, rs: &[&MeasurementRecord], fits: &mut OpFits) {
    let mut by_dtype: BTreeMap<&str, Vec<&MeasurementRecord>> = BTreeMap::new();
    for r in rs {
        by_dtype.entry(r.dtype.as_str()).or_default().push(r);
    }
    if by_dtype.len() > 1 {
        for (dtype, drs) in by_dtype {
            let key = format!("{op}.{dtype}");
            let fit = fit_op(op, &drs).and_then(|f| finite_fit(&key, f));
            insert_fit(fits, key, fit);
        }
    }
}

/// Files a fit under `key`: among the fits, or with its error among the skipped.
fn insert_fit(fits: &mut OpFits, key: String, fit: Result<OpFit>) {
    match fit {
        Ok(f) => {
            fits.ops.insert(key, f);
        }
        Err(e) => {
            fits.skipped.insert(key, e.to_string());
        }
    }
}

/// `f`, unless one of its values is not a finite number (a fitted coefficient of 0
/// reads as an infinite rate: the measurements do not show that term, often because
/// their shapes do not vary it), which a profile cannot hold.
fn finite_fit(op: &str, f: OpFit) -> Result<OpFit> {
    let bad = non_finite_values(&f);
    if bad.is_empty() {
        Ok(f)
    } else {
        Err(CalibrationError::NonFinite {
            op: op.into(),
            what: format!(
                "fitted value ({}): the measurements do not determine it",
                bad.join(", ")
            ),
        })
    }
}

/// `name = value` of every value of a fit that is not a finite number.
fn non_finite_values(f: &OpFit) -> Vec<String> {
    [("r2", f.r2), ("mape", f.mape), ("loo_mape", f.loo_mape)]
        .into_iter()
        .chain(f.params.iter().map(|(k, v)| (k.as_str(), *v)))
        .filter(|(_, v)| !v.is_finite())
        .map(|(k, v)| format!("{k} = {v}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_764_403_199), "2025-11-29T07:59:59Z");
    }
}
