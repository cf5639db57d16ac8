//! `twin calibrate`: measure the engine's ops on a device, fit the cost-model families
//! and write a profile.
//!
//! ```text
//! twin calibrate --device cpu|cuda:N [--ops LIST] [--quick] --out DIR
//! twin calibrate fit MEASUREMENTS.csv --out PROFILE
//! twin calibrate --from-trace FILE [--rules FILE] [--json] [--layers-detail]
//!                [--deployment "FORWARD ARGS" [--out SECTION.toml]]
//! twin calibrate fit-trace TRACE --out PROFILE
//! ```
//!
//! The first form appends to `DIR/measurements.csv` point by point (each row fsynced),
//! skipping points already there (rerun with the same `--out` to resume), then fits and
//! writes `DIR/profile.toml`. The second refits an existing CSV without measuring. The
//! third reads a profiler trace of a real deployment and prints where each layer's time
//! goes (`crate::trace_import`); with `--deployment`, the in-situ factors of its layers
//! against twin's price of that deployment (`crate::trace_fit`). The fourth fits the
//! live engine's op costs from a `twin live` run's own op trace (`--from-trace` of such
//! a trace with `--out` does the same).

pub mod from_tables;
mod runs;
pub mod tables_out;
pub mod trace_fit;
pub mod trace_import;

use anyhow::{anyhow, Context, Result};
use calibration::plan::{expand_ops, plan, PlanSize};
use calibration::profile::utc_now;
use calibration::{MeasurementLog, MeasurementRecord, Profile};
use engine::{Device, TimingConfig};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sim::cost::fitted::LiveModelExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CalibrateArgs {
    #[command(subcommand)]
    pub command: Option<CalibrateCommand>,
    /// Device to measure: `cpu` or `cuda:N` (not with --from-trace).
    #[arg(long, required_unless_present_any = ["from_trace", "from_tables", "from_runs"])]
    pub device: Option<String>,
    /// Comma-separated ops or groups to measure (moe, attention, moe_decode,
    /// grouped_gemm, attn_dense, attn_sparse, attn_window, indexer, gather, copy).
    /// Reference peaks (stream read, GEMM) are always measured.
    #[arg(long, value_delimiter = ',')]
    pub ops: Vec<String>,
    /// Small plan: about a minute on a 2-core CPU.
    #[arg(long)]
    pub quick: bool,
    /// Tiny shapes for tests of the pipeline itself (numbers are not meaningful).
    #[arg(long, hide = true)]
    pub smoke: bool,
    /// Output directory for measurements.csv and profile.toml (with --from-trace and
    /// --deployment: the file the fitted `[in_situ]` section is written to).
    #[arg(long, required_unless_present_any = ["from_trace", "from_tables", "from_runs", "tables_out"])]
    pub out: Option<PathBuf>,
    /// `live`: measure the live engine's own ops at the shapes of `--model` (what
    /// `twin validate live` prices a run of that model with) instead of the default
    /// plan.
    #[arg(long, value_parser = ["default", "live"], default_value = "default")]
    pub plan: String,
    /// Model of the live plan (`twin list`), e.g. cpu-live-moe.
    #[arg(long)]
    pub model: Option<String>,
    /// Live plan: ranks of the DEP group the model runs on (adds the exchange op).
    #[arg(long, default_value_t = 1)]
    pub dep: usize,
    /// CPU: measure on this many cores (a pinned pool), as a live rank with as many
    /// cores runs; the profile's device names the thread count. Default: every core.
    #[arg(long)]
    pub cores: Option<usize>,
    /// Instead of measuring: read a profiler trace (Chrome trace-event JSON, `.json` or
    /// `.json.gz`, as the PyTorch profiler, vLLM and SGLang write it, or twin's own) and
    /// print the in-situ breakdown of its layers.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["device", "ops", "quick", "smoke", "model", "cores"])]
    pub from_trace: Option<PathBuf>,
    /// With --from-trace: a rules file (kernel-name patterns to categories) tried before
    /// the shipped one.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// With --from-trace: print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// With --from-trace: a line per layer.
    #[arg(long)]
    pub layers_detail: bool,
    /// With --from-trace: the traced deployment in `twin forward`'s words (e.g.
    /// "--hardware h800 --model deepseek-v3 --phase prefill --dep 32 --batch-per-rank 4
    /// --new-tokens 4096"): fit in-situ factors of its layers against twin's price of it
    /// (and with --out FILE, write them as an `[in_situ]` section).
    #[arg(long, value_name = "FORWARD ARGS", allow_hyphen_values = true)]
    pub deployment: Option<String>,
    #[command(flatten)]
    pub tables: crate::cmd::calibrate::from_tables::TablesArgs,
    #[command(flatten)]
    pub runs: runs::FromRunsArgs,
    #[command(flatten)]
    pub tables_out: tables_out::TablesOutArgs,
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum CalibrateCommand {
    /// Refit a measurements CSV into a profile without measuring.
    Fit {
        /// measurements.csv written by `twin calibrate`.
        measurements: PathBuf,
        /// Profile to write (TOML).
        #[arg(long)]
        out: PathBuf,
    },
    /// Fit a profile in situ from a live run's op trace (`twin live` writes
    /// DIR/trace.json.gz), as `--plan live` fits its passes.
    FitTrace {
        /// trace.json.gz (or plain JSON) written by `twin live`.
        trace: PathBuf,
        /// Profile to write (TOML).
        #[arg(long)]
        out: PathBuf,
    },
}

pub fn run(args: &CalibrateArgs) -> Result<()> {
    if let Some(corpus) = &args.runs.from_runs {
        return runs::run(&args.runs, corpus, args.out.as_deref());
    }
    if let Some(dir) = &args.tables_out.tables_out {
        return tables_out::run(args, &args.tables_out, dir);
    }
    if let Some(dir) = &args.tables.from_tables {
        return crate::cmd::calibrate::from_tables::run(
            dir,
            &args.tables,
            args.out.as_deref(),
            args.json,
            args.tables_out.base.as_deref(),
        );
    }
    if args.tables_out.base.is_some() {
        anyhow::bail!("--base lays measured kernel tables over an engine's: it goes with --tables-out or --from-tables");
    }
    if let Some(trace) = &args.from_trace {
        // A live run's own op trace with --out: the live engine's op costs fitted from
        // it, as `calibrate fit-trace` does.
        if let (None, Some(out)) = (&args.deployment, &args.out) {
            if calibration::live_trace::is_live_trace(trace) {
                return fit_trace(trace, out);
            }
        }
        let how = crate::cmd::calibrate::trace_import::Show {
            json: args.json,
            layers_detail: args.layers_detail,
        };
        return crate::cmd::calibrate::trace_import::run(
            trace,
            args.rules.as_deref(),
            how,
            args.deployment.as_deref(),
            args.out.as_deref(),
        );
    }
    if args.json || args.layers_detail || args.rules.is_some() || args.deployment.is_some() {
        anyhow::bail!(
            "--json, --layers-detail, --rules and --deployment go with --from-trace FILE"
        );
    }
    match (&args.command, args.cores) {
        (Some(CalibrateCommand::Fit { measurements, out }), _) => fit(measurements, out),
        (Some(CalibrateCommand::FitTrace { trace, out }), _) => fit_trace(trace, out),
        (None, None) => measure(args),
        (None, Some(n)) => {
            let avail = std::thread::available_parallelism().map_or(1, |n| n.get());
            if n == 0 || n > avail {
                anyhow::bail!("--cores {n}: this machine has {avail}");
            }
            let cores: Vec<usize> = (0..n).collect();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .start_handler(move |_| live::workers::pin(&cores))
                .build()?;
            pool.install(|| measure(args))
        }
    }
}

fn fit(csv: &Path, out: &Path) -> Result<()> {
    let log = calibration::log::read_log(csv)?;
    if let Some(cut) = &log.cut {
        eprintln!(
            "calibrate fit: {}: line {} ({} bytes, no newline) is not a whole row (an interrupted write?); left out",
            csv.display(),
            cut.line,
            cut.bytes
        );
    }
    let profile = Profile::fit_rows(&log.rows, &calibration::profile::sha256_file(csv)?)?;
    profile.write(out)?;
    print_summary(&profile, out);
    Ok(())
}

/// `fit-trace`: a profile fitted from a live run's own op calls.
fn fit_trace(trace: &Path, out: &Path) -> Result<()> {
    let profile = calibration::live_trace::profile_from_live_trace(trace)?;
    profile.write(out)?;
    if let Some(s) = &profile.provenance.source {
        println!("source: {s}");
    }
    print_summary(&profile, out);
    Ok(())
}

fn measure(args: &CalibrateArgs) -> Result<()> {
    let device = Device::parse(args.device.as_deref().context("--device is required")?)?;
    let out = args.out.as_deref().context("--out DIR is required")?;
    let ops = if args.ops.is_empty() {
        None
    } else {
        Some(expand_ops(&args.ops)?)
    };
    let size = if args.smoke {
        PlanSize::Smoke
    } else if args.quick {
        PlanSize::Quick
    } else {
        PlanSize::Full
    };
    let mut timing = match size {
        PlanSize::Full => TimingConfig::FULL,
        PlanSize::Quick => TimingConfig::QUICK,
        PlanSize::Smoke => TimingConfig::SMOKE,
    };
    // One thread on a CPU: time by its CPU clock (what other processes take of the core
    // is not the op's cost; a live run records the same split).
    timing.thread_cpu = device == Device::Cpu && rayon::current_num_threads() == 1;

    let mut backend = device.open()?;
    let info = backend.info().clone();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // Held until the profile is written: a second run on this directory refuses.
    let (_lock, took_over) = calibration::DirLock::acquire(out)?;
    if let Some(note) = took_over {
        eprintln!("calibrate: {note}");
    }
    let csv = out.join("measurements.csv");
    let mut log = MeasurementLog::open(&csv, &info.device)?;
    if let Some(cut) = log.repaired() {
        eprintln!(
            "calibrate: {}: cut off line {} ({} bytes, an interrupted run's partial row)",
            csv.display(),
            cut.line,
            cut.bytes
        );
    }
    let live_model = live_model_of(args)?;
    let points = if live_model.is_some() {
        // The reference peaks first, as in the default plan; then what the in-situ
        // passes cannot give.
        let mut refs = plan(device, size, Some(&["ref_stream_read", "ref_gemm"]));
        refs.extend(calibration::live::plan_live(args.dep, size));
        refs
    } else {
        plan(device, size, ops.as_deref())
    };
    let todo: Vec<_> = points
        .iter()
        .filter(|o| !log.contains(&o.point()))
        .collect();
    eprintln!(
        "calibrate: {} ({}){}, {} points planned, {} already in {}",
        info.device,
        info.driver,
        if timing.thread_cpu {
            ", timed by the thread's CPU clock"
        } else {
            ""
        },
        points.len(),
        points.len() - todo.len(),
        csv.display()
    );
    measure_points(backend.as_mut(), &todo, &timing, &info, &mut log)?;
    if let Some((lm, drafts)) = &live_model {
        measure_in_situ(device, lm, *drafts, size, &timing, &info, &mut log)?;
    }
    drop(log);

    let profile_path = out.join("profile.toml");
    fit(&csv, &profile_path)
}

/// The live plan's model (and its MTP draft tokens): the model whose engine ops to
/// time in situ; `None` for the default plan.
fn live_model_of(args: &CalibrateArgs) -> Result<Option<(spec::live_model::LiveModel, usize)>> {
    if args.plan != "live" {
        return Ok(None);
    }
    if !args.ops.is_empty() {
        anyhow::bail!(
            "--ops selects ops of the default plan; --plan live measures every op of --model"
        );
    }
    let name = args
        .model
        .as_deref()
        .context("--plan live needs --model MODEL (the model whose ops to measure)")?;
    let model = scenario::load_model(name, &[])?;
    let lm = spec::live_model::LiveModel::from_model(&model, live::model::PAGE_TOKENS)
        .map_err(|e| anyhow!("model {name}: {}", e.join("; ")))?;
    Ok(Some((
        lm,
        model.mtp.as_ref().map_or(0, |m| m.draft_tokens) as usize,
    )))
}

/// Measures each point on `backend` under a progress bar, appending a row per point
/// to `log`; a point that fails is a warning, and the count of failures is said at
/// the end.
fn measure_points(
    backend: &mut dyn engine::Backend,
    todo: &[&engine::OpSpec],
    timing: &TimingConfig,
    info: &engine::DeviceInfo,
    log: &mut MeasurementLog,
) -> Result<()> {
    let start = Instant::now();
    let pb = ProgressBar::with_draw_target(Some(todo.len() as u64), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} ETA {eta} {msg}")?
            .progress_chars("=> "),
    );
    let mut failed = 0usize;
    for op in todo {
        let point = op.point();
        pb.set_message(format!("{} {} {}", point.op, point.dtype, point.shape));
        match backend.measure(op, timing) {
            Ok(m) => log.append(&MeasurementRecord::from_measurement(
                &m,
                &info.device,
                &info.driver,
                &utc_now(),
            ))?,
            Err(e) => {
                failed += 1;
                pb.println(format!(
                    "warning: {} {} {}: {e}",
                    point.op, point.dtype, point.shape
                ));
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    eprintln!(
        "calibrate: measured in {:.1} s{}",
        start.elapsed().as_secs_f64(),
        if failed > 0 {
            format!(", {failed} points failed (see warnings)")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// The live plan's in-situ passes: the model's executor on `device` runs synthetic
/// prefill chunks and decode batches with every op call timed; each distinct call
/// becomes a row (median of its samples).
fn measure_in_situ(
    device: Device,
    lm: &spec::live_model::LiveModel,
    drafts: usize,
    size: PlanSize,
    timing: &TimingConfig,
    info: &engine::DeviceInfo,
    log: &mut MeasurementLog,
) -> Result<()> {
    use engine::serve::{situ, Executor, ServeDevice, Shard};
    let passes = calibration::live::situ_passes(size);
    let reps = match size {
        PlanSize::Smoke => 1,
        PlanSize::Quick => 5,
        PlanSize::Full => 11,
    };
    let start = Instant::now();
    let dev: Box<dyn ServeDevice> = match device {
        Device::Cpu => Box::new(engine::serve::CpuDevice::new()),
        Device::Cuda(n) => Box::new(engine::serve::cuda::CudaDevice::open(n)?),
    };
    let cfg = live::model::engine_config(lm);
    let mut exec = Executor::new(
        dev,
        cfg,
        Shard {
            seed: 7,
            rank: 0,
            ranks: 1,
            pages: 160,
        },
    )?;
    exec.set_trace_clock(timing.thread_cpu);
    eprintln!(
        "calibrate: {} forward passes of {} in situ, {reps} timed runs each",
        passes.len(),
        lm.name
    );
    let samples = situ::timed_passes(&mut exec, &passes, drafts, reps, 1)?;
    let mut rows = calibration::live::situ_rows(&samples, &info.device, &info.driver, &utc_now());
    let gaps = calibration::live::wake_gaps(size);
    let wake = situ::wake_samples(&mut exec, &gaps, reps.min(5), drafts, 1)?;
    rows.extend(calibration::live::wake_rows(
        &wake,
        &info.device,
        &info.driver,
        &utc_now(),
    ));
    let mut added = 0;
    for r in rows {
        if !log.contains(&r.point()) {
            log.append(&r)?;
            added += 1;
        }
    }
    eprintln!(
        "calibrate: {} op calls timed in {:.1} s, {added} distinct calls recorded",
        samples.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn print_summary(p: &Profile, path: &Path) {
    println!("profile: {}", path.display());
    println!("device: {} ({})", p.provenance.device, p.provenance.driver);
    if let Some(b) = p.reference.stream_read_bytes_per_s {
        println!("reference stream read: {:.2} GB/s", b / 1e9);
    }
    if let Some(f) = p.reference.gemm_flops_per_s {
        println!("reference GEMM: {:.2} GFLOP/s", f / 1e9);
    }
    print_op_fits(p);
    for (op, why) in &p.skipped {
        println!("skipped {op}: {why}");
    }
    print_live_fits(p);
    if let Some(w) = &p.wake {
        println!(
            "wake-up after idling: a step after g s idle takes {:.2} ms x (1 - exp(-g / {:.3} s)) longer ({} gaps, rms {:.2} ms)",
            w.max_s * 1e3,
            w.tau_s,
            w.points,
            w.rms_s * 1e3
        );
    }
    print_cost_rates(p);
}

/// Prints the table of fitted ops: points, R2, MAPE, leave-one-out error and parameters.
fn print_op_fits(p: &Profile) {
    println!(
        "{:<14} {:>6} {:>8} {:>8} {:>8}  parameters",
        "op", "points", "R2", "MAPE", "LOO"
    );
    for (op, f) in &p.ops {
        let params: Vec<String> = f
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v:.4e}"))
            .collect();
        println!(
            "{:<14} {:>6} {:>8.4} {:>7.1}% {:>7.1}%  {}",
            op,
            f.points,
            f.r2,
            100.0 * f.mape,
            100.0 * f.loo_mape,
            params.join(" ")
        );
    }
}

/// Prints the live-engine op fits per static key, as their linear formulas.
fn print_live_fits(p: &Profile) {
    if !p.live.is_empty() {
        println!("live-engine ops (t = c0 + c1 x var1 + ..., per static key):");
        for (key, f) in &p.live {
            let terms: Vec<String> = std::iter::once(format!("{:.3e}", f.coefficients_s[0]))
                .chain(
                    f.vars
                        .iter()
                        .zip(&f.coefficients_s[1..])
                        .map(|(v, c)| format!("{c:.3e} x {v}")),
                )
                .collect();
            println!(
                "  {key:<44} {:>3} pts  MAPE {:>5.1}%  LOO {:>5.1}%  t = {}",
                f.points,
                100.0 * f.mape,
                100.0 * f.loo_mape,
                terms.join(" + ")
            );
        }
    }
}

/// Prints the cost-model rates this profile gives, next to the analytic defaults.
fn print_cost_rates(p: &Profile) {
    // What the cost model would use: fractions of this device's measured peaks.
    let base = sim::cost::CostParams::default();
    let c = p.cost_params(&base);
    println!("cost-model rates from this profile (fractions of the measured peaks; unchanged = analytic default):");
    for (name, new, old) in [
        ("moe", c.moe, base.moe),
        ("gemm", c.gemm, base.gemm),
        ("attention", c.attention, base.attention),
        ("indexer", c.indexer, base.indexer),
        ("gather", c.gather, base.gather),
        ("comm", c.comm, base.comm),
    ] {
        let mark = if new == old { "  (unchanged)" } else { "" };
        println!(
            "  {name:<10} mem_eff={:.3} compute_eff={:.3} fixed_s={:.2e}{mark}",
            new.mem_eff, new.compute_eff, new.fixed_s
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(subcommand)]
        c: Top,
    }

    #[derive(clap::Subcommand)]
    enum Top {
        Calibrate(CalibrateArgs),
    }

    fn parse(args: &[&str]) -> Result<CalibrateArgs, clap::Error> {
        let mut v = vec!["twin", "calibrate"];
        v.extend_from_slice(args);
        Wrap::try_parse_from(v).map(|w| match w.c {
            Top::Calibrate(a) => a,
        })
    }

    #[test]
    fn both_forms_parse() {
        let a = parse(&[
            "--device",
            "cpu",
            "--quick",
            "--ops",
            "moe,gather",
            "--out",
            "d",
        ])
        .unwrap();
        assert_eq!(a.device.as_deref(), Some("cpu"));
        assert!(a.quick && a.command.is_none());
        assert_eq!(a.ops, vec!["moe", "gather"]);
        let f = parse(&["fit", "m.csv", "--out", "p.toml"]).unwrap();
        match f.command {
            Some(CalibrateCommand::Fit { measurements, out }) => {
                assert_eq!(measurements, PathBuf::from("m.csv"));
                assert_eq!(out, PathBuf::from("p.toml"));
            }
            _ => panic!("expected fit"),
        }
        assert!(parse(&["--device", "cpu"]).is_err(), "--out is required");
        assert!(parse(&["--out", "d"]).is_err(), "--device is required");
    }
}
