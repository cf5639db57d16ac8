//! `twin model import` (a Hugging Face config as a model file) and `twin model show`
//! (what a model holds, to check against its model card).

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use hf::{ImportOptions, WeightChoice};
use scenario::{load_model_quant, read_text, Set};
use spec::dtype::Dtype;
use spec::model::Model;
use spec::model::{AttentionKind, FfnKind};
use std::path::PathBuf;

#[derive(Args)]
pub struct ModelArgs {
    #[command(subcommand)]
    pub what: ModelWhat,
}

#[derive(Subcommand)]
pub enum ModelWhat {
    /// Write a twin model file from a Hugging Face `config.json`: every field's
    /// provenance is the config key it came from, or what was assumed and why.
    Import(ImportArgs),
    /// Parameters (total, active per token), weight bytes by dtype, KV bytes per token
    /// and layers by kind of a model (embedded name, model file or config.json).
    Show(ShowArgs),
}

#[derive(Args)]
pub struct ImportArgs {
    /// The model's Hugging Face `config.json`, or the checkpoint's folder holding it.
    pub config: PathBuf,
    /// A ModelOpt `hf_quant_config.json` beside it (NVFP4 or FP8 checkpoints).
    #[arg(long)]
    pub quant: Option<PathBuf>,
    /// The weights' format, overriding the config's quantization: bf16, fp8 (128x128
    /// blocks), fp4 (NVFP4), mxfp4 (routed experts only, as gpt-oss).
    #[arg(long, value_enum, conflicts_with = "quant")]
    pub weights: Option<WeightChoice>,
    /// KV-cache dtype (default: the quantization config's, else bf16).
    #[arg(long, value_parser = parse_dtype)]
    pub kv_dtype: Option<Dtype>,
    /// The model's name (default: the config's folder name, lowercased).
    #[arg(long)]
    pub name: Option<String>,
    /// Write the model file here (default: stdout). An existing file is kept unless
    /// --force.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace the --out file if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    /// Embedded model name, model file (.toml), Hugging Face config (.json) or a
    /// checkpoint folder holding its config.json.
    pub model: String,
    /// A ModelOpt `hf_quant_config.json` for the config (default: the one beside it,
    /// if any).
    #[arg(long, value_name = "FILE")]
    pub quant: Option<String>,
    /// Also show KV bytes per token at this dtype.
    #[arg(long, value_parser = parse_dtype)]
    pub kv_dtype: Option<Dtype>,
    /// Override a field of the model, as `--set attention.kv_entry_bytes=576`.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Print one JSON object instead of the text.
    #[arg(long)]
    pub json: bool,
}

pub fn parse_dtype(s: &str) -> Result<Dtype, String> {
    match s {
        "bf16" | "fp16" | "auto" => Ok(Dtype::Bf16),
        "fp8" | "fp8_e4m3" | "fp8_e5m2" => Ok(Dtype::Fp8),
        "fp4" => Ok(Dtype::Fp4),
        "int4" => Ok(Dtype::Int4),
        "fp32" => Ok(Dtype::Fp32),
        other => Err(format!(
            "`{other}` is not a dtype (bf16, fp8, fp4, int4, fp32)"
        )),
    }
}

pub fn run(a: &ModelArgs) -> Result<()> {
    match &a.what {
        ModelWhat::Import(i) => import(i),
        ModelWhat::Show(s) => show(s),
    }
}

fn import(a: &ImportArgs) -> Result<()> {
    let origin = hf::config_path(&a.config.display().to_string());
    let text = read_text(&origin).with_context(|| format!("cannot read {origin}"))?;
    let quant = match &a.quant {
        Some(p) => {
            let o = p.display().to_string();
            let t = read_text(&o).with_context(|| format!("cannot read {o}"))?;
            Some((o, t))
        }
        // A ModelOpt quantization config beside the config is read unless the
        // weights are given.
        None if a.weights.is_none() => {
            let found = scenario::hf_options(&origin)?.quant;
            if let Some((o, _)) = &found {
                eprintln!("note: read the quantization of {origin} from {o} beside it");
            }
            found
        }
        None => None,
    };
    let opts = ImportOptions {
        quant,
        weights: a.weights,
        kv_dtype: a.kv_dtype,
        name: a.name.clone(),
    };
    let (model, notes) = hf::import_noted(&origin, &text, &opts)?;
    for n in notes {
        eprintln!("note: assumed: {n}");
    }
    let problems = sim::validate::model(&model);
    if let Some(p) = problems.first() {
        bail!("{origin}: the imported model is not valid: {p}");
    }
    let body = hf::file_text(&model, &import_command(a))?;
    match &a.out {
        None => print!("{body}"),
        Some(path) => {
            if path.exists() && !a.force {
                bail!("{} exists; give --force to replace it", path.display());
            }
            std::fs::write(path, &body)
                .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
            eprintln!("wrote {} (model `{}`)", path.display(), model.name);
        }
    }
    Ok(())
}

/// The command line that wrote a file, as its header repeats it (paths as given).
fn import_command(a: &ImportArgs) -> String {
    let mut c = format!("twin model import {}", a.config.display());
    if let Some(q) = &a.quant {
        c.push_str(&format!(" --quant {}", q.display()));
    }
    if let Some(w) = a.weights {
        let name = clap::ValueEnum::to_possible_value(&w)
            .map(|v| v.get_name().to_string())
            .unwrap_or_default();
        c.push_str(&format!(" --weights {name}"));
    }
    if let Some(k) = a.kv_dtype {
        c.push_str(&format!(" --kv-dtype {k}"));
    }
    if let Some(n) = &a.name {
        c.push_str(&format!(" --name {n}"));
    }
    c
}

fn kind_name(a: AttentionKind, f: FfnKind) -> String {
    let attn = match a {
        AttentionKind::Dense => "full attention",
        AttentionKind::Sparse => "sparse attention",
        AttentionKind::Compressed => "compressed attention",
        AttentionKind::Window => "sliding-window attention",
        AttentionKind::Chunked => "chunked attention",
        AttentionKind::Linear => "linear attention",
        AttentionKind::Mamba => "Mamba-2",
        AttentionKind::None => "",
    };
    let ffn = match f {
        FfnKind::Dense => "dense FFN",
        FfnKind::Moe => "MoE FFN",
        FfnKind::None => "",
    };
    match (attn.is_empty(), ffn.is_empty()) {
        (false, false) => format!("{attn} + {ffn}"),
        (true, false) => ffn.to_string(),
        (false, true) => attn.to_string(),
        (true, true) => "identity".to_string(),
    }
}

/// A layer in a few letters, for the pattern line: its mixer and its FFN.
fn short(a: AttentionKind, ratio: u32, f: FfnKind) -> String {
    let attn = match a {
        AttentionKind::Dense => "attn".to_string(),
        AttentionKind::Sparse => format!(
            "sparse{}",
            if ratio > 1 {
                format!("/{ratio}")
            } else {
                String::new()
            }
        ),
        AttentionKind::Compressed => format!("comp/{ratio}"),
        AttentionKind::Window => "swa".to_string(),
        AttentionKind::Chunked => "chunk".to_string(),
        AttentionKind::Linear => "linear".to_string(),
        AttentionKind::Mamba => "mamba".to_string(),
        AttentionKind::None => String::new(),
    };
    let ffn = match f {
        FfnKind::Dense => "mlp",
        FfnKind::Moe => "moe",
        FfnKind::None => "",
    };
    match (attn.is_empty(), ffn.is_empty()) {
        (false, false) => format!("{attn}+{ffn}"),
        (true, _) => ffn.to_string(),
        (false, true) => attn,
    }
}

/// The layer schedule in one line: runs of one kind (`3 linear+moe`), and a
/// repeating block of runs written once with its count (`(3 linear+moe, attn+moe) x 15`).
pub fn pattern_line(m: &Model) -> String {
    let mut runs: Vec<(String, u32)> = Vec::new();
    for l in m.expand_layers() {
        let k = short(l.attention, l.compress_ratio, l.ffn);
        match runs.last_mut() {
            Some((r, n)) if *r == k => *n += 1,
            _ => runs.push((k, 1)),
        }
    }
    let show = |rs: &[(String, u32)]| {
        rs.iter()
            .map(|(k, n)| {
                if *n > 1 {
                    format!("{n} {k}")
                } else {
                    k.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    // The shortest block that repeats from some start to the end, at least twice.
    for start in 0..runs.len().min(4) {
        let rest = &runs[start..];
        for p in 1..=rest.len() / 2 {
            if rest.len().is_multiple_of(p) && (p..rest.len()).all(|i| rest[i] == rest[i - p]) {
                let head = if start > 0 {
                    format!("{}, ", show(&runs[..start]))
                } else {
                    String::new()
                };
                return format!("{head}({}) x {}", show(&rest[..p]), rest.len() / p);
            }
        }
    }
    // Else, greedily, the block that repeats longest from each place.
    let mut out = Vec::new();
    let mut i = 0;
    while i < runs.len() {
        let best = (1..=8.min(runs.len() - i))
            .map(|p| {
                let r = (1..)
                    .take_while(|k| {
                        i + (k + 1) * p <= runs.len()
                            && runs[i + k * p..i + (k + 1) * p] == runs[i..i + p]
                    })
                    .count()
                    + 1;
                (p, r)
            })
            .filter(|(_, r)| *r >= 2)
            .max_by_key(|(p, r)| (p * r, std::cmp::Reverse(*p)));
        match best {
            Some((p, r)) => {
                out.push(format!("({}) x {r}", show(&runs[i..i + p])));
                i += p * r;
            }
            None => {
                out.push(show(&runs[i..i + 1]));
                i += 1;
            }
        }
    }
    out.join(", ")
}

/// `model show --json`: the figures as one object.
fn show_json(
    m: &Model,
    w: &spec::weights::Weights,
    kv_at: Option<(Dtype, f64, f64)>,
) -> Result<()> {
    let parts: Vec<_> = w
        .parts
        .iter()
        .map(|p| {
            serde_json::json!({"part": p.name, "dtype": p.dtype.name(), "params": p.params,
                "active_params": p.active, "bytes": p.bytes})
        })
        .collect();
    let v = serde_json::json!({
        "model": m.name,
        "total_params": w.total(),
        "active_params": w.active(),
        "active_params_without_embedding": w.active_without_embedding(),
        "mtp_params": w.mtp_params,
        "weight_bytes": w.bytes(),
        "weight_bytes_by_dtype": w.bytes_by_dtype().iter().map(|(d, b)| (d.name().to_string(), *b)).collect::<std::collections::BTreeMap<_, _>>(),
        "kv_bytes_per_token": m.kv.bytes_per_token,
        "kv_cache": kv_dtype_line(m),
        "kv_bytes_per_token_at": kv_at.map(|(d, _, b)| serde_json::json!({"dtype": d.name(), "bytes": b})),
        "state_bytes_per_request": m.state_bytes_per_request(),
        "local_kv_bytes_per_request_max": m.local_kv_bytes(u64::MAX),
        "vision_params": m.vision_params,
        "layers": m.layers_by_kind().iter().map(|(at, f, c)| serde_json::json!({"kind": kind_name(*at, *f), "count": c})).collect::<Vec<_>>(),
        "layer_pattern": pattern_line(m),
        "parts": parts,
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// The KV cache's element type (bytes per element of an entry, scales included) and
/// where it came from (the entry's provenance).
fn kv_dtype_line(m: &Model) -> String {
    let a = &m.attention;
    let per = if a.kv_dim > 0 {
        a.kv_entry_bytes / a.kv_dim as f64
    } else {
        0.0
    };
    let dtype = match per {
        x if x >= 3.5 => "fp32",
        x if x >= 1.75 => "bf16",
        x if x >= 0.9 => "fp8",
        x if x > 0.0 => "fp4",
        _ => "none",
    };
    let source = m
        .provenance
        .get("attention.kv_entry_bytes")
        .map_or("no provenance given", String::as_str);
    format!("{dtype} ({per:.3} B per element, scales included); {source}")
}

/// Bytes as MB or GB.
fn mb(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else {
        format!("{:.2} MB", b / 1e6)
    }
}

/// The state a request keeps beside its KV: recurrent states, and the KV of its
/// sliding-window and chunked layers (at most their span).
fn state_lines(m: &Model) -> Vec<String> {
    let mut out = Vec::new();
    let state = m.state_bytes_per_request();
    if state > 0.0 {
        let n = |k: AttentionKind| {
            m.expand_layers()
                .iter()
                .filter(|l| l.attention == k)
                .count()
        };
        let mut parts = Vec::new();
        if let Some(l) = &m.linear_attention {
            parts.push(format!(
                "{} linear-attention layers x {}",
                n(AttentionKind::Linear),
                mb(l.state_bytes())
            ));
        }
        if let Some(x) = &m.mamba {
            parts.push(format!(
                "{} Mamba-2 layers x {}",
                n(AttentionKind::Mamba),
                mb(x.state_bytes())
            ));
        }
        out.push(format!(
            "state per request: {} fixed ({}), reserved from the KV pool as {:.0} KV tokens",
            mb(state),
            parts.join(", "),
            (state / m.kv.bytes_per_token.max(1.0)).ceil()
        ));
    }
    let a = &m.attention;
    let span = m.local_kv_bytes(u64::MAX);
    if span > 0.0 {
        out.push(format!(
            "local KV per request: at most {} ({})",
            mb(span),
            [(a.window, "sliding window"), (a.chunk, "chunk")]
                .iter()
                .filter(|(t, _)| *t > 0)
                .map(|(t, what)| format!("{what} {t} tokens"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out
}

/// The attention as a model card names it.
fn attention_name(m: &Model) -> String {
    let a = &m.attention;
    let mut s = if a.kv_up_params > 0 {
        format!(
            "MLA, {} heads, latent {} + rope {} per token",
            a.heads,
            a.value_dim,
            a.kv_dim.saturating_sub(a.value_dim)
        )
    } else if a.kv_heads >= a.heads {
        format!("MHA, {} heads of {}", a.heads, a.qk_head_dim)
    } else {
        format!(
            "GQA, {} query heads / {} KV heads of {}",
            a.heads, a.kv_heads, a.qk_head_dim
        )
    };
    if a.window > 0 {
        s.push_str(&format!(", sliding window {}", a.window));
    }
    if a.sinks {
        s.push_str(", attention sinks");
    }
    if let Some(i) = &a.indexer {
        s.push_str(&format!(", indexer top-{}", i.top_k));
    }
    s
}

/// `model show`'s parameter counts and weight bytes, overall and part by part.
fn print_weights(w: &spec::weights::Weights) {
    let g = |x: f64| format!("{:.2}B", x / 1e9);
    println!(
        "parameters: {} total, {} active per token ({} without the input embedding){}",
        g(w.total()),
        g(w.active()),
        g(w.active_without_embedding()),
        if w.mtp_params > 0.0 {
            format!("; MTP module {} more", g(w.mtp_params))
        } else {
            String::new()
        }
    );
    println!(
        "  {:<16} {:>6} {:>10} {:>10} {:>10}",
        "part", "dtype", "params", "active", "GB"
    );
    for p in &w.parts {
        println!(
            "  {:<16} {:>6} {:>10} {:>10} {:>10.2}",
            p.name,
            p.dtype.name(),
            g(p.params),
            g(p.active),
            p.bytes / 1e9
        );
    }
    let by: Vec<String> = w
        .bytes_by_dtype()
        .iter()
        .map(|(d, b)| format!("{} {:.1} GB", d.name(), b / 1e9))
        .collect();
    println!(
        "weights: {:.1} GB with block scales ({})",
        w.bytes() / 1e9,
        by.join(", ")
    );
}

fn show(a: &ShowArgs) -> Result<()> {
    let sets = Set::parse_all(&a.set)?;
    let m = load_model_quant(&a.model, &sets, a.quant.as_deref())?;
    let w = m.weights();
    let kv_at = a.kv_dtype.map(|d| {
        let entry = m.attention.kv_dim as f64 * d.bytes();
        (d, entry, m.kv_bytes_per_token_at(entry))
    });
    if a.json {
        return show_json(&m, &w, kv_at);
    }
    let g = |x: f64| format!("{:.2}B", x / 1e9);
    println!("model: {}", m.name);
    if !m.description.is_empty() {
        println!("  {}", m.description);
    }
    print_weights(&w);
    println!("attention: {}", attention_name(&m));
    println!(
        "KV per token: {:.0} B ({:.0} B per layer entry)",
        m.kv.bytes_per_token, m.attention.kv_entry_bytes
    );
    println!("KV cache: {}", kv_dtype_line(&m));
    if let Some((d, entry, b)) = kv_at {
        println!("KV per token at {d}: {b:.0} B ({entry:.0} B per layer entry)");
    }
    for l in state_lines(&m) {
        println!("{l}");
    }
    let kinds: Vec<String> = m
        .layers_by_kind()
        .iter()
        .map(|(at, f, c)| format!("{c} x {}", kind_name(*at, *f)))
        .collect();
    println!("layers: {} ({})", m.layer_count(), kinds.join(", "));
    if m.layers.len() > 1 || m.layers.iter().any(|g| g.count > 1) {
        println!("pattern: {}", pattern_line(&m));
    }
    if m.vision_params > 0.0 {
        println!(
            "vision tower: {} parameters, not priced",
            g(m.vision_params)
        );
    }
    Ok(())
}
