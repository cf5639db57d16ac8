//! `twin simulate`: run the discrete-event serving simulator on a full scenario
//! (hardware + model + workload + deployment) and print its report.

use super::interrupt::{self, Interrupted};
use crate::scenario::{
    clip, declares, load_hardware, load_model, load_scenario_text, parse_with_sets, resolve, Kind,
    Set,
};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use serde_json::json;
use sim::cost::{AnalyticCostModel, CostParams};
use sim::serving::{
    read_mooncake, simulate_controlled, trace_span, Control, Limits, Mode, PoolConfig, Report,
    ServingScenario, SimInput, TraceRecord, WorkloadConfig,
};
use sim::validate::Field;
use std::sync::atomic::AtomicBool;

/// The scenario `twin simulate` runs when none is named.
pub const DEFAULT_SCENARIO: &str = "gb300-nvl72-v4.1-flash-agentx";

#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// Scenario name (`twin list`) or path to a scenario TOML
    /// [default: gb300-nvl72-v4.1-flash-agentx].
    pub scenario: Option<String>,
    /// Seed of every random stream (default: the scenario's `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Simulated seconds, warm-up included (default: the scenario's `duration_s`).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Override any field: `serving.decode.dep=32`, `workload.agentx.sessions=2048`,
    /// `model.mtp.draft_tokens=1`, `hardware.nvlink.bytes_per_s=1.8e12`,
    /// `cost.moe.mem_eff=0.9`, `workload=poisson` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// The coarse model: simulate one of K identical copies of the rack, each request
    /// standing for K (`--set fidelity.cohort=K`; README, "Fidelity": its error).
    #[arg(long, value_name = "K")]
    pub cohort: Option<u32>,
    /// Print one JSON object (report, resolved scenario, seed, twin version).
    #[arg(long)]
    pub json: bool,
    /// Mooncake JSONL trace for trace-replay workloads.
    #[arg(long, value_name = "PATH")]
    pub trace: Option<String>,
    /// Calibration profile whose measured efficiencies and fixed costs price the steps
    /// (layered over the hardware file's fitted `[cost]`).
    #[arg(long, value_name = "PATH")]
    pub profile: Option<String>,
    /// Compare P/D splits: one run per decode-group DEP (e.g. `16,24,32,48`), the
    /// prefill pool's instances filling the rest of the scenario's GPUs.
    #[arg(long, value_name = "DEPS", value_delimiter = ',')]
    pub decode_deps: Vec<u32>,
}

/// `twin simulate`: a run's arguments, and what to do with its report besides
/// printing it.
#[derive(Debug, Clone, Args)]
pub struct SimulateCmd {
    #[command(flatten)]
    pub run: SimulateArgs,
    /// Price the GPUs with a TCO preset (`scenarios/tco`) or file, and print the
    /// finance (cost by component, margin, break-even utilisation).
    #[arg(long, value_name = "PRESET")]
    pub tco: Option<String>,
    /// Write an HTML report (index.html, SVG plots, CSV tables, summary.json) here.
    #[arg(long, value_name = "DIR")]
    pub report: Option<String>,
    /// Let --report write into a folder that is not empty.
    #[arg(long)]
    pub force: bool,
    /// Run the scenario under N seeds (the seed, then the next N - 1), in parallel, and
    /// print how far each headline figure moves between them: mean, range and the 95%
    /// confidence interval of the mean.
    #[arg(long, value_name = "N")]
    pub seeds: Option<u32>,
}

/// Most runs `--seeds` takes.
const MAX_SEEDS: u32 = 64;

/// A deployment field of the scenario's pool at `pool` (`serving.decode`), by its path.
fn pool_field(pool: &str, f: &Field) -> String {
    match f {
        Field::Path(p) => p.clone(),
        Field::Dep => format!("{pool}.dep"),
        Field::Tp => format!("{pool}.tp"),
        Field::RedundantExperts => format!("{pool}.redundant_experts"),
        Field::BatchPerRank => format!("{pool}.max_batch_per_rank"),
    }
}

/// Everything a run resolved, before simulating.
pub struct Resolved {
    pub scenario_origin: String,
    pub scenario: ServingScenario,
    pub workload: WorkloadConfig,
    pub hardware: sim::Hardware,
    pub model: sim::Model,
    pub params: CostParams,
    pub seed: u64,
    /// What resolving (and reading the trace) chose for the user or left out: defaults
    /// that change the GPU count, a shortened warm-up, a trace cut by the duration.
    pub notes: Vec<String>,
}

/// Parses and validates the arguments and every file they name.
pub fn resolve_args(args: &SimulateArgs) -> Result<Resolved> {
    let cohort = args.cohort.map(|k| format!("fidelity.cohort={k}"));
    let all: Vec<String> = cohort.into_iter().chain(args.set.iter().cloned()).collect();
    let sets = Set::parse_all(&all)?;
    let (hw_sets, rest) = Set::split_prefix(&sets, "hardware");
    let (model_sets, rest) = Set::split_prefix(&rest, "model");
    let (workload_sets, rest) = Set::split_prefix(&rest, "workload");
    let (cost_sets, rest) = Set::split_prefix(&rest, "cost");
    // `tco.*` overrides belong to the TCO preset (`--tco`), read by `cost`.
    let (_, scenario_sets) = Set::split_prefix(&rest, "tco");

    let name = args.scenario.as_deref().unwrap_or(DEFAULT_SCENARIO);
    let (origin, text) = load_scenario_text(name)?;
    let mut sc: ServingScenario = parse_with_sets(&origin, &text, &scenario_sets)?;
    let mut notes = pool_notes(&sc, &|path| declares(&text, &scenario_sets, path));
    if let Some(d) = args.duration {
        if !d.is_finite() {
            bail!("--duration {d}: must be finite");
        }
        if d <= 0.0 {
            bail!("--duration {d}: must be a positive number of seconds");
        }
        sc.duration_s = d;
        if sc.warmup_s >= d {
            let w = d / 5.0;
            notes.push(format!(
                "warm-up {} s does not fit in --duration {d}; using {w} s",
                sc.warmup_s
            ));
            sc.warmup_s = w;
        }
    }
    let seed = args.seed.unwrap_or(sc.seed);
    sc.seed = seed;
    let (asked, copies) = (sc.fidelity.cohort, sc.copies());
    if asked > 1 && copies < asked {
        notes.push(if copies == 1 {
            format!("fidelity.cohort = {asked}: the pools do not split into copies (a prefill or mixed pool splits by whole instances, a decode pool by instances then ranks); the run is exact")
        } else {
            format!("fidelity.cohort = {asked}: the pools split into {copies} copies, the largest divisor of {asked} they allow; one of {copies} is simulated")
        });
    }

    let hardware =
        load_hardware(&sc.hardware, &hw_sets).with_context(|| format!("hardware of {origin}"))?;
    let model = load_model(&sc.model, &model_sets).with_context(|| format!("model of {origin}"))?;
    let (wl_origin, wl_text) =
        resolve(Kind::Workload, &sc.workload).with_context(|| format!("workload of {origin}"))?;
    let mut wl_sets = Vec::new();
    for s in &sc.workload_set {
        wl_sets.push(Set::parse_from(s, &format!("workload_set of {origin}:"))?);
    }
    wl_sets.extend(workload_sets);
    let workload: WorkloadConfig = parse_with_sets(&wl_origin, &wl_text, &wl_sets)?;

    let mut problems: Vec<String> = sc
        .problems()
        .into_iter()
        .map(|p| format!("{origin}: {p}"))
        .collect();
    problems.extend(
        workload
            .problems()
            .into_iter()
            .map(|p| format!("{wl_origin}: {p}")),
    );
    problems.extend(
        sim::serving::limits::workload_problems(&sc, &workload)
            .into_iter()
            .map(|p| format!("{origin}: {p}")),
    );
    for (path, pool) in sc.pools() {
        for p in sim::validate::deployment(
            &hardware,
            &model,
            &pool.layout(),
            pool.max_batch_per_rank as u64,
            0,
        ) {
            problems.push(format!("{origin}: {}", p.render(&|f| pool_field(path, f))));
        }
    }
    if !problems.is_empty() {
        bail!("invalid scenario:\n  {}", problems.join("\n  "));
    }

    let params = super::cost_params(&hardware, args.profile.as_deref(), &cost_sets)?;
    Ok(Resolved {
        scenario_origin: origin,
        scenario: sc,
        workload,
        hardware,
        model,
        params,
        seed,
        notes,
    })
}

/// The pools a scenario runs that it does not declare (a default then sets the GPU
/// count), and the declared pools its mode leaves out. `declared` says whether the
/// scenario (with its overrides) has a table at a path.
fn pool_notes(sc: &ServingScenario, declared: &dyn Fn(&[&str]) -> bool) -> Vec<String> {
    let describe = |p: &PoolConfig| {
        format!(
            "{} x {} = {} GPUs",
            p.instances,
            p.layout().name(),
            p.gpus()
        )
    };
    let mut notes = Vec::new();
    let run = sc.pools();
    for (name, pool) in [
        ("prefill", &sc.serving.prefill),
        ("decode", &sc.serving.decode),
    ] {
        let path = format!("serving.{name}");
        let runs = run.iter().any(|(p, _)| *p == path);
        let has = declared(&["serving", name]);
        if runs && !has {
            notes.push(format!(
                "{path} is not set: the default {name} pool runs ({})",
                describe(pool)
            ));
        } else if !runs && has {
            notes.push(format!(
                "mode {} does not run {path}: its {} are not used",
                serde_json::to_value(sc.serving.mode)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                describe(pool)
            ));
        }
    }
    notes
}

/// The trace a `[trace]` workload replays, read within `limits`, with notes on what
/// reading repaired or left out.
pub(crate) fn read_trace_within(
    args: &SimulateArgs,
    workload: &WorkloadConfig,
    limits: &Limits,
) -> Result<(Vec<TraceRecord>, Vec<String>)> {
    match (&workload.trace, &args.trace) {
        (Some(_), Some(path)) => {
            let shown = clip(path);
            let file = std::fs::File::open(path)
                .with_context(|| format!("cannot open trace `{shown}`"))?;
            let t = read_mooncake(std::io::BufReader::new(file), limits)
                .with_context(|| format!("trace `{shown}`"))?;
            if t.records.is_empty() {
                bail!("trace `{shown}` is empty: it has no records");
            }
            let notes = t
                .notes
                .into_iter()
                .map(|n| format!("trace `{shown}`: {n}"))
                .collect();
            Ok((t.records, notes))
        }
        (Some(_), None) => bail!(
            "workload `{}` replays a trace: pass it with --trace PATH (e.g. ../shared/traces/mooncake/conversation_trace.jsonl)",
            workload.name
        ),
        (None, Some(path)) => bail!(
            "--trace {}: workload `{}` does not replay a trace; choose one with --set workload=mooncake-conversation",
            clip(path),
            workload.name
        ),
        (None, None) => Ok((Vec::new(), Vec::new())),
    }
}

/// Where a replayed trace falls in the run: an error when nothing of it would be
/// measured, a note when the duration cuts it short.
fn trace_fit(r: &Resolved, trace: &[TraceRecord]) -> Result<Option<String>> {
    let Some(replay) = &r.workload.trace else {
        return Ok(None);
    };
    let sc = &r.scenario;
    let span = trace_span(trace, replay, sc.duration_s, sc.warmup_s);
    let show = sim::validate::show;
    let spans = format!(
        "its {} records arrive from {} s to {} s (timestamps x trace.time_scale {})",
        span.replayed,
        show(span.first_s),
        show(span.last_s),
        replay.time_scale
    );
    if span.in_window == 0 {
        bail!(
            "nothing of the trace would be measured: {spans}, and the run measures {:.1} s to {:.1} s (duration_s {} after warmup_s {}); raise the duration, or lower trace.time_scale",
            sc.warmup_s,
            sc.duration_s,
            sc.duration_s,
            sc.warmup_s
        );
    }
    Ok((span.in_run < span.replayed).then(|| {
        format!(
            "the run ends at {} s and cuts the trace short: {} of its {} records arrive later and are not replayed ({spans})",
            sc.duration_s,
            span.replayed - span.in_run,
            span.replayed
        )
    }))
}

/// The analytic cost models of a resolved scenario's prefill and decode pools.
pub fn pool_costs(r: &Resolved) -> (AnalyticCostModel, AnalyticCostModel) {
    let sc = &r.scenario;
    let pool = |p: &sim::serving::PoolConfig| {
        AnalyticCostModel::new(
            r.hardware.clone(),
            r.model.clone(),
            p.layout(),
            r.params.clone(),
        )
    };
    (pool(&sc.serving.prefill), pool(&sc.serving.decode))
}

/// Runs a resolved scenario on `trace`, stoppable by Ctrl-C, with a progress bar on
/// stderr when it is a terminal (`progress`).
fn run_resolved(r: &Resolved, trace: &[TraceRecord], progress: bool) -> Result<Report> {
    run_seeded(r, trace, r.seed, progress)
}

/// `run_resolved` under `seed` instead of the resolved one.
fn run_seeded(r: &Resolved, trace: &[TraceRecord], seed: u64, progress: bool) -> Result<Report> {
    let sc = &r.scenario;
    let (prefill_cost, decode_cost) = pool_costs(r);
    let input = SimInput {
        scenario: sc,
        workload: &r.workload,
        hardware: &r.hardware,
        model: &r.model,
        prefill_cost: &prefill_cost,
        decode_cost: &decode_cost,
        trace,
    };
    let stop: &AtomicBool = interrupt::install();
    let bar = if progress {
        ProgressBar::with_draw_target(Some(sc.duration_s as u64), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} simulated s (Ctrl-C stops and reports)",
        )?
        .progress_chars("=> "),
    );
    let show = |t: f64| bar.set_position(t as u64);
    let control = Control {
        stop: Some(stop),
        progress: Some(&show),
    };
    let report = simulate_controlled(&input, seed, &control)
        .map_err(|e| anyhow!("{}: {e}", r.scenario_origin));
    bar.finish_and_clear();
    report
}

/// Resolves and runs the scenario; returns the report with its resolved inputs.
pub fn execute(args: &SimulateArgs) -> Result<(Resolved, sim::serving::Report, usize)> {
    execute_with(args, false)
}

/// `execute`, with a progress bar when `progress`.
fn execute_with(
    args: &SimulateArgs,
    progress: bool,
) -> Result<(Resolved, sim::serving::Report, usize)> {
    let (r, trace) = resolve_with_trace(args)?;
    let report = run_resolved(&r, &trace, progress)?;
    Ok((r, report, trace.len()))
}

/// Resolves the arguments and reads the trace they name, with the notes of both.
fn resolve_with_trace(args: &SimulateArgs) -> Result<(Resolved, Vec<TraceRecord>)> {
    let mut r = resolve_args(args)?;
    if r.workload.rate_curve.is_some() && !r.workload.curve_is_simulated() {
        r.notes.push(format!(
            "workload `{}` has a rate curve; the simulation applies it to open-loop arrivals only (twin plan uses it for any workload)",
            r.workload.name
        ));
    }
    let (trace, notes) = read_trace_within(args, &r.workload, &r.scenario.limits)?;
    r.notes.extend(notes);
    r.notes.extend(trace_fit(&r, &trace)?);
    Ok((r, trace))
}

/// The `--json` object: the report's figures at the top level, then what produced them.
pub fn to_json(
    r: &Resolved,
    report: &sim::serving::Report,
    trace_records: usize,
) -> Result<serde_json::Value> {
    let sc = &r.scenario;
    let mut out = match serde_json::to_value(report)? {
        serde_json::Value::Object(m) => m,
        _ => bail!("the report did not serialise to an object"),
    };
    out.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    out.insert("seed".into(), json!(r.seed));
    out.insert("scenario_file".into(), json!(r.scenario_origin));
    out.insert("trace_records".into(), json!(trace_records));
    out.insert("notes".into(), json!(r.notes));
    out.insert(
        "resolved".into(),
        json!({
            "scenario": sc,
            "workload": r.workload,
            "hardware": r.hardware,
            "model": r.model,
            "cost_params": r.params,
        }),
    );
    Ok(serde_json::Value::Object(out))
}

/// One point of a `--decode-deps` sweep.
struct SplitRun {
    decode_dep: u32,
    prefill_instances: u64,
    outcome: Result<Report>,
}

/// `--decode-deps`: the scenario once per decode DEP, prefill instances filling the rest
/// of its GPUs; runs in parallel, reported in the order given.
fn split_sweep(args: &SimulateArgs) -> Result<()> {
    let base = resolve_args(args)?;
    for n in &base.notes {
        eprintln!("note: {n}");
    }
    let (trace, notes) = read_trace_within(args, &base.workload, &base.scenario.limits)?;
    for n in notes.iter().chain(trace_fit(&base, &trace)?.iter()) {
        eprintln!("note: {n}");
    }
    let sc = &base.scenario;
    if sc.serving.mode != Mode::Disaggregated {
        bail!(
            "--decode-deps: {} runs mode {:?}; a P/D split needs mode = \"disaggregated\"",
            base.scenario_origin,
            sc.serving.mode
        );
    }
    // The GPU budget when the scenario declares one, else what it occupies.
    let gpus = sc.serving.gpus.unwrap_or(sc.gpus());
    let prefill_dep = sc.serving.prefill.dep as u64;
    let decode_instances = sc.serving.decode.instances as u64;
    let runs: Vec<SplitRun> = args
        .decode_deps
        .par_iter()
        .map(|&d| {
            let decode_gpus = d as u64 * decode_instances;
            let instances = gpus.saturating_sub(decode_gpus) / prefill_dep.max(1);
            let outcome = if instances == 0 {
                Err(anyhow!(
                    "{decode_gpus} decode GPUs leave no DEP{prefill_dep} prefill instance in {gpus} GPUs"
                ))
            } else {
                let mut a = args.clone();
                a.decode_deps.clear();
                a.set.push(format!("serving.decode.dep={d}"));
                a.set.push(format!("serving.prefill.instances={instances}"));
                resolve_args(&a).and_then(|r| run_resolved(&r, &trace, false))
            };
            SplitRun {
                decode_dep: d,
                prefill_instances: instances,
                outcome,
            }
        })
        .collect();
    // Failed splits take part as a point no run can be worse than.
    let frontier = sim::forward::pareto_max(
        &runs
            .iter()
            .map(|r| match &r.outcome {
                Ok(rep) => (rep.throughput_tok_s_per_gpu.total, rep.per_user_tok_s.p90),
                Err(_) => (f64::NEG_INFINITY, f64::NEG_INFINITY),
            })
            .collect::<Vec<_>>(),
    );
    if args.json {
        let items: Vec<serde_json::Value> = runs
            .iter()
            .zip(&frontier)
            .map(|(r, &pareto)| match &r.outcome {
                Ok(rep) => json!({
                    "decode_dep": r.decode_dep, "prefill_instances": r.prefill_instances,
                    "pareto": pareto, "report": rep,
                }),
                Err(e) => json!({
                    "decode_dep": r.decode_dep, "prefill_instances": r.prefill_instances,
                    "error": format!("{e:#}"),
                }),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&items)?);
        return interrupted_splits(&runs);
    }
    println!(
        "twin {} simulate: {} — P/D splits of {gpus} GPUs (DEP{prefill_dep} prefill instances take what decode leaves), seed {}; * = Pareto-optimal (tok/s per GPU vs P90 tok/s per user)",
        env!("CARGO_PKG_VERSION"),
        base.scenario_origin,
        base.seed
    );
    println!(
        "{:>7} {:>10} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}",
        "decode",
        "prefill",
        "GPUs",
        "tok/s/GPU",
        "user p50",
        "user p90",
        "TTFT p90",
        "TPOT p90",
        "$/GPU-h",
        "prefill",
        "decode"
    );
    println!(
        "{:>7} {:>10} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8}",
        "", "", "", "", "tok/s", "tok/s", "ms", "ms", "revenue", "busy", "batch"
    );
    for (r, &pareto) in runs.iter().zip(&frontier) {
        let decode = format!("DEP{}", r.decode_dep);
        let prefill = format!("{} x DEP{prefill_dep}", r.prefill_instances);
        match &r.outcome {
            Ok(rep) => {
                let mark = if pareto { "*" } else { "" };
                println!(
                    "{:>7} {:>10} {:>5} {:>10.0} {:>9.1} {:>9.1} {:>9.0} {:>9.2} {:>8.2} {:>7.0}% {:>8.1}  {mark}",
                    decode,
                    prefill,
                    rep.gpus,
                    rep.throughput_tok_s_per_gpu.total,
                    rep.per_user_tok_s.p50,
                    rep.per_user_tok_s.p90,
                    rep.ttft_ms.p90,
                    rep.tpot_ms.p90,
                    rep.revenue_usd_per_gpu_hour,
                    100.0 * rep.pools[0].busy_fraction,
                    rep.pools[1].batch_per_rank.mean
                );
            }
            Err(e) => {
                let why = format!("{e:#}");
                let why = why.lines().last().unwrap_or("").trim();
                println!("{decode:>7} {prefill:>10}   cannot run: {why}");
            }
        }
    }
    interrupted_splits(&runs)
}

/// An `Interrupted` error when Ctrl-C stopped any split's run.
fn interrupted_splits(runs: &[SplitRun]) -> Result<()> {
    let stopped: Vec<String> = runs
        .iter()
        .filter_map(|r| match &r.outcome {
            Ok(rep) => rep
                .interrupted_at_s
                .map(|t| format!("DEP{} at {t:.1} s", r.decode_dep)),
            Err(_) => None,
        })
        .collect();
    stopped_early(&stopped)
}

/// An `Interrupted` error naming the runs Ctrl-C stopped (`stopped`), if any.
fn stopped_early(stopped: &[String]) -> Result<()> {
    if stopped.is_empty() {
        return Ok(());
    }
    Err(Interrupted(format!(
        "the runs stopped early ({}); the figures above cover their windows up to then",
        stopped.join(", ")
    ))
    .into())
}

pub fn run(cmd: &SimulateCmd) -> Result<()> {
    let args = &cmd.run;
    if let Some(n) = cmd.seeds {
        return replicate(cmd, n);
    }
    if !args.decode_deps.is_empty() {
        return split_sweep(args);
    }
    let (r, report, trace_records) = execute_with(args, !args.json)?;
    for n in &r.notes {
        eprintln!("note: {n}");
    }
    let finance = super::cost::simulate_finance(cmd.tco.as_deref(), &args.set, &r, &report)?;
    if let Some(dir) = &cmd.report {
        let run = crate::report::SimulatedRun {
            report: &report,
            scenario_origin: &r.scenario_origin,
            model_name: &r.model.name,
            hardware: &r.hardware,
            price: &r.scenario.price,
            cost_model: &r.params.source,
        };
        let written = crate::report::simulate(&run, finance.as_ref(), dir, cmd.force)?;
        eprintln!("report: {written}");
    }
    if args.json {
        let mut out = to_json(&r, &report, trace_records)?;
        if let Some(f) = &finance {
            out["finance"] = serde_json::to_value(f)?;
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "twin {} simulate: {}",
            env!("CARGO_PKG_VERSION"),
            r.scenario_origin
        );
        println!(
            "hardware {}, model {}, cost model: {}",
            r.hardware.name, r.model.name, r.params.source
        );
        print!("{}", report.render_text());
        if let Some(f) = &finance {
            print!("\n{}", super::cost::finance_text(f));
        }
    }
    match report.interrupted_at_s {
        Some(t) => Err(Interrupted(format!(
            "stopped at t = {t:.1} s of {} s; the report above covers the window up to then",
            report.duration_s
        ))
        .into()),
        None => Ok(()),
    }
}

/// `--seeds N`: the scenario under N seeds in parallel, and the spread of each headline
/// figure between them.
fn replicate(cmd: &SimulateCmd, n: u32) -> Result<()> {
    let args = &cmd.run;
    if !(1..=MAX_SEEDS).contains(&n) {
        bail!("--seeds {n}: give 1 to {MAX_SEEDS} runs");
    }
    for (set, flag) in [
        (!args.decode_deps.is_empty(), "--decode-deps"),
        (cmd.report.is_some(), "--report"),
        (cmd.tco.is_some(), "--tco"),
    ] {
        if set {
            bail!("--seeds prints the spread of several runs; {flag} describes one run: run it without --seeds");
        }
    }
    let (r, trace) = resolve_with_trace(args)?;
    for note in &r.notes {
        eprintln!("note: {note}");
    }
    let seeds: Vec<u64> = (0..n as u64).map(|i| r.seed.wrapping_add(i)).collect();
    eprintln!(
        "running {n} seeds on {} threads",
        rayon::current_num_threads().min(n as usize)
    );
    let reports: Vec<Report> = seeds
        .par_iter()
        .map(|&s| run_seeded(&r, &trace, s, false).with_context(|| format!("seed {s}")))
        .collect::<Result<_>>()?;
    let runs: Vec<(u64, &Report)> = seeds.iter().copied().zip(reports.iter()).collect();
    let replicas = sim::serving::Replicas::of(&runs);
    if args.json {
        let out = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "scenario_file": r.scenario_origin,
            "notes": r.notes,
            "replicas": replicas,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "twin {} simulate: {}, {n} seeds",
            env!("CARGO_PKG_VERSION"),
            r.scenario_origin
        );
        print!("{}", replicas.render_text());
    }
    let stopped: Vec<String> = runs
        .iter()
        .filter_map(|(s, rep)| {
            rep.interrupted_at_s
                .map(|t| format!("seed {s} at {t:.1} s"))
        })
        .collect();
    stopped_early(&stopped)
}
