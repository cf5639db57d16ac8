//! The layer plan of a config: every layer's token mixer and FFN, from the keys each
//! architecture describes its layers with (`layer_types`, `hybrid_override_pattern`,
//! `block_configs`, `compress_ratios`, `first_k_dense_replace`, ...). One function
//! reads each way of describing them; an architecture picks the ones its config uses.

use super::*;

/// One layer of the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct LayerSpec {
    pub attention: AttentionKind,
    pub ffn: FfnKind,
    /// Tokens per stored KV entry (DeepSeek-V4's compressed layers); 1 otherwise.
    pub ratio: u32,
    /// The layer has the architecture's second attention shape (Gemma-4's global
    /// layers, MiMo-V2's sliding-window layers).
    pub own_shape: bool,
    /// Its dense FFN's width where layers differ (DeciLM).
    pub ffn_width: Option<u32>,
    /// A sparse layer that reuses the previous layer's selection (GLM-5.2's
    /// `indexer_types = "shared"`).
    pub shares_selection: bool,
    /// A compressed or sparse layer with a sliding-window branch (DeepSeek-V4).
    pub window_branch: bool,
}

impl LayerSpec {
    fn new(attention: AttentionKind, ffn: FfnKind) -> LayerSpec {
        LayerSpec {
            attention,
            ffn,
            ratio: 1,
            own_shape: false,
            ffn_width: None,
            shares_selection: false,
            window_branch: false,
        }
    }
}

/// The plan of every layer of the config.
pub(super) fn plan(cfg: &Cfg, arch: &str, family: Family) -> Result<Vec<LayerSpec>> {
    let specs = match arch {
        "NemotronHForCausalLM" => nemotron_h(cfg)?,
        "DeciLMForCausalLM" => decilm(cfg)?,
        "DeepseekV4ForCausalLM" => deepseek_v4(cfg)?,
        _ => {
            let n = cfg.u32("num_hidden_layers")?;
            if n == 0 {
                bail!("{}: `num_hidden_layers` is 0", cfg.origin);
            }
            let mixers = mixer_kinds(cfg, arch, family, n)?;
            let ffns = ffn_kinds(cfg, arch, n)?;
            let mut specs: Vec<LayerSpec> = mixers
                .into_iter()
                .zip(ffns)
                .map(|((a, own), f)| LayerSpec {
                    own_shape: own,
                    ..LayerSpec::new(a, f)
                })
                .collect();
            shared_selection(cfg, &mut specs)?;
            specs
        }
    };
    if specs.is_empty() {
        bail!("{}: the config describes no layer", cfg.origin);
    }
    Ok(specs)
}

/// Each layer's token mixer and whether it has the architecture's second shape.
fn mixer_kinds(
    cfg: &Cfg,
    arch: &str,
    family: Family,
    n: u32,
) -> Result<Vec<(AttentionKind, bool)>> {
    use AttentionKind::*;
    let all = |k| vec![(k, false); n as usize];
    match arch {
        "DeepseekV32ForCausalLM" | "GlmMoeDsaForCausalLM" => return Ok(all(Sparse)),
        "MiniMaxM3ForCausalLM" | "MiniMaxM3SparseForConditionalGeneration" => {
            return minimax_m3(cfg, n)
        }
        "MiMoV2FlashForCausalLM" => {
            let p = listed(cfg, "hybrid_layer_pattern", n)?;
            // 1: a sliding-window layer (its own heads), 0: full attention.
            return Ok(p
                .iter()
                .map(|&x| {
                    if x == 1 {
                        (Window, true)
                    } else {
                        (Dense, false)
                    }
                })
                .collect());
        }
        "Llama4ForConditionalGeneration" => return llama4(cfg, n),
        _ if family == Family::Mla => return Ok(all(Dense)),
        _ => {}
    }
    if let Some(types) = cfg.str_list("layer_types") {
        if types.len() != n as usize {
            bail!(
                "{}: `layer_types` lists {} layers but num_hidden_layers is {n}",
                cfg.origin,
                types.len()
            );
        }
        let window = cfg.u32_opt("sliding_window")?.unwrap_or(0);
        // Gemma-4's global layers have their own heads.
        let gemma = arch == "Gemma4ForConditionalGeneration";
        return types
            .iter()
            .enumerate()
            .map(|(i, t)| match *t {
                "full_attention" => Ok((Dense, gemma)),
                "sliding_attention" if window > 0 => Ok((Window, false)),
                "sliding_attention" => bail!(
                    "{}: layer_types[{i}] is sliding_attention but sliding_window is not set",
                    cfg.origin
                ),
                "linear_attention" => Ok((Linear, false)),
                "chunked_attention" => Ok((Chunked, false)),
                other => bail!(
                    "{}: layer_types[{i}] = {other} (twin reads full_attention, sliding_attention, linear_attention, chunked_attention)",
                    cfg.origin
                ),
            })
            .collect();
    }
    if let Some(kinds) = qwen_hybrid_kinds(cfg, arch, n)? {
        return Ok(kinds);
    }
    Ok(window_kinds(cfg, arch, n)?
        .into_iter()
        .map(|k| (k, false))
        .collect())
}

/// Qwen3-Next's published config (and Qwen3.5's, where it omits the list) gives only
/// the interval of its full-attention layers: transformers derives the list from it
/// (`Qwen3NextConfig`: a layer is linear attention unless its 1-based index is a
/// multiple of `full_attention_interval`, default 4). `None` for other architectures.
fn qwen_hybrid_kinds(cfg: &Cfg, arch: &str, n: u32) -> Result<Option<Vec<(AttentionKind, bool)>>> {
    if !matches!(
        arch,
        "Qwen3NextForCausalLM"
            | "Qwen3_5MoeForConditionalGeneration"
            | "Qwen3_5ForConditionalGeneration"
    ) {
        return Ok(None);
    }
    let every = cfg.u32_opt("full_attention_interval")?.unwrap_or(4).max(1);
    Ok(Some(
        (0..n)
            .map(|i| {
                if (i + 1) % every == 0 {
                    (AttentionKind::Dense, false)
                } else {
                    (AttentionKind::Linear, false)
                }
            })
            .collect(),
    ))
}

/// A list key of `n` entries.
fn listed(cfg: &Cfg, key: &str, n: u32) -> Result<Vec<u32>> {
    let v = cfg.u32_list(key)?.ok_or_else(|| {
        err!(
            "{}: `{key}` (a list, one entry per layer) is missing",
            cfg.origin
        )
    })?;
    if v.len() != n as usize {
        bail!(
            "{}: `{key}` lists {} layers but num_hidden_layers is {n}",
            cfg.origin,
            v.len()
        );
    }
    Ok(v)
}

/// MiniMax-M3: block-sparse attention where `sparse_attention_config.
/// sparse_attention_freq` is 1, full attention elsewhere.
fn minimax_m3(cfg: &Cfg, n: u32) -> Result<Vec<(AttentionKind, bool)>> {
    let freq = cfg
        .get("sparse_attention_config")
        .and_then(|s| s.get("sparse_attention_freq"))
        .and_then(|f| f.as_array())
        .ok_or_else(|| {
            err!(
                "{}: `sparse_attention_config.sparse_attention_freq` is missing",
                cfg.origin
            )
        })?;
    if freq.len() != n as usize {
        bail!(
            "{}: sparse_attention_freq lists {} layers but num_hidden_layers is {n}",
            cfg.origin,
            freq.len()
        );
    }
    Ok(freq
        .iter()
        .map(|x| {
            if x.as_u64() == Some(1) {
                (AttentionKind::Sparse, false)
            } else {
                (AttentionKind::Dense, false)
            }
        })
        .collect())
}

/// Llama-4: chunked attention on the layers with RoPE, global attention on the NoPE
/// ones (`no_rope_layers`: 1 = RoPE; absent: every 4th layer is NoPE, transformers'
/// `no_rope_layer_interval = 4`).
fn llama4(cfg: &Cfg, n: u32) -> Result<Vec<(AttentionKind, bool)>> {
    let rope: Vec<bool> = match cfg.u32_list("no_rope_layers")? {
        Some(l) if l.len() == n as usize => l.iter().map(|x| *x == 1).collect(),
        Some(l) => bail!(
            "{}: `no_rope_layers` lists {} layers but num_hidden_layers is {n}",
            cfg.origin,
            l.len()
        ),
        None => (0..n).map(|i| (i + 1) % 4 != 0).collect(),
    };
    let chunked = cfg.u32_opt("attention_chunk_size")?.unwrap_or(0) > 0;
    Ok(rope
        .into_iter()
        .map(|r| {
            if r && chunked {
                (AttentionKind::Chunked, false)
            } else {
                (AttentionKind::Dense, false)
            }
        })
        .collect())
}

/// Each layer's attention without `layer_types`: Qwen2/Qwen3's `use_sliding_window`
/// from `max_window_layers` on; Mistral-style `sliding_window` on every layer; else
/// full attention.
fn window_kinds(cfg: &Cfg, arch: &str, n: u32) -> Result<Vec<AttentionKind>> {
    let window = cfg.u32_opt("sliding_window")?.unwrap_or(0);
    let qwen = matches!(
        arch,
        "Qwen2ForCausalLM" | "Qwen3ForCausalLM" | "Qwen3MoeForCausalLM" | "MiMoForCausalLM"
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

/// GLM-5.2's `indexer_types`: `full` layers run their indexer, `shared` ones reuse
/// the previous layer's selection.
fn shared_selection(cfg: &Cfg, specs: &mut [LayerSpec]) -> Result<()> {
    let Some(types) = cfg.str_list("indexer_types") else {
        return Ok(());
    };
    if types.len() != specs.len() {
        bail!(
            "{}: `indexer_types` lists {} layers but num_hidden_layers is {}",
            cfg.origin,
            types.len(),
            specs.len()
        );
    }
    for (i, (t, s)) in types.iter().zip(specs.iter_mut()).enumerate() {
        match *t {
            "full" => {}
            "shared" if i > 0 => s.shares_selection = s.attention == AttentionKind::Sparse,
            other => bail!(
                "{}: indexer_types[{i}] = {other} (twin reads full, and shared after the first layer)",
                cfg.origin
            ),
        }
    }
    Ok(())
}

/// Each layer's FFN where the config lists them (`mlp_layer_types`, or
/// `moe_layer_freq` as a list).
fn listed_ffn_kinds(cfg: &Cfg, n: u32) -> Result<Option<Vec<FfnKind>>> {
    // A list naming each layer's kind.
    if let Some(t) = cfg.str_list("mlp_layer_types") {
        if t.len() != n as usize {
            bail!(
                "{}: `mlp_layer_types` lists {} layers but num_hidden_layers is {n}",
                cfg.origin,
                t.len()
            );
        }
        return t
            .iter()
            .enumerate()
            .map(|(i, k)| match *k {
                "dense" => Ok(FfnKind::Dense),
                "sparse" | "moe" => Ok(FfnKind::Moe),
                other => bail!(
                    "{}: mlp_layer_types[{i}] = {other} (twin reads dense, sparse)",
                    cfg.origin
                ),
            })
            .collect::<Result<Vec<_>>>()
            .map(Some);
    }
    if let Some(l) = cfg.u32_list("moe_layer_freq")? {
        if l.len() != n as usize {
            bail!(
                "{}: `moe_layer_freq` lists {} layers but num_hidden_layers is {n}",
                cfg.origin,
                l.len()
            );
        }
        return Ok(Some(
            l.iter()
                .map(|x| {
                    if *x == 1 {
                        FfnKind::Moe
                    } else {
                        FfnKind::Dense
                    }
                })
                .collect(),
        ));
    }
    Ok(None)
}

/// Each layer's FFN: dense or MoE, by the keys the config gives.
fn ffn_kinds(cfg: &Cfg, arch: &str, n: u32) -> Result<Vec<FfnKind>> {
    let all = |k| vec![k; n as usize];
    if let Some(kinds) = listed_ffn_kinds(cfg, n)? {
        return Ok(kinds);
    }
    Ok(match arch {
        "LlamaForCausalLM"
        | "MistralForCausalLM"
        | "Qwen2ForCausalLM"
        | "Qwen3ForCausalLM"
        | "Qwen3VLForConditionalGeneration"
        | "Qwen3_5ForConditionalGeneration"
        | "MiMoForCausalLM" => all(FfnKind::Dense),
        "MixtralForCausalLM" | "GptOssForCausalLM" | "MiniMaxM2ForCausalLM" => all(FfnKind::Moe),
        "Gemma4ForConditionalGeneration" => {
            if cfg.bool("enable_moe_block")?.unwrap_or(false) {
                all(FfnKind::Moe)
            } else {
                all(FfnKind::Dense)
            }
        }
        "Llama4ForConditionalGeneration" => {
            let step = cfg
                .u32_opt("interleave_moe_layer_step")?
                .unwrap_or(1)
                .max(1);
            (0..n)
                .map(|i| {
                    if (i + 1) % step == 0 {
                        FfnKind::Moe
                    } else {
                        FfnKind::Dense
                    }
                })
                .collect()
        }
        "Qwen3MoeForCausalLM"
        | "Qwen3VLMoeForConditionalGeneration"
        | "Qwen3_5MoeForConditionalGeneration"
        | "Qwen3NextForCausalLM" => {
            let step = cfg.u32_opt("decoder_sparse_step")?.unwrap_or(1).max(1);
            let dense = cfg.u32_list("mlp_only_layers")?.unwrap_or_default();
            (0..n)
                .map(|i| {
                    if !dense.contains(&i) && (i + 1) % step == 0 {
                        FfnKind::Moe
                    } else {
                        FfnKind::Dense
                    }
                })
                .collect()
        }
        // DeepSeek, GLM, Kimi, Step: the first k layers dense, then MoE every `freq`.
        _ => {
            let k = cfg.u32_opt("first_k_dense_replace")?.unwrap_or(0);
            let freq = cfg.u32_opt("moe_layer_freq")?.unwrap_or(1).max(1);
            (0..n)
                .map(|i| {
                    if i >= k && i % freq == 0 {
                        FfnKind::Moe
                    } else {
                        FfnKind::Dense
                    }
                })
                .collect()
        }
    })
}

/// Nemotron-H: one block per layer, a Mamba-2 mixer (`M`), attention (`*`), a dense
/// MLP (`-`) or an MoE (`E`), from `hybrid_override_pattern` or `layers_block_type`.
fn nemotron_h(cfg: &Cfg) -> Result<Vec<LayerSpec>> {
    use AttentionKind as A;
    let blocks: Vec<String> = if let Some(p) = cfg.str("hybrid_override_pattern") {
        p.chars().map(|c| c.to_string()).collect()
    } else if let Some(l) = cfg.str_list("layers_block_type") {
        l.iter().map(|s| s.to_string()).collect()
    } else {
        bail!(
            "{}: NemotronHForCausalLM needs `hybrid_override_pattern` or `layers_block_type` (each layer's block)",
            cfg.origin
        );
    };
    if let Some(n) = cfg.u32_opt("num_hidden_layers")? {
        if n as usize != blocks.len() {
            bail!(
                "{}: the layer pattern has {} blocks but num_hidden_layers is {n}",
                cfg.origin,
                blocks.len()
            );
        }
    }
    blocks
        .iter()
        .enumerate()
        .map(|(i, b)| {
            Ok(match b.as_str() {
                "M" | "mamba" => LayerSpec::new(A::Mamba, FfnKind::None),
                "*" | "attention" => LayerSpec::new(A::Dense, FfnKind::None),
                "-" | "mlp" => LayerSpec::new(A::None, FfnKind::Dense),
                "E" | "moe" => LayerSpec::new(A::None, FfnKind::Moe),
                other => bail!(
                    "{}: layer {i}'s block `{other}` (twin reads M/mamba, */attention, -/mlp, E/moe)",
                    cfg.origin
                ),
            })
        })
        .collect()
}

/// DeciLM (Nemotron-NAS): `block_configs`, one per layer: attention or a no-op, and
/// a dense FFN of `ffn_mult` or a no-op. The FFN's width is transformers'
/// `_ffn_mult_to_intermediate_size`: 2 x ffn_mult x hidden / 3, rounded up to a
/// multiple of 256.
fn decilm(cfg: &Cfg) -> Result<Vec<LayerSpec>> {
    let blocks = match cfg.get("block_configs") {
        Some(Value::Array(b)) => b,
        _ => bail!("{}: DeciLMForCausalLM needs `block_configs`", cfg.origin),
    };
    let hidden = cfg.u32("hidden_size")? as f64;
    let mut out = Vec::with_capacity(blocks.len());
    for (i, b) in blocks.iter().enumerate() {
        let no_op = |part: &str| {
            b.get(part)
                .and_then(|p| p.get("no_op"))
                .and_then(|x| x.as_bool())
        };
        let linear = |part: &str| {
            b.get(part)
                .and_then(|p| p.get("replace_with_linear"))
                .and_then(|x| x.as_bool())
                .unwrap_or(false)
        };
        if linear("attention") || linear("ffn") {
            bail!(
                "{}: block_configs[{i}] replaces a part with a linear layer, which twin does not price",
                cfg.origin
            );
        }
        let attention = if no_op("attention").unwrap_or(false) {
            AttentionKind::None
        } else {
            AttentionKind::Dense
        };
        let (ffn, width) = if no_op("ffn").unwrap_or(false) {
            (FfnKind::None, None)
        } else {
            let mult = b
                .get("ffn")
                .and_then(|f| f.get("ffn_mult"))
                .and_then(|m| m.as_f64())
                .ok_or_else(|| {
                    err!("{}: block_configs[{i}].ffn.ffn_mult is missing", cfg.origin)
                })?;
            let w = (2.0 * mult * hidden / 3.0).floor() as u64;
            (FfnKind::Dense, Some(w.div_ceil(256) as u32 * 256))
        };
        out.push(LayerSpec {
            ffn_width: width,
            ..LayerSpec::new(attention, ffn)
        });
    }
    Ok(out)
}

/// DeepSeek-V4: `compress_ratios`, one per layer (and one more for the MTP layer):
/// 0 is a sliding-window layer alone, 4 compressed sparse attention (an indexer over
/// entries of 4 tokens), other ratios heavily compressed dense attention; the
/// compressed layers also attend over the sliding window.
fn deepseek_v4(cfg: &Cfg) -> Result<Vec<LayerSpec>> {
    let n = cfg.u32("num_hidden_layers")?;
    let ratios = cfg.u32_list("compress_ratios")?.ok_or_else(|| {
        err!(
            "{}: DeepseekV4ForCausalLM needs `compress_ratios`",
            cfg.origin
        )
    })?;
    if ratios.len() < n as usize {
        bail!(
            "{}: `compress_ratios` lists {} layers but num_hidden_layers is {n}",
            cfg.origin,
            ratios.len()
        );
    }
    let k = cfg.u32_opt("first_k_dense_replace")?.unwrap_or(0);
    Ok(ratios[..n as usize]
        .iter()
        .enumerate()
        .map(|(i, &r)| {
            let ffn = if (i as u32) < k {
                FfnKind::Dense
            } else {
                FfnKind::Moe
            };
            match r {
                0 | 1 => LayerSpec::new(AttentionKind::Window, ffn),
                4 => LayerSpec {
                    ratio: 4,
                    window_branch: true,
                    ..LayerSpec::new(AttentionKind::Sparse, ffn)
                },
                r => LayerSpec {
                    ratio: r,
                    window_branch: true,
                    ..LayerSpec::new(AttentionKind::Compressed, ffn)
                },
            }
        })
        .collect())
}

/// The provenance of the layer schedule: the keys it was read from.
pub(super) fn layer_story(cfg: &Cfg, arch: &str, layers: &[LayerGroup]) -> String {
    let n: u32 = layers.iter().map(|g| g.count).sum();
    let mut keys = vec!["num_hidden_layers"];
    for k in [
        "layer_types",
        "first_k_dense_replace",
        "mlp_only_layers",
        "decoder_sparse_step",
        "hybrid_override_pattern",
        "layers_block_type",
        "block_configs",
        "compress_ratios",
        "hybrid_layer_pattern",
        "moe_layer_freq",
        "mlp_layer_types",
        "indexer_types",
        "interleave_moe_layer_step",
        "sparse_attention_config",
    ] {
        // `moe_layer_freq` read as a list only (an integer beside
        // `first_k_dense_replace` says every layer after them).
        let list = matches!(cfg.get(k), Some(Value::Array(_)));
        if cfg.get(k).is_some() && (k != "moe_layer_freq" || list) {
            keys.push(k);
        }
    }
    if arch == "Llama4ForConditionalGeneration" {
        keys.push(
            "attention_chunk_size (every 4th layer global, transformers' no_rope_layer_interval)",
        );
    }
    format!(
        "{} ({arch}: {n} layers in {} groups)",
        cfg.derived(&keys.join(", ")),
        layers.len()
    )
}
