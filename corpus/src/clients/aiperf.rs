//! aiperf's `profile_export_aiperf.json` and genai-perf's
//! `profile_export_genai_perf.json`: one JSON object of metric statistics, each
//! `{"unit": ..., "avg": ..., "p50": ..., "p90": ..., "p99": ..., "std": ...}`, and the
//! run's `input_config`.
//!
//! The metrics, read from
//! `ai-dynamo/aiperf@db4f6397d11ee2d4cfbb41f70b2327315163dcf0:aiperf/metrics/types/`
//! and `triton-inference-server/perf_analyzer@263c5f6e0c7a6c15472a54409174981f67930cfe:genai-perf/genai_perf/profile_data_parser/llm_profile_data_parser.py`:
//! - `time_to_first_token`: to the first response chunk: `ttft_ms`;
//! - `inter_token_latency`: `(request_latency - ttft) / (output_sequence_length - 1)`
//!   per request (`inter_token_latency_metric.py`; genai-perf's parser likewise): that
//!   is twin's TPOT, `tpot_ms`, whatever the name;
//! - `inter_chunk_latency` (aiperf): the gaps between a request's response chunks:
//!   `itl_ms`;
//! - `request_latency`: `e2e_ms`;
//! - `output_token_throughput` and `request_throughput`: the run's rates, `avg` only;
//! - `input_sequence_length`, `output_sequence_length`: per-request token counts;
//!   `request_count`: the valid requests; `error_request_count`: the failed.
//!
//! Units: each block's `unit` is authoritative. aiperf converts its nanosecond
//! latencies to its display unit, `ms`, before export
//! (`aiperf/exporters/display_units_utils.py`; units `ns`, `us`, `ms`, `sec` in
//! `aiperf/common/enums/metric_enums.py`); genai-perf scales its nanoseconds by 1e-6
//! and labels them `ms` (`genai_perf/metrics/statistics.py`, `scale_data`,
//! `_add_units`). Rates are `requests/sec` and `tokens/sec`.
//!
//! The input config, in the versions read:
//! - aiperf 1 (`aiperf/common/config/*.py` at db4f6397, exported with
//!   `exclude_unset`: only what the user set): `endpoint.model_names`,
//!   `loadgen.{concurrency, request_rate, request_rate_mode (poisson | constant |
//!   concurrency_burst), request_count, warmup_request_count, benchmark_duration}`,
//!   `input.prompt.input_tokens.{mean, stddev}`, `input.prompt.output_tokens.{mean,
//!   stddev}`, `input.extra` (`--extra-inputs`, as `[key, value]` pairs). Without a rate
//!   or a concurrency, aiperf runs a concurrency of 1 (`user_config.py`,
//!   `validate_timing_mode`).
//! - aiperf 2 (`src/aiperf/config/config.py@2d76a5e5`, `phases.py@aa0efdfd`):
//!   `models.items[].name`, `phases` by name, each `{type (concurrency | poisson |
//!   gamma | constant | user_centric | fixed_schedule), kind (warmup | profiling),
//!   requests, concurrency, rate, smoothness}`; its lengths are read from the measured
//!   sequence lengths.
//! - genai-perf with a config file (`genai_perf/config/input/*.py` at 263c5f6e,
//!   `BaseConfig.to_json_dict`, unset values as `""`): `model_names`,
//!   `perf_analyzer.{stimulus: {concurrency | request_rate}, warmup_request_count}`,
//!   `input.{synthetic_tokens, output_tokens}.{mean, stddev}`, `input.extra`.
//! - genai-perf before it (`genai_perf/parser.py` and `export_data/json_exporter.py` at
//!   perf_analyzer 9fd79801's parent: the argparse namespace): `model`, `concurrency`,
//!   `request_rate`, `request_count`, `warmup_request_count`,
//!   `synthetic_input_tokens_{mean, stddev}`, `output_tokens_{mean, stddev}` (mean -1:
//!   unset), `extra_inputs`.
//!
//! genai-perf's `--request-rate` goes to perf_analyzer, whose request distribution is
//! constant by default (`perf_analyzer@263c5f6e:src/command_line_parser.h`,
//! `Distribution::CONSTANT`), so its gaps are constant.

use super::fields::{date_of, mean_and_spread, number_of, Figures, Obj, CONSTANT_ARRIVALS};
use super::{ClientRun, Format, Hints};
use crate::record::*;
use serde_json::Value;

/// The metric blocks a record holds, and the metric each is.
const BLOCKS: [(&str, Metric); 6] = [
    ("time_to_first_token", Metric::TtftMs),
    ("inter_token_latency", Metric::TpotMs),
    ("inter_chunk_latency", Metric::ItlMs),
    ("request_latency", Metric::E2eMs),
    ("output_token_throughput", Metric::OutputTokS),
    ("request_throughput", Metric::RequestS),
];

const DEFINITIONS: &str = "metrics: time_to_first_token as TTFT; inter_token_latency, (E2E - TTFT) / (output - 1) per request, as TPOT; inter_chunk_latency (the gaps between response chunks) as ITL; request_latency as E2E";

/// What the input config says of the load and the lengths.
#[derive(Debug, Default)]
struct Config {
    model: Option<String>,
    concurrency: Option<u32>,
    rate: Option<f64>,
    /// Gamma shape of the gaps (1: Poisson).
    burstiness: f64,
    requests: Option<u64>,
    warmup: u64,
    input: Option<(f64, f64)>,
    output: Option<(f64, f64)>,
    ignore_eos: Option<bool>,
}

/// The export as a run.
pub(super) fn read(v: &Value, origin: &str, format: Format) -> Result<ClientRun, Vec<String>> {
    let mut p = Vec::new();
    let Some(o) = Obj::of(v, "", &mut p) else {
        return Err(p);
    };
    let mut notes = vec![DEFINITIONS.to_string()];
    let cfg = match o.child("input_config", "input_config.", &mut p) {
        Some(c) => config(&c, format, &mut p, &mut notes),
        None => {
            p.push("input_config: missing (the run's load is not known without it)".into());
            Config::default()
        }
    };
    let (measured, seq) = metrics(&o, &mut p, &mut notes);
    let (input, output, ignore_eos) = lengths(&cfg, &seq, &mut p, &mut notes);
    let load = match (cfg.rate, cfg.concurrency) {
        (Some(r), c) => Load::Rate {
            req_s: r,
            burstiness: cfg.burstiness,
            concurrency: c,
        },
        (None, Some(c)) => Load::ClosedLoop { concurrency: c },
        (None, None) => {
            notes.push(
                "load: neither a rate nor a concurrency set: the tool's concurrency of 1".into(),
            );
            Load::ClosedLoop { concurrency: 1 }
        }
    };
    let num_prompts = seq.requests.or(cfg.requests);
    if let (Some(n), Some(c)) = (seq.requests, cfg.requests) {
        if n != c {
            notes.push(format!("{n} valid requests measured of {c} asked for"));
        }
    }
    if measured.is_empty() {
        p.push("no metric a record holds (time_to_first_token, inter_token_latency, request_latency, throughputs)".into());
    }
    if !p.is_empty() {
        return Err(p);
    }
    let (Some(input), Some(output)) = (input, output) else {
        return Err(vec!["the lengths could not be read".into()]);
    };
    Ok(ClientRun {
        format,
        origin: origin.to_string(),
        part: None,
        client: Client {
            tool: format.tool().into(),
            load,
            num_prompts,
            warmup_requests: cfg.warmup,
            input,
            output,
            shared_prefix: 0,
            ignore_eos,
            held: Vec::new(),
        },
        measured,
        model: cfg.model,
        hints: Hints::default(),
        measured_on: o.text("start_time", &mut Vec::new()).and_then(date_of),
        notes,
    })
}

/// Per-request length statistics and the request counts the export measured.
#[derive(Debug, Default)]
struct Sequences {
    input: Option<(f64, f64, bool)>,
    output: Option<(f64, f64, bool)>,
    requests: Option<u64>,
}

/// The figures of the metric blocks, in ms and per second, and the sequence lengths.
fn metrics(o: &Obj, p: &mut Vec<String>, notes: &mut Vec<String>) -> (Measured, Sequences) {
    let mut f = Figures::default();
    for (key, metric) in BLOCKS {
        let at = format!("{key}.");
        let Some(b) = o.get(key) else { continue };
        let Some(b) = Obj::of(b, &at, p) else {
            continue;
        };
        let Some(scale) = scale_of(&b, metric, p) else {
            continue;
        };
        if !metric.is_latency() {
            if let Some(x) = b.number("avg", p) {
                f.put(metric, Stat::Value, x * scale, key);
            }
            continue;
        }
        for (stat_key, stat) in [
            ("avg", Stat::Mean),
            ("p50", Stat::P50),
            ("p90", Stat::P90),
            ("p99", Stat::P99),
        ] {
            if let Some(x) = b.number(stat_key, p) {
                f.put(metric, stat, x * scale, &format!("{key}.{stat_key}"));
            }
        }
    }
    notes.extend(f.notes());
    let mut seq = Sequences::default();
    let lengths = |key: &'static str, at: &'static str, p: &mut Vec<String>| {
        let b = Obj::of(o.get(key)?, at, p)?;
        let mean = b.number("avg", p)?;
        let (lo, hi) = (b.number("min", p), b.number("max", p));
        let fixed = lo.zip(hi).is_some_and(|(a, z)| a == z);
        Some((mean, b.number("std", p).unwrap_or(0.0), fixed))
    };
    seq.input = lengths("input_sequence_length", "input_sequence_length.", p);
    seq.output = lengths("output_sequence_length", "output_sequence_length.", p);
    let count = |key: &'static str, at: &'static str, p: &mut Vec<String>| {
        let b = Obj::of(o.get(key)?, at, p)?;
        b.number("avg", p).map(|x| x.round() as u64)
    };
    seq.requests = count("request_count", "request_count.", p).filter(|&n| n > 0);
    if let Some(e) = count("error_request_count", "error_request_count.", p).filter(|&n| n > 0) {
        notes.push(format!(
            "{e} request(s) failed: the figures are of the valid ones"
        ));
    }
    (f.measured, seq)
}

/// The factor from a block's unit to twin's (ms for latencies, per second for rates).
fn scale_of(b: &Obj, metric: Metric, p: &mut Vec<String>) -> Option<f64> {
    let Some(unit) = b.text("unit", p) else {
        p.push(format!("{}unit: missing", b.at));
        return None;
    };
    let u = unit.trim().to_ascii_lowercase();
    let scale = if metric.is_latency() {
        match u.as_str() {
            "ns" | "nanoseconds" => Some(1e-6),
            "us" | "microseconds" => Some(1e-3),
            "ms" | "milliseconds" => Some(1.0),
            "s" | "sec" | "seconds" => Some(1e3),
            _ => None,
        }
    } else {
        let per_s = ["/sec", "/s", "per sec", "per second"]
            .iter()
            .any(|s| u.ends_with(s));
        per_s.then_some(1.0)
    };
    if scale.is_none() {
        p.push(format!(
            "{}unit: `{unit}`: not a unit of {}",
            b.at,
            metric.key()
        ));
    }
    scale
}

/// The lengths: the config's where it sets them (and, for the output, where the
/// server was told to ignore EOS), else the measured ones.
fn lengths(
    cfg: &Config,
    seq: &Sequences,
    p: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> (Option<Lengths>, Option<Lengths>, bool) {
    let measured = |s: (f64, f64, bool)| mean_and_spread(s.0, if s.2 { 0.0 } else { s.1 });
    let input = match (cfg.input, seq.input) {
        (Some((m, sd)), _) => Some(mean_and_spread(m, sd)),
        (None, Some(s)) => {
            notes.push("input lengths: as measured (input_sequence_length mean and std), the config not setting them".into());
            Some(measured(s))
        }
        (None, None) => {
            p.push(
                "input lengths: neither set in the config nor measured (input_sequence_length)"
                    .into(),
            );
            None
        }
    };
    let ignore_eos = cfg.ignore_eos == Some(true);
    // The record's lengths are what each request generates: as asked with
    // ignore_eos, as measured otherwise; only lengths asked for without ignore_eos
    // and never measured may have ended earlier.
    let mut generates_all = true;
    let output = match (cfg.output, seq.output) {
        (Some((m, sd)), _) if ignore_eos => Some(mean_and_spread(m, sd)),
        (asked, Some(s)) => {
            notes.push(format!(
                "output lengths: as generated (output_sequence_length mean {:.1}, std {:.1}){}",
                s.0,
                s.1,
                match asked {
                    Some((m, _)) => format!("; the config asked for {m} without ignore_eos"),
                    None => String::new(),
                }
            ));
            Some(measured(s))
        }
        (Some((m, sd)), None) => {
            notes.push("output lengths: as asked, not measured; ignore_eos not set, so the server may have stopped earlier".into());
            generates_all = false;
            Some(mean_and_spread(m, sd))
        }
        (None, None) => {
            p.push(
                "output lengths: neither set in the config nor measured (output_sequence_length)"
                    .into(),
            );
            None
        }
    };
    (input, output, generates_all)
}

/// The input config, in the dialect of `format` and its version.
fn config(c: &Obj, format: Format, p: &mut Vec<String>, notes: &mut Vec<String>) -> Config {
    let mut cfg = Config {
        burstiness: 1.0,
        ..Default::default()
    };
    match format {
        Format::Aiperf if c.has("phases") => aiperf2(c, &mut cfg, p, notes),
        Format::Aiperf => aiperf1(c, &mut cfg, p, notes),
        _ if c.has("perf_analyzer") => genai_config(c, &mut cfg, p, notes),
        _ => genai_args(c, &mut cfg, p, notes),
    }
    cfg
}

/// `{mean, stddev}` of a token-count object (`mean` unset or < 0: `None`).
fn tokens(o: Option<Obj>, mean: &str, stddev: &str, p: &mut Vec<String>) -> Option<(f64, f64)> {
    let o = o?;
    let m = match o.get(mean).map(number_of) {
        Some(Ok(x)) if x < 0.0 => return None,
        _ => o.number(mean, p)?,
    };
    Some((m, o.number(stddev, p).unwrap_or(0.0)))
}

/// Whether `ignore_eos: true` is among the extra inputs (a map, `[key, value]`
/// pairs, or `key:value` strings).
fn ignore_eos_of(extra: Option<&Value>) -> Option<bool> {
    let truthy = |v: &Value| v.as_bool().unwrap_or(v.as_str() == Some("true"));
    match extra? {
        Value::Object(m) => m.get("ignore_eos").map(truthy),
        Value::Array(items) => items.iter().find_map(|it| match it {
            Value::Array(kv) if kv.first().and_then(Value::as_str) == Some("ignore_eos") => {
                kv.get(1).map(truthy)
            }
            Value::String(s) => s
                .strip_prefix("ignore_eos:")
                .map(|v| v.trim().eq_ignore_ascii_case("true")),
            Value::Object(_) => ignore_eos_of(Some(it)),
            _ => None,
        }),
        Value::String(s) => serde_json::from_str::<Value>(s)
            .ok()
            .and_then(|v| ignore_eos_of(Some(&v))),
        _ => None,
    }
}

fn first_name(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) => a.first().and_then(|x| {
            x.as_str()
                .map(str::to_string)
                .or_else(|| x.get("name").and_then(Value::as_str).map(str::to_string))
        }),
        _ => None,
    }
}

fn size(o: &Obj, key: &str, p: &mut Vec<String>) -> Option<u32> {
    match o.count(key, p) {
        Some(0) => {
            p.push(format!("{}{key}: 0: must be > 0", o.at));
            None
        }
        n => n.map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
    }
}

/// aiperf 1's `UserConfig`.
fn aiperf1(c: &Obj, cfg: &mut Config, p: &mut Vec<String>, notes: &mut Vec<String>) {
    cfg.model = c
        .child("endpoint", "input_config.endpoint.", p)
        .and_then(|e| first_name(e.get("model_names")));
    if let Some(l) = c.child("loadgen", "input_config.loadgen.", p) {
        cfg.concurrency = size(&l, "concurrency", p);
        cfg.rate = l.number("request_rate", p).filter(|&r| r > 0.0);
        cfg.requests = l.count("request_count", p);
        cfg.warmup = l.count("warmup_request_count", p).unwrap_or(0);
        match l
            .text("request_rate_mode", p)
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("constant") if cfg.rate.is_some() => {
                notes.push(format!("request_rate_mode constant: constant gaps, held as gamma gaps of shape {CONSTANT_ARRIVALS:e}"));
                cfg.burstiness = CONSTANT_ARRIVALS;
            }
            Some("concurrency_burst") => cfg.rate = None,
            _ => {}
        }
        if l.has("benchmark_duration") {
            notes.push("benchmark_duration set: the run lasted a time, not a request count; the prompts are the valid requests measured".into());
            cfg.requests = None;
        }
    }
    let input = c.child("input", "input_config.input.", p);
    let prompt = input.and_then(|i| i.child("prompt", "input_config.input.prompt.", p));
    let isl =
        prompt.and_then(|x| x.child("input_tokens", "input_config.input.prompt.input_tokens.", p));
    let osl = prompt.and_then(|x| {
        x.child(
            "output_tokens",
            "input_config.input.prompt.output_tokens.",
            p,
        )
    });
    cfg.input = tokens(isl, "mean", "stddev", p);
    cfg.output = tokens(osl, "mean", "stddev", p);
    cfg.ignore_eos = ignore_eos_of(input.and_then(|i| i.get("extra")));
}

/// aiperf 2's `BenchmarkConfig`: the profiling phase's load, the warm-up phases'
/// requests.
fn aiperf2(c: &Obj, cfg: &mut Config, p: &mut Vec<String>, notes: &mut Vec<String>) {
    cfg.model = c
        .get("models")
        .and_then(|m| first_name(m.get("items")).or_else(|| first_name(Some(m))));
    let Some(phases) = c.child("phases", "input_config.phases.", p) else {
        return;
    };
    let mut profiling = Vec::new();
    for (name, v) in phases.map {
        let Some(ph) = Obj::of(v, "input_config.phases.", p) else {
            continue;
        };
        let kind = ph.text("kind", p).unwrap_or(name.as_str());
        if kind == "warmup" {
            cfg.warmup += ph.count("requests", p).unwrap_or(0);
        } else {
            profiling.push((name, ph));
        }
    }
    let [(name, ph)] = profiling.as_slice() else {
        p.push(format!(
            "input_config.phases: {} profiling phases: the export's figures are not of one load",
            profiling.len()
        ));
        return;
    };
    cfg.requests = ph.count("requests", p);
    cfg.concurrency = size(ph, "concurrency", p);
    let kind = ph.text("type", p).unwrap_or("concurrency");
    cfg.rate = ph.number("rate", p).filter(|&r| r > 0.0);
    match kind {
        "concurrency" => cfg.rate = None,
        "poisson" => {}
        "gamma" => {
            cfg.burstiness = ph
                .number("smoothness", p)
                .filter(|&s| s > 0.0)
                .unwrap_or(1.0)
        }
        "constant" => {
            notes.push(format!(
                "phase {name}: constant gaps, held as gamma gaps of shape {CONSTANT_ARRIVALS:e}"
            ));
            cfg.burstiness = CONSTANT_ARRIVALS;
        }
        other => p.push(format!(
            "input_config.phases.{name}.type: `{other}`: not a load a record holds"
        )),
    }
    if kind != "concurrency" && cfg.rate.is_none() {
        p.push(format!(
            "input_config.phases.{name}.rate: missing (a rate series is not a load a record holds)"
        ));
    }
}

/// genai-perf's config-file `ConfigCommand`.
fn genai_config(c: &Obj, cfg: &mut Config, p: &mut Vec<String>, notes: &mut Vec<String>) {
    cfg.model = first_name(c.get("model_names"));
    if let Some(pa) = c.child("perf_analyzer", "input_config.perf_analyzer.", p) {
        cfg.warmup = pa.count("warmup_request_count", p).unwrap_or(0);
        if let Some(s) = pa.child("stimulus", "input_config.perf_analyzer.stimulus.", p) {
            cfg.concurrency = size(&s, "concurrency", p);
            cfg.rate = s.number("request_rate", p).filter(|&r| r > 0.0);
        }
        if let Some(m) = pa.child("measurement", "input_config.perf_analyzer.measurement.", p) {
            if m.text("mode", p) == Some("request_count") {
                cfg.requests = m.count("num", p);
            }
        }
    }
    let input = c.child("input", "input_config.input.", p);
    let isl = input.and_then(|x| {
        x.child(
            "synthetic_tokens",
            "input_config.input.synthetic_tokens.",
            p,
        )
    });
    let osl = input.and_then(|x| x.child("output_tokens", "input_config.input.output_tokens.", p));
    cfg.input = tokens(isl, "mean", "stddev", p);
    cfg.output = tokens(osl, "mean", "stddev", p);
    cfg.ignore_eos = ignore_eos_of(input.and_then(|i| i.get("extra")));
    genai_rate_note(cfg, notes);
}

/// genai-perf's command-line namespace (before config files).
fn genai_args(c: &Obj, cfg: &mut Config, p: &mut Vec<String>, notes: &mut Vec<String>) {
    cfg.model = first_name(c.get("model")).or_else(|| first_name(c.get("model_names")));
    cfg.concurrency = size(c, "concurrency", p);
    cfg.rate = c.number("request_rate", p).filter(|&r| r > 0.0);
    cfg.requests = c.count("request_count", p).filter(|&n| n > 0);
    cfg.warmup = c.count("warmup_request_count", p).unwrap_or(0);
    cfg.input = tokens(
        Some(*c),
        "synthetic_input_tokens_mean",
        "synthetic_input_tokens_stddev",
        p,
    );
    cfg.output = tokens(Some(*c), "output_tokens_mean", "output_tokens_stddev", p);
    cfg.ignore_eos = ignore_eos_of(c.get("extra_inputs"));
    genai_rate_note(cfg, notes);
}

/// genai-perf's rate goes to perf_analyzer, whose gaps are constant by default.
fn genai_rate_note(cfg: &mut Config, notes: &mut Vec<String>) {
    if cfg.rate.is_some() {
        cfg.concurrency = None;
        cfg.burstiness = CONSTANT_ARRIVALS;
        notes.push(format!("request rate: perf_analyzer's default constant request distribution, held as gamma gaps of shape {CONSTANT_ARRIVALS:e}"));
    }
}
