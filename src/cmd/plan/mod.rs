//! `twin plan`: the best deployment of a workload under latency SLOs, or the GPUs a
//! target rate needs. `sim::plan` screens the search space analytically; the
//! candidates it keeps run through `twin simulate`'s simulator in parallel; the
//! answer is the best on the objective, the Pareto frontier, every rejection with its
//! reason, and `vllm serve` command lines to start from.
//!
//! Scale-out: `--shard I/N --out FILE.jsonl` evaluates candidates `index % N == I`,
//! appending one JSON line per candidate keyed by its hash (a rerun resumes);
//! `twin plan merge FILES...` combines the shards into exactly the unsharded answer.

mod exec;
pub mod print;

use crate::args::ReportArgs;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use scenario::{load_hardware, parse_with_sets, Resolved};
use sim::plan::{Objective, SearchSpace, Sizing, Slo};

#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub action: Option<PlanAction>,
    /// Scenario name or path [default: gb300-nvl72-v4.1-flash-agentx]: model,
    /// workload, router, SLO defaults and prices; its deployment is replaced.
    pub scenario: Option<String>,
    /// GPU budget (default: the scenario's GPUs): the prefill pool takes what the
    /// decode pool leaves.
    #[arg(long, conflicts_with = "target_rate")]
    pub gpus: Option<u64>,
    /// Target load instead of a budget: `700` or `700req/s` (requests per second),
    /// `68Mtok/s` (input + output tokens per second); the pools are sized for it.
    #[arg(long, value_name = "RATE")]
    pub target_rate: Option<String>,
    /// An SLO on the simulated figures, repeatable: `ttft_p90_ms=500` (90% of first
    /// tokens within), `tpot_p90_ms=20`, `user_tok_s_p10=150` (90% of users at
    /// least this output speed: the speeds' 10th percentile; `user_tok_s_p90`,
    /// which only the fastest 10% reach, is refused).
    #[arg(long = "slo", value_name = "NAME=VALUE")]
    pub slo: Vec<String>,
    /// What to optimise: tok_s_per_gpu, usd_per_m_tokens or gpus.
    #[arg(long, default_value = "tok_s_per_gpu")]
    pub objective: String,
    /// TOML file overriding the search space's axes (see docs/guide/plan.md).
    #[arg(long, value_name = "FILE")]
    pub space: Option<String>,
    /// TCO preset (`scenarios/tco`: hyperscaler-tco and neocloud-tco, an owner's cost
    /// per GPU-hour; on-demand-rental and rental-3yr, a renter's price; owned-nvl72) or
    /// path [default: the hardware's price at the scenario's basis].
    #[arg(long, value_name = "PRESET")]
    pub tco: Option<String>,
    /// Seed of the simulations (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Seeds per simulated candidate (`--seed` and the next N - 1): its figures, and
    /// the SLO checks, use their means; the records give each mean's 95% half-width.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seeds: u32,
    /// Simulated seconds per candidate, warm-up included (default: the scenario's).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Overrides as for `twin simulate` (`workload.agentx.sessions=2048`,
    /// `cost.moe.mem_eff=0.9`, `tco.pue=1.2`, ...).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Simulate the candidates with the coarse model: one of K identical copies of each
    /// rack (as `twin simulate --cohort`; a candidate takes the largest divisor of K
    /// its pools split into).
    #[arg(long, value_name = "K")]
    pub cohort: Option<u32>,
    #[command(flatten)]
    pub pricing: scenario::flags::PricingArgs,
    /// Replay this request trace instead of the scenario's workload (as `twin
    /// simulate --trace`).
    #[arg(long, value_name = "PATH")]
    pub trace: Option<String>,
    /// Evaluate one slice of the candidates: `I/N`, or `N` with I from
    /// SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Append one JSON line per evaluated candidate here (resumes: candidates already
    /// in the file are not evaluated again).
    #[arg(long, value_name = "FILE.jsonl")]
    pub out: Option<String>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// How an answer is shown: text, JSON, a report folder.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub html: ReportArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum PlanAction {
    /// Combine shard files (`--shard ... --out`) into the unsharded answer.
    Merge {
        /// The shards' JSONL files.
        #[arg(required = true)]
        files: Vec<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// `ttft_p90_ms=500` etc. into an `Slo`.
pub fn parse_slos(list: &[String]) -> Result<Slo> {
    let mut slo = Slo::default();
    for s in list {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| anyhow!("--slo {s}: expected NAME=VALUE"))?;
        let v: f64 = v
            .trim()
            .parse()
            .map_err(|_| anyhow!("--slo {s}: `{v}` is not a number"))?;
        if !(v.is_finite() && v > 0.0) {
            bail!("--slo {s}: must be > 0");
        }
        match k.trim() {
            "ttft_p90_ms" => slo.ttft_p90_ms = Some(v),
            "tpot_p90_ms" => slo.tpot_p90_ms = Some(v),
            "user_tok_s_p10" => slo.user_tok_s_p10 = Some(v),
            "user_tok_s_p90" => bail!(
                "--slo {s}: `user_tok_s_p90` is no longer an SLO: the P90 of per-user speed is what only the fastest 10% of users reach; for 90% of users at {v} tok/s or more use --slo user_tok_s_p10={v}"
            ),
            other => bail!(
                "--slo {s}: unknown SLO `{other}`; use ttft_p90_ms, tpot_p90_ms or user_tok_s_p10"
            ),
        }
    }
    Ok(slo)
}

pub fn parse_objective(s: &str) -> Result<Objective> {
    Ok(match s.replace('-', "_").as_str() {
        "tok_s_per_gpu" => Objective::TokSPerGpu,
        "usd_per_m_tokens" => Objective::UsdPerMTokens,
        "gpus" => Objective::Gpus,
        _ => bail!("--objective {s}: use tok_s_per_gpu, usd_per_m_tokens or gpus"),
    })
}

/// `700`, `700req/s`, `1.5Kreq/s`, `68Mtok/s`, `6.8e7 tok/s`.
pub fn parse_rate(s: &str) -> Result<Sizing> {
    let t = s.replace(' ', "");
    let (num, tokens) = if let Some(n) = t.strip_suffix("tok/s") {
        (n, true)
    } else {
        (t.strip_suffix("req/s").unwrap_or(&t), false)
    };
    let (num, mult) = match num.chars().last() {
        Some('K' | 'k') => (&num[..num.len() - 1], 1e3),
        Some('M') => (&num[..num.len() - 1], 1e6),
        Some('G') => (&num[..num.len() - 1], 1e9),
        _ => (num, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| {
        anyhow!(
            "--target-rate {s}: expected a number with req/s or tok/s (e.g. 700req/s, 68Mtok/s)"
        )
    })?;
    let v = v * mult;
    if !(v.is_finite() && v > 0.0) {
        bail!("--target-rate {s}: must be > 0");
    }
    Ok(if tokens {
        Sizing::TokensPerS(v)
    } else {
        Sizing::RequestsPerS(v)
    })
}

/// `I/N`, or `N` with I from the scheduler's environment.
pub fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let (i, n) = match s.split_once('/') {
        Some((i, n)) => (Some(i.to_string()), n),
        None => (None, s),
    };
    let n: usize = n
        .trim()
        .parse()
        .map_err(|_| anyhow!("--shard {s}: expected I/N or N"))?;
    if n == 0 {
        bail!("--shard {s}: N must be >= 1");
    }
    let i = match i {
        Some(i) => i,
        None => ["SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"]
            .iter()
            .find_map(|k| std::env::var(k).ok())
            .ok_or_else(|| {
                anyhow!("--shard {s}: no index given and neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX is set; use --shard I/{n}")
            })?,
    };
    let i: usize = i
        .trim()
        .parse()
        .map_err(|_| anyhow!("--shard {s}: shard index `{i}` is not a number"))?;
    if i >= n {
        bail!(
            "--shard {s}: shard index {i} is out of range for {n} shards (0..={})",
            n - 1
        );
    }
    Ok((i, n))
}

/// The search space: defaults, then a TOML file's axes. A dense model's default
/// layouts are tensor-parallel replicas ([`SearchSpace::dense_default`]): its DEP
/// ranks would each hold all of it.
fn load_space(path: Option<&str>, dense: bool) -> Result<SearchSpace> {
    match path {
        None if dense => Ok(SearchSpace::dense_default()),
        None => Ok(SearchSpace::default()),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("cannot read --space {p}"))?;
            parse_with_sets(p, &text, &[])
        }
    }
}

/// Loads hardware `name` unless it is the scenario's own (already loaded with its
/// `--set hardware.*`).
fn hardware_named(name: &str, base: &Resolved) -> Result<spec::hardware::Hardware> {
    if name == base.scenario().hardware {
        Ok(base.hardware.clone())
    } else {
        load_hardware(name, &[]).with_context(|| format!("search space hardware `{name}`"))
    }
}

pub fn run(args: &PlanArgs) -> Result<()> {
    let (result, json) = match &args.action {
        Some(PlanAction::Merge { files, output }) => {
            (exec::merge_files(files, output), output.json)
        }
        None => (exec::plan(args), args.output.json),
    };
    // `--json` answers in JSON even when it fails: an infeasible plan has printed its
    // object (with `error`); any other failure prints `{"error": ...}` here.
    if let Err(e) = &result {
        let infeasible = e
            .downcast_ref::<sim::plan::PlanError>()
            .is_some_and(|p| matches!(p, sim::plan::PlanError::Infeasible(_)));
        if json && !infeasible {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "version": env!("CARGO_PKG_VERSION"),
                    "error": format!("{e:#}"),
                }))?
            );
        }
    }
    result
}
