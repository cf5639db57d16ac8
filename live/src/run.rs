//! The wall-clock loop of a live run: the workload driver's events fire at their times,
//! the scheduler forms each idle group's next step as soon as the last one ends, the
//! workers run them; at the end every request and step is written to the run
//! directory.

use crate::model::engine_config;
use crate::records::*;
use crate::sched::{Action, KvPolicy, SchedConfig, Scheduler, StepPlan};
use crate::workers::{core_sets, Cmd, RankSpec, Reply, Workers};
use crate::LiveError;
use engine::serve::{Seq, SeqOut};
use engine::Device;
use sim::cost::fitted::{LiveModel, LiveModelExt};
use sim::serving::core::{secs_to_ns, stream};
use sim::serving::{Driver, Mode, ServingScenario, TraceRecord, WlEvent, WorkloadConfig};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What a live run serves, and how.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    pub device: Device,
    pub scenario_origin: String,
    pub scenario: ServingScenario,
    pub workload: WorkloadConfig,
    pub model: sim::Model,
    pub hardware: sim::Hardware,
    pub trace: Vec<TraceRecord>,
    pub seed: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub policy: KvPolicy,
    /// Cores to spread the ranks over.
    pub cores: usize,
    pub out: PathBuf,
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

fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Checks what the run needs before anything starts.
pub fn validate(cfg: &LiveConfig) -> Result<LiveModel, LiveError> {
    let mut p = Vec::new();
    let sc = &cfg.scenario;
    p.extend(sc.problems().into_iter().map(String::from));
    p.extend(cfg.workload.problems());
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

/// One rank's answer to a step: outputs, start and end, prefill, decode and import
/// seconds, CPU seconds of the passes (one-thread ranks).
type RankReply = (Vec<SeqOut>, Instant, Instant, f64, f64, f64, Option<f64>);

/// A group's step in flight.
struct InFlight {
    plan: StepPlan,
    replies: Vec<Option<RankReply>>,
    kv: Vec<(usize, usize)>,
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
    let page = crate::model::PAGE_TOKENS;
    let mut sched = Scheduler::new(SchedConfig {
        scenario: sc.clone(),
        policy: cfg.policy,
        page,
        vocab: live.vocab,
        drafts,
        acceptance: acceptance.clone(),
        seed: cfg.seed,
        kv_cap: (kv_cap[0], kv_cap[1]),
        cache_tokens,
    });
    let RankLayout {
        specs,
        first_rank,
        link_of,
        links,
        cores,
    } = rank_layout(&sched, cfg.cores);
    let model_cfg = engine_config(&live);
    let workers = Workers::start(cfg.device, &model_cfg, cfg.seed, &specs, links)?;
    // A CPU rank is named with its own threads: a profile must be measured with as many.
    let device_name = cuda_name.unwrap_or_else(|| workers.devices[0].clone());
    let result = serve(
        Serving {
            cfg,
            sched: &mut sched,
            workers: &workers,
            first_rank: &first_rank,
            link_of: &link_of,
            drafts,
        },
        progress,
    );
    workers.stop();
    let (steps, transfers, load_start) = result?;
    // Records.
    std::fs::create_dir_all(out).map_err(|e| LiveError::io(out, e))?;
    let requests = request_records(&sched, &transfers);
    write_jsonl(&out.join(REQUESTS_FILE), &requests)?;
    write_jsonl(&out.join(STEPS_FILE), &steps)?;
    let info = RunInfo {
        twin_version: env!("CARGO_PKG_VERSION").to_string(),
        device: cfg.device.to_string(),
        device_name,
        scenario_origin: cfg.scenario_origin.clone(),
        scenario: sc.clone(),
        workload: cfg.workload.clone(),
        model: cfg.model.clone(),
        hardware: cfg.hardware.clone(),
        seed: cfg.seed,
        duration_s: cfg.duration_s,
        warmup_s: cfg.warmup_s,
        kv_policy: cfg.policy.name().into(),
        page_tokens: page,
        kv_capacity_tokens_per_rank: kv_cap,
        prefix_cache_tokens_per_rank: cache_tokens,
        kv_bytes_per_token: live.kv_bytes_per_token(),
        draft_tokens: drafts,
        acceptance: acceptance.clone(),
        mtp_rule: format!(
            "declared, seeded: draft i of a step is accepted when drafts 1..i-1 were and a uniform draw (stream of seed {}, request, step) is below acceptance[i] = {:?}; the draft head runs for real, but random weights make real acceptance meaningless",
            cfg.seed,
            &acceptance[..drafts.min(acceptance.len())]
        ),
        cores,
        started_utc: calibration::profile::utc_now(),
        load_start,
        load_end: load_avg(),
        requests: requests.len(),
        steps: steps.len(),
        trace_records: cfg.trace.len(),
    };
    finish_run_dir(RunDir {
        path: out.clone(),
        info,
        requests,
        steps,
    })
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

/// Warm-up: every group runs one small prefill and decode before the clock starts
/// (first-touch page faults, lazy initialisation), on page 0 of each rank.
fn warm_up(
    sched: &Scheduler,
    workers: &Workers,
    first_rank: &[usize],
    drafts: usize,
    vocab: usize,
) -> Result<(), LiveError> {
    let mut waiting = 0;
    for (g, grp) in sched.groups.iter().enumerate() {
        for r in 0..grp.ranks.len() {
            let tokens: Vec<u32> = (0..32u32).map(|i| i % vocab as u32).collect();
            let prefill = vec![Seq {
                tokens,
                start: 0,
                pages: vec![0],
                accept: None,
            }];
            let decode = vec![Seq {
                tokens: vec![1; 1 + drafts],
                start: 32,
                pages: vec![0],
                accept: Some(0),
            }];
            workers.send(
                first_rank[g] + r,
                Cmd::Step {
                    seq: u64::MAX,
                    prefill,
                    decode,
                    drafts,
                    passes: (true, true),
                    imports: Vec::new(),
                },
            )?;
            waiting += 1;
        }
    }
    while waiting > 0 {
        match workers.replies.recv() {
            Ok(Reply::Step { .. }) => waiting -= 1,
            Ok(Reply::Failed { who, error }) => {
                return Err(LiveError::Worker(format!("{who}: {error}")))
            }
            Ok(_) => {}
            Err(_) => return Err(LiveError::Worker("workers stopped during warm-up".into())),
        }
    }
    Ok(())
}

type Transfers = HashMap<u32, [f64; 2]>;

/// What the serving loop needs: the run, its scheduler and workers, each group's first
/// rank, each decode rank's KV link, and the draft tokens per step.
struct Serving<'a> {
    cfg: &'a LiveConfig,
    sched: &'a mut Scheduler,
    workers: &'a Workers,
    first_rank: &'a [usize],
    link_of: &'a HashMap<(usize, usize), usize>,
    drafts: usize,
}

/// The serving loop's state: the workload driver and its pending events, the steps in
/// flight, and what the run records.
struct Loop<'a> {
    s: Serving<'a>,
    driver: Driver<'a>,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    events: Vec<WlEvent>,
    out: Vec<(u64, WlEvent)>,
    t0: Instant,
    end_ns: u64,
    inflight: HashMap<usize, InFlight>,
    steps: Vec<StepRecord>,
    transfers: Transfers,
    step_seq: u64,
    arrived: u64,
    completed: u64,
    last_progress: Instant,
    actions: Vec<Action>,
}

/// Warms the ranks up, then serves until the run's end and the last step in flight:
/// the steps, the KV transfers, and the load average when serving started.
fn serve(
    s: Serving<'_>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Vec<StepRecord>, Transfers, String), LiveError> {
    warm_up(
        s.sched,
        s.workers,
        s.first_rank,
        s.drafts,
        s.sched.cfg.vocab,
    )?;
    let load_start = load_avg();
    let cfg = s.cfg;
    let mut driver = Driver::new(&cfg.workload, &cfg.trace, stream(cfg.seed, "workload"))?;
    let mut heap = BinaryHeap::new();
    let mut events = Vec::new();
    let mut out = Vec::new();
    driver.start(&mut out);
    queue(&mut heap, &mut events, &mut out);
    let mut l = Loop {
        s,
        driver,
        heap,
        events,
        out,
        t0: Instant::now(),
        end_ns: secs_to_ns(cfg.duration_s),
        inflight: HashMap::new(),
        steps: Vec::new(),
        transfers: HashMap::new(),
        step_seq: 0,
        arrived: 0,
        completed: 0,
        last_progress: Instant::now(),
        actions: Vec::new(),
    };
    loop {
        let now = l.secs(Instant::now());
        let now_ns = secs_to_ns(now);
        let stopping = now_ns >= l.end_ns;
        if stopping && l.inflight.is_empty() {
            break;
        }
        if !stopping {
            l.fire_due(now_ns);
        }
        l.act(now, now_ns)?;
        l.push();
        // Idle groups start their next step.
        if !stopping {
            l.start_steps(now)?;
            if !l.actions.is_empty() {
                continue;
            }
        }
        let Some(reply) = l.wait(progress)? else {
            continue;
        };
        l.on_reply(reply)?;
    }
    Ok((l.steps, l.transfers, load_start))
}

/// Moves the workload events the driver emitted (`out`) into `heap`, by time, with their
/// bodies in `events`.
fn queue(
    heap: &mut BinaryHeap<Reverse<(u64, u64)>>,
    events: &mut Vec<WlEvent>,
    out: &mut Vec<(u64, WlEvent)>,
) {
    for (t, ev) in out.drain(..) {
        heap.push(Reverse((t, events.len() as u64)));
        events.push(ev);
    }
}

impl Loop<'_> {
    fn secs(&self, t: Instant) -> f64 {
        (t - self.t0).as_secs_f64()
    }

    /// Queues the workload events the driver emitted.
    fn push(&mut self) {
        queue(&mut self.heap, &mut self.events, &mut self.out);
    }

    /// Workload events due now, at their own times.
    fn fire_due(&mut self, now_ns: u64) {
        while let Some(&Reverse((t, i))) = self.heap.peek() {
            if t > now_ns {
                break;
            }
            self.heap.pop();
            if let Some(nr) = self
                .driver
                .on_event(t, self.events[i as usize], &mut self.out)
            {
                self.arrived += 1;
                self.actions.extend(self.s.sched.arrive(t as f64 / 1e9, nr));
            }
            self.push();
        }
    }

    /// Acts on what the scheduler asked for.
    fn act(&mut self, now: f64, now_ns: u64) -> Result<(), LiveError> {
        for a in self.actions.drain(..) {
            match a {
                Action::End {
                    origin,
                    completed: done,
                    context,
                } => {
                    self.completed += done as u64;
                    self.driver
                        .on_request_end(now_ns, origin, done, context, &mut self.out);
                }
                Action::Transfer {
                    req,
                    from,
                    pages,
                    to,
                    to_pages,
                } => {
                    let link = *self.s.link_of.get(&to).ok_or_else(|| {
                        LiveError::Worker(format!("no KV link for decode rank {to:?}"))
                    })?;
                    self.transfers.insert(req, [now, now]);
                    self.s.workers.send(
                        self.s.first_rank[from.0] + from.1,
                        Cmd::Export {
                            req,
                            pages,
                            link,
                            to_pages,
                        },
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Every idle group forms its next step and sends it to its ranks.
    fn start_steps(&mut self, now: f64) -> Result<(), LiveError> {
        let sched = &mut *self.s.sched;
        for g in sched.idle_groups() {
            let mut acts = Vec::new();
            let Some(plan) = sched.form_step(g, now, &mut acts) else {
                self.actions.extend(acts);
                continue;
            };
            self.actions.extend(acts);
            let passes = (
                plan.ranks.iter().any(|r| !r.prefill.is_empty()),
                plan.ranks.iter().any(|r| !r.decode.is_empty()),
            );
            let kv = sched.kv_use(g);
            for (r, rp) in plan.ranks.iter().enumerate() {
                let imports = rp
                    .decode_reqs
                    .iter()
                    .copied()
                    .filter(|&id| {
                        sched.reqs[id as usize].transfer_bytes > 0
                            && sched.reqs[id as usize].dsteps == 0
                    })
                    .collect();
                self.s.workers.send(
                    self.s.first_rank[g] + r,
                    Cmd::Step {
                        seq: self.step_seq,
                        prefill: rp.prefill.clone(),
                        decode: rp.decode.clone(),
                        drafts: plan.drafts,
                        passes,
                        imports,
                    },
                )?;
            }
            self.step_seq += 1;
            let n = plan.ranks.len();
            self.inflight.insert(
                g,
                InFlight {
                    plan,
                    replies: vec![None; n],
                    kv,
                },
            );
        }
        Ok(())
    }

    /// Waits for a worker, or the next workload event, or the end; reports progress
    /// now and then while waiting. `None` when nothing came.
    fn wait(&mut self, progress: &mut dyn FnMut(&Progress)) -> Result<Option<Reply>, LiveError> {
        let next_ev = self
            .heap
            .peek()
            .map_or(self.end_ns, |Reverse((t, _))| (*t).min(self.end_ns));
        let wait =
            Duration::from_nanos(next_ev.saturating_sub(secs_to_ns(self.secs(Instant::now()))))
                .min(Duration::from_millis(50));
        match self.s.workers.replies.recv_timeout(wait) {
            Ok(r) => Ok(Some(r)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if self.last_progress.elapsed() > Duration::from_millis(250) {
                    self.last_progress = Instant::now();
                    progress(&Progress {
                        elapsed_s: self.secs(Instant::now()),
                        duration_s: self.s.cfg.duration_s,
                        arrived: self.arrived,
                        completed: self.completed,
                        live: self.s.sched.live(),
                        steps: self.steps.len() as u64,
                    });
                }
                Ok(None)
            }
            Err(_) => Err(LiveError::Worker("the workers stopped".into())),
        }
    }

    /// Takes in a worker's reply.
    fn on_reply(&mut self, reply: Reply) -> Result<(), LiveError> {
        match reply {
            Reply::Step {
                rank,
                outs,
                start,
                end,
                prefill_s,
                decode_s,
                import_s,
                cpu_s,
                ..
            } => {
                let reply = (outs, start, end, prefill_s, decode_s, import_s, cpu_s);
                self.on_step_reply(rank, reply)?;
            }
            Reply::Exported { req } => self.s.sched.exported(req),
            Reply::Transferred {
                req,
                bytes,
                start,
                end,
            } => {
                self.transfers
                    .insert(req, [self.secs(start), self.secs(end)]);
                self.s.sched.transferred(req, bytes);
            }
            Reply::Failed { who, error } => {
                return Err(LiveError::Worker(format!("{who}: {error}")))
            }
            Reply::Ready { .. } => {}
        }
        Ok(())
    }

    /// Rank `rank`'s answer to its group's step; once every rank answered, the step is
    /// recorded and the scheduler told.
    fn on_step_reply(&mut self, rank: usize, reply: RankReply) -> Result<(), LiveError> {
        let first_rank = self.s.first_rank;
        let g = first_rank.partition_point(|&f| f <= rank) - 1;
        let r = rank - first_rank[g];
        let Some(f) = self.inflight.get_mut(&g) else {
            return Err(LiveError::Worker(format!(
                "a step reply from rank {rank} with no step in flight"
            )));
        };
        f.replies[r] = Some(reply);
        if f.replies.iter().all(|x| x.is_some()) {
            let f = self.inflight.remove(&g).expect("present");
            let rs: Vec<_> = f
                .replies
                .into_iter()
                .map(|x| x.expect("all replied"))
                .collect();
            let start_s = rs
                .iter()
                .map(|x| self.secs(x.1))
                .fold(f64::INFINITY, f64::min);
            let end_s = rs.iter().map(|x| self.secs(x.2)).fold(0.0, f64::max);
            let outs: Vec<Vec<SeqOut>> = rs.iter().map(|x| x.0.clone()).collect();
            let rec = step_record(
                self.steps.len() as u64,
                &f.plan,
                &self.s.sched.groups[g].role,
                &rs,
                start_s,
                end_s,
                &f.kv,
            );
            self.steps.push(rec);
            self.actions
                .extend(self.s.sched.step_done(&f.plan, &outs, end_s));
        }
        Ok(())
    }
}

fn step_record(
    index: u64,
    plan: &StepPlan,
    role: &crate::sched::Role,
    rs: &[RankReply],
    start_s: f64,
    end_s: f64,
    kv: &[(usize, usize)],
) -> StepRecord {
    let prefill = plan.ranks.iter().any(|r| !r.prefill.is_empty());
    let decode = plan.ranks.iter().any(|r| !r.decode.is_empty());
    let kind = match (prefill, decode) {
        (true, true) => "mixed",
        (true, false) => "prefill",
        _ => "decode",
    };
    let max = |f: &dyn Fn(&RankReply) -> f64| rs.iter().map(f).fold(0.0, f64::max);
    StepRecord {
        index,
        group: plan.group,
        pool: role.name().to_string(),
        kind: kind.to_string(),
        start_s,
        end_s,
        step_ms: 1e3 * max(&|x| x.3 + x.4),
        prefill_ms: 1e3 * max(&|x| x.3),
        decode_ms: 1e3 * max(&|x| x.4),
        import_ms: 1e3 * max(&|x| x.5),
        cpu_ms: rs
            .iter()
            .map(|x| x.6)
            .collect::<Option<Vec<f64>>>()
            .map(|v| 1e3 * v.into_iter().fold(0.0, f64::max)),
        drafts: plan.drafts,
        ranks: plan
            .ranks
            .iter()
            .zip(kv)
            .map(|(rp, &(used, total))| RankStep {
                prefill: rp
                    .prefill
                    .iter()
                    .map(|s| [s.tokens.len() as u64, s.start as u64])
                    .collect(),
                decode: rp.decode.iter().map(|s| s.start as u64).collect(),
                accepted: rp
                    .decode
                    .iter()
                    .map(|s| s.accept.unwrap_or(0) as u32)
                    .collect(),
                kv_pages_used: used,
                kv_pages_total: total,
            })
            .collect(),
    }
}
