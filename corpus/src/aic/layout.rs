//! A row's layout: aggregated workers (repaired from the row id where the export
//! mis-lowered it) or the two sides of a disaggregated deployment.

use super::{Origin, Row};
use crate::record::*;

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
pub(super) fn aggregated(
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
    // The export's batch size is per attention rank.
    let mut batch_ranks = w.attention_dp;
    if origin == Origin::InferenceX {
        if let Some((t, e)) = id_tp_ep(&row.id) {
            let as_exported = w.gpus_per_instance();
            if as_exported != t || !plausible(&w, &row.system, engine) {
                // InferenceX's single-node vLLM scripts serve `--tensor-parallel-size`
                // with `--enable-expert-parallel` and no data parallelism (MiniMax-M2.5
                // on H100 and B200: their search spaces `{ tp, ep }` without `dp-attn`);
                // its TensorRT-LLM ones run attention DP where the space says `dp-attn`.
                let dp = w.attention_dp > 1 && engine != EngineName::Vllm;
                w.tp = if dp { 1 } else { t };
                w.attention_dp = if dp { t } else { 1 };
                w.moe_ep = e;
                w.moe_tp = t / e;
                notes.push(format!(
                    "layout from the row id's InferenceX TP{t}/EP{e}{}: the export recorded {as_exported} GPUs (tp x ep){}",
                    if dp { " with attention DP" } else { "" },
                    if batch_ranks > 1 && !dp {
                        format!(" and attention DP {batch_ranks}, which InferenceX's vLLM scripts do not run")
                    } else {
                        String::new()
                    }
                ));
                if dp {
                    batch_ranks = w.attention_dp;
                }
            }
        }
    }
    let bs = row.batch_size.filter(|&b| b > 0);
    let per_replica = bs.map(|b| b * batch_ranks);
    let conc = match (conc, per_replica) {
        (Some(c), Some(p)) if c > p && c % p == 0 => {
            let n = c / p;
            w.count = Some(n);
            notes.push(format!(
                "{n} engine instances: the client's concurrency {c} over a batch of {} per attention replica",
                p / batch_ranks
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
pub(super) fn disaggregated(row: &Row, conc: Option<u32>) -> (Workers, Workers, Option<u32>) {
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

/// Block-FP8 experts `expert_ffn` wide (0: none) that `w` slices over `moe_tp` GPUs
/// into shards that are not whole scale blocks (the corpus's block-FP8 checkpoints,
/// Qwen3-235B-A22B-FP8, MiniMax-M2.5 and Qwen3.5, use `[128, 128]`) are re-read as
/// expert-parallel: vLLM and SGLang refuse to load such a shard
/// ([`spec::dtype::fp8_blocks_whole`]), so a run that was measured ran its experts
/// whole, over the same GPUs. InferenceX's MiniMax-M2.5 H200 script, the corpus's one case, passes
/// `--enable-expert-parallel` whenever `EP_SIZE >= 1` (from PR #869 of 2026-03-13; the
/// sweep's default EP is 1), while the export records `moe_tp 8`.
pub(super) fn whole_fp8_blocks(
    w: &mut Workers,
    engine: EngineName,
    expert_ffn: u32,
    notes: &mut Vec<String>,
) {
    let refuses = matches!(engine, EngineName::Vllm | EngineName::Sglang);
    if !refuses || expert_ffn == 0 || spec::dtype::fp8_blocks_whole(expert_ffn, w.moe_tp) {
        return;
    }
    let slice = expert_ffn / w.moe_tp;
    let why = format!(
        "{expert_ffn}-wide block-FP8 experts cut into {slice}-wide shards, not whole {}-wide scale blocks, which {} refuses to load",
        spec::dtype::FP8_BLOCK_SIDE,
        match engine {
            EngineName::Sglang => "SGLang",
            _ => "vLLM",
        }
    );
    experts_whole(w, &why, notes);
}

/// `w`'s experts, sliced over `moe_tp` GPUs as exported, re-read as whole experts
/// spread over the same GPUs (`moe_ep` times as many, `moe_tp` 1), with a note saying
/// `why`.
fn experts_whole(w: &mut Workers, why: &str, notes: &mut Vec<String>) {
    let (tp, ep) = (w.moe_tp, w.moe_ep);
    w.moe_ep = tp * ep;
    w.moe_tp = 1;
    notes.push(format!(
        "experts expert-parallel over {} GPUs, not sliced TP{tp}: {why} (the export recorded moe_tp {tp}, moe_ep {ep})",
        w.moe_ep
    ));
}

/// InferenceX scripts that pass `--enable-expert-parallel` whenever `EP_SIZE >= 1`, that
/// is at every point of their sweeps (elsewhere `-gt 1`): MiniMax-M2.5 on vLLM, on H200
/// from 5e2c705d (PR #869 of 2026-03-13) and on B200 from its first version (f342df18 of
/// 2026-03-11) until bddbf403 (2026-04-03). Their rows ran every expert whole, spread over
/// the TP GPUs, whatever the export recorded; a row without a date is taken as measured
/// after. Other rows, and disaggregated layouts, are left as they are.
pub(super) fn inferencex_expert_parallel(
    row: &Row,
    engine: EngineName,
    measured: Option<&str>,
    w: &mut Workers,
    notes: &mut Vec<String>,
) {
    let since = |date: &str| measured.is_none_or(|d| d >= date);
    let forced = engine == EngineName::Vllm
        && row.model_path == "MiniMaxAI/MiniMax-M2.5"
        && match row.system.as_str() {
            "h200_sxm" => since("2026-03-13"),
            "b200_sxm" => !since("2026-04-03"),
            _ => false,
        };
    if forced && w.moe_tp > 1 {
        let why =
            "the script of the row's date passes --enable-expert-parallel whenever EP_SIZE >= 1";
        experts_whole(w, why, notes);
    }
}
