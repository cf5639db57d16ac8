//! The rack: its state, the event loop, and a request's arrival and end.
//!
//! Entities: pools of DEP groups ("instances"); each group has `dep` ranks and steps
//! in lock-step (the slowest rank sets the step, as the cost model prices it). A
//! request is indivisible: it is placed on one rank of one group.
//!
//! Disaggregated flow: arrival -> prefill router picks an instance (prefix cache
//! lookup there decides cached vs uncached tokens) -> the instance's least-loaded rank
//! queues it -> chunked prefill steps (`step`) -> decode router picks a decode rank ->
//! the rank admits it when it has a batch slot and KV room for input + output (reserved
//! up front, so decode never runs out of KV) -> KV transfer over the destination's link
//! (queued per destination rank; `transfer`) -> joins the running batch at the next step
//! boundary -> MTP decode steps emit 1 + accepted drafts tokens per step -> completion.
//! Decode is event-driven per request, not per token: when a request joins a batch its
//! number of decode steps is drawn from the MTP yield distribution (`mtp::MtpYield`),
//! and it finishes at the end of that step. A rank's running batch is kept as sums
//! per context piece (`CostModel::decode_context_breakpoints`), priced at the piece's
//! mean context, so a decode step costs O(ranks), not O(requests). A running
//! request's context is its input plus the expected yield of its steps so far.
//! Aggregated flow: the instance's rank reserves KV at admission (input + output; the
//! prompt alone where the engine allocates on demand, vLLM's, which preempts the newest
//! running request when KV runs short: `Scheduler::kv_on_demand`), runs prefill chunks
//! and decode in the same steps (one forward pass each).
//!
//! Simplifications, stated: the prefix cache counts cached tokens at lookup and adds a
//! prompt's blocks when its prefill finishes (blocks evicted in between still count);
//! the decode side's output KV is not written back to the prefill cache, so the next
//! turn of a session recomputes the previous output; transfers occupy only the
//! destination rank's ingress link.

use super::clock::{ns_to_secs, secs_to_ns, Classed, EventQueue, Nanos};
use super::config::{PrefillRank, PrefillRouter, ServingScenario};
use super::frontend::FrontEnd;
use super::metrics::{Metrics, Window};
use super::mtp::{resolve_mtp, MtpYield};
use super::pool::{GroupId, Pools, Role};
use super::prompt::cached_tokens;
use super::report::Accounting;
use super::request::{ReqId, Request, Slots};
use super::router;
use super::streams::stream;
use super::workload::{Driver, NewRequest, Origin, WlEvent};
use super::{Control, PoolCost, SimError, TraceRecord, CONTROL_EVENTS};
use crate::cost::ReqSlice;
use rand_chacha::ChaCha8Rng;
use spec::{hardware::Hardware, model::Model};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

/// Inputs of one run.
pub struct SimInput<'a> {
    /// The scenario and workload, checked.
    pub run: &'a super::Checked,
    pub hardware: &'a Hardware,
    pub model: &'a Model,
    /// Prices prefill steps (unused in aggregated mode).
    pub prefill_cost: &'a dyn PoolCost,
    /// Prices decode steps; in aggregated mode, every step of the mixed pool.
    pub decode_cost: &'a dyn PoolCost,
    /// Records for a `[trace]` workload (ignored otherwise).
    pub trace: &'a [TraceRecord],
}

/// What happens at an instant. At equal times events pop in the order of this
/// declaration (`class`), then first scheduled first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A group's step ends: it frees capacity before arrivals at that instant are placed.
    StepDone(GroupId),
    /// A request's KV arrived at its decode rank.
    TransferDone(ReqId),
    /// The workload's own event (an arrival, a session's next turn).
    Workload(WlEvent),
    /// The gauges are sampled.
    Sample,
    /// The oldest request in the front end reaches the engine's queue
    /// (`serving.frontend_s` after it was sent).
    Ingress,
    /// A group may form its next step: after everything else at that instant, so the
    /// step sees every request that arrived then.
    TryStep(GroupId),
}

impl Classed for Event {
    fn class(&self) -> u8 {
        match self {
            Event::StepDone(_) => 0,
            Event::TransferDone(_) => 1,
            Event::Workload(_) | Event::Ingress => 2,
            Event::Sample => 3,
            Event::TryStep(_) => 4,
        }
    }
}

/// What is scheduled: the event queue, and the groups asked to form a step at the
/// current instant. A `TryStep` is always for the current instant and of the last
/// class, so it waits in a first-in first-out list instead of the heap and pops once
/// nothing else is left at this instant: the queue's (time, class, sequence) order,
/// without two heap operations per step.
#[derive(Default)]
pub(crate) struct Agenda {
    q: EventQueue<Event>,
    tries: VecDeque<GroupId>,
}

impl Agenda {
    /// Schedules `ev` (not a `TryStep`) at `time_ns`.
    pub fn push(&mut self, time_ns: Nanos, ev: Event) {
        debug_assert!(!matches!(ev, Event::TryStep(_)));
        self.q.push(time_ns, ev);
    }

    /// Asks group `g` to form a step at the current instant.
    pub fn try_step_now(&mut self, g: GroupId) {
        self.tries.push_back(g);
    }

    /// The next event, with its time, when the current instant is `now`.
    pub fn pop(&mut self, now: Nanos) -> Option<(Nanos, Event)> {
        if !self.tries.is_empty() && self.q.peek_key().is_none_or(|k| k.time_ns > now) {
            return self.tries.pop_front().map(|g| (now, Event::TryStep(g)));
        }
        self.q.pop().map(|(k, ev)| (k.time_ns, ev))
    }
}

/// MTP speculative decoding as the run uses it.
pub(crate) struct Mtp {
    pub draft_tokens: u32,
    pub yield_: MtpYield,
    /// Expected tokens per request per decode step.
    pub mu: f64,
    pub rng: ChaCha8Rng,
    /// `MtpDraws::PerRequest`: the run's seed and the acceptances, keyed per request.
    pub keyed: Option<(u64, Vec<f64>)>,
    /// Arrivals so far (the next request's `serial`).
    pub arrivals: u32,
}

impl Mtp {
    /// A run's MTP state: the yield of its `draft_tokens` acceptances and its MTP stream.
    fn new(sc: &ServingScenario, seed: u64, draft_tokens: u32, acceptance: &[f64]) -> Mtp {
        let yield_ = MtpYield::new(&acceptance[..draft_tokens as usize]);
        Mtp {
            draft_tokens,
            mu: yield_.mean_tokens_per_step(),
            yield_,
            rng: stream(seed, "mtp"),
            keyed: (sc.serving.mtp.draws == super::mtp::MtpDraws::PerRequest)
                .then(|| (seed, acceptance[..draft_tokens as usize].to_vec())),
            arrivals: 0,
        }
    }
}

pub(crate) struct Rack<'a> {
    pub sc: &'a ServingScenario,
    pub hw: &'a Hardware,
    /// The model served (its fixed state and local layers' KV per request).
    pub model: &'a spec::model::Model,
    /// The longest request (prompt + output tokens) the engine accepts
    /// (`context_limit`); `None`: no limit known.
    pub context_limit: Option<u64>,
    /// A request's fixed recurrent state as KV tokens (0 without one): the KV gauges
    /// count it for every request that holds memory (its windows' KV they leave out).
    pub state_tokens: u64,
    /// Tokens per block identity of the workload's prompts (`Driver::block_tokens`).
    pub id_tokens: u64,
    /// The engine's prefix-cache block (`ServingScenario::kv_block_tokens`): a cached
    /// prefix is a whole number of them.
    pub kv_block_tokens: u64,
    pub q: Agenda,
    pub now: Nanos,
    pub window: Window,
    pub min_step_ns: Nanos,
    pub pools: Pools<'a>,
    pub reqs: Slots<'a>,
    pub driver: Driver<'a>,
    /// Scratch: workload events the driver just scheduled.
    pub wl_out: Vec<(Nanos, WlEvent)>,
    /// Requests sent but not yet through the engine's front end, oldest first, with
    /// the instants they were sent; `frontend` is that front end.
    pub ingress: VecDeque<(Nanos, NewRequest<'a>)>,
    pub frontend: FrontEnd,
    pub mtp: Mtp,
    pub kv_bytes_per_token: f64,
    pub domain_gpus: u64,
    pub acc: Accounting,
    pub m: Metrics,
    /// Scratch: a step's slices per rank (its prefill chunks, or its decode batch when
    /// it has no prefill).
    pub slices: Vec<Vec<ReqSlice>>,
    /// Scratch: a mixed step's decode slices per rank.
    pub decode_slices: Vec<Vec<ReqSlice>>,
    /// Scratch: prefill requests that finished in the current step, (rank, request).
    pub finished: Vec<(u32, ReqId)>,
    /// Scratch: the prefill router's view of each instance.
    pub loads: Vec<u64>,
    pub hits: Vec<u64>,
    /// Every step started, when the caller asked for them (`simulate_with`, `Record::steps`).
    pub steps: Option<Vec<SimStep>>,
    /// Every request completed, when the caller asked for them
    /// (`simulate_with`, `Record::requests`).
    pub requests: Option<Vec<SimRequest>>,
    /// Stays in a decode batch begun so far (each request's `DecodeState::stint`).
    pub stints: u64,
}

/// One completed request, as [`super::simulate_with`] records it: what a
/// benchmark client's per-request file holds, to set beside one.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimRequest {
    /// Its number in arrival order (dropped requests counted).
    pub serial: u32,
    /// Sent by the client, seconds from the start of the run.
    pub arrival_s: f64,
    pub first_token_s: f64,
    pub finish_s: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Leading input tokens found in a prefix cache (not computed).
    pub cached_tokens: u32,
    /// Whether it counts in the measured window.
    pub measured: bool,
    /// Requests it stands for (the coarse model's copies; 1 when exact).
    pub weight: u32,
}

/// KV-token equivalents of a request of `tokens` tokens beyond its tokens: its
/// recurrent state and its sliding-window and chunked layers' KV, at the model's KV
/// bytes per token `kvb` (rounded up; 0 for a model that caches every token of every
/// layer). Tensor parallelism splits a state by its heads as it splits KV by KV heads;
/// the equivalents are taken over the whole model.
pub fn kv_extra_tokens(model: &spec::model::Model, kvb: f64, tokens: u64) -> u32 {
    let extra = model.state_bytes_per_request() + model.local_kv_bytes(tokens);
    if extra <= 0.0 || kvb <= 0.0 {
        return 0;
    }
    (extra / kvb).ceil().min(u32::MAX as f64) as u32
}

/// One step of a group, as [`super::simulate_with`] records it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimStep {
    /// `prefill`, `decode` or `mixed` (the pool's name).
    pub pool: &'static str,
    pub group: u32,
    pub start_s: f64,
    pub step_s: f64,
    /// Prefill tokens and chunks in the step, all ranks.
    pub prefill_tokens: u64,
    pub prefill_chunks: u32,
    /// Prompts whose last chunk the step computes (their first tokens come at its end
    /// under every engine's scheduler), all ranks.
    pub prompts_done: u32,
    /// Requests in the decode batch, all ranks.
    pub decode_requests: u32,
}

/// Runs one simulation; see the module docs for the model.
pub(crate) fn run(
    input: &SimInput<'_>,
    seed: u64,
    control: &Control<'_>,
    record: super::Record,
) -> Result<super::Outcome, SimError> {
    let mut rack = Rack::new(input, seed)?;
    if record.steps {
        rack.steps = Some(Vec::new());
    }
    if record.requests {
        rack.requests = Some(Vec::new());
    }
    let stopped = rack.run_loop(control)?;
    let steps = rack.steps.take().unwrap_or_default();
    let requests = rack.requests.take().unwrap_or_default();
    let mut report = rack.into_report(input, seed);
    report.interrupted_at_s = stopped.map(ns_to_secs);
    Ok(super::Outcome {
        report,
        steps,
        requests,
    })
}

/// The longest request (prompt + output tokens) the engine accepts: the scenario's
/// `serving.max_model_len`, else the model's `max_position_embeddings` (the engines'
/// default), else none. A `max_model_len` beyond the model's positions is an error, as
/// vLLM refuses it unless told to allow it.
fn context_limit(
    sc: &ServingScenario,
    model: &spec::model::Model,
) -> Result<Option<u64>, SimError> {
    let bad = |why: String| Err(SimError::InvalidScenario(vec![why]));
    match (sc.serving.max_model_len, model.max_position_embeddings) {
        (Some(0), _) => bad("serving.max_model_len: must be > 0".into()),
        (Some(l), Some(p)) if l > p => bad(format!(
            "serving.max_model_len: {l} tokens is more than model `{}`'s max_position_embeddings, {p}; set at most {p}",
            model.name
        )),
        (Some(l), _) => Ok(Some(l)),
        (None, p) => Ok(p),
    }
}

impl<'a> Rack<'a> {
    fn new(input: &SimInput<'a>, seed: u64) -> Result<Self, SimError> {
        let sc = input.run.scenario();
        let (draft_tokens, acceptance) = resolve_mtp(sc, input.model)?;
        let kvb = input.model.kv.bytes_per_token;
        if !(kvb.is_finite() && kvb >= 0.0) {
            return Err(SimError::InvalidScenario(vec![
                "model.kv.bytes_per_token: must be >= 0".into(),
            ]));
        }
        let context_limit = context_limit(sc, input.model)?;
        let kv_block_tokens = sc.kv_block_tokens();
        let driver = Driver::new(input.run.workload(), input.trace, stream(seed, "workload"))?
            .with_block_tokens(kv_block_tokens);
        let id_tokens = driver.block_tokens();
        let pools = Pools::build(
            sc,
            input.prefill_cost,
            input.decode_cost,
            draft_tokens,
            driver.chained_blocks(),
            id_tokens,
        );
        let driver = driver.with_cohort(pools.copies())?;
        let mtp = Mtp::new(sc, seed, draft_tokens, &acceptance);
        let max_dep = pools.max_dep();
        let domain_gpus = sc
            .serving
            .kv_transfer
            .domain_gpus
            .unwrap_or(input.hardware.nvlink_domain_gpus)
            .max(1) as u64;
        // The streams spread over every instance's API servers.
        let servers = sc.serving.api_servers.unwrap_or(1).max(1) as f64
            * pools.groups_of(pools.pool(pools.entry())).len() as f64;
        let frontend = FrontEnd::of(sc, servers);
        Ok(Rack {
            sc,
            hw: input.hardware,
            model: input.model,
            context_limit,
            state_tokens: kv_extra_tokens(input.model, kvb, 0) as u64,
            id_tokens,
            kv_block_tokens,
            q: Agenda::default(),
            now: 0,
            window: Window {
                start_ns: secs_to_ns(sc.warmup_s),
                end_ns: secs_to_ns(sc.duration_s),
            },
            min_step_ns: secs_to_ns(sc.limits.min_step_s).max(1),
            pools,
            reqs: Slots::default(),
            driver,
            wl_out: Vec::new(),
            ingress: VecDeque::new(),
            frontend,
            mtp,
            kv_bytes_per_token: kvb,
            domain_gpus,
            acc: Accounting::default(),
            m: Metrics::new(),
            slices: vec![Vec::new(); max_dep],
            decode_slices: vec![Vec::new(); max_dep],
            finished: Vec::new(),
            steps: None,
            requests: None,
            stints: 0,
            loads: Vec::new(),
            hits: Vec::new(),
        })
    }

    /// Runs the events to the end of the window, or until `control` asks to stop: then
    /// the window ends at that instant, which is returned.
    fn run_loop(&mut self, control: &Control<'_>) -> Result<Option<Nanos>, SimError> {
        self.driver.start(&mut self.wl_out);
        self.flush_workload();
        self.q.push(self.window.start_ns.max(1), Event::Sample);
        while let Some((time_ns, ev)) = self.q.pop(self.now) {
            if time_ns > self.window.end_ns {
                break;
            }
            if time_ns < self.now {
                return Err(SimError::Invariant(format!(
                    "time ran backwards: event at {time_ns} ns after {} ns",
                    self.now
                )));
            }
            self.now = time_ns;
            self.acc.events += 1;
            if self.acc.events.is_multiple_of(CONTROL_EVENTS) {
                if let Some(f) = control.progress {
                    f(ns_to_secs(self.now));
                }
                if control.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                    self.window.end_ns = self.now.max(self.window.start_ns);
                    self.acc.last_event_s = ns_to_secs(self.now);
                    return Ok(Some(self.now));
                }
            }
            if self.acc.events > self.sc.limits.max_events {
                return Err(SimError::EventLimit {
                    limit: self.sc.limits.max_events,
                    at_s: ns_to_secs(self.now),
                });
            }
            match ev {
                Event::Workload(w) => self.on_workload(w),
                Event::TryStep(g) => {
                    self.pools.group_mut(g).try_pending = false;
                    self.try_step(g)?;
                }
                Event::StepDone(g) => self.on_step_done(g)?,
                Event::TransferDone(id) => self.on_transfer_done(id),
                Event::Ingress => {
                    if let Some((sent, nr)) = self.ingress.pop_front() {
                        self.arrive(nr, sent);
                    }
                }
                Event::Sample => self.on_sample(),
            }
            if self.driver.done() {
                // A benchmark run ends with its last request.
                self.window.end_ns = self.now.max(self.window.start_ns);
                break;
            }
        }
        self.acc.last_event_s = ns_to_secs(self.now);
        Ok(None)
    }

    /// Schedules the workload events the driver just produced.
    fn flush_workload(&mut self) {
        for (t, ev) in self.wl_out.drain(..) {
            self.q.push(t.max(self.now), Event::Workload(ev));
        }
    }

    /// Asks group `g` to form a step at this instant, unless it is stepping or asked.
    pub(super) fn kick(&mut self, g: GroupId) {
        let grp = self.pools.group_mut(g);
        if !grp.busy && !grp.try_pending {
            grp.try_pending = true;
            self.q.try_step_now(g);
        }
    }

    fn on_workload(&mut self, w: WlEvent) {
        let nr = self.driver.on_event(self.now, w, &mut self.wl_out);
        self.flush_workload();
        if let Some(nr) = nr {
            if self.frontend.work_ns > 0 || self.frontend.token_s_per_server > 0.0 {
                // The streams' rate is read only where they cost the API server time.
                let load = if self.frontend.chunk_s_per_server > 0.0 {
                    self.frontend.load(self.pools.stream_rate(self.now))
                } else {
                    0.0
                };
                let at = self.frontend.passes_at(self.now, load, nr.input_tokens);
                self.ingress.push_back((self.now, nr));
                self.q.push(at, Event::Ingress);
            } else {
                self.arrive(nr, self.now);
            }
        }
    }

    /// A new request, sent at `sent`, through the front end now: admitted to the entry
    /// pool (or dropped), placed on an instance and rank, its cached prefix looked up
    /// there.
    fn arrive(&mut self, nr: NewRequest<'a>, sent: Nanos) {
        let serial = self.mtp.arrivals;
        self.mtp.arrivals = serial.wrapping_add(1);
        let w = nr.weight.max(1) as u64;
        self.acc.arrived += w;
        self.acc.input_tokens_arrived += nr.input_tokens as u64 * w;
        let measured = self.window.starts_in(sent);
        let tokens = nr.input_tokens as u64 + nr.output_tokens as u64;
        if self.context_limit.is_some_and(|l| tokens > l) {
            // The engine answers it with an error: dropped, and counted with why.
            self.acc.refused_context += w;
            if measured {
                self.m.refused_context += w;
            }
            self.drop_request(nr.origin, measured, w);
            return;
        }
        let role = self.pools.entry();
        let (full, kv_cap) = {
            let pool = self.pools.pool(role);
            (pool.full(), pool.kv_cap)
        };
        if self.reqs.live() >= self.sc.limits.max_live_requests || full {
            self.drop_request(nr.origin, measured, w);
            return;
        }
        let (prewarm, held) = (nr.prewarm_tokens, nr.held_tokens);
        let mut req = Request::new(nr, sent, measured);
        req.ingress_ns = self.now;
        req.serial = serial;
        req.kv_extra = kv_extra_tokens(self.model, self.kv_bytes_per_token, req.kv_need());
        if role == Role::Mixed && req.kv_reserve() > kv_cap {
            self.drop_request(req.origin, measured, w);
            return;
        }
        let id = self.reqs.alloc(req);
        let g = self.route_prefill(role, id, prewarm.max(held));
        let cached = self.look_up_prefix(g, id, prewarm, held);
        let input = self.reqs.get(id).input as u64;
        let est = if role == Role::Prefill && self.sc.router.prefill_rank == PrefillRank::LeastCost
        {
            self.estimate_prefill_s(role, input - cached as u64, cached as u64)
        } else {
            0.0
        };
        let grp = self.pools.group_mut(g);
        let r = router::prefill_rank(self.sc.router.prefill_rank, role == Role::Mixed, &grp.ranks);
        grp.ranks[r as usize].est_load_s += est;
        let req = self.reqs.get_mut(id);
        req.prefill.est_s = est;
        req.prefill.cached = cached;
        req.prefill.group = g;
        req.prefill.rank = r;
        let (uncached, kv_need) = (req.uncached() as u64, req.kv_reserve());
        self.pools.pool_mut(role).waiting += 1;
        let rank = self.pools.rank_mut(g, r);
        if role == Role::Mixed {
            rank.pending.push_back(id);
            rank.pending_kv += kv_need;
            self.admit_mixed(g, r);
        } else {
            rank.prefill_q.push_back(id);
            rank.prefill_tokens += uncached;
        }
        self.kick(g);
    }

    /// The entry pool's instance for a new request (`router::prefill_instance`). A
    /// warm-started session's `prewarm` tokens are cached wherever it lands
    /// (`look_up_prefix`), so every instance counts them as hits.
    fn route_prefill(&mut self, role: Role, id: ReqId, prewarm: u64) -> GroupId {
        let pool = self.pools.pool(role);
        let groups = self.pools.groups_of(pool);
        let req = self.reqs.get(id);
        self.loads.clear();
        self.loads.extend(groups.iter().map(|g| g.prefill_load()));
        let pool = self.pools.pool_mut(role);
        self.hits.clear();
        if self.sc.router.prefill == PrefillRouter::PrefixAffinity {
            self.hits.resize(self.loads.len(), 0);
            if let Some(c) = pool.prefix.as_mut() {
                c.peek_all(&req.prefill.prompt, &mut self.hits);
            }
            let warm = (prewarm / self.id_tokens).min(req.prefill.prompt.len() as u64);
            for h in &mut self.hits {
                *h = (*h).max(warm);
            }
        }
        let i = router::prefill_instance(
            &self.sc.router,
            pool.placed,
            req.input as u64,
            &self.loads,
            &self.hits,
            self.id_tokens,
        );
        pool.placed += 1;
        GroupId(pool.groups.start + i as u32)
    }

    /// Looks the request's prompt up in group `g`'s prefix cache (after adding the
    /// `prewarm` tokens a warm-started session brings); returns its cached tokens and
    /// records the hit. The cached tokens are whole engine blocks within the first
    /// input - 1 (the last token is always computed), as vLLM counts a hit
    /// (`KVCacheManager::get_computed_blocks`: `max_cache_hit_length = num_tokens - 1`,
    /// then whole blocks; SGLang matches at most input - 1 tokens, in whole pages), see
    /// [`cached_tokens`]. The `held` tokens an earlier run left on the server count
    /// whole, not by block.
    fn look_up_prefix(&mut self, g: GroupId, id: ReqId, prewarm: u64, held: u64) -> u32 {
        let req = self.reqs.get(id);
        let (input, measured, w) = (req.input as u64, req.measured, req.w());
        let (id, block) = (self.id_tokens, self.kv_block_tokens);
        let prompt = req.prefill.prompt;
        let inst = self.pools.instance(g);
        let pool = self.pools.pool_of_mut(g);
        let hit = match pool.prefix.as_mut() {
            Some(c) => {
                if prewarm > 0 {
                    let n = ((prewarm / id) as usize).min(prompt.len());
                    c.insert(inst, &prompt.prefix(n));
                }
                c.lookup(inst, &prompt)
            }
            None => Default::default(),
        };
        let cached = cached_tokens(hit.blocks * id, input, block).max(held.min(input - 1)) as u32;
        if measured {
            let st = &mut pool.stats;
            st.input_tokens_looked_up += input * w;
            st.cache_hit_tokens += cached as u64 * w;
            st.host_hit_tokens += (hit.host_blocks * id).min(cached as u64) * w;
        }
        cached
    }

    /// Mixed pool: reserve KV for waiting requests in order and queue their prefill.
    /// A rank that allocates KV on demand admits a request whose prompt fits beside
    /// what the admitted ones hold now, less vLLM's watermark of 1% of the pool (an
    /// idle rank takes any request that fits it at all).
    pub(super) fn admit_mixed(&mut self, g: GroupId, r: u32) {
        let cap = self.pools.pool_of(g).kv_cap;
        // The running batch's growth: admission does not change it.
        let grp = self.pools.group(g);
        let rank = &grp.ranks[r as usize];
        let growth = if rank.on_demand {
            rank.dec.growth(grp.dstep, self.mtp.mu)
        } else {
            0
        };
        loop {
            let rank = self.pools.rank_mut(g, r);
            let Some(&id) = rank.pending.front() else {
                break;
            };
            let req = self.reqs.get_mut(id);
            let (need, fits) = if rank.on_demand {
                let need = req.kv_prompt_reserve();
                let held = rank.kv_reserved + growth;
                (need, held + need <= cap - cap / 100 || held == 0)
            } else {
                let need = req.kv_reserve();
                (need, rank.kv_reserved + need <= cap)
            };
            if !fits {
                break;
            }
            req.decode.kv_reserved = need;
            rank.pending.pop_front();
            rank.pending_kv -= req.kv_reserve();
            rank.kv_reserved += need;
            rank.kv_held += req.prefill.cached as u64;
            debug_assert!(
                rank.kv_within(cap),
                "KV admitted past the mixed rank's capacity"
            );
            rank.prefill_q.push_back(id);
            rank.prefill_tokens += req.uncached() as u64;
            self.note_kv(g, r);
        }
    }

    /// Tells the workload a request ended (`completed` with `context` tokens, or not).
    pub(super) fn end_in_driver(&mut self, origin: Origin, completed: bool, context: u64) {
        self.driver
            .on_request_end(self.now, origin, completed, context, &mut self.wl_out);
        self.flush_workload();
    }

    /// A request (standing for `w`, `Request::weight`) that never ran is dropped.
    pub(super) fn drop_request(&mut self, origin: Origin, measured: bool, w: u64) {
        self.acc.dropped += w;
        if measured {
            self.m.dropped += w;
        }
        self.end_in_driver(origin, false, 0);
    }

    /// Counts a request that completed now (`decoded`: its output was produced; else
    /// the decode side was faked and its first token came with its prefill), records
    /// it in the metrics and tells its workload.
    pub(super) fn complete(&mut self, req: &Request<'_>, decoded: bool) {
        let w = req.w();
        self.acc.completed += w;
        self.acc.input_tokens_completed += req.input as u64 * w;
        if decoded {
            self.acc.output_tokens_completed += req.output as u64 * w;
        }
        self.m
            .complete(req, decoded, self.now, &self.window, &self.sc.slo);
        if let Some(log) = &mut self.requests {
            let first = if decoded {
                req.decode.first_token_ns.unwrap_or(self.now)
            } else {
                self.now
            };
            log.push(SimRequest {
                serial: req.serial,
                arrival_s: ns_to_secs(req.arrival_ns),
                first_token_s: ns_to_secs(first),
                finish_s: ns_to_secs(self.now),
                input_tokens: req.input,
                output_tokens: if decoded { req.output } else { 0 },
                cached_tokens: req.prefill.cached,
                measured: req.measured && self.window.holds(req.arrival_ns, self.now),
                weight: req.weight,
            });
        }
        self.end_in_driver(req.origin, true, req.kv_need());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At one instant: finished steps free capacity first, then KV arrivals, then the
    /// workload's arrivals, the gauges, and last the groups form their next steps, in
    /// the order they were asked (also when asked before a same-instant event was
    /// scheduled); then the next instant.
    #[test]
    fn events_at_one_instant_pop_in_class_order() {
        let mut q = EventQueue::new();
        for ev in [
            Event::TryStep(GroupId(0)),
            Event::Sample,
            Event::Workload(WlEvent::OpenNext),
            Event::TransferDone(ReqId(3)),
            Event::StepDone(GroupId(1)),
            Event::StepDone(GroupId(0)),
        ] {
            q.push(7, ev);
        }
        let order: Vec<Event> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(
            order,
            [
                Event::StepDone(GroupId(1)),
                Event::StepDone(GroupId(0)),
                Event::TransferDone(ReqId(3)),
                Event::Workload(WlEvent::OpenNext),
                Event::Sample,
                Event::TryStep(GroupId(0)),
            ]
        );
        // The agenda keeps that order with its steps asked for outside the heap.
        let mut a = Agenda::default();
        a.push(8, Event::Sample);
        a.try_step_now(GroupId(2));
        a.push(7, Event::Workload(WlEvent::OpenNext));
        a.try_step_now(GroupId(0));
        a.push(7, Event::StepDone(GroupId(1)));
        let mut got = vec![a.pop(7).unwrap(), a.pop(7).unwrap()];
        a.push(7, Event::TransferDone(ReqId(3)));
        a.try_step_now(GroupId(1));
        got.extend(std::iter::from_fn(|| a.pop(7)));
        assert_eq!(
            got,
            [
                (7, Event::StepDone(GroupId(1))),
                (7, Event::Workload(WlEvent::OpenNext)),
                (7, Event::TransferDone(ReqId(3))),
                (7, Event::TryStep(GroupId(2))),
                (7, Event::TryStep(GroupId(0))),
                (7, Event::TryStep(GroupId(1))),
                (8, Event::Sample),
            ]
        );
    }
}
