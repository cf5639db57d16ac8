//! `twin simulate`: run the discrete-event serving simulator on a full scenario
//! (hardware + model + workload + deployment) and print its report.

use crate::args::ReportArgs;
use crate::interrupt::Interrupted;
use crate::simulation::{self, finish, stopped_early};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rayon::prelude::*;
use report::text::finance_text;
use scenario::flags::SimulateArgs;
use scenario::run::{to_json, RunHow};
use scenario::{read_trace_within, resolve, resolve_with_trace, trace_fit, Resolved, RunRequest};
use scenario::{resolve_tco, Set};
use serde_json::json;
use sim::serving::{Mode, Report, TokenPrices, TraceRecord};
use sim::tco::Finance;

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
    #[command(flatten)]
    pub html: ReportArgs,
    /// Run the scenario under N seeds (the seed, then the next N - 1), in parallel, and
    /// print how far each headline figure moves between them: mean, range and the 95%
    /// confidence interval of the mean.
    #[arg(long, value_name = "N")]
    pub seeds: Option<u32>,
    /// Also run N simulations, each with one draw of the cost parameters from the
    /// hardware's kernel-fit spreads, and print the p10-p90 of throughput per GPU,
    /// TTFT p90 and TPOT p90 (default: off; each draw is a whole simulation).
    #[arg(long, value_name = "N")]
    pub band: Option<u32>,
    /// Write every simulated request as CSV (serial, arrival_s, first_token_s,
    /// finish_s, input_tokens, output_tokens, cached_tokens, measured, weight), to set
    /// beside a measured run's per-request file.
    #[arg(long, value_name = "FILE.csv")]
    pub requests_out: Option<std::path::PathBuf>,
}

/// Most runs `--seeds` takes.
const MAX_SEEDS: u32 = 64;

/// One point of a `--decode-deps` sweep.
struct SplitRun {
    decode_dep: u32,
    prefill_instances: u64,
    outcome: Result<Report>,
}

/// The GPUs a P/D split shares and the prefill DEP that takes what decode leaves.
struct SplitBudget {
    gpus: u64,
    prefill_dep: u64,
}

/// `--decode-deps`: the scenario once per decode DEP, prefill instances filling the rest
/// of its GPUs; runs in parallel, reported in the order given.
fn split_sweep(args: &SimulateArgs) -> Result<()> {
    let req = args.request()?;
    let base = resolve(&req)?;
    for n in &base.notes {
        eprintln!("note: {n}");
    }
    let (trace, notes) =
        read_trace_within(req.trace.as_ref(), base.workload(), &base.scenario().limits)?;
    for n in notes.iter().chain(trace_fit(&base, &trace)?.iter()) {
        eprintln!("note: {n}");
    }
    let sc = &base.scenario();
    if sc.serving.mode != Mode::Disaggregated {
        bail!(
            "--decode-deps: {} runs serving.mode = \"{}\"; a P/D split needs serving.mode = \"disaggregated\"",
            base.scenario_origin,
            sc.serving.mode.name()
        );
    }
    // The GPU budget when the scenario declares one, else what it occupies.
    let budget = SplitBudget {
        gpus: sc.serving.gpus.unwrap_or(sc.gpus()),
        prefill_dep: sc.serving.prefill.dep as u64,
    };
    let deps = &args.decode_deps;
    let runs = split_runs(
        &req,
        deps,
        &budget,
        sc.serving.decode.instances as u64,
        &trace,
    );
    // Failed splits take part as a point no run can be worse than.
    let frontier = sim::forward::pareto_max(
        &runs
            .iter()
            .map(|r| match &r.outcome {
                Ok(rep) => (rep.throughput_tok_s_per_gpu.total, rep.per_user_tok_s.p10),
                Err(_) => (f64::NEG_INFINITY, f64::NEG_INFINITY),
            })
            .collect::<Vec<_>>(),
    );
    if args.json {
        print_splits_json(&runs, &frontier)?;
    } else {
        print_splits_text(&base, &budget, &runs, &frontier);
    }
    interrupted_splits(&runs)
}

/// Each decode DEP of `--decode-deps` run on `trace`, in parallel, in the order given.
fn split_runs(
    req: &RunRequest,
    deps: &[u32],
    budget: &SplitBudget,
    decode_instances: u64,
    trace: &[TraceRecord],
) -> Vec<SplitRun> {
    let (gpus, prefill_dep) = (budget.gpus, budget.prefill_dep);
    deps.par_iter()
        .map(|&d| {
            let decode_gpus = d as u64 * decode_instances;
            let instances = gpus.saturating_sub(decode_gpus) / prefill_dep.max(1);
            let outcome = if instances == 0 {
                Err(anyhow!(
                    "{decode_gpus} decode GPUs leave no DEP{prefill_dep} prefill instance in {gpus} GPUs"
                ))
            } else {
                let mut split = req.clone();
                let sets = &mut split.sets;
                sets.set_scenario("serving.decode.dep", i64::from(d), "--decode-deps");
                let n = i64::try_from(instances).unwrap_or(i64::MAX);
                sets.set_scenario("serving.prefill.instances", n, "--decode-deps");
                let r = resolve(&split);
                r.and_then(|r| simulation::run(&r, trace, RunHow::default(), false).map(|(rep, _)| rep))
            };
            SplitRun {
                decode_dep: d,
                prefill_instances: instances,
                outcome,
            }
        })
        .collect()
}

/// `--decode-deps --json`: one object per split.
fn print_splits_json(runs: &[SplitRun], frontier: &[bool]) -> Result<()> {
    let items: Vec<serde_json::Value> = runs
        .iter()
        .zip(frontier)
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
    Ok(())
}

/// `--decode-deps`: the splits as a table, Pareto-optimal ones starred.
fn print_splits_text(base: &Resolved, budget: &SplitBudget, runs: &[SplitRun], frontier: &[bool]) {
    let (gpus, prefill_dep) = (budget.gpus, budget.prefill_dep);
    println!(
        "twin {} simulate: {} — P/D splits of {gpus} GPUs (DEP{prefill_dep} prefill instances take what decode leaves), seed {}; * = Pareto-optimal (tok/s per GPU vs tok/s per user that 90% of users reach, user p10)",
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
        "user p10",
        "user p50",
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
    for (r, &pareto) in runs.iter().zip(frontier) {
        let decode = format!("DEP{}", r.decode_dep);
        let prefill = format!("{} x DEP{prefill_dep}", r.prefill_instances);
        match &r.outcome {
            Ok(rep) => {
                let mark = if pareto { "*" } else { "" };
                // Of a split that completed nothing, latencies and speeds are absent.
                let fig =
                    |x: &sim::serving::Summary, q: fn(&sim::serving::Summary) -> f64, d| match x
                        .count
                    {
                        0 => "-".to_string(),
                        _ => format!("{:.d$}", q(x)),
                    };
                // Without a price sheet revenue is not computed.
                let revenue = match rep.price_sheet.as_str() {
                    "none" => "-".to_string(),
                    _ => format!("{:.2}", rep.revenue_usd_per_gpu_hour),
                };
                println!(
                    "{:>7} {:>10} {:>5} {:>10.0} {:>9} {:>9} {:>9} {:>9} {:>8} {:>7.0}% {:>8.1}  {mark}",
                    decode,
                    prefill,
                    rep.gpus,
                    rep.throughput_tok_s_per_gpu.total,
                    fig(&rep.per_user_tok_s, |x| x.p10, 1),
                    fig(&rep.per_user_tok_s, |x| x.p50, 1),
                    fig(&rep.ttft_ms, |x| x.p90, 0),
                    fig(&rep.tpot_ms, |x| x.p90, 2),
                    revenue,
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

pub fn run(cmd: &SimulateCmd) -> Result<()> {
    let args = &cmd.run;
    if let Some(n) = cmd.seeds {
        return replicate(cmd, n);
    }
    if !args.decode_deps.is_empty() {
        if cmd.band.is_some() {
            bail!(
                "--band runs one scenario's ensemble; --decode-deps sweeps several: run them apart"
            );
        }
        return split_sweep(args);
    }
    let req = args.request()?;
    let (r, trace) = resolve_with_trace(&req)?;
    let (r, report, requests) = finish(r, &trace, !args.json, cmd.requests_out.is_some())?;
    let trace_records = trace.len();
    if let Some(path) = &cmd.requests_out {
        crate::simulation::write_csv(path, &requests)?;
    }
    for n in &r.notes {
        eprintln!("note: {n}");
    }
    let finance = simulate_finance(cmd.tco.as_deref(), &req.sets.tco, &r, &report)?;
    if let Some(dir) = &cmd.html.report {
        write_html(dir, cmd.html.force, &r, &report, finance.as_ref())?;
    }
    let band = cmd
        .band
        .map(|n| crate::band::simulate_said(&r, &trace, n))
        .transpose()?;
    if args.json {
        let mut out = to_json(&r, &report, trace_records)?;
        if let Some(f) = &finance {
            out["finance"] =
                report::text::finance_json(f, r.scenario().price.sheet.values_tokens());
        }
        if let Some((b, _)) = &band {
            crate::band::simulate_json(&mut out, b);
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_text(&r, &report, finance.as_ref(), band.as_ref());
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

/// Writes the run's HTML report into `dir` and says where on stderr.
fn write_html(
    dir: &str,
    force: bool,
    r: &Resolved,
    report: &Report,
    finance: Option<&Finance>,
) -> Result<()> {
    let run = report::SimulatedRun {
        report,
        scenario_origin: &r.scenario_origin,
        model_name: &r.model.name,
        hardware: &r.hardware,
        price: &r.scenario().price,
        cost_model: &r.params.source,
    };
    let written = report::simulate(&run, finance, dir, force)?;
    eprintln!("report: {written}");
    Ok(())
}

/// Prints the run as text: what ran, its report, and the finance and band when asked.
fn print_text(
    r: &Resolved,
    report: &Report,
    finance: Option<&Finance>,
    band: Option<&(Option<crate::band::SimBand>, String)>,
) {
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
    if let Some(b) = &r.runs_band {
        println!("{}", b.text(report.ttft_ms.mean, report.tpot_ms.mean));
    }
    if let Some(f) = finance {
        print!(
            "\n{}",
            finance_text(f, r.scenario().price.sheet.values_tokens())
        );
    }
    if let Some((b, hw)) = band {
        print!("{}", crate::band::simulate_text(b, hw));
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
        (cmd.html.report.is_some(), "--report"),
        (cmd.tco.is_some(), "--tco"),
    ] {
        if set {
            bail!("--seeds prints the spread of several runs; {flag} describes one run: run it without --seeds");
        }
    }
    let (r, trace) = resolve_with_trace(&args.request()?)?;
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
        .map(|&s| {
            let how = RunHow {
                seed: Some(s),
                ..RunHow::default()
            };
            let out = simulation::run(&r, &trace, how, false).with_context(|| format!("seed {s}"));
            out.map(|(rep, _)| rep)
        })
        .collect::<Result<_>>()?;
    let runs: Vec<(u64, &Report)> = seeds.iter().copied().zip(reports.iter()).collect();
    let replicas = sim::serving::Replicas::of(&runs);
    let band = cmd
        .band
        .map(|n| crate::band::simulate(&r, &trace, n))
        .transpose()?;
    if args.json {
        let mut out = json!({
            "version": env!("CARGO_PKG_VERSION"),
            "scenario_file": r.scenario_origin,
            "notes": r.notes,
            "replicas": replicas,
        });
        if let Some(b) = &band {
            crate::band::simulate_json(&mut out, b);
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "twin {} simulate: {}, {n} seeds",
            env!("CARGO_PKG_VERSION"),
            r.scenario_origin
        );
        print!("{}", replicas.render_text());
        if let Some(b) = &band {
            print!("{}", crate::band::simulate_text(b, &r.hardware.name));
        }
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

/// `twin simulate --tco NAME`: the run's finance (with the `tco.*` overrides
/// `tco_sets`), or None without `--tco`.
pub fn simulate_finance(
    tco: Option<&str>,
    tco_sets: &[Set],
    r: &Resolved,
    report: &Report,
) -> Result<Option<Finance>> {
    let Some(name) = tco else {
        return Ok(None);
    };
    let tco = resolve_tco(Some(name), tco_sets, r.scenario().price.basis)?;
    let prices = r
        .scenario()
        .price
        .token_prices()
        .unwrap_or(TokenPrices::ZERO);
    let pools = vec![(r.scenario().gpus(), r.hardware.clone())];
    sim::tco::finance_of(&tco, &pools, &prices, &report.throughput_tok_s_per_gpu)
        .map(Some)
        .map_err(|e| anyhow!("{e}"))
}
