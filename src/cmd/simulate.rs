//! `twin simulate`: run the discrete-event serving simulator on a full scenario
//! (hardware + model + workload + deployment) and print its report.

use crate::scenario::{
    load_hardware, load_model, load_scenario_text, parse_with_sets, resolve, Kind, Set,
};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rayon::prelude::*;
use serde_json::json;
use sim::cost::{AnalyticCostModel, CostParams};
use sim::serving::{
    parse_mooncake, simulate, Mode, Report, ServingScenario, SimInput, TraceRecord, WorkloadConfig,
};
use sim::validate::Field;

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

/// A deployment field of the scenario's pool at `pool` (`serving.decode`), by its path.
fn pool_field(pool: &str, f: &Field) -> String {
    match f {
        Field::Path(p) => p.clone(),
        Field::Dep => format!("{pool}.dep"),
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
}

/// Parses and validates the arguments and every file they name.
pub fn resolve_args(args: &SimulateArgs) -> Result<Resolved> {
    let sets = Set::parse_all(&args.set)?;
    let (hw_sets, rest) = Set::split_prefix(&sets, "hardware");
    let (model_sets, rest) = Set::split_prefix(&rest, "model");
    let (workload_sets, rest) = Set::split_prefix(&rest, "workload");
    let (cost_sets, scenario_sets) = Set::split_prefix(&rest, "cost");

    let name = args.scenario.as_deref().unwrap_or(DEFAULT_SCENARIO);
    let (origin, text) = load_scenario_text(name)?;
    let mut sc: ServingScenario = parse_with_sets(&origin, &text, &scenario_sets)?;
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration {d}: must be a positive number of seconds");
        }
        sc.duration_s = d;
        if sc.warmup_s >= d {
            let w = d / 5.0;
            eprintln!(
                "note: warm-up {} s does not fit in --duration {d}; using {w} s",
                sc.warmup_s
            );
            sc.warmup_s = w;
        }
    }
    let seed = args.seed.unwrap_or(sc.seed);
    sc.seed = seed;

    let hardware =
        load_hardware(&sc.hardware, &hw_sets).with_context(|| format!("hardware of {origin}"))?;
    let model = load_model(&sc.model, &model_sets).with_context(|| format!("model of {origin}"))?;
    let (wl_origin, wl_text) =
        resolve(Kind::Workload, &sc.workload).with_context(|| format!("workload of {origin}"))?;
    let mut wl_sets = Vec::new();
    for s in &sc.workload_set {
        let set = Set::parse(s).with_context(|| format!("{origin}: workload_set"))?;
        wl_sets.push(set);
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
    })
}

pub fn read_trace(args: &SimulateArgs, workload: &WorkloadConfig) -> Result<Vec<TraceRecord>> {
    match (&workload.trace, &args.trace) {
        (Some(_), Some(path)) => {
            let file = std::fs::File::open(path).with_context(|| format!("cannot open trace `{path}`"))?;
            parse_mooncake(std::io::BufReader::new(file)).with_context(|| format!("trace `{path}`"))
        }
        (Some(_), None) => bail!(
            "workload `{}` replays a trace: pass it with --trace PATH (e.g. ../shared/traces/mooncake/conversation_trace.jsonl)",
            workload.name
        ),
        (None, Some(path)) => bail!(
            "--trace {path}: workload `{}` does not replay a trace; choose one with --set workload=mooncake-conversation",
            workload.name
        ),
        (None, None) => Ok(Vec::new()),
    }
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

/// Resolves and runs the scenario; returns the report with its resolved inputs.
pub fn execute(args: &SimulateArgs) -> Result<(Resolved, sim::serving::Report, usize)> {
    let r = resolve_args(args)?;
    let trace = read_trace(args, &r.workload)?;
    let sc = &r.scenario;
    let (prefill_cost, decode_cost) = pool_costs(&r);
    let input = SimInput {
        scenario: sc,
        workload: &r.workload,
        hardware: &r.hardware,
        model: &r.model,
        prefill_cost: &prefill_cost,
        decode_cost: &decode_cost,
        trace: &trace,
    };
    let report = simulate(&input, r.seed).map_err(|e| anyhow!("{}: {e}", r.scenario_origin))?;
    let records = trace.len();
    Ok((r, report, records))
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
    let sc = &base.scenario;
    if sc.serving.mode != Mode::Disaggregated {
        bail!(
            "--decode-deps: {} runs mode {:?}; a P/D split needs mode = \"disaggregated\"",
            base.scenario_origin,
            sc.serving.mode
        );
    }
    let gpus = sc.gpus();
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
                execute(&a).map(|(_, report, _)| report)
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
        return Ok(());
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
    Ok(())
}

pub fn run(args: &SimulateArgs) -> Result<()> {
    if !args.decode_deps.is_empty() {
        return split_sweep(args);
    }
    let (r, report, trace_records) = execute(args)?;
    if args.json {
        let out = to_json(&r, &report, trace_records)?;
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
    }
    Ok(())
}
