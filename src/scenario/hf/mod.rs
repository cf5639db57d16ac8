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

mod attention;
mod ffn;
mod quant;
#[cfg(test)]
mod tests;

use attention::{gqa_attention, mla_attention};
use ffn::{ffn_kinds, moe, mtp};
use quant::{quant, Quant};

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
            gated: true,
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
        linear_attention: None,
        mamba: None,
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
                attention_shape: None,
                ffn_width: None,
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
