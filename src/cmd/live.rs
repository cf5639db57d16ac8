//! `twin live`: serve a scenario for real with the engine and record the run.
//!
//! ```text
//! twin live [SCENARIO] --device cpu|cuda:N --duration S --out DIR [--seed N] [--set PATH=VALUE]
//!           [--idle spin|sleep] [--no-trace | --trace-ops]
//! ```
//!
//! The scenario is resolved as `twin simulate` resolves it (same files, overrides and
//! checks); the run directory holds `run.json`, `requests.jsonl`, `steps.jsonl` and
//! `result.json` (see `live::records`), and on a CPU `trace.json.gz`, the op calls of
//! the run's steps with their times (`live::trace`; `--no-trace` leaves it out), from
//! which `twin calibrate fit-trace` fits a profile. On a GPU the trace is written only
//! with `--trace-ops`: a traced call's time is read from CUDA events on the GPU's own
//! timeline (its kernel, and any wait of an idle GPU for the host's launch), and a
//! traced step waits for the GPU at the end of each pass.

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use engine::Device;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use live::{KvPolicy, LiveConfig};
use scenario::{read_trace_within, resolve, Overrides, RunRequest, TraceSource};
use sim::serving::IdleMode;
use std::path::PathBuf;

/// The scenario `twin live` runs when none is named.
pub const DEFAULT_LIVE_SCENARIO: &str = "cpu-live-poisson";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Policy {
    /// The simulator's: input and output KV reserved at admission, no preemption.
    Reserve,
    /// vLLM's: prompt pages at admission, decode pages on demand, preemption by
    /// recompute (aggregated serving only).
    Vllm,
}

/// `--idle`: how the ranks and the serving loop wait for work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Idle {
    /// Busy-poll, as a serving engine's loop does (no wake-up latency).
    Spin,
    /// Block until work comes.
    Sleep,
}

#[derive(Debug, Clone, Args)]
pub struct LiveArgs {
    /// Scenario name (`twin list`) or path [default: cpu-live-poisson].
    pub scenario: Option<String>,
    /// `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Seconds to serve, warm-up included (default: the scenario's `duration_s`).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Seed of the workload, the weights and the MTP rule (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override any field, as in `twin simulate` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Mooncake JSONL trace for trace-replay workloads.
    #[arg(long, value_name = "PATH")]
    pub trace: Option<String>,
    /// KV admission: `reserve` (the simulator's: a request's input and output KV at
    /// admission) or `vllm` (prompt pages at admission, decode pages on demand,
    /// preemption by recompute).
    #[arg(long, value_enum, default_value = "reserve")]
    pub kv_policy: Policy,
    /// Run directory to create (must not exist, or be empty).
    #[arg(long)]
    pub out: PathBuf,
    /// Cores to use (default: all available).
    #[arg(long)]
    pub cores: Option<usize>,
    /// How the ranks and the serving loop wait when idle (default: the scenario's
    /// `[live] idle`, itself `spin` unless set).
    #[arg(long, value_enum)]
    pub idle: Option<Idle>,
    /// Do not write the op trace (`trace.json.gz`, written by default on a CPU).
    #[arg(long)]
    pub no_trace: bool,
    /// Write the op trace on a GPU too (off there by default: each traced call records a
    /// CUDA event, and each traced pass waits for the GPU at its end).
    #[arg(long, conflicts_with = "no_trace")]
    pub trace_ops: bool,
}

pub fn run(args: &LiveArgs) -> Result<()> {
    let device =
        Device::parse(&args.device).with_context(|| format!("--device {}", args.device))?;
    let req = RunRequest {
        scenario: Some(
            args.scenario
                .clone()
                .unwrap_or(DEFAULT_LIVE_SCENARIO.into()),
        ),
        seed: args.seed,
        duration: args.duration,
        sets: Overrides::parse(&args.set)?,
        trace: args.trace.as_ref().map(|path| TraceSource {
            path: path.clone(),
            format: None,
        }),
        ..RunRequest::default()
    };
    let r = resolve(&req)?;
    if r.scenario().fidelity.cohort > 1 {
        bail!(
            "fidelity.cohort = {}: a live run serves every request; the coarse model is the simulator's (set fidelity.cohort = 1)",
            r.scenario().fidelity.cohort
        );
    }
    let (trace, notes) = read_trace_within(req.trace.as_ref(), r.workload(), &r.scenario().limits)?;
    for note in r.notes.iter().chain(&notes) {
        eprintln!("note: {note}");
    }
    let idle = match args.idle {
        Some(Idle::Spin) => IdleMode::Spin,
        Some(Idle::Sleep) => IdleMode::Sleep,
        None => r.scenario().live.idle,
    };
    let cores = args
        .cores
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let cfg = LiveConfig {
        device,
        scenario_origin: r.scenario_origin.clone(),
        duration_s: r.scenario().duration_s,
        warmup_s: r.scenario().warmup_s,
        scenario: r.scenario().clone(),
        workload: r.workload().clone(),
        model: r.model,
        hardware: r.hardware,
        trace,
        seed: r.seed,
        policy: match args.kv_policy {
            Policy::Reserve => KvPolicy::Reserve,
            Policy::Vllm => KvPolicy::Vllm,
        },
        cores,
        out: args.out.clone(),
        idle,
        op_trace: if device == Device::Cpu {
            !args.no_trace
        } else {
            args.trace_ops
        },
    };
    announce(&cfg);
    let summary = run_with_progress(&cfg)?;
    print_summary(&summary);
    Ok(())
}

/// Says on stderr what the live run serves, where, and whether it writes an op trace.
fn announce(cfg: &LiveConfig) {
    eprintln!(
        "live: {} on {} ({} cores), {:.0} s ({:.0} s warm-up), seed {}, KV policy {}, idle {}, {}",
        cfg.scenario_origin,
        cfg.device,
        cfg.cores,
        cfg.duration_s,
        cfg.warmup_s,
        cfg.seed,
        cfg.policy.name(),
        cfg.idle.name(),
        match (cfg.op_trace, cfg.device == Device::Cpu) {
            (true, true) => "op trace on",
            (true, false) => "op trace on (call times from CUDA events)",
            (false, true) => "no op trace",
            (false, false) => "no op trace (--trace-ops writes one, timed by CUDA events)",
        }
    );
}

/// Runs the live engine with a progress bar on stderr, cleared when the run ends.
fn run_with_progress(cfg: &LiveConfig) -> Result<live::Summary> {
    let pb = ProgressBar::with_draw_target(
        Some((cfg.duration_s * 10.0) as u64),
        ProgressDrawTarget::stderr(),
    );
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} ds {msg}")?
            .progress_chars("=> "),
    );
    let summary = live::run(cfg, &mut |p| {
        pb.set_position((p.elapsed_s * 10.0) as u64);
        pb.set_message(format!(
            "{} arrived, {} done, {} in flight, {} steps",
            p.arrived, p.completed, p.live, p.steps
        ));
    })?;
    pb.finish_and_clear();
    Ok(summary)
}

/// What the run served, in the window after warm-up.
fn print_summary(summary: &live::Summary) {
    let f = &summary.figures;
    println!("run: {}", summary.dir.display());
    println!(
        "{} requests ({} completed), {} steps; in the {:.0} s window after warm-up:",
        summary.requests, summary.completed, summary.steps, f.measured_s
    );
    println!(
        "  {:.2} req/s, {:.1} output tok/s, {:.1} tok/s processed (cached {:.1}, uncached {:.1})",
        f.request_throughput,
        f.output_throughput,
        f.token_throughput,
        f.cached_tok_s,
        f.uncached_tok_s
    );
    println!(
        "  TTFT p50 {:.0} ms p90 {:.0} ms; TPOT p50 {:.1} ms p90 {:.1} ms; ITL p50 {:.1} ms",
        f.ttft_ms.p50, f.ttft_ms.p90, f.tpot_ms.p50, f.tpot_ms.p90, f.itl_ms.p50
    );
    if let Some(t) = &summary.op_trace {
        let s = &t.sampling;
        println!(
            "op trace: {} ({} of {} steps, {} op calls; fit a profile from it with `twin calibrate fit-trace`)",
            summary.dir.join(&t.file).display(),
            s.steps_kept,
            s.steps_dispatched,
            s.slices
        );
    }
    println!("MTP acceptance follows a declared, seeded rule (random weights make real acceptance meaningless): see run.json mtp_rule");
}
