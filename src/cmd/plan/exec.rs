//! The plan's run: resolve the inputs, screen every candidate, simulate the ones the
//! screen ranks best (in parallel), keep one record per candidate (in memory, or
//! appended to a shard's JSONL file), then select and print.

use super::{hardware_named, load_space, parse_objective, parse_rate, parse_shard, parse_slos};
use super::{OutputArgs, PlanArgs};
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rayon::prelude::*;
use scenario::resolve_tco;
use scenario::{
    read_trace_within, resolve, step_prices, Overrides, Resolved, RunRequest, TraceSource,
};
use sim::cost::AnalyticCostModel;
use sim::plan::select::ShardFile;
use sim::plan::{
    enumerate, screen, AnalyticPricer, Candidate, Estimate, Header, Metrics, PoolPricing, Reason,
    Record, ScreenInputs, SearchSpace, SeedSpread, Sizing, Slo, Status, WorkShape,
};
use sim::serving::{
    simulate, Checked, Mode, Report, SimError, SimInput, TraceRecord, WorkloadConfig,
};
use sim::tco::{blended, finance, Finance, Tco};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Write};
use std::sync::Mutex;

/// Everything a candidate's simulation needs, resolved once.
struct PlanInputs {
    base: Resolved,
    trace: Vec<TraceRecord>,
    pricing: BTreeMap<String, PoolPricing>,
    tco: Tco,
}

/// The run the plan's candidates vary: its scenario, seed, duration, overrides,
/// pricing and trace.
fn run_request(args: &PlanArgs) -> Result<RunRequest> {
    Ok(RunRequest {
        scenario: args.scenario.clone(),
        seed: args.seed,
        duration: args.duration,
        sets: Overrides::with_cohort(args.cohort, &args.set)?,
        pricing: args.pricing.pricing(),
        trace: args.trace.as_ref().map(|path| TraceSource {
            path: path.clone(),
            format: None,
        }),
        bench: None,
    })
}

/// `wl` at `scale` times its nominal load, at constant rate (the plan simulates the
/// curve's peak).
pub fn scaled_workload(wl: &WorkloadConfig, scale: f64) -> WorkloadConfig {
    let mut w = wl.clone();
    w.rate_curve = None;
    let count = |n: u32| ((n as f64 * scale).round().max(1.0)).min(u32::MAX as f64) as u32;
    if let Some(o) = &mut w.open_loop {
        o.rate_per_s *= scale;
    }
    if let Some(c) = &mut w.closed_loop {
        c.concurrency = count(c.concurrency);
    }
    if let Some(a) = &mut w.agentx {
        a.sessions = count(a.sessions);
    }
    if let Some(t) = &mut w.trace {
        t.time_scale /= scale.max(1e-9);
    }
    w
}

/// Runs of a closed-loop workload (sessions or users) a target rate may take: the
/// screen's session count is corrected by the simulated rate's shortfall.
const RATE_RUNS: usize = 3;

/// A simulated candidate: the candidate as run, the first seed's report, the finance
/// and figures (means over the seeds), and their spread (several seeds).
struct Run {
    candidate: Candidate,
    report: Report,
    finance: Finance,
    metrics: Metrics,
    spread: Option<SeedSpread>,
}

/// Simulates candidate `c` under `seeds` seeds. For a target rate with a closed-loop
/// workload, the users the screen estimated are rescaled by target / simulated rate
/// until the run carries the target (within the selection's 5%) or `RATE_RUNS` runs
/// are spent.
fn simulate_candidate(cx: &PlanInputs, c: &Candidate, sizing: Sizing, seeds: u32) -> Result<Run> {
    let closed = cx.base.workload().open_loop.is_none() && cx.base.workload().trace.is_none();
    let mut c = c.clone();
    for attempt in 1..=RATE_RUNS {
        let run = simulate_seeds(cx, &c, seeds)?;
        let m = &run.metrics;
        let target = match sizing {
            Sizing::Gpus(_) => None,
            Sizing::RequestsPerS(r) => Some((r, m.requests_per_s)),
            Sizing::TokensPerS(t) => Some((t, m.tok_s_per_gpu * m.gpus as f64)),
        };
        match target {
            Some((want, got))
                if closed
                    && attempt < RATE_RUNS
                    && got > 0.0
                    && got < sim::plan::select::RATE_MET_FRACTION * want =>
            {
                c.load_scale *= (want / got).min(4.0);
            }
            _ => return Ok(run),
        }
    }
    unreachable!("the last attempt returns")
}

/// Candidate `c` under `seeds` seeds from the plan's: the means of their figures.
fn simulate_seeds(cx: &PlanInputs, c: &Candidate, seeds: u32) -> Result<Run> {
    let base = cx.base.seed;
    let mut reports = Vec::with_capacity(seeds as usize);
    for i in 0..seeds.max(1) as u64 {
        reports.push(simulate_once(cx, c, base.wrapping_add(i))?);
    }
    let n = reports.len() as f64;
    let mean = |f: fn(&Report) -> f64| reports.iter().map(f).sum::<f64>() / n;
    let throughput = sim::serving::Throughput {
        total: mean(|r| r.throughput_tok_s_per_gpu.total),
        cached_input: mean(|r| r.throughput_tok_s_per_gpu.cached_input),
        uncached_input: mean(|r| r.throughput_tok_s_per_gpu.uncached_input),
        output: mean(|r| r.throughput_tok_s_per_gpu.output),
    };
    let finance = candidate_finance(cx, c, &throughput);
    // Each seed's figures; the money is the mean throughput's (for one seed, its own).
    let per_seed: Vec<Metrics> = reports.iter().map(|r| Metrics::of(r, &finance)).collect();
    let metrics = Metrics::mean(&per_seed, &finance);
    Ok(Run {
        candidate: c.clone(),
        report: reports.swap_remove(0),
        finance,
        metrics,
        spread: (seeds > 1).then(|| Metrics::ci95(&per_seed)),
    })
}

/// One simulation of candidate `c` under `seed`.
fn simulate_once(cx: &PlanInputs, c: &Candidate, seed: u64) -> Result<Report> {
    let r = &cx.base;
    let sc = c.apply(r.scenario());
    let wl = scaled_workload(r.workload(), c.load_scale);
    let model_of = |pool: &sim::serving::PoolConfig, hw: &str| -> Result<AnalyticCostModel> {
        let p = cx
            .pricing
            .get(hw)
            .ok_or_else(|| anyhow!("unknown hardware {hw}"))?;
        Ok(AnalyticCostModel::new(
            p.hardware.clone(),
            r.model.clone(),
            pool.layout(),
            p.params.clone(),
        ))
    };
    let prefill_hw = c
        .prefill
        .as_ref()
        .map_or(c.decode.hardware.as_str(), |p| p.hardware.as_str());
    let prefill_cost = model_of(&sc.serving.prefill, prefill_hw)?;
    let decode_cost = model_of(&sc.serving.decode, &c.decode.hardware)?;
    let run = Checked::new(sc, wl).map_err(|e| anyhow!("{}", SimError::from(e)))?;
    let input = SimInput {
        run: &run,
        hardware: &cx.pricing[&c.decode.hardware].hardware,
        model: &r.model,
        prefill_cost: &prefill_cost,
        decode_cost: &decode_cost,
        trace: &cx.trace,
    };
    simulate(&input, seed).map_err(|e| anyhow!("{e}"))
}

/// The money of a candidate's throughput: each pool's GPUs at their hardware's TCO.
fn candidate_finance(cx: &PlanInputs, c: &Candidate, t: &sim::serving::Throughput) -> Finance {
    let pools: Vec<(u64, sim::tco::GpuHourCost)> = [c.prefill.as_ref(), Some(&c.decode)]
        .into_iter()
        .flatten()
        .map(|p| (p.gpus(), cx.pricing[&p.hardware].gpu_hour))
        .collect();
    let prices = cx
        .base
        .scenario()
        .price
        .token_prices()
        .unwrap_or(sim::serving::TokenPrices::ZERO);
    finance(&cx.tco.name, blended(&pools), &prices, t)
}

/// The grid: its header and every candidate screened.
struct Grid {
    header: Header,
    screened: Vec<(Candidate, Estimate, Vec<Reason>)>,
}

/// The resolved base scenario, checked to be one the plan plans, and its trace.
fn resolve_base(req: &RunRequest) -> Result<(Resolved, Vec<TraceRecord>)> {
    let base = resolve(req)?;
    if !matches!(
        base.scenario().serving.mode,
        Mode::Disaggregated | Mode::Aggregated
    ) {
        bail!(
            "{}: twin plan plans disaggregated and aggregated serving, not serving.mode = \"{}\"",
            base.scenario_origin,
            base.scenario().serving.mode.name()
        );
    }
    let (trace, notes) =
        read_trace_within(req.trace.as_ref(), base.workload(), &base.scenario().limits)?;
    for n in &notes {
        eprintln!("note: {n}");
    }
    Ok((base, trace))
}

/// What the plan sizes for: `--target-rate`, else `--gpus`, else the scenario's GPU
/// budget (`serving.gpus`, else its deployment's GPUs).
fn sizing_of(args: &PlanArgs, base: &Resolved) -> Result<Sizing> {
    Ok(match (&args.target_rate, args.gpus) {
        (Some(r), _) => parse_rate(r)?,
        (None, Some(0)) => bail!("--gpus must be >= 1"),
        (None, Some(n)) => Sizing::Gpus(n),
        // The scenario's budget (`serving.gpus`), else the GPUs its deployment uses.
        (None, None) => Sizing::Gpus(
            base.scenario()
                .serving
                .gpus
                .unwrap_or_else(|| base.scenario().gpus()),
        ),
    })
}

/// Cost parameters of every hardware the space names, each priced by the TCO.
fn pricing_of(
    req: &RunRequest,
    base: &Resolved,
    space: &SearchSpace,
    tco: &Tco,
) -> Result<BTreeMap<String, PoolPricing>> {
    let names: BTreeSet<&String> = space
        .prefill_hardware
        .iter()
        .chain(&space.decode_hardware)
        .collect();
    let mut pricing = BTreeMap::new();
    for name in names {
        let hardware = hardware_named(name, base)?;
        let params = if *name == base.scenario().hardware {
            base.params.clone()
        } else {
            let (model, sc) = (&base.model, &base.scenario());
            step_prices(&hardware, model, sc, &req.pricing, &req.sets.cost)?
        };
        let gpu_hour = tco.gpu_hour(&hardware).map_err(|e| anyhow!("{e}"))?;
        pricing.insert(
            name.clone(),
            PoolPricing {
                hardware,
                params,
                gpu_hour,
            },
        );
    }
    Ok(pricing)
}

fn build(args: &PlanArgs) -> Result<(PlanInputs, Grid)> {
    let req = run_request(args)?;
    let (base, trace) = resolve_base(&req)?;
    if !(1..=64).contains(&args.seeds) {
        bail!("--seeds {}: give 1 to 64 runs per candidate", args.seeds);
    }
    let slo = parse_slos(&args.slo)?;
    let objective = parse_objective(&args.objective)?;
    let sizing = sizing_of(args, &base)?;
    let model_mtp = base.model.mtp.as_ref().map(|m| m.draft_tokens);
    let space = load_space(args.space.as_deref(), base.model.moe.is_none())?
        .resolved(base.scenario(), model_mtp);
    check_budget(sizing, &space)?;
    let tco = resolve_tco(
        args.tco.as_deref(),
        &req.sets.tco,
        base.scenario().price.basis,
    )?;
    let pricing = pricing_of(&req, &base, &space, &tco)?;
    let load_scale = load_scale_of(&base, sizing);
    let candidates = enumerate(&space, sizing, load_scale)?;
    let shape = WorkShape::of(base.workload(), &trace, base.scenario().kv_block_tokens());
    let acceptance = mtp_acceptance(&base);
    let pricer = AnalyticPricer {
        model: &base.model,
        pricing: pricing.clone(),
        overlap: base.scenario().serving.decode.overlap_microbatches,
        decode_pipeline: base.scenario().serving.decode.decode_pipeline,
    };
    // A target rate is the peak's: the candidates are sized for it.
    let inputs = ScreenInputs {
        pricer: &pricer,
        shape,
        slo,
        sizing,
        space: &space,
        mtp_acceptance: &acceptance,
    };
    let screened: Vec<(Candidate, Estimate, Vec<Reason>)> =
        candidates.par_iter().map(|c| screen(c, &inputs)).collect();
    let ranking = sim::plan::Ranking {
        objective,
        fixed_load: fixed_load(base.workload(), sizing),
    };
    let to_simulate = sim::plan::to_simulate(
        &screened,
        ranking,
        space.max_simulations as usize,
        space.target_utilisation,
    );
    let run = RunChoice {
        seeds: args.seeds,
        sizing,
        slo,
        ranking,
        runs_bands: runs_bands_of(&req, &base, &space)?,
    };
    let header = header_of(&base, &tco, run, space, &screened, to_simulate);
    Ok((
        PlanInputs {
            base,
            trace,
            pricing,
            tco,
        },
        Grid { header, screened },
    ))
}

/// Refuses a GPU budget larger than the search space's `max_gpus`.
fn check_budget(sizing: Sizing, space: &SearchSpace) -> Result<()> {
    if let Sizing::Gpus(n) = sizing {
        if n > space.max_gpus {
            bail!(
                "a budget of {n} GPUs exceeds the search space's max_gpus = {} (raise it in a --space file)",
                space.max_gpus
            );
        }
    }
    Ok(())
}

/// How much the candidates' load is scaled: by the rate curve's peak for a GPU budget,
/// else not at all.
fn load_scale_of(base: &Resolved, sizing: Sizing) -> f64 {
    let curve = base.workload().rate_curve.clone();
    let peak = curve.as_ref().map_or(1.0, |c| c.peak());
    match sizing {
        Sizing::Gpus(_) => peak,
        _ => 1.0,
    }
}

/// What the plan was asked for: seeds per candidate, sizing, SLOs and ranking.
struct RunChoice {
    seeds: u32,
    sizing: Sizing,
    slo: Slo,
    ranking: sim::plan::Ranking,
    /// The measured-runs band on each GPU of the space ([`runs_bands_of`]).
    runs_bands: BTreeMap<String, scenario::runs_profile::RunsBand>,
}

/// Whether the load arrives at a fixed rate into a GPU budget (an open loop or a
/// trace's arrival times): then every candidate carrying it on as many GPUs has the
/// same tokens per GPU, and latency breaks the ties.
fn fixed_load(wl: &WorkloadConfig, sizing: Sizing) -> bool {
    matches!(sizing, Sizing::Gpus(_)) && (wl.open_loop.is_some() || wl.trace.is_some())
}

/// The measured-runs band of the scenario's engine on each GPU of the space that has
/// one (by hardware name).
fn runs_bands_of(
    req: &RunRequest,
    base: &Resolved,
    space: &SearchSpace,
) -> Result<BTreeMap<String, scenario::runs_profile::RunsBand>> {
    let mut bands = BTreeMap::new();
    for name in space.prefill_hardware.iter().chain(&space.decode_hardware) {
        if let Some(b) =
            scenario::runs_band_on(base.scenario(), &req.pricing, name, &base.model.name)?
        {
            bands.insert(name.clone(), b);
        }
    }
    Ok(bands)
}

/// The grid's header: what was planned, on what, and its grid hash.
fn header_of(
    base: &Resolved,
    tco: &Tco,
    run: RunChoice,
    space: SearchSpace,
    screened: &[(Candidate, Estimate, Vec<Reason>)],
    to_simulate: Vec<usize>,
) -> Header {
    let curve = base.workload().rate_curve.as_ref();
    let mut header = Header {
        grid: String::new(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        scenario: base.scenario_origin.clone(),
        model: base.model.name.clone(),
        moe: base.model.moe.is_some(),
        workload: base.workload().name.clone(),
        seed: base.seed,
        seeds: run.seeds,
        cohort: base.scenario().fidelity.cohort,
        duration_s: base.scenario().duration_s,
        warmup_s: base.scenario().warmup_s,
        sizing: run.sizing,
        slo: run.slo,
        objective: run.ranking.objective,
        tco: tco.name.clone(),
        price_sheet: base.scenario().price.sheet.key().to_string(),
        token_prices: base
            .scenario()
            .price
            .token_prices()
            .unwrap_or(sim::serving::TokenPrices::ZERO),
        space,
        candidates: screened.len(),
        to_simulate,
        curve_hourly: curve.map(|c| c.hourly()),
        curve_peak: curve.map_or(1.0, |c| c.peak()),
        fixed_load: run.ranking.fixed_load,
        runs_bands: run.runs_bands,
    };
    header.grid = header.compute_grid();
    header
}

/// The MTP acceptance rates in force (scenario's, else the model's).
fn mtp_acceptance(r: &Resolved) -> Vec<f64> {
    r.scenario()
        .serving
        .mtp
        .acceptance
        .clone()
        .or(r.model.mtp.as_ref().map(|m| m.acceptance.clone()))
        .unwrap_or_default()
}

/// A shard's JSONL file: its header line, then one record per line.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line {
    Header(Box<Header>),
    Record(Box<Record>),
}

/// A run killed while appending leaves a last line without its newline: that partial
/// record is cut off (its candidate is evaluated again); complete lines are kept.
fn drop_partial_line(path: &str) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {path}"))?;
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        return Ok(());
    }
    let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("cannot open {path}"))?;
    f.set_len(keep as u64)
        .with_context(|| format!("cannot cut the partial last line of {path}"))?;
    eprintln!(
        "plan: {path} ended in a partial line ({} bytes, an interrupted run): cut off, that candidate is evaluated again",
        bytes.len() - keep
    );
    Ok(())
}

/// Reads a shard file: its header and records.
fn read_jsonl(path: &str) -> Result<(Option<Header>, Vec<Record>)> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {path}"))?;
    let mut header = None;
    let mut records = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{path}: line {}", n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(&line)
            .with_context(|| format!("{path}: line {}: not a twin plan record", n + 1))?
        {
            Line::Header(h) if header.is_none() => header = Some(*h),
            Line::Header(_) => bail!("{path}: line {}: a second header", n + 1),
            Line::Record(r) => records.push(*r),
        }
    }
    Ok((header, records))
}

/// `twin plan`: one run, or one shard of it.
pub fn plan(args: &PlanArgs) -> Result<()> {
    let (shard, shards) = match &args.shard {
        Some(s) => parse_shard(s)?,
        None => (0, 1),
    };
    if shards > 1 && args.out.is_none() {
        bail!("--shard needs --out FILE.jsonl: the shard's records are merged later (twin plan merge)");
    }
    let (cx, grid) = build(args)?;
    let h = &grid.header;
    // Records already in --out (a resumed run), by key.
    let (done, writer) = match &args.out {
        Some(out) => {
            let (done, f) = open_out(out, h)?;
            (done, Some(Mutex::new(f)))
        }
        None => (BTreeMap::new(), None),
    };
    let mine: Vec<usize> = (0..grid.screened.len())
        .filter(|i| i % shards == shard)
        .collect();
    let to_sim: BTreeSet<usize> = h.to_simulate.iter().copied().collect();
    let n_sim = mine.iter().filter(|i| to_sim.contains(i)).count();
    let pb = progress_bar(n_sim)?;
    let emit = |r: &Record| -> Result<()> {
        if let Some(w) = &writer {
            let mut f = w.lock().map_err(|_| anyhow!("output lock poisoned"))?;
            writeln!(
                f,
                "{}",
                serde_json::to_string(&Line::Record(Box::new(r.clone())))?
            )?;
            f.flush()?;
        }
        Ok(())
    };
    let records: Vec<Result<Record>> = mine
        .par_iter()
        .map(|&i| {
            if let Some(r) = done.get(&grid.screened[i].0.key()).filter(|r| r.index == i) {
                return Ok(r.clone());
            }
            let rec = evaluate(&cx, &grid, i, to_sim.contains(&i).then_some(&pb));
            emit(&rec)?;
            Ok(rec)
        })
        .collect();
    pb.finish_and_clear();
    let records: Vec<Record> = records.into_iter().collect::<Result<_>>()?;
    if shards > 1 {
        let simulated = records
            .iter()
            .filter(|r| r.status == Status::Simulated)
            .count();
        eprintln!(
            "plan: shard {shard}/{shards} of grid {}: {} of {} candidates, {simulated} simulated, in {}; merge the shards with `twin plan merge`",
            h.grid,
            records.len(),
            h.candidates,
            args.out.as_deref().unwrap_or("")
        );
        return Ok(());
    }
    // The unsharded answer goes through the same JSON as a merge.
    let header = grid.header.clone();
    answer_via_json(header, &records, &args.output)
}

/// The progress bar of the candidates this run simulates, drawn on stderr.
fn progress_bar(n_sim: usize) -> Result<ProgressBar> {
    let pb = ProgressBar::with_draw_target(Some(n_sim as u64), ProgressDrawTarget::stderr());
    pb.set_style(
        ProgressStyle::with_template("plan: simulating {pos}/{len} [{bar:30}] {elapsed} {msg}")?
            .progress_chars("=> "),
    );
    Ok(pb)
}

/// Prints the answer from the records written to JSON and read back, as a merge reads them.
fn answer_via_json(header: Header, records: &[Record], output: &OutputArgs) -> Result<()> {
    let lines: Vec<String> = records
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<_, _>>()?;
    let records: Vec<Record> = lines
        .iter()
        .map(|l| serde_json::from_str(l))
        .collect::<Result<_, _>>()?;
    super::print::answer(header, records, output)
}

/// Opens `--out` for appending: the records it already holds for this grid (a resumed
/// run), by key, and the file, its header line written when it is new.
fn open_out(out: &str, h: &Header) -> Result<(BTreeMap<String, Record>, std::fs::File)> {
    let mut done = BTreeMap::new();
    if std::path::Path::new(out).exists() {
        drop_partial_line(out)?;
        let (fh, recs) = read_jsonl(out)?;
        match fh {
            Some(fh) if fh != *h => bail!(
                "{out} holds records of another grid ({}; this run is {}): use another --out file",
                fh.grid,
                h.grid
            ),
            _ => {}
        }
        for r in recs {
            done.insert(r.key.clone(), r);
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .with_context(|| format!("cannot open {out} for appending"))?;
    if std::fs::metadata(out)?.len() == 0 {
        writeln!(
            f,
            "{}",
            serde_json::to_string(&Line::Header(Box::new(h.clone())))?
        )?;
    }
    Ok((done, f))
}

/// The record of candidate `i`: its screen's verdict, and its simulation when it is
/// one to simulate (`progress` is then the bar it advances).
fn evaluate(cx: &PlanInputs, grid: &Grid, i: usize, progress: Option<&ProgressBar>) -> Record {
    let h = &grid.header;
    let (cand, est, reasons) = &grid.screened[i];
    let mut rec = Record {
        grid: h.grid.clone(),
        index: i,
        key: cand.key(),
        candidate: cand.clone(),
        estimate: *est,
        status: Status::RejectedByScreen,
        reasons: reasons.clone(),
        spread: None,
        metrics: None,
        finance: None,
        report: None,
    };
    if reasons.is_empty() {
        rec.status = Status::RankedOut;
    }
    let Some(pb) = progress else {
        return rec;
    };
    pb.set_message(cand.label());
    match simulate_candidate(cx, cand, h.sizing, h.seeds) {
        Ok(run) => {
            rec.candidate = run.candidate;
            rec.status = Status::Simulated;
            rec.metrics = Some(run.metrics);
            rec.spread = run.spread;
            rec.finance = Some(run.finance);
            rec.report = Some(run.report);
        }
        Err(e) => {
            rec.status = Status::SimulationFailed;
            rec.reasons = vec![Reason::new("simulation", format!("{e:#}"))];
        }
    }
    pb.inc(1);
    rec
}

/// `twin plan merge FILES...`.
pub fn merge_files(files: &[String], output: &OutputArgs) -> Result<()> {
    let mut shards = Vec::new();
    for f in files {
        let (header, records) = read_jsonl(f)?;
        let header =
            header.ok_or_else(|| anyhow!("{f}: no header line (not a twin plan --out file)"))?;
        shards.push(ShardFile {
            name: f.clone(),
            header,
            records,
        });
    }
    let (header, records) = sim::plan::merge(shards)?;
    super::print::answer(header, records, output)
}
