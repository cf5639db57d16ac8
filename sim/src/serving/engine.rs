//! The discrete-event simulation of the serving system.
//!
//! Entities: pools of DEP groups ("instances"); each group has `dep` ranks and steps
//! in lock-step (the slowest rank sets the step, as the cost model prices it). A
//! request is indivisible: it is placed on one rank of one group.
//!
//! Disaggregated flow: arrival -> prefill router picks an instance (prefix cache
//! lookup there decides cached vs uncached tokens) -> the instance's least-loaded rank
//! queues it -> chunked prefill steps -> decode router picks a decode rank -> the rank
//! admits it when it has a batch slot and KV room for input + output (reserved up
//! front, so decode never runs out of KV) -> KV transfer over the destination's link
//! (queued per destination rank) -> joins the running batch at the next step boundary
//! -> MTP decode steps emit 1 + accepted drafts tokens per step -> completion.
//! Decode is event-driven per request, not per token: when a request joins a batch its
//! number of decode steps is drawn from the MTP yield distribution (`mtp::MtpYield`),
//! and it finishes at the end of that step. A rank's running batch is kept as sums
//! per context piece (`CostModel::decode_context_breakpoints`), priced at the piece's
//! mean context, so a decode step costs O(ranks), not O(requests). A running
//! request's context is its input plus the expected yield of its steps so far.
//! Aggregated flow: the instance's rank reserves KV at arrival, runs prefill chunks and
//! decode in the same steps (priced as a prefill step plus a decode step).
//!
//! Simplifications, stated: the prefix cache counts cached tokens at lookup and adds a
//! prompt's blocks when its prefill finishes (blocks evicted in between still count);
//! the decode side's output KV is not written back to the prefill cache, so the next
//! turn of a session recomputes the previous output; transfers occupy only the
//! destination rank's ingress link.

use super::cache::PrefixCache;
use super::config::{DecodeRouter, Mode, PoolConfig, PrefillRank, PrefillRouter, ServingScenario};
use super::core::{ns_to_secs, secs_to_ns, stream, EventQueue, Nanos};
use super::mtp::MtpYield;
use super::report::*;
use super::stats::{Gauge, LogHistogram};
use super::workload::{Driver, Origin, WlEvent, WorkloadConfig, BLOCK_TOKENS};
use super::{PoolCost, SimError, TraceRecord};
use crate::cost::{Op, Phase, ReqSlice, StepCost, StepShape};
use crate::{Hardware, Model};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

const C_STEP_DONE: u8 = 0;
const C_TRANSFER_DONE: u8 = 1;
const C_WORKLOAD: u8 = 2;
const C_SAMPLE: u8 = 3;
const C_TRY_STEP: u8 = 4;

#[derive(Debug, Clone, Copy)]
enum Ev {
    StepDone(u32),
    TransferDone(u32),
    Workload(WlEvent),
    Sample,
    TryStep(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Prefill,
    Decode,
    Mixed,
}

struct Req {
    origin: Origin,
    arrival_ns: Nanos,
    measured: bool,
    input: u32,
    output: u32,
    /// The prompt's block identities, until its prefill is done.
    blocks: std::sync::Arc<Vec<u64>>,
    cached: u32,
    prefilled: u32,
    prefill_done: bool,
    prefill_group: u32,
    prefill_rank: u32,
    decode_group: u32,
    decode_rank: u32,
    kv_reserved: u64,
    generated: u32,
    first_token_ns: Option<Nanos>,
    last_token_ns: Nanos,
    admitted_ns: Nanos,
    est_prefill_s: f64,
    /// In a decode batch: since the group's decode step `join_step`, in context piece
    /// `piece`.
    running: bool,
    join_step: u64,
    piece: u32,
}

impl Req {
    fn uncached(&self) -> u32 {
        self.input - self.cached
    }
    fn kv_need(&self) -> u64 {
        self.input as u64 + self.output as u64
    }
}

/// Running requests of one context piece on a rank, as sums.
#[derive(Debug, Default, Clone, Copy)]
struct Piece {
    n: u64,
    input: u64,
    join_steps: u64,
}

impl Piece {
    /// Context tokens of the piece's requests at decode step `step`: inputs plus the
    /// expected yield (`mu` tokens per step) of the steps each has run.
    fn context(&self, step: u64, mu: f64) -> u64 {
        self.input + (mu * (self.n * step - self.join_steps) as f64).round() as u64
    }
}

/// A rank's running decode batch.
#[derive(Debug, Default, Clone)]
struct DecodeSet {
    n: u32,
    measured: u32,
    /// Input + output of the running requests (their KV reservation).
    reserved: u64,
    pieces: Vec<Piece>,
}

impl DecodeSet {
    fn context(&self, step: u64, mu: f64) -> u64 {
        self.pieces.iter().map(|p| p.context(step, mu)).sum()
    }
}

#[derive(Default)]
struct Rank {
    prefill_q: VecDeque<u32>,
    prefill_tokens: u64,
    pending: VecDeque<u32>,
    transferring: u32,
    joining: VecDeque<u32>,
    dec: DecodeSet,
    kv_reserved: u64,
    /// KV tokens held by requests not in the running batch (transferred or being
    /// prefilled in place); the batch's own use is estimated from `dec`.
    kv_held: u64,
    link_free_ns: Nanos,
    /// Estimated seconds of queued prefill work (`PrefillRank::LeastCost`).
    est_load_s: f64,
}

impl Rank {
    fn requests(&self) -> usize {
        self.prefill_q.len()
            + self.pending.len()
            + self.transferring as usize
            + self.joining.len()
            + self.dec.n as usize
    }

    /// KV tokens in use: held, plus the running batch's context (at most what it
    /// reserved).
    fn kv_used(&self, step: u64, mu: f64) -> u64 {
        self.kv_held + self.dec.context(step, mu).min(self.dec.reserved)
    }
}

struct Group {
    pool: usize,
    gpu_base: u64,
    ranks: Vec<Rank>,
    busy: bool,
    try_pending: bool,
    cache: Option<PrefixCache>,
    step_prefill: Vec<(u32, u32, u32)>,
    decode_in_step: bool,
    /// Index of the current (or next) decode step.
    dstep: u64,
    /// (last decode step, slot) of the running requests, soonest first.
    finishing: BinaryHeap<Reverse<(u64, u32)>>,
    /// Requests that joined the current decode step (their first token comes at its end).
    joined: Vec<u32>,
    last_decode_end_ns: Nanos,
    /// The first decode step that ended inside the measured window.
    window_first_step: Option<u64>,
}

#[derive(Default)]
struct PoolStats {
    steps: u64,
    step_s: f64,
    balanced_s: f64,
    op_s: [f64; crate::cost::OPS],
    busy_ns: u64,
    cached_tokens: u64,
    uncached_tokens: u64,
    output_tokens: u64,
    input_tokens_looked_up: u64,
    cache_hit_tokens: u64,
    host_hit_tokens: u64,
    kv_used: Gauge,
    kv_used_max: f64,
    batch: Gauge,
    batch_max: f64,
    queue: Gauge,
}

struct Pool<'a> {
    name: &'static str,
    role: Role,
    cfg: PoolConfig,
    cost: &'a dyn PoolCost,
    groups: std::ops::Range<u32>,
    kv_cap: u64,
    /// The cost model's decode context breakpoints (pieces = breakpoints + 1).
    breakpoints: Vec<u64>,
    waiting: u64,
    rr: u64,
    stats: PoolStats,
}

/// Inputs of one run.
pub struct SimInput<'a> {
    pub scenario: &'a ServingScenario,
    pub workload: &'a WorkloadConfig,
    pub hardware: &'a Hardware,
    pub model: &'a Model,
    /// Prices prefill steps (unused in aggregated mode).
    pub prefill_cost: &'a dyn PoolCost,
    /// Prices decode steps; in aggregated mode, every step of the mixed pool.
    pub decode_cost: &'a dyn PoolCost,
    /// Records for a `[trace]` workload (ignored otherwise).
    pub trace: &'a [TraceRecord],
}

struct Metrics {
    ttft_ms: LogHistogram,
    tpot_ms: LogHistogram,
    itl_ms: LogHistogram,
    e2e_ms: LogHistogram,
    user_tok_s: LogHistogram,
    transfer_ms: LogHistogram,
    completed: u64,
    dropped: u64,
    good: u64,
    good_tokens: u64,
    transfers: u64,
    transfer_bytes: f64,
    mtp_steps: u64,
    mtp_tokens: u64,
}

struct Sim<'a> {
    sc: &'a ServingScenario,
    hw: &'a Hardware,
    model: &'a Model,
    q: EventQueue<Ev>,
    now: Nanos,
    warmup_ns: Nanos,
    end_ns: Nanos,
    min_step_ns: Nanos,
    pools: Vec<Pool<'a>>,
    groups: Vec<Group>,
    reqs: Vec<Option<Req>>,
    free: Vec<u32>,
    live: u64,
    driver: Driver<'a>,
    wl_out: Vec<(Nanos, WlEvent)>,
    mtp_rng: ChaCha8Rng,
    draft_tokens: u32,
    mtp: MtpYield,
    /// Expected tokens per request per decode step.
    mu: f64,
    kv_bytes_per_token: f64,
    domain_gpus: u64,
    acc: Accounting,
    m: Metrics,
    slices: Vec<Vec<ReqSlice>>,
    /// Scratch: prefill requests that finished in the current step.
    finished: Vec<(u32, u32)>,
}

/// Runs one simulation; see the module docs for the model.
pub fn run(input: &SimInput<'_>, seed: u64) -> Result<Report, SimError> {
    let sc = input.scenario;
    let mut problems = sc.problems();
    problems.extend(input.workload.problems());
    if !problems.is_empty() {
        return Err(SimError::InvalidScenario(problems));
    }
    let mut sim = Sim::new(input, seed)?;
    sim.run_loop()?;
    Ok(sim.report(input, seed))
}

impl<'a> Sim<'a> {
    fn new(input: &SimInput<'a>, seed: u64) -> Result<Self, SimError> {
        let sc = input.scenario;
        let mut pools = Vec::new();
        let mut groups = Vec::new();
        let mut gpu = 0u64;
        let (draft_tokens, acceptance) = {
            let m = input.model.mtp.as_ref();
            let n = sc
                .serving
                .mtp
                .draft_tokens
                .or(m.map(|m| m.draft_tokens))
                .unwrap_or(0);
            let a = sc
                .serving
                .mtp
                .acceptance
                .clone()
                .or(m.map(|m| m.acceptance.clone()))
                .unwrap_or_default();
            (n, a)
        };
        if draft_tokens as usize > acceptance.len() {
            return Err(SimError::InvalidScenario(vec![format!(
                "serving.mtp: {draft_tokens} draft tokens but {} acceptance rates (set serving.mtp.acceptance or model.mtp.acceptance)",
                acceptance.len()
            )]));
        }
        let specs: Vec<(&'static str, Role, &PoolConfig, &'a dyn PoolCost)> = match sc.serving.mode
        {
            Mode::Disaggregated => vec![
                (
                    "prefill",
                    Role::Prefill,
                    &sc.serving.prefill,
                    input.prefill_cost,
                ),
                (
                    "decode",
                    Role::Decode,
                    &sc.serving.decode,
                    input.decode_cost,
                ),
            ],
            Mode::Aggregated => vec![("mixed", Role::Mixed, &sc.serving.decode, input.decode_cost)],
            Mode::PrefillOnly => vec![(
                "prefill",
                Role::Prefill,
                &sc.serving.prefill,
                input.prefill_cost,
            )],
        };
        for (name, role, cfg, cost) in specs {
            let kv_cap = cfg
                .kv_capacity_tokens_per_rank
                .unwrap_or_else(|| cost.kv_capacity_tokens_per_rank())
                .max(1);
            let start = groups.len() as u32;
            let breakpoints = cost.decode_context_breakpoints(draft_tokens);
            for _ in 0..cfg.instances {
                let cache = (role != Role::Decode).then(|| {
                    let hbm_tokens = cfg
                        .prefix_cache_tokens
                        .unwrap_or(kv_cap.saturating_mul(cfg.dep as u64));
                    PrefixCache::new(
                        hbm_tokens / BLOCK_TOKENS,
                        cfg.host_cache_tokens / BLOCK_TOKENS,
                    )
                });
                groups.push(Group {
                    pool: pools.len(),
                    gpu_base: gpu,
                    ranks: (0..cfg.dep)
                        .map(|_| Rank {
                            dec: DecodeSet {
                                pieces: vec![Piece::default(); breakpoints.len() + 1],
                                ..DecodeSet::default()
                            },
                            ..Rank::default()
                        })
                        .collect(),
                    busy: false,
                    try_pending: false,
                    cache,
                    step_prefill: Vec::new(),
                    decode_in_step: false,
                    dstep: 0,
                    finishing: BinaryHeap::new(),
                    joined: Vec::new(),
                    last_decode_end_ns: 0,
                    window_first_step: None,
                });
                gpu += cfg.dep as u64;
            }
            pools.push(Pool {
                name,
                role,
                cfg: cfg.clone(),
                cost,
                groups: start..groups.len() as u32,
                kv_cap,
                breakpoints,
                waiting: 0,
                rr: 0,
                stats: PoolStats::default(),
            });
        }
        let mtp = MtpYield::new(&acceptance[..draft_tokens as usize]);
        let kvb = input.model.kv.bytes_per_token;
        if !(kvb.is_finite() && kvb >= 0.0) {
            return Err(SimError::InvalidScenario(vec![
                "model.kv.bytes_per_token: must be >= 0".into(),
            ]));
        }
        let driver = Driver::new(input.workload, input.trace, stream(seed, "workload"))?;
        let max_dep = pools.iter().map(|p| p.cfg.dep as usize).max().unwrap_or(1);
        Ok(Sim {
            sc,
            hw: input.hardware,
            model: input.model,
            q: EventQueue::new(),
            now: 0,
            warmup_ns: secs_to_ns(sc.warmup_s),
            end_ns: secs_to_ns(sc.duration_s),
            min_step_ns: secs_to_ns(sc.limits.min_step_s).max(1),
            pools,
            groups,
            reqs: Vec::new(),
            free: Vec::new(),
            live: 0,
            driver,
            wl_out: Vec::new(),
            mtp_rng: stream(seed, "mtp"),
            draft_tokens,
            mu: mtp.mean_tokens_per_step(),
            mtp,
            kv_bytes_per_token: kvb,
            domain_gpus: sc
                .serving
                .kv_transfer
                .domain_gpus
                .unwrap_or(input.hardware.nvlink_domain_gpus)
                .max(1) as u64,
            acc: Accounting::default(),
            m: Metrics {
                ttft_ms: LogHistogram::new(),
                tpot_ms: LogHistogram::new(),
                itl_ms: LogHistogram::new(),
                e2e_ms: LogHistogram::new(),
                user_tok_s: LogHistogram::new(),
                transfer_ms: LogHistogram::new(),
                completed: 0,
                dropped: 0,
                good: 0,
                good_tokens: 0,
                transfers: 0,
                transfer_bytes: 0.0,
                mtp_steps: 0,
                mtp_tokens: 0,
            },
            slices: vec![Vec::new(); max_dep],
            finished: Vec::new(),
        })
    }

    fn in_window(&self) -> bool {
        self.now > self.warmup_ns && self.now <= self.end_ns
    }

    fn flush_workload(&mut self) {
        for (t, ev) in self.wl_out.drain(..) {
            self.q.push(t.max(self.now), C_WORKLOAD, Ev::Workload(ev));
        }
    }

    fn kick(&mut self, g: u32) {
        let grp = &mut self.groups[g as usize];
        if !grp.busy && !grp.try_pending {
            grp.try_pending = true;
            self.q.push(self.now, C_TRY_STEP, Ev::TryStep(g));
        }
    }

    fn run_loop(&mut self) -> Result<(), SimError> {
        let mut out = std::mem::take(&mut self.wl_out);
        self.driver.start(&mut out);
        self.wl_out = out;
        self.flush_workload();
        self.q.push(self.warmup_ns.max(1), C_SAMPLE, Ev::Sample);
        while let Some((key, ev)) = self.q.pop() {
            if key.time_ns > self.end_ns {
                break;
            }
            if key.time_ns < self.now {
                return Err(SimError::Invariant(format!(
                    "time ran backwards: event at {} ns after {} ns",
                    key.time_ns, self.now
                )));
            }
            self.now = key.time_ns;
            self.acc.events += 1;
            if self.acc.events > self.sc.limits.max_events {
                return Err(SimError::EventLimit {
                    limit: self.sc.limits.max_events,
                    at_s: ns_to_secs(self.now),
                });
            }
            match ev {
                Ev::Workload(w) => self.on_workload(w),
                Ev::TryStep(g) => {
                    self.groups[g as usize].try_pending = false;
                    self.try_step(g)?;
                }
                Ev::StepDone(g) => self.on_step_done(g)?,
                Ev::TransferDone(slot) => self.on_transfer_done(slot),
                Ev::Sample => self.on_sample(),
            }
        }
        self.acc.last_event_s = ns_to_secs(self.now);
        Ok(())
    }

    fn alloc(&mut self, r: Req) -> u32 {
        self.live += 1;
        match self.free.pop() {
            Some(s) => {
                self.reqs[s as usize] = Some(r);
                s
            }
            None => {
                self.reqs.push(Some(r));
                (self.reqs.len() - 1) as u32
            }
        }
    }

    /// Takes a request out of its slot (the counterpart of `alloc`).
    fn release(&mut self, slot: u32) -> Req {
        let req = self.reqs[slot as usize].take().expect("live request");
        self.free.push(slot);
        self.live -= 1;
        req
    }

    fn req(&self, slot: u32) -> &Req {
        self.reqs[slot as usize].as_ref().expect("live request")
    }

    fn req_mut(&mut self, slot: u32) -> &mut Req {
        self.reqs[slot as usize].as_mut().expect("live request")
    }

    fn on_workload(&mut self, w: WlEvent) {
        let mut out = std::mem::take(&mut self.wl_out);
        let nr = self.driver.on_event(self.now, w, &mut out);
        self.wl_out = out;
        self.flush_workload();
        let Some(nr) = nr else { return };
        self.acc.arrived += 1;
        self.acc.input_tokens_arrived += nr.input_tokens as u64;
        let measured = self.now >= self.warmup_ns;
        let entry = 0usize;
        if self.live >= self.sc.limits.max_live_requests
            || self.pools[entry].waiting >= self.pools[entry].cfg.max_queued_requests as u64
        {
            self.acc.dropped += 1;
            if measured {
                self.m.dropped += 1;
            }
            self.end_in_driver(nr.origin, false, 0);
            return;
        }
        let req = Req {
            origin: nr.origin,
            arrival_ns: self.now,
            measured,
            input: nr.input_tokens,
            output: nr.output_tokens,
            blocks: nr.blocks,
            cached: 0,
            prefilled: 0,
            prefill_done: false,
            prefill_group: 0,
            prefill_rank: 0,
            decode_group: 0,
            decode_rank: 0,
            kv_reserved: 0,
            generated: 0,
            first_token_ns: None,
            last_token_ns: 0,
            admitted_ns: 0,
            est_prefill_s: 0.0,
            running: false,
            join_step: 0,
            piece: 0,
        };
        let role = self.pools[entry].role;
        if role == Role::Mixed && req.kv_need() > self.pools[entry].kv_cap {
            self.acc.dropped += 1;
            if measured {
                self.m.dropped += 1;
            }
            self.end_in_driver(req.origin, false, 0);
            return;
        }
        let nr_prewarm = nr.prewarm_tokens;
        let slot = self.alloc(req);
        let g = self.route_prefill(entry, slot);
        // Prefix cache decides cached vs uncached tokens.
        let (hit_blocks, host_blocks) = {
            let blocks = std::mem::take(&mut self.req_mut(slot).blocks);
            if nr_prewarm > 0 {
                let n = ((nr_prewarm / BLOCK_TOKENS) as usize).min(blocks.len());
                if let Some(c) = self.groups[g as usize].cache.as_mut() {
                    c.insert(&blocks[..n]);
                }
            }
            let hit = self.groups[g as usize]
                .cache
                .as_mut()
                .map(|c| c.lookup(&blocks))
                .unwrap_or_default();
            self.req_mut(slot).blocks = blocks;
            (hit.blocks, hit.host_blocks)
        };
        let input = self.req(slot).input as u64;
        let cached = (hit_blocks * BLOCK_TOKENS).min(input - 1) as u32;
        {
            let st = &mut self.pools[entry].stats;
            if measured {
                st.input_tokens_looked_up += input;
                st.cache_hit_tokens += cached as u64;
                st.host_hit_tokens += (host_blocks * BLOCK_TOKENS).min(cached as u64);
            }
        }
        let est = if role == Role::Prefill && self.sc.router.prefill_rank == PrefillRank::LeastCost
        {
            self.estimate_prefill_s(entry, input - cached as u64, cached as u64)
        } else {
            0.0
        };
        let r = self.pick_rank_in_group(g, role);
        self.groups[g as usize].ranks[r as usize].est_load_s += est;
        let req = self.req_mut(slot);
        req.est_prefill_s = est;
        req.cached = cached;
        req.prefill_group = g;
        req.prefill_rank = r;
        self.pools[entry].waiting += 1;
        let rank = &mut self.groups[g as usize].ranks[r as usize];
        if role == Role::Mixed {
            rank.pending.push_back(slot);
            self.admit_mixed(g, r);
        } else {
            let uncached = self.req(slot).uncached() as u64;
            let rank = &mut self.groups[g as usize].ranks[r as usize];
            rank.prefill_q.push_back(slot);
            rank.prefill_tokens += uncached;
        }
        self.kick(g);
    }

    fn end_in_driver(&mut self, origin: Origin, completed: bool, context: u64) {
        let mut out = std::mem::take(&mut self.wl_out);
        self.driver
            .on_request_end(self.now, origin, completed, context, &mut out);
        self.wl_out = out;
        self.flush_workload();
    }

    fn group_prefill_load(&self, g: u32) -> u64 {
        self.groups[g as usize]
            .ranks
            .iter()
            .map(|r| r.prefill_tokens + r.dec.n as u64)
            .sum()
    }

    fn route_prefill(&mut self, pool: usize, slot: u32) -> u32 {
        let range = self.pools[pool].groups.clone();
        let n = range.len() as u64;
        match self.sc.router.prefill {
            PrefillRouter::RoundRobin => {
                let p = &mut self.pools[pool];
                let g = range.start + (p.rr % n) as u32;
                p.rr += 1;
                g
            }
            PrefillRouter::LeastLoad => range
                .min_by_key(|&g| (self.group_prefill_load(g), g))
                .unwrap_or(0),
            PrefillRouter::PrefixAffinity => {
                // Least expected work: the tokens queued ahead plus this request's own
                // uncached tokens there (weighted, see `prefill_recompute_weight`). A
                // long cached context keeps a session on its instance; a shared system
                // prompt alone does not pile every session onto the first instance
                // that cached it.
                let req = self.req(slot);
                let input = req.input as u64;
                let blocks = &req.blocks;
                let w = self.sc.router.prefill_recompute_weight;
                let mut best = (f64::INFINITY, range.start);
                for g in range {
                    let hit = self.groups[g as usize]
                        .cache
                        .as_ref()
                        .map(|c| c.peek(blocks))
                        .unwrap_or(0);
                    let uncached = input - (hit * BLOCK_TOKENS).min(input - 1);
                    let work = self.group_prefill_load(g) as f64 + w * uncached as f64;
                    if work < best.0 {
                        best = (work, g);
                    }
                }
                best.1
            }
        }
    }

    fn pick_rank_in_group(&self, g: u32, role: Role) -> u32 {
        let grp = &self.groups[g as usize];
        let policy = self.sc.router.prefill_rank;
        let mut best = (f64::INFINITY, 0u32);
        for (r, rk) in grp.ranks.iter().enumerate() {
            let load = match (role, policy) {
                (Role::Mixed, _) | (_, PrefillRank::LeastRequests) => rk.requests() as f64,
                (_, PrefillRank::LeastTokens) => rk.prefill_tokens as f64,
                (_, PrefillRank::LeastCost) => rk.est_load_s,
            };
            if load < best.0 {
                best = (load, r as u32);
            }
        }
        best.1
    }

    /// The cost model's time for this prefill alone on one rank of the pool's group.
    fn estimate_prefill_s(&mut self, pool: usize, uncached: u64, cached: u64) -> f64 {
        let dep = self.pools[pool].cfg.dep as usize;
        for s in &mut self.slices[..dep] {
            s.clear();
        }
        self.slices[0].push(ReqSlice {
            new_tokens: uncached.min(u32::MAX as u64) as u32,
            context_tokens: cached,
            count: 1,
        });
        let c = self.pools[pool].cost.step(&StepShape {
            phase: Phase::Prefill,
            ranks: &self.slices[..dep],
            draft_tokens: 0,
        });
        if c.step_s.is_finite() && c.step_s > 0.0 {
            c.step_s
        } else {
            0.0
        }
    }

    /// Mixed pool: reserve KV for waiting requests in order and queue their prefill.
    fn admit_mixed(&mut self, g: u32, r: u32) {
        let pool = self.groups[g as usize].pool;
        let cap = self.pools[pool].kv_cap;
        loop {
            let rank = &self.groups[g as usize].ranks[r as usize];
            let Some(&slot) = rank.pending.front() else {
                break;
            };
            let need = self.req(slot).kv_need();
            if rank.kv_reserved + need > cap {
                break;
            }
            let uncached = self.req(slot).uncached() as u64;
            let cached = self.req(slot).cached as u64;
            let rank = &mut self.groups[g as usize].ranks[r as usize];
            rank.pending.pop_front();
            rank.kv_reserved += need;
            rank.kv_held += cached;
            rank.prefill_q.push_back(slot);
            rank.prefill_tokens += uncached;
            self.req_mut(slot).kv_reserved = need;
            self.note_kv(g, r);
        }
    }

    fn note_kv(&mut self, g: u32, r: u32) {
        let grp = &self.groups[g as usize];
        let cap = self.pools[grp.pool].kv_cap as f64;
        let rank = &grp.ranks[r as usize];
        let used = rank.kv_used(grp.dstep, self.mu);
        self.acc.kv_peak_used_fraction = self.acc.kv_peak_used_fraction.max(used as f64 / cap);
        self.acc.kv_peak_reserved_fraction = self
            .acc
            .kv_peak_reserved_fraction
            .max(rank.kv_reserved as f64 / cap);
    }

    fn try_step(&mut self, g: u32) -> Result<(), SimError> {
        if self.groups[g as usize].busy {
            return Ok(());
        }
        let pool_i = self.groups[g as usize].pool;
        let role = self.pools[pool_i].role;
        let cfg = &self.pools[pool_i].cfg;
        let dep = cfg.dep as usize;
        let max_batch = cfg.max_batch_per_rank as usize;
        let chunk_tokens = cfg.chunk_tokens_per_rank;
        let max_prefill = cfg.max_prefill_requests_per_rank;
        // Requests whose KV arrived join the batch at the step boundary.
        if role != Role::Prefill {
            for r in 0..dep {
                while (self.groups[g as usize].ranks[r].dec.n as usize) < max_batch {
                    let Some(s) = self.groups[g as usize].ranks[r].joining.pop_front() else {
                        break;
                    };
                    self.join_decode(g, r, s);
                }
            }
        }
        let mut cost_total = StepCost::default();
        let mut any = false;
        // Prefill part.
        if role != Role::Decode {
            let mut work = std::mem::take(&mut self.groups[g as usize].step_prefill);
            work.clear();
            for r in 0..dep {
                self.slices[r].clear();
                let mut budget = chunk_tokens;
                let mut n = 0;
                for &slot in &self.groups[g as usize].ranks[r].prefill_q {
                    if budget == 0 || n >= max_prefill {
                        break;
                    }
                    let req = self.reqs[slot as usize].as_ref().expect("live request");
                    let remaining = req.uncached() - req.prefilled;
                    if remaining == 0 {
                        continue;
                    }
                    let chunk = remaining.min(budget);
                    self.slices[r].push(ReqSlice {
                        new_tokens: chunk,
                        context_tokens: req.cached as u64 + req.prefilled as u64,
                        count: 1,
                    });
                    work.push((r as u32, slot, chunk));
                    budget -= chunk;
                    n += 1;
                }
            }
            if !work.is_empty() {
                any = true;
                let c = self.pools[pool_i].cost.step(&StepShape {
                    phase: Phase::Prefill,
                    ranks: &self.slices[..dep],
                    draft_tokens: 0,
                });
                add_cost(&mut cost_total, &c);
            }
            self.groups[g as usize].step_prefill = work;
        }
        // Decode part: each piece of a rank's batch as (at most) two slices whose
        // contexts sum exactly to the piece's.
        let mut decode = false;
        if role != Role::Prefill {
            let step = self.groups[g as usize].dstep;
            for r in 0..dep {
                self.slices[r].clear();
                for p in &self.groups[g as usize].ranks[r].dec.pieces {
                    if p.n == 0 {
                        continue;
                    }
                    let total = p.context(step, self.mu);
                    let (mean, extra) = (total / p.n, total % p.n);
                    if extra > 0 {
                        self.slices[r].push(ReqSlice {
                            new_tokens: 1,
                            context_tokens: mean + 1,
                            count: extra as u32,
                        });
                    }
                    self.slices[r].push(ReqSlice {
                        new_tokens: 1,
                        context_tokens: mean,
                        count: (p.n - extra) as u32,
                    });
                }
                decode |= !self.slices[r].is_empty();
            }
            if decode {
                any = true;
                let c = self.pools[pool_i].cost.step(&StepShape {
                    phase: Phase::Decode,
                    ranks: &self.slices[..dep],
                    draft_tokens: self.draft_tokens,
                });
                add_cost(&mut cost_total, &c);
            }
        }
        self.groups[g as usize].decode_in_step = decode;
        if !any {
            return Ok(());
        }
        if !(cost_total.step_s.is_finite() && cost_total.step_s >= 0.0) {
            return Err(SimError::BadCost {
                pool: self.pools[pool_i].name,
                step_s: cost_total.step_s,
            });
        }
        let dur = secs_to_ns(cost_total.step_s).max(self.min_step_ns);
        let end = self.now.saturating_add(dur);
        if self.now >= self.warmup_ns && end <= self.end_ns {
            let st = &mut self.pools[pool_i].stats;
            st.steps += 1;
            st.step_s += cost_total.step_s;
            st.balanced_s += cost_total.balanced_step_s.min(cost_total.step_s);
            for (a, b) in st.op_s.iter_mut().zip(cost_total.op_s.iter()) {
                *a += *b;
            }
            st.busy_ns += dur;
        }
        self.groups[g as usize].busy = true;
        self.q.push(end, C_STEP_DONE, Ev::StepDone(g));
        Ok(())
    }

    /// A request joins rank `r`'s running batch at the group's current decode step:
    /// its steps are drawn now, and it finishes at the end of the last of them.
    fn join_decode(&mut self, g: u32, r: usize, slot: u32) {
        let pool = self.groups[g as usize].pool;
        let step = self.groups[g as usize].dstep;
        let (input, output, measured) = {
            let req = self.req(slot);
            (req.input as u64, req.output, req.measured)
        };
        let steps = self.mtp.steps_for(output, &mut self.mtp_rng) as u64;
        let piece = self.pools[pool]
            .breakpoints
            .partition_point(|&b| b <= input) as u32;
        let req = self.req_mut(slot);
        req.running = true;
        req.join_step = step;
        req.piece = piece;
        let grp = &mut self.groups[g as usize];
        let rank = &mut grp.ranks[r];
        rank.kv_held -= input;
        let d = &mut rank.dec;
        d.n += 1;
        d.measured += measured as u32;
        d.reserved += input + output as u64;
        let p = &mut d.pieces[piece as usize];
        p.n += 1;
        p.input += input;
        p.join_steps += step;
        grp.finishing.push(Reverse((step + steps - 1, slot)));
        grp.joined.push(slot);
    }

    fn on_step_done(&mut self, g: u32) -> Result<(), SimError> {
        self.groups[g as usize].busy = false;
        let pool_i = self.groups[g as usize].pool;
        let role = self.pools[pool_i].role;
        let in_window = self.in_window();
        // Prefill progress.
        let work = std::mem::take(&mut self.groups[g as usize].step_prefill);
        let mut finished = std::mem::take(&mut self.finished);
        finished.clear();
        for &(r, slot, chunk) in &work {
            let req = self.req_mut(slot);
            req.prefilled += chunk;
            let done = req.prefilled == req.uncached();
            let cached = req.cached as u64;
            self.groups[g as usize].ranks[r as usize].prefill_tokens -= chunk as u64;
            self.acc.uncached_tokens_prefilled += chunk as u64;
            if in_window {
                self.pools[pool_i].stats.uncached_tokens += chunk as u64;
            }
            if role == Role::Mixed {
                self.groups[g as usize].ranks[r as usize].kv_held += chunk as u64;
            }
            if done {
                self.acc.cached_tokens_credited += cached;
                if in_window {
                    self.pools[pool_i].stats.cached_tokens += cached;
                }
                finished.push((r, slot));
            }
        }
        self.groups[g as usize].step_prefill = work;
        for &(r, slot) in &finished {
            let est = self.req(slot).est_prefill_s;
            let rank = &mut self.groups[g as usize].ranks[r as usize];
            rank.prefill_q.retain(|&s| s != slot);
            rank.est_load_s = (rank.est_load_s - est).max(0.0);
            self.pools[pool_i].waiting -= 1;
            let blocks = std::mem::take(&mut self.req_mut(slot).blocks);
            // Only full blocks are reusable: a partial last block's identity would
            // also name the full block a longer prompt has there.
            // The whole prompt is written (the cached prefix was just used too, so it
            // is stamped again; a radix walk, not a per-block cost).
            let full = ((self.req(slot).input as u64 / BLOCK_TOKENS) as usize).min(blocks.len());
            if let Some(c) = self.groups[g as usize].cache.as_mut() {
                c.insert(&blocks[..full]);
            }
            // The blocks are no longer needed: dropping this share lets the session
            // extend its list in place for the next turn.
            drop(blocks);
            self.req_mut(slot).prefill_done = true;
            if role == Role::Mixed {
                let req = self.req_mut(slot);
                req.decode_group = g;
                req.decode_rank = r;
                self.groups[g as usize].ranks[r as usize]
                    .joining
                    .push_back(slot);
            } else if self.sc.serving.mode == Mode::PrefillOnly {
                self.complete_prefill_only(slot)?;
            } else {
                self.route_decode(slot);
            }
        }
        self.finished = finished;
        if role == Role::Mixed {
            for r in 0..self.groups[g as usize].ranks.len() as u32 {
                self.note_kv(g, r);
            }
        }
        // Decode progress: first tokens of the requests that joined this step, the
        // inter-token gap of every other measured request, and the requests whose
        // last step this was.
        if self.groups[g as usize].decode_in_step {
            let now = self.now;
            let grp = &mut self.groups[g as usize];
            let step = grp.dstep;
            if in_window && grp.window_first_step.is_none() {
                grp.window_first_step = Some(step);
            }
            let joined = std::mem::take(&mut grp.joined);
            let prev_end = grp.last_decode_end_ns;
            grp.last_decode_end_ns = now;
            let measured: u64 = grp.ranks.iter().map(|r| r.dec.measured as u64).sum();
            let mut joined_measured = 0u64;
            for &slot in &joined {
                let req = self.req_mut(slot);
                req.first_token_ns = Some(now);
                joined_measured += req.measured as u64;
            }
            self.groups[g as usize].joined = joined;
            self.groups[g as usize].joined.clear();
            if in_window {
                self.m
                    .itl_ms
                    .record_n((now - prev_end) as f64 / 1e6, measured - joined_measured);
            }
            while let Some(&Reverse((last, slot))) = self.groups[g as usize].finishing.peek() {
                if last > step {
                    break;
                }
                self.groups[g as usize].finishing.pop();
                self.finish(slot, g)?;
            }
            self.groups[g as usize].dstep += 1;
            let dep = self.groups[g as usize].ranks.len();
            for r in 0..dep as u32 {
                self.note_kv(g, r);
                if role == Role::Mixed {
                    self.admit_mixed(g, r);
                } else {
                    self.admit_decode(g, r);
                }
            }
        }
        self.kick(g);
        Ok(())
    }

    /// Decode steps a running request has completed, and how many of them ended in the
    /// measured window, with the group's step counter at `done_steps`.
    fn decode_steps(&self, req: &Req, done_steps: u64) -> (u64, u64) {
        let grp = &self.groups[req.decode_group as usize];
        let steps = done_steps - req.join_step;
        let in_window = grp
            .window_first_step
            .map_or(0, |w| done_steps.saturating_sub(w.max(req.join_step)));
        (steps, in_window)
    }

    /// Takes a running request out of its rank's batch; its `generated` tokens (of
    /// `steps` decode steps, `in_window` of them in the measured window) count as
    /// emitted, the window's share of them in the pool's throughput.
    fn leave_batch(&mut self, slot: u32, steps: u64, in_window: u64) {
        let (g, r, piece, input, output, generated, join, measured) = {
            let q = self.req(slot);
            (
                q.decode_group as usize,
                q.decode_rank as usize,
                q.piece as usize,
                q.input as u64,
                q.output as u64,
                q.generated as u64,
                q.join_step,
                q.measured,
            )
        };
        let pool = self.groups[g].pool;
        let d = &mut self.groups[g].ranks[r].dec;
        d.n -= 1;
        d.measured -= measured as u32;
        d.reserved -= input + output;
        let p = &mut d.pieces[piece];
        p.n -= 1;
        p.input -= input;
        p.join_steps -= join;
        self.req_mut(slot).running = false;
        self.acc.output_tokens_emitted += generated;
        self.m.mtp_steps += steps;
        self.m.mtp_tokens += generated;
        if steps > 0 {
            self.pools[pool].stats.output_tokens += generated * in_window / steps;
        }
    }

    /// Prefill-only mode: the request's prefill produced its first token; the faked
    /// decode side ends it there (its output tokens are not produced or counted, but
    /// its session continues as if they were).
    fn complete_prefill_only(&mut self, slot: u32) -> Result<(), SimError> {
        let req = self.release(slot);
        self.complete(&req, false);
        Ok(())
    }

    /// Counts a request that completed now (`decoded`: its output was produced; else
    /// the decode side was faked and its first token came with its prefill), records
    /// its latencies if it is measured, and tells its workload.
    fn complete(&mut self, req: &Req, decoded: bool) {
        self.acc.completed += 1;
        self.acc.input_tokens_completed += req.input as u64;
        let output = if decoded { req.output } else { 0 };
        self.acc.output_tokens_completed += output as u64;
        if req.measured && self.now <= self.end_ns {
            let first = if decoded {
                req.first_token_ns.unwrap_or(self.now)
            } else {
                self.now
            };
            let ttft_ms = (first - req.arrival_ns) as f64 / 1e6;
            let e2e_ms = (self.now - req.arrival_ns) as f64 / 1e6;
            self.m.ttft_ms.record(ttft_ms);
            self.m.e2e_ms.record(e2e_ms);
            let mut tpot_ms = 0.0;
            if output > 1 {
                let span_ms = (req.last_token_ns - first) as f64 / 1e6;
                tpot_ms = span_ms / (output - 1) as f64;
                self.m.tpot_ms.record(tpot_ms);
                if span_ms > 0.0 {
                    self.m
                        .user_tok_s
                        .record((output - 1) as f64 / (span_ms / 1e3));
                }
            }
            self.m.completed += 1;
            if ttft_ms <= self.sc.slo.ttft_ms && tpot_ms <= self.sc.slo.tpot_ms {
                self.m.good += 1;
                self.m.good_tokens += req.input as u64 + output as u64;
            }
        }
        self.end_in_driver(req.origin, true, req.input as u64 + req.output as u64);
    }

    /// A request's last decode step ended now.
    fn finish(&mut self, slot: u32, g: u32) -> Result<(), SimError> {
        let done_steps = self.groups[g as usize].dstep + 1;
        let (steps, in_window) = self.decode_steps(self.req(slot), done_steps);
        let now = self.now;
        let req = self.req_mut(slot);
        req.generated = req.output;
        req.last_token_ns = now;
        let r = req.decode_rank;
        self.leave_batch(slot, steps, in_window);
        let req = self.release(slot);
        if req.generated != req.output || !req.prefill_done || req.decode_group != g {
            return Err(SimError::Invariant(format!(
                "request finished with {} of {} output tokens (prefill done: {}, group {} of {})",
                req.generated, req.output, req.prefill_done, g, req.decode_group
            )));
        }
        let rank = &mut self.groups[g as usize].ranks[r as usize];
        rank.kv_reserved -= req.kv_reserved;
        self.complete(&req, true);
        Ok(())
    }

    fn route_decode(&mut self, slot: u32) {
        let pool_i = 1;
        let need = self.req(slot).kv_need();
        if need > self.pools[pool_i].kv_cap
            || self.pools[pool_i].waiting >= self.pools[pool_i].cfg.max_queued_requests as u64
        {
            let req = self.release(slot);
            self.acc.dropped += 1;
            self.acc.input_tokens_dropped_after_prefill += req.input as u64;
            if req.measured {
                self.m.dropped += 1;
            }
            self.end_in_driver(req.origin, false, 0);
            return;
        }
        let groups = self.pools[pool_i].groups.clone();
        let dep = self.pools[pool_i].cfg.dep;
        let total = groups.len() as u64 * dep as u64;
        let (g, r) = match self.sc.router.decode {
            DecodeRouter::RoundRobin => {
                let i = self.pools[pool_i].rr % total;
                self.pools[pool_i].rr += 1;
                (
                    groups.start + (i / dep as u64) as u32,
                    (i % dep as u64) as u32,
                )
            }
            DecodeRouter::LeastRequests | DecodeRouter::LeastTokens => {
                let by_tokens = self.sc.router.decode == DecodeRouter::LeastTokens;
                let mut best = (u64::MAX, groups.start, 0u32);
                for g in groups.clone() {
                    for (r, rk) in self.groups[g as usize].ranks.iter().enumerate() {
                        let load = if by_tokens {
                            rk.kv_reserved
                                + rk.pending
                                    .iter()
                                    .map(|&s| self.req(s).kv_need())
                                    .sum::<u64>()
                        } else {
                            rk.requests() as u64
                        };
                        if load < best.0 {
                            best = (load, g, r as u32);
                        }
                    }
                }
                (best.1, best.2)
            }
        };
        let req = self.req_mut(slot);
        req.decode_group = g;
        req.decode_rank = r;
        self.pools[pool_i].waiting += 1;
        self.groups[g as usize].ranks[r as usize]
            .pending
            .push_back(slot);
        self.admit_decode(g, r);
    }

    /// Decode rank admits waiting requests in order while it has a batch slot and KV
    /// room; each admitted request's KV transfer starts on the rank's ingress link.
    fn admit_decode(&mut self, g: u32, r: u32) {
        let pool_i = self.groups[g as usize].pool;
        if self.pools[pool_i].role != Role::Decode {
            return;
        }
        let cap = self.pools[pool_i].kv_cap;
        let max_batch = self.pools[pool_i].cfg.max_batch_per_rank as usize;
        let kt = &self.sc.serving.kv_transfer;
        loop {
            let rank = &self.groups[g as usize].ranks[r as usize];
            let Some(&slot) = rank.pending.front() else {
                break;
            };
            let in_batch = rank.dec.n as usize + rank.joining.len() + rank.transferring as usize;
            let need = self.req(slot).kv_need();
            if in_batch >= max_batch || rank.kv_reserved + need > cap {
                break;
            }
            let (input, src_gpu) = {
                let req = self.req(slot);
                (
                    req.input,
                    self.groups[req.prefill_group as usize].gpu_base + req.prefill_rank as u64,
                )
            };
            let dst_gpu = self.groups[g as usize].gpu_base + r as u64;
            let link = if src_gpu / self.domain_gpus == dst_gpu / self.domain_gpus {
                &self.hw.nvlink
            } else {
                &self.hw.scaleout
            };
            let bytes = self.kv_bytes_per_token * input as f64;
            let bw = (link.bytes_per_s * kt.link_efficiency).max(1.0);
            let serial = secs_to_ns(bytes / bw);
            let rank = &mut self.groups[g as usize].ranks[r as usize];
            rank.pending.pop_front();
            rank.kv_reserved += need;
            rank.kv_held += input as u64;
            rank.transferring += 1;
            let start = rank.link_free_ns.max(self.now);
            rank.link_free_ns = start.saturating_add(serial);
            let done = rank
                .link_free_ns
                .saturating_add(secs_to_ns(link.latency_s + kt.setup_s));
            self.pools[pool_i].waiting -= 1;
            let now = self.now;
            let req = self.req_mut(slot);
            req.kv_reserved = need;
            req.admitted_ns = now;
            self.m.transfers += 1;
            self.m.transfer_bytes += bytes;
            if self.now >= self.warmup_ns {
                self.m.transfer_ms.record((done - self.now) as f64 / 1e6);
            }
            self.note_kv(g, r);
            self.q.push(done, C_TRANSFER_DONE, Ev::TransferDone(slot));
        }
    }

    fn on_transfer_done(&mut self, slot: u32) {
        let (g, r) = {
            let req = self.req(slot);
            (req.decode_group, req.decode_rank)
        };
        let rank = &mut self.groups[g as usize].ranks[r as usize];
        rank.transferring -= 1;
        rank.joining.push_back(slot);
        self.kick(g);
    }

    fn on_sample(&mut self) {
        for pi in 0..self.pools.len() {
            let cap = self.pools[pi].kv_cap as f64;
            let role = self.pools[pi].role;
            let mut queue = 0u64;
            let mut used = Gauge::default();
            let mut batch = Gauge::default();
            for g in self.pools[pi].groups.clone() {
                let step = self.groups[g as usize].dstep;
                for rk in &self.groups[g as usize].ranks {
                    queue += (rk.prefill_q.len() + rk.pending.len()) as u64;
                    used.record(rk.kv_used(step, self.mu) as f64 / cap);
                    batch.record(match role {
                        Role::Prefill => rk.prefill_q.len() as f64,
                        _ => rk.dec.n as f64,
                    });
                }
            }
            let st = &mut self.pools[pi].stats;
            st.queue.record(queue as f64);
            // Per-pool gauges: mean over ranks, max over ranks.
            st.kv_used.record(used.mean());
            st.kv_used_max = st.kv_used_max.max(used.max());
            st.batch.record(batch.mean());
            st.batch_max = st.batch_max.max(batch.max());
        }
        let next = self
            .now
            .saturating_add(secs_to_ns(self.sc.limits.sample_interval_s).max(1));
        if next <= self.end_ns {
            self.q.push(next, C_SAMPLE, Ev::Sample);
        }
    }

    fn report(mut self, input: &SimInput<'_>, seed: u64) -> Report {
        // Requests still decoding: the expected yield of the steps they ran.
        let running: Vec<u32> = (0..self.reqs.len() as u32)
            .filter(|&s| self.reqs[s as usize].as_ref().is_some_and(|q| q.running))
            .collect();
        for slot in running {
            let q = self.req(slot);
            let done_steps = self.groups[q.decode_group as usize].dstep;
            let (steps, in_window) = self.decode_steps(q, done_steps);
            let generated =
                ((self.mu * steps as f64).round() as u64).min((q.output as u64).saturating_sub(1));
            self.req_mut(slot).generated = generated as u32;
            self.leave_batch(slot, steps, in_window);
        }
        // In-flight accounting.
        for req in self.reqs.iter().flatten() {
            self.acc.in_flight_end += 1;
            self.acc.input_tokens_in_flight_progress += req.prefilled as u64
                + if req.prefill_done {
                    req.cached as u64
                } else {
                    0
                };
            self.acc.output_tokens_in_flight += req.generated as u64;
        }
        let sc = self.sc;
        let measured_s = ns_to_secs(self.end_ns - self.warmup_ns).max(1e-9);
        let gpus = sc.gpus();
        let mut total = Throughput::default();
        let mut pools = Vec::new();
        for p in &self.pools {
            let st = &p.stats;
            let pg = p.cfg.gpus().max(1) as f64;
            let tp = throughput(
                st.cached_tokens,
                st.uncached_tokens,
                st.output_tokens,
                pg * measured_s,
            );
            total.cached_input += st.cached_tokens as f64;
            total.uncached_input += st.uncached_tokens as f64;
            total.output += st.output_tokens as f64;
            let op_sum: f64 = st.op_s.iter().sum();
            let time_share_by_op: BTreeMap<String, f64> = Op::ALL
                .iter()
                .map(|op| {
                    (
                        op.key().to_string(),
                        if op_sum > 0.0 {
                            st.op_s[op.index()] / op_sum
                        } else {
                            0.0
                        },
                    )
                })
                .collect();
            pools.push(PoolReport {
                name: p.name.to_string(),
                instances: p.cfg.instances,
                dep: p.cfg.dep,
                gpus: p.cfg.gpus(),
                cost_model: p.cost.describe(),
                throughput_tok_s_per_gpu: tp,
                steps: st.steps,
                step_ms_mean: if st.steps > 0 {
                    1e3 * st.step_s / st.steps as f64
                } else {
                    0.0
                },
                time_share_by_op,
                dp_imbalance_loss: if st.step_s > 0.0 {
                    ((st.step_s - st.balanced_s) / st.step_s).max(0.0)
                } else {
                    0.0
                },
                busy_fraction: st.busy_ns as f64
                    / 1e9
                    / (measured_s * p.groups.len().max(1) as f64),
                kv_capacity_tokens_per_rank: p.kv_cap,
                kv_used_fraction: GaugeReport {
                    mean: st.kv_used.mean(),
                    max: st.kv_used_max,
                },
                batch_per_rank: GaugeReport {
                    mean: st.batch.mean(),
                    max: st.batch_max,
                },
                queue_requests: GaugeReport {
                    mean: st.queue.mean(),
                    max: st.queue.max(),
                },
                prefix_cache_hit_fraction: if st.input_tokens_looked_up > 0 {
                    st.cache_hit_tokens as f64 / st.input_tokens_looked_up as f64
                } else {
                    0.0
                },
                host_cache_hit_tokens: st.host_hit_tokens,
            });
        }
        let all = total.cached_input + total.uncached_input + total.output;
        let token_mix = if all > 0.0 {
            TokenMix {
                cached_input: total.cached_input / all,
                uncached_input: total.uncached_input / all,
                output: total.output / all,
            }
        } else {
            TokenMix::default()
        };
        let rack = throughput(
            total.cached_input as u64,
            total.uncached_input as u64,
            total.output as u64,
            gpus.max(1) as f64 * measured_s,
        );
        let prices = sc
            .price
            .token_prices()
            .unwrap_or(super::price::TokenPrices {
                cached_input_usd_per_m: 0.0,
                uncached_input_usd_per_m: 0.0,
                output_usd_per_m: 0.0,
            });
        let revenue = super::price::revenue_usd_per_gpu_hour(
            &prices,
            rack.cached_input,
            rack.uncached_input,
            rack.output,
        );
        let cost = self.hw.price.usd_per_gpu_hour(sc.price.basis);
        let per_m = |usd_per_h: f64, tok_s: f64| {
            if tok_s > 0.0 {
                usd_per_h / (tok_s * 3600.0 / 1e6)
            } else {
                0.0
            }
        };
        let _ = self.model;
        Report {
            scenario: sc.name.clone(),
            mode: sc.serving.mode,
            seed,
            gpus,
            duration_s: sc.duration_s,
            warmup_s: sc.warmup_s,
            measured_s,
            workload: input.workload.name.clone(),
            requests_completed: self.m.completed,
            requests_per_s: self.m.completed as f64 / measured_s,
            requests_dropped: self.m.dropped,
            throughput_tok_s_per_gpu: rack,
            token_mix,
            ttft_ms: self.m.ttft_ms.summary(),
            tpot_ms: self.m.tpot_ms.summary(),
            itl_ms: self.m.itl_ms.summary(),
            e2e_ms: self.m.e2e_ms.summary(),
            per_user_tok_s: self.m.user_tok_s.summary(),
            goodput: Goodput {
                slo_ttft_ms: sc.slo.ttft_ms,
                slo_tpot_ms: sc.slo.tpot_ms,
                requests_per_s: self.m.good as f64 / measured_s,
                fraction: if self.m.completed > 0 {
                    self.m.good as f64 / self.m.completed as f64
                } else {
                    0.0
                },
                tok_s_per_gpu: self.m.good_tokens as f64 / measured_s / gpus.max(1) as f64,
            },
            price_sheet: sc.price.sheet.key().to_string(),
            price_basis: sc.price.basis,
            revenue_usd_per_gpu_hour: revenue,
            cost_usd_per_gpu_hour: cost,
            margin_usd_per_gpu_hour: revenue - cost,
            usd_per_m_tokens: UsdPerMTokens {
                cost_all_tokens: per_m(cost, rack.total),
                cost_output_tokens: per_m(cost, rack.output),
                revenue_all_tokens: per_m(revenue, rack.total),
            },
            mtp_draft_tokens: self.draft_tokens,
            mtp_tokens_per_step: if self.m.mtp_steps > 0 {
                self.m.mtp_tokens as f64 / self.m.mtp_steps as f64
            } else {
                0.0
            },
            pools,
            kv_transfer: TransferReport {
                transfers: self.m.transfers,
                gib: self.m.transfer_bytes / (1u64 << 30) as f64,
                time_ms: self.m.transfer_ms.summary(),
            },
            accounting: self.acc.clone(),
        }
    }
}

fn throughput(cached: u64, uncached: u64, output: u64, gpu_s: f64) -> Throughput {
    let c = cached as f64 / gpu_s;
    let u = uncached as f64 / gpu_s;
    let o = output as f64 / gpu_s;
    Throughput {
        total: c + u + o,
        cached_input: c,
        uncached_input: u,
        output: o,
    }
}

fn add_cost(acc: &mut StepCost, c: &StepCost) {
    acc.step_s += c.step_s;
    acc.balanced_step_s += c.balanced_step_s;
    for (a, b) in acc.op_s.iter_mut().zip(c.op_s.iter()) {
        *a += *b;
    }
    acc.tokens_processed += c.tokens_processed;
}
