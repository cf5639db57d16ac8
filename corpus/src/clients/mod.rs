//! Result files planners have from their own benchmark runs, read into runs twin can
//! keep as records. A result file says how the client loaded the server and what it
//! measured; it does not say on what the server ran (GPU, layout, often not even the
//! engine), so a file is read into a [`ClientRun`] (what the file says, with notes on
//! what was assumed) and becomes a [`RunRecord`] with a [`Deployment`] the user gives
//! ([`ClientRun::into_record`]).
//!
//! The formats, each read as its tool's public code writes it (the sources are cited
//! in each module):
//! - [`Format::VllmBench`]: `vllm bench serve --save-result` (and the older
//!   `benchmarks/benchmark_serving.py`), with or without `--save-detailed`; one JSON
//!   object, or one per line with `--append-result`.
//! - [`Format::SglangBench`]: `python -m sglang.bench_serving --output-file`: one JSON
//!   line per run.
//! - [`Format::Aiperf`] and [`Format::GenaiPerf`]: `profile_export_aiperf.json` and
//!   `profile_export_genai_perf.json`, metric statistics with units and the input
//!   config.
//! - [`Format::InferencePerf`]: inference-perf's per-stage
//!   `stage_N_lifecycle_metrics.json` (one stage a file, or several concatenated).
//!
//! Metric names differ between tools: vLLM's, SGLang's, aiperf's and genai-perf's
//! per-request `(E2E - TTFT) / (output tokens - 1)` is twin's TPOT whatever its name
//! (aiperf and genai-perf call it `inter_token_latency`); the gaps between a request's
//! streamed chunks are twin's ITL (vLLM's and SGLang's `itl`, aiperf's
//! `inter_chunk_latency`).

mod aiperf;
mod fields;
mod inference_perf;
mod json;
mod sglang;
mod vllm;

pub use fields::CONSTANT_ARRIVALS;

use crate::record::Format as Format8;
use crate::record::*;
use crate::CorpusError;
use serde_json::Value;

/// The result formats [`read`] knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// `vllm bench serve` / `benchmark_serving.py` result JSON.
    VllmBench,
    /// `sglang.bench_serving` result JSON lines.
    SglangBench,
    /// aiperf's `profile_export_aiperf.json`.
    Aiperf,
    /// genai-perf's `profile_export_genai_perf.json`.
    GenaiPerf,
    /// inference-perf's `stage_N_lifecycle_metrics.json`.
    InferencePerf,
}

impl Format {
    pub const ALL: [Format; 5] = [
        Format::VllmBench,
        Format::SglangBench,
        Format::Aiperf,
        Format::GenaiPerf,
        Format::InferencePerf,
    ];

    /// The name `--format` takes.
    pub fn key(self) -> &'static str {
        match self {
            Format::VllmBench => "vllm",
            Format::SglangBench => "sglang",
            Format::Aiperf => "aiperf",
            Format::GenaiPerf => "genai-perf",
            Format::InferencePerf => "inference-perf",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        Format::ALL.into_iter().find(|f| f.key() == s)
    }

    /// The client program, as a record's `client.tool` names it.
    pub fn tool(self) -> &'static str {
        match self {
            Format::VllmBench => "vllm bench serve",
            Format::SglangBench => "sglang.bench_serving",
            Format::Aiperf => "aiperf",
            Format::GenaiPerf => "genai-perf",
            Format::InferencePerf => "inference-perf",
        }
    }

    /// The format of one result object, from the keys only its tool writes.
    fn of(v: &Value) -> Option<Format> {
        let o = v.as_object()?;
        let has = |k: &str| o.contains_key(k);
        if has("load_summary") && has("successes") {
            return Some(Format::InferencePerf);
        }
        let cfg = o.get("input_config").and_then(Value::as_object);
        let unit_block = |k: &str| o.get(k).is_some_and(|b| b.get("unit").is_some());
        let metric_blocks = [
            "time_to_first_token",
            "request_latency",
            "request_throughput",
        ]
        .iter()
        .any(|k| unit_block(k));
        if cfg.is_some() || metric_blocks || has("aiperf_version") {
            let aiperf = has("aiperf_version")
                || has("schema_version")
                || cfg.is_some_and(|c| c.contains_key("loadgen") || c.contains_key("phases"));
            return Some(if aiperf {
                Format::Aiperf
            } else {
                Format::GenaiPerf
            });
        }
        if has("server_info")
            || has("mean_e2e_latency_ms")
            || has("random_range_ratio")
            || has("total_throughput")
        {
            return Some(Format::SglangBench);
        }
        if has("model_id") || has("total_token_throughput") || has("mean_e2el_ms") {
            return Some(Format::VllmBench);
        }
        None
    }
}

/// What the server itself told the client, where a file holds it (SGLang's
/// `server_info`): hints to check the user's deployment against, never taken for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hints {
    pub engine: Option<EngineName>,
    pub version: Option<String>,
    /// Server settings the file states.
    pub settings: EngineSettings,
    /// The worker pool as the server states it (aggregated serving only).
    pub workers: Option<Workers>,
    /// The KV cache's data type as the server states it (`fp8_e4m3`); `None` for the
    /// model's own (`auto`).
    pub kv_cache: Option<String>,
}

/// One measured run of a result file: what the file itself says.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientRun {
    pub format: Format,
    /// The file (its path as given to [`read`]).
    pub origin: String,
    /// Where in the file the run is (`line 3`, `stage 2`), for a file of several.
    pub part: Option<String>,
    /// The client and its load, as the file states them (and the notes assume).
    pub client: Client,
    /// Every figure of the file a record holds, in twin's metrics and units.
    pub measured: Measured,
    /// The model as the file names it (a Hugging Face id or a local path).
    pub model: Option<String>,
    pub hints: Hints,
    /// When the run was measured (ISO date), where the file says.
    pub measured_on: Option<String>,
    /// What the reader decided and on which evidence.
    pub notes: Vec<String>,
}

/// What a result file does not hold and the user gives: the engine (name and
/// version, and the settings that change what was measured), the model as served,
/// the GPU and the layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    pub engine: Engine,
    pub model: ModelRef,
    pub gpu: Gpu,
    pub layout: Layout,
}

/// Every run of a result file, its format told from the content. `origin` names the
/// file in messages and records.
pub fn read(text: &str, origin: &str) -> Result<Vec<ClientRun>, CorpusError> {
    read_with(text, origin, None)
}

/// Every run of a result file read as `format`, whatever its content looks like.
pub fn read_as(text: &str, origin: &str, format: Format) -> Result<Vec<ClientRun>, CorpusError> {
    read_with(text, origin, Some(format))
}

fn read_with(
    text: &str,
    origin: &str,
    forced: Option<Format>,
) -> Result<Vec<ClientRun>, CorpusError> {
    let file_err = |problems: Vec<String>| CorpusError::File {
        origin: origin.to_string(),
        problems,
    };
    let values = json::values(text).map_err(file_err)?;
    if values.is_empty() {
        return Err(file_err(vec!["no result in the file".into()]));
    }
    let format = match forced.or_else(|| Format::of(&values[0].1)) {
        Some(f) => f,
        None => {
            return Err(file_err(vec![
                "not a result file of vLLM bench serve, SGLang bench_serving, aiperf, genai-perf or inference-perf (none of their keys found)".into(),
            ]))
        }
    };
    let several = values.len() > 1;
    if format == Format::InferencePerf {
        return inference_perf::read_all(&values, origin).map_err(file_err);
    }
    let mut runs = Vec::new();
    let mut problems = Vec::new();
    for (line, v) in &values {
        let part = several.then(|| format!("line {line}"));
        let read = match format {
            Format::VllmBench => vllm::read(v, origin, part.clone()),
            Format::SglangBench => sglang::read(v, origin, part.clone()),
            Format::Aiperf | Format::GenaiPerf => aiperf::read(v, origin, format),
            Format::InferencePerf => unreachable!("read above"),
        };
        match read {
            Ok(mut run) => {
                run.part = part.clone();
                runs.push(run);
            }
            Err(p) => problems.extend(p.into_iter().map(|m| match &part {
                Some(at) => format!("{at}: {m}"),
                None => m,
            })),
        }
    }
    if problems.is_empty() {
        Ok(runs)
    } else {
        Err(file_err(problems))
    }
}

impl ClientRun {
    /// Where the run is: the file, and the line or stage in it.
    pub fn row(&self) -> String {
        match &self.part {
            Some(p) => format!("{} ({p})", self.origin),
            None => self.origin.clone(),
        }
    }

    /// Where the file's own words on the server disagree with the deployment given
    /// (engine, version, layout, KV cache), one line each; empty when they agree or
    /// the file says nothing.
    pub fn conflicts(&self, d: &Deployment) -> Vec<String> {
        let h = &self.hints;
        let mut c = Vec::new();
        if let Some(e) = h.engine.filter(|&e| e != d.engine.name) {
            c.push(format!(
                "engine: the file's server is {}, the deployment says {}",
                e.key(),
                d.engine.name.key()
            ));
        }
        if let (Some(f), Some(g)) = (&h.version, &d.engine.version) {
            if f.trim_start_matches('v') != g.trim_start_matches('v') {
                c.push(format!(
                    "engine version: the file's server is {f}, the deployment says {g}"
                ));
            }
        }
        if let (Some(w), Layout::Aggregated { workers }) = (&h.workers, &d.layout) {
            let pairs = [
                ("tp", w.tp, workers.tp),
                ("pp", w.pp, workers.pp),
                ("attention_dp", w.attention_dp, workers.attention_dp),
                ("moe_ep", w.moe_ep, workers.moe_ep),
            ];
            for (name, file, given) in pairs {
                if file != given {
                    c.push(format!(
                        "layout: the file's server has {name} {file}, the deployment says {given}"
                    ));
                }
            }
            if let (Some(f), Some(g)) = (w.count, workers.count) {
                if f != g {
                    c.push(format!(
                        "layout: the file's server has {f} data-parallel replicas, the deployment says {g} instances"
                    ));
                }
            }
        } else if h.workers.is_some() {
            c.push(
                "layout: the file's server is one aggregated pool, the deployment is disaggregated"
                    .into(),
            );
        }
        if let Some(k) = &h.kv_cache {
            let file_fp8 = k.contains("fp8");
            let given_fp8 = matches!(d.model.kv, Some(Format8::Fp8Tensor | Format8::Fp8Block));
            if file_fp8 != given_fp8 {
                c.push(format!(
                    "KV cache: the file's server stores it as {k}, the deployment says {}",
                    d.model.kv.map_or("the model's own format", |f| f.key())
                ));
            }
        }
        c
    }

    /// The run as a record of `deployment`: the file's client and figures, the
    /// deployment's engine, model, GPU and layout, the engine settings the file states
    /// where the deployment leaves them open, and notes on every hint taken or in
    /// conflict. `source` is the provenance's source (the file, and where it came from).
    pub fn into_record(self, id: String, deployment: Deployment, source: String) -> RunRecord {
        let mut notes = self.notes.clone();
        let mut engine = deployment.engine.clone();
        fill_settings(&mut engine.settings, &self.hints.settings, &mut notes);
        if engine.version.is_none() {
            if let Some(v) = &self.hints.version {
                notes.push(format!("engine version {v}: the file's server states it"));
                engine.version = Some(v.clone());
            }
        }
        for c in self.conflicts(&deployment) {
            notes.push(format!("in conflict, the deployment kept: {c}"));
        }
        if let Some(m) = self.model.as_deref().filter(|m| *m != deployment.model.id) {
            notes.push(format!("the file names the model `{m}`"));
        }
        RunRecord {
            schema: SCHEMA.into(),
            id,
            provenance: Provenance {
                source,
                row: Some(self.row()),
                measured: self.measured_on,
                license: None,
                detail: None,
                notes,
            },
            engine,
            model: deployment.model,
            gpu: deployment.gpu,
            layout: deployment.layout,
            client: self.client,
            measured: self.measured,
        }
    }
}

/// The settings the file states, where the deployment leaves them open.
fn fill_settings(s: &mut EngineSettings, file: &EngineSettings, notes: &mut Vec<String>) {
    let mut took = Vec::new();
    if s.max_batched_tokens.is_none() {
        if let Some(v) = file.max_batched_tokens {
            s.max_batched_tokens = Some(v);
            took.push(format!("max_batched_tokens {v}"));
        }
    }
    if s.max_running.is_none() {
        if let Some(v) = file.max_running {
            s.max_running = Some(v);
            took.push(format!("max_running {v}"));
        }
    }
    if s.memory_fraction.is_none() {
        if let Some(v) = file.memory_fraction {
            s.memory_fraction = Some(v);
            took.push(format!("memory_fraction {v}"));
        }
    }
    if s.prefix_caching.is_none() {
        if let Some(v) = file.prefix_caching {
            s.prefix_caching = Some(v);
            took.push(format!("prefix_caching {v}"));
        }
    }
    if s.speculative.is_none() {
        if let Some(v) = file.speculative {
            s.speculative = Some(v);
            took.push(format!(
                "speculative decoding, {} drafts a step",
                v.draft_tokens
            ));
        }
    }
    if !took.is_empty() {
        notes.push(format!(
            "engine settings from the file's server: {}",
            took.join(", ")
        ));
    }
}

/// The acceptance `a` in [0, 1] of each of `n` chained drafts with `a + a^2 + ... +
/// a^n = per_step` accepted a step (bisection: the sum grows with `a`, from 0 to `n`);
/// the vLLM and SGLang readers' both.
fn acceptance_for(per_step: f64, n: u32) -> f64 {
    let sum = |a: f64| (1..=n).map(|i| a.powi(i as i32)).sum::<f64>();
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if sum(mid) < per_step {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[cfg(test)]
mod tests;
