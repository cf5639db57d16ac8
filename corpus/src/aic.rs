//! AIConfigurator's end-to-end "silicon" set (`silicon_sample.csv`) read into
//! records. What a row means is not in the file; it was established from the public
//! code that produced it and is written down, with sources, in docs/runs-corpus.md:
//!
//! - Rows whose `silicon_data_source` is an InferenceX export (`db-dump/...`,
//!   `source_file=2026-03-25.csv`, `2026-04-06.csv`, `qwen3.5-397b-gap-analysis.csv`)
//!   were measured by InferenceX's fork of vLLM's `benchmark_serving.py`: lengths
//!   uniform on `[floor(0.8 L), L]` for input and output (`--random-range-ratio 0.8`,
//!   the fork's `sample_uniform`), `10 x concurrency` prompts in a closed loop
//!   (`--request-rate inf --max-concurrency C`), `--ignore-eos`, and `2 x concurrency`
//!   warm-up requests from 2026-01-21 on (none before). Prefix caching was off.
//! - The other rows come from NVIDIA's private gap analysis; their client is not
//!   public. They are read as AIConfigurator's own benchmark runs them (aiperf, fixed
//!   lengths, `10 x concurrency` requests, `2 x concurrency` warm-up): assumed.
//! - `silicon_ttft_ms` and `silicon_tpot_ms` are a central figure whose kind (mean or
//!   median) no public code states: [`Stat::Center`].
//! - The same measurement appears under several rows (exports of one database): one
//!   record is kept per measurement, the others named in its notes.
//! - Some InferenceX rows carry a layout the export mis-lowered (`tp x ep` recorded as
//!   GPUs); the row id's `_tp<T>_ep<E>` suffix, or a duplicate row with a plausible
//!   layout, gives the real one. A row with neither is kept with its layout as given
//!   and a note; the simulation refuses it with that reason.

use crate::record::*;
use crate::CorpusError;
use serde::Deserialize;
use std::collections::HashMap;

/// Where the rows come from, as records cite it.
pub const SOURCE: &str = "ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce:aic-core/src/aiconfigurator_core/systems/silicon_sample.csv";

/// One row of the CSV, as its header names the columns.
#[derive(Debug, Clone, Deserialize)]
pub struct Row {
    pub id: String,
    pub silicon_data_source: String,
    pub backend: String,
    #[serde(default)]
    pub backend_version: String,
    pub model_path: String,
    pub system: String,
    #[serde(default)]
    pub precision: String,
    pub mode: String,
    pub isl: u32,
    pub osl: u32,
    #[serde(default)]
    pub gemm_quant_mode: String,
    #[serde(default)]
    pub moe_quant_mode: String,
    pub batch_size: Option<u32>,
    pub tp_size: Option<u32>,
    pub pp_size: Option<u32>,
    pub attention_dp_size: Option<u32>,
    pub moe_tp_size: Option<u32>,
    pub moe_ep_size: Option<u32>,
    pub prefill_batch_size: Option<u32>,
    pub prefill_num_workers: Option<u32>,
    pub prefill_tp_size: Option<u32>,
    pub prefill_pp_size: Option<u32>,
    pub prefill_attention_dp_size: Option<u32>,
    pub prefill_moe_tp_size: Option<u32>,
    pub prefill_moe_ep_size: Option<u32>,
    pub decode_batch_size: Option<u32>,
    pub decode_num_workers: Option<u32>,
    pub decode_tp_size: Option<u32>,
    pub decode_pp_size: Option<u32>,
    pub decode_attention_dp_size: Option<u32>,
    pub decode_moe_tp_size: Option<u32>,
    pub decode_moe_ep_size: Option<u32>,
    pub silicon_ttft_ms: f64,
    pub silicon_tpot_ms: f64,
}

/// What importing found: the records, and one line per row it could not read
/// (never dropped silently).
#[derive(Debug, Default)]
pub struct Import {
    pub records: Vec<RunRecord>,
    /// Rows folded into another record as the same measurement.
    pub duplicates: usize,
    pub refused: Vec<String>,
}

/// The `key=value` fields of a `silicon_data_source` cell (`;`-separated); a field
/// without `=` (the InferenceX image, `db-dump/DATE`) under its own text.
fn source_fields(s: &str) -> Vec<(String, String)> {
    s.split(';')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(|f| match f.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (String::new(), f.to_string()),
        })
        .collect()
}

/// Which client measured a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// InferenceX's benchmark (exported from its database).
    InferenceX,
    /// NVIDIA's private gap analysis (client not public).
    Internal,
}

impl Origin {
    pub fn of(source: &str) -> Origin {
        let first = source.split(';').next().unwrap_or("").trim();
        let file = first.strip_prefix("source_file=").unwrap_or(first);
        let ix = first.starts_with("db-dump/")
            || [
                "2026-03-25.csv",
                "2026-04-06.csv",
                "qwen3.5-397b-gap-analysis.csv",
            ]
            .contains(&file);
        if ix {
            Origin::InferenceX
        } else {
            Origin::Internal
        }
    }
}

/// twin's hardware name of an AIConfigurator system.
pub fn hardware_of(system: &str) -> Option<&'static str> {
    Some(match system {
        "h100_sxm" => "h100",
        "h200_sxm" => "h200",
        "b200_sxm" => "b200",
        "b300_sxm" => "b300",
        "gb200" => "gb200",
        "gb300" => "gb300",
        "a100_sxm" => "a100",
        _ => return None,
    })
}

/// The model config twin prices a checkpoint with (relative to the corpus file), and
/// the checkpoint's own formats (gemm, routed experts) where the label alone would
/// mislead.
struct Checkpoint {
    config: &'static str,
    moe: bool,
    /// The checkpoint's native FP8 is 128x128 blocks.
    fp8_block: bool,
    /// Routed experts in MXFP4 whatever the label (gpt-oss).
    mxfp4_experts: bool,
}

fn checkpoint(model_path: &str) -> Option<Checkpoint> {
    let c = |config, moe, fp8_block, mxfp4_experts| Checkpoint {
        config,
        moe,
        fp8_block,
        mxfp4_experts,
    };
    Some(match model_path {
        "meta-llama/Llama-3.1-70B" => c("models/Llama-3.1-70B/config.json", false, false, false),
        "meta-llama/Llama-3.1-8B-Instruct" | "nvidia/Llama-3.1-8B-Instruct-FP8" => {
            c("models/Llama-3.1-8B/config.json", false, false, false)
        }
        "Qwen/Qwen3-32B" | "nvidia/Qwen3-32B-NVFP4" => {
            c("models/Qwen3-32B/config.json", false, false, false)
        }
        "Qwen/Qwen3-235B-A22B-FP8" => {
            c("models/Qwen3-235B-A22B-FP8/config.json", true, true, false)
        }
        "openai/gpt-oss-120b" => c("models/gpt-oss-120b/config.json", true, false, true),
        "MiniMaxAI/MiniMax-M2.5" => c("models/MiniMax-M2.5/config.json", true, true, false),
        "Qwen/Qwen3.5-397B-A17B" => c("models/Qwen3.5-397B-A17B/config.json", true, true, false),
        _ => return None,
    })
}

/// A quantization label read as a format, and the note when the checkpoint decides.
fn format_of(label: &str, ck: &Checkpoint, notes: &mut Vec<String>) -> Result<Format, String> {
    Ok(match label {
        "" | "bf16" | "fp16" | "float16" => Format::Bf16,
        "fp8" if ck.fp8_block => {
            notes.push(
                "quantization label `fp8` read as the checkpoint's own 128x128-block FP8".into(),
            );
            Format::Fp8Block
        }
        "fp8" | "fp8_static" | "fp8_per_tensor" => Format::Fp8Tensor,
        "fp8_block" => Format::Fp8Block,
        "nvfp4" | "fp4" => Format::Nvfp4,
        "mxfp4" | "w4a16_mxfp4" | "w4a8_mxfp4_fp8" => Format::Mxfp4,
        "int4_wo" | "w4a16" | "awq" | "gptq" => Format::Int4,
        other => return Err(format!("quantization `{other}` is not a format twin knows")),
    })
}

/// The KV cache format InferenceX's server scripts set, by model and engine (their
/// `--kv-cache-dtype`): `None` where the script leaves the engine's default.
fn inferencex_kv(model_path: &str, engine: EngineName) -> Option<Format> {
    match (model_path, engine) {
        ("MiniMaxAI/MiniMax-M2.5", EngineName::Vllm)
        | ("Qwen/Qwen3.5-397B-A17B", EngineName::Sglang)
        | ("meta-llama/Llama-3.1-70B", _) => Some(Format::Fp8Tensor),
        _ => None,
    }
}

/// The KV cache a TensorRT-LLM row serves by [`trtllm_checkpoint_kv`], with a note.
fn trtllm_modelopt_kv(engine: EngineName, gemm: Format, notes: &mut Vec<String>) -> Option<Format> {
    let kv = trtllm_checkpoint_kv(engine, gemm)?;
    notes.push("KV cache: FP8, as a ModelOpt checkpoint carries it (kv_cache_quant_algo FP8) and TensorRT-LLM serves it".into());
    Some(kv)
}

/// The server settings of InferenceX's per-model scripts that change what a run
/// measures (`benchmarks/single_node/*.sh` at InferenceX 868ed43d, and ac1998a5 for
/// Llama-70B; docs/runs-corpus.md): prefix caching is off in every one; the step's
/// token budget and the running cap where the script sets them.
fn inferencex_settings(row: &Row, engine: EngineName, conc: u32) -> EngineSettings {
    let mut s = EngineSettings {
        prefix_caching: Some(false),
        ..Default::default()
    };
    match (row.model_path.as_str(), engine) {
        // `--max-num-batched-tokens $((ISL * 2))`.
        ("MiniMaxAI/MiniMax-M2.5", EngineName::Vllm) => {
            s.max_batched_tokens = Some(2 * row.isl);
            s.memory_fraction = Some(if row.system == "h200_sxm" { 0.95 } else { 0.90 });
        }
        ("openai/gpt-oss-120b", EngineName::Vllm)
        | ("meta-llama/Llama-3.1-70B", EngineName::Vllm) => {
            s.max_batched_tokens = Some(8192);
        }
        ("meta-llama/Llama-3.1-70B", EngineName::Trtllm) => s.max_batched_tokens = Some(16384),
        // `gptoss_fp4_{b200,h200}_trt.sh` (InferenceX 34bc7c40 and 187f5756): `--max_num_tokens
        // 20000`, `free_gpu_memory_fraction: 0.85`; its running cap (`--max_batch_size`
        // 512 on B200, the concurrency on H200) never binds a closed loop of at most 512.
        ("openai/gpt-oss-120b", EngineName::Trtllm) => {
            s.max_batched_tokens = Some(20000);
            s.memory_fraction = Some(0.85);
        }
        // `--mem-fraction-static 0.82`. The script's `--max-running-requests 128` (at
        // 868ed43d) is not taken: the rows at concurrency 256 ran all 256 at once
        // (their TPOT grows from 128 to 256 users, and their TTFT stays at seconds
        // where a cap would queue half the users for a whole run), so it came later.
        //
        // On Blackwell, `--scheduler-recv-interval 30` from 16 users up, 10 below
        // (`qwen3.5_{fp8,bf16,fp4}_b200.sh` from their first version, efd49e50 of
        // 2026-03-03, to 626932a1 of 2026-03-27, after the rows; the B300 rows ran before
        // B300 scripts existed, 2026-04-17, and are taken as B200's). The H200 script
        // sets none.
        ("Qwen/Qwen3.5-397B-A17B", EngineName::Sglang) => {
            s.memory_fraction = Some(0.82);
            if row.system != "h200_sxm" {
                s.scheduler_recv_interval = Some(if conc >= 16 { 30 } else { 10 });
            }
        }
        _ => {}
    }
    s
}

/// The positive size of a layout column (blank or 0: 1).
fn size(x: Option<u32>) -> u32 {
    x.filter(|&v| v > 0).unwrap_or(1)
}

/// GPUs one node of `system` holds (the scale of a plausible single-instance layout);
/// `None` for rack-scale NVLink systems.
fn node_gpus(system: &str) -> Option<u32> {
    match system {
        "gb200" | "gb300" => None,
        _ => Some(8),
    }
}

/// InferenceX's own TP and EP, from a row id ending `_tp<T>_ep<E>_<n>` (or with `_0`
/// after each).
pub fn id_tp_ep(id: &str) -> Option<(u32, u32)> {
    let parts: Vec<&str> = id.split('_').collect();
    let num = |p: &str, pre: &str| p.strip_prefix(pre).and_then(|n| n.parse::<u32>().ok());
    let n = parts.len();
    for start in n.saturating_sub(6)..n {
        let Some(t) = num(parts[start], "tp") else {
            continue;
        };
        let mut i = start + 1;
        if parts.get(i) == Some(&"0") {
            i += 1;
        }
        let Some(e) = parts.get(i).and_then(|p| num(p, "ep")) else {
            continue;
        };
        return (t > 0 && e > 0 && e <= t).then_some((t, e));
    }
    None
}

/// Whether a layout is one the row's system can hold and its engine can run.
fn plausible(w: &Workers, system: &str, engine: EngineName) -> bool {
    let fits = node_gpus(system).is_none_or(|n| w.gpus_per_instance() <= n);
    let vllm_mix = engine == EngineName::Vllm && w.attention_dp > 1 && w.tp > 1;
    fits && !vllm_mix && w.moe_tp * w.moe_ep <= w.gpus_per_instance()
}

/// The aggregated layout of a row, the client's concurrency, and notes.
fn aggregated(
    row: &Row,
    engine: EngineName,
    conc: Option<u32>,
    origin: Origin,
    notes: &mut Vec<String>,
) -> (Workers, u32) {
    let mut w = Workers {
        count: Some(1),
        tp: size(row.tp_size),
        pp: size(row.pp_size),
        attention_dp: size(row.attention_dp_size),
        moe_tp: size(row.moe_tp_size),
        moe_ep: size(row.moe_ep_size),
        max_batch: None,
    };
    if origin == Origin::InferenceX {
        if let Some((t, e)) = id_tp_ep(&row.id) {
            let as_exported = w.gpus_per_instance();
            if as_exported != t || !plausible(&w, &row.system, engine) {
                let dp = w.attention_dp > 1;
                w.tp = if dp { 1 } else { t };
                w.attention_dp = if dp { t } else { 1 };
                w.moe_ep = e;
                w.moe_tp = t / e;
                notes.push(format!(
                    "layout from the row id's InferenceX TP{t}/EP{e}{}: the export recorded {as_exported} GPUs (tp x ep)",
                    if dp { " with attention DP" } else { "" }
                ));
            }
        }
    }
    let bs = row.batch_size.filter(|&b| b > 0);
    let per_replica = bs.map(|b| b * w.attention_dp);
    let conc = match (conc, per_replica) {
        (Some(c), Some(p)) if c > p && c % p == 0 => {
            let n = c / p;
            w.count = Some(n);
            notes.push(format!(
                "{n} engine instances: the client's concurrency {c} over a batch of {} per attention replica",
                p / w.attention_dp
            ));
            c
        }
        (Some(c), _) => c,
        (None, Some(p)) => p,
        (None, None) => 0,
    };
    if !plausible(&w, &row.system, engine) {
        notes.push(format!(
            "layout as given (tp {}, attention_dp {}, moe_tp {}, moe_ep {}) cannot run on one {} instance of this engine: its sizes disagree (mis-lowered by the export), the real layout is unknown",
            w.tp, w.attention_dp, w.moe_tp, w.moe_ep, row.system
        ));
    }
    (w, conc)
}

/// The disaggregated layout of a row and the client's concurrency (`None` when the
/// row does not record its workers).
fn disaggregated(row: &Row, conc: Option<u32>) -> (Workers, Workers, Option<u32>) {
    let side = |n: Option<u32>, tp, pp, dp, mtp, mep, b: Option<u32>| Workers {
        count: n.filter(|&n| n > 0),
        tp: size(tp),
        pp: size(pp),
        attention_dp: size(dp),
        moe_tp: size(mtp),
        moe_ep: size(mep),
        max_batch: b.filter(|&b| b > 0),
    };
    let p = side(
        row.prefill_num_workers,
        row.prefill_tp_size,
        row.prefill_pp_size,
        row.prefill_attention_dp_size,
        row.prefill_moe_tp_size,
        row.prefill_moe_ep_size,
        row.prefill_batch_size,
    );
    let d = side(
        row.decode_num_workers,
        row.decode_tp_size,
        row.decode_pp_size,
        row.decode_attention_dp_size,
        row.decode_moe_tp_size,
        row.decode_moe_ep_size,
        row.decode_batch_size,
    );
    let conc = conc.or_else(|| Some(d.max_batch? * d.count?));
    (p, d, conc)
}

/// The date part of an ISO time (`2026-04-17T00:00:00.000Z` -> `2026-04-17`).
fn date(s: &str) -> String {
    s.split('T').next().unwrap_or(s).to_string()
}

/// The engine's version: the column, else the image's tag (`vllm/vllm-openai:v0.19.0-cu130`
/// -> `0.19.0`).
fn version(row: &Row, image: Option<&str>) -> Option<String> {
    if !row.backend_version.trim().is_empty() {
        return Some(row.backend_version.trim().to_string());
    }
    let tag = image?.rsplit(':').next()?;
    let v = tag.trim_start_matches('v');
    let v = v.split('-').next()?;
    v.chars().next()?.is_ascii_digit().then(|| v.to_string())
}

/// The client of a row: InferenceX's benchmark, or the assumed aiperf run.
fn client(
    row: &Row,
    origin: Origin,
    conc: u32,
    measured: Option<&str>,
    notes: &mut Vec<String>,
) -> Client {
    let ix = origin == Origin::InferenceX;
    let len = |l: u32| {
        if ix {
            Lengths::Uniform {
                low: ((l as f64 * 0.8).floor() as u32).max(1),
                high: l,
            }
        } else {
            Lengths::Fixed { tokens: l }
        }
    };
    // InferenceX added its warm-up (2 x concurrency) on 2026-01-21 (commit d053ae24).
    let warm = !ix || measured.is_some_and(|d| d >= "2026-01-21");
    if ix {
        notes.push("client: InferenceX benchmark_serving (vLLM fork): lengths uniform on [0.8 L, L], 10 x concurrency prompts, closed loop, ignore-eos; prefix caching off".into());
        if !warm {
            notes.push("client: measured before 2026-01-21, when InferenceX had no warm-up".into());
        }
    } else {
        notes.push("client: not public (NVIDIA's gap analysis); assumed aiperf as AIConfigurator runs it: fixed lengths, 10 x concurrency requests, 2 x concurrency warm-up".into());
    }
    Client {
        tool: if ix {
            "InferenceX benchmark_serving".into()
        } else {
            "aiperf (assumed)".into()
        },
        load: Load::ClosedLoop { concurrency: conc },
        num_prompts: Some(10 * conc as u64),
        warmup_requests: if warm { 2 * conc as u64 } else { 0 },
        input: len(row.isl),
        output: len(row.osl),
        shared_prefix: 0,
        ignore_eos: true,
        held: Vec::new(),
    }
}

/// One row as a record (before duplicates are folded).
pub fn record_of(row: &Row) -> Result<RunRecord, String> {
    // 106 lines: over the limit (the old length test did not read corpus/); to split.
    #![allow(clippy::too_many_lines)]
    let engine = EngineName::parse(&row.backend)
        .ok_or_else(|| format!("backend `{}`: not vllm, sglang or trtllm", row.backend))?;
    let hardware = hardware_of(&row.system)
        .ok_or_else(|| format!("system `{}`: no twin hardware of that name", row.system))?;
    let ck = checkpoint(&row.model_path)
        .ok_or_else(|| format!("model `{}`: no config in the corpus", row.model_path))?;
    let fields = source_fields(&row.silicon_data_source);
    let field = |k: &str| {
        fields
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let image = fields
        .iter()
        .find(|(k, v)| k.is_empty() && v.contains(':') && !v.starts_with("db-dump"))
        .or_else(|| fields.iter().find(|(k, _)| k == "image"))
        .map(|(_, v)| v.replace('#', "/"));
    let measured = field("measured").map(date);
    let origin = Origin::of(&row.silicon_data_source);
    let conc = field("silicon_concurrency").and_then(|c| c.parse::<u32>().ok());
    let mut notes = Vec::new();
    let gemm = format_of(&row.gemm_quant_mode, &ck, &mut notes)?;
    let moe = if ck.mxfp4_experts {
        notes.push(format!(
            "routed experts: the checkpoint's MXFP4 (label `{}`)",
            row.moe_quant_mode
        ));
        Some(Format::Mxfp4)
    } else if ck.moe {
        Some(format_of(&row.moe_quant_mode, &ck, &mut notes)?)
    } else {
        None
    };
    let gemm = if ck.mxfp4_experts { Format::Bf16 } else { gemm };
    let (layout, conc) = match row.mode.as_str() {
        "agg" => {
            let (w, c) = aggregated(row, engine, conc, origin, &mut notes);
            (Layout::Aggregated { workers: w }, c)
        }
        "disagg" => {
            let (p, d, c) = disaggregated(row, conc);
            if p.count.is_none() || d.count.is_none() {
                notes.push("disaggregated: the row records no worker counts or batch sizes, only the client's concurrency and each side's parallel sizes".into());
            }
            (
                Layout::Disaggregated {
                    prefill: p,
                    decode: d,
                },
                c.unwrap_or(0),
            )
        }
        m => return Err(format!("mode `{m}`: not agg or disagg")),
    };
    if conc == 0 {
        return Err("no concurrency: neither silicon_concurrency nor a batch size".into());
    }
    let kv = if origin == Origin::InferenceX {
        inferencex_kv(&row.model_path, engine)
    } else {
        None
    }
    .or_else(|| trtllm_modelopt_kv(engine, gemm, &mut notes));
    let client = client(row, origin, conc, measured.as_deref(), &mut notes);
    let center = |v: f64| [(Stat::Center, v)].into_iter().collect();
    Ok(RunRecord {
        schema: SCHEMA.into(),
        id: row.id.clone(),
        provenance: Provenance {
            source: SOURCE.into(),
            row: Some(row.id.clone()),
            measured,
            license: Some("Apache-2.0".into()),
            detail: Some(row.silicon_data_source.clone()),
            notes,
        },
        engine: Engine {
            name: engine,
            version: version(row, image.as_deref()),
            image,
            settings: if origin == Origin::InferenceX {
                inferencex_settings(row, engine, conc)
            } else {
                EngineSettings::default()
            },
        },
        model: ModelRef {
            id: row.model_path.clone(),
            config: ck.config.into(),
            gemm,
            moe,
            kv,
        },
        gpu: Gpu {
            system: row.system.clone(),
            hardware: hardware.into(),
        },
        layout,
        client,
        measured: [
            (Metric::TtftMs, center(row.silicon_ttft_ms)),
            (Metric::TpotMs, center(row.silicon_tpot_ms)),
        ]
        .into_iter()
        .collect(),
    })
}

/// The key two rows of one measurement share: what ran and the figures to 0.01 ms
/// (one export rounds them so).
fn same_measurement(r: &RunRecord) -> String {
    let f = |m| {
        r.figure(m, Stat::Center)
            .map(|v| (v * 100.0).round() as i64)
    };
    format!(
        "{}|{}|{}|{:?}|{:?}|{:?}|{:?}|{:?}",
        r.model.id,
        r.gpu.system,
        r.engine.name.key(),
        r.client.input,
        r.client.output,
        r.concurrency(),
        f(Metric::TtftMs),
        f(Metric::TpotMs)
    )
}

/// Whether the record's layout passed the importer's check (no mis-lowering note).
fn looks_right(r: &RunRecord) -> bool {
    !r.provenance.notes.iter().any(|n| n.contains("mis-lowered"))
}

/// Every row of the CSV text: the records, one per measurement, and each row it
/// could not read with its line and reason.
pub fn import(text: &str) -> Result<Import, CorpusError> {
    let mut rd = csv::Reader::from_reader(text.as_bytes());
    let mut out = Import::default();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for (i, row) in rd.deserialize::<Row>().enumerate() {
        let line = i + 2;
        let rec = match row {
            Ok(row) => record_of(&row).map_err(|e| format!("line {line} ({}): {e}", row.id)),
            Err(e) => Err(format!("line {line}: {e}")),
        };
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                out.refused.push(e);
                continue;
            }
        };
        let key = same_measurement(&rec);
        match by_key.get(&key) {
            None => {
                by_key.insert(key, out.records.len());
                out.records.push(rec);
            }
            Some(&k) => {
                out.duplicates += 1;
                let kept = &mut out.records[k];
                let replace = !looks_right(kept) && looks_right(&rec);
                let (keep, other) = if replace {
                    (rec, kept.clone())
                } else {
                    (kept.clone(), rec)
                };
                *kept = keep;
                if kept.engine.version.is_none() {
                    kept.engine.version = other.engine.version.clone();
                }
                kept.provenance
                    .notes
                    .push(format!("the same measurement as row `{}`", other.id));
            }
        }
    }
    if out.records.is_empty() && out.refused.is_empty() {
        return Err(CorpusError::Invalid("no rows".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms";

    fn csv(rows: &[&str]) -> String {
        format!("{HEADER}\n{}\n", rows.join("\n"))
    }

    /// InferenceX's gpt-oss scripts for TensorRT-LLM set a 20,000-token step budget and
    /// 85% of free memory for the KV cache (an 8K prompt fits a step beside 64 decodes;
    /// TensorRT-LLM's own default budget, 8192, would not hold it).
    #[test]
    fn an_inferencex_gpt_oss_trtllm_row_carries_its_scripts_budget() {
        let text = csv(&["2026_04_06_gpt_oss_120b_h200_sxm_trtllm_fp4_agg_8192x1024_c64_tp2_ep1_444,source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=64; measured=2025-11-02T00:00:00.000Z; wip=False,trtllm,,openai/gpt-oss-120b,h200_sxm,fp4,agg,8192,1024,nvfp4,nvfp4,64,2,1,1,2,1,,,,,,,,,,,,,,,770.1,21.96"]);
        let imp = import(&text).unwrap();
        assert!(imp.refused.is_empty(), "{:?}", imp.refused);
        let s = &imp.records[0].engine.settings;
        assert_eq!(s.max_batched_tokens, Some(20000));
        assert_eq!(s.memory_fraction, Some(0.85));
        assert_eq!(s.prefix_caching, Some(false));
    }

    /// A TensorRT-LLM row of a per-tensor FP8 (or NVFP4) checkpoint serves the FP8 KV
    /// cache ModelOpt wrote into it; vLLM's row of the same checkpoint keeps the model's
    /// dtype, and a BF16 TensorRT-LLM row too.
    #[test]
    fn a_trtllm_modelopt_checkpoint_serves_an_fp8_kv_cache() {
        let row = |id: &str, engine: &str, q: &str, ttft: u32| {
            format!("{id},source_file=Qwen_Qwen3-32B.csv; silicon_concurrency=8,{engine},1.0.0rc3,Qwen/Qwen3-32B,h100_sxm,{q},agg,1024,128,{q},{q},8,1,1,1,1,1,,,,,,,,,,,,,,,{ttft}.0,10.0")
        };
        let text = csv(&[
            &row("a", "trtllm", "fp8", 100),
            &row("b", "vllm", "fp8", 110),
            &row("c", "trtllm", "", 120),
        ]);
        let imp = import(&text).unwrap();
        assert!(imp.refused.is_empty(), "{:?}", imp.refused);
        let kv: Vec<Option<Format>> = imp.records.iter().map(|r| r.model.kv).collect();
        assert_eq!(kv, [Some(Format::Fp8Tensor), None, None]);
    }

    /// InferenceX's Qwen3.5 SGLang scripts for Blackwell take new requests every 30
    /// decode steps from 16 users up and every 10 below; the H200 script every step.
    #[test]
    fn an_inferencex_qwen35_sglang_row_carries_its_scripts_receive_interval() {
        let row = |id: &str, system: &str, conc: u32| {
            format!("{id},source_file=2026-03-25.csv; silicon_concurrency={conc},sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,{system},fp8,agg,1024,1024,fp8,fp8_block,{conc},8,1,1,8,8,,,,,,,,,,,,,,,300.0,10.0")
        };
        let text = csv(&[
            &row("a_c64_tp8_0_ep8_0_1", "b200_sxm", 64),
            &row("b_c8_tp8_0_ep8_0_2", "b300_sxm", 8),
            &row("c_c64_tp8_0_ep8_0_3", "h200_sxm", 64),
        ]);
        let imp = import(&text).unwrap();
        assert!(imp.refused.is_empty(), "{:?}", imp.refused);
        let every: Vec<Option<u32>> = imp
            .records
            .iter()
            .map(|r| r.engine.settings.scheduler_recv_interval)
            .collect();
        assert_eq!(every, [Some(30), Some(10), None]);
    }

    /// An InferenceX row measured after the warm-up was added: lengths uniform on
    /// [floor(0.8 x 8192), 8192] = [6553, 8192] and [819, 1024]; 10 x 128 prompts, 2 x
    /// 128 warm-up; version from the image's tag; MiniMax's block FP8 and FP8 KV; 2 x
    /// ISL batched tokens.
    #[test]
    fn an_inferencex_row_reads_as_its_client_ran_it() {
        let text = csv(&["m_b300_vllm_c128_cfg733,db-dump/2026-04-27; config_id=733; silicon_concurrency=128; measured=2026-04-17T00:00:00.000Z; workflow_run_id=758; vllm/vllm-openai:v0.19.0-cu130,vllm,,MiniMaxAI/MiniMax-M2.5,b300_sxm,fp8,agg,8192,1024,fp8,fp8,128,4,1,1,4,1,,,,,,,,,,,,,,,972.3,33.4"]);
        let imp = import(&text).unwrap();
        assert!(imp.refused.is_empty(), "{:?}", imp.refused);
        let r = &imp.records[0];
        assert_eq!(r.engine.version.as_deref(), Some("0.19.0"));
        assert_eq!(
            r.engine.image.as_deref(),
            Some("vllm/vllm-openai:v0.19.0-cu130")
        );
        assert_eq!(r.engine.settings.max_batched_tokens, Some(16384));
        assert_eq!(r.engine.settings.prefix_caching, Some(false));
        assert_eq!(
            (r.model.gemm, r.model.moe, r.model.kv),
            (
                Format::Fp8Block,
                Some(Format::Fp8Block),
                Some(Format::Fp8Tensor)
            )
        );
        assert_eq!(r.gpu.hardware, "b300");
        assert_eq!(r.provenance.measured.as_deref(), Some("2026-04-17"));
        assert_eq!(
            r.client.input,
            Lengths::Uniform {
                low: 6553,
                high: 8192
            }
        );
        assert_eq!(
            r.client.output,
            Lengths::Uniform {
                low: 819,
                high: 1024
            }
        );
        assert_eq!(
            (r.client.num_prompts, r.client.warmup_requests),
            (Some(1280), 256)
        );
        assert_eq!(r.client.load, Load::ClosedLoop { concurrency: 128 });
        assert_eq!(r.figure(Metric::TtftMs, Stat::Center), Some(972.3));
        let Layout::Aggregated { workers } = &r.layout else {
            panic!()
        };
        assert_eq!(
            (workers.count, workers.tp, workers.moe_tp, workers.moe_ep),
            (Some(1), 4, 4, 1)
        );
        assert!(r.problems().is_empty());
    }

    /// A gap-analysis row: fixed lengths, no version, BF16; its concurrency 288 over a
    /// batch of 144 per replica makes 2 instances. Before InferenceX's warm-up
    /// (2025-10-29) an InferenceX row has none.
    #[test]
    fn internal_rows_are_fixed_length_and_replicas_come_from_the_concurrency() {
        let text = csv(&[
            "q_gb200_c288,source_file=qwen3_32b.csv; silicon_concurrency=288,trtllm,,Qwen/Qwen3-32B,gb200,bf16,agg,2000,500,,,144,2,1,0,0,0,,,,,,,,,,,,,,,300.0,20.0",
            "l_h100_c16_tp4_ep1_260,source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=16; measured=2025-10-29T00:00:00.000Z; wip=False,vllm,,meta-llama/Llama-3.1-70B,h100_sxm,fp8,agg,1024,1024,fp8,fp8,16,4,1,1,4,1,,,,,,,,,,,,,,,121.4,13.2",
        ]);
        let imp = import(&text).unwrap();
        let (q, l) = (&imp.records[0], &imp.records[1]);
        assert_eq!(q.client.input, Lengths::Fixed { tokens: 2000 });
        assert_eq!(q.client.load, Load::ClosedLoop { concurrency: 288 });
        let Layout::Aggregated { workers } = &q.layout else {
            panic!()
        };
        assert_eq!((workers.count, workers.tp), (Some(2), 2));
        assert_eq!((q.model.gemm, q.model.moe), (Format::Bf16, None));
        assert_eq!(q.engine.version, None);
        assert_eq!(l.client.warmup_requests, 0);
        assert_eq!(l.model.gemm, Format::Fp8Tensor);
    }

    /// The same measurement twice (one copy rounded to 0.01 ms) is one record; the
    /// export's mis-lowered TP16 layout gives way to the row id's TP4/EP4; a row whose
    /// layout cannot run and has no id suffix says so; an unknown model is refused with
    /// its line.
    #[test]
    fn duplicates_fold_layouts_are_repaired_and_bad_rows_are_named() {
        let text = csv(&[
            "q35_b200_c64_cfg615,db-dump/2026-04-27; config_id=615; silicon_concurrency=64; measured=2026-04-01T00:00:00.000Z,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,8192,1024,fp8,fp8_block,64,16,1,1,4,4,,,,,,,,,,,,,,,1000.004,40.001",
            "2026_03_25_q35_b200_sxm_sglang_fp8_agg_8192x1024_c64_tp4_0_ep4_0_337,source_file=2026-03-25.csv; silicon_concurrency=64,sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,8192,1024,fp8,fp8_block,64,4,1,1,1,4,,,,,,,,,,,,,,,1000.0,40.0",
            "x_c8,source_file=2026-04-06.csv; silicon_concurrency=8,vllm,0.18.0,Qwen/Qwen3.5-397B-A17B,b200_sxm,fp8,agg,1024,1024,fp8,fp8,2,4,1,4,1,16,,,,,,,,,,,,,,,50.0,10.0",
            "y,source_file=a.csv,vllm,,some/Model,h100_sxm,bf16,agg,10,10,,,1,1,1,1,1,1,,,,,,,,,,,,,,,1.0,1.0",
        ]);
        let imp = import(&text).unwrap();
        assert_eq!((imp.records.len(), imp.duplicates), (2, 1));
        let kept = &imp.records[0];
        assert_eq!(
            kept.id,
            "2026_03_25_q35_b200_sxm_sglang_fp8_agg_8192x1024_c64_tp4_0_ep4_0_337"
        );
        assert!(kept
            .provenance
            .notes
            .iter()
            .any(|n| n.contains("q35_b200_c64_cfg615")));
        let bad = &imp.records[1];
        assert!(
            bad.provenance
                .notes
                .iter()
                .any(|n| n.contains("mis-lowered")),
            "{:?}",
            bad.provenance.notes
        );
        assert_eq!(imp.refused.len(), 1);
        assert!(
            imp.refused[0].starts_with("line 5 (y): model `some/Model`"),
            "{:?}",
            imp.refused
        );
        assert_eq!(id_tp_ep("a_c64_tp4_0_ep4_0_337"), Some((4, 4)));
        assert_eq!(id_tp_ep("a_c64_tp2_ep1_1899"), Some((2, 1)));
        assert_eq!(id_tp_ep("a_c64_cfg615"), None);
    }
}
