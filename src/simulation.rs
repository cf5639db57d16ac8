//! Running a resolved scenario through the simulator as a command does: stoppable by
//! Ctrl-C, with a progress bar ([`scenario::run`] runs it). `twin simulate`, `cost`
//! and `validate` run simulations through here.

use crate::interrupt::{self, Interrupted};
use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use scenario::run::{note_no_completion, simulate, RunHow};
use scenario::{resolve_with_trace, Resolved, RunRequest};
use sim::serving::{Control, Report, SimRequest, TraceRecord};
use std::sync::atomic::AtomicBool;

/// Runs a resolved scenario on `trace`, stoppable by Ctrl-C, with a progress bar on
/// stderr when `progress` (and stderr is a terminal).
pub fn run(
    r: &Resolved,
    trace: &[TraceRecord],
    how: RunHow,
    progress: bool,
) -> Result<(Report, Vec<SimRequest>)> {
    let stop: &AtomicBool = interrupt::install();
    let bar = if progress {
        let len = r.scenario().duration_s as u64;
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
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
    let out = simulate(r, trace, how, &control);
    bar.finish_and_clear();
    out
}

/// Resolves and runs the request (stoppable by Ctrl-C); returns the report with its
/// resolved inputs and the number of trace records replayed.
pub fn execute(req: &RunRequest) -> Result<(Resolved, Report, usize)> {
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
) -> Result<(Resolved, Report, Vec<SimRequest>)> {
    let how = RunHow {
        log_requests,
        ..RunHow::default()
    };
    let (report, requests) = run(&r, trace, how, progress)?;
    note_no_completion(&mut r, &report);
    Ok((r, report, requests))
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

/// Rows of a run (its simulated steps, its requests) as CSV at `path`, written whole
/// to a sibling file first, so a failed write leaves what was there.
pub fn write_csv<T: serde::Serialize>(path: &std::path::Path, rows: &[T]) -> Result<()> {
    use anyhow::Context;
    let mut w = csv::Writer::from_writer(Vec::new());
    for row in rows {
        w.serialize(row)?;
    }
    let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))?;
    let tmp = path.with_extension("csv.partial");
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}
