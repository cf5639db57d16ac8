//! One resolution of a scenario: the arguments of a run and every file they name,
//! parsed, overridden and validated once, into a [`Resolved`] (the only way to one),
//! and the trace a replay reads. `twin simulate`, `cost`, `plan`, `live` and
//! `validate` all resolve through here.

use super::{
    clip, cost_params, declares, find_file, load_hardware, load_model, load_scenario_text,
    parse_with_sets, Kind, Pricing, RunRequest, Set, TraceSource,
};
use anyhow::{bail, Context, Result};
use sim::cost::CostParams;
use sim::serving::{
    trace_span, Checked, Limits, PoolConfig, ServingScenario, TraceRecord, WorkloadConfig,
};
use spec::problem::Field;

/// Everything a run resolved, before simulating: built only by [`resolve`] (or
/// [`resolve_parts`]), so holding one means its scenario, workload and deployments
/// passed every check. The scenario and workload are a `sim::serving::Checked`, which
/// the simulator takes without checking again; a caller that changes the run
/// ([`Resolved::change`]: a benchmark's client as the workload) has it checked again.
#[derive(Clone)]
#[non_exhaustive]
pub struct Resolved {
    pub scenario_origin: String,
    run: Checked,
    pub hardware: spec::hardware::Hardware,
    pub model: spec::model::Model,
    pub params: CostParams,
    pub seed: u64,
    /// What resolving (and reading the trace) chose for the user or left out: defaults
    /// that change the GPU count, a shortened warm-up, a trace cut by the duration.
    pub notes: Vec<String>,
    /// The band measured runs give the run's engine on its GPU family, where the runs
    /// profile that prices it has one.
    pub runs_band: Option<crate::runs_profile::RunsBand>,
}

/// Parses and validates the request and every file it names: the one way from what a
/// command asks to a checked run.
pub fn resolve(req: &RunRequest) -> Result<Resolved> {
    let sets = &req.sets;
    let (origin, text) = load_scenario_text(req.scenario_name())?;
    let mut sc: ServingScenario = parse_with_sets(&origin, &text, &sets.scenario)?;
    let mut notes = pool_notes(&sc, &|path| declares(&text, &sets.scenario, path));
    let sheet_declared = declares(&text, &sets.scenario, &["price", "sheet"]);
    apply_duration(&mut sc, req.duration, &mut notes)?;
    let seed = req.seed.unwrap_or(sc.seed);
    sc.seed = seed;
    notes.extend(cohort_note(&sc));

    let hardware = load_hardware(&sc.hardware, &sets.hardware)
        .with_context(|| format!("hardware of {origin}"))?;
    let model = load_model(&sc.model, &sets.model).with_context(|| format!("model of {origin}"))?;
    if !sheet_declared {
        notes.push(default_sheet(&mut sc, &model.name));
    }
    notes.extend(drop_workload_set(&mut sc, &origin, &text, &sets.scenario));
    let (wl_origin, mut workload) = load_workload(&sc, &origin, sets.workload.clone())?;
    if let Some(spec) = &req.bench {
        bench_workload(spec, req, &mut sc, &mut workload, &mut notes)?;
    }
    if let Some(e) = &req.pricing.engine {
        sc.engine = Some(e.clone());
    }
    let (engine, physics_only) = engine_of(&sc, &req.pricing);
    let runs_band = runs_frontend(
        &mut sc,
        req.pricing.profile.as_deref(),
        physics_only,
        (&hardware.name, &model.name),
        engine.as_deref(),
        &mut notes,
    )?;
    let origins = Origins {
        scenario: &origin,
        workload: &wl_origin,
    };
    let run = check(sc, workload, origins, &hardware, &model)
        .map_err(|p| anyhow::anyhow!("invalid scenario:\n  {}", p.join("\n  ")))?;
    let params = step_prices(&hardware, &model, run.scenario(), &req.pricing, &sets.cost)?;
    Ok(Resolved {
        scenario_origin: origin,
        run,
        hardware,
        model,
        params,
        seed,
        notes,
        runs_band,
    })
}

impl Resolved {
    /// The scenario, checked.
    pub fn scenario(&self) -> &ServingScenario {
        self.run.scenario()
    }

    /// The workload, checked.
    pub fn workload(&self) -> &WorkloadConfig {
        self.run.workload()
    }

    /// The scenario and workload as the simulator takes them.
    pub fn run(&self) -> &Checked {
        &self.run
    }

    /// The run changed by `f` (a benchmark's client as the workload, a fitted front
    /// end), checked again; on a problem it stays as it was.
    pub fn change(
        &mut self,
        f: impl FnOnce(&mut ServingScenario, &mut WorkloadConfig),
    ) -> Result<()> {
        let (mut sc, mut wl) = (self.scenario().clone(), self.workload().clone());
        f(&mut sc, &mut wl);
        let origins = Origins {
            scenario: &self.scenario_origin,
            workload: &self.scenario_origin,
        };
        self.run = check(sc, wl, origins, &self.hardware, &self.model)
            .map_err(|p| anyhow::anyhow!("{}", p.join("; ")))?;
        Ok(())
    }

    /// The simulator's input for this run: its pools priced by `costs` (from
    /// [`Resolved::pool_costs`]), replaying `trace`.
    pub fn input<'a>(
        &'a self,
        costs: &'a (sim::cost::AnalyticCostModel, sim::cost::AnalyticCostModel),
        trace: &'a [TraceRecord],
    ) -> sim::serving::SimInput<'a> {
        sim::serving::SimInput {
            run: &self.run,
            hardware: &self.hardware,
            model: &self.model,
            prefill_cost: &costs.0,
            decode_cost: &costs.1,
            trace,
        }
    }

    /// The analytic cost models of the prefill and decode pools, priced with `params`
    /// (the resolved `self.params`, or a band's draw).
    pub fn pool_costs(
        &self,
        params: &CostParams,
    ) -> (sim::cost::AnalyticCostModel, sim::cost::AnalyticCostModel) {
        // A change of the run (a benchmark's server turning overlap off) reaches the
        // host terms here too; a `--set cost.host.*` still outranks it.
        let mut params = params.clone();
        host_follows_steps(self.scenario().schedules_ahead(), &mut params.host);
        params.repin();
        let pool = |p: &PoolConfig| {
            sim::cost::AnalyticCostModel::new(
                self.hardware.clone(),
                self.model.clone(),
                p.layout(),
                params.clone(),
            )
        };
        let serving = &self.scenario().serving;
        (pool(&serving.prefill), pool(&serving.decode))
    }
}

/// The engine whose tables and terms price the scenario's steps (`--engine`, else the
/// scenario's), and whether the runs terms are left out: asked (`--physics-only`), or
/// the scenario's scheduler is another engine's (an SGLang run priced by vLLM's tables
/// takes none of vLLM's terms).
fn engine_of(sc: &ServingScenario, pricing: &Pricing) -> (Option<String>, bool) {
    let engine = pricing.engine.clone().or(sc.engine.clone());
    let physics_only = pricing.physics_only || scheduler_of_another_engine(sc, engine.as_deref());
    (engine, physics_only)
}

/// The measured-runs band of the scenario's engine on `hardware` (a GPU of a plan's
/// space) for its `model`, by the profile and engine that price its steps, as `resolve`
/// finds the band of the scenario's own GPU; `None` without an engine, with
/// `--physics-only`, or where the profile has no group with a band for them.
pub fn runs_band_on(
    sc: &ServingScenario,
    pricing: &Pricing,
    hardware: &str,
    model: &str,
) -> Result<Option<crate::runs_profile::RunsBand>> {
    let (engine, physics_only) = engine_of(sc, pricing);
    runs_band_of(
        engine.as_deref(),
        pricing.profile.as_deref(),
        physics_only,
        hardware,
        model,
    )
}

/// The measured-runs band of `engine` on `hardware` for `model`, by the runs profile
/// that prices its steps (`--profile`'s when it is one, else the shipped one unless
/// `physics_only`); `None` without an engine or where the profile has no group with a
/// band for them. `runs_band_on` and `twin forward`'s step band share it.
pub fn runs_band_of(
    engine: Option<&str>,
    profile: Option<&str>,
    physics_only: bool,
    hardware: &str,
    model: &str,
) -> Result<Option<crate::runs_profile::RunsBand>> {
    let Some((rp, path)) = crate::runs_profile::choose(profile, physics_only)? else {
        return Ok(None);
    };
    Ok(engine.and_then(|e| crate::runs_profile::band_of(&rp, &path, e, hardware, model)))
}

/// What prices the scenario's steps on `hardware`: the hardware's fitted costs under
/// the profile, the engine's tables and terms and the `cost.*` overrides; a GPU profile
/// far slower than the reference refused (or noted, when allowed); the engine's memory
/// knob; its host work exposed where the scenario's steps are not formed ahead. `plan`
/// prices each GPU of its space by the same rule.
pub fn step_prices(
    hardware: &spec::hardware::Hardware,
    model: &spec::model::Model,
    sc: &ServingScenario,
    pricing: &Pricing,
    cost_sets: &[Set],
) -> Result<CostParams> {
    let (engine, physics_only) = engine_of(sc, pricing);
    let (profile, engine) = (pricing.profile.as_deref(), engine.as_deref());
    let mut params = cost_params(hardware, profile, cost_sets, engine, physics_only)?;
    if let Some(r) = super::slow::reference(hardware, profile, cost_sets, engine, physics_only)? {
        let probes = super::slow::scenario_probes(sc);
        let allow = pricing.allow_slow_profile;
        if let Some(words) = super::slow::check(hardware, model, &probes, &params, &r, allow)? {
            params.source = format!("{}; {words}", params.source);
        }
    }
    super::cost::apply_moe_kernel(&mut params, hardware, model, engine, sc.moe_kernel);
    super::cost::apply_pdl(&mut params, sc.pdl == Some(true));
    scenario_knobs(sc, &mut params)?;
    // A `--set cost.*` outranks what the engine's and the scenario's defaults put in.
    params.repin();
    Ok(params)
}

/// The pieces of a run built in code rather than read from files (a measured run's
/// record: `twin validate runs`), each already parsed.
pub struct Parts {
    pub origin: String,
    pub scenario: ServingScenario,
    pub workload: WorkloadConfig,
    pub hardware: spec::hardware::Hardware,
    pub model: spec::model::Model,
    pub params: CostParams,
    pub notes: Vec<String>,
}

/// Checks built pieces as [`resolve`] checks a scenario's, every problem at
/// once: the other way to a [`Resolved`].
pub fn resolve_parts(mut p: Parts) -> Result<Resolved> {
    scenario_knobs(&p.scenario, &mut p.params)?;
    let origins = Origins {
        scenario: &p.origin,
        workload: &p.origin,
    };
    let run = check(p.scenario, p.workload, origins, &p.hardware, &p.model)
        .map_err(|problems| anyhow::anyhow!("{}", problems.join("; ")))?;
    Ok(Resolved {
        seed: run.scenario().seed,
        scenario_origin: p.origin,
        run,
        hardware: p.hardware,
        model: p.model,
        params: p.params,
        notes: p.notes,
        runs_band: None,
    })
}

/// The scenario's `serving.gpu_memory_utilization` on the engine's KV memory rule, and
/// its scheduling on the engine's host terms.
fn scenario_knobs(sc: &ServingScenario, params: &mut CostParams) -> Result<()> {
    if let Some(f) = sc.serving.gpu_memory_utilization {
        if !(f > 0.0 && f <= 1.0) {
            bail!("serving.gpu_memory_utilization = {f}: must lie in (0, 1]");
        }
        params.memory.fraction = Some(f);
    }
    host_follows_steps(sc.schedules_ahead(), &mut params.host);
    Ok(())
}

/// The engine's host work hides under the GPU's only where the engine forms each step
/// while the last runs (`ahead`). Where steps are formed after the last ends (vLLM
/// before 0.14.0, whose async scheduling was opt-in, or `serving.async_scheduling =
/// false`), the whole of it is exposed between steps, and there is no hand-over gap of
/// its own. `twin forward` prices a step of the engine's own default.
pub(crate) fn host_follows_steps(ahead: bool, host: &mut sim::cost::host::Host) {
    if host.overlap > 0.0 && !ahead {
        host.overlap = 0.0;
        host.gap_s = 0.0;
        host.source = format!(
            "{}; exposed whole: each step formed after the last ends",
            host.source
        );
    }
}

/// Whether the scenario's scheduler is set to a serving engine other than `engine`.
fn scheduler_of_another_engine(sc: &ServingScenario, engine: Option<&str>) -> bool {
    use sim::serving::scheduler::SchedulerChoice as C;
    let ran = match sc.serving.scheduler {
        C::Vllm => "vllm",
        C::Sglang => "sglang",
        C::Trtllm => "trtllm",
        C::Auto | C::Twin => return false,
    };
    engine.map(sim::cost::host::engine_key).as_deref() != Some(ran)
}

/// A runs profile's front end (`frontend_s`) for the scenario's engine and GPU, where
/// the scenario sets none; the profile's band for them (and the model, `on` being the
/// hardware's and the model's names), if it has one.
fn runs_frontend(
    sc: &mut ServingScenario,
    profile: Option<&str>,
    physics_only: bool,
    (hardware, model): (&str, &str),
    engine: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<Option<crate::runs_profile::RunsBand>> {
    let Some((rp, path)) = crate::runs_profile::choose(profile, physics_only)? else {
        return Ok(None);
    };
    let band = engine.and_then(|e| crate::runs_profile::band_of(&rp, &path, e, hardware, model));
    // A group that left the front end at its prior (not among its fitted terms) says
    // nothing about it: the engine's own front end stands.
    let Some(g) = engine.and_then(|e| rp.group(e, hardware)) else {
        return Ok(band);
    };
    let fitted = crate::runs_profile::ServingTerms::fitted(g);
    if let (Some(f), None) = (fitted.frontend_s, sc.serving.frontend_s) {
        notes.push(format!(
            "{path}: the front end takes {:.1} ms a request (fitted to {} runs of {})",
            f * 1e3,
            g.records,
            g.name()
        ));
    }
    if let (Some(c), None) = (fitted.frontend_chunk_s, sc.serving.frontend_chunk_s) {
        notes.push(format!(
            "{path}: its API server takes {:.1} us a streamed chunk (fitted to {} runs of {})",
            c.max(0.0) * 1e6,
            g.records,
            g.name()
        ));
    }
    fitted.set_on(&mut sc.serving, true);
    Ok(band)
}

/// `--bench`: the client's run replaces the workload; no warm-up (every request
/// counts), and the run lasts until its last request ends (`--duration` bounds it,
/// else `limits.max_duration_s`).
fn bench_workload(
    spec: &str,
    req: &RunRequest,
    sc: &mut ServingScenario,
    workload: &mut WorkloadConfig,
    notes: &mut Vec<String>,
) -> Result<()> {
    if req.trace.is_some() {
        bail!("--bench and --trace: a benchmark run sends its own requests; give one of them");
    }
    let (client, more) = crate::bench_client::parse(spec)?;
    notes.extend(more);
    let name = spec.split_whitespace().collect::<Vec<_>>().join(" ");
    *workload = WorkloadConfig::bench_run(&format!("bench: {name}"), client);
    sc.warmup_s = 0.0;
    if req.duration.is_none() {
        sc.duration_s = sc.limits.max_duration_s;
    }
    Ok(())
}

/// `--duration`: the run's length, and a warm-up shortened to fit it.
fn apply_duration(
    sc: &mut ServingScenario,
    duration: Option<f64>,
    notes: &mut Vec<String>,
) -> Result<()> {
    let Some(d) = duration else {
        return Ok(());
    };
    if !d.is_finite() {
        bail!("--duration {d}: must be finite");
    }
    if d <= 0.0 {
        bail!("--duration {d}: must be a positive number of seconds");
    }
    sc.duration_s = d;
    if sc.warmup_s >= d {
        let w = d / 5.0;
        notes.push(format!(
            "warm-up {} s does not fit in --duration {d}; using {w} s",
            sc.warmup_s
        ));
        sc.warmup_s = w;
    }
    Ok(())
}

/// A note when the pools split into fewer copies than `fidelity.cohort` asks.
fn cohort_note(sc: &ServingScenario) -> Option<String> {
    let (asked, copies) = (sc.fidelity.cohort, sc.copies());
    if asked <= 1 || copies >= asked {
        return None;
    }
    Some(if copies == 1 {
        format!("fidelity.cohort = {asked}: the pools do not split into copies (a prefill or mixed pool splits by whole instances, a decode pool by instances then ranks); the run is exact")
    } else {
        format!("fidelity.cohort = {asked}: the pools split into {copies} copies, the largest divisor of {asked} they allow; one of {copies} is simulated")
    })
}

/// The price sheet of a scenario that sets none: its model's own public API prices
/// when twin knows them, else none (revenue is not computed); and the note that says
/// which, in one sentence.
fn default_sheet(sc: &mut ServingScenario, model: &str) -> String {
    use sim::serving::PriceSheet;
    match PriceSheet::of_model(model) {
        Some(s) => {
            sc.price.sheet = s;
            format!(
                "price.sheet is not set, so the tokens are valued at `{}`, the public API prices of model `{model}`.",
                s.key()
            )
        }
        None => {
            sc.price.sheet = PriceSheet::None;
            format!(
                "price.sheet is not set and twin knows no public API price sheet of model `{model}`, so revenue is not computed (set price.sheet = \"custom\" with price.custom to value its tokens)."
            )
        }
    }
}

/// A scenario's `workload_set` tunes its own workload: when `--set workload=NAME`
/// replaces that workload, the entries are not applied to the new one (they would name
/// fields it may not have), and a note says so.
fn drop_workload_set(
    sc: &mut ServingScenario,
    origin: &str,
    text: &str,
    sets: &[Set],
) -> Option<String> {
    if sc.workload_set.is_empty() || !sets.iter().any(|s| s.path == ["workload"]) {
        return None;
    }
    let own = toml::from_str::<toml::Value>(text)
        .ok()
        .and_then(|v| v.get("workload")?.as_str().map(str::to_string))?;
    if own == sc.workload {
        return None;
    }
    let dropped = std::mem::take(&mut sc.workload_set);
    Some(format!(
        "workload_set of {origin} ({}) tunes its workload `{own}`, not `{}`: not applied",
        dropped.join("; "),
        sc.workload
    ))
}

/// The scenario's workload file with its `workload_set` and then `--set workload.*`
/// overrides; returns its origin too.
fn load_workload(
    sc: &ServingScenario,
    origin: &str,
    workload_sets: Vec<Set>,
) -> Result<(String, WorkloadConfig)> {
    let (wl_origin, wl_text) =
        find_file(Kind::Workload, &sc.workload).with_context(|| format!("workload of {origin}"))?;
    let mut wl_sets = Vec::new();
    for s in &sc.workload_set {
        wl_sets.push(Set::parse_from(s, &format!("workload_set of {origin}:"))?);
    }
    wl_sets.extend(workload_sets);
    let workload = parse_with_sets(&wl_origin, &wl_text, &wl_sets)?;
    Ok((wl_origin, workload))
}

/// Where a run's scenario and workload were read, for messages.
#[derive(Clone, Copy)]
struct Origins<'a> {
    scenario: &'a str,
    workload: &'a str,
}

/// The scenario and workload checked as the simulator takes them, and each pool's
/// deployment on the hardware and model; every problem at once, each with the file it
/// is in.
fn check(
    sc: ServingScenario,
    workload: WorkloadConfig,
    at: Origins,
    hardware: &spec::hardware::Hardware,
    model: &spec::model::Model,
) -> Result<Checked, Vec<String>> {
    let mut deployments = Vec::new();
    for (path, pool) in sc.pools() {
        for p in sim::validate::deployment(
            hardware,
            model,
            &pool.layout(),
            pool.max_batch_per_rank as u64,
            0,
        ) {
            let shown = p.render(&|f| pool_field(path, f));
            deployments.push(format!("{}: {shown}", at.scenario));
        }
    }
    let (run, mut problems) = match Checked::new(sc, workload) {
        Ok(run) => (Some(run), Vec::new()),
        Err(r) => {
            let mut p: Vec<String> = r
                .scenario
                .iter()
                .map(|p| format!("{}: {p}", at.scenario))
                .collect();
            p.extend(r.workload.iter().map(|p| format!("{}: {p}", at.workload)));
            p.extend(r.pair.iter().map(|p| format!("{}: {p}", at.scenario)));
            (None, p)
        }
    };
    problems.extend(deployments);
    match run {
        Some(run) if problems.is_empty() => Ok(run),
        _ => Err(problems),
    }
}

/// A deployment field of the scenario's pool at `pool` (`serving.decode`), by its path.
fn pool_field(pool: &str, f: &Field) -> String {
    match f {
        Field::Path(p) => p.clone(),
        Field::Dep => format!("{pool}.dep"),
        Field::Tp => format!("{pool}.tp"),
        Field::RedundantExperts => format!("{pool}.redundant_experts"),
        Field::ExpertParallel => format!("{pool}.expert_parallel"),
        Field::BatchPerRank => format!("{pool}.max_batch_per_rank"),
    }
}

/// The pools a scenario runs that it does not declare (a default then sets the GPU
/// count), and the declared pools its mode leaves out. `declared` says whether the
/// scenario (with its overrides) has a table at a path.
fn pool_notes(sc: &ServingScenario, declared: &dyn Fn(&[&str]) -> bool) -> Vec<String> {
    let describe = |p: &PoolConfig| {
        format!(
            "{} x {} = {} GPUs",
            p.instances,
            p.layout().name(),
            p.gpus()
        )
    };
    let mut notes = Vec::new();
    let run = sc.pools();
    for (name, pool) in [
        ("prefill", &sc.serving.prefill),
        ("decode", &sc.serving.decode),
    ] {
        let path = format!("serving.{name}");
        let runs = run.iter().any(|(p, _)| *p == path);
        let has = declared(&["serving", name]);
        if runs && !has {
            notes.push(format!(
                "{path} is not set: the default {name} pool runs ({})",
                describe(pool)
            ));
        } else if !runs && has {
            notes.push(format!(
                "mode {} does not run {path}: its {} are not used",
                serde_json::to_value(sc.serving.mode)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                describe(pool)
            ));
        }
    }
    notes
}

/// The trace a `[trace]` workload replays, read within `limits`, with notes on what
/// reading repaired or left out.
pub fn read_trace_within(
    trace: Option<&TraceSource>,
    workload: &WorkloadConfig,
    limits: &Limits,
) -> Result<(Vec<TraceRecord>, Vec<String>)> {
    match (&workload.trace, trace) {
        (Some(_), Some(TraceSource { path, format })) => {
            let shown = clip(path);
            let (format, t) = crate::trace_formats::read_trace(
                std::path::Path::new(path),
                &shown,
                *format,
                limits,
            )?;
            if t.records.is_empty() {
                bail!("trace `{shown}` is empty: it has no records");
            }
            let mut notes: Vec<String> = t
                .notes
                .into_iter()
                .map(|n| format!("trace `{shown}`: {n}"))
                .collect();
            if format != crate::trace_formats::TraceFormat::Mooncake {
                notes.insert(
                    0,
                    format!(
                        "trace `{shown}`: read as {}, {} records, arrival times as {}",
                        format.name(),
                        t.records.len(),
                        format.time_unit()
                    ),
                );
            }
            Ok((t.records, notes))
        }
        (Some(_), None) => bail!(
            "workload `{}` replays a trace: pass it with --trace PATH (e.g. ../shared/traces/mooncake/conversation_trace.jsonl)",
            workload.name
        ),
        (None, Some(TraceSource { path, .. })) => bail!(
            "--trace {}: workload `{}` does not replay a trace; choose one with --set workload=trace-replay (or mooncake-conversation)",
            clip(path),
            workload.name
        ),
        (None, None) => Ok((Vec::new(), Vec::new())),
    }
}

/// Where a replayed trace falls in the run: an error when nothing of it would be
/// measured, a note when the duration cuts it short.
pub fn trace_fit(r: &Resolved, trace: &[TraceRecord]) -> Result<Option<String>> {
    let Some(replay) = &r.workload().trace else {
        return Ok(None);
    };
    let sc = &r.scenario();
    let span = trace_span(trace, replay, sc.duration_s, sc.warmup_s);
    let show = sim::validate::show;
    let spans = format!(
        "its {} records arrive from {} s to {} s (timestamps x trace.time_scale {})",
        span.replayed,
        show(span.first_s),
        show(span.last_s),
        replay.time_scale
    );
    if span.in_window == 0 {
        bail!(
            "nothing of the trace would be measured: {spans}, and the run measures {:.1} s to {:.1} s (duration_s {} after warmup_s {}); raise the duration, or lower trace.time_scale",
            sc.warmup_s,
            sc.duration_s,
            sc.duration_s,
            sc.warmup_s
        );
    }
    Ok((span.in_run < span.replayed).then(|| {
        format!(
            "the run ends at {} s and cuts the trace short: {} of its {} records arrive later and are not replayed ({spans})",
            sc.duration_s,
            span.replayed - span.in_run,
            span.replayed
        )
    }))
}

/// Resolves the request and reads the trace it names, with the notes of both.
pub fn resolve_with_trace(req: &RunRequest) -> Result<(Resolved, Vec<TraceRecord>)> {
    let mut r = resolve(req)?;
    if r.workload().rate_curve.is_some() && !r.workload().curve_is_simulated() {
        r.notes.push(format!(
            "workload `{}` has a rate curve; the simulation applies it to open-loop arrivals only (twin plan uses it for any workload)",
            r.workload().name
        ));
    }
    let (trace, notes) = read_trace_within(req.trace.as_ref(), r.workload(), &r.scenario().limits)?;
    r.notes.extend(notes);
    r.notes.extend(trace_fit(&r, &trace)?);
    Ok((r, trace))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resolved run changes only through `Resolved::change`, which checks the changed
    /// run again: a valid change is taken, an invalid one refused with the run as it was.
    #[test]
    fn a_changed_run_is_checked_again() {
        let req = RunRequest::of("h100-gpt-oss-120b-chat", &[]).unwrap();
        let mut r = resolve(&req).unwrap();
        r.change(|sc, _| sc.serving.frontend_s = Some(0.01))
            .unwrap();
        assert_eq!(r.scenario().serving.frontend_s, Some(0.01));
        let e = r.change(|sc, _| sc.fidelity.cohort = 0).unwrap_err();
        assert!(e.to_string().contains("fidelity.cohort"), "{e}");
        assert_eq!(r.scenario().fidelity.cohort, 1);
        assert_eq!(r.scenario().serving.frontend_s, Some(0.01));
    }

    /// vLLM before 0.14.0 formed each step after the last ended (async scheduling was
    /// opt-in): its host work is priced exposed whole, without the hand-over gap; from
    /// 0.14.0, or with `serving.async_scheduling = true`, it hides under the GPU's.
    /// A change of the run that turns overlap off reaches the pools' prices too.
    #[test]
    fn host_work_is_exposed_where_steps_are_not_formed_ahead() {
        let host = |sets: &[&str]| {
            let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
            let r = resolve(&RunRequest::of("h100-gpt-oss-120b-chat", &sets).unwrap()).unwrap();
            r.params.host.clone()
        };
        let old = host(&["engine=vllm@0.12.0"]);
        assert_eq!((old.overlap, old.gap_s), (0.0, 0.0));
        assert!(old.source.contains("exposed whole"), "{}", old.source);
        // The shipped runs terms set the gap to its prior (to rounding).
        let new = host(&["engine=vllm@0.15.0"]);
        assert_eq!(new.overlap, 1.0);
        assert!((new.gap_s - sim::cost::host::ASYNC_GAP_S).abs() < 1e-12);
        let opted = host(&["engine=vllm@0.12.0", "serving.async_scheduling=true"]);
        assert_eq!(opted.overlap, 1.0);
        // Same per-request work either way: only its overlap differs.
        assert_eq!(old.per_request_s, new.per_request_s);

        let sets = ["engine=vllm@0.15.0".to_string()];
        let mut r = resolve(&RunRequest::of("h100-gpt-oss-120b-chat", &sets).unwrap()).unwrap();
        let step = |r: &Resolved| {
            use sim::cost::{CostModel, Phase, ReqSlice, StepShape};
            let (_, decode) = r.pool_costs(&r.params);
            let dep = r.scenario().serving.decode.layout().dep as usize;
            let ranks = vec![
                vec![ReqSlice {
                    count: 64,
                    ..ReqSlice::one(1, 2048)
                }];
                dep
            ];
            let shape = StepShape {
                phase: Phase::Decode,
                ranks: &ranks,
                decode_ranks: &[],
                draft_tokens: 0,
            };
            decode.step(&shape).step_s
        };
        let ahead = step(&r);
        r.change(|sc, _| sc.serving.async_scheduling = Some(false))
            .unwrap();
        let behind = step(&r);
        // 0.3 ms fixed + 64 x 21 us exposed instead of the 0.25 ms gap.
        let want =
            300e-6 + 64.0 * sim::cost::host::VLLM_PER_REQUEST_S - sim::cost::host::ASYNC_GAP_S;
        assert!((behind - ahead - want).abs() < 1e-9, "{ahead} {behind}");
    }

    /// A request's problems are located: the scenario's in its file, the workload's in
    /// the workload's, every one at once.
    #[test]
    fn resolving_names_each_problem_with_its_file() {
        let sets = [
            "fidelity.cohort=0".to_string(),
            "workload.closed_loop.concurrency=0".to_string(),
        ];
        let e = resolve(&RunRequest::of("h100-gpt-oss-120b-chat", &sets).unwrap())
            .err()
            .expect("refused")
            .to_string();
        assert!(e.starts_with("invalid scenario:\n"), "{e}");
        assert!(
            e.contains("scenarios/h100-gpt-oss-120b-chat.toml (embedded): fidelity.cohort"),
            "{e}"
        );
        assert!(
            e.contains("(embedded): closed_loop.concurrency: must be >= 1"),
            "{e}"
        );
    }
}
