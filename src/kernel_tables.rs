//! `twin calibrate --from-tables DIR`: a kernel-table profile fitted to measured per-op
//! tables (AIConfigurator's layout, parquet or CSV) for one GPU, engine and version,
//! with its held-out errors per op family.

use crate::scenario::load_hardware;
use anyhow::{bail, Context, Result};
use calibration::tables::{self, Options, Selection};
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
    /// With --from-tables: where the rows come from, for the profile's provenance
    /// (default: AIConfigurator at the commit the shipped profiles use).
    #[arg(long, requires = "from_tables", default_value = AIC_COMMIT)]
    pub commit: String,
}

/// twin's hardware for a tables' system name.
pub fn hardware_of(system: &str) -> Option<&'static str> {
    Some(match system {
        "h100_sxm" => "h100",
        "h200_sxm" => "h200",
        "b200_sxm" => "b200",
        "b300_sxm" => "b300",
        "gb200" => "gb200",
        "gb300" => "gb300",
        "a100_sxm" => "a100",
        _ => return None,
    })
}

pub fn run(dir: &Path, a: &TablesArgs, out: Option<&Path>, json: bool) -> Result<()> {
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
    let sel = Selection {
        system,
        engine: a.engine.clone(),
        version,
    };
    let read = tables::read(dir, &sel).with_context(|| format!("reading {}", dir.display()))?;
    if read.rows.is_empty() {
        bail!(
            "{}: no rows twin can price in the {} {} tables",
            dir.display(),
            sel.engine,
            sel.version
        );
    }
    let hw_name = match (&a.hardware, hardware_of(&sel.system)) {
        (Some(h), _) => h.clone(),
        (None, Some(h)) => h.to_string(),
        (None, None) => bail!(
            "--from-tables: no twin hardware is named like {:?}; give --tables-hardware",
            sel.system
        ),
    };
    let hw = load_hardware(&hw_name, &[])?;
    let license = std::fs::read_to_string(dir.join("LICENSE"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "unknown (no LICENSE beside the tables)".to_string());
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
    if let Some(out) = out {
        let text = toml::to_string(&prof)?;
        let bytes = if out.extension().is_some_and(|e| e == "gz") {
            use std::io::Write;
            let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            z.write_all(text.as_bytes())?;
            z.finish()?
        } else {
            text.into_bytes()
        };
        crate::report::write_atomic(out, &bytes)?;
        eprintln!("wrote {} ({} KB)", out.display(), bytes.len() / 1024);
    }
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
