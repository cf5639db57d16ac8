//! Running a resolved scenario through the simulator: stoppable by Ctrl-C, with a
//! progress bar, under its seed or another; and the `--json` object of a run.
//! `twin simulate`, `cost` and `validate` run simulations through here.

use crate::args::SimulateArgs;
use crate::interrupt::{self, Interrupted};
use crate::scenario::{resolve_with_trace, Resolved};
use anyhow::{anyhow, bail, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use sim::cost::AnalyticCostModel;
use sim::serving::{
    simulate_controlled, simulate_with_requests, Control, Report, SimInput, SimRequest, TraceRecord,
};
use std::sync::atomic::AtomicBool;

/// The analytic cost models of a resolved scenario's prefill and decode pools.
pub fn pool_costs(r: &Resolved) -> (AnalyticCostModel, AnalyticCostModel) {
    pool_costs_with(r, &r.params)
}

/// `pool_costs` with other cost parameters (a band's draw).
pub fn pool_costs_with(
    r: &Resolved,
    params: &sim::cost::CostParams,
) -> (AnalyticCostModel, AnalyticCostModel) {
    let sc = &r.scenario;
    let pool = |p: &sim::serving::PoolConfig| {
        AnalyticCostModel::new(
            r.hardware.clone(),
            r.model.clone(),
            p.layout(),
            params.clone(),
        )
    };
    (pool(&sc.serving.prefill), pool(&sc.serving.decode))
}

/// Runs a resolved scenario on `trace`, stoppable by Ctrl-C, with a progress bar on
/// stderr when it is a terminal (`progress`).
pub fn run_resolved(r: &Resolved, trace: &[TraceRecord], progress: bool) -> Result<Report> {
    run_seeded(r, trace, r.seed, progress)
}

/// `run_resolved` under `seed` instead of the resolved one.
pub fn run_seeded(
    r: &Resolved,
    trace: &[TraceRecord],
    seed: u64,
    progress: bool,
) -> Result<Report> {
    run_seeded_with(r, trace, seed, progress, &r.params)
}

/// `run_seeded` with other cost parameters (a band's draw).
pub fn run_seeded_with(
    r: &Resolved,
    trace: &[TraceRecord],
    seed: u64,
    progress: bool,
    params: &sim::cost::CostParams,
) -> Result<Report> {
    run_core(r, trace, seed, progress, params, false).map(|(report, _)| report)
}

/// `run_resolved`, also returning every request completed (`--requests-out`).
pub fn run_logging_requests(
    r: &Resolved,
    trace: &[TraceRecord],
    progress: bool,
) -> Result<(Report, Vec<SimRequest>)> {
    run_core(r, trace, r.seed, progress, &r.params, true)
}

fn run_core(
    r: &Resolved,
    trace: &[TraceRecord],
    seed: u64,
    progress: bool,
    params: &sim::cost::CostParams,
    log_requests: bool,
) -> Result<(Report, Vec<SimRequest>)> {
    let sc = &r.scenario;
    let (prefill_cost, decode_cost) = pool_costs_with(r, params);
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
    let out = if log_requests {
        simulate_with_requests(&input, seed, &control)
    } else {
        simulate_controlled(&input, seed, &control).map(|rep| (rep, Vec::new()))
    }
    .map_err(|e| anyhow!("{}: {e}", r.scenario_origin));
    bar.finish_and_clear();
    out
}

/// Resolves and runs the scenario; returns the report with its resolved inputs.
pub fn execute(args: &SimulateArgs) -> Result<(Resolved, sim::serving::Report, usize)> {
    execute_with(args, false)
}

/// `execute`, with a progress bar when `progress`.
pub fn execute_with(
    args: &SimulateArgs,
    progress: bool,
) -> Result<(Resolved, sim::serving::Report, usize)> {
    execute_logged(args, progress, false).map(|(r, rep, n, _)| (r, rep, n))
}

/// `execute_with`, also returning every request completed when `log_requests`.
pub fn execute_logged(
    args: &SimulateArgs,
    progress: bool,
    log_requests: bool,
) -> Result<(Resolved, sim::serving::Report, usize, Vec<SimRequest>)> {
    let (mut r, trace) = resolve_with_trace(args)?;
    let (report, requests) = if log_requests {
        run_logging_requests(&r, &trace, progress)?
    } else {
        (run_resolved(&r, &trace, progress)?, Vec::new())
    };
    if report.requests_completed == 0 {
        // Every request refused for its length: that is why, not the run or the load.
        let why = match (report.requests_refused_context, report.context_limit_tokens) {
            (n, Some(l)) if n > 0 && n == report.requests_dropped => format!(
                "every request was refused: its prompt + output exceed the context limit of {l} tokens (serving.max_model_len, else the model's max_position_embeddings)"
            ),
            _ => "the run is too short for its requests, or the deployment is overloaded".into(),
        };
        r.notes.push(format!(
            "no request completed in the {:.1} s measured window: TTFT, TPOT and the other latencies have no value (null in --json); {why}",
            report.measured_s
        ));
    }
    Ok((r, report, trace.len(), requests))
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
    // Without a price sheet revenue is not computed: absent, not 0.
    if !sc.price.sheet.values_tokens() {
        for k in ["revenue_usd_per_gpu_hour", "margin_usd_per_gpu_hour"] {
            out.insert(k.into(), serde_json::Value::Null);
        }
        if let Some(u) = out
            .get_mut("usd_per_m_tokens")
            .and_then(|u| u.as_object_mut())
        {
            u.insert("revenue_all_tokens".into(), serde_json::Value::Null);
        }
    }
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

/// An `Interrupted` error naming the runs Ctrl-C stopped (`stopped`), if any.
pub fn stopped_early(stopped: &[String]) -> Result<()> {
    if stopped.is_empty() {
        return Ok(());
    }
    Err(Interrupted(format!(
        "the runs stopped early ({}); the figures above cover their windows up to then",
        stopped.join(", ")
    ))
    .into())
}
