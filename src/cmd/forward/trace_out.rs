//! `twin forward --trace-out FILE.json`: the predicted step as a Chrome trace-event
//! file (Perfetto, chrome://tracing), to open beside a profiler trace of the real run.
//!
//! Tracks: one per stream (tid 0 `compute`, tid 1 `comm`, as a GPU's streams: the two
//! micro-batches take turns on each), a slice per operation named
//! `twin::<category>` with `args.stream`, `args.category`, `args.layer` and
//! `args.micro_batch`; layers as `gpu_user_annotation` ranges on tid 100, each from
//! its first stage's start to the next layer's (so they tile the step, as a profile's
//! layer windows do), and steps (chunks) as `user_annotation` ranges on tid 101.
//! `twin calibrate --from-trace` reads it back.

use anyhow::{Context, Result};
use serde_json::{json, Value};
use sim::cost::analytic::StepTrace;
use spec::insitu::Stream;
use std::path::Path;

const LAYERS_TID: u32 = 100;
const STEPS_TID: u32 = 101;

fn stream_number(stream: Stream) -> u32 {
    match stream {
        Stream::Compute => 0,
        Stream::Comm => 1,
    }
}

fn us(s: f64) -> f64 {
    s * 1e6
}

fn thread_name(tid: u32, name: &str) -> Value {
    json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": name}})
}

/// The steps' timelines, one after another, as trace events.
pub fn events(steps: &[StepTrace]) -> Vec<Value> {
    let mut ev = vec![
        json!({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "twin forward (predicted, rank 0)"}}),
        thread_name(0, "compute"),
        thread_name(1, "comm"),
        thread_name(LAYERS_TID, "layers"),
        thread_name(STEPS_TID, "steps"),
    ];
    let mut t0 = 0.0;
    for (k, step) in steps.iter().enumerate() {
        ev.push(json!({
            "ph": "X", "cat": "user_annotation", "name": format!("step {k}"),
            "ts": us(t0), "dur": us(step.step_s), "pid": 0, "tid": STEPS_TID,
        }));
        for (i, &(a, last)) in step.layers.iter().enumerate() {
            let b = step.layers.get(i + 1).map_or(last, |next| next.0);
            ev.push(json!({
                "ph": "X", "cat": "gpu_user_annotation", "name": format!("layer {i}"),
                "ts": us(t0 + a), "dur": us(b - a), "pid": 0, "tid": LAYERS_TID,
            }));
        }
        let mut end: f64 = 0.0;
        for s in &step.slices {
            let mut args = json!({
                "stream": stream_number(s.stream),
                "category": s.category.key(),
            });
            if let Some(l) = s.layer {
                args["layer"] = json!(l);
            }
            if let Some(m) = s.micro_batch {
                args["micro_batch"] = json!(m);
            }
            ev.push(json!({
                "ph": "X", "cat": "kernel", "name": format!("twin::{}", s.category.key()),
                "ts": us(t0 + s.start_s), "dur": us(s.dur_s), "pid": 0,
                "tid": stream_number(s.stream), "args": args,
            }));
            end = end.max(s.start_s + s.dur_s);
        }
        if step.mtp_draft_s > 0.0 {
            ev.push(json!({
                "ph": "X", "cat": "kernel", "name": "twin::mtp_draft",
                "ts": us(t0 + end), "dur": us(step.mtp_draft_s), "pid": 0, "tid": 0,
                "args": {"stream": 0},
            }));
        }
        t0 += step.step_s;
    }
    ev
}

/// Writes the trace to `path` (whole, or not at all: a temporary file renamed).
pub fn write(path: &Path, steps: &[StepTrace], about: Value) -> Result<()> {
    let doc = json!({
        "traceEvents": events(steps),
        "displayTimeUnit": "ms",
        "otherData": about,
    });
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&doc)?).with_context(|| {
        format!(
            "--trace-out {}: cannot write {}",
            path.display(),
            tmp.display()
        )
    })?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("--trace-out {}: cannot write it", path.display()))?;
    Ok(())
}
