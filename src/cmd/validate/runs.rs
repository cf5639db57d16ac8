//! `twin validate live DIR --profile PROFILE` and `twin validate bench FILE.json`: a
//! measured serving run against twin's prediction of it.
//!
//! Live: the run's records are read back; the profile (a calibration of the same
//! device by `twin calibrate --plan live`, measured independently of the run) prices
//! every op of the run's model through the simulator's fitted cost model; each live
//! step's exact batch is re-priced (step-time error), and the run's scenario is
//! simulated with the same seed, arrivals and duration (throughput, latencies,
//! goodput). Nothing is fitted to the run.

use super::bench_steps::StepsBeside;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use live::compare::{compare, price_step, Comparison};
use live::records::{RunDir, RunInfo};
use sim::cost::fitted::{FittedCostModel, LiveModelExt};
use sim::cost::CostModel;
use sim::serving::{
    read_mooncake, simulate_with, Checked, Control, Mode, Record, SimInput, TraceRecord,
};
use spec::live_model::LiveModel;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Args)]
pub struct LiveValidateArgs {
    /// Run directory written by `twin live --out DIR`.
    pub dir: PathBuf,
    /// Calibration profile of the same device (`twin calibrate --plan live`).
    #[arg(long)]
    pub profile: PathBuf,
    /// Mooncake JSONL trace the run replayed (trace workloads only).
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write every step of the simulated run as CSV (pool, group, start_s, step_s,
    /// prefill_tokens, prefill_chunks, prompts_done, decode_requests), to set beside the run's own
    /// `steps.jsonl`.
    #[arg(long, value_name = "FILE.csv")]
    pub steps_out: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct BenchValidateArgs {
    /// vLLM `bench serve` result saved with `--save-result --save-detailed`.
    pub file: PathBuf,
    /// The deployment the benchmark ran on (scenario name or path): its hardware,
    /// model and serving configuration.
    #[arg(long)]
    pub scenario: String,
    #[command(flatten)]
    pub pricing: scenario::flags::PricingArgs,
    /// Override any field of the scenario, as in `twin simulate`.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Compare even when the file's `model_id` does not name the scenario's model.
    #[arg(long)]
    pub allow_model_mismatch: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Write every predicted step as CSV (pool, group, start_s, step_s,
    /// prefill_tokens, prefill_chunks, prompts_done, decode_requests), to set beside the engine's
    /// own step log.
    #[arg(long, value_name = "FILE.csv")]
    pub steps_out: Option<PathBuf>,
    /// A result file of a run the same server served before this one without
    /// flushing its prefix cache (repeat, in any order): the prompts it sent that
    /// this run's prompts begin with are held. SGLang `random` runs of one server
    /// only (checked by `server_info.random_seed`); the client's `--seed` must have
    /// been the same.
    #[arg(long, value_name = "EARLIER")]
    pub after: Vec<PathBuf>,
    /// Another run of the same deployment, saved with `--save-detailed`: the front end
    /// its token times allow (the middle of the range `validate bench` prints for it)
    /// prices this run's (`serving.frontend_s`). A calibration from the deployment's
    /// own runs, said in a note.
    #[arg(long, value_name = "OTHER")]
    pub front_end_from: Option<PathBuf>,
}

/// The fitted cost model of one pool of the run.
fn pool_model(
    lm: &LiveModel,
    pool: &sim::serving::PoolConfig,
    drafts: u32,
    profile: &calibration::Profile,
    profile_path: &str,
    device: &str,
) -> Result<FittedCostModel> {
    let coefs = calibration::live::coefficients(&profile.live);
    FittedCostModel::new(
        lm.clone(),
        pool.layout(),
        drafts,
        coefs,
        pool.kv_capacity_tokens_per_rank.unwrap_or(1),
        format!("fitted live-engine ops: {}", profile.source()),
    )
    .map(|m| m.with_wake(profile.wake.map(|w| w.wake())))
    .map_err(|missing| {
        anyhow!(
            "--profile {profile_path}: lacks {} op(s) the run needs:\n  {}\nmeasure them with `twin calibrate --device {device} --plan live --model {} --out DIR`",
            missing.len(),
            missing.join("\n  "),
            lm.name
        )
    })
}

pub fn run_live(a: &LiveValidateArgs) -> Result<()> {
    let run = RunDir::load(&a.dir)?;
    let info = &run.info;
    let ppath = a.profile.display().to_string();
    let profile = load_profile(&a.profile, &ppath, info)?;
    let costs = RunCosts::of(a, info, &profile, &ppath)?;
    let predicted = price_live_steps(&run, &costs);
    let hw = simulated_hardware(info, &profile);
    let trace = run_trace(info, a.trace.as_deref())?;
    // The simulation draws the MTP acceptances the engine drew.
    let scenario = live::run::as_served(&info.scenario);
    let served = Checked::new(scenario, info.workload.clone())
        .map_err(|e| anyhow!("simulating the run: {}", sim::serving::SimError::from(e)))?;
    let input = SimInput {
        run: &served,
        hardware: &hw,
        model: &info.model,
        prefill_cost: costs.prefill.as_ref().unwrap_or(&costs.decode),
        decode_cost: &costs.decode,
        trace: &trace,
    };
    let (report, sim_steps) = simulate_with(&input, info.seed, &Control::default(), Record::STEPS)
        .map(|o| (o.report, o.steps))
        .map_err(|e| anyhow!("simulating the run: {e}"))?;
    if let Some(path) = &a.steps_out {
        crate::simulation::write_csv(path, &sim_steps)?;
    }
    let c: Comparison = compare(
        &run,
        &predicted,
        &live::metrics::sim_figures(&report),
        &sim_steps,
    );
    let problems: Vec<String> = run.problems().iter().map(ToString::to_string).collect();
    if a.json {
        let mut v = serde_json::to_value(&c)?;
        v["run"] = serde_json::json!({
            "dir": a.dir.display().to_string(), "scenario": info.scenario_origin, "device": info.device_name,
            "seed": info.seed, "duration_s": info.duration_s, "warmup_s": info.warmup_s,
            "load_start": info.load_start, "load_end": info.load_end, "record_problems": problems,
        });
        v["profile"] = serde_json::json!({"path": ppath, "source": profile.source()});
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "twin {} validate live: {} ({} on {}, seed {}, {:.0} s with {:.0} s warm-up; load {} -> {})",
            env!("CARGO_PKG_VERSION"),
            a.dir.display(),
            info.scenario_origin,
            info.device_name,
            info.seed,
            info.duration_s,
            info.warmup_s,
            info.load_start,
            info.load_end
        );
        println!(
            "predicted by: {} (profile {ppath})",
            costs.decode.describe()
        );
        println!();
        print!("{}", c.render());
        for p in &problems {
            println!("record problem: {p}");
        }
    }
    Ok(())
}

/// The profile at `path` (`ppath` as the user wrote it), refused unless it
/// calibrated the device the run ran on.
fn load_profile(path: &Path, ppath: &str, info: &RunInfo) -> Result<calibration::Profile> {
    let profile = calibration::Profile::load(path).with_context(|| format!("--profile {ppath}"))?;
    if profile.provenance.device != info.device_name {
        bail!(
            "--profile {ppath} is a calibration of another device: it measured {:?}, the run ran on {:?}; calibrate this device with `twin calibrate --device {} --plan live --model {}`",
            profile.provenance.device,
            info.device_name,
            info.device,
            info.model.name
        );
    }
    Ok(profile)
}

/// The fitted cost models of the run's pools (no prefill pool when aggregated).
struct RunCosts {
    decode: FittedCostModel,
    prefill: Option<FittedCostModel>,
    /// The run's prefill groups: the first groups of its step records.
    prefill_groups: usize,
}

impl RunCosts {
    fn of(
        a: &LiveValidateArgs,
        info: &RunInfo,
        profile: &calibration::Profile,
        ppath: &str,
    ) -> Result<RunCosts> {
        let lm = LiveModel::from_model(&info.model, info.page_tokens).map_err(|e| {
            anyhow!(
                "{}: model {}: {}",
                a.dir.display(),
                info.model.name,
                e.join("; ")
            )
        })?;
        let serving = &info.scenario.serving;
        let drafts = info.draft_tokens as u32;
        let decode = pool_model(&lm, &serving.decode, drafts, profile, ppath, &info.device)?;
        let (prefill, prefill_groups) = match serving.mode {
            Mode::Aggregated => (None, 0),
            _ => (
                Some(pool_model(
                    &lm,
                    &serving.prefill,
                    drafts,
                    profile,
                    ppath,
                    &info.device,
                )?),
                serving.prefill.instances as usize,
            ),
        };
        Ok(RunCosts {
            decode,
            prefill,
            prefill_groups,
        })
    }
}

/// Every live step's exact batch, priced, with the device's wake-up after the time
/// its group idled before it.
fn price_live_steps(run: &RunDir, costs: &RunCosts) -> Vec<f64> {
    let mut last_end: std::collections::HashMap<usize, f64> = Default::default();
    run.steps
        .iter()
        .map(|s| {
            let m: &dyn CostModel = match (&costs.prefill, s.group < costs.prefill_groups) {
                (Some(p), true) => p,
                _ => &costs.decode,
            };
            let idle_s = s.start_s - last_end.insert(s.group, s.end_s).unwrap_or(0.0);
            price_step(m, s) + m.wake_s(idle_s.max(0.0))
        })
        .collect()
}

/// The hardware the run's simulation uses: the KV hand-over link at the profile's
/// measured device-local copy bandwidth (when it has one), not the run's.
fn simulated_hardware(info: &RunInfo, profile: &calibration::Profile) -> spec::hardware::Hardware {
    let mut hw = info.hardware.clone();
    if let Some(bw) = profile
        .ops
        .get("copy")
        .and_then(|c| c.param("bandwidth_bytes_per_s"))
        .filter(|b| b.is_finite())
    {
        hw.nvlink.bytes_per_s = bw;
        hw.scaleout.bytes_per_s = bw;
    }
    hw
}

/// The trace the run replayed, read from `--trace` (which a trace run needs).
fn run_trace(info: &RunInfo, trace: Option<&Path>) -> Result<Vec<TraceRecord>> {
    Ok(match (trace, info.trace_records) {
        (Some(p), _) => {
            let f = std::fs::File::open(p)
                .with_context(|| format!("cannot open trace {}", p.display()))?;
            read_mooncake(std::io::BufReader::new(f), &info.scenario.limits)
                .with_context(|| format!("trace {}", p.display()))?
                .records
        }
        (None, 0) => Vec::new(),
        (None, n) => bail!("the run replayed a trace of {n} records: pass it with --trace PATH"),
    })
}

/// Whether the file benchmarked the model the scenario prices: an error when it did
/// not (unless `--allow-model-mismatch`), else a note when it cannot be told or was
/// allowed.
fn model_check(
    bench: &live::bench::Bench,
    r: &scenario::Resolved,
    a: &BenchValidateArgs,
    origin: &str,
) -> Result<Option<String>> {
    Ok(match bench.names_model(&r.model.name) {
        Some(true) => None,
        Some(false) if !a.allow_model_mismatch => bail!(
            "{origin} benchmarked model `{}` but {} prices model `{}`: give the scenario of that model (`--set model=...`), or --allow-model-mismatch",
            bench.model_id.as_deref().unwrap_or_default(),
            r.scenario_origin,
            r.model.name
        ),
        Some(false) => Some(format!(
            "the file benchmarked model `{}`, the scenario prices `{}` (--allow-model-mismatch)",
            bench.model_id.as_deref().unwrap_or_default(),
            r.model.name
        )),
        None => Some("the file names no model_id: the model is not checked".into()),
    })
}

pub fn run_bench(a: &BenchValidateArgs) -> Result<()> {
    use live::bench::{sim_bench_figures, Bench};
    let origin = a.file.display().to_string();
    let text = read_maybe_gzip(&a.file).with_context(|| format!("cannot read {origin}"))?;
    let bench = match Bench::parse(&text, &origin) {
        Ok(b) => b,
        Err(e) if e.to_string().contains("no per-request data") => {
            return run_bench_summary(a, &text, &origin)
        }
        Err(e) => return Err(e.into()),
    };
    let sglang = (bench.client == sim::serving::workload::bench::Client::Sglang)
        .then(|| bench.server.as_ref().and_then(|s| s.version.clone()));
    let (mut r, priced_as) = super::bench_server::resolve_priced(a, sglang)?;
    let mut notes = bench.notes();
    notes.extend(priced_as);
    notes.extend(model_check(&bench, &r, a, &origin)?);
    let (held, more) = held_after(&bench, &a.after).with_context(|| origin.clone())?;
    notes.extend(more);
    let (workload, more) = bench.workload(held, r.model.prompt_special_tokens);
    notes.extend(more);
    r.change(|sc, wl| {
        super::bench_server::server_settings(&bench, sc, &mut notes);
        *wl = workload;
        // Every request counts, and the run ends with the last (bounded at the limit).
        sc.warmup_s = 0.0;
        sc.duration_s = sc.limits.max_duration_s;
    })?;
    // The run compared is the file's last (a JSON-lines file holds one a line).
    let counted = corpus::clients::read(&text, &origin)
        .ok()
        .and_then(|mut runs| runs.pop())
        .and_then(|run| run.hints.settings.speculative);
    notes.extend(super::bench_server::speculative(counted, &mut r, &origin)?);
    if let Some(other) = &a.front_end_from {
        notes.push(super::bench_steps::front_end_from(other, &mut r)?);
    }
    let (report, finish, longest, steps) = simulate_bench(&r, a)?;
    notes.extend(pause_note(&bench, longest));
    let mut measured = bench.figures();
    (measured.goodput_fraction, measured.goodput_req_s) =
        bench.goodput(r.scenario().slo.ttft_ms, r.scenario().slo.tpot_ms);
    let predicted = sim_bench_figures(&report, finish, &bench.requests);
    let rows = live::compare::figure_rows(&measured, &predicted);
    let compared = BenchCompared {
        rows,
        measured,
        predicted,
        steps: StepsBeside::of(&bench, &steps, &r),
        scheduler: scheduler_of(&report, r.scenario()),
    };
    print_bench(a, &origin, bench.requests.len(), &r, &compared, notes)?;
    Ok(())
}

/// A benchmark run's figures against twin's: the rows printed, both sides, and the
/// server's steps read back from the file beside twin's.
struct BenchCompared {
    rows: Vec<live::compare::FigureRow>,
    measured: live::metrics::Figures,
    predicted: live::metrics::Figures,
    steps: StepsBeside,
    scheduler: String,
}

/// Simulates the resolved benchmark run (writing its steps where asked): the report,
/// the time its last step ends, its longest step, and its steps.
fn simulate_bench(
    r: &scenario::Resolved,
    a: &BenchValidateArgs,
) -> Result<(sim::serving::Report, f64, f64, Vec<sim::serving::SimStep>)> {
    let costs = r.pool_costs(&r.params);
    let input = r.input(&costs, &[]);
    let (report, steps) = simulate_with(&input, r.seed, &Control::default(), Record::STEPS)
        .map(|o| (o.report, o.steps))
        .map_err(|e| anyhow!("{}: {e}", r.scenario_origin))?;
    if let Some(path) = &a.steps_out {
        crate::simulation::write_csv(path, &steps)?;
    }
    let finish = steps
        .iter()
        .map(|s| s.start_s + s.step_s)
        .fold(0.0, f64::max);
    let longest = steps.iter().map(|s| s.step_s).fold(0.0, f64::max);
    Ok((report, finish, longest, steps))
}

/// The scheduler's line of a simulated run: its mixed pool's, which says how busy the
/// API server was where it streams at a cost; else the scenario's.
fn scheduler_of(report: &sim::serving::Report, sc: &sim::serving::ServingScenario) -> String {
    report
        .pools
        .iter()
        .find_map(|p| p.scheduler.clone())
        .unwrap_or_else(|| sc.scheduler_line())
}

/// Prints `validate bench`'s comparison, as JSON or as the table with its notes.
fn print_bench(
    a: &BenchValidateArgs,
    origin: &str,
    requests: usize,
    r: &scenario::Resolved,
    c: &BenchCompared,
    notes: Vec<String>,
) -> Result<()> {
    let rel = live::compare::rel;
    if a.json {
        let v = serde_json::json!({
            "step_mape": c.steps.step_mape(),
            "steps": c.steps.json(),
            "throughput_error": rel(c.predicted.token_throughput, c.measured.token_throughput),
            "ttft_p90_error": rel(c.predicted.ttft_ms.p90, c.measured.ttft_ms.p90),
            "tpot_p90_error": rel(c.predicted.tpot_ms.p90, c.measured.tpot_ms.p90),
            "rows": c.rows,
            "measured": c.measured,
            "predicted": c.predicted,
            "notes": notes,
            "bench": origin,
            "scenario": r.scenario_origin,
            "cost_model": r.params.source,
            "scheduler": c.scheduler,
        });
        let mut v = v;
        if let Some(b) = &r.runs_band {
            let mut band = b.json(c.predicted.ttft_ms.mean, c.predicted.tpot_ms.mean);
            for (key, _, p, m) in band_means(c) {
                band["band"][key]["holds_measured"] = serde_json::json!(b.holds(key, p, m));
            }
            v["runs_band"] = band;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "twin {} validate bench: {origin} ({} requests) against {} ({})",
            env!("CARGO_PKG_VERSION"),
            requests,
            r.scenario_origin,
            r.params.source
        );
        println!("scheduler: {}", c.scheduler);
        print!("{}", live::compare::render_rows(&c.rows));
        print!("{}", c.steps.text());
        if let Some(b) = &r.runs_band {
            println!(
                "{}",
                b.text(c.predicted.ttft_ms.mean, c.predicted.tpot_ms.mean)
            );
            let held: Vec<String> = band_means(c)
                .into_iter()
                .filter_map(|(key, name, p, m)| {
                    let inside = b.holds(key, p, m)?;
                    Some(format!(
                        "{name} {m:.1} ms {}",
                        if inside { "inside" } else { "outside" }
                    ))
                })
                .collect();
            println!("  measured means: {}", held.join(", "));
        }
        for n in notes {
            println!("note: {n}");
        }
    }
    Ok(())
}

/// The metrics a measured-runs band covers: key, name, predicted mean and measured mean.
fn band_means(c: &BenchCompared) -> [(&'static str, &'static str, f64, f64); 2] {
    let [(ttft, t), (tpot, p)] = scenario::runs_profile::RunsBand::METRICS;
    [
        (ttft, t, c.predicted.ttft_ms.mean, c.measured.ttft_ms.mean),
        (tpot, p, c.predicted.tpot_ms.mean, c.measured.tpot_ms.mean),
    ]
}

/// What the server held of each request of `bench` after the runs of `after` (result
/// files, read here) and the client's warm-up, with its notes (`Bench::held`).
fn held_after(bench: &live::bench::Bench, after: &[PathBuf]) -> Result<(Vec<u32>, Vec<String>)> {
    let mut earlier = Vec::with_capacity(after.len());
    for p in after {
        let name = p.display().to_string();
        let text = read_maybe_gzip(p).with_context(|| format!("cannot read {name}"))?;
        earlier.push((name.clone(), live::bench::Bench::parse(&text, &name)?));
    }
    Ok(bench.held(&earlier)?)
}

/// The measured run's pauses, in a note: spells with no token at all from a busy
/// server, longer than twice the longest step twin predicts for the run (so no step
/// of its schedule explains them). `None` when there are none, or the file records no
/// send times.
fn pause_note(bench: &live::bench::Bench, longest_step_s: f64) -> Option<String> {
    let pauses = bench.silences(2.0 * longest_step_s);
    if pauses.is_empty() {
        return None;
    }
    let total: f64 = pauses.iter().map(|p| p.1).sum();
    let each: Vec<String> = pauses
        .iter()
        .map(|(t, d, n)| format!("{d:.2} s from {t:.1} s ({n} requests in flight)"))
        .collect();
    Some(format!(
        "the run sent no token for {}: {total:.1} s of its {:.1} s, each longer than twice twin's longest step ({longest_step_s:.3} s). twin has no such pause of the whole server; the measured duration, and the TTFT and TPOT of the requests it held, include it",
        each.join(", "),
        bench.duration_s
    ))
}

/// A text file, gunzipped when it starts with gzip's magic bytes (`FILE.json.gz`).
pub(super) fn read_maybe_gzip(path: &Path) -> Result<String> {
    use std::io::Read;
    let bytes = std::fs::read(path)?;
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut text = String::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_string(&mut text)
            .context("not a readable gzip file of UTF-8 text")?;
        Ok(text)
    } else {
        String::from_utf8(bytes).context("not UTF-8 text")
    }
}

/// `validate bench` of a summary-only result (the common public form): what the file
/// holds (throughputs; TTFT, TPOT, ITL and E2E at the statistics it lists) against a
/// simulation of the client's run with the file's mean lengths; said what cannot be
/// compared without `--save-detailed`.
fn run_bench_summary(a: &BenchValidateArgs, text: &str, origin: &str) -> Result<()> {
    use measured::predict::{compare, simulate_setup, Center};
    let runs = corpus::clients::read(text, origin)?;
    if runs.len() != 1 {
        bail!("{origin}: {} runs in the file; validate bench compares one (split the file, or `twin runs import` it and `twin validate runs`)", runs.len());
    }
    let run = &runs[0];
    let sglang =
        (run.format == corpus::clients::Format::SglangBench).then(|| run.hints.version.clone());
    let (mut r, priced_as) = super::bench_server::resolve_priced(a, sglang)?;
    let mut notes: Vec<String> = run.notes.iter().cloned().chain(priced_as).collect();
    let mut client = measured::setup::client_of(&run.client, origin, r.seed)
        .map_err(|e| anyhow!("{origin}: {e}"))?;
    client.special_tokens = r.model.prompt_special_tokens;
    r.change(|sc, wl| {
        super::bench_server::summary_settings(&run.hints, sc, &mut notes);
        *wl = sim::serving::WorkloadConfig::bench_run("bench (summary)", client);
        sc.warmup_s = 0.0;
        sc.duration_s = sc.limits.max_duration_s;
    })?;
    notes.extend(super::bench_server::speculative(
        run.hints.settings.speculative,
        &mut r,
        origin,
    )?);
    let setup = measured::setup::Setup {
        pricing: r.params.source.clone(),
        resolved: r,
    };
    let (predicted, report) =
        simulate_setup(&setup).map_err(|e| anyhow!("{}: {e}", setup.resolved.scenario_origin))?;
    let scheduler = scheduler_of(&report, setup.resolved.scenario());
    let rows = compare(&run.measured, &predicted, Center::Mean, &Default::default());
    let missing = "per-request TTFT, TPOT and ITL beyond the percentiles listed, goodput and the server's pauses need the per-request lists (`vllm bench serve --save-result --save-detailed`)";
    if a.json {
        let v = serde_json::json!({
            "bench": origin, "scenario": setup.resolved.scenario_origin, "summary_only": true,
            "rows": rows, "notes": notes, "not_compared": missing,
            "cost_model": setup.resolved.params.source, "scheduler": scheduler,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "twin {} validate bench: {origin} (a summary without per-request lists) against {} ({})",
        env!("CARGO_PKG_VERSION"),
        setup.resolved.scenario_origin,
        setup.resolved.params.source
    );
    println!("scheduler: {scheduler}");
    println!(
        "  {:<32} {:>12} {:>12} {:>8}",
        "figure", "measured", "predicted", "error"
    );
    for c in &rows {
        let name = format!("{} {}", c.metric.key(), c.stat.key());
        println!(
            "  {name:<32} {:>12.2} {:>12.2} {:>+7.1}%",
            c.measured,
            c.predicted,
            100.0 * c.error()
        );
    }
    for n in &notes {
        println!("note: {n}");
    }
    println!("not compared: {missing}");
    Ok(())
}
