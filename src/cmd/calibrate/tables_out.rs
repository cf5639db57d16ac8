//! `twin calibrate --device cuda:N --tables-out DIR --hardware GPU --model MODEL`:
//! kernel tables measured through production libraries on this machine's GPU, in the
//! layout of the shipped ones, so that `--engine DIR` prices with them.
//!
//! The shapes are the model's dense weight GEMMs (`AnalyticCostModel::
//! dense_gemm_shapes`: attention projections, router, shared experts, dense FFNs, LM
//! head, unsplit) at every token count of the grid (`--batches`), in BF16 and FP8. The
//! engine times them ([`engine::library`]: cuBLASLt on CUDA); they are written as
//! AIConfigurator-layout CSV under `DIR/<system>/gemm/measured/<date>/`
//! ([`calibration::tables::write`]), read back by the reader the shipped profiles are
//! fitted from, fitted ([`calibration::tables::fit`]) and saved as
//! `DIR/kernel-tables.toml`, which `--engine DIR` loads. What is not measured (block
//! scales, attention, routed experts, collectives) is said, and priced by twin's
//! kernel model.

use anyhow::{bail, Context, Result};
use calibration::tables::{self, Measured, Options, Selection};
use engine::library::{LibraryFormat, LibraryGemm, LibraryTimer, NOT_MEASURED};
use engine::{Device, TimingConfig};
use sim::cost::tables::family::Shape;
use sim::cost::tables::format::Format;
use sim::cost::tables::{KernelTables, TableSource};
use sim::cost::{AnalyticCostModel, CostParams, Layout};
use spec::hardware::Hardware;
use spec::model::Model;
use std::path::Path;

/// The profile `--tables-out DIR` writes and `--engine DIR` reads.
pub use scenario::tables::MEASURED_PROFILE as PROFILE;

/// The engine name of measured tables.
pub const ENGINE: &str = "measured";

/// Token counts per GEMM timed by default: powers of two from 1 to 16,384 (decode
/// batches to prefill chunks).
pub const DEFAULT_BATCHES: &[usize] = &[
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
];

/// Most token counts one run times.
pub const MAX_BATCHES: usize = 64;

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

/// One measured GEMM against a shipped table's price: (format, m, n, k, measured s,
/// shipped s, the shipped format that priced it).
type Compared = (Format, f64, f64, f64, f64, f64, Format);

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
        let c = compare(hw, &t, rows);
        let mut csv = String::from("format,m,n,k,measured_us,shipped_us,shipped_format,ratio\n");
        for x in &c {
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
        let file = dir.join(format!("compare-{}.csv", e.replace(['@', '/'], "-")));
        report::write_atomic(&file, csv.as_bytes())?;
        println!(
            "compared with {} ({}), shape by shape in {}:",
            e,
            t.describe(),
            file.display()
        );
        print!("{}", compare_summary(e, &c));
    }
    Ok(())
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
    tables::write(dir, sel, device, rows)
        .with_context(|| format!("writing tables under {}", dir.display()))?;
    let read = tables::read(dir, sel).with_context(|| format!("reading {}", dir.display()))?;
    if read.rows.len() != rows.len() {
        bail!(
            "{}: wrote {} rows, read back {} ({:?}): the writer and the reader disagree",
            dir.display(),
            rows.len(),
            read.rows.len(),
            read.skipped
        );
    }
    let source = TableSource {
        repository: format!("measured on {device}"),
        commit: sel.version.clone(),
        license: "measured by twin calibrate --tables-out".into(),
        files: read.files.clone(),
    };
    let mut prof = tables::fit(hw, sel, &read, source, &Options::default());
    prof.fitted = format!(
        "{} by twin {}",
        calibration::profile::utc_now(),
        env!("CARGO_PKG_VERSION")
    );
    save(dir, &prof)
}

/// Writes `prof` as `dir`'s profile and returns it as read back (the text form keeps the
/// correction grid to three decimals of its logarithm: what `--engine DIR` prices with).
fn save(dir: &Path, prof: &KernelTables) -> Result<KernelTables> {
    let text = toml::to_string(prof)?;
    report::write_atomic(&dir.join(PROFILE), text.as_bytes())?;
    let written: KernelTables = toml::from_str(&text)?;
    written
        .check()
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.join(PROFILE).display()))?;
    Ok(written)
}

/// `--base ENGINE`: `prof` laid over the engine's shipped tables of `hw`, written over
/// `dir`'s profile (the measured rows stay under `dir` for a refit); returns it as
/// written.
pub fn lay_over(dir: &Path, hw: &Hardware, prof: KernelTables, base: &str) -> Result<KernelTables> {
    save(dir, &layered(hw, prof, base)?)
}

/// `prof` laid over `base`'s shipped tables of `hw` (`--base ENGINE`).
pub fn layered(hw: &Hardware, prof: KernelTables, base: &str) -> Result<KernelTables> {
    let (tables, note) = scenario::tables::engine_tables(hw, base)?;
    let Some(t) = tables else {
        bail!(
            "--base {base}: no shipped tables of that engine for {} ({})",
            hw.name,
            note.unwrap_or_default()
        );
    };
    Ok(prof.layered_over(&t))
}

/// What `--tables-out` did not measure and what prices it instead: twin's kernel model,
/// or the base tables of `--base`.
fn not_measured(base: Option<&sim::cost::tables::Base>) -> String {
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
    let mut plan = gemm_plan(&hw, &model, &batches);
    // Shape by shape over the token counts: each weight matrix is uploaded once.
    plan.sort_by_key(|g| (g.format, g.n, g.k, g.m));
    let timing = timing_of(args);
    let mut timer = LibraryTimer::open(device)?;
    let info = timer.info().clone();
    announce(device, &info, &plan, &model, &batches);
    let start = std::time::Instant::now();
    let rows = time_plan(&mut timer, &plan, &timing);
    if rows.is_empty() {
        bail!("--tables-out: no GEMM could be timed on {}", info.device);
    }
    let sel = Selection {
        system: system_of(&hw.name),
        engine: ENGINE.into(),
        version: calibration::profile::utc_now()[..10].to_string(),
    };
    let measured = write_and_fit(dir, &hw, &sel, &info.device, &rows)?;
    let base = match &a.base {
        Some(b) => lay_over(dir, &hw, measured.clone(), b)?.base,
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
    print!("{}", not_measured(base.as_ref()));
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

/// Says on stderr what is about to be timed, and on which device.
fn announce(
    device: Device,
    info: &engine::DeviceInfo,
    plan: &[LibraryGemm],
    model: &Model,
    batches: &[usize],
) {
    if device == Device::Cpu {
        eprintln!("calibrate --tables-out: on the CPU every GEMM runs twin's f32 reference GEMM: the pipeline, not a production library");
    }
    eprintln!(
        "calibrate --tables-out: {} ({}), {} GEMMs of {} ({} shapes x {} token counts x BF16, FP8)",
        info.device,
        info.driver,
        plan.len(),
        model.name,
        plan.len() / batches.len().max(1) / LibraryFormat::ALL.len(),
        batches.len()
    );
}

/// Times every GEMM of the plan into a measured row; one that fails is warned of and skipped.
fn time_plan(
    timer: &mut LibraryTimer,
    plan: &[LibraryGemm],
    timing: &TimingConfig,
) -> Vec<Measured> {
    let mut rows = Vec::new();
    for g in plan {
        match timer.time_gemm(g, timing) {
            Ok(s) => rows.push(gemm_row(g, &timer.gemm_library(g.format), s.median_s)),
            Err(e) => eprintln!("warning: {:?} M={} N={} K={}: {e}", g.format, g.m, g.n, g.k),
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use scenario::{cost_params, load_hardware, load_model, tables::engine_tables};
    use sim::cost::{CostModel, Phase};
    use sim::forward::{forward, ForwardSpec};

    /// Synthetic measurements of `model`'s GEMM plan on the H200: each priced by the
    /// shipped vLLM tables' fit of its format, times `scale` (a production speed on the
    /// same GPU, moved so that the fit is not the shipped one).
    fn synthetic(model: &str, batches: &[usize], scale: f64) -> (Hardware, Vec<Measured>) {
        let hw = load_hardware("h200", &[]).unwrap();
        let model = load_model(model, &[]).unwrap();
        let (shipped, _) = engine_tables(&hw, "vllm@0.24.0").unwrap();
        let shipped = shipped.unwrap();
        let rows = gemm_plan(&hw, &model, batches)
            .iter()
            .map(|g| {
                let row = gemm_row(g, "synthetic", 1.0);
                let Shape::Gemm { format, .. } = row.shape else {
                    unreachable!()
                };
                let s = shipped.gemm_fit(format).unwrap().price(&hw, &row.shape);
                Measured {
                    seconds: scale * s,
                    ..row
                }
            })
            .collect();
        (hw, rows)
    }

    #[test]
    fn the_plan_is_the_models_dense_gemms_at_every_batch_in_both_formats() {
        // Llama-3.1-8B: hidden 4096, 32 query and 8 KV heads of 128, FFN 14336, vocab
        // 128256: q 4096x4096, k and v 1024x4096 each (fused or not, as twin prices
        // them), o 4096x4096, gate+up 2x14336 = 28672 x 4096, down 4096 x 14336, LM head
        // 128256 x 4096.
        let hw = load_hardware("h200", &[]).unwrap();
        let model = load_model("llama-3.1-8b", &[]).unwrap();
        let plan = gemm_plan(&hw, &model, &[1, 64]);
        let nk: std::collections::BTreeSet<(usize, usize)> =
            plan.iter().map(|g| (g.n, g.k)).collect();
        assert!(nk.contains(&(4096, 14336)), "{nk:?}");
        assert!(nk.contains(&(128256, 4096)), "{nk:?}");
        assert!(nk.iter().any(|&(n, k)| k == 4096 && n >= 28672), "{nk:?}");
        assert_eq!(plan.len(), nk.len() * 2 * 2, "{plan:?}");
        assert!(plan.iter().all(|g| g.check().is_ok()));
    }

    #[test]
    fn measured_tables_round_trip_through_the_engine_loader() {
        // Written as tables, read back by the reader, fitted, saved as DIR's profile and
        // loaded by `--engine DIR`'s own loader: the loaded profile is the one written,
        // prices every measured GEMM bit for bit as it and within a few percent of what
        // was measured, and a whole step priced through `--engine DIR` equals one priced
        // with the written profile in memory.
        let batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
        let (hw, rows) = synthetic("llama-3.1-8b", &batches, 1.25);
        let dir = tempfile::tempdir().unwrap();
        let sel = Selection {
            system: system_of(&hw.name),
            engine: ENGINE.into(),
            version: "2026-12-05".into(),
        };
        let prof = write_and_fit(dir.path(), &hw, &sel, "synthetic", &rows).unwrap();
        let choice = dir.path().to_str().unwrap();
        let (loaded, note) = engine_tables(&hw, choice).unwrap();
        let loaded = loaded.unwrap();
        assert!(note.is_none());
        assert_eq!(*loaded, prof);
        assert_eq!(
            (loaded.engine.as_str(), loaded.hardware.as_str()),
            (ENGINE, "h200")
        );
        let mut rel = Vec::new();
        for m in &rows {
            let Shape::Gemm { format, .. } = m.shape else {
                unreachable!()
            };
            let a = loaded.gemm_fit(format).unwrap().price(&hw, &m.shape);
            let b = prof.gemm_fit(format).unwrap().price(&hw, &m.shape);
            assert_eq!(a.to_bits(), b.to_bits(), "{:?}", m.shape);
            rel.push((a / m.seconds - 1.0).abs());
        }
        let median = spec::stats::median(&rel);
        assert!(median < 0.05, "median |fitted / measured - 1| = {median}");

        let model = load_model("llama-3.1-8b", &[]).unwrap();
        let spec = ForwardSpec {
            phase: Phase::Decode,
            dep: 1,
            tp: 1,
            batch_per_rank: 32,
            total_requests: None,
            context_tokens: 2048,
            new_tokens: 1,
            chunk_tokens: None,
            draft_tokens: 0,
            tokens_per_step: 1.0,
        };
        let via_flag = cost_params(&hw, None, &[], Some(choice), false).unwrap();
        assert!(via_flag.source.contains("measured"), "{}", via_flag.source);
        let mut in_memory = via_flag.clone();
        in_memory.tables = Some(std::sync::Arc::new(prof));
        let step = |p: &CostParams| {
            let cm = AnalyticCostModel::new(hw.clone(), model.clone(), Layout::new(1), p.clone());
            forward(&cm as &dyn CostModel, &spec).total.step_s
        };
        let (a, b) = (step(&via_flag), step(&in_memory));
        assert_eq!(a.to_bits(), b.to_bits(), "{a} vs {b}");
        // Compared with the shipped tables they were drawn from: 1.25 by construction.
        let (shipped, _) = engine_tables(&hw, "vllm@0.24.0").unwrap();
        let c = compare(&hw, &shipped.unwrap(), &rows);
        assert_eq!(c.len(), rows.len());
        assert!(c.iter().all(|x| (x.4 / x.5 - 1.25).abs() < 1e-9), "{c:?}");
        let text = compare_summary("vllm", &c);
        assert!(text.contains("measured / shipped median 1.250"), "{text}");
        assert!(
            text.contains("median |measured / shipped - 1| 25.0%"),
            "{text}"
        );
        // And the tables price the step's GEMMs: without them the step differs.
        let mut own = via_flag.clone();
        own.tables = None;
        assert_ne!(step(&own).to_bits(), a.to_bits());
    }

    /// The tables measured through cuBLASLt on an H100 on 2026-12-05
    /// (docs/measured/gpu-h100-2026-12-05), as committed.
    fn h100_measured(model: &str) -> (Hardware, Vec<Measured>, std::path::PathBuf) {
        let hw = load_hardware("h100", &[]).unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs/measured/gpu-h100-2026-12-05")
            .join(format!("tables-{model}"));
        let sel = Selection {
            system: "h100_sxm".into(),
            engine: ENGINE.into(),
            version: "2026-12-05".into(),
        };
        let read = tables::read(&dir, &sel).unwrap();
        assert!(read.skipped.is_empty(), "{:?}", read.skipped);
        (hw, read.rows, dir)
    }

    #[test]
    fn the_h100_measurements_land_within_15_percent_of_the_shipped_vllm_gemm_tables() {
        // Issue 42's goal, reproduced from the committed measurements against the
        // shipped tables as they stand (a change to either shows here): the median over
        // shapes of |measured / shipped - 1| per format, for both models measured.
        for (model, shapes) in [("deepseek-v3", 280), ("llama-3.1-8b", 140)] {
            let (hw, rows, _) = h100_measured(model);
            assert_eq!(rows.len(), shapes, "{model}");
            let (shipped, _) = engine_tables(&hw, "vllm@0.24.0").unwrap();
            let c = compare(&hw, &shipped.unwrap(), &rows);
            for f in [Format::Bf16, Format::Fp8] {
                let dev: Vec<f64> = c
                    .iter()
                    .filter(|x| x.0 == f)
                    .map(|x| (x.4 / x.5 - 1.0).abs())
                    .collect();
                assert_eq!(dev.len(), shapes / 2, "{model} {f:?}");
                let m = spec::stats::median(&dev);
                assert!(
                    m <= 0.15,
                    "{model} {f:?}: median |measured / shipped - 1| {m}"
                );
            }
        }
    }

    #[test]
    fn the_h100_measured_tables_price_llama_steps_within_10_percent_of_vllms() {
        // `forward --engine DIR` with the committed profile against `--engine vllm`
        // (scripts/gpu-check.sh's comparison): Llama-3.1-8B's decode and prefill steps.
        let (hw, _, dir) = h100_measured("llama-3.1-8b");
        let model = load_model("llama-3.1-8b", &[]).unwrap();
        let step = |choice: &str, phase: Phase, batch: u32, context: u64, new: u32| {
            let p = cost_params(&hw, None, &[], Some(choice), false).unwrap();
            let spec = ForwardSpec {
                phase,
                dep: 1,
                tp: 1,
                batch_per_rank: batch,
                total_requests: None,
                context_tokens: context,
                new_tokens: new,
                chunk_tokens: None,
                draft_tokens: 0,
                tokens_per_step: 1.0,
            };
            let cm = AnalyticCostModel::new(hw.clone(), model.clone(), Layout::new(1), p);
            forward(&cm as &dyn CostModel, &spec).total.step_s
        };
        let d = dir.to_str().unwrap();
        for (phase, batch, context, new) in
            [(Phase::Decode, 64, 4096, 1), (Phase::Prefill, 1, 0, 4096)]
        {
            let (a, b) = (
                step(d, phase, batch, context, new),
                step("vllm", phase, batch, context, new),
            );
            assert!(
                (a / b - 1.0).abs() <= 0.10,
                "{phase:?}: {a} s measured, {b} s vllm"
            );
        }
    }

    #[test]
    fn measured_tables_laid_over_vllms_price_the_rest_as_vllm_does() {
        // The committed H100 DeepSeek-V3 measurements, fitted and laid over the shipped
        // vLLM tables (`--base vllm`): the measured formats keep the measured fits, the
        // rest (block FP8, attention, routed experts, collectives) price exactly as
        // `--engine vllm`; a DeepSeek-V3 step then differs from vLLM's by its dense
        // GEMMs alone.
        let (hw, rows, _) = h100_measured("deepseek-v3");
        let dir = tempfile::tempdir().unwrap();
        let sel = Selection {
            system: "h100_sxm".into(),
            engine: ENGINE.into(),
            version: "2026-12-05".into(),
        };
        let measured = write_and_fit(dir.path(), &hw, &sel, "h100", &rows).unwrap();
        let layered = lay_over(dir.path(), &hw, measured.clone(), "vllm").unwrap();
        let (vllm, _) = engine_tables(&hw, "vllm").unwrap();
        let vllm = vllm.unwrap();
        let base = layered.base.as_ref().unwrap();
        assert_eq!(base.measured_gemms, ["bfloat16", "fp8"]);
        assert!(layered
            .covers()
            .starts_with("bfloat16 and fp8 GEMMs measured; the rest by vllm"));
        for f in [Format::Bf16, Format::Fp8] {
            assert_eq!(layered.gemm_fit(f), measured.gemm_fit(f), "{f:?}");
        }
        assert_eq!(
            layered.gemm_fit(Format::Fp8Block),
            vllm.gemm_fit(Format::Fp8Block)
        );
        assert!(layered
            .fits
            .iter()
            .any(|f| f.family == sim::cost::tables::family::Family::Moe));
        // Through `--engine DIR`: the step's routed experts and attention as vLLM's.
        let model = load_model("deepseek-v3", &[]).unwrap();
        let spec = ForwardSpec {
            phase: Phase::Prefill,
            dep: 16,
            tp: 1,
            batch_per_rank: 1,
            total_requests: None,
            context_tokens: 0,
            new_tokens: 4096,
            chunk_tokens: None,
            draft_tokens: 0,
            tokens_per_step: 1.0,
        };
        let price = |choice: &str| {
            let p = cost_params(&hw, None, &[], Some(choice), false).unwrap();
            let cm = AnalyticCostModel::new(hw.clone(), model.clone(), Layout::new(16), p);
            forward(&cm as &dyn CostModel, &spec)
        };
        let (a, b) = (price(dir.path().to_str().unwrap()), price("vllm"));
        use sim::cost::Op;
        for op in [Op::Moe, Op::Attention, Op::Elementwise] {
            let (x, y) = (a.total.op(op), b.total.op(op));
            assert!((x / y - 1.0).abs() < 1e-9, "{op:?}: {x} vs {y}");
        }
        // The measured dense GEMMs (-15% on the H100 of 2026-12-05; the block-FP8 ones
        // priced by the FP8 fit, as vLLM's H100 tables price them) and the step they
        // move (-1%; issue 42's goal is 10%); likewise a decode step.
        let (x, y) = (a.total.op(Op::Dense), b.total.op(Op::Dense));
        assert!(x != y && (x / y - 1.0).abs() < 0.2, "dense {x} vs {y}");
        let (x, y) = (a.total.step_s, b.total.step_s);
        eprintln!(
            "prefill step: {:.3} ms laid over vllm, {:.3} ms vllm",
            x * 1e3,
            y * 1e3
        );
        assert!((x / y - 1.0).abs() < 0.1, "step {x} vs {y}");
        decode_step_is_near_vllms(&hw, &model, dir.path(), spec);
    }

    /// Asserts a decode step priced by the tables in `dir` is within 10% of vLLM's.
    fn decode_step_is_near_vllms(hw: &Hardware, model: &Model, dir: &Path, spec: ForwardSpec) {
        let decode = ForwardSpec {
            phase: Phase::Decode,
            batch_per_rank: 32,
            context_tokens: 4096,
            new_tokens: 1,
            ..spec
        };
        let price = |choice: &str| {
            let p = cost_params(hw, None, &[], Some(choice), false).unwrap();
            let cm = AnalyticCostModel::new(hw.clone(), model.clone(), Layout::new(16), p);
            forward(&cm as &dyn CostModel, &decode).total.step_s
        };
        let (x, y) = (price(dir.to_str().unwrap()), price("vllm"));
        eprintln!(
            "decode step: {:.3} ms laid over vllm, {:.3} ms vllm",
            x * 1e3,
            y * 1e3
        );
        assert!((x / y - 1.0).abs() < 0.1, "decode step {x} vs {y}");
    }
}
