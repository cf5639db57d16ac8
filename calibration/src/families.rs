//! Fit families, one per measured op. Each documents its model; all coefficients are
//! nonnegative and fitted by relative-error least squares (see [`crate::fit`]).
//!
//! | op | model | parameters |
//! |----|-------|------------|
//! | `moe_decode` | `t = fixed + bytes/BW + flops/F` | `fixed_s`, `bandwidth_bytes_per_s`, `flops_per_s` |
//! | `grouped_gemm` | `t = fixed + flops/F` | `fixed_s`, `flops_per_s` |
//! | `attn_dense`, `attn_sparse`, `attn_window` | `t = fixed + bytes/BW` | `fixed_s`, `bandwidth_bytes_per_s` |
//! | `indexer` | `t = fixed + c·positions` (positions summed over the batch) | `fixed_s`, `per_position_s`, derived `bandwidth_bytes_per_s` |
//! | `gather` | `t = n·(t_access + p_miss·t_walk)`, `p_miss = max(0, 1 - reach/table_bytes)`, `reach = tlb_entries·page` | `t_access_s`, `t_walk_s`, `tlb_entries`, `bytes_per_row`, `max_table_bytes`, `max_table_page_bytes` |
//! | `copy` | `t = fixed + bytes/BW` | `fixed_s`, `bandwidth_bytes_per_s` |
//!
//! A rate whose coefficient fits to zero (the term explains nothing) is reported as
//! infinite (`inf` in TOML) and not used to replace cost-model efficiencies.

use crate::error::{CalibrationError, Result};
use crate::fit::{fit_linear, LinearFit};
use crate::log::MeasurementRecord;
use serde::{Deserialize, Serialize};
use spec::stats::median;
use std::collections::BTreeMap;

/// The fitted parameters of one op and how well they fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpFit {
    pub model: String,
    pub points: usize,
    pub r2: f64,
    pub mape: f64,
    pub loo_mape: f64,
    pub params: BTreeMap<String, f64>,
}

impl OpFit {
    pub fn param(&self, name: &str) -> Option<f64> {
        self.params.get(name).copied()
    }
}

/// Ops with a fit family: the calibration ops of the engine's registry.
pub fn fitted_ops() -> Vec<&'static str> {
    engine::op::op_names(engine::OpRole::Calibration)
}

/// Candidate TLB reach, in entries (powers of two from 16 to 1 Mi).
const TLB_ENTRY_CANDIDATES: std::ops::RangeInclusive<u32> = 4..=20;

fn rate(coef: f64) -> f64 {
    if coef > 0.0 {
        1.0 / coef
    } else {
        f64::INFINITY
    }
}

fn check_times(op: &str, rows: &[&MeasurementRecord]) -> Result<Vec<f64>> {
    let t: Vec<f64> = rows.iter().map(|r| r.median_s).collect();
    if let Some(r) = rows
        .iter()
        .find(|r| !(r.median_s.is_finite() && r.median_s > 0.0))
    {
        return Err(CalibrationError::NonFinite {
            op: op.into(),
            what: format!("median_s = {} at shape {}", r.median_s, r.shape),
        });
    }
    if t.iter().all(|&v| v == t[0]) {
        return Err(CalibrationError::ConstantData {
            op: op.into(),
            what: "median_s".into(),
        });
    }
    Ok(t)
}

/// Runs a linear family: checks point count, finiteness and that every non-intercept
/// feature varies.
fn linear(
    op: &str,
    rows: &[&MeasurementRecord],
    names: &[&str],
    features: impl Fn(&MeasurementRecord) -> Result<Vec<f64>>,
) -> Result<(LinearFit, Vec<Vec<f64>>)> {
    let need = names.len() + 1;
    if rows.len() < need {
        return Err(CalibrationError::TooFewPoints {
            op: op.into(),
            need,
            got: rows.len(),
        });
    }
    let t = check_times(op, rows)?;
    let x: Vec<Vec<f64>> = rows.iter().map(|r| features(r)).collect::<Result<_>>()?;
    for (j, name) in names.iter().enumerate() {
        let col: Vec<f64> = x.iter().map(|r| r[j]).collect();
        if col.iter().any(|v| !v.is_finite()) {
            return Err(CalibrationError::NonFinite {
                op: op.into(),
                what: (*name).into(),
            });
        }
        if *name != "fixed" && col.iter().all(|&v| v == col[0]) {
            return Err(CalibrationError::ConstantData {
                op: op.into(),
                what: (*name).into(),
            });
        }
    }
    let f = fit_linear(&x, &t).ok_or_else(|| CalibrationError::Degenerate {
        op: op.into(),
        what: "no nonnegative least-squares solution".into(),
    })?;
    Ok((f, x))
}

fn op_fit(model: &str, rows: usize, f: &LinearFit, params: &[(&str, f64)]) -> OpFit {
    OpFit {
        model: model.into(),
        points: rows,
        r2: f.r2,
        mape: f.mape,
        loo_mape: f.loo_mape,
        params: params.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    }
}

/// Fits the family of `op` to its rows.
pub fn fit_op(op: &str, rows: &[&MeasurementRecord]) -> Result<OpFit> {
    match op {
        "moe_decode" => fit_moe_decode(op, rows),
        "grouped_gemm" => fit_grouped_gemm(op, rows),
        "attn_dense" | "attn_sparse" | "attn_window" | "copy" => fit_bandwidth(op, rows),
        "indexer" => fit_indexer(op, rows),
        "gather" => fit_gather(rows),
        other => Err(CalibrationError::Degenerate {
            op: other.into(),
            what: "no fit family for this op".into(),
        }),
    }
}

/// Fits a fixed cost, a bandwidth and a flop rate (`moe_decode`).
fn fit_moe_decode(op: &str, rows: &[&MeasurementRecord]) -> Result<OpFit> {
    let (f, _) = linear(op, rows, &["fixed", "bytes", "flops"], |r| {
        Ok(vec![1.0, r.bytes as f64, r.flops as f64])
    })?;
    Ok(op_fit(
        "t = fixed_s + bytes / bandwidth_bytes_per_s + flops / flops_per_s",
        rows.len(),
        &f,
        &[
            ("fixed_s", f.beta[0]),
            ("bandwidth_bytes_per_s", rate(f.beta[1])),
            ("flops_per_s", rate(f.beta[2])),
        ],
    ))
}

/// Fits a fixed cost and a flop rate (`grouped_gemm`).
fn fit_grouped_gemm(op: &str, rows: &[&MeasurementRecord]) -> Result<OpFit> {
    let (f, _) = linear(op, rows, &["fixed", "flops"], |r| {
        Ok(vec![1.0, r.flops as f64])
    })?;
    Ok(op_fit(
        "t = fixed_s + flops / flops_per_s",
        rows.len(),
        &f,
        &[("fixed_s", f.beta[0]), ("flops_per_s", rate(f.beta[1]))],
    ))
}

/// Fits a fixed cost and a bandwidth (attention and `copy`).
fn fit_bandwidth(op: &str, rows: &[&MeasurementRecord]) -> Result<OpFit> {
    let (f, _) = linear(op, rows, &["fixed", "bytes"], |r| {
        Ok(vec![1.0, r.bytes as f64])
    })?;
    Ok(op_fit(
        "t = fixed_s + bytes / bandwidth_bytes_per_s",
        rows.len(),
        &f,
        &[
            ("fixed_s", f.beta[0]),
            ("bandwidth_bytes_per_s", rate(f.beta[1])),
        ],
    ))
}

/// Fits a fixed cost and a time per position, and the bandwidth they imply (`indexer`).
fn fit_indexer(op: &str, rows: &[&MeasurementRecord]) -> Result<OpFit> {
    let positions = |r: &MeasurementRecord| -> Result<f64> {
        Ok((r.shape_u64("batch")? * r.shape_u64("positions")?) as f64)
    };
    let (f, x) = linear(op, rows, &["fixed", "positions"], |r| {
        Ok(vec![1.0, positions(r)?])
    })?;
    let bytes_per_pos = median(
        &rows
            .iter()
            .zip(&x)
            .map(|(r, xi)| r.bytes as f64 / xi[1])
            .collect::<Vec<f64>>(),
    );
    Ok(op_fit(
        "t = fixed_s + per_position_s * positions; bandwidth_bytes_per_s = bytes_per_position / per_position_s",
        rows.len(),
        &f,
        &[
            ("fixed_s", f.beta[0]),
            ("per_position_s", f.beta[1]),
            ("bytes_per_position", bytes_per_pos),
            ("bandwidth_bytes_per_s", if f.beta[1] > 0.0 { bytes_per_pos / f.beta[1] } else { f64::INFINITY }),
        ],
    ))
}

/// The page size a gather actually ran with: a 2 MiB request whose table was mostly
/// not backed by huge pages (THP off or refused) counts as 4 KiB.
pub fn effective_page(r: &MeasurementRecord) -> Result<f64> {
    let page = r.shape_u64("page")?;
    let huge_pct = r.note_value("huge_pct").and_then(|v| v.parse::<u64>().ok());
    Ok(match huge_pct {
        Some(p) if page > 4096 && p < 50 => 4096.0,
        _ => page as f64,
    })
}

/// The TLB reach (entries) whose gather fit has the least objective, with that fit;
/// `facts` are each row's (rows, table bytes, page bytes), `t` its time.
fn best_tlb_fit(facts: &[(f64, f64, f64)], t: &[f64]) -> Option<(f64, LinearFit)> {
    let mut best: Option<(f64, LinearFit)> = None;
    for e in TLB_ENTRY_CANDIDATES {
        let entries = (1u64 << e) as f64;
        let x: Vec<Vec<f64>> = facts
            .iter()
            .map(|&(n, table, page)| vec![n, n * (1.0 - entries * page / table).max(0.0)])
            .collect();
        let fit = if x.iter().all(|r| r[1] == 0.0) {
            // Every table within reach: only the access term is identifiable.
            let x1: Vec<Vec<f64>> = x.iter().map(|r| vec![r[0]]).collect();
            fit_linear(&x1, t).map(|mut f| {
                f.beta.push(0.0);
                f
            })
        } else {
            fit_linear(&x, t)
        };
        if let Some(f) = fit {
            if best.as_ref().is_none_or(|(_, b)| f.objective < b.objective) {
                best = Some((entries, f));
            }
        }
    }
    best
}

fn fit_gather(rows: &[&MeasurementRecord]) -> Result<OpFit> {
    let op = "gather";
    if rows.len() < 3 {
        return Err(CalibrationError::TooFewPoints {
            op: op.into(),
            need: 3,
            got: rows.len(),
        });
    }
    let t = check_times(op, rows)?;
    let mut facts = Vec::with_capacity(rows.len());
    for r in rows {
        facts.push((
            r.shape_u64("rows")? as f64,
            r.shape_u64("table_bytes")? as f64,
            effective_page(r)?,
        ));
    }
    if facts.iter().all(|f| f.1 == facts[0].1 && f.2 == facts[0].2) {
        return Err(CalibrationError::ConstantData {
            op: op.into(),
            what: "table_bytes and page".into(),
        });
    }
    let (entries, f) = best_tlb_fit(&facts, &t).ok_or_else(|| CalibrationError::Degenerate {
        op: op.into(),
        what: "no solvable TLB reach".into(),
    })?;
    let bytes_per_row = median(
        &rows
            .iter()
            .map(|r| r.bytes as f64 / r.shape_u64("rows").unwrap_or(1).max(1) as f64)
            .collect::<Vec<f64>>(),
    );
    // The largest table measured and, for it, the largest page it ran with: the regime
    // an Engram-sized table is priced in (see `Profile::cost_params`).
    let max_table = facts.iter().map(|f| f.1).fold(0.0, f64::max);
    let max_page = facts
        .iter()
        .filter(|f| f.1 == max_table)
        .map(|f| f.2)
        .fold(0.0, f64::max);
    Ok(op_fit(
        "t = rows * (t_access_s + p_miss * t_walk_s); p_miss = max(0, 1 - tlb_entries * page / table_bytes)",
        rows.len(),
        &f,
        &[
            ("t_access_s", f.beta[0]),
            ("t_walk_s", f.beta[1]),
            ("tlb_entries", entries),
            ("bytes_per_row", bytes_per_row),
            ("max_table_bytes", max_table),
            ("max_table_page_bytes", max_page),
        ],
    ))
}
