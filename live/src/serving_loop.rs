//! The live run's serving loop: the ranks warmed up, then workload events fired,
//! the scheduler's actions carried out, each idle group's next step sent to its ranks
//! and their replies gathered into step records, until the run's end and the last step
//! in flight.

use crate::records::*;
use crate::run::{load_avg, LiveConfig, Progress};
use crate::sched::{Action, Scheduler, StepPlan};
use crate::trace::{RankTrace, StepTrace, TraceBook};
use crate::workers::{spin_pause, Cmd, Reply, Workers};
use crate::LiveError;
use engine::serve::{Seq, SeqOut, TracedCall};
use sim::serving::clock::secs_to_ns;
use sim::serving::streams::stream;
use sim::serving::{Driver, IdleMode, WlEvent};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

/// One rank's answer to a step: outputs, start and end, prefill, decode and import
/// seconds, CPU seconds of the passes (one-thread ranks).
pub(crate) type RankReply = (Vec<SeqOut>, Instant, Instant, f64, f64, f64, Option<f64>);

/// A group's step in flight: its plan, its ranks' replies (and traced calls), its KV
/// use, its dispatch number, and whether it is traced.
pub(crate) struct InFlight {
    plan: StepPlan,
    replies: Vec<Option<RankReply>>,
    calls: Vec<Vec<TracedCall>>,
    kv: Vec<(usize, usize)>,
    dispatch: u64,
    traced: bool,
}

/// Warm-up: every group runs one prefill of its chunk budget and one decode of its
/// batch cap before the clock starts (first-touch page faults of the largest buffers a
/// step takes, lazy initialisation), on the first pages of each rank.
pub(crate) fn warm_up(
    sched: &Scheduler,
    workers: &Workers,
    first_rank: &[usize],
    drafts: usize,
    vocab: usize,
) -> Result<(), LiveError> {
    let mut waiting = 0;
    let sc = &sched.cfg.scenario.serving;
    let page = sched.cfg.page;
    for (g, grp) in sched.groups.iter().enumerate() {
        let pool = match grp.role {
            crate::sched::Role::Prefill => &sc.prefill,
            _ => &sc.decode,
        };
        for r in 0..grp.ranks.len() {
            let pages = grp.ranks[r].kv.total().max(1);
            let n = (pool.chunk_tokens_per_rank as usize).clamp(32, pages * page);
            let tokens: Vec<u32> = (0..n as u32).map(|i| i % vocab as u32).collect();
            let prefill = vec![Seq {
                tokens,
                start: 0,
                pages: (0..n.div_ceil(page) as u32).collect(),
                accept: None,
            }];
            // One page per sequence: its KV slots are its own.
            let batch = (pool.max_batch_per_rank as usize).clamp(1, pages);
            let decode = (0..batch as u32)
                .map(|i| Seq {
                    tokens: vec![1; 1 + drafts],
                    start: 32,
                    pages: vec![i],
                    accept: Some(0),
                })
                .collect();
            workers.send(
                first_rank[g] + r,
                Cmd::Step {
                    seq: u64::MAX,
                    prefill,
                    decode,
                    drafts,
                    passes: (true, true),
                    imports: Vec::new(),
                    trace: false,
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

pub(crate) type Transfers = HashMap<u32, [f64; 2]>;

/// What the serving loop needs: the run, its scheduler and workers, each group's first
/// rank, each decode rank's KV link, and the draft tokens per step.
pub(crate) struct Serving<'a> {
    pub(crate) cfg: &'a LiveConfig,
    pub(crate) sched: &'a mut Scheduler,
    pub(crate) workers: &'a Workers,
    pub(crate) first_rank: &'a [usize],
    pub(crate) link_of: &'a HashMap<(usize, usize), usize>,
    pub(crate) drafts: usize,
    /// How the loop itself waits for replies (`run::loop_idle`).
    pub(crate) loop_idle: IdleMode,
}

/// The serving loop's state: the workload driver and its pending events, the steps in
/// flight, and what the run records.
pub(crate) struct Loop<'a> {
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
    /// The traced steps (`None`: the run is not traced), and the run's start on the
    /// executors' trace clock (seconds).
    book: Option<TraceBook>,
    trace_off_s: f64,
}

/// What the serving loop hands back: the steps, the KV transfers, the load average when
/// serving started, and the traced steps (when traced).
pub(crate) type Served = (Vec<StepRecord>, Transfers, String, Option<TraceBook>);

/// Warms the ranks up, then serves until the run's end and the last step in flight:
/// the steps, the KV transfers, and the load average when serving started.
pub(crate) fn serve(
    s: Serving<'_>,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Served, LiveError> {
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
    let epoch = engine::serve::trace_epoch();
    let t0 = Instant::now();
    let mut l = Loop {
        s,
        driver,
        heap,
        events,
        out,
        t0,
        end_ns: secs_to_ns(cfg.duration_s),
        inflight: HashMap::new(),
        steps: Vec::new(),
        transfers: HashMap::new(),
        step_seq: 0,
        arrived: 0,
        completed: 0,
        last_progress: Instant::now(),
        actions: Vec::new(),
        book: cfg.op_trace.then(TraceBook::default),
        trace_off_s: (t0 - epoch).as_secs_f64(),
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
    Ok((l.steps, l.transfers, load_start, l.book))
}

/// Moves the workload events the driver emitted (`out`) into `heap`, by time, with their
/// bodies in `events`.
pub(crate) fn queue(
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
            let dispatch = self.step_seq;
            let traced = self.book.as_mut().is_some_and(|b| b.wants(dispatch));
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
                        trace: traced,
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
                    calls: vec![Vec::new(); n],
                    kv,
                    dispatch,
                    traced,
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
        match recv_within(&self.s.workers.replies, wait, self.s.loop_idle) {
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
                calls,
                ..
            } => {
                let reply = (outs, start, end, prefill_s, decode_s, import_s, cpu_s);
                self.on_step_reply(rank, reply, calls)?;
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
    fn on_step_reply(
        &mut self,
        rank: usize,
        reply: RankReply,
        calls: Vec<TracedCall>,
    ) -> Result<(), LiveError> {
        let first_rank = self.s.first_rank;
        let g = first_rank.partition_point(|&f| f <= rank) - 1;
        let r = rank - first_rank[g];
        let Some(f) = self.inflight.get_mut(&g) else {
            return Err(LiveError::Worker(format!(
                "a step reply from rank {rank} with no step in flight"
            )));
        };
        f.replies[r] = Some(reply);
        f.calls[r] = calls;
        if f.replies.iter().all(|x| x.is_some()) {
            let mut f = self.inflight.remove(&g).expect("present");
            let rs: Vec<_> = std::mem::take(&mut f.replies)
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
            if f.traced {
                let calls = std::mem::take(&mut f.calls);
                self.trace_step((f.dispatch, f.plan.group), calls, &rs, &rec);
            }
            self.steps.push(rec);
            self.actions
                .extend(self.s.sched.step_done(&f.plan, &outs, end_s));
        }
        Ok(())
    }
}

impl Loop<'_> {
    /// Keeps a traced step's calls in the book, times from the run's start.
    fn trace_step(
        &mut self,
        (dispatch, group): (u64, usize),
        calls: Vec<Vec<TracedCall>>,
        rs: &[RankReply],
        rec: &StepRecord,
    ) {
        let first_rank = self.s.first_rank[group];
        let ranks = rs
            .iter()
            .zip(calls)
            .enumerate()
            .map(|(r, (x, calls))| RankTrace {
                rank: first_rank + r,
                start_us: 1e6 * self.secs(x.1),
                end_us: 1e6 * self.secs(x.2),
                calls: crate::trace::to_run_us(calls, self.trace_off_s),
            })
            .collect();
        let requests = rec
            .ranks
            .iter()
            .map(|r| r.prefill.len() + r.decode.len())
            .sum();
        if let Some(b) = &mut self.book {
            b.add(StepTrace {
                dispatch,
                index: rec.index,
                kind: rec.kind.clone(),
                requests,
                ranks,
            });
        }
    }
}

/// The next message within `wait`: spinning, by polling (no wake-up latency when it
/// comes); sleeping, by blocking.
fn recv_within<T>(
    rx: &std::sync::mpsc::Receiver<T>,
    wait: Duration,
    idle: IdleMode,
) -> Result<T, std::sync::mpsc::RecvTimeoutError> {
    use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
    if idle == IdleMode::Sleep {
        return rx.recv_timeout(wait);
    }
    let until = Instant::now() + wait;
    loop {
        match rx.try_recv() {
            Ok(r) => return Ok(r),
            Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
            Err(TryRecvError::Empty) if Instant::now() >= until => {
                return Err(RecvTimeoutError::Timeout)
            }
            Err(TryRecvError::Empty) => spin_pause(),
        }
    }
}

pub(crate) fn step_record(
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
