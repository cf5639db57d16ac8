//! `vllm bench serve --save-result` result JSON (and the older
//! `benchmarks/benchmark_serving.py`'s), with or without `--save-detailed`.
//!
//! What the file holds, read from
//! `vllm-project/vllm@009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1:vllm/benchmarks/serve.py`
//! (`main_async`, `benchmark`, `calculate_metrics`):
//! - `date` (`%Y%m%d-%H%M%S`), `backend`, `label`, `model_id`, `tokenizer_id`,
//!   `num_prompts` (`--num-prompts`, requests sent), `request_rate` (`"inf"` as a
//!   string when infinite), `burstiness`, `max_concurrency` (`null` without a cap),
//!   `ramp_up_strategy` with `ramp_up_start_rps`/`ramp_up_end_rps` on a ramp;
//! - `duration`, `completed` (successful requests), `failed`, `total_input_tokens`,
//!   `total_output_tokens`, `request_throughput` (completed / duration),
//!   `output_throughput` (output tokens / duration), `total_token_throughput`
//!   (input and output tokens / duration);
//! - per metric of `--percentile-metrics` (`ttft`, `tpot`, `itl` by default, `e2el`
//!   when asked): `mean_{m}_ms`, `median_{m}_ms`, `std_{m}_ms` and `p{x}_{m}_ms` for
//!   each `--metric-percentiles` x (`99` by default; `p99.9` for a fraction);
//! - with `--save-detailed` only: `input_lens` (each request's prompt length) and
//!   `output_lens` (its generated length, 0 for a failed request), `ttfts`, `itls`,
//!   `errors`, in sending order. Without it they are deleted before saving.
//!
//! - when the server ran speculative decoding, its Prometheus counters over the run
//!   (`fetch_spec_decode_metrics`, before and after): `spec_decode_num_drafts`,
//!   `spec_decode_draft_tokens`, `spec_decode_accepted_tokens` (and the derived
//!   `spec_decode_acceptance_rate`, a percentage, `spec_decode_acceptance_length`,
//!   `spec_decode_per_position_acceptance_rates`).
//!
//! Definitions (`calculate_metrics`): TTFT runs to the first streamed chunk; TPOT is
//! `(latency - ttft) / (output_len - 1)` per request of more than one output token:
//! twin's `tpot_ms`; ITL is every gap between a request's streamed chunks: twin's
//! `itl_ms`; E2EL is the request latency: `e2e_ms`. Requests go out at `request_rate`
//! with gamma gaps of shape `burstiness` (`get_request`), held at most
//! `max_concurrency` in flight (a semaphore); at rate `inf` all are released at once,
//! so with a cap the run is a closed loop at the cap. `--num-warmups` is not written
//! to the file.
//!
//! Older files: `benchmarks/benchmark_serving.py` before `--burstiness` (vLLM PR
//! #10105, 2024-11-07) wrote no `burstiness` and no `max_concurrency`, and before PR
//! #9984 (2024-11-04) swapped its E2E mean and median
//! (`vllm-project/vllm@8668d7c05027b98ac66bd5540955dd2ce3a0f318:benchmarks/benchmark_serving.py`:
//! `mean_e2el_ms=np.median(e2els ...)`, `median_e2el_ms=np.mean(e2els ...)`): a file
//! without `burstiness` has its E2E mean and median left out.

use super::fields::{
    date_of, latency_figures, load_of, mean_length, Figures, Obj, Rate, CONSTANT_ARRIVALS,
};
use super::{ClientRun, Format, Hints};
use crate::record::*;
use serde_json::Value;

/// vLLM's metric words (`mean_{word}_ms`).
const LATENCIES: [(&str, Metric); 4] = [
    ("ttft", Metric::TtftMs),
    ("tpot", Metric::TpotMs),
    ("itl", Metric::ItlMs),
    ("e2el", Metric::E2eMs),
];

const DEFINITIONS: &str = "client: vllm bench serve (vllm/benchmarks/serve.py): TTFT to the first streamed chunk, TPOT (E2E - TTFT) / (output - 1) per request, ITL the gaps between streamed chunks, E2E the request latency";

/// One result object as a run.
pub(super) fn read(
    v: &Value,
    origin: &str,
    part: Option<String>,
) -> Result<ClientRun, Vec<String>> {
    let mut p = Vec::new();
    let Some(o) = Obj::of(v, "", &mut p) else {
        return Err(p);
    };
    let mut notes = vec![DEFINITIONS.to_string()];
    let completed = o.required("completed", &mut p, Obj::count);
    if completed == Some(0) {
        p.push("completed: 0: no request completed".into());
    }
    if let Some(f) = o.count("failed", &mut p).filter(|&f| f > 0) {
        notes.push(format!(
            "{f} request(s) failed: the figures and lengths are of the completed ones"
        ));
    }
    if o.has("ramp_up_strategy") {
        p.push("ramp_up_strategy: a ramped request rate is not a load a record holds".into());
    }
    let (input, output) = lengths(&o, &mut p, &mut notes);
    let load = load(&o, completed, &mut p, &mut notes);
    let measured = figures(&o, &mut p, &mut notes);
    if !p.is_empty() {
        return Err(p);
    }
    let (Some(load), Some(input), Some(output)) = (load, input, output) else {
        return Err(vec!["the load or the lengths could not be read".into()]);
    };
    notes.push("warm-up: the file does not record --num-warmups (default 0): none taken".into());
    let mut hints = Hints::default();
    hints.settings.speculative = speculative(&o, &mut notes);
    Ok(ClientRun {
        format: Format::VllmBench,
        origin: origin.to_string(),
        part,
        client: Client {
            tool: Format::VllmBench.tool().into(),
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
        model: o.text("model_id", &mut Vec::new()).map(str::to_string),
        hints,
        measured_on: o.text("date", &mut Vec::new()).and_then(date_of),
        notes,
    })
}

/// The load: `request_rate`, `burstiness` and `max_concurrency`.
fn load(
    o: &Obj,
    completed: Option<u64>,
    p: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Option<Load> {
    let rate = o.required("request_rate", p, Obj::rate);
    let burstiness = match o.get("burstiness") {
        None => 1.0,
        Some(Value::String(s)) if s == "Infinity" => {
            notes.push(format!(
                "burstiness inf: constant gaps, held as gamma gaps of shape {CONSTANT_ARRIVALS:e}"
            ));
            CONSTANT_ARRIVALS
        }
        Some(_) => match o.number("burstiness", p) {
            Some(b) if b > 0.0 => b,
            Some(b) => {
                p.push(format!("burstiness: {b}: must be > 0"));
                1.0
            }
            None => 1.0,
        },
    };
    let cap = match o.count("max_concurrency", p) {
        Some(0) => {
            p.push("max_concurrency: 0: must be > 0".into());
            None
        }
        Some(c) => Some(u32::try_from(c).unwrap_or(u32::MAX)),
        None => None,
    };
    let load = load_of(rate?, burstiness, cap, completed, notes);
    if load.is_none() && rate == Some(Rate::AllAtOnce) {
        p.push("the load: every request at once, and no count of requests".into());
    }
    load
}

/// The lengths: each request's own with `--save-detailed`, else the mean of the
/// totals over the completed requests.
fn lengths(
    o: &Obj,
    p: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> (Option<Lengths>, Option<Lengths>) {
    if o.has("input_lens") || o.has("output_lens") {
        return recorded(o, p, notes);
    }
    let inp = o.required("total_input_tokens", p, Obj::count);
    let out = o.required("total_output_tokens", p, Obj::count);
    // A missing or zero `completed` is named where it is read.
    let completed = o.count("completed", &mut Vec::new()).filter(|&c| c > 0);
    let (Some(inp), Some(out), Some(completed)) = (inp, out, completed) else {
        return (None, None);
    };
    if inp == 0 || out == 0 {
        p.push("total_input_tokens, total_output_tokens: no tokens to take lengths from".into());
        return (None, None);
    }
    let (i, u) = (mean_length(inp, completed), mean_length(out, completed));
    notes.push(format!(
        "lengths: no per-request lists (saved without --save-detailed): every request taken as the mean, {} input and {} output tokens (total / completed)",
        i.mean(),
        u.mean()
    ));
    (Some(i), Some(u))
}

/// Each completed request's lengths, in sending order (a failed request has output
/// length 0 or an error).
pub(super) fn recorded(
    o: &Obj,
    p: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> (Option<Lengths>, Option<Lengths>) {
    let inp = o.required("input_lens", p, Obj::counts);
    let out = o.required("output_lens", p, Obj::counts);
    let (Some(inp), Some(out)) = (inp, out) else {
        return (None, None);
    };
    if inp.len() != out.len() {
        p.push(format!(
            "input_lens ({}) and output_lens ({}) differ in length",
            inp.len(),
            out.len()
        ));
        return (None, None);
    }
    let errors: Vec<bool> = match o.get("errors").and_then(Value::as_array) {
        Some(e) if e.len() == inp.len() => e
            .iter()
            .map(|x| x.as_str().is_some_and(|s| !s.is_empty()))
            .collect(),
        _ => vec![false; inp.len()],
    };
    let keep: Vec<usize> = (0..inp.len())
        .filter(|&i| out[i] > 0 && inp[i] > 0 && !errors[i])
        .collect();
    if keep.is_empty() {
        p.push("input_lens, output_lens: no completed request".into());
        return (None, None);
    }
    let as_u32 = |v: &[u64]| -> Vec<u32> {
        keep.iter()
            .map(|&i| u32::try_from(v[i]).unwrap_or(u32::MAX))
            .collect()
    };
    notes.push(format!(
        "lengths: each completed request's own (input_lens, output_lens: {} of {})",
        keep.len(),
        inp.len()
    ));
    (
        Some(Lengths::Recorded {
            tokens: as_u32(&inp),
        }),
        Some(Lengths::Recorded {
            tokens: as_u32(&out),
        }),
    )
}

/// The speculative decoding the server's counters measured over the run, if it ran
/// any: the drafts a step (draft tokens over drafts) and one acceptance per draft that
/// gives the tokens accepted a step the counters give (`a + a^2 + ... + a^n`, each
/// draft accepted given those before it). The counters do not name the drafter: it
/// is taken as the model's MTP layers, as twin prices drafts.
fn speculative(o: &Obj, notes: &mut Vec<String>) -> Option<Speculative> {
    let mut ignore = Vec::new();
    let steps = o.count("spec_decode_num_drafts", &mut ignore)?;
    let drafted = o.count("spec_decode_draft_tokens", &mut ignore)?;
    let accepted = o.count("spec_decode_accepted_tokens", &mut ignore)?;
    if steps == 0 || drafted == 0 {
        return None;
    }
    let n = ((drafted as f64 / steps as f64).round() as u32).clamp(1, 16);
    let per_step = (accepted as f64 / steps as f64).min(f64::from(n));
    let a = super::acceptance_for(per_step, n);
    notes.push(format!(
        "speculative decoding: {n} drafts a step, {per_step:.2} accepted a step ({accepted} of {drafted} drafted tokens in {steps} steps, the server's counters over the run): each draft accepted at {a:.3} given those before it; the drafter taken as the model's MTP layers (the counters do not name it)"
    ));
    Some(Speculative {
        method: SpecMethod::Mtp,
        draft_tokens: n,
        acceptance: Some(a),
    })
}

/// The figures: latencies in ms, throughputs as rates.
fn figures(o: &Obj, p: &mut Vec<String>, notes: &mut Vec<String>) -> Measured {
    let mut f = Figures::default();
    latency_figures(o, &LATENCIES, &mut f, p);
    for (key, metric) in [
        ("request_throughput", Metric::RequestS),
        ("output_throughput", Metric::OutputTokS),
        ("total_token_throughput", Metric::TotalTokS),
    ] {
        if let Some(v) = o.number(key, p) {
            f.put(metric, Stat::Value, v, key);
        }
    }
    if !o.map.contains_key("burstiness") {
        let e2e = f.measured.get_mut(&Metric::E2eMs);
        if let Some(e2e) = e2e.filter(|m| m.contains_key(&Stat::Mean) || m.contains_key(&Stat::P50))
        {
            e2e.remove(&Stat::Mean);
            e2e.remove(&Stat::P50);
            notes.push("E2E mean and median left out: a file without `burstiness` is of benchmark_serving.py before 2024-11-07, which until 2024-11-04 (vLLM PR #9984) wrote the one as the other".into());
        }
        f.measured.retain(|_, s| !s.is_empty());
    }
    notes.extend(f.notes());
    f.measured
}
