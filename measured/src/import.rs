//! Measured runs' files as one corpus of `twin.run.v1` records (`twin runs import`):
//! benchmark clients' result files made records of the deployment the user gives (with
//! the prefixes a server held from earlier runs), and corpora or AIConfigurator's silicon
//! CSV read as [`crate::load`] reads them; merged, each run once.

use anyhow::{bail, Context, Result};
use corpus::RunRecord;
use std::path::{Path, PathBuf};

/// The deployment a benchmark result file ran on, as the user gives it (the files do
/// not hold it; `twin runs import`'s flags).
#[derive(Debug, Clone, Default)]
pub struct Given {
    /// The serving engine, with its version: `vllm@0.15.0`.
    pub engine: Option<String>,
    /// The GPU, by twin's hardware name.
    pub gpu: Option<String>,
    /// The model: its Hugging Face `config.json`, or an embedded model name.
    pub model: Option<String>,
    /// The weights' format as served (bf16, fp8-tensor, fp8-block, nvfp4, bf16+mxfp4).
    pub weights: String,
    /// The KV cache's format (bf16, fp8); `None`: the model's own.
    pub kv: Option<String>,
    pub tp: u32,
    pub dp: u32,
    pub expert_parallel: bool,
    pub instances: u32,
    /// The result files' format, instead of telling it from their content.
    pub format: Option<String>,
    /// Result files of runs the same server served before these.
    pub after: Vec<PathBuf>,
}

/// The corpus `files` make (JSON Lines with its header, as `out` would hold it) and how
/// many records it holds. Notes and warnings go to `say` as they come.
pub fn import(
    files: &[PathBuf],
    given: &Given,
    out: Option<&Path>,
    title: Option<&str>,
    say: &mut dyn FnMut(&str),
) -> Result<(String, usize)> {
    let mut records: Vec<RunRecord> = Vec::new();
    let mut sources = Vec::new();
    for f in files {
        let shown = f.display().to_string();
        let read = match client_runs(f, given, say)? {
            Some(recs) => recs,
            None => {
                let loaded = crate::load(&shown).with_context(|| format!("importing {shown}"))?;
                for n in &loaded.notes {
                    say(&format!("note: {n}"));
                }
                loaded.records
            }
        };
        sources.push(format!("{shown} ({})", records_word(read.len())));
        records.extend(read);
    }
    relative_configs(&mut records, out);
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
        title
            .map(str::to_string)
            .unwrap_or_else(|| format!("from:\n{}", sources.join("\n")))
    );
    Ok((corpus::io::to_jsonl(&records, &header), records.len()))
}

/// A config beside the corpus `out` is named relative to it, so the corpus moves with
/// its folder.
fn relative_configs(records: &mut [RunRecord], out: Option<&Path>) {
    let Some(dir) = out.and_then(|o| o.parent()).and_then(|d| {
        let d = if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            d
        };
        d.canonicalize().ok()
    }) else {
        return;
    };
    for r in records {
        if let Ok(rel) = Path::new(&r.model.config).strip_prefix(&dir) {
            r.model.config = rel.display().to_string();
        }
    }
}

/// A benchmark client's result file as records of the deployment given;
/// `None` when the file is not one (a corpus or AIConfigurator's CSV).
fn client_runs(
    path: &Path,
    d: &Given,
    say: &mut dyn FnMut(&str),
) -> Result<Option<Vec<RunRecord>>> {
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
    let deployment = deployment(d, say)?;
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
    let mut out = Vec::new();
    for (i, run) in runs.into_iter().enumerate() {
        for c in &run.conflicts(&deployment) {
            say(&format!("warning: {shown}: {c} (the flags are kept)"));
        }
        let id = if several {
            format!("{stem}-{}", i + 1)
        } else {
            stem.clone()
        };
        let source = format!("{shown} ({} result file)", run.format.key());
        let mut r = run.into_record(id, deployment.clone(), source);
        if !d.after.is_empty() {
            held_after(&mut r, &text, &shown, &d.after)?;
        }
        out.push(r);
    }
    Ok(Some(out))
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

/// The deployment given, every missing part named.
fn deployment(d: &Given, say: &mut dyn FnMut(&str)) -> Result<corpus::clients::Deployment> {
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
    let kv = kv_format(d, name, gemm, say)?;
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

/// Refuses a deployment without an engine, a GPU or a model, naming every one missing.
fn require_named(d: &Given) -> Result<()> {
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
    d: &Given,
    name: corpus::EngineName,
    gemm: corpus::Format,
    say: &mut dyn FnMut(&str),
) -> Result<Option<corpus::Format>> {
    use corpus::Format;
    Ok(match d.kv.as_deref() {
        None => {
            let kv = corpus::trtllm_checkpoint_kv(name, gemm);
            if kv.is_some() {
                say(&format!(
                    "note: --kv: fp8, as TensorRT-LLM serves a ModelOpt {} checkpoint's KV cache (kv_cache_quant_algo FP8); --kv bf16 if yours is not",
                    d.weights
                ));
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
    let config = match Path::new(model).canonicalize() {
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
pub fn records_word(n: usize) -> String {
    format!("{n} record{}", if n == 1 { "" } else { "s" })
}
