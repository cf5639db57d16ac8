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

mod layout;
mod served;

use crate::record::*;
use crate::CorpusError;
pub use layout::id_tp_ep;
use layout::{aggregated, disaggregated, inferencex_expert_parallel, whole_fp8_blocks};
use serde::Deserialize;
use served::{
    checkpoint, format_of, gap_analysis_settings, inferencex_kv, inferencex_settings,
    trtllm_modelopt_kv, Checkpoint,
};
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

/// twin's hardware name of an AIConfigurator system (its silicon rows' and its kernel
/// tables' system names alike).
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

/// Why a row of the CSV is not a record.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RowError {
    #[error("backend `{0}`: not vllm, sglang or trtllm")]
    Backend(String),
    #[error("system `{0}`: no twin hardware of that name")]
    System(String),
    #[error("model `{0}`: no config in the corpus")]
    Model(String),
    /// A quantization label twin does not read as a format.
    #[error("{0}")]
    Format(String),
    /// A layout twin cannot read.
    #[error("{0}")]
    Layout(String),
    #[error("no concurrency: neither silicon_concurrency nor a batch size")]
    NoConcurrency,
}

/// One row as a record (before duplicates are folded).
pub fn record_of(row: &Row) -> Result<RunRecord, RowError> {
    let engine =
        EngineName::parse(&row.backend).ok_or_else(|| RowError::Backend(row.backend.clone()))?;
    let hardware = hardware_of(&row.system).ok_or_else(|| RowError::System(row.system.clone()))?;
    let ck = checkpoint(&row.model_path).ok_or_else(|| RowError::Model(row.model_path.clone()))?;
    let fields = source_fields(&row.silicon_data_source);
    let field = |k: &str| {
        fields
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let image = image_of(&fields);
    let measured = field("measured").map(date);
    let origin = Origin::of(&row.silicon_data_source);
    let conc = field("silicon_concurrency").and_then(|c| c.parse::<u32>().ok());
    let mut notes = Vec::new();
    let (gemm, moe) = formats_of(row, &ck, &mut notes).map_err(RowError::Format)?;
    let blocked = (moe == Some(Format::Fp8Block)).then_some(ck.expert_ffn);
    let scripts = (origin, measured.as_deref());
    let (layout, conc) =
        layout_of(row, engine, conc, scripts, blocked, &mut notes).map_err(RowError::Layout)?;
    if conc == 0 {
        return Err(RowError::NoConcurrency);
    }
    let kv = if origin == Origin::InferenceX {
        inferencex_kv(&row.model_path, engine, &row.system, measured.as_deref())
    } else {
        None
    }
    .or_else(|| trtllm_modelopt_kv(engine, gemm, &mut notes));
    let script = (measured.as_deref(), image.as_deref());
    let settings = if origin == Origin::InferenceX {
        inferencex_settings(row, engine, conc, script, &mut notes)
    } else {
        gap_analysis_settings(row, engine, measured.as_deref(), &mut notes)
    };
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
        engine: engine_of(row, engine, image, settings),
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

/// The engine a row ran: name, version, image and the settings its deployment set.
fn engine_of(
    row: &Row,
    engine: EngineName,
    image: Option<String>,
    settings: EngineSettings,
) -> Engine {
    Engine {
        name: engine,
        version: version(row, image.as_deref()),
        image,
        settings,
    }
}

/// The serving image a row's source names (`lmsysorg/sglang:v0.5.9-cu130`), if any.
fn image_of(fields: &[(String, String)]) -> Option<String> {
    fields
        .iter()
        .find(|(k, v)| k.is_empty() && v.contains(':') && !v.starts_with("db-dump"))
        .or_else(|| fields.iter().find(|(k, _)| k == "image"))
        .map(|(_, v)| v.replace('#', "/"))
}

/// A row's dense-GEMM and routed-expert formats as its checkpoint serves them.
fn formats_of(
    row: &Row,
    ck: &Checkpoint,
    notes: &mut Vec<String>,
) -> Result<(Format, Option<Format>), String> {
    let gemm = format_of(&row.gemm_quant_mode, ck, notes)?;
    let moe = if ck.mxfp4_experts {
        notes.push(format!(
            "routed experts: the checkpoint's MXFP4 (label `{}`)",
            row.moe_quant_mode
        ));
        Some(Format::Mxfp4)
    } else if ck.moe {
        Some(format_of(&row.moe_quant_mode, ck, notes)?)
    } else {
        None
    };
    let gemm = if ck.mxfp4_experts { Format::Bf16 } else { gemm };
    // One note for a reading the dense GEMMs and the experts share.
    let mut seen = std::collections::HashSet::new();
    notes.retain(|n| seen.insert(n.clone()));
    Ok((gemm, moe))
}

/// A row's layout and the client's concurrency it implies (0 when neither is given).
/// `blocked_ffn`: the width of the routed experts where they are block FP8, whose
/// slices the engine may require whole ([`whole_fp8_blocks`]).
fn layout_of(
    row: &Row,
    engine: EngineName,
    conc: Option<u32>,
    (origin, measured): (Origin, Option<&str>),
    blocked_ffn: Option<u32>,
    notes: &mut Vec<String>,
) -> Result<(Layout, u32), String> {
    let ffn = blocked_ffn.unwrap_or(0);
    Ok(match row.mode.as_str() {
        "agg" => {
            let (mut w, c) = aggregated(row, engine, conc, origin, notes);
            whole_fp8_blocks(&mut w, engine, ffn, notes);
            if origin == Origin::InferenceX {
                inferencex_expert_parallel(row, engine, measured, &mut w, notes);
            }
            (Layout::Aggregated { workers: w }, c)
        }
        "disagg" => {
            let (mut p, mut d, c) = disaggregated(row, conc);
            whole_fp8_blocks(&mut p, engine, ffn, notes);
            whole_fp8_blocks(&mut d, engine, ffn, notes);
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
mod tests;
