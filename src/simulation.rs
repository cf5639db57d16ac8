//! Running a resolved scenario through the simulator: stoppable by Ctrl-C, with a
//! progress bar, under its seed or another; and the `--json` object of a run.
//! `twin simulate`, `cost` and `validate` run simulations through here.

use crate::interrupt::{self, Interrupted};
use anyhow::{anyhow, bail, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use scenario::{resolve_with_trace, Resolved, RunRequest};
use serde_json::json;
use sim::serving::{simulate_with, Control, Record, Report, SimRequest, TraceRecord};
use std::sync::atomic::AtomicBool;

/// How [`run`] runs a resolved scenario; the default is its own seed and cost
/// parameters, without a progress bar or a request log.
#[derive(Clone, Copy, Default)]
pub struct RunHow<'a> {
    /// Another seed than the resolved one (`--seeds`).
    pub seed: Option<u64>,
    /// A progress bar on stderr, when it is a terminal.
    pub progress: bool,
    /// Other cost parameters than the resolved ones (a band's draw).
    pub params: Option<&'a sim::cost::CostParams>,
    /// Also return every request completed (`--requests-out`).
    pub log_requests: bool,
}

/// Runs a resolved scenario on `trace`, stoppable by Ctrl-C: the one way from a
/// [`Resolved`] into the simulator.
pub fn run(r: &Resolved, trace: &[TraceRecord], how: RunHow) -> Result<(Report, Vec<SimRequest>)> {
    let (seed, params) = (how.seed.unwrap_or(r.seed), how.params.unwrap_or(&r.params));
    let sc = r.scenario();
    let costs = r.pool_costs(params);
    let input = r.input(&costs, trace);
    let stop: &AtomicBool = interrupt::install();
    let bar = if how.progress {
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
    let record = Record {
        requests: how.log_requests,
        steps: false,
    };
    let out = simulate_with(&input, seed, &control, record)
        .map(|o| (o.report, o.requests))
        .map_err(|e| anyhow!("{}: {e}", r.scenario_origin));
    bar.finish_and_clear();
    out
}

/// Resolves and runs the request; returns the report with its resolved inputs and the
/// number of trace records replayed.
pub fn execute(req: &RunRequest) -> Result<(Resolved, sim::serving::Report, usize)> {
    let (r, trace) = resolve_with_trace(req)?;
    let (r, report, _) = finish(r, &trace, false, false)?;
    Ok((r, report, trace.len()))
}

/// Runs a resolved scenario on its trace (with a progress bar when `progress`), also
/// returning every request completed when `log_requests`; a run in which no request
/// completed says why in a note.
pub fn finish(
    mut r: Resolved,
    trace: &[TraceRecord],
    progress: bool,
    log_requests: bool,
) -> Result<(Resolved, sim::serving::Report, Vec<SimRequest>)> {
    let how = RunHow {
        progress,
        log_requests,
        ..RunHow::default()
    };
    let (report, requests) = run(&r, trace, how)?;
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
    Ok((r, report, requests))
}

/// The `--json` object: the report's figures at the top level, then what produced them.
pub fn to_json(
    r: &Resolved,
    report: &sim::serving::Report,
    trace_records: usize,
) -> Result<serde_json::Value> {
    let sc = &r.scenario();
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
            "workload": r.workload(),
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
