//! `twin model import` (a Hugging Face config as a model file) and `twin model show`
//! (what a model holds, to check against its model card: [`hf::show`]).

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use hf::{ImportOptions, WeightChoice};
use scenario::{load_model_quant, read_text, Set};
use spec::dtype::Dtype;
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

fn show(a: &ShowArgs) -> Result<()> {
    let sets = Set::parse_all(&a.set)?;
    let m = load_model_quant(&a.model, &sets, a.quant.as_deref())?;
    let kv_at = a.kv_dtype.map(|d| hf::show::kv_at(&m, d));
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&hf::show::show_json(&m, kv_at))?
        );
    } else {
        print!("{}", hf::show::show_text(&m, kv_at));
    }
    Ok(())
}
