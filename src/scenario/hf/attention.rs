//! The attention of an imported model: MLA (DeepSeek) or multi-head / grouped-query
//! attention, and which layers attend over a sliding window.

use super::*;

/// MLA attention (DeepSeek): the latent and its rope part per token.
pub(super) fn mla_attention(
    cfg: &Cfg,
    arch: &str,
    n_layers: u32,
    q: &Quant,
    prov: &mut Prov,
) -> Result<(Attention, Vec<AttentionKind>)> {
    let heads = cfg.u32("num_attention_heads")?;
    let kv_lora = cfg.u32("kv_lora_rank")?;
    let rope = cfg.u32("qk_rope_head_dim")?;
    let nope = cfg.u32("qk_nope_head_dim")?;
    let v = cfg.u32("v_head_dim")?;
    let q_lora = cfg.u32_opt("q_lora_rank")?.unwrap_or(0);
    let kvb = q.kv.dtype.bytes();
    let sparse = arch == "DeepseekV32ForCausalLM";
    let indexer = if sparse {
        Some(indexer(cfg, prov)?)
    } else {
        None
    };
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
        weight_dtype: q.attention.dtype,
        compute_dtype: Dtype::Bf16,
        kv_entry_bytes: (kv_lora + rope) as f64 * kvb,
        window: 0,
        sinks: false,
        window_entry_bytes: 0.0,
        chunk: 0,
        output_gate: false,
        indexer,
        replay: None,
    };
    let kind = if sparse {
        AttentionKind::Sparse
    } else {
        AttentionKind::Dense
    };
    Ok((a, vec![kind; n_layers as usize]))
}

/// DeepSeek-V3.2's lightning indexer.
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

/// Query heads, KV heads and the head width of a grouped-query config.
fn gqa_heads(cfg: &Cfg, hidden: u32, prov: &mut Prov) -> Result<(u32, u32, u32)> {
    let heads = cfg.u32("num_attention_heads")?;
    if heads == 0 {
        bail!("{}: `num_attention_heads` is 0", cfg.origin);
    }
    let kv_heads = match cfg.u32_opt("num_key_value_heads")? {
        Some(k) => {
            prov.set("attention.kv_heads", cfg.derived("num_key_value_heads"));
            k
        }
        None => {
            prov.set(
                "attention.kv_heads",
                "derived: num_key_value_heads absent, so one KV head per query head (MHA)",
            );
            heads
        }
    };
    if kv_heads == 0 || heads % kv_heads != 0 {
        bail!(
            "{}: num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}",
            cfg.origin
        );
    }
    let head_dim = match cfg.u32_opt("head_dim")? {
        Some(d) => {
            prov.set("attention.head_dim", cfg.derived("head_dim"));
            d
        }
        None => {
            prov.set(
                "attention.head_dim",
                cfg.derived("hidden_size / num_attention_heads (head_dim absent)"),
            );
            hidden / heads
        }
    };
    for f in [
        "attention.score_dim",
        "attention.value_dim",
        "attention.qk_head_dim",
        "attention.v_head_dim",
    ] {
        prov.set(f, prov.0["attention.head_dim"].clone());
    }
    prov.0.remove("attention.head_dim");
    Ok((heads, kv_heads, head_dim))
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

/// Multi-head / grouped-query attention: K and V of every KV head per token.
pub(super) fn gqa_attention(
    cfg: &Cfg,
    arch: &str,
    hidden: u32,
    n_layers: u32,
    q: &Quant,
    prov: &mut Prov,
) -> Result<(Attention, Vec<AttentionKind>)> {
    let (heads, kv_heads, head_dim) = gqa_heads(cfg, hidden, prov)?;
    prov.set("attention.heads", cfg.derived("num_attention_heads"));
    prov.set(
        "attention.kv_dim",
        cfg.derived("2 x num_key_value_heads x head_dim (K and V)"),
    );
    prov.set("attention.weight_dtype", q.attention.why.clone());
    prov.set(
        "attention.compute_dtype",
        "assumed: BF16 attention arithmetic (FlashAttention)",
    );
    let kvb = q.kv.dtype.bytes();
    let entry = 2.0 * kv_heads as f64 * head_dim as f64 * kvb;
    prov.set(
        "attention.kv_entry_bytes",
        format!(
            "derived: 2 x num_key_value_heads x head_dim x {kvb} B ({})",
            q.kv.why
        ),
    );
    // Which layers attend over a sliding window.
    let window = cfg.u32_opt("sliding_window")?.unwrap_or(0);
    let kinds = window_kinds(cfg, arch, n_layers, window)?;
    let windowed = kinds.contains(&AttentionKind::Window);
    if windowed {
        prov.set("attention.window", cfg.derived("sliding_window"));
        prov.set(
            "attention.window_entry_bytes",
            "derived: as attention.kv_entry_bytes (the same K and V per token)",
        );
    } else {
        no_window(cfg, prov);
    }
    prov.set(
        "attention.q_lora",
        format!("derived: {arch} projects queries directly (no low-rank query)"),
    );
    prov.set(
        "attention.kv_up_params",
        format!("derived: {arch} caches K and V themselves (no MLA latent)"),
    );
    let sinks = arch == "GptOssForCausalLM";
    if sinks {
        prov.set(
            "attention.sinks",
            "derived: GptOssForCausalLM attends with a learned sink per head",
        );
    }
    let a = Attention {
        heads,
        score_dim: head_dim,
        value_dim: head_dim,
        qk_head_dim: head_dim,
        v_head_dim: head_dim,
        q_lora: 0,
        kv_dim: 2 * kv_heads * head_dim,
        kv_heads,
        kv_up_params: 0,
        o_lora: None,
        weight_dtype: q.attention.dtype,
        compute_dtype: Dtype::Bf16,
        kv_entry_bytes: entry,
        window: if windowed { window } else { 0 },
        sinks,
        window_entry_bytes: if windowed { entry } else { 0.0 },
        chunk: 0,
        output_gate: false,
        indexer: None,
        replay: None,
    };
    Ok((a, kinds))
}

/// Each layer's attention: `layer_types` where the config lists them; Qwen2/Qwen3's
/// `use_sliding_window` from `max_window_layers` on; Mistral-style `sliding_window`
/// on every layer; else full attention.
fn window_kinds(cfg: &Cfg, arch: &str, n: u32, window: u32) -> Result<Vec<AttentionKind>> {
    if let Some(Value::Array(types)) = cfg.get("layer_types") {
        if types.len() != n as usize {
            bail!(
                "{}: `layer_types` lists {} layers but num_hidden_layers is {n}",
                cfg.origin,
                types.len()
            );
        }
        return types
            .iter()
            .enumerate()
            .map(|(i, t)| match t.as_str() {
                Some("full_attention") => Ok(AttentionKind::Dense),
                Some("sliding_attention") if window > 0 => Ok(AttentionKind::Window),
                Some("sliding_attention") => bail!(
                    "{}: layer_types[{i}] is sliding_attention but sliding_window is not set",
                    cfg.origin
                ),
                _ => bail!(
                    "{}: layer_types[{i}] = {t} (twin reads full_attention and sliding_attention)",
                    cfg.origin
                ),
            })
            .collect();
    }
    let qwen = matches!(
        arch,
        "Qwen2ForCausalLM" | "Qwen3ForCausalLM" | "Qwen3MoeForCausalLM"
    );
    let kinds = if window == 0 {
        vec![AttentionKind::Dense; n as usize]
    } else if qwen {
        let on = cfg.bool("use_sliding_window")?.unwrap_or(false);
        let from = cfg.u32_opt("max_window_layers")?.unwrap_or(n);
        (0..n)
            .map(|i| {
                if on && i >= from {
                    AttentionKind::Window
                } else {
                    AttentionKind::Dense
                }
            })
            .collect()
    } else if matches!(arch, "MistralForCausalLM" | "MixtralForCausalLM") {
        vec![AttentionKind::Window; n as usize]
    } else {
        vec![AttentionKind::Dense; n as usize]
    };
    Ok(kinds)
}
