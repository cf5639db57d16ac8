//! Hugging Face `config.json` (and a quantization config) as a twin model file: every
//! field derived from a named key of the config, or assumed with its reason.
//!
//! One reading for every architecture: `arch.rs` turns the config's layer keys into a
//! plan, one `LayerSpec` per layer (its token mixer, FFN, compression, own shape or
//! width); `attention.rs`, `mixers.rs` and `ffn.rs` read the tables those layers need;
//! `quant.rs` the number formats, part by part. A vision-language wrapper's
//! `text_config` is the language model priced; its vision tower is named as not
//! priced.
//!
//! `twin model import` writes the result; `--model config.json` imports in memory. The
//! binary reads the files (a checkpoint folder's config, the quantization config beside
//! it); this crate reads their text. [`show`] says what a model holds (`twin model
//! show`), to check it against its model card.

/// Why a config cannot be imported: one message naming the file and the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ImportError(pub String);

/// A result of the import.
pub type Result<T> = std::result::Result<T, ImportError>;

/// An [`ImportError`] from a format string.
macro_rules! err {
    ($($t:tt)*) => {
        $crate::ImportError(format!($($t)*))
    };
}

/// Returns an [`ImportError`] from a format string.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err(err!($($t)*))
    };
}
use serde_json::{Map, Value};
use spec::dtype::Dtype;
use spec::model::Model;
use spec::model::{AttentionKind, AttentionShape, FfnKind, Kv, LayerGroup};
use std::collections::BTreeMap;

/// The architectures twin imports, with the family that reads their attention.
pub const ARCHITECTURES: &[(&str, Family)] = &[
    ("DeepseekV3ForCausalLM", Family::Mla),
    ("DeepseekV32ForCausalLM", Family::Mla),
    ("DeepseekV2ForCausalLM", Family::Mla),
    ("GlmMoeDsaForCausalLM", Family::Mla),
    ("KimiK25ForConditionalGeneration", Family::Mla),
    ("DeepseekV4ForCausalLM", Family::V4),
    ("Qwen3MoeForCausalLM", Family::Gqa),
    ("MixtralForCausalLM", Family::Gqa),
    ("GptOssForCausalLM", Family::Gqa),
    ("Glm4MoeForCausalLM", Family::Gqa),
    ("LlamaForCausalLM", Family::Gqa),
    ("MistralForCausalLM", Family::Gqa),
    ("Qwen2ForCausalLM", Family::Gqa),
    ("Qwen3ForCausalLM", Family::Gqa),
    ("MiniMaxM2ForCausalLM", Family::Gqa),
    ("MiniMaxM3ForCausalLM", Family::Gqa),
    ("MiniMaxM3SparseForConditionalGeneration", Family::Gqa),
    ("Qwen3VLForConditionalGeneration", Family::Gqa),
    ("Qwen3VLMoeForConditionalGeneration", Family::Gqa),
    ("Qwen3NextForCausalLM", Family::Gqa),
    ("Qwen3_5ForConditionalGeneration", Family::Gqa),
    ("Qwen3_5MoeForConditionalGeneration", Family::Gqa),
    ("NemotronHForCausalLM", Family::Gqa),
    ("Llama4ForConditionalGeneration", Family::Gqa),
    ("Gemma4ForConditionalGeneration", Family::Gqa),
    ("MiMoForCausalLM", Family::Gqa),
    ("MiMoV2FlashForCausalLM", Family::Gqa),
    ("Step3p7FlashForCausalLM", Family::Gqa),
    ("DeciLMForCausalLM", Family::Gqa),
];

/// Architectures twin recognises and refuses, each with the one thing it cannot price.
pub const REFUSED: &[(&str, &str)] = &[(
    "KimiK3ForConditionalGeneration",
    "its Kimi Delta Attention layers (text_config.linear_attn_config.kda_layers): twin's linear-attention layer is gated DeltaNet's, and KDA's projections (a full-rank forget gate, a low-rank output gate) and its attention-residual blocks (attn_res_block_size) are described by no model card or public kernel benchmark twin could price them from",
)];

/// How an architecture's attention is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Multi-head latent attention (DeepSeek): a compressed KV latent per token.
    Mla,
    /// Multi-head, grouped-query or multi-query attention: K and V per KV head.
    Gqa,
    /// DeepSeek-V4: one shared K/V head per token, compressed and sparse layers with a
    /// sliding-window branch, a grouped low-rank output.
    V4,
}

/// Weights as `--weights` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum WeightChoice {
    /// BF16 everywhere.
    Bf16,
    /// FP8 E4M3 with 128x128 block scales (FP32) on every linear layer.
    Fp8,
    /// FP8 E4M3 with one scale per tensor on every linear layer (ModelOpt's and
    /// vLLM's `--quantization fp8` checkpoints).
    Fp8Tensor,
    /// NVFP4: FP4 E2M1 with an FP8 scale per 16 weights on every linear layer.
    Fp4,
    /// MXFP4: FP4 E2M1 with an E8M0 scale per 32 weights on the routed experts only.
    Mxfp4,
    /// INT4 weight-only (AWQ/GPTQ-style, W4A16): groups of 128 with a BF16 scale and a
    /// 4-bit zero point each, on every linear layer.
    Int4,
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

mod arch;
mod attention;
mod exclude;
mod ffn;
mod mixers;
mod quant;
pub mod show;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_aic;
mod vision;

use arch::{plan, LayerSpec};
use quant::{quant, Quant};

/// The config's keys, read with their names kept for provenance: the language
/// model's (`text_config` of a vision-language wrapper), then the wrapper's own.
struct Cfg<'a> {
    map: &'a Map<String, Value>,
    root: &'a Map<String, Value>,
    /// The file's name as provenance cites it (`config.json`), with `text_config.`
    /// when the keys are the wrapper's language model's.
    file: String,
    origin: &'a str,
}

impl Cfg<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.map
            .get(key)
            .filter(|v| !v.is_null())
            .or_else(|| self.root.get(key).filter(|v| !v.is_null()))
    }
    fn u32_opt(&self, key: &str) -> Result<Option<u32>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    err!(
                        "{}: `{key}` must be a non-negative integer, found {v}",
                        self.origin
                    )
                }),
        }
    }
    fn u32(&self, key: &str) -> Result<u32> {
        self.u32_opt(key)?
            .ok_or_else(|| err!("{}: `{key}` is missing (needed by twin)", self.origin))
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
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| err!("{}: `{key}` must be true or false, found {v}", self.origin)),
        }
    }
    fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|v| v.as_str())
    }
    /// A list of integers (`moe_layer_freq = [0, 1, ...]`), if the key holds one.
    fn u32_list(&self, key: &str) -> Result<Option<Vec<u32>>> {
        match self.get(key) {
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            err!(
                                "{}: `{key}` must list non-negative integers, found {x}",
                                self.origin
                            )
                        })
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            _ => Ok(None),
        }
    }
    /// A list of strings (`layer_types`), if the key holds one.
    fn str_list(&self, key: &str) -> Option<Vec<&str>> {
        match self.get(key) {
            Some(Value::Array(a)) => Some(a.iter().map(|x| x.as_str().unwrap_or("?")).collect()),
            _ => None,
        }
    }
    fn derived(&self, keys: &str) -> String {
        format!("derived: {} {keys}", self.file)
    }
}

/// Provenance as it is built, and the fallbacks taken for keys the config leaves
/// out (each also an `assumed:` provenance), which the import says aloud.
#[derive(Default)]
struct Prov(BTreeMap<String, String>, Vec<String>);

impl Prov {
    fn set(&mut self, field: &str, why: impl Into<String>) {
        self.0.insert(field.to_string(), why.into());
    }

    /// `field` took a default because the config leaves a key out: `assumed: why`,
    /// and a note.
    fn fallback(&mut self, field: &str, why: impl Into<String>) {
        let why = why.into();
        if !self.1.contains(&why) {
            self.1.push(why.clone());
        }
        self.set(field, format!("assumed: {why}"));
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

/// Whether a model name or path names a Hugging Face config: a `.json` file, or a
/// folder (a downloaded checkpoint) with a `config.json`.
pub fn is_config(name_or_path: &str) -> bool {
    name_or_path.ends_with(".json") || config_in(name_or_path).is_some()
}

/// The `config.json` of a checkpoint folder.
fn config_in(dir: &str) -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(dir);
    let c = p.join("config.json");
    (p.is_dir() && c.is_file()).then_some(c)
}

/// The config file a model path names: itself, or a folder's `config.json`.
pub fn config_path(name_or_path: &str) -> String {
    config_in(name_or_path).map_or_else(|| name_or_path.to_string(), |c| c.display().to_string())
}

/// The ModelOpt quantization config beside the config at `path`, if there is one:
/// `<org>--<name>_hf_quant_config.json` beside `<org>--<name>_config.json` (as
/// AIConfigurator keeps them), or `hf_quant_config.json` in the same folder.
pub fn sibling_quant(path: &std::path::Path) -> Option<std::path::PathBuf> {
    let name = path.file_name()?.to_str()?;
    let dir = path.parent().unwrap_or_else(|| std::path::Path::new(""));
    let named = name
        .strip_suffix("_config.json")
        .filter(|stem| !stem.is_empty() && !stem.ends_with("_hf_quant"))
        .map(|stem| dir.join(format!("{stem}_hf_quant_config.json")));
    named
        .into_iter()
        .chain(std::iter::once(dir.join("hf_quant_config.json")))
        .find(|p| p.is_file())
}

/// The language model's keys of a config: a vision-language wrapper's `text_config`
/// (or `language_config`, `llm_config`), with the key's name; else the config itself.
fn text_part(root: &Map<String, Value>) -> (&Map<String, Value>, Option<&'static str>) {
    for k in ["text_config", "language_config", "llm_config"] {
        if let Some(Value::Object(m)) = root.get(k) {
            return (m, Some(k));
        }
    }
    (root, None)
}

/// The twin model of the config `text` (read from `origin`).
pub fn import(origin: &str, text: &str, opts: &ImportOptions) -> Result<Model> {
    import_noted(origin, text, opts).map(|(m, _)| m)
}

/// As [`import`], with the fallbacks it took for keys the config leaves out (a
/// family default of transformers, BF16 weights without a quantization config), in
/// words, for the caller to print.
pub fn import_noted(
    origin: &str,
    text: &str,
    opts: &ImportOptions,
) -> Result<(Model, Vec<String>)> {
    let root: Value = serde_json::from_str(&json_numbers(text))
        .map_err(|e| err!("{origin}: not valid JSON: {e}"))?;
    let root = root
        .as_object()
        .ok_or_else(|| err!("{origin}: a Hugging Face config is a JSON object"))?;
    let (map, wrapper) = text_part(root);
    let name = std::path::Path::new(origin)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config.json".into());
    let file = match wrapper {
        Some(k) => format!("{name} {k}"),
        None => name,
    };
    let cfg = Cfg {
        map,
        root,
        file,
        origin,
    };
    let arch = architecture(&cfg)?;
    let family = ARCHITECTURES
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, f)| *f)
        .expect("architecture() returns a supported one");
    let mut prov = Prov::default();
    // The sizes every model has, read first: a config without them is refused for
    // them, not for what its layers lack.
    cfg.u32("hidden_size")?;
    cfg.u32("vocab_size")?;
    let layers = plan(&cfg, arch, family)?;
    let quant = quant(&cfg, opts, &layers)?;
    if opts.weights.is_none() && opts.quant.is_none() && cfg.get("quantization_config").is_none() {
        prov.1.push(format!(
            "{} has no quantization_config and no hf_quant_config.json is beside it: the weights are taken as {} ({}), unquantized; give --quant FILE or --weights if the checkpoint is quantized",
            cfg.file,
            quant.dense.dtype.name(),
            quant.dense.why
        ));
    }
    let mut model = build(&cfg, arch, family, &layers, &quant, &mut prov)?;
    if let Some(k) = wrapper {
        model.vision_params = vision::params(&cfg, model.hidden);
        prov.set("vision_params", vision_note(&cfg, k));
    }
    model.name = opts
        .name
        .clone()
        .unwrap_or_else(|| default_name(origin, arch));
    let notes = std::mem::take(&mut prov.1);
    finish(&mut model, arch, prov);
    Ok((model, notes))
}

/// The config's text with Python's non-standard numbers (`Infinity`, `-Infinity`,
/// `NaN`, which transformers writes for unbounded limits such as Nemotron-H's
/// `time_step_limit`) as `null`: no key twin reads holds one.
fn json_numbers(text: &str) -> std::borrow::Cow<'_, str> {
    if !(text.contains("Infinity") || text.contains("NaN")) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let (mut in_str, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if let Some(t) = ["-Infinity", "Infinity", "NaN"]
            .iter()
            .find(|t| rest.starts_with(**t))
        {
            out.push_str("null");
            rest = &rest[t.len()..];
            continue;
        }
        in_str = c == '"';
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

/// What a vision-language wrapper holds beside the language model: named, not priced.
fn vision_note(cfg: &Cfg, key: &str) -> String {
    let tower = ["vision_config", "vision_tower", "audio_config"]
        .iter()
        .filter(|k| cfg.root.get(**k).is_some_and(|v| !v.is_null()))
        .copied()
        .collect::<Vec<_>>();
    format!(
        "derived: {} {key} is the language model priced; {}",
        cfg.origin_file(),
        if tower.is_empty() {
            "the config describes no vision tower".to_string()
        } else {
            format!(
                "its {} (the vision/audio encoder) is not priced (a prompt's image or audio tokens arrive as input tokens); its parameters {}",
                tower.join(", "),
                vision::HOW
            )
        }
    )
}

impl Cfg<'_> {
    /// The file's name without the `text_config` part.
    fn origin_file(&self) -> String {
        std::path::Path::new(self.origin)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "config.json".into())
    }
}

/// The model's tables from the plan: attention (and a group's own shape), the
/// recurrent mixers, the FFNs, MTP.
fn build(
    cfg: &Cfg,
    arch: &str,
    family: Family,
    layers: &[LayerSpec],
    quant: &Quant,
    prov: &mut Prov,
) -> Result<Model> {
    let hidden = cfg.u32("hidden_size")?;
    let vocab = cfg.u32("vocab_size")?;
    prov.set("hidden", cfg.derived("hidden_size"));
    prov.set("vocab", cfg.derived("vocab_size"));
    // Written only when true (an untied model leaves the field out).
    let tied = cfg.bool("tie_word_embeddings")?.unwrap_or(false);
    if tied {
        prov.set("tied_embeddings", cfg.derived("tie_word_embeddings"));
    }
    let (attention, shape) = match family {
        Family::Mla => attention::mla_attention(cfg, layers, quant, prov)?,
        Family::V4 => attention::v4_attention(cfg, quant, prov)?,
        Family::Gqa => attention::gqa_attention(cfg, arch, hidden, layers, quant, prov)?,
    };
    let has = |k: AttentionKind| layers.iter().any(|l| l.attention == k);
    let linear_attention = if has(AttentionKind::Linear) {
        Some(mixers::linear(cfg, quant, prov)?)
    } else {
        None
    };
    let mamba = if has(AttentionKind::Mamba) {
        Some(mixers::mamba(cfg, quant, prov)?)
    } else {
        None
    };
    let moe = if layers.iter().any(|l| l.ffn == FfnKind::Moe) {
        Some(ffn::moe(cfg, arch, hidden, quant, prov)?)
    } else {
        None
    };
    let dense_ffn = if layers.iter().any(|l| l.ffn == FfnKind::Dense) {
        Some(ffn::dense(cfg, arch, layers, quant, prov)?)
    } else {
        None
    };
    let groups = groups(layers, shape.as_ref());
    prov.set("layers", arch::layer_story(cfg, arch, &groups));
    prov.set("dense_scale_block", quant.scale_block_why());
    let max_position_embeddings = positions(cfg, prov)?;
    Ok(Model {
        name: String::new(),
        description: String::new(),
        hidden,
        vocab,
        embedding_dtype: Dtype::Bf16,
        layers: groups,
        attention,
        moe,
        dense_ffn,
        kv: Kv {
            bytes_per_token: 0.0,
        },
        engram: None,
        mhc: ffn::mhc(cfg, prov)?,
        mtp: ffn::mtp(cfg, prov)?,
        linear_attention,
        mamba,
        vision_params: 0.0,
        dispatch_dtype: Dtype::Bf16,
        combine_dtype: Dtype::Bf16,
        tied_embeddings: tied,
        max_position_embeddings,
        prompt_special_tokens: prompt_special_tokens(arch, prov),
        dense_scale_block: quant.dense_scale_block(),
        provenance: BTreeMap::new(),
    })
}

/// The config's `max_position_embeddings`, with its provenance where it gives one.
fn positions(cfg: &Cfg, prov: &mut Prov) -> Result<Option<u64>> {
    let max = cfg.u32_opt("max_position_embeddings")?.map(u64::from);
    if max.is_some() {
        prov.set(
            "max_position_embeddings",
            cfg.derived("max_position_embeddings"),
        );
    }
    Ok(max)
}

/// Tokens the architecture's tokenizer adds to every prompt: a beginning-of-sequence
/// token for Llama (Llama 3's `tokenizer.json` post-processor adds `<|begin_of_text|>`;
/// Llama 2's `add_bos_token`), Mistral and Mixtral (`add_bos_token`); none known for
/// the others (Qwen's and gpt-oss's tokenizers add none). `config.json` does not say it:
/// its `bos_token_id` is there whether or not the tokenizer adds the token.
fn prompt_special_tokens(arch: &str, prov: &mut Prov) -> u32 {
    if matches!(
        arch,
        "LlamaForCausalLM" | "MistralForCausalLM" | "MixtralForCausalLM"
    ) {
        prov.set(
            "prompt_special_tokens",
            format!("derived: {arch}'s tokenizer adds a beginning-of-sequence token to every prompt (Llama 3's tokenizer.json post-processor, Llama 2's, Mistral's and Mixtral's add_bos_token)"),
        );
        1
    } else {
        0
    }
}

/// The dtypes of what moves between GPUs, the KV bytes per token, the description and
/// the provenance of a model whose sizes are set.
fn finish(model: &mut Model, arch: &str, mut prov: Prov) {
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
    let kv_entry = model.attention.kv_entry_bytes;
    model.kv.bytes_per_token = model.kv_bytes_per_token_at(kv_entry);
    let kept = model
        .expand_layers()
        .iter()
        .filter(|l| l.attention.caches_every_token())
        .count();
    prov.set(
        "kv.bytes_per_token",
        format!(
            "derived: {kv_entry} B per entry x {kept} layers keeping their whole context{}{}",
            if model.layers.iter().any(|g| g.compress_ratio > 1) {
                " (compressed layers: one entry per compress_ratio tokens)"
            } else {
                ""
            },
            if model.attention.indexer.is_some() {
                " + one indexer key per layer with an indexer"
            } else {
                ""
            }
        ),
    );
    model.description = describe(model, arch);
    model.provenance = prov.0;
}

fn architecture<'a>(cfg: &'a Cfg) -> Result<&'a str> {
    let list = |m: &'a Map<String, Value>| -> Vec<&'a str> {
        match m.get("architectures") {
            Some(Value::Array(a)) => a.iter().filter_map(|v| v.as_str()).collect(),
            _ => Vec::new(),
        }
    };
    // The wrapper's own architecture names the model; its text config's may name the
    // language model alone.
    let archs: Vec<&str> = list(cfg.root).into_iter().chain(list(cfg.map)).collect();
    if let Some(a) = archs
        .iter()
        .find(|a| ARCHITECTURES.iter().any(|(s, _)| s == *a))
    {
        return Ok(a);
    }
    if let Some((a, why)) = archs
        .iter()
        .find_map(|a| REFUSED.iter().find(|(r, _)| r == a))
    {
        bail!("{}: {a} is refused: twin cannot price {why}", cfg.origin);
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

/// The default name: the config's folder, or the model of an `<org>--<name>_config.json`
/// file, lowercased.
fn default_name(origin: &str, arch: &str) -> String {
    let p = std::path::Path::new(origin);
    if let Some(stem) = p
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| f.strip_suffix("_config.json"))
        .filter(|s| !s.is_empty())
    {
        let model = stem.rsplit("--").next().unwrap_or(stem);
        return model.to_lowercase();
    }
    // The folder's own name, also for a config given as `config.json` or
    // `./config.json` (its real path's folder), never the architecture's when a folder
    // names the model: two imported configs then do not share a name.
    let real = std::fs::canonicalize(p).ok();
    let p = real.as_deref().unwrap_or(p);
    let stem = p
        .parent()
        .and_then(|d| d.file_name())
        .map(|d| d.to_string_lossy().into_owned())
        .filter(|d| !d.is_empty() && d != "." && d != "..")
        .unwrap_or_else(|| arch.trim_end_matches("ForCausalLM").to_string());
    stem.to_lowercase()
}

/// Consecutive layers of one kind as groups; a layer with `own_shape` takes `shape`.
fn groups(specs: &[LayerSpec], shape: Option<&AttentionShape>) -> Vec<LayerGroup> {
    let mut out: Vec<(LayerSpec, LayerGroup)> = Vec::new();
    for l in specs {
        match out.last_mut() {
            Some((s, g)) if s == l => g.count += 1,
            _ => out.push((
                *l,
                LayerGroup {
                    count: 1,
                    ffn: l.ffn,
                    attention: l.attention,
                    compress_ratio: l.ratio.max(1),
                    window_branch: l.window_branch,
                    shares_selection: l.shares_selection,
                    attention_shape: if l.own_shape { shape.cloned() } else { None },
                    ffn_width: l.ffn_width,
                },
            )),
        }
    }
    out.into_iter().map(|(_, g)| g).collect()
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
            if moe.shared_width() > 0 {
                format!(" + {} shared", moe.shared_experts.max(1))
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
    toml::to_string(m).map_err(|e| err!("serialising the imported model: {e}"))
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
