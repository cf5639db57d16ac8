//! inference-perf's lifecycle reports: `stage_N_lifecycle_metrics.json`, one per load
//! stage, and `summary_lifecycle_metrics.json` over all stages.
//!
//! Read from
//! `kubernetes-sigs/inference-perf@7de5ef2ed6f7934e0ecbc8297e593f79e68430c0:inference_perf/reportgen/base.py`
//! (`summarize_requests`, `ReportGenerator.generate_reports`) and
//! `inference_perf/loadgen/load_generator.py`, `inference_perf/config/loadgen/config.py`
//! at the same commit:
//! - A load is a sequence of stages (`load.stages`: `rate` and `duration`, or
//!   `num_requests` and `concurrency_level` for the `concurrent` type); the generator
//!   waits for a stage's requests to finish (`request_queue.join()`) and `load.interval`
//!   seconds before the next. Each stage is a workload of its own and has its own file.
//! - A stage report: `load_summary` {`count` (requests sent), `schedule_delay`,
//!   `send_duration`, `requested_rate` (the stage's rate), `achieved_rate`,
//!   `concurrency` (concurrent type only)}; `successes` {`count`, `latency`
//!   {`request_latency`, `normalized_time_per_output_token`, `time_per_output_token`,
//!   `time_to_first_token`, `inter_token_latency`}, `throughput`
//!   {`input_tokens_per_sec`, `output_tokens_per_sec`, `total_tokens_per_sec`,
//!   `requests_per_sec`}, `prompt_len` (until 2026-08, then `prompt_tokens`),
//!   `output_len`}; `failures` {`count`, ...}. Each distribution is `mean`, `min`,
//!   `median`, `p{x}` for the configured percentiles, `max`; all times in seconds.
//! - The summary report has no `requested_rate`: it is over all stages, not a load.
//! - The arrival process is not in the report: the load's `type` is `constant` by
//!   default (`LoadConfig.type`), or `poisson`, in the run's config report.
//!
//! Definitions: `time_per_output_token` is `(last token time - first token time) /
//! (output tokens - 1)` per request since commit 3b882ba (2026-04-24; those reports
//! carry `successes.token_count_mismatches`), twin's TPOT; before, it was the same over
//! the response's chunks, which is TPOT where each chunk carries one token.
//! `inter_token_latency` is neither twin's ITL nor TPOT: since 3b882ba every token of
//! a chunk takes the chunk's time (gaps of 0 inside a chunk), before it was the gaps
//! between network reads (the `[DONE]` chunk included). It is not kept.

use super::fields::{Figures, Obj, CONSTANT_ARRIVALS};
use super::{ClientRun, Format, Hints};
use crate::record::*;
use serde_json::Value;

/// Every stage report of the file as a run; the summary report is noted, not read.
pub(super) fn read_all(
    values: &[(usize, Value)],
    origin: &str,
) -> Result<Vec<ClientRun>, Vec<String>> {
    let is_summary = |v: &Value| {
        v.get("load_summary")
            .is_some_and(|l| l.get("requested_rate").is_none_or(Value::is_null))
    };
    let summaries = values.iter().filter(|(_, v)| is_summary(v)).count();
    if summaries == values.len() {
        return Err(vec!["no stage rate (load_summary.requested_rate): the summary over all stages (summary_lifecycle_metrics.json), or a report per adapter, is not one workload: import the stage reports (stage_N_lifecycle_metrics.json)".into()]);
    }
    let mut runs = Vec::new();
    let mut problems = Vec::new();
    let several = values.len() > 1;
    for (k, (line, v)) in values.iter().enumerate() {
        if is_summary(v) {
            continue;
        }
        let part = if several {
            format!("report {} (line {line})", k + 1)
        } else {
            stage_of(origin).map_or_else(|| "stage ?".into(), |s| format!("stage {s}"))
        };
        match read(v, origin, part.clone()) {
            Ok(mut run) => {
                if summaries > 0 {
                    run.notes.push(format!("the file also holds {summaries} report(s) without a stage rate (the summary over all stages): not workloads of their own, not read"));
                }
                runs.push(run);
            }
            Err(p) => problems.extend(p.into_iter().map(|m| format!("{part}: {m}"))),
        }
    }
    if problems.is_empty() {
        Ok(runs)
    } else {
        Err(problems)
    }
}

/// The stage number of a file named `stage_N_lifecycle_metrics.json`.
fn stage_of(origin: &str) -> Option<u32> {
    let name = origin.rsplit(['/', '\\']).next()?;
    let rest = name.split("stage_").nth(1)?;
    rest.split('_').next()?.parse().ok()
}

/// One stage report as a run.
fn read(v: &Value, origin: &str, part: String) -> Result<ClientRun, Vec<String>> {
    let mut p = Vec::new();
    let Some(o) = Obj::of(v, "", &mut p) else {
        return Err(p);
    };
    let mut notes = Vec::new();
    let ls = o.child("load_summary", "load_summary.", &mut p);
    let ok = o.child("successes", "successes.", &mut p);
    let (Some(ls), Some(ok)) = (ls, ok) else {
        p.push("load_summary, successes: a stage report holds both".into());
        return Err(p);
    };
    let load = load(&ls, &mut p, &mut notes);
    let completed = ok.required("count", &mut p, Obj::count);
    if completed == Some(0) {
        p.push("successes.count: 0: no request completed".into());
    }
    if let Some(f) = o
        .child("failures", "failures.", &mut p)
        .and_then(|f| f.count("count", &mut p))
        .filter(|&f| f > 0)
    {
        notes.push(format!(
            "{f} request(s) failed: the figures are of the completed ones"
        ));
    }
    let measured = figures(&ok, &mut p, &mut notes);
    let prompt = if ok.has("prompt_tokens") {
        "prompt_tokens"
    } else {
        "prompt_len"
    };
    let input = length(&ok, prompt, &mut p, &mut notes);
    let output = length(&ok, "output_len", &mut p, &mut notes);
    if !p.is_empty() {
        return Err(p);
    }
    let (Some(load), Some(input), Some(output)) = (load, input, output) else {
        return Err(vec!["the load or the lengths could not be read".into()]);
    };
    if stage_of(origin).is_some_and(|s| s > 0) {
        notes.push(
            "earlier stages ran on the same server just before (its caches as they left them)"
                .into(),
        );
    }
    Ok(ClientRun {
        format: Format::InferencePerf,
        origin: origin.to_string(),
        part: Some(part),
        client: Client {
            tool: Format::InferencePerf.tool().into(),
            load,
            num_prompts: completed,
            warmup_requests: 0,
            input,
            output,
            shared_prefix: 0,
            ignore_eos: true,
            held: Vec::new(),
        },
        measured,
        model: None,
        hints: Hints::default(),
        measured_on: None,
        notes,
    })
}

/// The stage's load: a closed loop for the concurrent type, else the stage's rate.
fn load(ls: &Obj, p: &mut Vec<String>, notes: &mut Vec<String>) -> Option<Load> {
    if let Some(c) = ls.count("concurrency", p) {
        let Some(c) = u32::try_from(c).ok().filter(|&c| c > 0) else {
            p.push(format!("load_summary.concurrency: {c}: must be > 0"));
            return None;
        };
        notes.push(format!(
            "load: the concurrent type, {c} requests in flight (load_summary.concurrency)"
        ));
        return Some(Load::ClosedLoop { concurrency: c });
    }
    let rate = ls.required("requested_rate", p, Obj::number)?;
    if rate <= 0.0 {
        p.push(format!("load_summary.requested_rate: {rate}: must be > 0"));
        return None;
    }
    notes.push(format!("load: {rate} req/s (load_summary.requested_rate); the arrival process is not in the report: inference-perf's default `constant` type taken, held as gamma gaps of shape {CONSTANT_ARRIVALS:e} (a `poisson` run has burstiness 1)"));
    Some(Load::Rate {
        req_s: rate,
        burstiness: CONSTANT_ARRIVALS,
        concurrency: None,
    })
}

/// The figures: latencies in seconds to ms, throughputs per second.
fn figures(ok: &Obj, p: &mut Vec<String>, notes: &mut Vec<String>) -> Measured {
    let mut f = Figures::default();
    if let Some(lat) = ok.child("latency", "successes.latency.", p) {
        for (key, metric, at) in [
            (
                "time_to_first_token",
                Metric::TtftMs,
                "successes.latency.time_to_first_token.",
            ),
            (
                "time_per_output_token",
                Metric::TpotMs,
                "successes.latency.time_per_output_token.",
            ),
            (
                "request_latency",
                Metric::E2eMs,
                "successes.latency.request_latency.",
            ),
        ] {
            let Some(d) = lat.child(key, at, p) else {
                continue;
            };
            for (k, stat) in [
                ("mean", Stat::Mean),
                ("median", Stat::P50),
                ("p90", Stat::P90),
                ("p99", Stat::P99),
            ] {
                if let Some(x) = d.number(k, p) {
                    f.put(metric, stat, x * 1e3, &format!("{key}.{k}"));
                }
            }
        }
    }
    if let Some(t) = ok.child("throughput", "successes.throughput.", p) {
        for (key, metric) in [
            ("output_tokens_per_sec", Metric::OutputTokS),
            ("total_tokens_per_sec", Metric::TotalTokS),
            ("requests_per_sec", Metric::RequestS),
        ] {
            if let Some(x) = t.number(key, p) {
                f.put(metric, Stat::Value, x, key);
            }
        }
    }
    notes.push(if ok.has("token_count_mismatches") {
        "time_per_output_token as TPOT: per token, (last - first token time) / (output - 1) (inference-perf since 3b882ba)"
    } else {
        "time_per_output_token as TPOT: this report predates inference-perf 3b882ba, whose TPOT was over response chunks: TPOT where each chunk carries one token (assumed)"
    }.into());
    notes.push("inter_token_latency not kept: inference-perf's is per token with 0 inside a chunk (or per network read before 3b882ba), not the gaps between streamed chunks".into());
    notes.extend(f.notes());
    f.measured
}

/// A length distribution (`prompt_len`, `prompt_tokens`, `output_len`) as the
/// record's lengths: fixed at its mean, the spread named in a note.
fn length(ok: &Obj, key: &str, p: &mut Vec<String>, notes: &mut Vec<String>) -> Option<Lengths> {
    let Some(d) = ok.get(key) else {
        p.push(format!("successes.{key}: missing"));
        return None;
    };
    let at = if key == "output_len" {
        "successes.output_len."
    } else {
        "successes.prompt."
    };
    let d = Obj::of(d, at, p)?;
    let mean = d.required("mean", p, Obj::number)?;
    if mean < 0.5 {
        p.push(format!("successes.{key}.mean: {mean}: no tokens"));
        return None;
    }
    let tokens = mean.round().min(u32::MAX as f64) as u32;
    let (lo, hi) = (d.number("min", p), d.number("max", p));
    if lo != hi || lo.is_none() {
        let f = |x: Option<f64>| x.map_or("?".into(), |x| format!("{x}"));
        notes.push(format!(
            "{key}: lengths varied ({} to {}, median {}): every request taken as the mean, {tokens}",
            f(lo),
            f(hi),
            f(d.number("median", p))
        ));
    }
    Some(Lengths::Fixed { tokens })
}
