//! One exact step of a DEP group or TP replica, priced by the cost model: the
//! arguments that describe it (`twin forward`'s, which `sweep` and `validate` share),
//! their checks, and the priced step.

use anyhow::{anyhow, bail, Result};
use clap::{Args, ValueEnum};
use scenario::{cost_params, load_hardware, load_model, Overrides, Set};
use sim::cost::{AnalyticCostModel, CostModel, CostParams, Layout, Phase};
use sim::forward::{forward, ForwardResult, ForwardSpec};
use spec::problem::Field;
use spec::{hardware::Hardware, model::Model};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PhaseArg {
    Prefill,
    Decode,
}

/// The hardware `forward`, `sweep` and `kernel` price on unless told: the default
/// scenario's.
pub const DEFAULT_HARDWARE: &str = "gb300";

#[derive(Debug, Clone, Args)]
pub struct ForwardArgs {
    /// Hardware name (`twin list`) or path to a hardware TOML.
    #[arg(long, default_value = DEFAULT_HARDWARE)]
    pub hardware: String,
    /// Model name (`twin list`) or path to a model TOML.
    #[arg(long, default_value = "deepseek-v4.1-flash")]
    pub model: String,
    /// Which step: decode (one token per request, plus MTP drafts) or prefill.
    #[arg(long, value_enum, default_value = "decode")]
    pub phase: PhaseArg,
    /// Ranks in the data + expert parallel group (default 8; 1 with --tp).
    #[arg(long)]
    pub dep: Option<u32>,
    /// GPUs of one tensor-parallel replica (heads and dense layers split over them,
    /// all-reduce after attention and after the FFN) instead of a DEP group.
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// With --tp: routed experts whole on each GPU (expert parallelism) instead of
    /// sliced over the TP GPUs.
    #[arg(long)]
    pub expert_parallel: bool,
    /// Redundant expert copies spread over the group (EPLB).
    #[arg(long, default_value_t = 0)]
    pub redundant_experts: u32,
    /// Requests per rank [default: 64].
    #[arg(long)]
    pub batch_per_rank: Option<u32>,
    /// Requests over the whole group, placed round-robin over the ranks (instead of
    /// --batch-per-rank); `--requests 1` on DEP2 times one request, one rank idle.
    #[arg(long)]
    pub requests: Option<u32>,
    /// Tokens already in KV per request (decode context or cached prefix).
    #[arg(long, default_value_t = 0)]
    pub context: u64,
    /// Prefill: new tokens per request.
    #[arg(long, default_value_t = 8192)]
    pub new_tokens: u32,
    /// Prefill: chunk budget per request per step (default: the whole prompt in one step).
    #[arg(long)]
    pub chunk: Option<u32>,
    /// Decode: MTP draft tokens per step (default: the model's `mtp.draft_tokens`).
    #[arg(long)]
    pub mtp: Option<u32>,
    /// Do not overlap dispatch/combine with compute (no two-micro-batch overlap).
    #[arg(long)]
    pub no_overlap: bool,
    /// How two overlapped decode micro-batches are scheduled: `two-batch` (four stages
    /// each) or `five-stage` (DeepSeek's decode pipeline, as SGLang runs it).
    #[arg(long, value_name = "SCHEDULE", default_value = "two-batch", value_parser = str::parse::<sim::cost::Pipeline>)]
    pub pipeline: sim::cost::Pipeline,
    /// Launch decode kernels eagerly from the host instead of replaying CUDA graphs.
    #[arg(long)]
    pub eager_decode: bool,
    /// Replay prefill steps as CUDA graphs instead of launching kernels eagerly.
    #[arg(long)]
    pub prefill_graphs: bool,
    /// Override any field: `model.engram.page_size=2MiB`, `hardware.hbm.bytes_per_s=7e12`,
    /// `cost.moe.mem_eff=0.9` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub pricing: crate::args::PricingArgs,
    /// Price every kernel at its isolated-benchmark price: leave out the hardware's
    /// in-situ terms (`[cost.in_situ]`).
    #[arg(long)]
    pub isolated: bool,
    /// Also print one layer as an in-situ breakdown reports it: ms per stream and
    /// category, bubbles, launch gaps.
    #[arg(long)]
    pub in_situ_layer: bool,
    /// Write the predicted step as a Chrome trace (open it in Perfetto beside a
    /// profiler trace of the real run; `twin calibrate --from-trace` reads it back).
    #[arg(long, value_name = "FILE.json")]
    pub trace_out: Option<std::path::PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Do not draw the p10-p90 band from the hardware's kernel-fit spreads.
    #[arg(long)]
    pub no_band: bool,
}

/// Requests per rank when `--batch-per-rank` is not given.
pub const DEFAULT_BATCH_PER_RANK: u32 = 64;

impl ForwardArgs {
    /// `--batch-per-rank`, or its default.
    pub fn batch_per_rank(&self) -> u32 {
        self.batch_per_rank.unwrap_or(DEFAULT_BATCH_PER_RANK)
    }
}

/// Most chunks a chunked prefill may take (each is priced as one step): a 1M-token
/// prompt in 1K-token chunks is a thousand.
pub const MAX_CHUNK_STEPS: u32 = 100_000;

/// Everything `forward` computed, for printing and for `validate`.
pub struct Forward {
    pub spec: ForwardSpec,
    pub layout: Layout,
    pub result: ForwardResult,
    pub cost_model: String,
    pub model: String,
    pub hardware: String,
    /// Where the price's in-situ terms come from (one line).
    pub in_situ: String,
    /// Each step's timeline, when `--trace-out` asks for it.
    pub traces: Vec<sim::cost::analytic::StepTrace>,
}

impl From<PhaseArg> for Phase {
    fn from(p: PhaseArg) -> Phase {
        match p {
            PhaseArg::Prefill => Phase::Prefill,
            PhaseArg::Decode => Phase::Decode,
        }
    }
}

/// A deployment field in the words of `twin forward` and `sweep`: its flag.
pub fn flag(f: &Field) -> String {
    match f {
        Field::Path(p) => p.clone(),
        Field::Dep => "--dep".into(),
        Field::Tp => "--tp".into(),
        Field::RedundantExperts => "--redundant-experts".into(),
        Field::BatchPerRank => "--batch-per-rank".into(),
    }
}

/// Loads, validates and prices the step described by `args`.
pub fn evaluate(args: &ForwardArgs) -> Result<Forward> {
    evaluate_with(args, Overrides::parse(&args.set)?)
}

/// `evaluate` with the overrides `sets` (the arguments' `--set`, and any a caller adds,
/// typed) in place of the arguments' own.
pub fn evaluate_with(args: &ForwardArgs, sets: Overrides) -> Result<Forward> {
    let p = prepare_with(args, sets)?;
    price(
        p.spec,
        p.hardware,
        p.model,
        p.layout,
        p.params,
        args.trace_out.is_some(),
    )
}

/// A step described and checked, not yet priced: what a band re-prices per draw.
#[derive(Clone)]
pub struct Prepared {
    pub spec: ForwardSpec,
    pub hardware: Hardware,
    pub model: Model,
    pub layout: Layout,
    pub params: CostParams,
}

impl Prepared {
    /// The step priced with `params` instead of its own.
    pub fn price_with(&self, params: CostParams) -> Result<Forward> {
        let s = self.clone();
        price(s.spec, s.hardware, s.model, s.layout, params, false)
    }
}

/// Loads and validates the step described by `args`.
pub fn prepare(args: &ForwardArgs) -> Result<Prepared> {
    prepare_with(args, Overrides::parse(&args.set)?)
}

/// `prepare` with the overrides `sets` in place of the arguments' own `--set`.
fn prepare_with(args: &ForwardArgs, sets: Overrides) -> Result<Prepared> {
    if let Some(s) = sets.first_outside(&["hardware", "model", "cost"]) {
        bail!(
            "--set {}: the path must start with `hardware.`, `model.` or `cost.`",
            s.text
        );
    }
    let (hardware, model, params) = load(args, &sets)?;
    let dep = args.dep.unwrap_or(if args.tp > 1 { 1 } else { 8 });
    if args.expert_parallel && args.tp <= 1 {
        bail!("--expert-parallel applies to a TP replica (--tp 2 or more); a DEP group is expert-parallel already");
    }
    if args.pipeline == sim::cost::Pipeline::FiveStage {
        if args.no_overlap {
            bail!("--pipeline five-stage schedules two overlapped micro-batches; --no-overlap runs none");
        }
        if args.phase == PhaseArg::Prefill {
            bail!("--pipeline five-stage schedules decode steps; a prefill step's micro-batches run the two-batch schedule");
        }
    }
    let layout = Layout {
        dep,
        tp: args.tp,
        expert_parallel: args.expert_parallel,
        redundant_experts: args.redundant_experts,
        overlap_microbatches: !args.no_overlap,
        decode_graphs: !args.eager_decode,
        prefill_graphs: args.prefill_graphs,
        decode_pipeline: args.pipeline,
    };
    let phase = Phase::from(args.phase);
    let draft_tokens = draft_tokens(args, phase, &model)?;
    let batch_check = check_batch(args, phase, dep)?;
    let step_tokens = if phase == Phase::Prefill {
        args.new_tokens as u64
    } else {
        1 + draft_tokens as u64
    };
    let kv_tokens = args.context.checked_add(step_tokens).ok_or_else(|| {
        anyhow!(
            "--context {}: with the step's {step_tokens} new tokens that is more tokens than twin can count",
            args.context
        )
    })?;
    let problems =
        sim::validate::deployment(&hardware, &model, &layout, batch_check as u64, kv_tokens);
    if !problems.is_empty() {
        let lines: Vec<String> = problems
            .iter()
            .map(|p| format!("  {}", p.render(&flag)))
            .collect();
        bail!("impossible configuration:\n{}", lines.join("\n"));
    }
    let tokens_per_step = model
        .mtp
        .as_ref()
        .map(|m| m.expected_tokens_per_step(draft_tokens))
        .unwrap_or(1.0);
    let spec = ForwardSpec {
        phase,
        dep,
        tp: args.tp,
        batch_per_rank: args.batch_per_rank(),
        total_requests: args.requests,
        context_tokens: args.context,
        new_tokens: args.new_tokens,
        chunk_tokens: args.chunk,
        draft_tokens,
        tokens_per_step,
    };
    let mut params = params;
    let steps = Step {
        layout: &layout,
        spec: &spec,
    };
    slow_guard(args, &sets.cost, &hardware, &model, steps, &mut params)?;
    Ok(Prepared {
        spec,
        hardware,
        model,
        layout,
        params,
    })
}

/// A GPU profile or table path that prices an op of this step far slower than the
/// reference is refused (`scenario::slow`), or said in the cost model's line with
/// `--allow-slow-profile`.
fn slow_guard(
    args: &ForwardArgs,
    cost_sets: &[Set],
    hardware: &Hardware,
    model: &Model,
    step: Step,
    params: &mut CostParams,
) -> Result<()> {
    let p = &args.pricing;
    let Some(r) = scenario::slow::reference(
        hardware,
        p.profile.as_deref(),
        cost_sets,
        p.engine.as_deref(),
        p.physics_only || args.isolated,
    )?
    else {
        return Ok(());
    };
    let mut r = r;
    if args.isolated {
        r.params.in_situ = sim::cost::insitu::InSitu::isolated();
    }
    let probe = scenario::slow::Probe {
        layout: step.layout.clone(),
        spec: step.spec.clone(),
        label: "this step".into(),
    };
    if let Some(words) =
        scenario::slow::check(hardware, model, &[probe], params, &r, p.allow_slow_profile)?
    {
        params.source = format!("{}; {words}", params.source);
    }
    Ok(())
}

/// One step's layout and shape, as the slow-profile check probes it.
#[derive(Clone, Copy)]
struct Step<'a> {
    layout: &'a Layout,
    spec: &'a ForwardSpec,
}

/// The hardware and model `args` name, with their overrides, and the cost parameters
/// they price with.
fn load(args: &ForwardArgs, sets: &Overrides) -> Result<(Hardware, Model, CostParams)> {
    let hardware = load_hardware(&args.hardware, &sets.hardware)?;
    let model = load_model(&args.model, &sets.model)?;
    let mut params = cost_params(
        &hardware,
        args.pricing.profile.as_deref(),
        &sets.cost,
        args.pricing.engine.as_deref(),
        args.pricing.physics_only || args.isolated,
    )?;
    if args.isolated {
        params.in_situ = sim::cost::insitu::InSitu::isolated();
    }
    Ok((hardware, model, params))
}

/// The MTP draft tokens of a decode step (`--mtp`, else the model's), checked against
/// the acceptance rates the model gives.
fn draft_tokens(args: &ForwardArgs, phase: Phase, model: &Model) -> Result<u32> {
    let draft_tokens = match phase {
        Phase::Decode => args
            .mtp
            .unwrap_or_else(|| model.mtp.as_ref().map(|m| m.draft_tokens).unwrap_or(0)),
        Phase::Prefill => 0,
    };
    if draft_tokens > 0 {
        match &model.mtp {
            None => bail!("--mtp {draft_tokens}: model {} has no MTP module; use --mtp 0", model.name),
            Some(m) if (m.acceptance.len() as u32) < draft_tokens => bail!(
                "--mtp {draft_tokens}: model {} gives acceptance rates for {} draft tokens; use --mtp {} or less, or --set model.mtp.acceptance=[...]",
                model.name,
                m.acceptance.len(),
                m.acceptance.len()
            ),
            _ => {}
        }
    }
    Ok(draft_tokens)
}

/// Checks the batch, prompt and chunk flags; returns the requests per rank the
/// deployment check takes (the busiest rank's under `--requests`).
fn check_batch(args: &ForwardArgs, phase: Phase, dep: u32) -> Result<u32> {
    if args.batch_per_rank() == 0 {
        bail!("--batch-per-rank must be at least 1");
    }
    if args.requests == Some(0) {
        bail!("--requests must be at least 1");
    }
    let batch_check = match args.requests {
        Some(n) => n.div_ceil(dep.max(1)),
        None => args.batch_per_rank(),
    };
    if phase == Phase::Prefill && args.new_tokens == 0 {
        bail!("--new-tokens must be at least 1 for a prefill step");
    }
    if args.chunk == Some(0) {
        bail!("--chunk must be at least 1");
    }
    if let (Phase::Prefill, Some(c)) = (phase, args.chunk) {
        // Each chunk is one priced step.
        let steps = args.new_tokens.div_ceil(c);
        if steps > MAX_CHUNK_STEPS {
            bail!(
                "--chunk {c}: {} new tokens make {steps} chunks; at most {MAX_CHUNK_STEPS} are priced (use a larger --chunk)",
                args.new_tokens
            );
        }
    }
    Ok(batch_check)
}

/// Prices `spec` on the analytic cost model of `layout`.
fn price(
    spec: ForwardSpec,
    hardware: Hardware,
    model: Model,
    layout: Layout,
    params: CostParams,
    trace: bool,
) -> Result<Forward> {
    let cm = AnalyticCostModel::new(hardware.clone(), model.clone(), layout, params);
    let result = forward(&cm, &spec);
    let traces = if trace {
        sim::forward::trace(&cm, &spec)
    } else {
        Vec::new()
    };
    if let Some(why) = sim::validate::non_finite_step(&result.total) {
        bail!("this step cannot be priced: {why}");
    }
    let in_situ = report::text::in_situ::source_line(&cm.params.in_situ, &hardware.name);
    Ok(Forward {
        spec,
        layout: cm.layout.clone(),
        result,
        cost_model: cm.describe(),
        model: model.name,
        hardware: hardware.name,
        in_situ,
        traces,
    })
}
