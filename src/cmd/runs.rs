//! `twin runs import FILE... --out CORPUS` and `twin runs show CORPUS`: measured
//! serving runs as a corpus of `twin.run.v1` records (docs/runs-corpus.md), and what
//! a corpus holds.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use corpus::filter::precision;
use corpus::RunRecord;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub what: RunsWhat,
}

#[derive(Debug, Clone, Subcommand)]
pub enum RunsWhat {
    /// Read measured runs into one corpus of twin.run.v1 records: AIConfigurator's
    /// silicon CSV (what each row means is read from the code that produced it:
    /// docs/runs-corpus.md), or corpora to merge.
    Import(Box<ImportArgs>),
    /// What a corpus holds: its records by engine, GPU, model, precision and layout.
    Show(ShowArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// Files of runs: your benchmark clients' result files (`vllm bench serve` JSON
    /// with or without --save-detailed, SGLang bench_serving JSON lines, aiperf or
    /// genai-perf profile exports, inference-perf stage reports: the deployment flags
    /// below say what they ran on), an AIConfigurator silicon CSV, or corpora
    /// (`.jsonl`, `.jsonl.gz`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// The corpus to write (`.jsonl`, or `.jsonl.gz` compressed); default: standard
    /// output.
    #[arg(long, value_name = "CORPUS")]
    pub out: Option<PathBuf>,
    /// Replace the --out file if it exists.
    #[arg(long)]
    pub force: bool,
    /// What the corpus is, for its header (default: the files it was read from).
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
}

/// The deployment a benchmark result file ran on (the files do not hold it).
#[derive(Debug, Clone, Args, Default)]
pub struct DeploymentArgs {
    /// The serving engine, with its version: `vllm@0.15.0`, `sglang@0.5.9`,
    /// `trtllm@1.2.0`.
    #[arg(long, value_name = "ENGINE[@VERSION]")]
    pub engine: Option<String>,
    /// The GPU, by twin's hardware name (`twin list`).
    #[arg(long)]
    pub gpu: Option<String>,
    /// The model: its Hugging Face `config.json` (priced in the --weights format), or
    /// an embedded model name (`twin list`; its own formats).
    #[arg(long)]
    pub model: Option<String>,
    /// The weights' format as served: bf16, fp8-tensor, fp8-block, nvfp4, or
    /// bf16+mxfp4 (MXFP4 routed experts, as gpt-oss).
    #[arg(long, default_value = "bf16")]
    pub weights: String,
    /// The KV cache's format: bf16 or fp8 (default: the model's own; with --engine
    /// trtllm and fp8-tensor or nvfp4 weights, fp8: a ModelOpt checkpoint's, which
    /// TensorRT-LLM serves).
    #[arg(long)]
    pub kv: Option<String>,
    /// Tensor-parallel GPUs per attention replica.
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// Data-parallel attention replicas per engine instance (with --tp 1 and an MoE
    /// model: experts spread over them, DEP).
    #[arg(long, default_value_t = 1)]
    pub dp: u32,
    /// With --tp: routed experts spread whole over the TP GPUs (`--enable-expert-parallel`).
    #[arg(long)]
    pub expert_parallel: bool,
    /// Engine instances behind the client's endpoint.
    #[arg(long, default_value_t = 1)]
    pub instances: u32,
    /// Read the result files as this format instead of telling it from their content:
    /// vllm, sglang, aiperf, genai-perf, inference-perf.
    #[arg(long)]
    pub format: Option<String>,
    /// A result file of a run the same server served before these without flushing
    /// its prefix cache (repeat): the prompts it sent that a run's prompts begin with
    /// are recorded as held (`twin validate bench --after`; SGLang random runs of one
    /// server).
    #[arg(long, value_name = "EARLIER")]
    pub after: Vec<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// The corpus: an embedded name (`aic-silicon-train`) or a file.
    pub corpus: String,
    /// Keep only records that pass (as `validate runs --filter`).
    #[arg(long = "filter", value_name = "KEY=VALUE")]
    pub filter: Vec<String>,
}

pub fn run(a: &RunsArgs) -> Result<()> {
    match &a.what {
        RunsWhat::Import(i) => import(i),
        RunsWhat::Show(s) => show(s),
    }
}

fn import(a: &ImportArgs) -> Result<()> {
    if let Some(out) = &a.out {
        if out.exists() && !a.force {
            bail!(
                "--out {}: the file exists; give --force to replace it",
                out.display()
            );
        }
    }
    let mut records: Vec<RunRecord> = Vec::new();
    let mut sources = Vec::new();
    for f in &a.files {
        let shown = f.display().to_string();
        let read = match client_runs(f, &a.deployment)? {
            Some(recs) => recs,
            None => {
                let loaded =
                    measured::load(&shown).with_context(|| format!("importing {shown}"))?;
                for n in &loaded.notes {
                    eprintln!("note: {n}");
                }
                loaded.records
            }
        };
        sources.push(format!("{shown} ({})", records_word(read.len())));
        records.extend(read);
    }
    if let Some(dir) = a.out.as_deref().and_then(|o| o.parent()).and_then(|d| {
        let d = if d.as_os_str().is_empty() {
            std::path::Path::new(".")
        } else {
            d
        };
        d.canonicalize().ok()
    }) {
        // A config beside the corpus is named relative to it, so the corpus moves
        // with its folder.
        for r in &mut records {
            if let Ok(rel) = std::path::Path::new(&r.model.config).strip_prefix(&dir) {
                r.model.config = rel.display().to_string();
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = records.iter().find(|r| !seen.insert(r.id.clone())) {
        bail!(
            "record id `{}` is in more than one of the files: a corpus holds each run once",
            dup.id
        );
    }
    let header = format!(
        "twin.run.v1 corpus: {} records, written by twin {} `runs import`\n{}",
        records.len(),
        env!("CARGO_PKG_VERSION"),
        a.title
            .clone()
            .unwrap_or_else(|| format!("from:\n{}", sources.join("\n")))
    );
    let text = corpus::io::to_jsonl(&records, &header);
    match &a.out {
        Some(out) => {
            corpus::io::write_atomic(out, &text)?;
            eprintln!("wrote {} ({})", out.display(), records_word(records.len()));
        }
        None => print!("{text}"),
    }
    Ok(())
}

fn show(a: &ShowArgs) -> Result<()> {
    let loaded = measured::load(&a.corpus)?;
    let records = loaded.filtered(&a.filter)?;
    println!(
        "{}: {} records{}",
        loaded.origin,
        records.len(),
        if a.filter.is_empty() {
            String::new()
        } else {
            format!(" of {} (filtered)", loaded.records.len())
        }
    );
    for n in &loaded.notes {
        println!("note: {n}");
    }
    type Key = fn(&RunRecord) -> String;
    let dims: [(&str, Key); 5] = [
        ("engine", |r| r.engine.label()),
        ("gpu", |r| r.gpu.hardware.clone()),
        ("model", |r| r.model.id.clone()),
        ("precision", precision),
        ("layout", |r| r.layout.mode().to_string()),
    ];
    for (name, key) in dims {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for r in &records {
            *counts.entry(key(r)).or_default() += 1;
        }
        let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!("  by {name}: {}", parts.join(", "));
    }
    Ok(())
}

/// A benchmark client's result file as records of the deployment the flags give;
/// `None` when the file is not one (a corpus or AIConfigurator's CSV).
fn client_runs(path: &std::path::Path, d: &DeploymentArgs) -> Result<Option<Vec<RunRecord>>> {
    let shown = path.display().to_string();
    let bytes = corpus::io::read_bytes(path)?;
    let text = String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{shown}: not UTF-8 text"))?;
    let first = text.trim_start();
    let corpus_like = first.starts_with('#')
        || first.starts_with("{\"schema\"")
        || text.starts_with("id,silicon_data_source,");
    if corpus_like {
        return Ok(None);
    }
    let runs = match &d.format {
        Some(f) => {
            let format = corpus::clients::Format::parse(f).ok_or_else(|| {
                anyhow::anyhow!(
                    "--format {f}: one of vllm, sglang, aiperf, genai-perf, inference-perf"
                )
            })?;
            corpus::clients::read_as(&text, &shown, format)?
        }
        None => corpus::clients::read(&text, &shown)?,
    };
    let deployment = deployment(d)?;
    let stem = path
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .split('.')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .unwrap_or_default();
    let several = runs.len() > 1;
    Ok(Some(
        runs.into_iter()
            .enumerate()
            .map(|(i, run)| {
                let conflicts = run.conflicts(&deployment);
                for c in &conflicts {
                    eprintln!("warning: {shown}: {c} (the flags are kept)");
                }
                let id = if several {
                    format!("{stem}-{}", i + 1)
                } else {
                    stem.clone()
                };
                let source = format!("{shown} ({} result file)", run.format.key());
                run.into_record(id, deployment.clone(), source)
            })
            .map(|mut r| {
                if !d.after.is_empty() {
                    held_after(&mut r, &text, &shown, &d.after)?;
                }
                Ok(r)
            })
            .collect::<Result<Vec<_>>>()?,
    ))
}

/// The prefixes the server held of each request of `rec` (the file `text`) after the
/// runs of `after` and the client's warm-up, as `validate bench --after` reads them.
fn held_after(rec: &mut RunRecord, text: &str, shown: &str, after: &[PathBuf]) -> Result<()> {
    let bench = live::bench::Bench::parse(text, shown)?;
    let mut earlier = Vec::new();
    for p in after {
        let name = p.display().to_string();
        let t = String::from_utf8(corpus::io::read_bytes(p)?)
            .map_err(|_| anyhow::anyhow!("{name}: not UTF-8 text"))?;
        earlier.push((name.clone(), live::bench::Bench::parse(&t, &name)?));
    }
    let (held, notes) = bench.held(&earlier)?;
    rec.client.held = held;
    rec.provenance.notes.extend(notes);
    let problems: Vec<String> = rec.problems().iter().map(ToString::to_string).collect();
    if !problems.is_empty() {
        bail!("{shown} after {}: {}", after.len(), problems.join("; "));
    }
    Ok(())
}

/// The deployment the flags give, every missing one named.
fn deployment(d: &DeploymentArgs) -> Result<corpus::clients::Deployment> {
    use corpus::{Engine, EngineName, Gpu, Layout, ModelRef, Workers};
    require_named(d)?;
    let (engine, gpu, model) = (
        d.engine.clone().unwrap_or_default(),
        d.gpu.clone().unwrap_or_default(),
        d.model.clone().unwrap_or_default(),
    );
    let (name, version) = match engine.split_once('@') {
        Some((n, v)) => (n, Some(v.to_string())),
        None => (engine.as_str(), None),
    };
    let name = EngineName::parse(name).ok_or_else(|| {
        anyhow::anyhow!("--engine {engine}: one of vllm, sglang, trtllm (with @VERSION)")
    })?;
    scenario::load_hardware(&gpu, &[]).with_context(|| format!("--gpu {gpu}"))?;
    let (gemm, moe) = weight_formats(&d.weights)?;
    let kv = kv_format(d, name, gemm)?;
    let (config, id) = model_config_and_id(&model);
    Ok(corpus::clients::Deployment {
        engine: Engine {
            name,
            version,
            image: None,
            settings: Default::default(),
        },
        model: ModelRef {
            id,
            config,
            gemm,
            moe,
            kv,
        },
        gpu: Gpu {
            system: gpu.clone(),
            hardware: gpu,
        },
        layout: Layout::Aggregated {
            workers: Workers {
                count: Some(d.instances),
                tp: d.tp,
                pp: 1,
                attention_dp: d.dp,
                moe_tp: if d.expert_parallel { 1 } else { d.tp },
                moe_ep: if d.expert_parallel { d.tp } else { d.dp },
                max_batch: None,
            },
        },
    })
}

/// Refuses a deployment without --engine, --gpu or --model, naming every one missing.
fn require_named(d: &DeploymentArgs) -> Result<()> {
    let mut missing = Vec::new();
    for (flag, v) in [
        ("--engine", &d.engine),
        ("--gpu", &d.gpu),
        ("--model", &d.model),
    ] {
        if v.is_none() {
            missing.push(flag);
        }
    }
    if !missing.is_empty() {
        bail!(
            "a benchmark result file does not say what it ran on: give {} (e.g. --engine vllm@0.15.0 --gpu h100 --model config.json --weights bf16 --tp 8)",
            missing.join(", ")
        );
    }
    Ok(())
}

/// The dense GEMMs' format and the routed experts' (where it differs) of `--weights`.
fn weight_formats(weights: &str) -> Result<(corpus::Format, Option<corpus::Format>)> {
    use corpus::Format;
    Ok(match weights {
        "bf16" => (Format::Bf16, None),
        "fp8-tensor" | "fp8" => (Format::Fp8Tensor, None),
        "fp8-block" => (Format::Fp8Block, None),
        "nvfp4" => (Format::Nvfp4, None),
        "bf16+mxfp4" | "mxfp4" => (Format::Bf16, Some(Format::Mxfp4)),
        w => bail!("--weights {w}: one of bf16, fp8-tensor, fp8-block, nvfp4, bf16+mxfp4"),
    })
}

/// The KV cache's format: `--kv`, else what the engine serves the checkpoint's in.
fn kv_format(
    d: &DeploymentArgs,
    name: corpus::EngineName,
    gemm: corpus::Format,
) -> Result<Option<corpus::Format>> {
    use corpus::Format;
    Ok(match d.kv.as_deref() {
        None => {
            let kv = corpus::trtllm_checkpoint_kv(name, gemm);
            if kv.is_some() {
                eprintln!(
                    "note: --kv: fp8, as TensorRT-LLM serves a ModelOpt {} checkpoint's KV cache (kv_cache_quant_algo FP8); --kv bf16 if yours is not",
                    d.weights
                );
            }
            kv
        }
        Some("bf16") => Some(Format::Bf16),
        Some("fp8") => Some(Format::Fp8Tensor),
        Some(k) => bail!("--kv {k}: bf16 or fp8"),
    })
}

/// The model's config (its canonical path when `--model` is a JSON file) and its id
/// (the last path segment, without `/config.json`).
fn model_config_and_id(model: &str) -> (String, String) {
    let config = match std::path::Path::new(model).canonicalize() {
        Ok(p) if model.ends_with(".json") => p.display().to_string(),
        _ => model.to_string(),
    };
    let id = model
        .trim_end_matches("/config.json")
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_string();
    (config, id)
}

/// "1 record", "2 records".
fn records_word(n: usize) -> String {
    format!("{n} record{}", if n == 1 { "" } else { "s" })
}
