//! The planner: which deployment of a model serves a workload best under latency SLOs,
//! or how many GPUs a target rate needs.
//!
//! Pure, like the rest of `sim`: the caller loads files, runs the discrete-event
//! simulation of the candidates the screen keeps, and prints. The steps:
//! 1. [`space`]: the search space (P/D split as prefill instances x DEP and decode
//!    groups x DEP, or aggregated serving; decode batch cap, MTP draft tokens,
//!    redundant experts, prefill chunk, hardware per pool), enumerated in one fixed
//!    order;
//! 2. [`screen`]: steady-state estimates of each candidate from the cost model
//!    (prefill service rate per rank, decode step time at the batch the load implies,
//!    an M/M/c queue for the TTFT, KV capacity), with the rules that reject it, each
//!    with its reason; the survivors ranked on the objective, the best
//!    `max_simulations` kept for simulation;
//! 3. [`select`]: the simulated candidates checked against the SLOs, the Pareto
//!    frontier (tokens/s per GPU against tokens/s per user), the best on the
//!    objective, and when nothing is feasible, which constraint binds and how close
//!    the best came.
//!
//! Every evaluated candidate becomes a [`Record`] (one JSON line); shards of the
//! candidate list (`index % shards == shard`) write records that [`select::merge`]
//! combines into exactly the result of one run.

mod queue;
pub mod screen;
pub mod select;
pub mod shape;
pub mod space;

pub use screen::{screen, AnalyticPricer, Estimate, PoolPricing, Pricer, ScreenInputs};
pub use select::{merge, select, to_simulate, Counts, Outcome, ShardFile};
pub use shape::WorkShape;
pub use space::{enumerate, SearchSpace, DENSE_TPS};

use crate::serde_defaults::{is_one, one};
use crate::serving::{Mode, Report, ServingScenario};
use crate::tco::Finance;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// One pool of a candidate deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolChoice {
    /// Hardware name (a `scenarios/hardware` file).
    pub hardware: String,
    pub instances: u32,
    pub dep: u32,
    /// GPUs per rank splitting its layers (tensor parallelism; `dep` is then 1).
    #[serde(
        default = "crate::serde_defaults::one",
        skip_serializing_if = "crate::serde_defaults::is_one"
    )]
    pub tp: u32,
    pub redundant_experts: u32,
    /// Decode (and mixed): most requests a rank runs in a step.
    pub max_batch_per_rank: u32,
    /// Prefill (and mixed): token budget per rank per step.
    pub chunk_tokens_per_rank: u32,
}

impl PoolChoice {
    /// Attention replicas of the pool: instances x DEP.
    pub fn ranks(&self) -> u64 {
        self.instances as u64 * self.dep as u64
    }
    pub fn gpus(&self) -> u64 {
        self.ranks() * self.tp.max(1) as u64
    }
    /// `DEP8` or `TP8`.
    pub fn layout_name(&self) -> String {
        if self.tp > 1 {
            format!("TP{}", self.tp)
        } else {
            format!("DEP{}", self.dep)
        }
    }
}

/// A candidate deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// `disaggregated` or `aggregated`.
    pub mode: Mode,
    /// The prefill pool (disaggregated only).
    pub prefill: Option<PoolChoice>,
    /// The decode pool; in aggregated mode the one mixed pool.
    pub decode: PoolChoice,
    pub mtp_draft_tokens: u32,
    /// Multiplier of the workload's nominal load (open-loop rate, sessions or users)
    /// the candidate is simulated at: the rate curve's peak with a GPU budget, or the
    /// load the target rate needs.
    pub load_scale: f64,
}

impl Candidate {
    pub fn gpus(&self) -> u64 {
        self.prefill.as_ref().map_or(0, |p| p.gpus()) + self.decode.gpus()
    }

    /// A short label: `20xDEP2 gb300 c8192 + 1xDEP32 gb300 b256 mtp3` (`r32`: redundant
    /// experts), or `aggregated 9xDEP8 gb300 b256 c2048 mtp3`.
    pub fn label(&self) -> String {
        let pool = |p: &PoolChoice, setting: String| {
            let r = if p.redundant_experts > 0 {
                format!(" r{}", p.redundant_experts)
            } else {
                String::new()
            };
            format!(
                "{}x{} {} {setting}{r}",
                p.instances,
                p.layout_name(),
                p.hardware
            )
        };
        let d = &self.decode;
        let decode = pool(d, format!("b{}", d.max_batch_per_rank));
        match &self.prefill {
            Some(p) => format!(
                "{} + {decode} mtp{}",
                pool(p, format!("c{}", p.chunk_tokens_per_rank)),
                self.mtp_draft_tokens
            ),
            None => format!(
                "aggregated {decode} c{} mtp{}",
                d.chunk_tokens_per_rank, self.mtp_draft_tokens
            ),
        }
    }

    /// A stable key: FNV-1a of the candidate's JSON, in hex.
    pub fn key(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        format!("{:016x}", fnv1a64(json.as_bytes()))
    }

    /// `base` with this deployment (pools, mode, MTP) in place of its own; the
    /// router, KV transfer, SLOs, prices and limits stay.
    pub fn apply(&self, base: &ServingScenario) -> ServingScenario {
        let mut sc = base.clone();
        sc.serving.mode = self.mode;
        let set = |pool: &mut crate::serving::PoolConfig, c: &PoolChoice| {
            pool.instances = c.instances;
            pool.dep = c.dep;
            pool.tp = c.tp;
            pool.redundant_experts = c.redundant_experts;
            pool.max_batch_per_rank = c.max_batch_per_rank;
            pool.chunk_tokens_per_rank = c.chunk_tokens_per_rank;
        };
        if let Some(p) = &self.prefill {
            set(&mut sc.serving.prefill, p);
        }
        set(&mut sc.serving.decode, &self.decode);
        sc.serving.mtp.draft_tokens = Some(self.mtp_draft_tokens);
        // The plan's budget replaces the scenario's (the screen checked the candidate
        // against it): a 16-GPU candidate of `--gpus 16` runs under a scenario that
        // said `serving.gpus = 8`.
        if sc.serving.gpus.is_some() {
            sc.serving.gpus = Some(sc.gpus());
        }
        sc
    }
}

/// FNV-1a, 64 bits: a stable hash for keys that must not change between runs (the
/// one definition is `spec::stats`).
use spec::stats::fnv1a64;

/// Latency and speed objectives; each is met by the simulated P90.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Slo {
    /// P90 time to first token at most this.
    pub ttft_p90_ms: Option<f64>,
    /// P90 time per output token at most this.
    pub tpot_p90_ms: Option<f64>,
    /// Per-user output speed that 90% of users reach (its P10) at least this. (The
    /// P90 of the speeds is what the fastest 10% reach: no SLO.)
    pub user_tok_s_p10: Option<f64>,
}

impl Slo {
    /// The constraints set, as (name, limit, whether larger is better).
    pub fn constraints(&self) -> Vec<(&'static str, f64, bool)> {
        let mut v = Vec::new();
        if let Some(x) = self.ttft_p90_ms {
            v.push(("ttft_p90_ms", x, false));
        }
        if let Some(x) = self.tpot_p90_ms {
            v.push(("tpot_p90_ms", x, false));
        }
        if let Some(x) = self.user_tok_s_p10 {
            v.push(("user_tok_s_p10", x, true));
        }
        v
    }
}

/// What the planner optimises among feasible candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// Most tokens (all kinds) per second per GPU.
    #[default]
    TokSPerGpu,
    /// Lowest GPU cost per million tokens.
    UsdPerMTokens,
    /// Fewest GPUs (ties: most tokens per second per GPU).
    Gpus,
}

impl Objective {
    pub fn key(self) -> &'static str {
        match self {
            Objective::TokSPerGpu => "tok_s_per_gpu",
            Objective::UsdPerMTokens => "usd_per_m_tokens",
            Objective::Gpus => "gpus",
        }
    }

    /// Whether `a` is strictly better than `b` on this objective.
    pub fn better(self, a: &Metrics, b: &Metrics) -> bool {
        match self {
            Objective::TokSPerGpu => a.tok_s_per_gpu > b.tok_s_per_gpu,
            Objective::UsdPerMTokens => a.usd_per_m_tokens < b.usd_per_m_tokens,
            Objective::Gpus => {
                a.gpus < b.gpus || (a.gpus == b.gpus && a.tok_s_per_gpu > b.tok_s_per_gpu)
            }
        }
    }
}

/// What the deployment must carry.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sizing {
    /// Use at most this many GPUs (the prefill pool fills what decode leaves) for the
    /// workload as it is (at the rate curve's peak).
    Gpus(u64),
    /// Carry this many requests per second (at the rate curve's peak, the curve's
    /// multipliers scaling it), with as few GPUs as the space allows.
    RequestsPerS(f64),
    /// Carry this many tokens (input + output) per second.
    TokensPerS(f64),
}

/// A simulated candidate's figures, as the selection reads them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Metrics {
    pub gpus: u64,
    pub tok_s_per_gpu: f64,
    pub output_tok_s_per_gpu: f64,
    pub ttft_p90_ms: f64,
    pub tpot_p90_ms: f64,
    /// The per-user output speed the fastest 10% of users reach (the published
    /// figure's definition).
    pub user_tok_s_p90: f64,
    /// The per-user output speed 90% of users reach (the SLO's).
    #[serde(default)]
    pub user_tok_s_p10: f64,
    pub requests_per_s: f64,
    /// Dropped requests over arrived ones (whole run).
    pub dropped_fraction: f64,
    pub usd_per_m_tokens: f64,
    /// Mean TTFT and TPOT (ms), what a measured-runs band lies around (0 where unknown:
    /// a screen's estimate, or an answer written before they were kept).
    #[serde(default)]
    pub ttft_mean_ms: f64,
    #[serde(default)]
    pub tpot_mean_ms: f64,
}

/// The field of SLO metric `name` among a candidate's three SLO figures (NaN for
/// another name).
fn slo_field(name: &str, ttft_p90_ms: f64, tpot_p90_ms: f64, user_tok_s_p10: f64) -> f64 {
    match name {
        "ttft_p90_ms" => ttft_p90_ms,
        "tpot_p90_ms" => tpot_p90_ms,
        "user_tok_s_p10" => user_tok_s_p10,
        _ => f64::NAN,
    }
}

impl Metrics {
    /// The value of SLO metric `name`.
    pub fn slo_value(&self, name: &str) -> f64 {
        slo_field(
            name,
            self.ttft_p90_ms,
            self.tpot_p90_ms,
            self.user_tok_s_p10,
        )
    }

    /// The figures of several runs of one candidate (seeds): each the mean over the
    /// runs, except `usd_per_m_tokens`, which `finance` (of the mean throughput) sets.
    pub fn mean(runs: &[Metrics], finance: &Finance) -> Metrics {
        let n = runs.len().max(1) as f64;
        let avg = |f: fn(&Metrics) -> f64| runs.iter().map(f).sum::<f64>() / n;
        Metrics {
            gpus: runs.first().map_or(0, |m| m.gpus),
            tok_s_per_gpu: avg(|m| m.tok_s_per_gpu),
            output_tok_s_per_gpu: avg(|m| m.output_tok_s_per_gpu),
            ttft_p90_ms: avg(|m| m.ttft_p90_ms),
            tpot_p90_ms: avg(|m| m.tpot_p90_ms),
            user_tok_s_p90: avg(|m| m.user_tok_s_p90),
            user_tok_s_p10: avg(|m| m.user_tok_s_p10),
            requests_per_s: avg(|m| m.requests_per_s),
            dropped_fraction: avg(|m| m.dropped_fraction),
            usd_per_m_tokens: finance.usd_per_m_tokens.cost_all_tokens,
            ttft_mean_ms: avg(|m| m.ttft_mean_ms),
            tpot_mean_ms: avg(|m| m.tpot_mean_ms),
        }
    }

    /// The half-widths of the 95% confidence intervals of the figures' means over
    /// `runs` (seeds; all 0 for one run).
    pub fn ci95(runs: &[Metrics]) -> SeedSpread {
        let ci = |f: fn(&Metrics) -> f64| {
            crate::serving::replicas::spread("", "", runs.iter().map(f).collect()).ci95
        };
        SeedSpread {
            seeds: runs.len() as u32,
            tok_s_per_gpu: ci(|m| m.tok_s_per_gpu),
            ttft_p90_ms: ci(|m| m.ttft_p90_ms),
            tpot_p90_ms: ci(|m| m.tpot_p90_ms),
            user_tok_s_p90: ci(|m| m.user_tok_s_p90),
            user_tok_s_p10: ci(|m| m.user_tok_s_p10),
            requests_per_s: ci(|m| m.requests_per_s),
        }
    }

    /// The figures of a simulation report and its finance.
    pub fn of(report: &Report, finance: &Finance) -> Metrics {
        let a = &report.accounting;
        Metrics {
            gpus: report.gpus,
            tok_s_per_gpu: report.throughput_tok_s_per_gpu.total,
            output_tok_s_per_gpu: report.throughput_tok_s_per_gpu.output,
            ttft_p90_ms: report.ttft_ms.p90,
            tpot_p90_ms: report.tpot_ms.p90,
            user_tok_s_p90: report.per_user_tok_s.p90,
            user_tok_s_p10: report.per_user_tok_s.p10,
            requests_per_s: report.requests_per_s,
            dropped_fraction: if a.arrived > 0 {
                a.dropped as f64 / a.arrived as f64
            } else {
                0.0
            },
            usd_per_m_tokens: finance.usd_per_m_tokens.cost_all_tokens,
            ttft_mean_ms: report.ttft_ms.mean,
            tpot_mean_ms: report.tpot_ms.mean,
        }
    }
}

/// How far a simulated candidate's figures move between seeds: the half-widths of the
/// 95% confidence intervals of their means (`Metrics::ci95`), in the figures' units.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct SeedSpread {
    pub seeds: u32,
    pub tok_s_per_gpu: f64,
    pub ttft_p90_ms: f64,
    pub tpot_p90_ms: f64,
    pub user_tok_s_p90: f64,
    #[serde(default)]
    pub user_tok_s_p10: f64,
    pub requests_per_s: f64,
}

impl SeedSpread {
    /// The SLOs of `slo` whose limit lies within the 95% interval of the mean `m`:
    /// whether the candidate meets them is not settled by its seeds (name, mean,
    /// half-width, limit).
    pub fn slos_within_noise(&self, slo: &Slo, m: &Metrics) -> Vec<(&'static str, f64, f64, f64)> {
        slo.constraints()
            .into_iter()
            .filter_map(|(name, limit, _)| {
                let (v, ci) = (
                    m.slo_value(name),
                    slo_field(
                        name,
                        self.ttft_p90_ms,
                        self.tpot_p90_ms,
                        self.user_tok_s_p10,
                    ),
                );
                (ci > 0.0 && (v - limit).abs() <= ci).then_some((name, v, ci, limit))
            })
            .collect()
    }
}

/// Where a candidate's evaluation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// A rule of the screen rejected it.
    RejectedByScreen,
    /// It passed the screen but ranked below the candidates simulated.
    RankedOut,
    /// Simulated; `reasons` says why it is infeasible, if it is.
    Simulated,
    /// The simulation failed (its error is the reason).
    SimulationFailed,
}

/// Why a candidate was rejected: the rule (an SLO metric, `deployment`, `kv`,
/// `prefill-capacity`, ...) and a sentence with the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    pub rule: String,
    pub message: String,
}

impl Reason {
    pub fn new(rule: &str, message: impl Into<String>) -> Self {
        Reason {
            rule: rule.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// One evaluated candidate: a line of a shard's JSONL file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The grid's hash (`Header::grid`).
    pub grid: String,
    /// Position in the grid's candidate list.
    pub index: usize,
    /// `Candidate::key` of the candidate as evaluated (after sizing).
    pub key: String,
    pub candidate: Candidate,
    pub estimate: Estimate,
    pub status: Status,
    /// Why it was rejected or is infeasible (empty: feasible or ranked out).
    pub reasons: Vec<Reason>,
    /// With several seeds per candidate: the means' 95% half-widths (`metrics` holds
    /// the means, `report` the first seed's run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<SeedSpread>,
    pub metrics: Option<Metrics>,
    pub finance: Option<Finance>,
    pub report: Option<Report>,
}

/// What a grid is: every input that decides its records. Shards of one grid have
/// equal headers; `grid` hashes the rest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub grid: String,
    pub version: String,
    pub scenario: String,
    pub model: String,
    /// The model routes tokens to experts (its vLLM lines enable expert parallelism).
    /// Left out of the JSON when true, so MoE grids keep their hash.
    #[serde(
        default = "crate::serde_defaults::yes",
        skip_serializing_if = "is_true"
    )]
    pub moe: bool,
    pub workload: String,
    pub seed: u64,
    /// Seeds each simulated candidate runs (`seed` and the next ones); its figures are
    /// their means. Left out of the JSON at 1, so one-seed grids keep their hash.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub seeds: u32,
    /// The coarse model's copies asked (`fidelity.cohort`); left out of the JSON at 1,
    /// so exact grids keep their hash.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub cohort: u32,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub sizing: Sizing,
    pub slo: Slo,
    pub objective: Objective,
    pub tco: String,
    /// The price sheet the tokens are valued at.
    pub price_sheet: String,
    pub token_prices: crate::serving::TokenPrices,
    pub space: SearchSpace,
    /// Candidates in the grid.
    pub candidates: usize,
    /// Candidates the screen ranked for simulation, at most `max_simulations`.
    pub to_simulate: Vec<usize>,
    /// The rate curve's 24 hourly multipliers and its peak (none: constant load).
    pub curve_hourly: Option<Vec<f64>>,
    pub curve_peak: f64,
    /// The workload arrives at a fixed rate (open loop, trace) into a GPU budget: every
    /// candidate that carries it on as many GPUs has the same tokens per GPU, so ties
    /// on the objective are broken by latency ([`Ranking`]). Left out of the JSON when
    /// false, so other grids keep their hash.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fixed_load: bool,
    /// The measured-runs band of the scenario's engine on each GPU of the space that
    /// has one (by hardware name): the answer puts it around the best's means. Left
    /// out of the JSON when empty (no engine, `--physics-only`), so such grids keep
    /// their hash.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub runs_bands: BTreeMap<String, crate::serving::runs_band::RunsBand>,
}

impl Header {
    /// The grid hash of everything else in the header.
    pub fn compute_grid(&self) -> String {
        let mut h = self.clone();
        h.grid = String::new();
        let json = serde_json::to_string(&h).unwrap_or_default();
        format!("{:016x}", fnv1a64(json.as_bytes()))
    }
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// How candidates are ranked: on the objective; and at a fixed load, where the
/// objective ties for every candidate that carries the load on as many GPUs, those
/// within [`TIE`] of the best on it rank first, among themselves by TPOT P90, then
/// TTFT P90, the figures that still separate them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranking {
    pub objective: Objective,
    pub fixed_load: bool,
}

/// Relative distance from the best on the objective within which a fixed load's
/// candidates tie (simulated throughputs of one offered load differ by their windows'
/// noise).
pub const TIE: f64 = 0.01;

impl Ranking {
    pub fn of(h: &Header) -> Ranking {
        Ranking {
            objective: h.objective,
            fixed_load: h.fixed_load,
        }
    }

    /// Positions in `ms`, best first (ties in position order).
    pub fn order(&self, ms: &[Metrics]) -> Vec<usize> {
        use std::cmp::Ordering;
        let on_objective = |a: &Metrics, b: &Metrics| {
            if self.objective.better(a, b) {
                Ordering::Less
            } else if self.objective.better(b, a) {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        };
        let mut idx: Vec<usize> = (0..ms.len()).collect();
        let top = idx
            .iter()
            .copied()
            .min_by(|&a, &b| on_objective(&ms[a], &ms[b]).then(a.cmp(&b)));
        let tied = |m: &Metrics| match (self.fixed_load, top) {
            (true, Some(t)) => self.ties(m, &ms[t]),
            _ => false,
        };
        let by_latency = |a: &Metrics, b: &Metrics| {
            a.tpot_p90_ms
                .total_cmp(&b.tpot_p90_ms)
                .then(a.ttft_p90_ms.total_cmp(&b.ttft_p90_ms))
        };
        idx.sort_by(|&a, &b| {
            let (ma, mb) = (&ms[a], &ms[b]);
            match (tied(ma), tied(mb)) {
                (true, true) => by_latency(ma, mb),
                (true, false) => Ordering::Less,
                (false, true) => Ordering::Greater,
                (false, false) => on_objective(ma, mb),
            }
            .then(a.cmp(&b))
        });
        idx
    }

    /// Whether `m` ties with `top`, the best on the objective, at a fixed load.
    fn ties(&self, m: &Metrics, top: &Metrics) -> bool {
        let near = |x: f64, best: f64| (x - best).abs() <= TIE * best.abs();
        match self.objective {
            Objective::TokSPerGpu => near(m.tok_s_per_gpu, top.tok_s_per_gpu),
            Objective::UsdPerMTokens => near(m.usd_per_m_tokens, top.usd_per_m_tokens),
            Objective::Gpus => m.gpus == top.gpus && near(m.tok_s_per_gpu, top.tok_s_per_gpu),
        }
    }

    /// What the ranking says beyond the objective, for the plan's heading (none when
    /// the objective alone ranks).
    pub fn tie_break(&self) -> Option<String> {
        self.fixed_load.then(|| {
            format!(
                "at this fixed arrival rate candidates on as many GPUs carry the same tokens, so those within {:.0}% on {} are ranked by TPOT p90, then TTFT p90",
                100.0 * TIE,
                self.objective.key()
            )
        })
    }
}

/// Everything that can go wrong in planning.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("empty search space: {0}")]
    EmptySpace(String),
    #[error("{0}")]
    Infeasible(String),
    #[error("cannot merge: {0}")]
    Merge(String),
}

#[cfg(test)]
mod tests;
