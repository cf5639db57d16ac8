//! The checkpoint's number formats: `--weights`, a ModelOpt `hf_quant_config.json`,
//! the config's own `quantization_config`, or its `torch_dtype`; and the KV cache's.

use super::*;

/// One linear layer class's format: dtype, weights per one-byte scale, and how the
/// statement reads in provenance.
#[derive(Debug, Clone)]
pub(super) struct Format {
    pub(super) dtype: Dtype,
    pub(super) scale_block: u32,
    pub(super) why: String,
}

/// The checkpoint's formats: attention projections, routed experts, the other GEMMs
/// (shared experts, dense FFN), the experts' activations, the KV cache.
#[derive(Debug, Clone)]
pub(super) struct Quant {
    pub(super) attention: Format,
    pub(super) experts: Format,
    pub(super) other: Format,
    pub(super) activation: Format,
    pub(super) kv: Format,
}

/// The checkpoint's formats from `--weights`, `--quant`, the config's own
/// `quantization_config`, or its `torch_dtype`, in that order; the KV cache's from
/// `--kv-dtype`, the quantization config, or BF16.
pub(super) fn quant(cfg: &Cfg, opts: &ImportOptions) -> Result<Quant> {
    let bf16 = |why: &str| Format {
        dtype: Dtype::Bf16,
        scale_block: 0,
        why: why.to_string(),
    };
    let f = |dtype, scale_block, why: String| Format {
        dtype,
        scale_block,
        why,
    };
    let torch = cfg
        .get("torch_dtype")
        .or_else(|| cfg.get("dtype"))
        .and_then(|v| v.as_str())
        .unwrap_or("bfloat16");
    let base = match torch {
        "float32" => bail!(
            "{}: torch_dtype float32: serve it in BF16 (`--weights bf16`) or give its quantization",
            cfg.origin
        ),
        "float16" => bf16(&format!(
            "derived: {} torch_dtype float16 (priced as BF16: the same bytes and tensor rate)",
            cfg.file
        )),
        _ => bf16(&cfg.derived(&format!("torch_dtype {torch}"))),
    };
    let mut q = Quant {
        attention: base.clone(),
        experts: base.clone(),
        other: base.clone(),
        activation: base.clone(),
        kv: bf16("assumed: BF16 KV cache (vLLM's --kv-cache-dtype auto: the model's dtype)"),
    };
    let all = |q: &mut Quant, fm: Format| {
        q.attention = fm.clone();
        q.experts = fm.clone();
        q.other = fm;
    };
    if let Some(w) = opts.weights {
        let why = |s: &str| format!("given: --weights {s}");
        match w {
            WeightChoice::Bf16 => all(&mut q, f(Dtype::Bf16, 0, why("bf16"))),
            WeightChoice::Fp8 => all(
                &mut q,
                f(
                    Dtype::Fp8,
                    4096,
                    why("fp8 (128x128 blocks, an FP32 scale each)"),
                ),
            ),
            WeightChoice::Fp8Tensor => all(
                &mut q,
                f(Dtype::Fp8, 0, why("fp8-tensor (one scale per tensor)")),
            ),
            WeightChoice::Fp4 => all(
                &mut q,
                f(
                    Dtype::Fp4,
                    16,
                    why("fp4 (NVFP4: an FP8 scale per 16 weights)"),
                ),
            ),
            WeightChoice::Mxfp4 => {
                q.experts = f(
                    Dtype::Fp4,
                    32,
                    why("mxfp4 (routed experts: an E8M0 scale per 32 weights)"),
                )
            }
        }
    } else if let Some((qorigin, qtext)) = &opts.quant {
        modelopt(&mut q, qorigin, qtext)?;
    } else if let Some(qc) = cfg.get("quantization_config") {
        quantization_config(&mut q, cfg, qc)?;
    }
    q.activation = match (q.experts.dtype, q.experts.scale_block) {
        (Dtype::Fp4, 16) => f(
            Dtype::Fp4,
            0,
            "assumed: NVFP4 activations (W4A4, modelopt's NVFP4 recipe)".into(),
        ),
        (Dtype::Fp4, _) => f(
            Dtype::Bf16,
            0,
            "assumed: BF16 activations with MXFP4 weights (W4A16 kernels, as vLLM on Hopper)"
                .into(),
        ),
        (Dtype::Fp8, _) => f(
            Dtype::Fp8,
            0,
            "assumed: FP8 activations quantized on the fly (activation_scheme dynamic)".into(),
        ),
        (d, _) => f(d, 0, q.experts.why.clone()),
    };
    if let Some(kv) = opts.kv_dtype {
        q.kv = f(kv, 0, format!("given: --kv-dtype {kv}"));
    }
    Ok(q)
}

/// A ModelOpt `hf_quant_config.json`.
fn modelopt(q: &mut Quant, origin: &str, text: &str) -> Result<()> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| anyhow!("{origin}: not valid JSON: {e}"))?;
    let qz = v.get("quantization").ok_or_else(|| {
        anyhow!("{origin}: no `quantization` table (a ModelOpt hf_quant_config.json has one)")
    })?;
    let file = std::path::Path::new(origin)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| origin.to_string());
    let algo = qz.get("quant_algo").and_then(|a| a.as_str()).unwrap_or("");
    let excluded: Vec<&str> = qz
        .get("exclude_modules")
        .and_then(|e| e.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    let fm = match algo {
        "FP8" => Format {
            dtype: Dtype::Fp8,
            scale_block: 0,
            why: format!("derived: {file} quant_algo FP8 (per-tensor scales)"),
        },
        "NVFP4" => {
            let g = qz
                .get("group_size")
                .and_then(|g| g.as_u64())
                .unwrap_or(16) as u32;
            Format {
                dtype: Dtype::Fp4,
                scale_block: g,
                why: format!("derived: {file} quant_algo NVFP4, group_size {g} (one FP8 scale per group)"),
            }
        }
        other => bail!(
            "{origin}: quant_algo `{other}` is not one twin reads (FP8, NVFP4); give --weights instead"
        ),
    };
    q.experts = fm.clone();
    q.other = fm.clone();
    q.attention = if excluded.iter().any(|m| m.contains("self_attn")) {
        Format {
            why: format!("derived: {file} exclude_modules keeps self_attn unquantized"),
            ..q.attention.clone()
        }
    } else {
        fm
    };
    if let Some(kv) = qz.get("kv_cache_quant_algo").and_then(|k| k.as_str()) {
        if kv == "FP8" {
            q.kv = Format {
                dtype: Dtype::Fp8,
                scale_block: 0,
                why: format!("derived: {file} kv_cache_quant_algo FP8"),
            };
        }
    }
    Ok(())
}

/// The config's own `quantization_config` (FP8 block, MXFP4).
fn quantization_config(q: &mut Quant, cfg: &Cfg, qc: &Value) -> Result<()> {
    let method = qc
        .get("quant_method")
        .and_then(|m| m.as_str())
        .unwrap_or("");
    let not_converted: Vec<&str> = qc
        .get("modules_to_not_convert")
        .and_then(|e| e.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    let keeps_attention = not_converted.iter().any(|m| m.contains("self_attn"));
    match method {
        "fp8" => {
            let block = qc
                .get("weight_block_size")
                .and_then(|b| b.as_array())
                .map(|b| b.iter().filter_map(|x| x.as_u64()).product::<u64>());
            let (scale_block, how) = match block {
                // One FP32 scale (4 bytes) per block.
                Some(b) if b > 0 => (
                    (b / 4).max(1) as u32,
                    format!("weight_block_size {b} weights, an FP32 scale each"),
                ),
                _ => (0, "per-tensor scales".to_string()),
            };
            let fm = Format {
                dtype: Dtype::Fp8,
                scale_block,
                why: cfg.derived(&format!("quantization_config fp8 ({how})")),
            };
            q.experts = fm.clone();
            q.other = fm.clone();
            if !keeps_attention {
                q.attention = fm;
            }
        }
        "mxfp4" => {
            q.experts = Format {
                dtype: Dtype::Fp4,
                scale_block: 32,
                why: cfg.derived(
                    "quantization_config mxfp4 (routed experts; an E8M0 scale per 32 weights)",
                ),
            };
            if keeps_attention {
                q.attention.why = cfg.derived("quantization_config modules_to_not_convert self_attn");
            }
        }
        "modelopt" => {
            let text = serde_json::json!({ "quantization": qc }).to_string();
            modelopt(q, &format!("{} quantization_config", cfg.origin), &text)?;
        }
        other => bail!(
            "{}: quantization_config quant_method `{other}` is not one twin reads (fp8, mxfp4, modelopt); \
             give --weights bf16|fp8|fp4|mxfp4, or --quant hf_quant_config.json",
            cfg.origin
        ),
    }
    Ok(())
}
