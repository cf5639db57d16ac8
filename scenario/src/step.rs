//! One exact step of a DEP group or TP replica, priced by the cost model: what a
//! command asks of it ([`StepRequest`]: `twin forward`'s flags, which `sweep`,
//! `validate` and `calibrate --from-trace` share), its checks, and the priced step.
//! Problems name the request's fields by `twin forward`'s flags ([`flag`]).

use crate::{cost_params, load_hardware, load_model, Overrides, Pricing};
use anyhow::{anyhow, bail, Result};
use sim::cost::{AnalyticCostModel, CostModel, CostParams, Layout, Phase, Pipeline};
use sim::forward::{forward, ForwardResult, ForwardSpec};
use spec::problem::Field;
use spec::{hardware::Hardware, model::Model};

/// The hardware `forward`, `sweep` and `kernel` price on unless told: the default
/// scenario's.
pub const DEFAULT_HARDWARE: &str = "gb300";

/// One step as asked: the hardware and model (names or paths) with their overrides, the
/// layout, the batch and what prices it.
#[derive(Debug, Clone)]
pub struct StepRequest {
    pub hardware: String,
    pub model: String,
    pub phase: Phase,
    /// Ranks of the DEP group (default 8; 1 with `tp` above 1).
    pub dep: Option<u32>,
    pub tp: u32,
    pub expert_parallel: bool,
    pub redundant_experts: u32,
    /// Requests per rank (default [`DEFAULT_BATCH_PER_RANK`]).
    pub batch_per_rank: Option<u32>,
    /// Requests over the whole group instead, round-robin over the ranks.
    pub requests: Option<u32>,
    pub context: u64,
    pub new_tokens: u32,
    pub chunk: Option<u32>,
    pub mtp: Option<u32>,
    pub no_overlap: bool,
    pub pipeline: Pipeline,
    pub eager_decode: bool,
    pub prefill_graphs: bool,
    /// The deployment's own routed-expert kernel (`--moe-kernel`).
    pub moe_kernel: Option<spec::kernel::MoeKernel>,
    /// Kernels launched with programmatic dependent launch (`--pdl`).
    pub pdl: bool,
    /// Overrides of the hardware, model and cost (`--set`).
    pub sets: Overrides,
    pub pricing: Pricing,
    /// Every kernel at its isolated-benchmark price (no in-situ terms).
    pub isolated: bool,
    /// Keep each step's timeline (`forward --trace-out`).
    pub trace: bool,
}

impl StepRequest {
    /// Requests per rank, or the default.
    pub fn batch_per_rank(&self) -> u32 {
        self.batch_per_rank.unwrap_or(DEFAULT_BATCH_PER_RANK)
    }
}

/// Requests per rank when `--batch-per-rank` is not given.
pub const DEFAULT_BATCH_PER_RANK: u32 = 64;

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

/// A deployment field in the words of `twin forward` and `sweep`: its flag.
pub fn flag(f: &Field) -> String {
    match f {
        Field::Path(p) => p.clone(),
        Field::Dep => "--dep".into(),
        Field::Tp => "--tp".into(),
        Field::RedundantExperts => "--redundant-experts".into(),
        Field::ExpertParallel => "--expert-parallel".into(),
        Field::BatchPerRank => "--batch-per-rank".into(),
    }
}

/// A layout the deployment checks refuse (`sim::validate::deployment`): its problems,
/// shown in `forward`'s flags, or in another command's words ([`Impossible::render`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Impossible(pub Vec<spec::problem::Problem>);

impl Impossible {
    /// "impossible configuration:" and one indented line a problem, each field named by
    /// `name`.
    pub fn render(&self, name: &dyn Fn(&Field) -> String) -> String {
        let lines: Vec<String> = self
            .0
            .iter()
            .map(|p| format!("  {}", p.render(name)))
            .collect();
        format!("impossible configuration:\n{}", lines.join("\n"))
    }
}

impl std::fmt::Display for Impossible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render(&flag))
    }
}

impl std::error::Error for Impossible {}

/// The measured-runs band of the step `f` that `req` asked for: the band of the runs
/// profile's group of `--engine` on the step's GPU family (the model's own where the
/// group holds it), whose TPOT factors [`step_band`] puts around a decode step; `None`
/// for a prefill step (a run's TTFT, which the band's other metric holds, is queueing
/// and front end as much as prefill steps), without an engine, with `--physics-only`
/// or isolated prices, or where the profile has no group with a band for them. The
/// same for every step of one engine, GPU and model (`sweep` reads it once).
pub fn runs_band(
    req: &StepRequest,
    f: &Forward,
) -> Result<Option<sim::serving::runs_band::RunsBand>> {
    if req.phase != Phase::Decode {
        return Ok(None);
    }
    super::resolve::runs_band_of(
        req.pricing.engine.as_deref(),
        req.pricing.profile.as_deref(),
        req.pricing.physics_only || req.isolated,
        &f.hardware,
        &f.model,
    )
}

/// Band `b`'s TPOT factors around the decode step `f` (`RunsBand::decode_step`).
pub fn step_band(
    b: &sim::serving::runs_band::RunsBand,
    f: &Forward,
) -> Option<sim::serving::runs_band::StepBand> {
    let step = f.result.step_s();
    let user = f.spec.tokens_per_step / step;
    b.decode_step(step * 1e3, f.result.tokens_per_s_per_gpu, user)
}

/// Loads, validates and prices the step `req` asks for.
pub fn evaluate(req: &StepRequest) -> Result<Forward> {
    let p = prepare(req)?;
    price(p.spec, p.hardware, p.model, p.layout, p.params, req.trace)
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

/// Loads and validates the step `req` asks for.
pub fn prepare(req: &StepRequest) -> Result<Prepared> {
    let sets = &req.sets;
    if let Some(s) = sets.first_outside(&["hardware", "model", "cost"]) {
        bail!(
            "--set {}: the path must start with `hardware.`, `model.` or `cost.`",
            s.text
        );
    }
    let (hardware, model, params) = load(req, sets)?;
    let dep = req.dep.unwrap_or(if req.tp > 1 { 1 } else { 8 });
    let layout = layout(req, dep)?;
    let phase = req.phase;
    let draft_tokens = draft_tokens(req, phase, &model)?;
    let batch_check = check_batch(req, phase, dep)?;
    let step_tokens = if phase == Phase::Prefill {
        req.new_tokens as u64
    } else {
        1 + draft_tokens as u64
    };
    let kv_tokens = req.context.checked_add(step_tokens).ok_or_else(|| {
        anyhow!(
            "--context {}: with the step's {step_tokens} new tokens that is more tokens than twin can count",
            req.context
        )
    })?;
    let problems =
        sim::validate::deployment(&hardware, &model, &layout, batch_check as u64, kv_tokens);
    if !problems.is_empty() {
        return Err(Impossible(problems).into());
    }
    let tokens_per_step = model
        .mtp
        .as_ref()
        .map(|m| m.expected_tokens_per_step(draft_tokens))
        .unwrap_or(1.0);
    let spec = ForwardSpec {
        phase,
        dep,
        tp: req.tp,
        batch_per_rank: req.batch_per_rank(),
        total_requests: req.requests,
        context_tokens: req.context,
        new_tokens: req.new_tokens,
        chunk_tokens: req.chunk,
        draft_tokens,
        tokens_per_step,
    };
    let mut params = params;
    let steps = Step {
        layout: &layout,
        spec: &spec,
    };
    slow_guard(req, &hardware, &model, steps, &mut params)?;
    Ok(Prepared {
        spec,
        hardware,
        model,
        layout,
        params,
    })
}

/// The layout `req` asks for with `dep` ranks, its parallelism and pipeline flags
/// checked against each other.
fn layout(req: &StepRequest, dep: u32) -> Result<Layout> {
    if req.expert_parallel && req.tp <= 1 {
        bail!("--expert-parallel applies to a TP replica (--tp 2 or more); a DEP group is expert-parallel already");
    }
    if req.pipeline == sim::cost::Pipeline::FiveStage {
        if req.no_overlap {
            bail!("--pipeline five-stage schedules two overlapped micro-batches; --no-overlap runs none");
        }
        if req.phase == Phase::Prefill {
            bail!("--pipeline five-stage schedules decode steps; a prefill step's micro-batches run the two-batch schedule");
        }
    }
    Ok(Layout {
        dep,
        tp: req.tp,
        expert_parallel: req.expert_parallel,
        redundant_experts: req.redundant_experts,
        overlap_microbatches: !req.no_overlap,
        decode_graphs: !req.eager_decode,
        prefill_graphs: req.prefill_graphs,
        decode_pipeline: req.pipeline,
    })
}

/// A GPU profile or table path that prices an op of this step far slower than the
/// reference is refused (`scenario::slow`), or said in the cost model's line with
/// `--allow-slow-profile`.
fn slow_guard(
    req: &StepRequest,
    hardware: &Hardware,
    model: &Model,
    step: Step,
    params: &mut CostParams,
) -> Result<()> {
    let p = &req.pricing;
    let Some(r) = crate::slow::reference(
        hardware,
        p.profile.as_deref(),
        &req.sets.cost,
        p.engine.as_deref(),
        p.physics_only || req.isolated,
    )?
    else {
        return Ok(());
    };
    let mut r = r;
    if req.isolated {
        r.params.in_situ = sim::cost::insitu::InSitu::isolated();
    }
    let probe = crate::slow::Probe {
        layout: step.layout.clone(),
        spec: step.spec.clone(),
        label: "this step".into(),
    };
    if let Some(words) =
        crate::slow::check(hardware, model, &[probe], params, &r, p.allow_slow_profile)?
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

/// The hardware and model `req` name, with their overrides, and the cost parameters
/// they price with.
fn load(req: &StepRequest, sets: &Overrides) -> Result<(Hardware, Model, CostParams)> {
    let hardware = load_hardware(&req.hardware, &sets.hardware)?;
    let model = load_model(&req.model, &sets.model)?;
    let mut params = cost_params(
        &hardware,
        req.pricing.profile.as_deref(),
        &sets.cost,
        req.pricing.engine.as_deref(),
        req.pricing.physics_only || req.isolated,
    )?;
    if req.isolated {
        params.in_situ = sim::cost::insitu::InSitu::isolated();
    }
    if let Some(e) = req.pricing.engine.as_deref() {
        use sim::serving::scheduler::{Scheduler, SchedulerChoice};
        let ahead = Scheduler::resolve(SchedulerChoice::Auto, Some(e)).schedules_ahead_at(Some(e));
        super::resolve::host_follows_steps(ahead, &mut params.host);
    }
    super::cost::apply_moe_kernel(
        &mut params,
        &hardware,
        &model,
        req.pricing.engine.as_deref(),
        req.moe_kernel,
    );
    super::cost::apply_pdl(&mut params, req.pdl);
    // A `--set cost.*` outranks what the engine's defaults put in.
    params.repin();
    Ok((hardware, model, params))
}

/// The MTP draft tokens of a decode step (`--mtp`, else the model's), checked against
/// the acceptance rates the model gives.
fn draft_tokens(req: &StepRequest, phase: Phase, model: &Model) -> Result<u32> {
    let draft_tokens = match phase {
        Phase::Decode => req
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
fn check_batch(req: &StepRequest, phase: Phase, dep: u32) -> Result<u32> {
    if req.batch_per_rank() == 0 {
        bail!("--batch-per-rank must be at least 1");
    }
    if req.requests == Some(0) {
        bail!("--requests must be at least 1");
    }
    let batch_check = match req.requests {
        Some(n) => n.div_ceil(dep.max(1)),
        None => req.batch_per_rank(),
    };
    if phase == Phase::Prefill && req.new_tokens == 0 {
        bail!("--new-tokens must be at least 1 for a prefill step");
    }
    if req.chunk == Some(0) {
        bail!("--chunk must be at least 1");
    }
    if let (Phase::Prefill, Some(c)) = (phase, req.chunk) {
        // Each chunk is one priced step.
        let steps = req.new_tokens.div_ceil(c);
        if steps > MAX_CHUNK_STEPS {
            bail!(
                "--chunk {c}: {} new tokens make {steps} chunks; at most {MAX_CHUNK_STEPS} are priced (use a larger --chunk)",
                req.new_tokens
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
    let in_situ = cm.params.in_situ.source_line(&hardware.name);
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
