//! The workload driver: users, sessions and trace cursors turned into requests.

use super::bench::BenchRequest;
use super::{
    gamma, AgentX, Arrival, Sampler, TraceRecord, WorkloadConfig, MAX_TOKENS, TRACE_BLOCK_TOKENS,
};
use crate::serving::clock::{secs_to_ns, Nanos};
use crate::serving::prompt::{Generated, Prompt};
use crate::serving::SimError;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

/// Where a request came from, so its end can be reported back to the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Closed-loop user or agent-session slot.
    Slot(u32),
    Open,
    Trace,
    /// A benchmark client's request (`[bench]`).
    Bench,
}

/// A request as the workload creates it.
#[derive(Debug, Clone)]
pub struct NewRequest<'a> {
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Prefix-block identities of the prompt, in order (derived on demand: a session's
    /// turn lists nothing and copies nothing).
    pub prompt: Prompt<'a>,
    pub origin: Origin,
    /// Leading tokens assumed computed before the run started (warm start): the
    /// instance that receives the request holds them in its prefix cache.
    pub prewarm_tokens: u64,
    /// Leading tokens the receiving instance holds exactly (not rounded to cache
    /// blocks): a benchmark request whose prompt an earlier run on the same server, or
    /// the client's warm-up, already sent (`BenchClient::held`).
    pub held_tokens: u64,
    /// Requests this one stands for (a cohort's, `Driver::with_cohort`); 1 when
    /// every request is simulated.
    pub weight: u32,
}

/// Workload events the simulator schedules for the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WlEvent {
    Slot(u32),
    OpenNext,
    TraceNext(usize),
    /// The benchmark client's `k`-th request is due.
    BenchNext(usize),
}

struct Session {
    uid: u64,
    sys_id: u64,
    context_tokens: u64,
    turns_done: u32,
    turns_max: u32,
    max_context_tokens: u64,
    subagent: bool,
    prewarm_tokens: u64,
}

/// Turns a workload into requests, in simulated or wall-clock time.
///
/// The driver owns the workload's state (users, sessions, the trace cursor) and its
/// random stream; its caller owns the clock. Times are nanoseconds since the run
/// started, whatever clock the caller keeps (the simulator's event time, or wall time
/// for a live engine). The protocol:
/// 1. `start(&mut out)` appends the first `(time, WlEvent)` pairs to `out`;
/// 2. at each pair's time the caller calls `on_event(now, ev, &mut out)`: it may
///    return a request to serve, and appends follow-up events (the next open-loop
///    arrival, the next trace record);
/// 3. when a request ends the caller calls `on_request_end(now, origin, completed,
///    context_tokens, &mut out)`: closed-loop users and agent sessions schedule their
///    next turn from there.
///
/// The caller fires each event at or after its time (an event scheduled in the past
/// fires now); the driver never reads a clock. Same configuration, trace, stream and
/// call sequence give the same requests.
///
/// ```
/// use sim::serving::{Driver, WorkloadConfig};
/// let wl: WorkloadConfig = serde_json::from_str(r#"{"name": "one-user",
///   "closed_loop": {"concurrency": 1, "input_tokens": {"dist": "fixed", "value": 100},
///                   "output_tokens": {"dist": "fixed", "value": 10}}}"#).unwrap();
/// let mut d = Driver::new(&wl, &[], sim::serving::streams::stream(1, "workload")).unwrap();
/// let mut out = Vec::new();
/// d.start(&mut out);
/// let (t, ev) = out.pop().unwrap();
/// let req = d.on_event(t, ev, &mut out).expect("the user sends a request");
/// assert_eq!((req.input_tokens, req.output_tokens), (100, 10));
/// // ... serve it; 2.5 s later it completes, and the user sends the next one:
/// d.on_request_end(t + 2_500_000_000, req.origin, true, 110, &mut out);
/// assert_eq!(out.len(), 1);
/// ```
pub struct Driver<'a> {
    cfg: &'a WorkloadConfig,
    /// The AgentX distributions drawn every turn, ready to draw from.
    turn: Option<TurnDraws>,
    trace: &'a [TraceRecord],
    trace_order: Vec<u32>,
    rng: ChaCha8Rng,
    sessions: Vec<Option<Session>>,
    subagents_live: u32,
    next_uid: u64,
    chained: bool,
    /// Tokens per block identity of a generated prompt (`with_block_tokens`).
    block_tokens: u64,
    /// Sessions, users, arrivals or trace records each simulated one stands for
    /// (`with_cohort`).
    cohort: u32,
    /// A benchmark client's requests (`[bench]`), those sent, those in flight, and the
    /// one waiting for a free slot.
    bench: Vec<BenchRequest>,
    bench_sent: usize,
    bench_in_flight: u32,
    bench_blocked: Option<usize>,
}

/// The AgentX distributions a turn draws from (`Dist::sampler`).
struct TurnDraws {
    task_tokens: Sampler,
    subagent_task_tokens: Sampler,
    turn_new_tokens: Sampler,
    output_tokens: Sampler,
    idle_gap_s: Sampler,
}

/// Whether every block identity in `prompts` always follows the same identity (or
/// always starts a prompt): then an identity names its whole prefix.
fn chained<'t>(prompts: impl Iterator<Item = &'t [u64]>) -> bool {
    let mut parent: HashMap<u64, Option<u64>> = HashMap::new();
    for blocks in prompts {
        let mut before = None;
        for &b in blocks {
            if *parent.entry(b).or_insert(before) != before {
                return false;
            }
            before = Some(b);
        }
    }
    true
}

/// The blocks (`block` tokens each) of a prompt of `input` tokens whose first
/// `shared_tokens` are one prefix every such prompt has (its full blocks owned by
/// `[3]`) and the rest its own (owned by `[tag, uid]`).
fn unique_blocks(
    tag: u64,
    uid: u64,
    shared_tokens: u64,
    input: u64,
    block: u64,
) -> Prompt<'static> {
    Prompt::Generated(Generated::new(
        &[3],
        (shared_tokens / block) as u32,
        &[tag, uid],
        input.div_ceil(block) as u32,
    ))
}

/// A trace record's prefix family: its first block that at most `common` records of
/// the trace hold (blocks shared more widely, as a common system prompt's, are
/// skipped), else its last block; 0 for a record without blocks.
fn trace_family(blocks: &[u64], holders: &HashMap<u64, u32>, common: u32, own: u64) -> u64 {
    blocks
        .iter()
        .find(|b| holders.get(b).is_some_and(|&n| n <= common))
        .or(blocks.last())
        .copied()
        .unwrap_or(own)
}

/// The family of a record without `hash_ids` (an Azure or BurstGPT record, which
/// carries no prefix information): its own, named by its place in the trace, apart
/// from every block identity (the top bit set).
fn own_family(index: u32) -> u64 {
    (1 << 63) | index as u64
}

/// SplitMix64's finaliser: spreads the bits of `x` (a family's identity) evenly.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl<'a> Driver<'a> {
    /// A driver of `cfg` (with `trace`'s records for a `[trace]` workload, in timestamp
    /// order) drawing from `rng`. Fails if a trace workload has no records.
    pub fn new(
        cfg: &'a WorkloadConfig,
        trace: &'a [TraceRecord],
        rng: ChaCha8Rng,
    ) -> Result<Self, SimError> {
        let mut trace_order = Vec::new();
        if let Some(t) = &cfg.trace {
            if trace.is_empty() {
                return Err(SimError::MissingTrace);
            }
            let n = t
                .max_requests
                .map(|m| m.min(trace.len() as u64) as usize)
                .unwrap_or(trace.len());
            trace_order = (0..trace.len().min(u32::MAX as usize) as u32).collect();
            trace_order.sort_by_key(|&i| trace[i as usize].timestamp); // stable
            trace_order.truncate(n);
        }
        let chained = chained(
            trace_order
                .iter()
                .map(|&i| trace[i as usize].hash_ids.as_slice()),
        );
        let turn = cfg.agentx.as_ref().map(|a| TurnDraws {
            task_tokens: a.task_tokens.sampler(),
            subagent_task_tokens: a.subagent_task_tokens.sampler(),
            turn_new_tokens: a.turn_new_tokens.sampler(),
            output_tokens: a.output_tokens.sampler(),
            idle_gap_s: a.idle_gap_s.sampler(),
        });
        let mut rng = rng;
        let bench = cfg
            .bench
            .as_ref()
            .map(|b| b.requests(&mut rng))
            .unwrap_or_default();
        Ok(Driver {
            cfg,
            turn,
            trace,
            trace_order,
            rng,
            sessions: Vec::new(),
            subagents_live: 0,
            next_uid: 0,
            chained,
            block_tokens: TRACE_BLOCK_TOKENS,
            cohort: 1,
            bench,
            bench_sent: 0,
            bench_in_flight: 0,
            bench_blocked: None,
        })
    }

    /// The workload of one of `k` identical copies of the rack (`fidelity.cohort`):
    /// every request stands for `k` (its `weight`), one in each copy. AgentX runs
    /// `sessions / k` sessions (rounded, at least one) and keeps `k` times fewer
    /// sub-agents; a closed loop `concurrency / k` users; an open loop `1/k` of the
    /// rate; a trace replays the records of about one in `k` prefix families
    /// (`trace_family`), drawn from the stream, so that a kept conversation keeps all
    /// its turns and their cache hits. Fails when the trace is too small to keep any.
    pub fn with_cohort(mut self, k: u32) -> Result<Self, SimError> {
        let k = k.max(1);
        if k > 1 && self.cfg.bench.is_some() {
            return Err(SimError::InvalidScenario(vec![format!(
                "fidelity.cohort = {k}: a benchmark run ([bench]) is simulated whole; remove the cohort"
            )]));
        }
        self.cohort = k;
        if k > 1 && !self.trace_order.is_empty() {
            let trace = self.trace;
            let recs = || self.trace_order.iter().map(|&i| &trace[i as usize]);
            let mut holders: HashMap<u64, u32> = HashMap::new();
            for r in recs() {
                for &b in &r.hash_ids {
                    *holders.entry(b).or_insert(0) += 1;
                }
            }
            // A family holds at most a quarter of what one copy replays.
            let common = (self.trace_order.len() / (4 * k as usize)).max(1) as u32;
            let salt: u64 = self.rng.random();
            let kept = recs()
                .zip(self.trace_order.iter())
                .filter(|(r, &i)| {
                    let family = trace_family(&r.hash_ids, &holders, common, own_family(i));
                    mix(family ^ salt).is_multiple_of(k as u64)
                })
                .map(|(_, &i)| i)
                .collect::<Vec<u32>>();
            if kept.is_empty() {
                return Err(SimError::InvalidScenario(vec![format!(
                    "fidelity.cohort: one of {k} copies of the rack keeps none of the trace's {} records (a copy replays whole prefix families); use fewer copies",
                    self.trace_order.len()
                )]));
            }
            self.trace_order = kept;
        }
        Ok(self)
    }

    /// Generated prompts named in blocks of `tokens` tokens (at least 1), the engine's
    /// prefix-cache block, so that a shared prefix is cached in whole blocks of the
    /// engine's, not of the trace format's (default: [`TRACE_BLOCK_TOKENS`], as a live
    /// run's pages expect). A trace's `hash_ids` keep their own block.
    pub fn with_block_tokens(mut self, tokens: u64) -> Self {
        self.block_tokens = tokens.max(1);
        self
    }

    /// Tokens per block identity of its prompts: a trace's [`TRACE_BLOCK_TOKENS`],
    /// else the generated prompts' (`with_block_tokens`).
    pub fn block_tokens(&self) -> u64 {
        if self.cfg.trace.is_some() {
            TRACE_BLOCK_TOKENS
        } else {
            self.block_tokens
        }
    }

    /// Members of a population of `n` in one copy of the rack.
    fn share(&self, n: u32) -> u32 {
        ((n as f64 / self.cohort as f64).round() as u32)
            .max(1)
            .min(n)
    }

    /// Whether the block identities of its requests are chained: each names its whole
    /// prefix, so equal identities at one position mean equal prefixes (vLLM's block
    /// hashes work this way). Generated workloads' are, by construction (a system
    /// prompt's, shared prefix's or session's identity is its owner and position); a
    /// trace's are when every identity always follows the same one, as Mooncake's
    /// `hash_ids` do.
    pub fn chained_blocks(&self) -> bool {
        self.chained
    }

    /// Whether a benchmark run (`[bench]`) is over: every request sent and ended.
    pub fn done(&self) -> bool {
        self.cfg.bench.is_some() && self.bench_sent >= self.bench.len() && self.bench_in_flight == 0
    }

    fn uid(&mut self) -> u64 {
        self.next_uid += 1;
        self.next_uid
    }

    /// Appends the workload's first events to `out`.
    pub fn start(&mut self, out: &mut Vec<(Nanos, WlEvent)>) {
        if let Some(c) = &self.cfg.closed_loop {
            for s in 0..self.share(c.concurrency) {
                out.push((0, WlEvent::Slot(s)));
            }
        }
        if self.cfg.open_loop.is_some() {
            let gap = self.open_gap();
            out.push((gap, WlEvent::OpenNext));
        }
        if let Some(a) = self.cfg.agentx.clone() {
            for s in 0..self.share(a.sessions) {
                let mut sess = self.new_session(&a, false);
                if a.warm_start {
                    let lo = sess.context_tokens as f64;
                    let hi = (sess.max_context_tokens as f64).max(lo);
                    sess.context_tokens = (lo + (hi - lo) * self.rng.random::<f64>()) as u64;
                    sess.turns_done = 1;
                    sess.prewarm_tokens = sess.context_tokens;
                }
                self.sessions.push(Some(sess));
                let t = secs_to_ns(a.start_spread_s * self.rng.random::<f64>());
                out.push((t, WlEvent::Slot(s)));
            }
        }
        if let Some(first) = self.bench.first() {
            out.push((secs_to_ns(first.due_s), WlEvent::BenchNext(0)));
        }
        if let (Some(t), Some(&first)) = (&self.cfg.trace, self.trace_order.first()) {
            out.push((
                secs_to_ns(self.trace[first as usize].timestamp as f64 / 1e3 * t.time_scale),
                WlEvent::TraceNext(0),
            ));
        }
    }

    /// The gap to the next open-loop arrival; with a rate curve, of the process at
    /// the curve's peak, thinned in `on_event`.
    fn open_gap(&mut self) -> Nanos {
        let o = self.cfg.open_loop.as_ref().expect("open loop");
        let peak = self.cfg.rate_curve.as_ref().map_or(1.0, |c| c.peak());
        let mean = self.cohort as f64 / (o.rate_per_s * peak);
        let gap = match o.arrival {
            Arrival::Poisson => -mean * (1.0 - self.rng.random::<f64>()).ln(),
            Arrival::Gamma { cv } => {
                let k = 1.0 / (cv * cv);
                gamma(&mut self.rng, k) * mean / k
            }
        };
        secs_to_ns(gap).max(1)
    }

    fn new_session(&mut self, a: &AgentX, subagent: bool) -> Session {
        let uid = self.uid();
        let sys_id = self.rng.random_range(0..a.system_prompts as u64);
        let turns_max = if subagent {
            (a.subagent_turns.sample(&mut self.rng).round() as u32).clamp(1, a.max_turns)
        } else {
            a.max_turns
        };
        let max_context_tokens = a.max_context_tokens.sample(&mut self.rng).clamp(1.0, 1e12) as u64;
        Session {
            uid,
            sys_id,
            context_tokens: a.system_prompt_tokens as u64,
            turns_done: 0,
            turns_max,
            max_context_tokens,
            subagent,
            prewarm_tokens: 0,
        }
    }

    /// A workload event fires at `now`: the request it creates, if any; appends
    /// follow-up events to `out`.
    pub fn on_event(
        &mut self,
        now: Nanos,
        ev: WlEvent,
        out: &mut Vec<(Nanos, WlEvent)>,
    ) -> Option<NewRequest<'a>> {
        match ev {
            WlEvent::Slot(slot) if self.cfg.closed_loop.is_some() => Some(self.user_request(slot)),
            WlEvent::Slot(slot) => self.session_turn(slot),
            WlEvent::OpenNext => {
                let o = self.cfg.open_loop.as_ref()?;
                if let Some(c) = &self.cfg.rate_curve {
                    // Thinning: an arrival of the peak-rate process is kept with
                    // probability multiplier(now) / peak.
                    let keep = c.at_sim_s(now as f64 / 1e9) / c.peak();
                    if self.rng.random::<f64>() >= keep {
                        let gap = self.open_gap();
                        out.push((now.saturating_add(gap), WlEvent::OpenNext));
                        return None;
                    }
                }
                let input = o.input_tokens.sample_tokens(&mut self.rng, 1);
                let output = o.output_tokens.sample_tokens(&mut self.rng, 1);
                let uid = self.uid();
                let prompt = unique_blocks(
                    5,
                    uid,
                    o.shared_prefix_tokens as u64,
                    input as u64,
                    self.block_tokens,
                );
                let gap = self.open_gap();
                out.push((now.saturating_add(gap), WlEvent::OpenNext));
                Some(NewRequest {
                    input_tokens: input,
                    output_tokens: output,
                    prompt,
                    origin: Origin::Open,
                    prewarm_tokens: 0,
                    held_tokens: 0,
                    weight: self.cohort,
                })
            }
            WlEvent::BenchNext(k) => self.bench_request(now, k, out),
            WlEvent::TraceNext(k) => {
                let t = self.cfg.trace.as_ref()?;
                let &idx = self.trace_order.get(k)?;
                if let Some(&next) = self.trace_order.get(k + 1) {
                    let ts =
                        secs_to_ns(self.trace[next as usize].timestamp as f64 / 1e3 * t.time_scale);
                    out.push((ts.max(now), WlEvent::TraceNext(k + 1)));
                }
                let r = &self.trace[idx as usize];
                Some(NewRequest {
                    input_tokens: r.input_length.max(1),
                    output_tokens: r.output_length.max(1),
                    prompt: Prompt::Listed(&r.hash_ids),
                    origin: Origin::Trace,
                    prewarm_tokens: 0,
                    held_tokens: 0,
                    weight: self.cohort,
                })
            }
        }
    }

    /// The benchmark client's `k`-th request, due now: sent if a slot is free (then the
    /// next one is scheduled at its due time), else held until a request ends.
    fn bench_request(
        &mut self,
        now: Nanos,
        k: usize,
        out: &mut Vec<(Nanos, WlEvent)>,
    ) -> Option<NewRequest<'a>> {
        let b = self.cfg.bench.as_ref()?;
        let req = *self.bench.get(k)?;
        if b.max_concurrency.is_some_and(|c| self.bench_in_flight >= c) {
            self.bench_blocked = Some(k);
            return None;
        }
        self.bench_in_flight += 1;
        self.bench_sent = k + 1;
        if let Some(next) = self.bench.get(k + 1) {
            out.push((secs_to_ns(next.due_s).max(now), WlEvent::BenchNext(k + 1)));
        }
        let uid = self.uid();
        let shared = b.prefix_len as u64;
        Some(NewRequest {
            input_tokens: req.input,
            output_tokens: req.output,
            prompt: unique_blocks(6, uid, shared, req.input as u64, self.block_tokens),
            origin: Origin::Bench,
            prewarm_tokens: 0,
            held_tokens: req.held as u64,
            weight: 1,
        })
    }

    /// A closed-loop user's next request.
    fn user_request(&mut self, slot: u32) -> NewRequest<'a> {
        let c = self.cfg.closed_loop.as_ref().expect("a closed loop");
        let input = c.input_tokens.sample_tokens(&mut self.rng, 1);
        let output = c.output_tokens.sample_tokens(&mut self.rng, 1);
        let uid = self.uid();
        NewRequest {
            input_tokens: input,
            output_tokens: output,
            prompt: unique_blocks(
                4,
                uid,
                c.shared_prefix_tokens as u64,
                input as u64,
                self.block_tokens,
            ),
            origin: Origin::Slot(slot),
            prewarm_tokens: 0,
            held_tokens: 0,
            weight: self.cohort,
        }
    }

    /// An agent session's next turn: its whole context so far plus new tokens.
    fn session_turn(&mut self, slot: u32) -> Option<NewRequest<'a>> {
        let a = self.cfg.agentx.as_ref()?;
        let d = self.turn.as_ref()?;
        let sess = self.sessions.get_mut(slot as usize)?.as_mut()?;
        let prewarm_tokens = std::mem::take(&mut sess.prewarm_tokens);
        let new = if sess.turns_done == 0 {
            if sess.subagent {
                d.subagent_task_tokens.sample_tokens(&mut self.rng, 1)
            } else {
                d.task_tokens.sample_tokens(&mut self.rng, 1)
            }
        } else {
            d.turn_new_tokens.sample_tokens(&mut self.rng, 1)
        };
        let output = d.output_tokens.sample_tokens(&mut self.rng, 1);
        let input = (sess.context_tokens + new as u64).min(MAX_TOKENS as u64);
        // The system prompt's full blocks are owned by it, the rest of the context by
        // the session: a turn's prompt extends the last one's.
        let prompt = Prompt::Generated(Generated::new(
            &[1, sess.sys_id],
            (a.system_prompt_tokens as u64 / self.block_tokens) as u32,
            &[2, sess.uid],
            input.div_ceil(self.block_tokens) as u32,
        ));
        Some(NewRequest {
            input_tokens: input as u32,
            output_tokens: output,
            prompt,
            origin: Origin::Slot(slot),
            prewarm_tokens,
            held_tokens: 0,
            weight: self.cohort,
        })
    }

    /// A request ended at `now`: completed (`context_tokens` = its input + output, the
    /// context a session's next turn builds on) or not (dropped: a session ends).
    /// Appends the user's or session's next event to `out`.
    pub fn on_request_end(
        &mut self,
        now: Nanos,
        origin: Origin,
        completed: bool,
        context_tokens: u64,
        out: &mut Vec<(Nanos, WlEvent)>,
    ) {
        if origin == Origin::Bench {
            self.bench_in_flight = self.bench_in_flight.saturating_sub(1);
            if let Some(k) = self.bench_blocked.take() {
                out.push((now, WlEvent::BenchNext(k)));
            }
            return;
        }
        let Origin::Slot(slot) = origin else { return };
        if let Some(c) = &self.cfg.closed_loop {
            let think = secs_to_ns(c.think_time_s.sample(&mut self.rng));
            out.push((now.saturating_add(think), WlEvent::Slot(slot)));
            return;
        }
        let cfg: &'a WorkloadConfig = self.cfg;
        let (Some(a), Some(idle_gap)) = (
            cfg.agentx.as_ref(),
            self.turn.as_ref().map(|d| d.idle_gap_s),
        ) else {
            return;
        };
        let Some(Some(sess)) = self.sessions.get_mut(slot as usize) else {
            return;
        };
        sess.turns_done += 1;
        sess.context_tokens = context_tokens;
        let ended = !completed
            || sess.turns_done >= sess.turns_max
            || sess.context_tokens >= sess.max_context_tokens;
        let is_sub = sess.subagent;
        let gap = secs_to_ns(idle_gap.sample(&mut self.rng).min(a.idle_gap_cap_s)).max(1);
        if ended {
            if is_sub {
                self.sessions[slot as usize] = None;
                self.subagents_live -= self.cohort;
            } else {
                let s = self.new_session(a, false);
                self.sessions[slot as usize] = Some(s);
                out.push((now.saturating_add(gap), WlEvent::Slot(slot)));
            }
        } else {
            out.push((now.saturating_add(gap), WlEvent::Slot(slot)));
        }
        if !is_sub
            && completed
            && self.subagents_live + self.cohort <= a.max_subagents
            && self.rng.random::<f64>() < a.subagent_probability
        {
            let s = self.new_session(a, true);
            let first = self.share(a.sessions) as usize;
            let free = (first..self.sessions.len()).find(|&i| self.sessions[i].is_none());
            let slot = match free {
                Some(i) => {
                    self.sessions[i] = Some(s);
                    i
                }
                None => {
                    self.sessions.push(Some(s));
                    self.sessions.len() - 1
                }
            };
            self.subagents_live += self.cohort;
            let gap = secs_to_ns(idle_gap.sample(&mut self.rng).min(a.idle_gap_cap_s)).max(1);
            out.push((now.saturating_add(gap), WlEvent::Slot(slot as u32)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse_mooncake_str;
    use super::super::trace::SNIPPET;
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn records_without_hash_ids_are_families_of_their_own() {
        // 2000 hash-less records under 2 copies: each record is kept or not on its own,
        // so every seed keeps about half (a binomial 1000 +- 22; 5 sigma either side),
        // never none or all of them.
        let recs: Vec<TraceRecord> = (0..2000)
            .map(|i| TraceRecord {
                timestamp: i,
                input_length: 100,
                output_length: 10,
                hash_ids: Vec::new(),
            })
            .collect();
        let wl = WorkloadConfig::trace_replay("t");
        for seed in 1..=8 {
            let d = Driver::new(&wl, &recs, ChaCha8Rng::seed_from_u64(seed))
                .unwrap()
                .with_cohort(2)
                .unwrap();
            let kept = d.trace_order.len();
            assert!((890..=1110).contains(&kept), "seed {seed}: kept {kept}");
        }
    }

    #[test]
    fn trace_block_chaining_is_detected() {
        let recs = parse_mooncake_str(SNIPPET).unwrap();
        let wl = WorkloadConfig::trace_replay("t");
        let rng = || ChaCha8Rng::seed_from_u64(1);
        assert!(Driver::new(&wl, &recs, rng()).unwrap().chained_blocks());
        // Block 2 after 1, then 2 first: not chained.
        let mut bad = recs.clone();
        bad[2].hash_ids = vec![2];
        assert!(!Driver::new(&wl, &bad, rng()).unwrap().chained_blocks());
    }
}
