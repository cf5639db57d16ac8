//! Workloads: closed-loop users, open-loop arrivals, AgentX-like agent sessions and
//! Mooncake trace replay. Every random draw comes from the `workload` stream of the
//! run's seed. The simulator asks the driver for requests at workload events and tells
//! it when requests end; the driver schedules its own next events.

use super::config::{check, check_num, finite_nonneg};
use crate::serde_defaults::one;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use spec::problem::Problem;
use std::collections::BTreeMap;

pub mod bench;
mod curve;
mod driver;
mod trace;

pub use curve::{CurvePreset, RateCurve};
pub use driver::{Driver, NewRequest, Origin, WlEvent};
pub use trace::{
    parse_mooncake, parse_mooncake_str, read_mooncake, trace_span, BadLines, Tally, TraceRead,
    TraceRecord, TraceSpan, BAD_LINES_SHOWN,
};

/// Tokens per block identity of a trace's `hash_ids` (the Mooncake traces' block, a
/// property of that format, not of the engine: hits on them are counted in the
/// engine's own block, `ServingScenario::kv_block_tokens`). Generated workloads name
/// their blocks in the engine's block (`Driver::with_block_tokens`).
pub const TRACE_BLOCK_TOKENS: u64 = 512;

/// Largest token count a sampled length may take.
pub const MAX_TOKENS: f64 = 16_000_000.0;

/// A distribution of a non-negative quantity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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
        self.sampler().sample(rng)
    }

    /// A token count: rounded, at least `min`, at most `MAX_TOKENS`.
    pub fn sample_tokens(&self, rng: &mut ChaCha8Rng, min: u32) -> u32 {
        self.sampler().sample_tokens(rng, min)
    }

    /// The distribution with its constants worked out once, for repeated draws.
    pub fn sampler(&self) -> Sampler {
        match *self {
            Dist::Lognormal { mean, cv } if cv > 0.0 => {
                let s2 = (1.0 + cv * cv).ln();
                Sampler::Lognormal {
                    mu: mean.ln() - 0.5 * s2,
                    sigma: s2.sqrt(),
                }
            }
            Dist::Lognormal { mean, .. } => Sampler::Plain(Dist::Fixed { value: mean }),
            d => Sampler::Plain(d),
        }
    }

    fn problems(&self, path: &str, p: &mut Vec<Problem>) {
        let values: &[f64] = match self {
            Dist::Fixed { value } => &[*value],
            Dist::Uniform { min, max } => &[*min, *max],
            Dist::Exponential { mean } => &[*mean],
            Dist::Lognormal { mean, cv } => &[*mean, *cv],
        };
        if let Some(v) = values.iter().find(|v| !v.is_finite()) {
            p.push(Problem::new(
                path,
                format!("parameters must be finite, got {v}"),
            ));
            return;
        }
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

impl Dist {
    /// `problems`, and a mean of at most `MAX_TOKENS`: a distribution of token counts
    /// past it would be cut at `MAX_TOKENS` without a word.
    fn token_problems(&self, path: &str, p: &mut Vec<Problem>) {
        let before = p.len();
        self.problems(path, p);
        if p.len() == before && self.mean() > MAX_TOKENS {
            p.push(Problem::new(
                path,
                format!(
                    "a mean of {} tokens is above the {MAX_TOKENS} tokens a request may have",
                    self.mean()
                ),
            ));
        }
    }
}

/// The problems of a generated workload's request sizes under `kind` (`closed_loop`,
/// `open_loop`): its input and output token distributions, its shared prefix.
fn request_problems(
    kind: &str,
    [input, output]: [&Dist; 2],
    shared_prefix_tokens: u32,
    p: &mut Vec<Problem>,
) {
    input.token_problems(&format!("{kind}.input_tokens"), p);
    output.token_problems(&format!("{kind}.output_tokens"), p);
    tokens_at_most(
        p,
        &format!("{kind}.shared_prefix_tokens"),
        shared_prefix_tokens,
    );
}

/// A token count of a workload, at most `MAX_TOKENS`.
fn tokens_at_most(p: &mut Vec<Problem>, path: &str, v: u32) {
    check(
        p,
        v as f64 <= MAX_TOKENS,
        path,
        &format!("must be at most {MAX_TOKENS} tokens (a request's most)"),
    );
}

/// Standard normal draw (Box-Muller).
/// A `Dist` ready to draw from (`Dist::sampler`): a log-normal's `mu` and `sigma` are
/// computed once instead of per draw; the draws are the same, bit for bit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    Plain(Dist),
    Lognormal { mu: f64, sigma: f64 },
}

impl Sampler {
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> f64 {
        match *self {
            Sampler::Lognormal { mu, sigma } => (mu + sigma * normal(rng)).exp(),
            Sampler::Plain(Dist::Fixed { value }) => value,
            Sampler::Plain(Dist::Uniform { min, max }) => min + (max - min) * rng.random::<f64>(),
            Sampler::Plain(Dist::Exponential { mean }) => -mean * (1.0 - rng.random::<f64>()).ln(),
            // `Dist::sampler` turns every log-normal into one of the above.
            Sampler::Plain(d @ Dist::Lognormal { .. }) => d.sampler().sample(rng),
        }
    }

    /// A token count: rounded, at least `min`, at most `MAX_TOKENS`.
    pub fn sample_tokens(&self, rng: &mut ChaCha8Rng, min: u32) -> u32 {
        let v = self.sample(rng).round();
        v.clamp(min as f64, MAX_TOKENS) as u32
    }
}

/// A standard normal draw (Box-Muller).
pub fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Gamma(shape k, scale 1) by Marsaglia and Tsang (with the k < 1 boost).
pub(crate) fn gamma(rng: &mut ChaCha8Rng, k: f64) -> f64 {
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
    /// A benchmark client's run (`bench::BenchClient`): a fixed list of prompts, sent
    /// under a concurrency cap; the run ends with the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bench: Option<bench::BenchClient>,
    /// Load over the day as multipliers of the nominal load (`twin plan` plans for the
    /// peak; `twin simulate` applies it to open-loop arrivals only). None: constant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_curve: Option<RateCurve>,
    #[serde(default)]
    pub provenance: BTreeMap<String, String>,
}

impl WorkloadConfig {
    /// A benchmark client's run named `name` (`bench::BenchClient`).
    pub fn bench_run(name: &str, client: bench::BenchClient) -> WorkloadConfig {
        WorkloadConfig {
            name: name.into(),
            description: String::new(),
            closed_loop: None,
            open_loop: None,
            agentx: None,
            trace: None,
            bench: Some(client),
            rate_curve: None,
            provenance: BTreeMap::new(),
        }
    }

    /// A trace replay named `name`: every record, at the recorded pace.
    pub fn trace_replay(name: &str) -> WorkloadConfig {
        WorkloadConfig {
            name: name.into(),
            description: String::new(),
            closed_loop: None,
            open_loop: None,
            agentx: None,
            trace: Some(TraceReplay {
                time_scale: 1.0,
                max_requests: None,
            }),
            bench: None,
            rate_curve: None,
            provenance: BTreeMap::new(),
        }
    }
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

impl ClosedLoop {
    /// Every problem with the `[closed_loop]` table, appended to `p`.
    fn problems(&self, p: &mut Vec<Problem>) {
        check(
            p,
            self.concurrency >= 1,
            "closed_loop.concurrency",
            "must be >= 1 (at most limits.max_sessions)",
        );
        request_problems(
            "closed_loop",
            [&self.input_tokens, &self.output_tokens],
            self.shared_prefix_tokens,
            p,
        );
        self.think_time_s.problems("closed_loop.think_time_s", p);
    }
}

impl OpenLoop {
    /// Every problem with the `[open_loop]` table, appended to `p`.
    fn problems(&self, p: &mut Vec<Problem>) {
        check_num(
            p,
            self.rate_per_s,
            self.rate_per_s > 0.0,
            "open_loop.rate_per_s",
            "must be > 0",
        );
        if let Arrival::Gamma { cv } = self.arrival {
            check_num(
                p,
                cv,
                cv > 0.0 && cv <= 100.0,
                "open_loop.arrival.cv",
                "must be in (0, 100]",
            );
        }
        request_problems(
            "open_loop",
            [&self.input_tokens, &self.output_tokens],
            self.shared_prefix_tokens,
            p,
        );
    }
}

impl AgentX {
    /// Every problem with the `[agentx]` table, appended to `p`.
    fn problems(&self, p: &mut Vec<Problem>) {
        check(
            p,
            self.sessions >= 1,
            "agentx.sessions",
            "must be >= 1 (at most limits.max_sessions)",
        );
        check(
            p,
            self.system_prompts >= 1,
            "agentx.system_prompts",
            "must be >= 1",
        );
        check(p, self.max_turns >= 1, "agentx.max_turns", "must be >= 1");
        check_num(
            p,
            self.idle_gap_cap_s,
            self.idle_gap_cap_s >= 0.0,
            "agentx.idle_gap_cap_s",
            "must be >= 0",
        );
        check_num(
            p,
            self.start_spread_s,
            self.start_spread_s >= 0.0,
            "agentx.start_spread_s",
            "must be >= 0",
        );
        check_num(
            p,
            self.subagent_probability,
            (0.0..=1.0).contains(&self.subagent_probability),
            "agentx.subagent_probability",
            "must be in [0, 1]",
        );
        tokens_at_most(p, "agentx.system_prompt_tokens", self.system_prompt_tokens);
        self.task_tokens.token_problems("agentx.task_tokens", p);
        self.turn_new_tokens
            .token_problems("agentx.turn_new_tokens", p);
        self.output_tokens.token_problems("agentx.output_tokens", p);
        self.max_context_tokens
            .token_problems("agentx.max_context_tokens", p);
        self.idle_gap_s.problems("agentx.idle_gap_s", p);
        self.subagent_turns.problems("agentx.subagent_turns", p);
        self.subagent_task_tokens
            .token_problems("agentx.subagent_task_tokens", p);
    }
}

impl WorkloadConfig {
    pub fn problems(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        let kinds = [
            self.closed_loop.is_some(),
            self.open_loop.is_some(),
            self.agentx.is_some(),
            self.trace.is_some(),
            self.bench.is_some(),
        ];
        check(
            &mut p,
            kinds.iter().filter(|k| **k).count() == 1,
            "workload",
            "set exactly one of [closed_loop], [open_loop], [agentx], [trace], [bench]",
        );
        if let Some(b) = &self.bench {
            p.extend(b.problems());
        }
        if let Some(c) = &self.closed_loop {
            c.problems(&mut p);
        }
        if let Some(o) = &self.open_loop {
            o.problems(&mut p);
        }
        if let Some(a) = &self.agentx {
            a.problems(&mut p);
        }
        if let Some(t) = &self.trace {
            check_num(
                &mut p,
                t.time_scale,
                t.time_scale > 0.0,
                "trace.time_scale",
                "must be > 0",
            );
        }
        if let Some(c) = &self.rate_curve {
            c.problems("rate_curve", &mut p);
        }
        p
    }

    /// Whether the discrete-event simulation follows the rate curve (open-loop
    /// arrivals); for the other kinds only `twin plan` uses it.
    pub fn curve_is_simulated(&self) -> bool {
        self.rate_curve.is_some() && self.open_loop.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

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

    /// A log-normal's sampler draws exp(ln(mean) - s2/2 + sqrt(s2) * z), s2 = ln(1 + cv^2),
    /// from the same normal draw z, bit for bit; cv = 0 is the mean without a draw.
    #[test]
    fn a_lognormal_sampler_draws_the_formula() {
        let (mean, cv) = (300.0f64, 1.0f64);
        let s = Dist::Lognormal { mean, cv }.sampler();
        for seed in 0..50 {
            let z = normal(&mut ChaCha8Rng::seed_from_u64(seed));
            let s2 = (1.0 + cv * cv).ln();
            let want = (mean.ln() - 0.5 * s2 + s2.sqrt() * z).exp();
            let got = s.sample(&mut ChaCha8Rng::seed_from_u64(seed));
            assert_eq!(got.to_bits(), want.to_bits(), "seed {seed}");
        }
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let before = rng.clone();
        assert_eq!(Dist::Lognormal { mean, cv: 0.0 }.sample(&mut rng), mean);
        assert_eq!(rng, before, "no draw at cv = 0");
    }
}
