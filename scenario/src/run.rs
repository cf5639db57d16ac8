//! A resolved run through the simulator: the one way from a [`Resolved`] into `sim`
//! (`twin simulate`, `cost`, `validate` and the fuzz tests run simulations through
//! here; the binary adds its progress bar and Ctrl-C), and the `--json` object of a
//! run.

use crate::{resolve_with_trace, Resolved, RunRequest};
use anyhow::{anyhow, bail, Result};
use serde_json::json;
use sim::serving::{simulate_with, Control, Record, Report, SimRequest, TraceRecord};

/// How [`simulate`] runs a resolved scenario; the default is its own seed and cost
/// parameters, without a request log.
#[derive(Clone, Copy, Default)]
pub struct RunHow<'a> {
    /// Another seed than the resolved one (`--seeds`).
    pub seed: Option<u64>,
    /// Other cost parameters than the resolved ones (a band's draw).
    pub params: Option<&'a sim::cost::CostParams>,
    /// Also return every request completed (`--requests-out`).
    pub log_requests: bool,
}

/// Runs a resolved scenario on `trace` under `control` (a stop flag, a progress
/// callback): the report and, when asked, every request completed.
pub fn simulate(
    r: &Resolved,
    trace: &[TraceRecord],
    how: RunHow,
    control: &Control,
) -> Result<(Report, Vec<SimRequest>)> {
    let (seed, params) = (how.seed.unwrap_or(r.seed), how.params.unwrap_or(&r.params));
    let costs = r.pool_costs(params);
    let input = r.input(&costs, trace);
    let record = Record {
        requests: how.log_requests,
        steps: false,
    };
    simulate_with(&input, seed, control, record)
        .map(|o| (o.report, o.requests))
        .map_err(|e| anyhow!("{}: {e}", r.scenario_origin))
}

/// Resolves and runs the request (no stop flag, no progress); returns the report with
/// its resolved inputs and the number of trace records replayed.
pub fn execute(req: &RunRequest) -> Result<(Resolved, Report, usize)> {
    let (mut r, trace) = resolve_with_trace(req)?;
    let (report, _) = simulate(&r, &trace, RunHow::default(), &Control::default())?;
    note_no_completion(&mut r, &report);
    Ok((r, report, trace.len()))
}

/// A run in which no request completed says why in a note.
pub fn note_no_completion(r: &mut Resolved, report: &Report) {
    if report.requests_completed > 0 {
        return;
    }
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

/// The `--json` object: the report's figures at the top level, then what produced them.
pub fn to_json(r: &Resolved, report: &Report, trace_records: usize) -> Result<serde_json::Value> {
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
    if let Some(b) = &r.runs_band {
        out.insert(
            "runs_band".into(),
            b.json(report.ttft_ms.mean, report.tpot_ms.mean),
        );
    }
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
