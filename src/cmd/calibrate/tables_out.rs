//! `twin calibrate --device cuda:N --tables-out DIR --hardware GPU --model MODEL`:
//! kernel tables measured through production libraries on this machine's GPU, in the
//! layout of the shipped ones, so that `--engine DIR` prices with them
//! ([`calibration::tables::measure`] plans, times, writes and fits them). What is not
//! measured (block scales, attention, routed experts, collectives) is said, and priced
//! by twin's kernel model or the tables of `--base`.

use anyhow::{bail, Context, Result};
use calibration::tables::measure::{self, DEFAULT_BATCHES, ENGINE, MAX_BATCHES, PROFILE};
use calibration::tables::{Measured, Selection};
use engine::library::LibraryTimer;
use engine::{Device, TimingConfig};
use sim::cost::tables::KernelTables;
use spec::hardware::Hardware;
use std::path::Path;

#[derive(clap::Args, Debug, Clone)]
pub struct TablesOutArgs {
    /// Measure kernel tables through production libraries (cuBLASLt GEMMs in BF16 and
    /// FP8) at the shapes of --model and write them in the shipped tables' layout to
    /// DIR, with the profile fitted to them (DIR/kernel-tables.toml): `--engine DIR`
    /// prices with it. Needs --device, --hardware and --model.
    #[arg(long, value_name = "DIR", requires_all = ["device", "model"], conflicts_with_all = ["out", "ops", "from_trace"])]
    pub tables_out: Option<std::path::PathBuf>,
    /// With --tables-out: twin's hardware this GPU is (h100, h200, b200, gb300, ...):
    /// the datasheet the fit's physics prices on.
    #[arg(long = "hardware", requires = "tables_out")]
    pub gpu: Option<String>,
    /// With --tables-out: token counts (GEMM rows) to time each weight GEMM at
    /// (comma-separated; default powers of two from 1 to 16384).
    #[arg(long, value_delimiter = ',', requires = "tables_out")]
    pub batches: Vec<usize>,
    /// With --tables-out: compare every measured GEMM with the shipped tables of these
    /// engines on the same GPU (comma-separated: vllm, trtllm), shape by shape, into
    /// DIR/compare-ENGINE.csv, with the median ratio per format printed.
    #[arg(long, value_delimiter = ',', requires = "tables_out")]
    pub compare: Vec<String>,
    /// With --tables-out or --from-tables: lay the measured tables over this engine's
    /// shipped tables of the same GPU (vllm, trtllm, ENGINE@VERSION): what was measured
    /// prices by the measurements (a GEMM format, an op family), everything else
    /// (block-scaled and FP4 GEMMs, attention, routed experts, collectives, where not
    /// measured) by the engine's tables instead of twin's kernel model.
    #[arg(long, value_name = "ENGINE")]
    pub base: Option<String>,
}

/// `--compare`: each engine's comparison written to `dir/compare-ENGINE.csv` and
/// summarised on stdout.
fn compare_engines(dir: &Path, hw: &Hardware, engines: &[String], rows: &[Measured]) -> Result<()> {
    for e in engines {
        let (tables, note) = scenario::tables::engine_tables(hw, e)?;
        let Some(t) = tables else {
            println!(
                "compare {e}: no shipped tables ({})",
                note.unwrap_or_default()
            );
            continue;
        };
        let c = measure::compare(hw, &t, rows);
        let file = dir.join(format!("compare-{}.csv", e.replace(['@', '/'], "-")));
        report::write_atomic(&file, measure::compare_csv(&c).as_bytes())?;
        println!(
            "compared with {} ({}), shape by shape in {}:",
            e,
            t.describe(),
            file.display()
        );
        print!("{}", measure::compare_summary(e, &c));
    }
    Ok(())
}

/// `prof` laid over `base`'s shipped tables of `hw` (`--base ENGINE`).
pub fn layered(hw: &Hardware, prof: KernelTables, base: &str) -> Result<KernelTables> {
    let t = base_tables(hw, base)?;
    Ok(prof.layered_over(&t))
}

/// `--base ENGINE`: the engine's shipped tables of `hw`.
fn base_tables(hw: &Hardware, base: &str) -> Result<std::sync::Arc<KernelTables>> {
    let (tables, note) = scenario::tables::engine_tables(hw, base)?;
    let Some(t) = tables else {
        bail!(
            "--base {base}: no shipped tables of that engine for {} ({})",
            hw.name,
            note.unwrap_or_default()
        );
    };
    Ok(t)
}

/// `twin calibrate --tables-out DIR`.
pub fn run(args: &super::CalibrateArgs, a: &TablesOutArgs, dir: &Path) -> Result<()> {
    let device = Device::parse(
        args.device
            .as_deref()
            .context("--tables-out needs --device cuda:N")?,
    )?;
    let Some(hw_name) = &a.gpu else {
        bail!(
            "--tables-out needs --hardware (twin's name of this GPU: h100, h200, b200, gb300, ...)"
        );
    };
    let hw = scenario::load_hardware(hw_name, &[])?;
    let model_name = args
        .model
        .as_deref()
        .context("--tables-out needs --model")?;
    let model = scenario::load_model(model_name, &[])?;
    let batches = batches_of(a)?;
    let mut plan = measure::gemm_plan(&hw, &model, &batches);
    // Shape by shape over the token counts: each weight matrix is uploaded once.
    plan.sort_by_key(|g| (g.format, g.n, g.k, g.m));
    let timing = timing_of(args);
    let mut timer = LibraryTimer::open(device)?;
    let info = timer.info().clone();
    eprint!(
        "{}",
        measure::announcement(device, &info, &plan, &model, &batches)
    );
    let start = std::time::Instant::now();
    let rows = measure::time_plan(&mut timer, &plan, &timing, |w| eprintln!("{w}"));
    if rows.is_empty() {
        bail!("--tables-out: no GEMM could be timed on {}", info.device);
    }
    let sel = Selection {
        system: measure::system_of(&hw.name),
        engine: ENGINE.into(),
        version: calibration::profile::utc_now()[..10].to_string(),
    };
    let measured = measure::write_and_fit(dir, &hw, &sel, &info.device, &rows)?;
    let base = match &a.base {
        Some(b) => measure::lay_over(dir, measured.clone(), &*base_tables(&hw, b)?)?.base,
        None => None,
    };
    eprintln!(
        "calibrate --tables-out: {} GEMMs timed in {:.1} s",
        rows.len(),
        start.elapsed().as_secs_f64()
    );
    // The measured fits alone (a base's own fits are the shipped tables' checks).
    print!(
        "{}",
        crate::cmd::calibrate::from_tables::render(&measured, &Default::default())
    );
    compare_engines(dir, &hw, &a.compare, &rows)?;
    print!("{}", measure::not_measured(base.as_ref()));
    println!(
        "wrote {} (tables under {}/{}/); price with --engine {}",
        dir.join(PROFILE).display(),
        dir.display(),
        sel.system,
        dir.display()
    );
    Ok(())
}

/// The token counts to time each GEMM at: --batches, else the defaults; checked.
fn batches_of(a: &TablesOutArgs) -> Result<Vec<usize>> {
    let batches: Vec<usize> = if a.batches.is_empty() {
        DEFAULT_BATCHES.to_vec()
    } else {
        a.batches.clone()
    };
    if batches.is_empty() || batches.len() > MAX_BATCHES || batches.contains(&0) {
        bail!("--batches: 1 to {MAX_BATCHES} token counts, each at least 1");
    }
    Ok(batches)
}

/// How long to time each GEMM: --smoke, --quick, or the full timing.
fn timing_of(args: &super::CalibrateArgs) -> TimingConfig {
    if args.smoke {
        TimingConfig::SMOKE
    } else if args.quick {
        TimingConfig::QUICK
    } else {
        TimingConfig::FULL
    }
}
