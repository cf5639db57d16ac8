//! The attention of an imported model: MLA (DeepSeek, GLM-5, Kimi), DeepSeek-V4's
//! shared-head attention, or multi-head / grouped-query attention with its windows,
//! chunks, gates, sinks and a second shape for some layers; and the sparse-attention
//! indexers (DeepSeek-V3.2 and GLM-5's lightning indexer, MiniMax-M3's block
//! selection).

use super::arch::LayerSpec;
use super::*;
use spec::model::{Attention, Indexer};

/// MLA attention (DeepSeek): the latent and its rope part per token.
pub(super) fn mla_attention(
    cfg: &Cfg,
    layers: &[LayerSpec],
    q: &Quant,
    prov: &mut Prov,
) -> Result<(Attention, Option<AttentionShape>)> {
    let heads = cfg.u32("num_attention_heads")?;
    let kv_lora = cfg.u32("kv_lora_rank")?;
    let rope = cfg.u32("qk_rope_head_dim")?;
    let nope = cfg.u32("qk_nope_head_dim")?;
    let v = cfg.u32("v_head_dim")?;
    let q_lora = cfg.u32_opt("q_lora_rank")?.unwrap_or(0);
    let kvb = q.kv.dtype.bytes();
    let sparse = layers.iter().any(|l| l.attention == AttentionKind::Sparse);
    let indexer = if sparse {
        Some(indexer(cfg, prov)?)
    } else {
        None
    };
    mla_provenance(cfg, q, kvb, prov);
    let a = Attention {
        heads,
        score_dim: kv_lora + rope,
        value_dim: kv_lora,
        qk_head_dim: nope + rope,
        v_head_dim: v,
        q_lora,
        kv_dim: kv_lora + rope,
        kv_heads: 1,
        kv_up_params: kv_lora as u64 * heads as u64 * (nope + v) as u64,
        o_lora: None,
        o_groups: None,
        weight_dtype: q.attention.dtype,
        compute_dtype: Dtype::Bf16,
        kv_entry_bytes: (kv_lora + rope) as f64 * kvb,
        window: 0,
        sinks: false,
        window_entry_bytes: 0.0,
        chunk: 0,
        output_gate: false,
        layer_qk_norm: false,
        indexer,
        replay: None,
    };
    Ok((a, None))
}

/// Provenance of MLA attention's fields (`kvb`: bytes per cached KV element).
fn mla_provenance(cfg: &Cfg, q: &Quant, kvb: f64, prov: &mut Prov) {
    prov.set("attention.heads", cfg.derived("num_attention_heads"));
    prov.set(
        "attention.score_dim",
        cfg.derived("kv_lora_rank + qk_rope_head_dim (absorbed MLA scores)"),
    );
    prov.set(
        "attention.value_dim",
        cfg.derived("kv_lora_rank (absorbed MLA values)"),
    );
    prov.set(
        "attention.qk_head_dim",
        cfg.derived("qk_nope_head_dim + qk_rope_head_dim"),
    );
    prov.set("attention.v_head_dim", cfg.derived("v_head_dim"));
    prov.set(
        "attention.q_lora",
        if cfg.get("q_lora_rank").is_some() {
            cfg.derived("q_lora_rank")
        } else {
            "derived: q_lora_rank absent (a full query projection)".into()
        },
    );
    prov.set(
        "attention.kv_dim",
        cfg.derived("kv_lora_rank + qk_rope_head_dim"),
    );
    prov.set(
        "attention.kv_heads",
        "derived: MLA caches one latent shared by every head",
    );
    no_window(cfg, prov);
    prov.set(
        "attention.kv_up_params",
        cfg.derived("kv_lora_rank x num_attention_heads x (qk_nope_head_dim + v_head_dim)"),
    );
    prov.set("attention.weight_dtype", q.attention.why.clone());
    prov.set(
        "attention.compute_dtype",
        "assumed: BF16 attention arithmetic (FlashMLA)",
    );
    prov.set(
        "attention.kv_entry_bytes",
        format!(
            "derived: (kv_lora_rank + qk_rope_head_dim) x {kvb} B ({})",
            q.kv.why
        ),
    );
}

/// The lightning indexer of DeepSeek-V3.2 and GLM-5 (and V4's).
fn indexer(cfg: &Cfg, prov: &mut Prov) -> Result<Indexer> {
    let heads = cfg.u32("index_n_heads")?;
    let head_dim = cfg.u32("index_head_dim")?;
    let top_k = cfg.u32("index_topk")?;
    prov.set("attention.indexer.heads", cfg.derived("index_n_heads"));
    prov.set("attention.indexer.head_dim", cfg.derived("index_head_dim"));
    prov.set("attention.indexer.top_k", cfg.derived("index_topk"));
    prov.set(
        "attention.indexer.dtype",
        "assumed: FP8 indexer arithmetic (DeepSeek-V3.2's lightning indexer)",
    );
    prov.set(
        "attention.indexer.key_bytes",
        "assumed: one FP8 byte per index_head_dim and an FP32 scale",
    );
    Ok(Indexer {
        heads,
        head_dim,
        dtype: Dtype::Fp8,
        top_k,
        key_bytes: head_dim as f64 + 4.0,
    })
}

/// MiniMax-M3's block-sparse attention: `sparse_num_index_heads` index heads of
/// `sparse_index_dim` score blocks of `sparse_block_size` tokens, and each query reads
/// its `sparse_topk_blocks` best blocks.
fn block_indexer(cfg: &Cfg, prov: &mut Prov) -> Result<Indexer> {
    let s = cfg
        .get("sparse_attention_config")
        .cloned()
        .unwrap_or(Value::Null);
    let num = |k: &str| -> Result<u32> {
        s.get(k)
            .and_then(|v| v.as_u64())
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| err!("{}: `sparse_attention_config.{k}` is missing", cfg.origin))
    };
    let (heads, dim) = (num("sparse_num_index_heads")?, num("sparse_index_dim")?);
    let (blocks, block) = (num("sparse_topk_blocks")?, num("sparse_block_size")?);
    let why = |k: &str| cfg.derived(&format!("sparse_attention_config.{k}"));
    prov.set("attention.indexer.heads", why("sparse_num_index_heads"));
    prov.set("attention.indexer.head_dim", why("sparse_index_dim"));
    prov.set(
        "attention.indexer.top_k",
        why("sparse_topk_blocks x sparse_block_size (tokens read per query)"),
    );
    prov.set(
        "attention.indexer.dtype",
        "assumed: BF16 index arithmetic (no FP8 index keys named)",
    );
    prov.set(
        "attention.indexer.key_bytes",
        "assumed: one BF16 index key of sparse_index_dim per token (block scores are maxima over tokens: sparse_score_type max)",
    );
    Ok(Indexer {
        heads,
        head_dim: dim,
        dtype: Dtype::Bf16,
        top_k: blocks.saturating_mul(block),
        key_bytes: 2.0 * dim as f64,
    })
}

/// DeepSeek-V4's attention: one K/V head of `head_dim` shared by every query head
/// (cached whole), a low-rank query (`q_lora_rank`) and a grouped low-rank output
/// (`o_lora_rank`), a sliding window, the lightning indexer of its sparse layers.
pub(super) fn v4_attention(
    cfg: &Cfg,
    q: &Quant,
    prov: &mut Prov,
) -> Result<(Attention, Option<AttentionShape>)> {
    let heads = cfg.u32("num_attention_heads")?;
    let d = cfg.u32("head_dim")?;
    let q_lora = cfg.u32("q_lora_rank")?;
    let o_lora = cfg.u32("o_lora_rank")?;
    let window = cfg.u32("sliding_window")?;
    let kvb = q.kv.dtype.bytes();
    for f in [
        "attention.score_dim",
        "attention.value_dim",
        "attention.qk_head_dim",
        "attention.v_head_dim",
        "attention.kv_dim",
    ] {
        prov.set(
            f,
            cfg.derived("head_dim (one K/V head, keys and values shared)"),
        );
    }
    prov.set("attention.heads", cfg.derived("num_attention_heads"));
    prov.set("attention.kv_heads", cfg.derived("num_key_value_heads"));
    prov.set("attention.q_lora", cfg.derived("q_lora_rank"));
    prov.set("attention.o_lora", cfg.derived("o_lora_rank"));
    let o_groups = cfg.u32_opt("o_groups")?.filter(|g| *g > 1);
    if o_groups.is_some() {
        prov.set(
            "attention.o_groups",
            cfg.derived("o_groups (each group's heads to its own o_lora_rank, then all groups' ranks to the hidden state)"),
        );
    }
    prov.set(
        "attention.kv_up_params",
        "derived: DeepseekV4ForCausalLM caches its K/V head itself",
    );
    prov.set("attention.window", cfg.derived("sliding_window"));
    let entry = format!("derived: head_dim x {kvb} B ({})", q.kv.why);
    prov.set("attention.kv_entry_bytes", entry.clone());
    prov.set("attention.window_entry_bytes", entry);
    prov.set("attention.weight_dtype", q.attention.why.clone());
    prov.set(
        "attention.compute_dtype",
        "assumed: BF16 arithmetic over the cached entries, as FlashMLA's sparse kernels",
    );
    let a = Attention {
        heads,
        score_dim: d,
        value_dim: d,
        qk_head_dim: d,
        v_head_dim: d,
        q_lora,
        kv_dim: d,
        kv_heads: 1,
        kv_up_params: 0,
        o_lora: Some(o_lora),
        o_groups,
        weight_dtype: q.attention.dtype,
        compute_dtype: Dtype::Bf16,
        kv_entry_bytes: d as f64 * kvb,
        window,
        sinks: false,
        window_entry_bytes: d as f64 * kvb,
        chunk: 0,
        output_gate: false,
        layer_qk_norm: false,
        indexer: Some(indexer(cfg, prov)?),
        replay: None,
    };
    Ok((a, None))
}

/// Query heads, KV heads, the query/key and value head widths of a grouped-query
/// config.
fn gqa_heads(cfg: &Cfg, arch: &str, hidden: u32, prov: &mut Prov) -> Result<(u32, u32, u32, u32)> {
    let heads = cfg.u32("num_attention_heads")?;
    if heads == 0 {
        bail!("{}: `num_attention_heads` is 0", cfg.origin);
    }
    let family = TransformersDefaults::of(arch);
    let kv_heads = match (cfg.u32_opt("num_key_value_heads")?, arch) {
        (Some(k), _) => {
            prov.set("attention.kv_heads", cfg.derived("num_key_value_heads"));
            k
        }
        (None, "DeciLMForCausalLM") => decilm_kv_heads(cfg, heads, prov)?,
        (None, _) => default_kv_heads(cfg, arch, heads, family.as_ref(), prov),
    };
    if kv_heads == 0 || heads % kv_heads != 0 {
        bail!(
            "{}: num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}",
            cfg.origin
        );
    }
    let (d, why) = match cfg.first(&["head_dim", "attention_head_dim"])? {
        Some((d, k)) => (d, cfg.derived(k)),
        None => default_head_dim(cfg, arch, hidden, heads, family.as_ref(), prov),
    };
    let (v, vwhy) = match cfg.u32_opt("v_head_dim")? {
        Some(v) => (v, cfg.derived("v_head_dim")),
        None => (d, why.clone()),
    };
    for f in ["attention.score_dim", "attention.qk_head_dim"] {
        prov.set(f, why.clone());
    }
    for f in ["attention.value_dim", "attention.v_head_dim"] {
        prov.set(f, vwhy.clone());
    }
    Ok((heads, kv_heads, d, v))
}

/// The KV heads of a config without `num_key_value_heads`: transformers' default for
/// the architecture's class, else one per query head (MHA); noted as a fallback.
fn default_kv_heads(
    cfg: &Cfg,
    arch: &str,
    heads: u32,
    family: Option<&TransformersDefaults>,
    prov: &mut Prov,
) -> u32 {
    let (k, why) = match family.and_then(|f| f.kv_heads.map(|k| (k, f))) {
        Some((k, f)) => (k, format!("{} default {k} ({})", f.class, f.source)),
        None => (
            heads,
            match family {
                Some(f) => format!(
                    "{} default: num_attention_heads, one KV head per query head (MHA) ({})",
                    f.class, f.source
                ),
                None => format!("no transformers default known to twin for {arch}: one KV head per query head (MHA), as LlamaConfig does"),
            },
        ),
    };
    prov.fallback(
        "attention.kv_heads",
        format!(
            "{}: num_key_value_heads absent: {k}, transformers' {why}",
            cfg.file
        ),
    );
    k
}

/// The head width of a config without `head_dim`: transformers' default for the
/// architecture's class, else `hidden_size / num_attention_heads`; noted as a fallback.
/// Returns the width and its provenance.
fn default_head_dim(
    cfg: &Cfg,
    arch: &str,
    hidden: u32,
    heads: u32,
    family: Option<&TransformersDefaults>,
    prov: &mut Prov,
) -> (u32, String) {
    let (d, how) = match family.and_then(|f| f.head_dim.map(|d| (d, f))) {
        Some((d, f)) => (d, format!("transformers' {} default {d} ({})", f.class, f.source)),
        None => (
            hidden / heads,
            match family {
                Some(f) => format!(
                    "hidden_size / num_attention_heads, as transformers' {} derives it ({})",
                    f.class, f.source
                ),
                None => format!("hidden_size / num_attention_heads (no transformers default known to twin for {arch}; LlamaConfig's rule)"),
            },
        ),
    };
    let why = format!("{}: head_dim absent: {d}, {how}", cfg.file);
    prov.fallback("attention.qk_head_dim", why.clone());
    (d, format!("assumed: {why}"))
}

/// What transformers' configuration class of an architecture gives `num_key_value_heads`
/// and `head_dim` when a config leaves them out (None: derived, MHA and
/// `hidden_size / num_attention_heads`), read from the classes' sources
/// (huggingface/transformers, src/transformers/models/*/configuration_*.py, commit
/// 008e574; Mistral's at 001f85b, gpt-oss's at 02b8f42).
struct TransformersDefaults {
    class: &'static str,
    source: &'static str,
    kv_heads: Option<u32>,
    head_dim: Option<u32>,
}

impl TransformersDefaults {
    fn of(arch: &str) -> Option<TransformersDefaults> {
        let (class, source, kv_heads, head_dim) = match arch {
            "LlamaForCausalLM" => ("LlamaConfig", "configuration_llama.py", None, None),
            "MistralForCausalLM" => ("MistralConfig", "configuration_mistral.py", Some(8), None),
            "MixtralForCausalLM" => ("MixtralConfig", "configuration_mixtral.py", Some(8), None),
            "Qwen2ForCausalLM" => ("Qwen2Config", "configuration_qwen2.py", Some(32), None),
            "Qwen3ForCausalLM" => ("Qwen3Config", "configuration_qwen3.py", Some(32), Some(128)),
            "Qwen3MoeForCausalLM" => (
                "Qwen3MoeConfig",
                "configuration_qwen3_moe.py",
                Some(4),
                None,
            ),
            "GptOssForCausalLM" => (
                "GptOssConfig",
                "configuration_gpt_oss.py",
                Some(8),
                Some(64),
            ),
            _ => return None,
        };
        Some(TransformersDefaults {
            class,
            source,
            kv_heads,
            head_dim,
        })
    }
}

/// DeciLM's KV heads: `num_attention_heads / n_heads_in_group` of its attention
/// blocks, which must agree.
fn decilm_kv_heads(cfg: &Cfg, heads: u32, prov: &mut Prov) -> Result<u32> {
    let groups: Vec<u64> = match cfg.get("block_configs") {
        Some(Value::Array(b)) => b
            .iter()
            .filter_map(|x| x.get("attention"))
            .filter(|a| a.get("no_op").and_then(|n| n.as_bool()) != Some(true))
            .filter_map(|a| a.get("n_heads_in_group").and_then(|g| g.as_u64()))
            .collect(),
        _ => Vec::new(),
    };
    match groups.first() {
        Some(&g) if g > 0 && groups.iter().all(|x| *x == g) => {
            prov.set(
                "attention.kv_heads",
                cfg.derived("num_attention_heads / block_configs[].attention.n_heads_in_group"),
            );
            Ok(heads / g as u32)
        }
        Some(_) => bail!(
            "{}: block_configs give attention layers different n_heads_in_group; twin prices one KV-head count per model",
            cfg.origin
        ),
        None => bail!("{}: no attention block gives n_heads_in_group", cfg.origin),
    }
}

/// Provenance of the window fields of a model without sliding-window layers.
fn no_window(cfg: &Cfg, prov: &mut Prov) {
    let why = match cfg.get("sliding_window") {
        Some(_) => cfg.derived("sliding_window, but no layer slides"),
        None => cfg.derived("sliding_window absent or null (no sliding-window layer)"),
    };
    prov.set("attention.window", why.clone());
    prov.set("attention.window_entry_bytes", why);
}

/// Multi-head / grouped-query attention: K and V of every KV head per token, with the
/// architecture's second shape where some layers have their own heads.
pub(super) fn gqa_attention(
    cfg: &Cfg,
    arch: &str,
    hidden: u32,
    layers: &[LayerSpec],
    q: &Quant,
    prov: &mut Prov,
) -> Result<(Attention, Option<AttentionShape>)> {
    let (heads, kv_heads, d, v) = gqa_heads(cfg, arch, hidden, prov)?;
    prov.set("attention.heads", cfg.derived("num_attention_heads"));
    let widths = if d == v {
        "head_dim"
    } else {
        "(head_dim + v_head_dim) / 2"
    };
    prov.set(
        "attention.kv_dim",
        cfg.derived(&format!("2 x num_key_value_heads x {widths} (K and V)")),
    );
    prov.set("attention.weight_dtype", q.attention.why.clone());
    prov.set(
        "attention.compute_dtype",
        "assumed: BF16 attention arithmetic (FlashAttention)",
    );
    let kvb = q.kv.dtype.bytes();
    let entry = kv_heads as f64 * (d + v) as f64 * kvb;
    prov.set(
        "attention.kv_entry_bytes",
        format!(
            "derived: 2 x num_key_value_heads x {widths} x {kvb} B ({})",
            q.kv.why
        ),
    );
    let has = |k: AttentionKind| layers.iter().any(|l| l.attention == k);
    let (window, chunk) = window_and_chunk(cfg, &has, prov)?;
    let output_gate = direct_projections(cfg, arch, prov)?;
    let sinks = sinks(cfg, arch, prov)?;
    let layer_qk_norm = layer_qk_norm(cfg, prov)?;
    let indexer = if has(AttentionKind::Sparse) {
        Some(block_indexer(cfg, prov)?)
    } else {
        None
    };
    let a = Attention {
        heads,
        score_dim: d,
        value_dim: v,
        qk_head_dim: d,
        v_head_dim: v,
        q_lora: 0,
        kv_dim: kv_heads * (d + v),
        kv_heads,
        kv_up_params: 0,
        o_lora: None,
        o_groups: None,
        weight_dtype: q.attention.dtype,
        compute_dtype: Dtype::Bf16,
        kv_entry_bytes: entry,
        window,
        sinks,
        window_entry_bytes: if window > 0 { entry } else { 0.0 },
        chunk,
        output_gate,
        layer_qk_norm,
        indexer,
        replay: None,
    };
    let shape = if layers.iter().any(|l| l.own_shape) {
        Some(second_shape(cfg, arch, heads, kvb, prov)?)
    } else {
        None
    };
    Ok((a, shape))
}

/// The sliding window and the attention chunk of a grouped-query model (0: no layer
/// has one), with their provenance; `has` says whether some layer is of a kind.
fn window_and_chunk(
    cfg: &Cfg,
    has: &impl Fn(AttentionKind) -> bool,
    prov: &mut Prov,
) -> Result<(u32, u32)> {
    let window = if has(AttentionKind::Window) {
        prov.set("attention.window", cfg.derived("sliding_window"));
        prov.set(
            "attention.window_entry_bytes",
            "derived: as attention.kv_entry_bytes (the same K and V per token)",
        );
        cfg.u32("sliding_window")?
    } else {
        no_window(cfg, prov);
        0
    };
    let chunk = if has(AttentionKind::Chunked) {
        prov.set("attention.chunk", cfg.derived("attention_chunk_size"));
        cfg.u32("attention_chunk_size")?
    } else {
        0
    };
    Ok((window, chunk))
}

/// Provenance of an attention that projects queries directly and caches K and V
/// themselves; returns whether its output is gated (`attn_output_gate`).
fn direct_projections(cfg: &Cfg, arch: &str, prov: &mut Prov) -> Result<bool> {
    prov.set(
        "attention.q_lora",
        format!("derived: {arch} projects queries directly (no low-rank query)"),
    );
    prov.set(
        "attention.kv_up_params",
        format!("derived: {arch} caches K and V themselves (no MLA latent)"),
    );
    let output_gate = cfg.bool("attn_output_gate")?.unwrap_or(false);
    if output_gate {
        prov.set("attention.output_gate", cfg.derived("attn_output_gate"));
    }
    Ok(output_gate)
}

/// Whether the query and key RMSNorms span the whole projection (MiniMax-M2's
/// `use_qk_norm` with `qk_norm_type = "per_layer"`) rather than each head.
fn layer_qk_norm(cfg: &Cfg, prov: &mut Prov) -> Result<bool> {
    let layer =
        cfg.bool("use_qk_norm")?.unwrap_or(false) && cfg.str("qk_norm_type") == Some("per_layer");
    if layer {
        prov.set(
            "attention.layer_qk_norm",
            cfg.derived("use_qk_norm, qk_norm_type = \"per_layer\" (one RMSNorm over every head's queries, one over the keys)"),
        );
    }
    Ok(layer)
}

/// Attention sinks: gpt-oss's on every layer; MiMo-V2's sink biases.
fn sinks(cfg: &Cfg, arch: &str, prov: &mut Prov) -> Result<bool> {
    if arch == "GptOssForCausalLM" {
        prov.set(
            "attention.sinks",
            "derived: GptOssForCausalLM attends with a learned sink per head",
        );
        return Ok(true);
    }
    for k in [
        "add_swa_attention_sink_bias",
        "add_full_attention_sink_bias",
    ] {
        if cfg.bool(k)?.unwrap_or(false) {
            prov.set(
                "attention.sinks",
                cfg.derived(&format!(
                    "{k} (a sink logit per head; priced on every layer)"
                )),
            );
            return Ok(true);
        }
    }
    Ok(false)
}

/// The second attention shape: Gemma-4's global layers (`num_global_key_value_heads`
/// of `global_head_dim`; with `attention_k_eq_v` one projection serves keys and
/// values), MiMo-V2's sliding-window layers (`swa_*`).
fn second_shape(
    cfg: &Cfg,
    arch: &str,
    heads: u32,
    kvb: f64,
    prov: &mut Prov,
) -> Result<AttentionShape> {
    let s = match arch {
        "Gemma4ForConditionalGeneration" => {
            let kv = cfg.u32("num_global_key_value_heads")?;
            let d = cfg.u32("global_head_dim")?;
            let k_eq_v = cfg.bool("attention_k_eq_v")?.unwrap_or(false);
            prov.set(
                "layers.attention_shape",
                cfg.derived(&format!(
                    "full_attention layers: num_attention_heads, num_global_key_value_heads, global_head_dim{}; both K and V cached (assumed: the engines' caches hold K and V apart)",
                    if k_eq_v { ", attention_k_eq_v (one K/V projection)" } else { "" }
                )),
            );
            AttentionShape {
                heads,
                kv_heads: kv,
                qk_head_dim: d,
                v_head_dim: d,
                kv_dim: if k_eq_v { kv * d } else { 2 * kv * d },
                kv_entry_bytes: 2.0 * kv as f64 * d as f64 * kvb,
            }
        }
        "MiMoV2FlashForCausalLM" => {
            let h = cfg.u32("swa_num_attention_heads")?;
            let kv = cfg.u32("swa_num_key_value_heads")?;
            let d = cfg.u32("swa_head_dim")?;
            let v = cfg.u32_opt("swa_v_head_dim")?.unwrap_or(d);
            prov.set(
                "layers.attention_shape",
                cfg.derived("sliding-window layers: swa_num_attention_heads, swa_num_key_value_heads, swa_head_dim, swa_v_head_dim"),
            );
            AttentionShape {
                heads: h,
                kv_heads: kv,
                qk_head_dim: d,
                v_head_dim: v,
                kv_dim: kv * (d + v),
                kv_entry_bytes: kv as f64 * (d + v) as f64 * kvb,
            }
        }
        other => bail!(
            "{}: {other} has no second attention shape twin reads",
            cfg.origin
        ),
    };
    Ok(s)
}
