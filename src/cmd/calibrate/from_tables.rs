//! `twin calibrate --from-tables DIR`: a kernel-table profile fitted to measured per-op
//! tables (AIConfigurator's layout, parquet or CSV) for one GPU, engine and version,
//! with its held-out errors per op family.

use anyhow::{bail, Context, Result};
use calibration::tables::{self, Options, Selection};
use scenario::load_hardware;
use sim::cost::tables::{KernelTables, TableSource};
use std::path::Path;

/// The repository and commit the shipped profiles were fitted at.
pub const AIC_REPOSITORY: &str = "github.com/ai-dynamo/aiconfigurator";
pub const AIC_COMMIT: &str = "095f58a51c4ca8e61b66ec108d86f223f8d559ce";

#[derive(clap::Args, Debug, Clone)]
pub struct TablesArgs {
    /// Instead of measuring: fit a kernel-table profile to measured per-op tables in
    /// AIConfigurator's layout (`DIR/<system>/<family>/<engine>/<version>/*.parquet` or
    /// `.csv`); prints the held-out errors per op family, and with --out writes the
    /// profile (TOML).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["device", "ops", "quick", "smoke", "model", "cores", "from_trace"])]
    pub from_tables: Option<std::path::PathBuf>,
    /// With --from-tables: the tables' system name (h100_sxm, h200_sxm, b200_sxm,
    /// gb200, gb300, ...).
    #[arg(long, requires = "from_tables")]
    pub system: Option<String>,
    /// With --from-tables: the serving engine whose tables to read (trtllm, vllm,
    /// sglang).
    #[arg(long, requires = "from_tables", default_value = "trtllm")]
    pub engine: String,
    /// With --from-tables: the engine's version (a folder name of the tables).
    #[arg(long, requires = "from_tables")]
    pub engine_version: Option<String>,
    /// With --from-tables: twin's hardware the physics prices on (default: the one
    /// named like the system).
    #[arg(long = "tables-hardware", requires = "from_tables")]
    pub hardware: Option<String>,
    /// With --from-tables: append held-out rows of the keys `--engine` prices with (dense
    /// GEMMs by format, the all-reduce) to FILE as `twin validate` check rows (a
    /// published table's CSV; its header is written when FILE is new).
    #[arg(long, value_name = "FILE", requires = "from_tables")]
    pub check_table: Option<std::path::PathBuf>,
    /// With --from-tables: where the rows come from, for the profile's provenance
    /// (default: AIConfigurator at the commit the shipped profiles use).
    #[arg(long, requires = "from_tables", default_value = AIC_COMMIT)]
    pub commit: String,
}

pub fn run(
    dir: &Path,
    a: &TablesArgs,
    out: Option<&Path>,
    json: bool,
    base: Option<&str>,
) -> Result<()> {
    let sel = selection(dir, a)?;
    let read = tables::read(dir, &sel).with_context(|| format!("reading {}", dir.display()))?;
    if read.rows.is_empty() {
        bail!(
            "{}: no rows twin can price in the {} {} tables",
            dir.display(),
            sel.engine,
            sel.version
        );
    }
    let hw_name = hardware_name(a, &sel)?;
    let hw = load_hardware(&hw_name, &[])?;
    let license = license_line(dir);
    let source = TableSource {
        repository: AIC_REPOSITORY.to_string(),
        commit: a.commit.clone(),
        license,
        files: read.files.clone(),
    };
    let mut prof = tables::fit(&hw, &sel, &read, source, &Options::default());
    prof.fitted = format!(
        "{} by twin {}",
        calibration::profile::utc_now(),
        env!("CARGO_PKG_VERSION")
    );
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary_json(&prof, &read.skipped))?
        );
    } else {
        print!("{}", render(&prof, &read.skipped));
    }
    if let Some(file) = &a.check_table {
        append_checks(file, &prof, &read)?;
    }
    if let Some(b) = base {
        prof = super::tables_out::layered(&hw, prof, b)?;
        if let Some(l) = &prof.base {
            eprintln!(
                "laid over {}: what these tables do not fit is priced by those",
                l.tables
            );
        }
    }
    if let Some(out) = out {
        write_profile(out, &prof)?;
    }
    Ok(())
}

/// The tables to read, from --system, --engine and --engine-version (both required).
fn selection(dir: &Path, a: &TablesArgs) -> Result<Selection> {
    let Some(system) = a.system.clone() else {
        bail!(
            "--from-tables needs --system (a folder of {}: e.g. h100_sxm)",
            dir.display()
        );
    };
    let Some(version) = a.engine_version.clone() else {
        bail!(
            "--from-tables needs --engine-version (a folder of {}/{system}/gemm/{}/)",
            dir.display(),
            a.engine
        );
    };
    Ok(Selection {
        system,
        engine: a.engine.clone(),
        version,
    })
}

/// The twin hardware to price on: --tables-hardware, else the one named like the system.
fn hardware_name(a: &TablesArgs, sel: &Selection) -> Result<String> {
    Ok(match (&a.hardware, corpus::aic::hardware_of(&sel.system)) {
        (Some(h), _) => h.clone(),
        (None, Some(h)) => h.to_string(),
        (None, None) => bail!(
            "--from-tables: no twin hardware is named like {:?}; give --tables-hardware",
            sel.system
        ),
    })
}

/// The first non-blank line of the LICENSE beside the tables, or a note that there is none.
fn license_line(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("LICENSE"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "unknown (no LICENSE beside the tables)".to_string())
}

/// Writes the profile as TOML (gzipped when the path ends in .gz) and says so on stderr.
fn write_profile(out: &Path, prof: &KernelTables) -> Result<()> {
    let text = toml::to_string(prof)?;
    let bytes = if out.extension().is_some_and(|e| e == "gz") {
        use std::io::Write;
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(text.as_bytes())?;
        z.finish()?
    } else {
        text.into_bytes()
    };
    report::write_atomic(out, &bytes)?;
    eprintln!("wrote {} ({} KB)", out.display(), bytes.len() / 1024);
    Ok(())
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The report: per family, held-out errors physics alone and corrected; per key below.
pub fn render(p: &KernelTables, skipped: &std::collections::BTreeMap<String, usize>) -> String {
    let mut s = format!(
        "kernel tables: {} ({}), {} {}; {} keys from {} files of {}@{}\n",
        p.system,
        p.hardware,
        p.engine,
        p.version,
        p.fits.len(),
        p.source.files.len(),
        p.source.repository,
        &p.source.commit[..p.source.commit.len().min(12)]
    );
    s += "held out every fifth distinct shape; error = |predicted / measured - 1|\n";
    s += &format!(
        "{:<18} {:>8} {:>15} {:>15} {:>15} {:>15}\n",
        "family", "checked", "physics median", "physics <=20%", "fitted median", "fitted <=20%"
    );
    for c in &p.checks {
        s += &format!(
            "{:<18} {:>8} {:>15} {:>15} {:>15} {:>15}\n",
            c.family.name(),
            c.fitted.rows,
            pct(c.physics.median),
            pct(c.physics.within_20),
            pct(c.fitted.median),
            pct(c.fitted.within_20)
        );
    }
    for f in &p.fits {
        let loo = f
            .leave_one_out
            .map(|l| format!(", leave-one-out {}", pct(l.median)))
            .unwrap_or_default();
        s += &format!(
            "  {} [{}]: fit {} rows, check {} rows: physics {}, fitted {} ({} within 20%){loo}\n",
            f.family.name(),
            f.key,
            f.fit.rows,
            f.check.rows,
            pct(f.check_physics.median),
            pct(f.check.median),
            pct(f.check.within_20)
        );
    }
    for (why, n) in skipped {
        s += &format!("not priced: {n} rows ({why})\n");
    }
    s
}

fn summary_json(
    p: &KernelTables,
    skipped: &std::collections::BTreeMap<String, usize>,
) -> serde_json::Value {
    serde_json::json!({
        "system": p.system,
        "hardware": p.hardware,
        "engine": p.engine,
        "version": p.version,
        "source": p.source,
        "checks": p.checks,
        "keys": p.fits.iter().map(|f| serde_json::json!({
            "family": f.family, "key": f.key, "params": f.params,
            "fit": f.fit, "fit_physics": f.fit_physics,
            "check": f.check, "check_physics": f.check_physics,
            "leave_one_out": f.leave_one_out,
        })).collect::<Vec<_>>(),
        "skipped": skipped,
    })
}

/// Held-out rows per key this many, evenly spaced.
const CHECKS_PER_KEY: usize = 6;

/// The header of a check table `--check-table` starts.
const CHECK_HEADER: &str = "\
# Measured per-op latencies from AIConfigurator's tables (github ai-dynamo/aiconfigurator,
# Apache-2.0), held out of the shipped kernel-table profiles' fits (every fifth distinct
# shape of each key; scripts/fit-kernel-tables.sh writes this file), each with the `twin
# kernel` command that prices the same op with `--engine`: dense GEMMs by format (bf16;
# fp8 = FP8 with block scales; fp4 = NVFP4) and the engine's all-reduce (`--bytes` the
# buffer: the tables' elements x 2). Check rows only; nothing is fitted to them here.
id,figure,metric,published,unit,role,command,baseline,source
";

fn append_checks(file: &Path, p: &KernelTables, read: &tables::Read) -> Result<()> {
    use sim::cost::tables::family::Shape;
    use sim::cost::tables::format::Format;
    let groups = tables::fit::groups(read);
    let mut lines = String::new();
    let engine = format!("{}@{}", p.engine, p.version);
    let src = format!(
        "\"{} at {}, {}\"",
        p.source.repository,
        &p.source.commit[..12],
        p.system
    );
    for (fmt, dtype) in [
        (Format::Bf16, "bf16"),
        (Format::Fp8Block, "fp8"),
        (Format::Nvfp4, "fp4"),
    ] {
        let Some(fit) = p.gemm_fit(fmt) else { continue };
        let Some(rows) = groups.get(&(fit.family, fit.key.clone())) else {
            continue;
        };
        let (check, _) = tables::fit::split(rows, 5);
        for m in spaced(&check) {
            let Shape::Gemm { m: mm, n, k, .. } = m.shape else {
                continue;
            };
            lines += &format!(
                "tables-{}-{}-gemm-{dtype}-m{mm}-n{n}-k{k},\"{} {} GEMM M={mm} N={n} K={k} ({})\",time_us,{:.4},us,check,twin kernel gemm --hardware {} --m {mm} --n {n} --k {k} --dtype {dtype} --engine {engine},,{src}\n",
                p.hardware, p.engine, p.engine, fmt.name(), fit.key, m.seconds * 1e6, p.hardware
            );
        }
    }
    for gpus in [2.0, 4.0, 8.0, 16.0, 36.0, 72.0] {
        let Some(fit) = p.allreduce_fit(gpus) else {
            continue;
        };
        let Some(rows) = groups.get(&(fit.family, fit.key.clone())) else {
            continue;
        };
        let (check, _) = tables::fit::split(rows, 5);
        for m in spaced(&check) {
            let Shape::Collective { bytes, .. } = m.shape else {
                continue;
            };
            lines += &format!(
                "tables-{}-{}-allreduce-x{gpus}-{bytes},\"{} all-reduce of {bytes} B over {gpus} GPUs ({})\",time_us,{:.4},us,check,twin kernel allreduce --hardware {} --gpus {gpus} --bytes {bytes} --engine {engine},,{src}\n",
                p.hardware, p.engine, p.engine, fit.key, m.seconds * 1e6, p.hardware
            );
        }
    }
    let mut text = std::fs::read_to_string(file).unwrap_or_else(|_| CHECK_HEADER.to_string());
    text += &lines;
    report::write_atomic(file, text.as_bytes())?;
    eprintln!(
        "appended {} check rows to {}",
        lines.lines().count(),
        file.display()
    );
    Ok(())
}

/// At most [`CHECKS_PER_KEY`] of `rows`, evenly spaced.
fn spaced<'a>(rows: &[&'a tables::Measured]) -> Vec<&'a tables::Measured> {
    let step = rows.len().div_ceil(CHECKS_PER_KEY).max(1);
    rows.iter().step_by(step).copied().collect()
}
