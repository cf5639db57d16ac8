//! Workloads: closed-loop users, open-loop arrivals, AgentX-like agent sessions and
//! Mooncake trace replay. Every random draw comes from the `workload` stream of the
//! run's seed. The simulator asks the driver for requests at workload events and tells
//! it when requests end; the driver schedules its own next events.

use super::config::{check, finite_nonneg};
use super::core::{hash_words, secs_to_ns, Nanos};
use super::SimError;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::Arc;

/// Tokens per prefix-cache block (the Mooncake traces' `hash_ids` granularity).
pub const BLOCK_TOKENS: u64 = 512;

/// Largest token count a sampled length may take.
pub const MAX_TOKENS: f64 = 16_000_000.0;

/// A distribution of a non-negative quantity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "kebab-case")]
pub enum Dist {
    Fixed {
        value: f64,
    },
    Uniform {
        min: f64,
        max: f64,
    },
    Exponential {
        mean: f64,
    },
    /// Log-normal with the given mean and coefficient of variation (std/mean).
    Lognormal {
        mean: f64,
        cv: f64,
    },
}

impl Dist {
    pub fn fixed(value: f64) -> Self {
        Dist::Fixed { value }
    }

    pub fn mean(&self) -> f64 {
        match *self {
            Dist::Fixed { value } => value,
            Dist::Uniform { min, max } => 0.5 * (min + max),
            Dist::Exponential { mean } | Dist::Lognormal { mean, .. } => mean,
        }
    }

    pub fn sample(&self, rng: &mut ChaCha8Rng) -> f64 {
        match *self {
            Dist::Fixed { value } => value,
            Dist::Uniform { min, max } => min + (max - min) * rng.random::<f64>(),
            Dist::Exponential { mean } => -mean * (1.0 - rng.random::<f64>()).ln(),
            Dist::Lognormal { mean, cv } => {
                if cv <= 0.0 {
                    return mean;
                }
                let s2 = (1.0 + cv * cv).ln();
                let mu = mean.ln() - 0.5 * s2;
                (mu + s2.sqrt() * normal(rng)).exp()
            }
        }
    }

    /// A token count: rounded, at least `min`, at most `MAX_TOKENS`.
    pub fn sample_tokens(&self, rng: &mut ChaCha8Rng, min: u32) -> u32 {
        let v = self.sample(rng).round();
        v.clamp(min as f64, MAX_TOKENS) as u32
    }

    fn problems(&self, path: &str, p: &mut Vec<String>) {
        let ok = match *self {
            Dist::Fixed { value } => finite_nonneg(value),
            Dist::Uniform { min, max } => finite_nonneg(min) && max.is_finite() && max >= min,
            Dist::Exponential { mean } => finite_nonneg(mean),
            Dist::Lognormal { mean, cv } => {
                mean.is_finite() && mean > 0.0 && finite_nonneg(cv) && cv <= 100.0
            }
        };
        check(
            p,
            ok,
            path,
            "parameters must be finite and non-negative (uniform: max >= min; lognormal: mean > 0)",
        );
    }
}

/// Standard normal draw (Box-Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Gamma(shape k, scale 1) by Marsaglia and Tsang (with the k < 1 boost).
fn gamma(rng: &mut ChaCha8Rng, k: f64) -> f64 {
    if k < 1.0 {
        let u: f64 = 1.0 - rng.random::<f64>();
        return gamma(rng, k + 1.0) * u.powf(1.0 / k);
    }
    let d = k - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    for _ in 0..1000 {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u: f64 = 1.0 - rng.random::<f64>();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
    k // practically unreachable; the mean keeps the loop bounded
}

/// A workload file (`scenarios/workloads/*.toml`): exactly one of the kinds is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadConfig {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub closed_loop: Option<ClosedLoop>,
    #[serde(default)]
    pub open_loop: Option<OpenLoop>,
    #[serde(default)]
    pub agentx: Option<AgentX>,
    #[serde(default)]
    pub trace: Option<TraceReplay>,
    #[serde(default)]
    pub provenance: BTreeMap<String, String>,
}

/// A fixed number of users, each sending its next request when the last one ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosedLoop {
    pub concurrency: u32,
    pub input_tokens: Dist,
    pub output_tokens: Dist,
    /// Leading prompt tokens every request shares (a system prompt).
    #[serde(default)]
    pub shared_prefix_tokens: u32,
    #[serde(default = "zero_dist")]
    pub think_time_s: Dist,
}

fn zero_dist() -> Dist {
    Dist::fixed(0.0)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "process", rename_all = "kebab-case")]
pub enum Arrival {
    #[default]
    Poisson,
    /// Gamma-distributed gaps with this coefficient of variation (> 1: bursty).
    Gamma { cv: f64 },
}

/// Requests arriving at a mean rate whatever the system does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenLoop {
    pub rate_per_s: f64,
    #[serde(default)]
    pub arrival: Arrival,
    pub input_tokens: Dist,
    pub output_tokens: Dist,
    #[serde(default)]
    pub shared_prefix_tokens: u32,
}

/// Agentic coding sessions (AgentX-like). A session starts from a system prompt shared
/// with other sessions plus a task; each turn sends the whole context so far (cached
/// prefix where the prefill instance still holds it) plus new tool/user tokens, and
/// its output joins the context. Gaps between turns are capped. Turns may spawn
/// sub-agents: short sessions sharing only the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentX {
    /// Top-level sessions in flight at once (a finished session is replaced).
    pub sessions: u32,
    pub system_prompt_tokens: u32,
    /// Distinct system prompts (sessions pick one uniformly).
    #[serde(default = "one")]
    pub system_prompts: u32,
    /// First-turn user task, tokens.
    pub task_tokens: Dist,
    /// Tool results and user input added by each later turn, tokens.
    pub turn_new_tokens: Dist,
    pub output_tokens: Dist,
    /// A session ends once its context reaches this many tokens.
    pub max_context_tokens: Dist,
    #[serde(default = "d_max_turns")]
    pub max_turns: u32,
    /// Idle time between a turn's end and the next turn's request (tool execution,
    /// user), seconds; capped at `idle_gap_cap_s`.
    pub idle_gap_s: Dist,
    #[serde(default = "d_gap_cap")]
    pub idle_gap_cap_s: f64,
    /// First turns of the initial sessions are spread uniformly over this many seconds.
    #[serde(default)]
    pub start_spread_s: f64,
    /// Probability that a top-level turn spawns a sub-agent.
    #[serde(default)]
    pub subagent_probability: f64,
    #[serde(default = "d_sub_turns")]
    pub subagent_turns: Dist,
    #[serde(default = "d_sub_task")]
    pub subagent_task_tokens: Dist,
    /// Sub-agents in flight at once, at most.
    #[serde(default)]
    pub max_subagents: u32,
    /// The initial sessions start at a uniformly random point of their life: context
    /// drawn between the system prompt and their maximum, as if they had run before
    /// t = 0; that history counts as cached on the instance that gets their first turn.
    /// Shortens the warm-up a long-session workload needs to reach its steady mix.
    #[serde(default)]
    pub warm_start: bool,
}

fn one() -> u32 {
    1
}
fn d_max_turns() -> u32 {
    1000
}
fn d_gap_cap() -> f64 {
    10.0
}
fn d_sub_turns() -> Dist {
    Dist::Uniform {
        min: 2.0,
        max: 10.0,
    }
}
fn d_sub_task() -> Dist {
    Dist::fixed(2000.0)
}

/// Replay of a Mooncake trace given to `simulate` as records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceReplay {
    /// Multiplies trace timestamps (0.5 replays twice as fast).
    #[serde(default = "one_f")]
    pub time_scale: f64,
    /// Replays at most this many records.
    #[serde(default)]
    pub max_requests: Option<u64>,
}

fn one_f() -> f64 {
    1.0
}

impl WorkloadConfig {
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        let kinds = [
            self.closed_loop.is_some(),
            self.open_loop.is_some(),
            self.agentx.is_some(),
            self.trace.is_some(),
        ];
        check(
            &mut p,
            kinds.iter().filter(|k| **k).count() == 1,
            "workload",
            "set exactly one of [closed_loop], [open_loop], [agentx], [trace]",
        );
        if let Some(c) = &self.closed_loop {
            check(
                &mut p,
                c.concurrency >= 1 && c.concurrency <= 10_000_000,
                "closed_loop.concurrency",
                "must be in 1..=10000000",
            );
            c.input_tokens.problems("closed_loop.input_tokens", &mut p);
            c.output_tokens
                .problems("closed_loop.output_tokens", &mut p);
            c.think_time_s.problems("closed_loop.think_time_s", &mut p);
        }
        if let Some(o) = &self.open_loop {
            check(
                &mut p,
                o.rate_per_s.is_finite() && o.rate_per_s > 0.0,
                "open_loop.rate_per_s",
                "must be > 0",
            );
            if let Arrival::Gamma { cv } = o.arrival {
                check(
                    &mut p,
                    cv.is_finite() && cv > 0.0 && cv <= 100.0,
                    "open_loop.arrival.cv",
                    "must be in (0, 100]",
                );
            }
            o.input_tokens.problems("open_loop.input_tokens", &mut p);
            o.output_tokens.problems("open_loop.output_tokens", &mut p);
        }
        if let Some(a) = &self.agentx {
            check(
                &mut p,
                a.sessions >= 1 && a.sessions <= 10_000_000,
                "agentx.sessions",
                "must be in 1..=10000000",
            );
            check(
                &mut p,
                a.system_prompts >= 1,
                "agentx.system_prompts",
                "must be >= 1",
            );
            check(&mut p, a.max_turns >= 1, "agentx.max_turns", "must be >= 1");
            check(
                &mut p,
                finite_nonneg(a.idle_gap_cap_s),
                "agentx.idle_gap_cap_s",
                "must be >= 0",
            );
            check(
                &mut p,
                finite_nonneg(a.start_spread_s),
                "agentx.start_spread_s",
                "must be >= 0",
            );
            check(
                &mut p,
                (0.0..=1.0).contains(&a.subagent_probability),
                "agentx.subagent_probability",
                "must be in [0, 1]",
            );
            check(
                &mut p,
                a.max_subagents <= 10_000_000,
                "agentx.max_subagents",
                "must be <= 10000000",
            );
            a.task_tokens.problems("agentx.task_tokens", &mut p);
            a.turn_new_tokens.problems("agentx.turn_new_tokens", &mut p);
            a.output_tokens.problems("agentx.output_tokens", &mut p);
            a.max_context_tokens
                .problems("agentx.max_context_tokens", &mut p);
            a.idle_gap_s.problems("agentx.idle_gap_s", &mut p);
            a.subagent_turns.problems("agentx.subagent_turns", &mut p);
            a.subagent_task_tokens
                .problems("agentx.subagent_task_tokens", &mut p);
        }
        if let Some(t) = &self.trace {
            check(
                &mut p,
                t.time_scale.is_finite() && t.time_scale > 0.0,
                "trace.time_scale",
                "must be > 0",
            );
        }
        p
    }
}

/// One line of a Mooncake trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Arrival, milliseconds from the trace start.
    pub timestamp: u64,
    pub input_length: u32,
    pub output_length: u32,
    /// Prefix-block hashes, `BLOCK_TOKENS` tokens per block.
    #[serde(default)]
    pub hash_ids: Vec<u64>,
}

/// Parses Mooncake JSONL (one object per line; blank lines skipped). The first bad
/// line is reported with its 1-based number.
pub fn parse_mooncake<R: BufRead>(reader: R) -> Result<Vec<TraceRecord>, SimError> {
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|e| SimError::Trace {
            line: line_no,
            message: e.to_string(),
        })?;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let rec: TraceRecord = serde_json::from_str(t).map_err(|e| SimError::Trace {
            line: line_no,
            message: e.to_string(),
        })?;
        if rec.input_length == 0 {
            return Err(SimError::Trace {
                line: line_no,
                message: "input_length must be >= 1".into(),
            });
        }
        out.push(rec);
    }
    Ok(out)
}

pub fn parse_mooncake_str(text: &str) -> Result<Vec<TraceRecord>, SimError> {
    parse_mooncake(text.as_bytes())
}

/// Where a request came from, so its end can be reported back to the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Closed-loop user or agent-session slot.
    Slot(u32),
    Open,
    Trace,
}

/// A request as the workload creates it.
#[derive(Debug, Clone)]
pub struct NewRequest {
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Prefix-block identities of the prompt, in order (shared with the session that
    /// keeps extending them: a turn does not copy its context's blocks).
    pub blocks: Arc<Vec<u64>>,
    pub origin: Origin,
    /// Leading tokens assumed computed before the run started (warm start): the
    /// instance that receives the request holds them in its prefix cache.
    pub prewarm_tokens: u64,
}

/// Workload events the simulator schedules for the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WlEvent {
    Slot(u32),
    OpenNext,
    TraceNext(usize),
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
    blocks: Arc<Vec<u64>>,
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
/// let mut d = Driver::new(&wl, &[], sim::serving::core::stream(1, "workload")).unwrap();
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
    trace: &'a [TraceRecord],
    trace_order: Vec<u32>,
    rng: ChaCha8Rng,
    sessions: Vec<Option<Session>>,
    subagents_live: u32,
    next_uid: u64,
}

fn unique_blocks(tag: u64, uid: u64, shared_tokens: u64, input: u64) -> Arc<Vec<u64>> {
    let n = input.div_ceil(BLOCK_TOKENS);
    let v = (0..n)
        .map(|i| {
            if (i + 1) * BLOCK_TOKENS <= shared_tokens {
                hash_words(&[3, i])
            } else {
                hash_words(&[tag, uid, i])
            }
        })
        .collect();
    Arc::new(v)
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
        Ok(Driver {
            cfg,
            trace,
            trace_order,
            rng,
            sessions: Vec::new(),
            subagents_live: 0,
            next_uid: 0,
        })
    }

    fn uid(&mut self) -> u64 {
        self.next_uid += 1;
        self.next_uid
    }

    /// Appends the workload's first events to `out`.
    pub fn start(&mut self, out: &mut Vec<(Nanos, WlEvent)>) {
        if let Some(c) = &self.cfg.closed_loop {
            for s in 0..c.concurrency {
                out.push((0, WlEvent::Slot(s)));
            }
        }
        if self.cfg.open_loop.is_some() {
            let gap = self.open_gap();
            out.push((gap, WlEvent::OpenNext));
        }
        if let Some(a) = self.cfg.agentx.clone() {
            for s in 0..a.sessions {
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
        if let (Some(t), Some(&first)) = (&self.cfg.trace, self.trace_order.first()) {
            out.push((
                secs_to_ns(self.trace[first as usize].timestamp as f64 / 1e3 * t.time_scale),
                WlEvent::TraceNext(0),
            ));
        }
    }

    fn open_gap(&mut self) -> Nanos {
        let o = self.cfg.open_loop.as_ref().expect("open loop");
        let mean = 1.0 / o.rate_per_s;
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
            blocks: Arc::default(),
        }
    }

    /// A workload event fires at `now`: the request it creates, if any; appends
    /// follow-up events to `out`.
    pub fn on_event(
        &mut self,
        now: Nanos,
        ev: WlEvent,
        out: &mut Vec<(Nanos, WlEvent)>,
    ) -> Option<NewRequest> {
        match ev {
            WlEvent::Slot(slot) => {
                if let Some(c) = &self.cfg.closed_loop {
                    let input = c.input_tokens.sample_tokens(&mut self.rng, 1);
                    let output = c.output_tokens.sample_tokens(&mut self.rng, 1);
                    let uid = self.uid();
                    let blocks = unique_blocks(4, uid, c.shared_prefix_tokens as u64, input as u64);
                    return Some(NewRequest {
                        input_tokens: input,
                        output_tokens: output,
                        blocks,
                        origin: Origin::Slot(slot),
                        prewarm_tokens: 0,
                    });
                }
                let a = self.cfg.agentx.as_ref()?;
                let sess = self.sessions.get_mut(slot as usize)?.as_mut()?;
                let prewarm_tokens = std::mem::take(&mut sess.prewarm_tokens);
                let new = if sess.turns_done == 0 {
                    if sess.subagent {
                        a.subagent_task_tokens.sample_tokens(&mut self.rng, 1)
                    } else {
                        a.task_tokens.sample_tokens(&mut self.rng, 1)
                    }
                } else {
                    a.turn_new_tokens.sample_tokens(&mut self.rng, 1)
                };
                let output = a.output_tokens.sample_tokens(&mut self.rng, 1);
                let input = (sess.context_tokens + new as u64).min(MAX_TOKENS as u64);
                let sys = a.system_prompt_tokens as u64;
                // A session's context only grows, so its block identities are kept
                // and extended rather than rehashed every turn.
                let n = input.div_ceil(BLOCK_TOKENS) as usize;
                if sess.blocks.len() < n {
                    // The previous turn's request has ended and dropped its share, so
                    // this extends in place.
                    let v = Arc::make_mut(&mut sess.blocks);
                    while v.len() < n {
                        let i = v.len() as u64;
                        v.push(if (i + 1) * BLOCK_TOKENS <= sys {
                            hash_words(&[1, sess.sys_id, i])
                        } else {
                            hash_words(&[2, sess.uid, i])
                        });
                    }
                }
                let blocks = if sess.blocks.len() == n {
                    Arc::clone(&sess.blocks)
                } else {
                    Arc::new(sess.blocks[..n].to_vec())
                };
                Some(NewRequest {
                    input_tokens: input as u32,
                    output_tokens: output,
                    blocks,
                    origin: Origin::Slot(slot),
                    prewarm_tokens,
                })
            }
            WlEvent::OpenNext => {
                let o = self.cfg.open_loop.as_ref()?;
                let input = o.input_tokens.sample_tokens(&mut self.rng, 1);
                let output = o.output_tokens.sample_tokens(&mut self.rng, 1);
                let uid = self.uid();
                let blocks = unique_blocks(5, uid, o.shared_prefix_tokens as u64, input as u64);
                let gap = self.open_gap();
                out.push((now.saturating_add(gap), WlEvent::OpenNext));
                Some(NewRequest {
                    input_tokens: input,
                    output_tokens: output,
                    blocks,
                    origin: Origin::Open,
                    prewarm_tokens: 0,
                })
            }
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
                    blocks: Arc::new(r.hash_ids.clone()),
                    origin: Origin::Trace,
                    prewarm_tokens: 0,
                })
            }
        }
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
        let Origin::Slot(slot) = origin else { return };
        if let Some(c) = &self.cfg.closed_loop {
            let think = secs_to_ns(c.think_time_s.sample(&mut self.rng));
            out.push((now.saturating_add(think), WlEvent::Slot(slot)));
            return;
        }
        let Some(a) = self.cfg.agentx.clone() else {
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
        let gap = secs_to_ns(a.idle_gap_s.sample(&mut self.rng).min(a.idle_gap_cap_s)).max(1);
        if ended {
            if is_sub {
                self.sessions[slot as usize] = None;
                self.subagents_live -= 1;
            } else {
                let s = self.new_session(&a, false);
                self.sessions[slot as usize] = Some(s);
                out.push((now.saturating_add(gap), WlEvent::Slot(slot)));
            }
        } else {
            out.push((now.saturating_add(gap), WlEvent::Slot(slot)));
        }
        if !is_sub
            && completed
            && self.subagents_live < a.max_subagents
            && self.rng.random::<f64>() < a.subagent_probability
        {
            let s = self.new_session(&a, true);
            let free =
                (a.sessions as usize..self.sessions.len()).find(|&i| self.sessions[i].is_none());
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
            self.subagents_live += 1;
            let gap = secs_to_ns(a.idle_gap_s.sample(&mut self.rng).min(a.idle_gap_cap_s)).max(1);
            out.push((now.saturating_add(gap), WlEvent::Slot(slot as u32)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const SNIPPET: &str = r#"{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}
{"timestamp": 27, "input_length": 700, "output_length": 52, "hash_ids": [1, 3]}

{"timestamp": 30, "input_length": 100, "output_length": 1, "hash_ids": [9]}
"#;

    #[test]
    fn parses_mooncake_lines() {
        let recs = parse_mooncake_str(SNIPPET).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[1].timestamp, 27);
        assert_eq!(recs[1].hash_ids, vec![1, 3]);
        assert_eq!(recs[2].output_length, 1);
    }

    #[test]
    fn bad_line_reports_its_number() {
        let text = format!("{SNIPPET}{{\"timestamp\": 40, \"input_length\": \"many\"}}\n");
        match parse_mooncake_str(&text) {
            Err(SimError::Trace { line, .. }) => assert_eq!(line, 5),
            other => panic!("expected a trace error, got {other:?}"),
        }
        match parse_mooncake_str("{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 1}\n")
        {
            Err(SimError::Trace { line: 1, message }) => assert!(message.contains("input_length")),
            other => panic!("expected a trace error, got {other:?}"),
        }
        assert!(matches!(
            parse_mooncake_str("not json"),
            Err(SimError::Trace { line: 1, .. })
        ));
    }

    #[test]
    fn distributions_have_their_means() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for d in [
            Dist::fixed(3.0),
            Dist::Uniform { min: 1.0, max: 5.0 },
            Dist::Exponential { mean: 3.0 },
            Dist::Lognormal { mean: 3.0, cv: 0.8 },
        ] {
            let n = 200_000;
            let m = (0..n).map(|_| d.sample(&mut rng)).sum::<f64>() / n as f64;
            assert!((m / 3.0 - 1.0).abs() < 0.02, "{d:?}: {m}");
        }
        let k = 0.25; // cv = 2
        let m = (0..200_000).map(|_| gamma(&mut rng, k)).sum::<f64>() / 200_000.0;
        assert!((m / k - 1.0).abs() < 0.03, "gamma mean {m}");
    }
}
