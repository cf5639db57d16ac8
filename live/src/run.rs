//! The wall-clock loop of a live run: the workload driver's events fire at their times,
//! the scheduler forms each idle group's next step as soon as the last one ends, the
//! workers run them; at the end every request and step is written to the run
//! directory.

use crate::model::engine_config;
use crate::records::*;
use crate::sched::{KvPolicy, SchedConfig, Scheduler};
use crate::serving_loop::{serve, Serving, Transfers};
use crate::workers::{core_sets, RankSpec, Workers};
use crate::LiveError;
use engine::Device;
use sim::cost::fitted::LiveModelExt;
use sim::serving::{IdleMode, Mode, ServingScenario, TraceRecord, WorkloadConfig};
use spec::live_model::LiveModel;
use std::collections::HashMap;
use std::path::PathBuf;

/// What a live run serves, and how.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    pub device: Device,
    pub scenario_origin: String,
    pub scenario: ServingScenario,
    pub workload: WorkloadConfig,
    pub model: spec::model::Model,
    pub hardware: spec::hardware::Hardware,
    pub trace: Vec<TraceRecord>,
    pub seed: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub policy: KvPolicy,
    /// Cores to spread the ranks over.
    pub cores: usize,
    pub out: PathBuf,
    /// How the ranks and the loop wait when idle (the scenario's `[live] idle`, or
    /// `twin live --idle`).
    pub idle: IdleMode,
    /// Write the op calls of the run's steps to `trace.json.gz` (`crate::trace`).
    pub op_trace: bool,
}

/// Where a run stands (for a progress bar).
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub elapsed_s: f64,
    pub duration_s: f64,
    pub arrived: u64,
    pub completed: u64,
    pub live: u64,
    pub steps: u64,
}

/// What a finished run wrote.
#[derive(Debug, Clone)]
pub struct Summary {
    pub dir: PathBuf,
    pub requests: usize,
    pub completed: usize,
    pub steps: usize,
    pub figures: crate::metrics::Figures,
    /// The op trace written, and how it was sampled.
    pub op_trace: Option<crate::records::OpTraceInfo>,
}

/// KV capacity per rank of the prefill and decode pools and the prefix cache's space:
/// a live run allocates its cache up front, so the scenario must state them.
pub fn kv_sizes(sc: &ServingScenario) -> Result<([u64; 2], u64), LiveError> {
    let need = |p: &sim::serving::PoolConfig, path: &str| {
        p.kv_capacity_tokens_per_rank.ok_or_else(|| {
            LiveError::Config(format!(
                "{path}.kv_capacity_tokens_per_rank is not set: a live run allocates its KV cache up front, so the scenario must size it"
            ))
        })
    };
    let decode = need(&sc.serving.decode, "serving.decode")?;
    let (prefill, entry) = match sc.serving.mode {
        Mode::Aggregated => (0, &sc.serving.decode),
        _ => (
            need(&sc.serving.prefill, "serving.prefill")?,
            &sc.serving.prefill,
        ),
    };
    let cache = entry
        .prefix_cache_tokens
        .map(|t| t / entry.dep.max(1) as u64)
        .unwrap_or(if sc.serving.mode == Mode::Aggregated {
            decode
        } else {
            prefill
        });
    Ok(([prefill, decode], cache))
}

pub(crate) fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Checks what the run needs before anything starts.
pub fn validate(cfg: &LiveConfig) -> Result<LiveModel, LiveError> {
    let mut p = Vec::new();
    let sc = &cfg.scenario;
    p.extend(sc.problems().into_iter().map(String::from));
    p.extend(cfg.workload.problems().into_iter().map(String::from));
    let live = LiveModel::from_model(&cfg.model, crate::model::PAGE_TOKENS)
        .map_err(|e| LiveError::Config(format!("model {}: {}", cfg.model.name, e.join("; "))))?;
    if sc.serving.mode == Mode::PrefillOnly {
        p.push("serving.mode: prefill-only fakes the decode side; a live run serves for real (use aggregated or disaggregated)".into());
    }
    if cfg.policy == KvPolicy::Vllm && sc.serving.mode != Mode::Aggregated {
        p.push(
            "--kv-policy vllm (preemption by recompute) is implemented for aggregated serving only"
                .into(),
        );
    }
    if cfg.workload.agentx.as_ref().is_some_and(|a| a.warm_start) {
        p.push("workload agentx.warm_start: a live run would have to compute the sessions' history first; set workload.agentx.warm_start=false".into());
    }
    if !(cfg.duration_s.is_finite()
        && cfg.duration_s > 0.0
        && cfg.warmup_s >= 0.0
        && cfg.warmup_s < cfg.duration_s)
    {
        p.push(format!(
            "duration {} s with warm-up {} s: need 0 <= warm-up < duration",
            cfg.duration_s, cfg.warmup_s
        ));
    }
    let ranks: u64 = sc.pools().iter().map(|(_, pool)| pool.gpus()).sum();
    if matches!(cfg.device, Device::Cuda(_)) && ranks > 1 {
        p.push(format!(
            "{ranks} ranks on one CUDA device: multi-GPU runs need NCCL all-to-all, not implemented (one rank per GPU); use a 1-rank scenario or --device cpu"
        ));
    }
    let mtp_n = match sim::serving::resolve_mtp(sc, &cfg.model) {
        Ok((n, _)) => n,
        Err(e) => {
            p.push(e.to_string());
            0
        }
    };
    if mtp_n > 0 && live.mtp_ffn == 0 {
        p.push(format!(
            "{mtp_n} MTP drafts but model {} has no MTP head",
            cfg.model.name
        ));
    }
    if let Err(e) = kv_sizes(sc) {
        p.push(e.to_string());
    }
    let ec = engine_config(&live);
    for (path, pool) in sc.pools() {
        p.extend(
            ec.problems(pool.dep as usize)
                .into_iter()
                .map(|x| format!("{path}: {x}")),
        );
    }
    if !p.is_empty() {
        return Err(LiveError::Config(format!(
            "cannot run live:\n  {}",
            p.join("\n  ")
        )));
    }
    Ok(live)
}

/// `sc` as the live engine serves it: with the MTP draws it makes (per request,
/// `sched::accepted`). A run records it so, and `twin validate live` simulates any run
/// so (runs recorded before the field existed included).
pub fn as_served(sc: &ServingScenario) -> ServingScenario {
    let mut s = sc.clone();
    s.serving.mtp.draws = sim::serving::mtp::MtpDraws::PerRequest;
    s
}

/// Runs the scenario live for `cfg.duration_s` seconds and writes the run directory.
pub fn run(cfg: &LiveConfig, progress: &mut dyn FnMut(&Progress)) -> Result<Summary, LiveError> {
    let live = validate(cfg)?;
    let out = &cfg.out;
    refuse_used_dir(out)?;
    let sc = &cfg.scenario;
    // A CUDA device is named by its backend (opened here: no driver, clear error).
    let cuda_name = match cfg.device {
        Device::Cpu => None,
        Device::Cuda(_) => Some(cfg.device.open()?.info().device.clone()),
    };
    let (drafts, acceptance) = sim::serving::resolve_mtp(sc, &cfg.model)?;
    let drafts = drafts as usize;
    let (kv_cap, cache_tokens) = kv_sizes(sc)?;
    let mut sched = scheduler(cfg, &live, (drafts, &acceptance), (kv_cap, cache_tokens));
    let RankLayout {
        specs,
        first_rank,
        link_of,
        links,
        cores,
    } = rank_layout(&sched, cfg.cores);
    let model_cfg = engine_config(&live);
    let workers = Workers::start(cfg.device, &model_cfg, cfg.seed, &specs, links, cfg.idle)?;
    // A CPU rank is named with its own threads: a profile must be measured with as many.
    let device_name = cuda_name.unwrap_or_else(|| workers.devices[0].clone());
    let served_loop_idle = loop_idle(cfg.idle, &cores);
    let result = serve(
        Serving {
            cfg,
            sched: &mut sched,
            workers: &workers,
            first_rank: &first_rank,
            link_of: &link_of,
            drafts,
            loop_idle: served_loop_idle,
        },
        progress,
    );
    workers.stop();
    let (steps, transfers, load_start, book) = result?;
    // Records.
    let requests = write_records(
        cfg,
        &specs,
        &device_name,
        book.as_ref(),
        &sched,
        &transfers,
        &steps,
    )?;
    let info = run_info(
        cfg,
        &live,
        Recorded {
            device_name,
            kv_cap,
            cache_tokens,
            drafts,
            acceptance,
            cores,
            load_start,
            requests: requests.len(),
            steps: steps.len(),
            loop_idle: served_loop_idle,
            book,
        },
    );
    finish_run_dir(RunDir {
        path: out.clone(),
        info,
        requests,
        steps,
    })
}

/// The run's scheduler: the scenario under `cfg`'s policy and seed, with the MTP
/// drafts and acceptance and the KV sizes resolved for it.
fn scheduler(
    cfg: &LiveConfig,
    live: &LiveModel,
    (drafts, acceptance): (usize, &[f64]),
    (kv_cap, cache_tokens): ([u64; 2], u64),
) -> Scheduler {
    Scheduler::new(SchedConfig {
        scenario: cfg.scenario.clone(),
        policy: cfg.policy,
        page: crate::model::PAGE_TOKENS,
        vocab: live.vocab,
        drafts,
        acceptance: acceptance.to_vec(),
        seed: cfg.seed,
        kv_cap: (kv_cap[0], kv_cap[1]),
        cache_tokens,
    })
}

/// Creates the run directory and writes into it the op trace (where there is one),
/// the request records and the step records; returns the request records.
fn write_records(
    cfg: &LiveConfig,
    specs: &[RankSpec],
    device_name: &str,
    book: Option<&crate::trace::TraceBook>,
    sched: &Scheduler,
    transfers: &Transfers,
    steps: &[StepRecord],
) -> Result<Vec<RequestRecord>, LiveError> {
    let out = &cfg.out;
    std::fs::create_dir_all(out).map_err(|e| LiveError::io(out, e))?;
    if let Some(book) = book {
        write_op_trace(cfg, specs, device_name, book)?;
    }
    let requests = request_records(sched, transfers);
    write_jsonl(&out.join(REQUESTS_FILE), &requests)?;
    write_jsonl(&out.join(STEPS_FILE), steps)?;
    Ok(requests)
}

/// What a finished run's [`RunInfo`] records beyond its configuration and model.
struct Recorded {
    device_name: String,
    kv_cap: [u64; 2],
    cache_tokens: u64,
    drafts: usize,
    acceptance: Vec<f64>,
    cores: Vec<Vec<usize>>,
    load_start: String,
    requests: usize,
    steps: usize,
    loop_idle: IdleMode,
    book: Option<crate::trace::TraceBook>,
}

/// The run's [`RunInfo`]: its configuration, model and what it recorded, stamped with
/// the time and the load average now.
fn run_info(cfg: &LiveConfig, live: &LiveModel, r: Recorded) -> RunInfo {
    RunInfo {
        twin_version: env!("CARGO_PKG_VERSION").to_string(),
        device: cfg.device.to_string(),
        device_name: r.device_name,
        scenario_origin: cfg.scenario_origin.clone(),
        scenario: as_served(&cfg.scenario),
        workload: cfg.workload.clone(),
        model: cfg.model.clone(),
        hardware: cfg.hardware.clone(),
        seed: cfg.seed,
        duration_s: cfg.duration_s,
        warmup_s: cfg.warmup_s,
        kv_policy: cfg.policy.name().into(),
        page_tokens: crate::model::PAGE_TOKENS,
        kv_capacity_tokens_per_rank: r.kv_cap,
        prefix_cache_tokens_per_rank: r.cache_tokens,
        kv_bytes_per_token: live.kv_bytes_per_token(),
        draft_tokens: r.drafts,
        acceptance: r.acceptance.clone(),
        mtp_rule: mtp_rule(cfg.seed, &r.acceptance[..r.drafts.min(r.acceptance.len())]),
        cores: r.cores,
        started_utc: utc_now(),
        load_start: r.load_start,
        load_end: load_avg(),
        requests: r.requests,
        steps: r.steps,
        trace_records: cfg.trace.len(),
        idle: cfg.idle.name().into(),
        loop_idle: r.loop_idle.name().into(),
        op_trace: r.book.map(|b| OpTraceInfo {
            file: crate::trace::TRACE_FILE.into(),
            sampling: b.sampling(),
        }),
    }
}

/// The declared MTP acceptance rule, in words.
/// Current UTC time as RFC 3339 (seconds), as the records carry it.
fn utc_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn mtp_rule(seed: u64, acceptance: &[f64]) -> String {
    format!(
        "declared, seeded: draft i of a step is accepted when drafts 1..i-1 were and a uniform draw (stream of seed {seed}, request, step) is below acceptance[i] = {acceptance:?}; the draft head runs for real, but random weights make real acceptance meaningless"
    )
}

/// Writes the run's op trace (`crate::trace`) into its directory.
fn write_op_trace(
    cfg: &LiveConfig,
    specs: &[RankSpec],
    device_name: &str,
    book: &crate::trace::TraceBook,
) -> Result<(), LiveError> {
    let meta = crate::trace::TraceMeta {
        producer: crate::trace::PRODUCER,
        scenario: cfg.scenario_origin.clone(),
        device: device_name.to_string(),
        seed: cfg.seed,
        cores: cfg.cores,
        idle: cfg.idle.name().into(),
        clock: if cfg.device == Device::Cpu {
            crate::trace::HOST_CLOCK
        } else {
            crate::trace::GPU_EVENTS
        },
        twin_version: env!("CARGO_PKG_VERSION").to_string(),
        written_utc: utc_now(),
        ranks: specs
            .iter()
            .map(|s| {
                format!(
                    "rank {} (group {}, rank {} of {})",
                    s.index, s.group, s.rank, s.ranks
                )
            })
            .collect(),
        sampling: book.sampling(),
    };
    crate::trace::write_trace(&cfg.out.join(crate::trace::TRACE_FILE), &meta, book)
}

/// How the serving loop waits for the ranks: it spins with them only where their cores
/// leave one free for it (spinning on a core a rank computes on would take from the
/// rank); otherwise it blocks, and a rank's reply wakes it.
pub fn loop_idle(idle: IdleMode, rank_cores: &[Vec<usize>]) -> IdleMode {
    let avail = std::thread::available_parallelism().map_or(1, |n| n.get());
    let used: usize = rank_cores.iter().map(|c| c.len()).sum();
    let pinned = rank_cores.iter().all(|c| !c.is_empty());
    if idle == IdleMode::Spin && pinned && used < avail {
        IdleMode::Spin
    } else {
        IdleMode::Sleep
    }
}

/// Writes a run's figures (`result.json`), then `run.json`, whose presence marks
/// complete records.
fn finish_run_dir(dir: RunDir) -> Result<Summary, LiveError> {
    let figures = crate::metrics::live_figures(&dir);
    write_json(
        &dir.path.join(RESULT_FILE),
        &crate::metrics::result_json(&dir, &figures),
    )?;
    // run.json last: its presence marks complete records.
    write_json(&dir.path.join(RUN_FILE), &dir.info)?;
    Ok(Summary {
        dir: dir.path.clone(),
        requests: dir.requests.len(),
        completed: dir.requests.iter().filter(|r| r.completed).count(),
        steps: dir.steps.len(),
        figures,
        op_trace: dir.info.op_trace.clone(),
    })
}

/// A run directory must be new or empty: a run never overwrites records.
fn refuse_used_dir(out: &std::path::Path) -> Result<(), LiveError> {
    if out.exists()
        && std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(LiveError::Config(format!(
            "{} exists and is not empty: a run never overwrites records; choose a new --out",
            out.display()
        )));
    }
    Ok(())
}

/// The worker ranks: every group's ranks in order (`first_rank[g]`: group `g`'s
/// first), the cores of each, and a KV link per decode rank.
struct RankLayout {
    specs: Vec<RankSpec>,
    first_rank: Vec<usize>,
    link_of: HashMap<(usize, usize), usize>,
    links: usize,
    /// Cores per rank, split evenly over `cores` when there are enough.
    cores: Vec<Vec<usize>>,
}

fn rank_layout(sched: &Scheduler, cores: usize) -> RankLayout {
    let mut specs = Vec::new();
    let mut first_rank = Vec::new();
    let total_ranks: usize = sched.groups.iter().map(|g| g.ranks.len()).sum();
    let core_sets = core_sets(total_ranks, cores.max(1));
    let mut links = 0;
    let mut link_of = HashMap::new();
    for (gi, g) in sched.groups.iter().enumerate() {
        first_rank.push(specs.len());
        for (ri, r) in g.ranks.iter().enumerate() {
            let link = (g.role == crate::sched::Role::Decode).then(|| {
                links += 1;
                link_of.insert((gi, ri), links - 1);
                links - 1
            });
            specs.push(RankSpec {
                index: specs.len(),
                group: gi,
                rank: ri,
                ranks: g.ranks.len(),
                cores: core_sets[specs.len()].clone(),
                pages: r.kv.total(),
                link,
            });
        }
    }
    RankLayout {
        specs,
        first_rank,
        link_of,
        links,
        cores: core_sets,
    }
}

/// What the run records of each request.
fn request_records(sched: &Scheduler, transfers: &Transfers) -> Vec<RequestRecord> {
    sched
        .reqs
        .iter()
        .map(|q| RequestRecord {
            id: q.id,
            arrival_s: q.arrival_s,
            input_tokens: q.input,
            output_tokens: q.output,
            cached_tokens: q.cached,
            prefill_start_s: q.prefill_start_s,
            prefill_done_s: q.prefill_done_s,
            first_token_s: q.token_times.first().copied(),
            token_times_s: q.token_times.clone(),
            finish_s: q.finish_s,
            completed: q.state == crate::sched::State::Done && q.generated >= q.output,
            dropped: q.state == crate::sched::State::Done && q.generated < q.output,
            preemptions: q.preemptions,
            prefill_at: [q.pf.0, q.pf.1],
            decode_at: [q.dec.0, q.dec.1],
            transfer_bytes: q.transfer_bytes,
            transfer_s: transfers.get(&q.id).copied(),
        })
        .collect()
}
