//! `twin runs import FILE... --out CORPUS` and `twin runs show CORPUS`: measured
//! serving runs as a corpus of `twin.run.v1` records (docs/runs-corpus.md), and what
//! a corpus holds. The work is `measured::import` and `measured::Loaded::show`.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use measured::import::{records_word, Given};
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
    let (text, n) = measured::import::import(
        &a.files,
        &a.deployment.given(),
        a.out.as_deref(),
        a.title.as_deref(),
        &mut |line| eprintln!("{line}"),
    )?;
    match &a.out {
        Some(out) => {
            corpus::io::write_atomic(out, &text)?;
            eprintln!("wrote {} ({})", out.display(), records_word(n));
        }
        None => print!("{text}"),
    }
    Ok(())
}

fn show(a: &ShowArgs) -> Result<()> {
    print!("{}", measured::load(&a.corpus)?.show(&a.filter)?);
    Ok(())
}

impl DeploymentArgs {
    /// The deployment the flags give.
    fn given(&self) -> Given {
        Given {
            engine: self.engine.clone(),
            gpu: self.gpu.clone(),
            model: self.model.clone(),
            weights: self.weights.clone(),
            kv: self.kv.clone(),
            tp: self.tp,
            dp: self.dp,
            expert_parallel: self.expert_parallel,
            instances: self.instances,
            format: self.format.clone(),
            after: self.after.clone(),
        }
    }
}
