//! Hugging Face `config.json` (and a quantization config) as a twin model file: every
//! field derived from a named key of the config, or assumed with its reason.
//!
//! `twin model import` writes the result; `--model config.json` imports in memory.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};
use sim::model::{Attention, AttentionKind, DenseFfn, FfnKind, Indexer, Kv, LayerGroup, Moe, Mtp};
use sim::units::Dtype;
use sim::Model;
use std::collections::BTreeMap;

/// The architectures twin imports, with the family that reads them.
pub const ARCHITECTURES: &[(&str, Family)] = &[
    ("DeepseekV3ForCausalLM", Family::Mla),
    ("DeepseekV32ForCausalLM", Family::Mla),
    ("DeepseekV2ForCausalLM", Family::Mla),
    ("Qwen3MoeForCausalLM", Family::Gqa),
    ("MixtralForCausalLM", Family::Gqa),
    ("GptOssForCausalLM", Family::Gqa),
    ("Glm4MoeForCausalLM", Family::Gqa),
    ("LlamaForCausalLM", Family::Gqa),
    ("MistralForCausalLM", Family::Gqa),
    ("Qwen2ForCausalLM", Family::Gqa),
    ("Qwen3ForCausalLM", Family::Gqa),
];

/// How an architecture's attention is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Multi-head latent attention (DeepSeek): a compressed KV latent per token.
    Mla,
    /// Multi-head, grouped-query or multi-query attention: K and V per KV head.
    Gqa,
}

/// Weights as `--weights` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightChoice {
    /// BF16 everywhere.
    Bf16,
    /// FP8 E4M3 with 128x128 block scales (FP32) on every linear layer.
    Fp8,
    /// NVFP4: FP4 E2M1 with an FP8 scale per 16 weights on every linear layer.
    Fp4,
    /// MXFP4: FP4 E2M1 with an E8M0 scale per 32 weights on the routed experts only.
    Mxfp4,
}

/// What `import` is told beside the config.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// A quantization config (`hf_quant_config.json`): where it came from and its text.
    pub quant: Option<(String, String)>,
    pub weights: Option<WeightChoice>,
    pub kv_dtype: Option<Dtype>,
    pub name: Option<String>,
}

/// One linear layer class's format: dtype, weights per one-byte scale, and how the
/// statement reads in provenance.
#[derive(Debug, Clone)]
struct Format {
    dtype: Dtype,
    scale_block: u32,
    why: String,
}

/// The checkpoint's formats: attention projections, routed experts, the other GEMMs
/// (shared experts, dense FFN), the experts' activations, the KV cache.
#[derive(Debug, Clone)]
struct Quant {
    attention: Format,
    experts: Format,
    other: Format,
    activation: Format,
    kv: Format,
}

/// The config's keys, read with their names kept for provenance.
struct Cfg<'a> {
    map: &'a Map<String, Value>,
    /// The file's name as provenance cites it (`config.json`).
    file: String,
    origin: &'a str,
}

impl Cfg<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }
    fn u32_opt(&self, key: &str) -> Result<Option<u32>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    anyhow!(
                        "{}: `{key}` must be a non-negative integer, found {v}",
                        self.origin
                    )
                }),
        }
    }
    fn u32(&self, key: &str) -> Result<u32> {
        self.u32_opt(key)?
            .ok_or_else(|| anyhow!("{}: `{key}` is missing (needed by twin)", self.origin))
    }
    /// The first of `keys` present: its value and name.
    fn first(&self, keys: &[&'static str]) -> Result<Option<(u32, &'static str)>> {
        for k in keys {
            if let Some(v) = self.u32_opt(k)? {
                return Ok(Some((v, k)));
            }
        }
        Ok(None)
    }
    fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_bool().map(Some).ok_or_else(|| {
                anyhow!("{}: `{key}` must be true or false, found {v}", self.origin)
            }),
        }
    }
    fn derived(&self, keys: &str) -> String {
        format!("derived: {} {keys}", self.file)
    }
}

/// Provenance as it is built.
#[derive(Default)]
struct Prov(BTreeMap<String, String>);

impl Prov {
    fn set(&mut self, field: &str, why: impl Into<String>) {
        self.0.insert(field.to_string(), why.into());
    }
}

/// A readable list of the supported architectures.
pub fn supported() -> String {
    ARCHITECTURES
        .iter()
        .map(|(a, _)| *a)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a model name or path names a Hugging Face config (`.json`).
pub fn is_config(name_or_path: &str) -> bool {
    name_or_path.ends_with(".json")
}

/// The twin model of the config `text` (read from `origin`).
pub fn import(origin: &str, text: &str, opts: &ImportOptions) -> Result<Model> {
    let root: Value =
        serde_json::from_str(text).map_err(|e| anyhow!("{origin}: not valid JSON: {e}"))?;
    let map = root
        .as_object()
        .ok_or_else(|| anyhow!("{origin}: a Hugging Face config is a JSON object"))?;
    let file = std::path::Path::new(origin)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config.json".into());
    let cfg = Cfg { map, file, origin };
    let arch = architecture(&cfg)?;
    let family = ARCHITECTURES
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, f)| *f)
        .expect("architecture() returns a supported one");
    let quant = quant(&cfg, opts)?;
    let mut prov = Prov::default();
    let hidden = cfg.u32("hidden_size")?;
    let vocab = cfg.u32("vocab_size")?;
    prov.set("hidden", cfg.derived("hidden_size"));
    prov.set("vocab", cfg.derived("vocab_size"));
    let n_layers = cfg.u32("num_hidden_layers")?;
    if n_layers == 0 {
        bail!("{origin}: `num_hidden_layers` is 0");
    }
    // Written only when true (an untied model leaves the field out).
    let tied = cfg.bool("tie_word_embeddings")?.unwrap_or(false);
    if tied {
        prov.set("tied_embeddings", cfg.derived("tie_word_embeddings"));
    }
    let (attention, kinds) = match family {
        Family::Mla => mla_attention(&cfg, arch, n_layers, &quant, &mut prov)?,
        Family::Gqa => gqa_attention(&cfg, arch, hidden, n_layers, &quant, &mut prov)?,
    };
    let ffns = ffn_kinds(&cfg, arch, n_layers)?;
    let moe = if ffns.contains(&FfnKind::Moe) {
        Some(moe(&cfg, arch, &quant, &mut prov)?)
    } else {
        None
    };
    let dense_ffn = if ffns.contains(&FfnKind::Dense) {
        let ffn = cfg.u32("intermediate_size")?;
        prov.set("dense_ffn.ffn", cfg.derived("intermediate_size"));
        prov.set("dense_ffn.weight_dtype", quant.other.why.clone());
        Some(DenseFfn {
            ffn,
            weight_dtype: quant.other.dtype,
        })
    } else {
        None
    };
    let layers = groups(&kinds, &ffns);
    prov.set("layers", layer_story(&cfg, arch, &layers));
    let kv_entry = attention.kv_entry_bytes;
    let mut model = Model {
        name: opts
            .name
            .clone()
            .unwrap_or_else(|| default_name(origin, arch)),
        description: String::new(),
        hidden,
        vocab,
        embedding_dtype: Dtype::Bf16,
        layers,
        attention,
        moe,
        dense_ffn,
        kv: Kv {
            bytes_per_token: 0.0,
        },
        engram: None,
        mhc: None,
        mtp: mtp(&cfg, &mut prov)?,
        dispatch_dtype: Dtype::Bf16,
        combine_dtype: Dtype::Bf16,
        tied_embeddings: tied,
        dense_scale_block: quant.other.scale_block,
        provenance: BTreeMap::new(),
    };
    prov.set("dense_scale_block", quant.other.why.clone());
    finish(&mut model, arch, kv_entry, prov);
    Ok(model)
}

/// The dtypes of what moves between GPUs, the KV bytes per token, the description and
/// the provenance of a model whose sizes are set.
fn finish(model: &mut Model, arch: &str, kv_entry: f64, mut prov: Prov) {
    prov.set(
        "embedding_dtype",
        "assumed: BF16 embedding and LM head (quantized checkpoints keep them unquantized)",
    );
    // Tokens go to experts in FP8 when the experts take FP8 (or narrower) activations.
    let fp8_dispatch = model
        .moe
        .as_ref()
        .is_some_and(|m| m.activation_dtype.bytes() <= 1.0);
    if fp8_dispatch {
        model.dispatch_dtype = Dtype::Fp8;
        prov.set(
            "dispatch_dtype",
            "assumed: FP8 dispatch, as the experts take FP8 activations (DeepEP-style)",
        );
    } else {
        prov.set(
            "dispatch_dtype",
            "assumed: BF16 dispatch (the experts take BF16 activations)",
        );
    }
    prov.set(
        "combine_dtype",
        "assumed: BF16 combine (expert outputs are summed in BF16)",
    );
    model.kv.bytes_per_token = model.kv_bytes_per_token_at(kv_entry);
    prov.set(
        "kv.bytes_per_token",
        format!(
            "derived: {kv_entry} B per entry x {} layers keeping their whole context{}",
            model
                .expand_layers()
                .iter()
                .filter(|l| l.attention != AttentionKind::Window)
                .count(),
            if model.attention.indexer.is_some() {
                " + one indexer key per layer"
            } else {
                ""
            }
        ),
    );
    model.description = describe(model, arch);
    model.provenance = prov.0;
}

fn architecture<'a>(cfg: &'a Cfg) -> Result<&'a str> {
    let archs: Vec<&str> = match cfg.get("architectures") {
        Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
        _ => Vec::new(),
    };
    if let Some(a) = archs
        .iter()
        .find(|a| ARCHITECTURES.iter().any(|(s, _)| s == *a))
    {
        return Ok(a);
    }
    let named = if archs.is_empty() {
        "no `architectures` list".to_string()
    } else {
        format!("architecture {}", archs.join(", "))
    };
    bail!(
        "{}: {named} is not one twin imports.\n  supported: {}\n  \
         for another architecture, write a model file by hand (docs/adding-a-model.md); \
         twin needs: hidden_size, vocab_size, num_hidden_layers, num_attention_heads, \
         num_key_value_heads, head_dim, intermediate_size, and for MoE the expert count, \
         top-k and expert width (MLA: kv_lora_rank, q_lora_rank, qk_nope_head_dim, \
         qk_rope_head_dim, v_head_dim)",
        cfg.origin,
        supported()
    )
}

fn default_name(origin: &str, arch: &str) -> String {
    let p = std::path::Path::new(origin);
    let stem = p
        .parent()
        .and_then(|d| d.file_name())
        .map(|d| d.to_string_lossy().into_owned())
        .filter(|d| !d.is_empty() && d != "." && d != "..")
        .unwrap_or_else(|| arch.trim_end_matches("ForCausalLM").to_string());
    stem.to_lowercase()
}

/// The checkpoint's formats from `--weights`, `--quant`, the config's own
/// `quantization_config`, or its `torch_dtype`, in that order; the KV cache's from
/// `--kv-dtype`, the quantization config, or BF16.
fn quant(cfg: &Cfg, opts: &ImportOptions) -> Result<Quant> {
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

/// MLA attention (DeepSeek): the latent and its rope part per token.
fn mla_attention(
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
fn gqa_attention(
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

/// Each layer's FFN: dense or MoE, by the architecture's rule.
fn ffn_kinds(cfg: &Cfg, arch: &str, n: u32) -> Result<Vec<FfnKind>> {
    let all = |k| vec![k; n as usize];
    Ok(match arch {
        "LlamaForCausalLM" | "MistralForCausalLM" | "Qwen2ForCausalLM" | "Qwen3ForCausalLM" => {
            all(FfnKind::Dense)
        }
        "MixtralForCausalLM" | "GptOssForCausalLM" => all(FfnKind::Moe),
        "Qwen3MoeForCausalLM" => {
            let step = cfg.u32_opt("decoder_sparse_step")?.unwrap_or(1).max(1);
            let dense: Vec<u64> = match cfg.get("mlp_only_layers") {
                Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_u64()).collect(),
                _ => Vec::new(),
            };
            (0..n)
                .map(|i| {
                    if !dense.contains(&(i as u64)) && (i + 1) % step == 0 {
                        FfnKind::Moe
                    } else {
                        FfnKind::Dense
                    }
                })
                .collect()
        }
        // DeepSeek and GLM-4.5: the first k layers dense, then MoE every `freq`.
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

fn moe(cfg: &Cfg, arch: &str, q: &Quant, prov: &mut Prov) -> Result<Moe> {
    let (experts, ek) = cfg
        .first(&["n_routed_experts", "num_experts", "num_local_experts"])?
        .ok_or_else(|| anyhow!("{}: MoE layers but no expert count (n_routed_experts, num_experts or num_local_experts)", cfg.origin))?;
    let (top_k, tk) = cfg
        .first(&["num_experts_per_tok", "experts_per_token"])?
        .ok_or_else(|| anyhow!("{}: MoE layers but no `num_experts_per_tok`", cfg.origin))?;
    let (ffn, fk) = cfg
        .first(&["moe_intermediate_size", "intermediate_size"])?
        .ok_or_else(|| {
            anyhow!(
                "{}: MoE layers but no expert width (moe_intermediate_size)",
                cfg.origin
            )
        })?;
    let shared = cfg.u32_opt("n_shared_experts")?.unwrap_or(0);
    if experts == 0 || top_k == 0 || top_k > experts {
        bail!(
            "{}: {tk} {top_k} must lie in 1..={experts} ({ek})",
            cfg.origin
        );
    }
    prov.set("moe.routed_experts", cfg.derived(ek));
    prov.set("moe.top_k", cfg.derived(tk));
    prov.set("moe.expert_ffn", cfg.derived(fk));
    prov.set(
        "moe.shared_experts",
        if cfg.get("n_shared_experts").is_some() {
            cfg.derived("n_shared_experts")
        } else {
            format!("derived: {arch} has no shared expert")
        },
    );
    let groups = cfg.u32_opt("n_group")?.unwrap_or(1).max(1);
    let topk_groups = cfg.u32_opt("topk_group")?.unwrap_or(1).max(1);
    if cfg.get("n_group").is_some() {
        prov.set("moe.groups", cfg.derived("n_group"));
        prov.set("moe.topk_groups", cfg.derived("topk_group"));
    } else {
        let why = format!("derived: {arch} routes without group limits (no n_group)");
        prov.set("moe.groups", why.clone());
        prov.set("moe.topk_groups", why);
    }
    prov.set(
        "moe.fused",
        "assumed: separate dispatch, expert GEMM and combine kernels (no fused MoE kernel)",
    );
    prov.set("moe.weight_dtype", q.experts.why.clone());
    prov.set("moe.scale_block", q.experts.why.clone());
    prov.set("moe.shared_weight_dtype", q.other.why.clone());
    prov.set("moe.activation_dtype", q.activation.why.clone());
    prov.set(
        "moe.expert_load_cv",
        "assumed: popularity CV 0.4, as DeepSeek-V3's file (no statistic published for this model)",
    );
    Ok(Moe {
        routed_experts: experts,
        shared_experts: shared,
        top_k,
        expert_ffn: ffn,
        weight_dtype: q.experts.dtype,
        scale_block: q.experts.scale_block,
        shared_weight_dtype: q.other.dtype,
        activation_dtype: q.activation.dtype,
        groups,
        topk_groups,
        expert_load_cv: 0.4,
        balanced: false,
        fused: false,
    })
}

fn mtp(cfg: &Cfg, prov: &mut Prov) -> Result<Option<Mtp>> {
    let n = cfg.u32_opt("num_nextn_predict_layers")?.unwrap_or(0);
    if n == 0 {
        return Ok(None);
    }
    prov.set("mtp.draft_tokens", cfg.derived("num_nextn_predict_layers"));
    prov.set(
        "mtp.acceptance",
        "assumed: 0.8 per draft (DeepSeek reports 85-90% for V3's second token; measure your own)",
    );
    Ok(Some(Mtp {
        draft_tokens: n,
        acceptance: vec![0.8; n as usize],
    }))
}

/// Consecutive layers of one kind as groups.
fn groups(kinds: &[AttentionKind], ffns: &[FfnKind]) -> Vec<LayerGroup> {
    let mut out: Vec<LayerGroup> = Vec::new();
    for (a, f) in kinds.iter().zip(ffns) {
        match out.last_mut() {
            Some(g) if g.attention == *a && g.ffn == *f => g.count += 1,
            _ => out.push(LayerGroup {
                count: 1,
                ffn: *f,
                attention: *a,
                compress_ratio: 1,
                window_branch: false,
                shares_selection: false,
            }),
        }
    }
    out
}

fn layer_story(cfg: &Cfg, arch: &str, layers: &[LayerGroup]) -> String {
    let n: u32 = layers.iter().map(|g| g.count).sum();
    let mut keys = vec!["num_hidden_layers"];
    if cfg.get("layer_types").is_some() {
        keys.push("layer_types");
    }
    if cfg.get("first_k_dense_replace").is_some() {
        keys.push("first_k_dense_replace");
    }
    if cfg.get("mlp_only_layers").is_some() {
        keys.push("mlp_only_layers");
    }
    if cfg.get("decoder_sparse_step").is_some() {
        keys.push("decoder_sparse_step");
    }
    format!(
        "{} ({arch}: {n} layers in {} groups)",
        cfg.derived(&keys.join(", ")),
        layers.len()
    )
}

fn describe(m: &Model, arch: &str) -> String {
    let w = m.weights();
    let attn = if m.attention.kv_up_params > 0 {
        "MLA".to_string()
    } else if m.attention.kv_heads == m.attention.heads {
        "MHA".to_string()
    } else {
        format!("GQA {}/{}", m.attention.heads, m.attention.kv_heads)
    };
    let ffn = match &m.moe {
        Some(moe) => format!(
            "{} experts top-{}{}",
            moe.routed_experts,
            moe.top_k,
            if moe.shared_experts > 0 {
                format!(" + {} shared", moe.shared_experts)
            } else {
                String::new()
            }
        ),
        None => "dense".into(),
    };
    format!(
        "imported {arch}: {} layers, {attn}, {ffn}; {:.1}B total / {:.1}B active",
        m.layer_count(),
        w.total() / 1e9,
        w.active() / 1e9
    )
}

/// A model file's TOML, provenance last.
pub fn to_toml(m: &Model) -> Result<String> {
    toml::to_string(m).context("serialising the imported model")
}

/// The model file `twin model import` writes: a header naming the command, then the
/// model.
pub fn file_text(m: &Model, command: &str) -> Result<String> {
    Ok(format!(
        "# {}\n# Written by `{command}`; review the `assumed:` provenance lines.\n{}",
        m.description,
        to_toml(m)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every verbatim config in `tests/fixtures/models-hf/` (sources in its README).
    const CONFIGS: &[(&str, &str)] = &[
        (
            "DeepSeek-V3",
            include_str!("../../tests/fixtures/models-hf/DeepSeek-V3/config.json"),
        ),
        (
            "DeepSeek-V3.2",
            include_str!("../../tests/fixtures/models-hf/DeepSeek-V3.2/config.json"),
        ),
        (
            "Kimi-K2-Instruct",
            include_str!("../../tests/fixtures/models-hf/Kimi-K2-Instruct/config.json"),
        ),
        (
            "GLM-4.5",
            include_str!("../../tests/fixtures/models-hf/GLM-4.5/config.json"),
        ),
        (
            "Qwen3-235B-A22B",
            include_str!("../../tests/fixtures/models-hf/Qwen3-235B-A22B/config.json"),
        ),
        (
            "Qwen3-235B-A22B-FP8",
            include_str!("../../tests/fixtures/models-hf/Qwen3-235B-A22B-FP8/config.json"),
        ),
        (
            "Qwen3-235B-A22B-NVFP4",
            include_str!("../../tests/fixtures/models-hf/Qwen3-235B-A22B-NVFP4/config.json"),
        ),
        (
            "Qwen3-30B-A3B",
            include_str!("../../tests/fixtures/models-hf/Qwen3-30B-A3B/config.json"),
        ),
        (
            "Qwen3-32B",
            include_str!("../../tests/fixtures/models-hf/Qwen3-32B/config.json"),
        ),
        (
            "Qwen3-8B",
            include_str!("../../tests/fixtures/models-hf/Qwen3-8B/config.json"),
        ),
        (
            "gpt-oss-120b",
            include_str!("../../tests/fixtures/models-hf/gpt-oss-120b/config.json"),
        ),
        (
            "gpt-oss-20b",
            include_str!("../../tests/fixtures/models-hf/gpt-oss-20b/config.json"),
        ),
        (
            "Llama-3.1-8B",
            include_str!("../../tests/fixtures/models-hf/Llama-3.1-8B/config.json"),
        ),
        (
            "Llama-3.1-70B",
            include_str!("../../tests/fixtures/models-hf/Llama-3.1-70B/config.json"),
        ),
        (
            "Llama-3.1-70B-Instruct-FP8",
            include_str!("../../tests/fixtures/models-hf/Llama-3.1-70B-Instruct-FP8/config.json"),
        ),
        (
            "Mixtral-8x7B-v0.1",
            include_str!("../../tests/fixtures/models-hf/Mixtral-8x7B-v0.1/config.json"),
        ),
    ];

    fn load(name: &str) -> Model {
        load_with(name, &ImportOptions::default())
    }

    fn load_with(name: &str, opts: &ImportOptions) -> Model {
        let text = CONFIGS.iter().find(|(n, _)| *n == name).unwrap().1;
        import(
            &format!("tests/fixtures/models-hf/{name}/config.json"),
            text,
            opts,
        )
        .unwrap()
    }

    #[test]
    fn every_public_config_imports_into_a_valid_model() {
        for (name, _) in CONFIGS {
            let m = load(name);
            let problems = sim::validate::model(&m);
            assert!(problems.is_empty(), "{name}: {problems:?}");
            // Every priced field says where it came from.
            for key in [
                "hidden",
                "vocab",
                "layers",
                "attention.heads",
                "attention.kv_entry_bytes",
                "kv.bytes_per_token",
            ] {
                let why = m
                    .provenance
                    .get(key)
                    .unwrap_or_else(|| panic!("{name}: no provenance for {key}"));
                assert!(
                    why.starts_with("derived: ") || why.starts_with("assumed: "),
                    "{name} {key}: {why}"
                );
            }
            assert!(
                m.provenance.values().all(|v| v.starts_with("derived: ")
                    || v.starts_with("assumed: ")
                    || v.starts_with("given: ")),
                "{name}"
            );
        }
    }

    /// How a publisher counts active parameters.
    #[derive(Clone, Copy)]
    enum Active {
        /// Every weight a token uses, the input embedding's table included.
        WithEmbedding,
        /// Without the input embedding table (a lookup, not a product).
        WithoutEmbedding,
        /// Without the embedding table and the LM head.
        WithoutEmbeddingOrHead,
    }

    /// `ours` against a published figure written with `decimals` decimals (in billions):
    /// within 1%, or within half a unit of its last digit where the publisher rounded
    /// more coarsely than 1% ("37B": 36.5-37.5).
    fn matches(ours: f64, published_b: f64, decimals: i32) -> bool {
        let ours_b = ours / 1e9;
        let rounding = 0.5 * 10f64.powi(-decimals);
        (ours_b - published_b).abs() <= (0.01 * published_b).max(rounding)
    }

    #[test]
    fn parameter_counts_match_the_published_counts() {
        use Active::*;
        // (config, total B, its decimals, active B, its decimals, how the publisher
        // counts active, where it was published). Quotes in
        // tests/fixtures/models-hf/README.md.
        let published: &[(&str, f64, i32, f64, i32, Active, &str)] = &[
            // "671B total parameters with 37B activated for each token" (the MTP
            // module's 14B apart): deepseek-ai/DeepSeek-V3 README.
            (
                "DeepSeek-V3",
                671.0,
                0,
                37.0,
                0,
                WithoutEmbedding,
                "deepseek-ai/DeepSeek-V3 README",
            ),
            // "32 billion activated parameters and 1 trillion total parameters":
            // MoonshotAI/Kimi-K2 README.
            (
                "Kimi-K2-Instruct",
                1000.0,
                -3,
                32.0,
                0,
                WithoutEmbedding,
                "MoonshotAI/Kimi-K2 README",
            ),
            // "355 billion total parameters with 32 billion active parameters":
            // zai-org/GLM-4.5 README (the MTP layer's 4B counted in the total).
            (
                "GLM-4.5",
                355.0,
                0,
                32.0,
                0,
                WithoutEmbeddingOrHead,
                "zai-org/GLM-4.5 README",
            ),
            // "235B in total and 22B activated": the Qwen3-235B-A22B model card.
            (
                "Qwen3-235B-A22B",
                235.0,
                0,
                22.0,
                0,
                WithEmbedding,
                "Qwen/Qwen3-235B-A22B model card",
            ),
            // "30.5B in total and 3.3B activated": the Qwen3-30B-A3B model card.
            (
                "Qwen3-30B-A3B",
                30.5,
                1,
                3.3,
                1,
                WithEmbedding,
                "Qwen/Qwen3-30B-A3B model card",
            ),
            // "Number of Parameters: 32.8B" / "8.2B": the Qwen3 dense model cards.
            (
                "Qwen3-32B",
                32.8,
                1,
                32.8,
                1,
                WithEmbedding,
                "Qwen/Qwen3-32B model card",
            ),
            (
                "Qwen3-8B",
                8.2,
                1,
                8.2,
                1,
                WithEmbedding,
                "Qwen/Qwen3-8B model card",
            ),
            // "117B parameters with 5.1B active parameters", "21B ... 3.6B":
            // openai/gpt-oss README.
            (
                "gpt-oss-120b",
                117.0,
                0,
                5.1,
                1,
                WithoutEmbedding,
                "openai/gpt-oss README",
            ),
            (
                "gpt-oss-20b",
                21.0,
                0,
                3.6,
                1,
                WithoutEmbedding,
                "openai/gpt-oss README",
            ),
            // "in 8B, 70B and 405B sizes": meta-llama/llama-models Llama 3.1 model card.
            (
                "Llama-3.1-8B",
                8.0,
                0,
                8.0,
                0,
                WithEmbedding,
                "Llama 3.1 model card",
            ),
            (
                "Llama-3.1-70B",
                70.0,
                0,
                70.0,
                0,
                WithEmbedding,
                "Llama 3.1 model card",
            ),
            // "46.7B total parameters but only uses 12.9B parameters per token":
            // mistral.ai/news/mixtral-of-experts.
            (
                "Mixtral-8x7B-v0.1",
                46.7,
                1,
                12.9,
                1,
                WithEmbedding,
                "mistral.ai Mixtral announcement",
            ),
        ];
        for &(name, total, td, active, ad, how, source) in published {
            let w = load(name).weights();
            let table = |part: &str| {
                w.parts
                    .iter()
                    .filter(|p| p.name == part)
                    .map(|p| p.active)
                    .sum::<f64>()
            };
            let ours_active = match how {
                WithEmbedding => w.active(),
                WithoutEmbedding => w.active_without_embedding(),
                WithoutEmbeddingOrHead => w.active_without_embedding() - table("lm_head"),
            };
            let ours_total = if name == "GLM-4.5" {
                w.total() + w.mtp_params
            } else {
                w.total()
            };
            assert!(
                matches(ours_total, total, td),
                "{name}: total {ours_total:e} against {total}B ({source})"
            );
            // A known gap, bounded: Qwen3-30B-A3B's card says 3.3B activated; the count
            // by its config is 3.353B with the embedding (as Qwen counts for the 235B)
            // and 3.04B without: the card's figure reads as cut, not rounded, from
            // 3.35B (+1.6%).
            let within = if name == "Qwen3-30B-A3B" {
                (ours_active / 1e9 - active).abs() <= 0.02 * active
            } else {
                matches(ours_active, active, ad)
            };
            assert!(
                within,
                "{name}: active {ours_active:e} against {active}B ({source})"
            );
        }
    }

    #[test]
    fn kv_bytes_per_token_by_hand() {
        // Llama-3.1-8B (GQA): K and V of 8 KV heads x 128 dims x 2 B (BF16) x 32 layers.
        let m = load("Llama-3.1-8B");
        assert_eq!(m.attention.kv_entry_bytes, 2.0 * 8.0 * 128.0 * 2.0);
        assert_eq!(m.kv.bytes_per_token, 2.0 * 8.0 * 128.0 * 2.0 * 32.0);
        // At FP8, half.
        let m = load_with(
            "Llama-3.1-8B",
            &ImportOptions {
                kv_dtype: Some(Dtype::Fp8),
                ..Default::default()
            },
        );
        assert_eq!(m.kv.bytes_per_token, 65_536.0);
        // DeepSeek-V3 (MLA): one latent of kv_lora 512 + rope 64 per layer, 61 layers;
        // in BF16 70,272 B, in FP8 35,136 B (the shipped file's published figure).
        assert_eq!(load("DeepSeek-V3").kv.bytes_per_token, 576.0 * 2.0 * 61.0);
        let fp8 = load_with(
            "DeepSeek-V3",
            &ImportOptions {
                kv_dtype: Some(Dtype::Fp8),
                ..Default::default()
            },
        );
        assert_eq!(fp8.kv.bytes_per_token, 35_136.0);
        // gpt-oss-120b: only its 18 full-attention layers keep the whole context (the
        // 18 sliding layers keep 128 tokens): 18 x 2 x 8 x 64 x 2 B.
        let m = load("gpt-oss-120b");
        assert_eq!(m.kv.bytes_per_token, 18.0 * 2.0 * 8.0 * 64.0 * 2.0);
        assert_eq!(m.attention.window, 128);
        assert!(m.attention.sinks);
        let kinds = m.layers_by_kind();
        assert_eq!(kinds.len(), 2);
        assert!(kinds.iter().all(|(_, _, c)| *c == 18));
    }

    #[test]
    fn quantized_checkpoints_are_priced_as_what_they_are() {
        // Qwen3 FP8: 128x128 blocks with an FP32 scale, 1 byte per 4096 weights.
        let m = load("Qwen3-235B-A22B-FP8");
        let moe = m.moe.as_ref().unwrap();
        assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Fp8, 4096));
        assert_eq!(m.attention.weight_dtype, Dtype::Fp8);
        assert_eq!(moe.activation_dtype, Dtype::Fp8);
        // NVFP4 from its hf_quant_config.json: FP4 with an FP8 scale per 16, FP8 KV.
        let q = include_str!(
            "../../tests/fixtures/models-hf/Qwen3-235B-A22B-NVFP4/hf_quant_config.json"
        );
        let m = load_with(
            "Qwen3-235B-A22B-NVFP4",
            &ImportOptions {
                quant: Some(("hf_quant_config.json".into(), q.into())),
                ..Default::default()
            },
        );
        let moe = m.moe.as_ref().unwrap();
        assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Fp4, 16));
        assert_eq!(m.attention.kv_entry_bytes, 2.0 * 4.0 * 128.0);
        // Expert bytes: 0.5 B + 1/16 B per weight.
        let e = m
            .weights()
            .parts
            .into_iter()
            .find(|p| p.name == "routed_experts")
            .unwrap();
        assert!((e.bytes - e.params * (0.5 + 1.0 / 16.0)).abs() < 1.0);
        // gpt-oss: MXFP4 experts (E8M0 scale per 32), attention left in BF16.
        let m = load("gpt-oss-120b");
        let moe = m.moe.as_ref().unwrap();
        assert_eq!((moe.weight_dtype, moe.scale_block), (Dtype::Fp4, 32));
        assert_eq!(m.attention.weight_dtype, Dtype::Bf16);
        assert_eq!(m.dense_scale_block, 0);
        // Llama FP8 (ModelOpt, per-tensor): FP8 weights without block scales, FP8 KV.
        let q = include_str!(
            "../../tests/fixtures/models-hf/Llama-3.1-70B-Instruct-FP8/hf_quant_config.json"
        );
        let m = load_with(
            "Llama-3.1-70B-Instruct-FP8",
            &ImportOptions {
                quant: Some(("hf_quant_config.json".into(), q.into())),
                ..Default::default()
            },
        );
        assert_eq!(m.dense_ffn.as_ref().unwrap().weight_dtype, Dtype::Fp8);
        assert_eq!(m.dense_scale_block, 0);
        assert_eq!(m.kv.bytes_per_token, 2.0 * 8.0 * 128.0 * 80.0);
        // --weights overrides: Llama in NVFP4.
        let m = load_with(
            "Llama-3.1-8B",
            &ImportOptions {
                weights: Some(WeightChoice::Fp4),
                ..Default::default()
            },
        );
        assert_eq!(
            (m.attention.weight_dtype, m.dense_scale_block),
            (Dtype::Fp4, 16)
        );
    }

    #[test]
    fn imported_deepseek_v3_prices_as_the_shipped_file() {
        // The shipped file was written by hand from the paper; importing the public
        // config with FP8 KV gives the same model but for the scale bytes (exact
        // 128x128 FP32 blocks here, one byte per 128 weights there) and MTP acceptance.
        let mut m = load_with(
            "DeepSeek-V3",
            &ImportOptions {
                kv_dtype: Some(Dtype::Fp8),
                ..Default::default()
            },
        );
        let shipped: Model =
            toml::from_str(include_str!("../../scenarios/models/deepseek-v3.toml")).unwrap();
        assert_eq!(m.moe.as_ref().unwrap().scale_block, 4096);
        m.moe.as_mut().unwrap().scale_block = 128;
        m.dense_scale_block = 128;
        m.mtp = shipped.mtp.clone();
        assert_eq!(m.attention, shipped.attention);
        assert_eq!(m.moe, shipped.moe);
        assert_eq!(m.dense_ffn, shipped.dense_ffn);
        assert_eq!(m.layers, shipped.layers);
        assert_eq!(m.kv, shipped.kv);
        assert_eq!((m.hidden, m.vocab), (shipped.hidden, shipped.vocab));
        assert_eq!(
            (m.dispatch_dtype, m.combine_dtype),
            (shipped.dispatch_dtype, shipped.combine_dtype)
        );
    }

    #[test]
    fn deepseek_v32_imports_its_indexer() {
        let m = load("DeepSeek-V3.2");
        let i = m.attention.indexer.as_ref().unwrap();
        assert_eq!((i.heads, i.head_dim, i.top_k), (64, 128, 2048));
        assert!(m
            .layers
            .iter()
            .all(|g| g.attention == AttentionKind::Sparse));
    }

    #[test]
    fn an_unknown_architecture_names_the_supported_ones_and_the_fields() {
        let e = import(
            "x/config.json",
            r#"{"architectures": ["FalconForCausalLM"], "hidden_size": 8}"#,
            &ImportOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("FalconForCausalLM is not one twin imports"),
            "{e}"
        );
        assert!(
            e.contains("Qwen3MoeForCausalLM") && e.contains("GptOssForCausalLM"),
            "{e}"
        );
        assert!(e.contains("num_key_value_heads"), "{e}");
        let e = import("x/config.json", "{not json", &ImportOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x/config.json: not valid JSON"), "{e}");
        let e = import(
            "x/config.json",
            r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "vocab_size": "big"}"#,
            &ImportOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`vocab_size` must be a non-negative integer"),
            "{e}"
        );
    }

    /// The shipped imported model files are what `twin model import` writes today:
    /// regenerate them with the command in each file's header.
    #[test]
    fn shipped_imported_models_are_current() {
        let shipped: &[(&str, &str, &str)] = &[
            (
                "llama-3.1-8b",
                "Llama-3.1-8B",
                include_str!("../../scenarios/models/llama-3.1-8b.toml"),
            ),
            (
                "llama-3.1-70b",
                "Llama-3.1-70B",
                include_str!("../../scenarios/models/llama-3.1-70b.toml"),
            ),
            (
                "mixtral-8x7b",
                "Mixtral-8x7B-v0.1",
                include_str!("../../scenarios/models/mixtral-8x7b.toml"),
            ),
            (
                "qwen3-32b",
                "Qwen3-32B",
                include_str!("../../scenarios/models/qwen3-32b.toml"),
            ),
            (
                "qwen3-30b-a3b",
                "Qwen3-30B-A3B",
                include_str!("../../scenarios/models/qwen3-30b-a3b.toml"),
            ),
            (
                "qwen3-235b-a22b-fp8",
                "Qwen3-235B-A22B-FP8",
                include_str!("../../scenarios/models/qwen3-235b-a22b-fp8.toml"),
            ),
            (
                "gpt-oss-120b",
                "gpt-oss-120b",
                include_str!("../../scenarios/models/gpt-oss-120b.toml"),
            ),
            (
                "kimi-k2",
                "Kimi-K2-Instruct",
                include_str!("../../scenarios/models/kimi-k2.toml"),
            ),
            (
                "glm-4.5",
                "GLM-4.5",
                include_str!("../../scenarios/models/glm-4.5.toml"),
            ),
        ];
        for (name, dir, text) in shipped {
            let m = load_with(
                dir,
                &ImportOptions {
                    name: Some(name.to_string()),
                    ..Default::default()
                },
            );
            let cmd = format!(
                "twin model import tests/fixtures/models-hf/{dir}/config.json --name {name}"
            );
            assert_eq!(&file_text(&m, &cmd).unwrap(), text, "scenarios/models/{name}.toml: rerun `{cmd} --out scenarios/models/{name}.toml --force`");
        }
    }

    /// No verbatim Qwen2 or Mistral config is in the fixtures: these small ones, written
    /// here, check how their sliding-window keys are read (transformers' rules: Qwen2
    /// slides from `max_window_layers` on when `use_sliding_window`; Mistral slides on
    /// every layer when `sliding_window` is set).
    #[test]
    fn qwen2_and_mistral_sliding_window_rules() {
        let base = |arch: &str, extra: &str| {
            format!(
                r#"{{"architectures": ["{arch}"], "hidden_size": 512, "vocab_size": 1000,
                "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
                "intermediate_size": 1024, "torch_dtype": "bfloat16"{extra}}}"#
            )
        };
        let kinds = |text: String| -> Vec<AttentionKind> {
            import("t/config.json", &text, &ImportOptions::default())
                .unwrap()
                .expand_layers()
                .iter()
                .map(|l| l.attention)
                .collect()
        };
        use AttentionKind::{Dense as D, Window as W};
        let q = kinds(base(
            "Qwen2ForCausalLM",
            r#", "sliding_window": 64, "use_sliding_window": true, "max_window_layers": 2"#,
        ));
        assert_eq!(q, vec![D, D, W, W]);
        let off = kinds(base(
            "Qwen2ForCausalLM",
            r#", "sliding_window": 64, "use_sliding_window": false, "max_window_layers": 2"#,
        ));
        assert_eq!(off, vec![D; 4]);
        assert_eq!(
            kinds(base("MistralForCausalLM", r#", "sliding_window": 64"#)),
            vec![W; 4]
        );
        assert_eq!(
            kinds(base("MistralForCausalLM", r#", "sliding_window": null"#)),
            vec![D; 4]
        );
        // Head width from hidden / heads when head_dim is absent: 64; KV 2 x 2 x 64 x 2 B.
        let m = import(
            "t/config.json",
            &base("Qwen2ForCausalLM", ""),
            &ImportOptions::default(),
        )
        .unwrap();
        assert_eq!(
            (m.attention.qk_head_dim, m.attention.kv_entry_bytes),
            (64, 512.0)
        );
        // A layer_types list of the wrong length is refused.
        let e = import(
            "t/config.json",
            &base("Qwen3ForCausalLM", r#", "layer_types": ["full_attention"]"#),
            &ImportOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("lists 1 layers but num_hidden_layers is 4"),
            "{e}"
        );
    }
}
