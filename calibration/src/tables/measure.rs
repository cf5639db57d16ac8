//! Kernel tables measured through production libraries on this machine's GPU (`twin
//! calibrate --tables-out DIR`), in the layout of the shipped ones.
//!
//! The shapes are the model's dense weight GEMMs (`AnalyticCostModel::
//! dense_gemm_shapes`: attention projections, router, shared experts, dense FFNs, LM
//! head, unsplit) at every token count of the grid, in BF16 and FP8 ([`gemm_plan`]).
//! The engine times them ([`engine::library`]: cuBLASLt on CUDA; [`time_plan`]); they
//! are written as AIConfigurator-layout CSV under `DIR/<system>/gemm/measured/<date>/`
//! ([`super::write`]), read back by the reader the shipped profiles are fitted from,
//! fitted ([`super::fit`]) and saved as `DIR/kernel-tables.toml` ([`write_and_fit`]),
//! which `--engine DIR` loads. What is not measured (block scales, attention, routed
//! experts, collectives) is said ([`not_measured`]), and priced by twin's kernel model
//! or the tables laid under ([`lay_over`]).

use super::{Measured, Options, Selection};
use crate::error::{CalibrationError, Result};
use engine::library::{LibraryFormat, LibraryGemm, LibraryTimer, NOT_MEASURED};
use engine::{Device, DeviceInfo, TimingConfig};
use sim::cost::tables::family::Shape;
use sim::cost::tables::format::Format;
use sim::cost::tables::{KernelTables, TableSource};
use sim::cost::{AnalyticCostModel, CostParams, Layout};
use spec::hardware::Hardware;
use spec::model::Model;
use std::path::Path;

/// The profile `--tables-out DIR` writes and `--engine DIR` reads.
pub const PROFILE: &str = "kernel-tables.toml";

/// The engine name of measured tables.
pub const ENGINE: &str = "measured";

/// Token counts per GEMM timed by default: powers of two from 1 to 16,384 (decode
/// batches to prefill chunks).
pub const DEFAULT_BATCHES: &[usize] = &[
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
];

/// Most token counts one run times.
pub const MAX_BATCHES: usize = 64;

/// One measured GEMM against a shipped table's price: (format, m, n, k, measured s,
/// shipped s, the shipped format that priced it).
pub type Compared = (Format, f64, f64, f64, f64, f64, Format);

/// Each measured GEMM of `rows` against `shipped`'s price of the same shape (its fit
/// of the format, else of the nearest format it has).
pub fn compare(hw: &Hardware, shipped: &KernelTables, rows: &[Measured]) -> Vec<Compared> {
    rows.iter()
        .filter_map(|m| {
            let Shape::Gemm {
                format,
                m: mm,
                n,
                k,
                ..
            } = m.shape
            else {
                return None;
            };
            let (fit, by) = shipped.gemm_fit_for(format)?;
            let shape = Shape::Gemm {
                kernel: String::new(),
                format: by,
                m: mm,
                n,
                k,
            };
            Some((format, mm, n, k, m.seconds, fit.price(hw, &shape), by))
        })
        .collect()
}

/// The comparison's lines: per format, the shapes compared and the median of
/// measured / shipped and of |measured / shipped - 1|.
pub fn compare_summary(engine: &str, c: &[Compared]) -> String {
    let mut s = String::new();
    for f in [Format::Bf16, Format::Fp8] {
        let r: Vec<f64> = c.iter().filter(|x| x.0 == f).map(|x| x.4 / x.5).collect();
        if r.is_empty() {
            continue;
        }
        let by = c.iter().find(|x| x.0 == f).map_or(f, |x| x.6);
        let dev: Vec<f64> = r.iter().map(|x| (x - 1.0).abs()).collect();
        s += &format!(
            "  {engine} {} GEMMs{}: {} shapes, measured / shipped median {:.3}, median |measured / shipped - 1| {:.1}% (goal <= 15%)\n",
            f.name(),
            if by == f { String::new() } else { format!(" (against its {} fit)", by.name()) },
            r.len(),
            spec::stats::median(&r),
            100.0 * spec::stats::median(&dev)
        );
    }
    s
}

/// The comparison shape by shape, as `compare-ENGINE.csv`'s text.
pub fn compare_csv(c: &[Compared]) -> String {
    let mut csv = String::from("format,m,n,k,measured_us,shipped_us,shipped_format,ratio\n");
    for x in c {
        csv += &format!(
            "{},{},{},{},{:.3},{:.3},{},{:.4}\n",
            x.0.name(),
            x.1,
            x.2,
            x.3,
            x.4 * 1e6,
            x.5 * 1e6,
            x.6.name(),
            x.4 / x.5
        );
    }
    csv
}

/// The GEMMs to time: each dense weight GEMM of `model` (unsplit) at each of
/// `batches`, in each library format, sorted and without repeats.
pub fn gemm_plan(hw: &Hardware, model: &Model, batches: &[usize]) -> Vec<LibraryGemm> {
    let cm = AnalyticCostModel::new(
        hw.clone(),
        model.clone(),
        Layout::new(1),
        CostParams::default(),
    );
    let mut out = Vec::new();
    for (n, k, _, _) in cm.dense_gemm_shapes() {
        for &m in batches {
            for format in LibraryFormat::ALL {
                out.push(LibraryGemm {
                    format,
                    m,
                    n: n.round() as usize,
                    k: k.round() as usize,
                });
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// A measured GEMM as a table row.
pub fn gemm_row(g: &LibraryGemm, kernel: &str, seconds: f64) -> Measured {
    let format = match g.format {
        LibraryFormat::Bf16 => Format::Bf16,
        LibraryFormat::Fp8 => Format::Fp8,
    };
    Measured {
        shape: Shape::Gemm {
            kernel: kernel.to_string(),
            format,
            m: g.m as f64,
            n: g.n as f64,
            k: g.k as f64,
        },
        seconds,
    }
}

/// The tables' system name of twin's hardware (`h200` -> `h200_sxm`, as AIConfigurator
/// names its systems; others by their own name).
pub fn system_of(hardware: &str) -> String {
    match hardware {
        "h100" | "h200" | "b200" | "b300" | "a100" => format!("{hardware}_sxm"),
        h => h.to_string(),
    }
}

/// Writes `rows` under `dir` as the tables of `sel`, reads them back through the
/// reader, fits them and writes the profile to `dir/kernel-tables.toml`; returns the
/// profile as written (the text form keeps the correction grid to three decimals of
/// its logarithm, so this, not the fit in memory, is what `--engine DIR` prices with).
pub fn write_and_fit(
    dir: &Path,
    hw: &Hardware,
    sel: &Selection,
    device: &str,
    rows: &[Measured],
) -> Result<KernelTables> {
    let failed = |what: &str, e: CalibrationError| {
        CalibrationError::MeasuredTables(format!("{what} {}: {e}", dir.display()))
    };
    super::write(dir, sel, device, rows).map_err(|e| failed("writing tables under", e))?;
    let read = super::read(dir, sel).map_err(|e| failed("reading", e))?;
    if read.rows.len() != rows.len() {
        return Err(CalibrationError::MeasuredTables(format!(
            "{}: wrote {} rows, read back {} ({:?}): the writer and the reader disagree",
            dir.display(),
            rows.len(),
            read.rows.len(),
            read.skipped
        )));
    }
    let source = TableSource {
        repository: format!("measured on {device}"),
        commit: sel.version.clone(),
        license: "measured by twin calibrate --tables-out".into(),
        files: read.files.clone(),
    };
    let mut prof = super::fit(hw, sel, &read, source, &Options::default());
    prof.fitted = format!(
        "{} by twin {}",
        crate::profile::utc_now(),
        env!("CARGO_PKG_VERSION")
    );
    save(dir, &prof)
}

/// Writes `prof` as `dir`'s profile and returns it as read back (the text form keeps the
/// correction grid to three decimals of its logarithm: what `--engine DIR` prices with).
pub fn save(dir: &Path, prof: &KernelTables) -> Result<KernelTables> {
    let text =
        toml::to_string(prof).map_err(|e| CalibrationError::MeasuredTables(e.to_string()))?;
    write_atomic(&dir.join(PROFILE), text.as_bytes())?;
    let written: KernelTables =
        toml::from_str(&text).map_err(|e| CalibrationError::MeasuredTables(e.to_string()))?;
    written.check().map_err(|e| {
        CalibrationError::MeasuredTables(format!("{}: {e}", dir.join(PROFILE).display()))
    })?;
    Ok(written)
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    let failed = |at: &Path, e: std::io::Error| {
        CalibrationError::MeasuredTables(format!("cannot write {}: {e}", at.display()))
    };
    std::fs::write(&tmp, bytes).map_err(|e| failed(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| failed(path, e))
}

/// `--base ENGINE`: `prof` laid over `base` (the engine's shipped tables of the same
/// GPU), written over `dir`'s profile (the measured rows stay under `dir` for a refit);
/// returns it as written.
pub fn lay_over(dir: &Path, prof: KernelTables, base: &KernelTables) -> Result<KernelTables> {
    save(dir, &prof.layered_over(base))
}

/// What `--tables-out` did not measure and what prices it instead: twin's kernel model,
/// or the base tables of `--base`.
pub fn not_measured(base: Option<&sim::cost::tables::Base>) -> String {
    let comm = "NCCL collectives are not wired yet; with one GPU there is nothing to measure";
    match base {
        None => {
            let mut s = String::from(
                "not measured (priced by twin's kernel model, or the nearest measured format):\n",
            );
            for line in NOT_MEASURED {
                s += &format!("  {line}\n");
            }
            s + &format!("communication: not measured ({comm}); all-reduce and all-to-all are priced by twin's kernel model\n")
        }
        Some(b) => {
            let what: Vec<&str> = NOT_MEASURED
                .iter()
                .map(|l| l.split(':').next().unwrap_or(l))
                .chain(["communication"])
                .collect();
            format!(
                "not measured: {}\nlaid over {}: {} GEMMs by the measurements, everything else by those tables (twin's kernel model where they have no fit)\n",
                what.join("; "),
                b.tables,
                b.measured_gemms.join(" and ")
            )
        }
    }
}

/// What is about to be timed, and on which device (the lines `--tables-out` says on
/// stderr before timing).
pub fn announcement(
    device: Device,
    info: &DeviceInfo,
    plan: &[LibraryGemm],
    model: &Model,
    batches: &[usize],
) -> String {
    let mut s = String::new();
    if device == Device::Cpu {
        s += "calibrate --tables-out: on the CPU every GEMM runs twin's f32 reference GEMM: the pipeline, not a production library\n";
    }
    s + &format!(
        "calibrate --tables-out: {} ({}), {} GEMMs of {} ({} shapes x {} token counts x BF16, FP8)\n",
        info.device,
        info.driver,
        plan.len(),
        model.name,
        plan.len() / batches.len().max(1) / LibraryFormat::ALL.len(),
        batches.len()
    )
}

/// Times every GEMM of the plan into a measured row; one that fails is skipped, and
/// `warn` is told of it as it happens.
pub fn time_plan(
    timer: &mut LibraryTimer,
    plan: &[LibraryGemm],
    timing: &TimingConfig,
    mut warn: impl FnMut(&str),
) -> Vec<Measured> {
    let mut rows = Vec::new();
    for g in plan {
        match timer.time_gemm(g, timing) {
            Ok(s) => rows.push(gemm_row(g, &timer.gemm_library(g.format), s.median_s)),
            Err(e) => warn(&format!(
                "warning: {:?} M={} N={} K={}: {e}",
                g.format, g.m, g.n, g.k
            )),
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systems_are_named_as_aiconfigurator_names_them() {
        assert_eq!(system_of("h200"), "h200_sxm");
        assert_eq!(system_of("gb300"), "gb300");
    }
}
