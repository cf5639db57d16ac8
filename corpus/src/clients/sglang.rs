//! `python -m sglang.bench_serving --output-file F` results: one JSON line appended
//! per run.
//!
//! What a line holds, read from
//! `sgl-project/sglang@0033168f0f58b2bc05aa0273bd475d9c01bafb1c:python/sglang/bench_serving.py`
//! (`benchmark`, `calculate_metrics`): `backend`, `dataset_name`, `request_rate` (a
//! Python float: `Infinity` for `inf`), `max_concurrency`, `sharegpt_output_len`,
//! `random_input_len`, `random_output_len`, `random_range_ratio`, `duration`,
//! `completed`, `total_input_tokens`, `total_output_tokens`,
//! `total_output_tokens_retokenized`, `request_throughput`, `input_throughput`,
//! `output_throughput`, `mean_`/`median_`/`std_`/`p99_` of `e2e_latency_ms`,
//! `ttft_ms`, `tpot_ms`, `itl_ms`, `p95_itl_ms`, `concurrency`, `accept_length`; with
//! `--output-details` also `input_lens`, `output_lens` (0 for a failed request),
//! `ttfts`, `itls`, `generated_texts`, `errors`. Later versions add `server_info`
//! (the server's `/get_server_info`: its arguments and `version`), `total_throughput`,
//! `p90_e2e_latency_ms`, `max_output_tokens_per_s` and `max_concurrent_requests`
//! (`sgl-project/sglang:python/sglang/bench_serving.py` as stored in 2026, commit not
//! recorded by the index; and the SGLang 0.5.9 files in `tests/fixtures/bench/`).
//! There is no `num_prompts` key: the requests sent are `completed` plus the failed.
//!
//! Definitions (`calculate_metrics`): TPOT is `(latency - ttft) / (output_len - 1)`
//! per request of more than one output token, `output_len` the server's
//! `completion_tokens`: twin's `tpot_ms`; ITL is every gap between a request's
//! streamed chunks: `itl_ms`; E2E is the request latency: `e2e_ms`. Requests go out
//! with exponential gaps at `request_rate` (`get_request`; none at `inf`), at most
//! `max_concurrency` in flight (a semaphore). `--warmup-requests` (default 1, not
//! written to the file) copies of the first prompt, cut to 32 output tokens, are sent
//! before. `ignore_eos` is on unless `--disable-ignore-eos`.

use super::fields::{date_of, latency_figures, load_of, mean_length, Figures, Obj, Rate};
use super::{vllm, ClientRun, Format, Hints};
use crate::record::*;
use serde_json::Value;

/// SGLang's metric words (`mean_{word}_ms`).
const LATENCIES: [(&str, Metric); 4] = [
    ("ttft", Metric::TtftMs),
    ("tpot", Metric::TpotMs),
    ("itl", Metric::ItlMs),
    ("e2e_latency", Metric::E2eMs),
];

const DEFINITIONS: &str = "client: sglang.bench_serving (python/sglang/bench_serving.py): TTFT to the first streamed chunk, TPOT (E2E - TTFT) / (output - 1) per request, ITL the gaps between streamed chunks, E2E the request latency; Poisson arrivals at a finite rate";

/// One result line as a run.
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
    let load = load(&o, completed, &mut p, &mut notes);
    let (input, output) = lengths(&o, &mut p, &mut notes);
    let mut f = Figures::default();
    latency_figures(&o, &LATENCIES, &mut f, &mut p);
    for (key, metric) in [
        ("request_throughput", Metric::RequestS),
        ("output_throughput", Metric::OutputTokS),
        ("total_throughput", Metric::TotalTokS),
    ] {
        if let Some(x) = o.number(key, &mut p) {
            f.put(metric, Stat::Value, x, key);
        }
    }
    notes.extend(f.notes());
    let (mut hints, model) = match o.child("server_info", "server_info", &mut p) {
        Some(s) => server_info(&s, &mut notes),
        None => (Hints::default(), None),
    };
    if let Some(sp) = hints.settings.speculative.as_mut() {
        accepted(sp, &o, &mut notes);
    }
    if !p.is_empty() {
        return Err(p);
    }
    let (Some(load), Some(input), Some(output)) = (load, input, output) else {
        return Err(vec!["the load or the lengths could not be read".into()]);
    };
    notes.push("warm-up: not in the file; SGLang's default of 1 request (the first prompt, at most 32 output tokens) taken".into());
    let ignore_eos = true;
    Ok(ClientRun {
        format: Format::SglangBench,
        origin: origin.to_string(),
        part,
        client: Client {
            tool: Format::SglangBench.tool().into(),
            load,
            num_prompts: completed,
            warmup_requests: 1,
            input,
            output,
            shared_prefix: 0,
            ignore_eos,
            held: Vec::new(),
        },
        measured: f.measured,
        model,
        hints,
        measured_on: o.text("date", &mut Vec::new()).and_then(date_of),
        notes,
    })
}

/// The load: `request_rate` (Poisson) and `max_concurrency`.
fn load(
    o: &Obj,
    completed: Option<u64>,
    p: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Option<Load> {
    if o.get("request_rate").and_then(Value::as_str) == Some("trace") {
        p.push("request_rate: \"trace\": a replay of a trace's timestamps is not a load a record holds".into());
        return None;
    }
    let rate = o.required("request_rate", p, Obj::rate)?;
    let cap = match o.count("max_concurrency", p) {
        Some(0) => {
            p.push("max_concurrency: 0: must be > 0".into());
            None
        }
        c => c.map(|c| u32::try_from(c).unwrap_or(u32::MAX)),
    };
    let load = load_of(rate, 1.0, cap, completed, notes);
    if load.is_none() && rate == Rate::AllAtOnce {
        p.push("the load: every request at once, and no count of requests".into());
    }
    load
}

/// Each completed request's lengths with `--output-details`; else the mean of the
/// totals, and the dataset's own words in a note.
fn lengths(
    o: &Obj,
    p: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> (Option<Lengths>, Option<Lengths>) {
    if o.has("input_lens") || o.has("output_lens") {
        return vllm::recorded(o, p, notes);
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
    let mut dataset = o
        .text("dataset_name", &mut Vec::new())
        .unwrap_or("?")
        .to_string();
    if dataset.starts_with("random") {
        let n = |k| {
            o.number(k, &mut Vec::new())
                .map_or("?".into(), |x| x.to_string())
        };
        if let Some((di, du)) = random_lengths(o, (inp, out, completed)) {
            let ((il, ih), (ol, oh)) = (bounds(&di), bounds(&du));
            notes.push(format!(
                "lengths: no per-request lists (run without --output-details): drawn from the run's dataset ({dataset}: input uniform on [{il}, {ih}], output on [{ol}, {oh}], bench_serving's random lengths), whose means agree with the file's ({} input and {} output tokens, total / completed)",
                i.mean(),
                u.mean()
            ));
            return (Some(di), Some(du));
        }
        dataset = format!(
            "{dataset}, random_input_len {}, random_output_len {}, random_range_ratio {}",
            n("random_input_len"),
            n("random_output_len"),
            n("random_range_ratio")
        );
    }
    notes.push(format!(
        "lengths: no per-request lists (run without --output-details): every request taken as the mean, {} input and {} output tokens (total / completed); the run's dataset: {dataset}",
        i.mean(),
        u.mean()
    ));
    (Some(i), Some(u))
}

/// The lengths `bench_serving`'s random dataset draws, from the arguments the file
/// states: input uniform on `[max(floor(L r), 1), L]`, output on `[floor(O r), O]`
/// (`sglang/benchmark/datasets/random.py`; twin sends at least one output token);
/// `None` without them, or where the file's mean lengths (`totals`: input, output and
/// completed) lie more than three standard errors from what they give (another
/// dataset's lengths, or a cut run).
fn random_lengths(o: &Obj, totals: (u64, u64, u64)) -> Option<(Lengths, Lengths)> {
    let q = &mut Vec::new();
    let whole = |k: &str, q: &mut Vec<String>| {
        o.number(k, q)
            .filter(|x| *x >= 1.0 && x.fract() == 0.0 && *x <= f64::from(u32::MAX))
    };
    let (l, ol) = (
        whole("random_input_len", q)?,
        whole("random_output_len", q)?,
    );
    let r = o
        .number("random_range_ratio", q)
        .filter(|r| (0.0..=1.0).contains(r))?;
    let uniform = |lo: f64, hi: f64| {
        let (lo, hi) = (lo.max(1.0) as u32, hi as u32);
        if lo == hi {
            Lengths::Fixed { tokens: hi }
        } else {
            Lengths::Uniform { low: lo, high: hi }
        }
    };
    let (di, du) = (uniform((l * r).floor(), l), uniform((ol * r).floor(), ol));
    let (inp, out, n) = totals;
    let agrees = |d: &Lengths, total: u64| {
        let (lo, hi) = bounds(d);
        let sd = (f64::from(hi - lo) + 1.0) / 12f64.sqrt();
        let mean = total as f64 / n as f64;
        (mean - d.mean()).abs() <= 3.0 * sd / (n as f64).sqrt() + 1.0
    };
    (agrees(&di, inp) && agrees(&du, out)).then_some((di, du))
}

/// The least and most tokens of fixed or uniform lengths.
fn bounds(d: &Lengths) -> (u32, u32) {
    match d {
        Lengths::Uniform { low, high } => (*low, *high),
        other => {
            let m = other.mean() as u32;
            (m, m)
        }
    }
}

/// The speculative decoding the server ran (`server_info.speculative_algorithm`),
/// as drafts from the model's MTP layers: EAGLE (on an MTP checkpoint, or EAGLE3's
/// one-layer head) and NEXTN draft `speculative_num_steps` tokens a step, chained with
/// `speculative_eagle_topk` 1 (a wider tree is taken as its depth, noted). Another
/// drafter (a standalone model, n-grams) is not modelled: noted, and none returned.
fn speculative(s: &Obj, notes: &mut Vec<String>) -> Option<Speculative> {
    let q = &mut Vec::new();
    let alg = s
        .text("speculative_algorithm", q)
        .filter(|a| !matches!(*a, "null" | "none" | "NONE" | ""))?;
    if !matches!(
        alg.to_ascii_uppercase().as_str(),
        "EAGLE" | "EAGLE3" | "NEXTN" | "MTP"
    ) {
        notes.push(format!(
            "the server decoded speculatively with {alg} (server_info.speculative_algorithm), a drafter twin does not model: priced as plain decoding"
        ));
        return None;
    }
    let steps = s.count("speculative_num_steps", q).filter(|&n| n > 0)?;
    let n = u32::try_from(steps).unwrap_or(16).min(16);
    if s.count("speculative_eagle_topk", q).is_some_and(|k| k > 1) {
        notes.push(format!("speculative decoding: a draft tree (speculative_eagle_topk above 1) taken as a chain of its {n} steps"));
    }
    Some(Speculative {
        method: SpecMethod::Mtp,
        draft_tokens: n,
        acceptance: None,
    })
}

/// The acceptance of `sp`'s drafts from the run's `accept_length` (the server's mean
/// tokens a verify step, the verified one included: SGLang's `avg_spec_accept_length`):
/// one rate per draft giving `accept_length - 1` accepted drafts a step, noted; without
/// it the record has none (and is not priced).
fn accepted(sp: &mut Speculative, o: &Obj, notes: &mut Vec<String>) {
    let n = sp.draft_tokens;
    match o.number("accept_length", &mut Vec::new()).filter(|l| *l >= 1.0) {
        Some(l) => {
            let per_step = (l - 1.0).min(f64::from(n));
            let a = super::acceptance_for(per_step, n);
            sp.acceptance = Some(a);
            notes.push(format!("speculative decoding: {n} drafts a step (server_info.speculative_num_steps), {l:.2} tokens a verify step (accept_length): each draft accepted at {a:.3} given those before it, the drafter taken as the model's MTP layers"));
        }
        None => notes.push(format!("speculative decoding: {n} drafts a step (server_info.speculative_num_steps); the file gives no accept_length, so no acceptance")),
    }
}

/// The server's own words (`server_info`): engine, version, settings, layout.
fn server_info(s: &Obj, notes: &mut Vec<String>) -> (Hints, Option<String>) {
    let q = &mut Vec::new();
    let size = |k: &str, q: &mut Vec<String>| {
        s.count(k, q)
            .filter(|&n| n > 0)
            .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
    };
    let settings = EngineSettings {
        max_batched_tokens: size("chunked_prefill_size", q),
        max_running: size("max_running_requests", q),
        memory_fraction: s.number("mem_fraction_static", q),
        prefix_caching: s
            .get("disable_radix_cache")
            .and_then(Value::as_bool)
            .map(|d| !d),
        scheduler_recv_interval: size("scheduler_recv_interval", q).filter(|&n| n > 1),
        max_prefill_tokens: size("max_prefill_tokens", q),
        mixed_chunk: s.get("enable_mixed_chunk").and_then(Value::as_bool),
        ..EngineSettings::default()
    };
    let disagg = s
        .text("disaggregation_mode", q)
        .filter(|m| !matches!(*m, "null" | "none" | ""));
    let workers = match disagg {
        Some(mode) => {
            notes.push(format!("the server is the {mode} side of a disaggregated deployment (server_info.disaggregation_mode): its arguments are of that side only"));
            None
        }
        None => {
            let (tp, dp) = (
                size("tp_size", q).unwrap_or(1),
                size("dp_size", q).unwrap_or(1),
            );
            let dp_attention = s.get("enable_dp_attention").and_then(Value::as_bool) == Some(true);
            // With DP attention, `tp_size` GPUs hold `dp_size` attention replicas of
            // `tp_size / dp_size` GPUs each; without it, `dp_size` is whole replicas.
            let (count, tp, adp) = if dp_attention && dp > 1 {
                (1, (tp / dp).max(1), dp)
            } else {
                (dp, tp, 1)
            };
            let ep = size("ep_size", q).unwrap_or(1);
            Some(Workers {
                count: Some(count),
                tp,
                pp: size("pp_size", q).unwrap_or(1),
                attention_dp: adp,
                moe_tp: (tp * adp / ep).max(1),
                moe_ep: ep,
                max_batch: None,
            })
        }
    };
    let mut settings = settings;
    settings.speculative = speculative(s, notes);
    let kv = s.text("kv_cache_dtype", q).filter(|k| *k != "auto");
    let model = s
        .text("served_model_name", q)
        .or_else(|| s.text("model_path", q))
        .map(str::to_string);
    let hints = Hints {
        engine: Some(EngineName::Sglang),
        version: s.text("version", q).map(str::to_string),
        settings,
        workers,
        kv_cache: kv.map(str::to_string),
    };
    (hints, model)
}
