//! Scenario configuration of the serving simulator, as read from a full scenario file
//! (`scenarios/*.toml`). Deserialization only fills defaults; `validate` returns every
//! problem at once with its field path.

use crate::cost::Layout;
use crate::hardware::PriceBasis;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use super::price::PriceConfig;

/// One serving experiment: hardware, model and workload by name (files the caller
/// loads), the deployment, the router, the SLOs and the price sheet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServingScenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Name of a `scenarios/hardware/*.toml` file (or a path).
    pub hardware: String,
    /// Name of a `scenarios/models/*.toml` file (or a path).
    pub model: String,
    /// Name of a `scenarios/workloads/*.toml` file (or a path).
    pub workload: String,
    /// Overrides of the workload's fields, `PATH = VALUE` as with `--set workload.PATH`
    /// (for example `agentx.sessions = 256`); a command line `--set` wins.
    #[serde(default)]
    pub workload_set: Vec<String>,
    #[serde(default)]
    pub seed: u64,
    /// Simulated seconds in all, warm-up included.
    pub duration_s: f64,
    /// Leading seconds excluded from every metric.
    #[serde(default)]
    pub warmup_s: f64,
    pub serving: ServingConfig,
    #[serde(default)]
    pub router: RouterConfig,
    #[serde(default)]
    pub slo: SloConfig,
    #[serde(default)]
    pub price: PriceConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub provenance: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Prefill and decode in separate pools; KV moves from prefill to decode.
    #[default]
    Disaggregated,
    /// One pool (`serving.decode`) runs prefill chunks and decode in the same steps.
    Aggregated,
    /// Only the prefill pool; the decode side is faked (as the reference report's
    /// prefill benchmarks do): a request completes when its prefill does, with its
    /// first token, and its session continues as if it had produced its output.
    PrefillOnly,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServingConfig {
    #[serde(default)]
    pub mode: Mode,
    /// The prefill pool (unused in aggregated mode).
    #[serde(default = "PoolConfig::default_prefill")]
    pub prefill: PoolConfig,
    /// The decode pool; in aggregated mode the single mixed pool.
    #[serde(default = "PoolConfig::default_decode")]
    pub decode: PoolConfig,
    #[serde(default)]
    pub kv_transfer: KvTransferConfig,
    #[serde(default)]
    pub mtp: MtpConfig,
}

/// A pool of identical DEP groups ("instances").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolConfig {
    pub instances: u32,
    /// Ranks (GPUs) per instance: data-parallel attention, expert-parallel MoE.
    pub dep: u32,
    #[serde(default)]
    pub redundant_experts: u32,
    #[serde(default = "yes")]
    pub overlap_microbatches: bool,
    /// Decode: most requests one rank runs in a step.
    #[serde(default = "d_max_batch")]
    pub max_batch_per_rank: u32,
    /// Prefill: token budget per rank per step (chunked prefill).
    #[serde(default = "d_chunk")]
    pub chunk_tokens_per_rank: u32,
    /// Prefill: most requests one rank works on in a step.
    #[serde(default = "d_prefill_reqs")]
    pub max_prefill_requests_per_rank: u32,
    /// Overrides the cost model's KV capacity per rank, tokens.
    #[serde(default)]
    pub kv_capacity_tokens_per_rank: Option<u64>,
    /// Prefix-cache capacity per instance in HBM, tokens; default: the instance's KV
    /// capacity (dep x per-rank capacity).
    #[serde(default)]
    pub prefix_cache_tokens: Option<u64>,
    /// Second prefix-cache tier in host memory per instance, tokens (0 = none).
    #[serde(default)]
    pub host_cache_tokens: u64,
    /// Requests waiting in this pool beyond which new ones are dropped.
    #[serde(default = "d_max_queued")]
    pub max_queued_requests: u32,
}

fn yes() -> bool {
    true
}
fn d_max_batch() -> u32 {
    256
}
fn d_chunk() -> u32 {
    8192
}
fn d_prefill_reqs() -> u32 {
    64
}
fn d_max_queued() -> u32 {
    100_000
}

impl PoolConfig {
    pub fn default_prefill() -> Self {
        PoolConfig {
            instances: 1,
            dep: 2,
            ..Self::default_decode()
        }
    }
    pub fn default_decode() -> Self {
        PoolConfig {
            instances: 1,
            dep: 8,
            redundant_experts: 0,
            overlap_microbatches: true,
            max_batch_per_rank: d_max_batch(),
            chunk_tokens_per_rank: d_chunk(),
            max_prefill_requests_per_rank: d_prefill_reqs(),
            kv_capacity_tokens_per_rank: None,
            prefix_cache_tokens: None,
            host_cache_tokens: 0,
            max_queued_requests: d_max_queued(),
        }
    }
    /// The cost-model layout of one instance.
    pub fn layout(&self) -> Layout {
        Layout {
            dep: self.dep,
            redundant_experts: self.redundant_experts,
            overlap_microbatches: self.overlap_microbatches,
        }
    }
    pub fn gpus(&self) -> u64 {
        self.instances as u64 * self.dep as u64
    }

    /// Every problem with the pool at `name` (`serving.decode`), appended to `p`.
    pub fn problems(&self, name: &str, p: &mut Vec<String>) {
        check(
            p,
            self.instances >= 1,
            &format!("{name}.instances"),
            "must be >= 1",
        );
        check(
            p,
            self.dep >= 1 && self.dep <= 4096,
            &format!("{name}.dep"),
            "must be in 1..=4096",
        );
        check(
            p,
            self.max_batch_per_rank >= 1,
            &format!("{name}.max_batch_per_rank"),
            "must be >= 1",
        );
        check(
            p,
            self.chunk_tokens_per_rank >= 1,
            &format!("{name}.chunk_tokens_per_rank"),
            "must be >= 1",
        );
        check(
            p,
            self.max_prefill_requests_per_rank >= 1,
            &format!("{name}.max_prefill_requests_per_rank"),
            "must be >= 1",
        );
        check(
            p,
            self.max_queued_requests >= 1,
            &format!("{name}.max_queued_requests"),
            "must be >= 1",
        );
        if let Some(c) = self.kv_capacity_tokens_per_rank {
            check(
                p,
                c >= 1,
                &format!("{name}.kv_capacity_tokens_per_rank"),
                "must be >= 1",
            );
        }
    }
}

/// KV transfer from prefill to decode ranks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvTransferConfig {
    /// GPUs per NVLink domain for placement; default: the hardware's
    /// `nvlink_domain_gpus`. GPUs are numbered prefill pool first, then decode.
    #[serde(default)]
    pub domain_gpus: Option<u32>,
    /// Fraction of the link's datasheet bandwidth a transfer achieves.
    #[serde(default = "d_link_eff")]
    pub link_efficiency: f64,
    /// Fixed cost per transfer on top of the link latency (handshake, block table).
    #[serde(default)]
    pub setup_s: f64,
}

fn d_link_eff() -> f64 {
    0.8
}

impl Default for KvTransferConfig {
    fn default() -> Self {
        KvTransferConfig {
            domain_gpus: None,
            link_efficiency: d_link_eff(),
            setup_s: 0.0,
        }
    }
}

/// MTP speculative decoding; unset fields come from the model's `mtp` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct MtpConfig {
    #[serde(default)]
    pub draft_tokens: Option<u32>,
    /// Acceptance of draft i given all before it were accepted.
    #[serde(default)]
    pub acceptance: Option<Vec<f64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DecodeRouter {
    /// Fewest requests on the rank (running, joining, in transfer and waiting).
    #[default]
    LeastRequests,
    RoundRobin,
    /// Fewest KV tokens reserved on the rank.
    LeastTokens,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PrefillRouter {
    /// Cache-aware least work: the instance minimising queued prefill tokens plus this
    /// request's uncached tokens there (its longest cached prefix counts).
    #[default]
    PrefixAffinity,
    /// Fewest queued prefill tokens.
    LeastLoad,
    RoundRobin,
}

/// How a prefill instance places a request on one of its ranks (data-parallel
/// attention replicas); the request stays there for all its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PrefillRank {
    /// Fewest queued uncached tokens.
    #[default]
    LeastTokens,
    /// Fewest queued requests (vLLM's DP balancing counts requests).
    LeastRequests,
    /// Least estimated queued time: each request priced alone on a rank by the cost
    /// model (cached context included) when it is placed.
    LeastCost,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouterConfig {
    #[serde(default)]
    pub decode: DecodeRouter,
    #[serde(default)]
    pub prefill: PrefillRouter,
    #[serde(default)]
    pub prefill_rank: PrefillRank,
    /// Prefix affinity: weight of the request's own uncached tokens against the tokens
    /// queued ahead of it. Above 1, recomputing a context elsewhere must save more than
    /// it costs the pool, which keeps sessions on their cached instance and stops
    /// migration cascades (a migrant's recompute load pushing that instance's own
    /// sessions away in turn).
    #[serde(default = "d_recompute_weight")]
    pub prefill_recompute_weight: f64,
}

fn d_recompute_weight() -> f64 {
    2.0
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            decode: DecodeRouter::default(),
            prefill: PrefillRouter::default(),
            prefill_rank: PrefillRank::default(),
            prefill_recompute_weight: d_recompute_weight(),
        }
    }
}

/// Service-level objectives for goodput: a request counts when it meets both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloConfig {
    #[serde(default = "d_ttft")]
    pub ttft_ms: f64,
    #[serde(default = "d_tpot")]
    pub tpot_ms: f64,
}

fn d_ttft() -> f64 {
    10_000.0
}
fn d_tpot() -> f64 {
    20.0
}

impl Default for SloConfig {
    fn default() -> Self {
        SloConfig {
            ttft_ms: d_ttft(),
            tpot_ms: d_tpot(),
        }
    }
}

/// Bounds that keep every run finite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// The run stops with an error after this many events.
    #[serde(default = "d_max_events")]
    pub max_events: u64,
    /// Requests alive at once (queued, prefilling, decoding) beyond which arrivals drop.
    #[serde(default = "d_max_live")]
    pub max_live_requests: u64,
    /// Shortest step the simulator accepts from a cost model, seconds (guards against
    /// zero-cost steps freezing time).
    #[serde(default = "d_min_step")]
    pub min_step_s: f64,
    /// Gauges (queues, KV use) are sampled at this period.
    #[serde(default = "d_sample")]
    pub sample_interval_s: f64,
}

fn d_max_events() -> u64 {
    20_000_000_000
}
fn d_max_live() -> u64 {
    1_000_000
}
fn d_min_step() -> f64 {
    1e-6
}
fn d_sample() -> f64 {
    1.0
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_events: d_max_events(),
            max_live_requests: d_max_live(),
            min_step_s: d_min_step(),
            sample_interval_s: d_sample(),
        }
    }
}

pub(crate) fn check(problems: &mut Vec<String>, ok: bool, path: &str, msg: &str) {
    if !ok {
        problems.push(format!("{path}: {msg}"));
    }
}

pub(crate) fn finite_nonneg(x: f64) -> bool {
    x.is_finite() && x >= 0.0
}

impl ServingScenario {
    /// Every problem with the scenario, each with its field path; empty when valid.
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        check(
            &mut p,
            self.duration_s.is_finite() && self.duration_s > 0.0,
            "duration_s",
            "must be > 0",
        );
        check(
            &mut p,
            finite_nonneg(self.warmup_s) && self.warmup_s < self.duration_s,
            "warmup_s",
            "must be >= 0 and below duration_s",
        );
        for (name, pool) in self.pools() {
            pool.problems(name, &mut p);
        }
        let kt = &self.serving.kv_transfer;
        check(
            &mut p,
            kt.link_efficiency.is_finite() && kt.link_efficiency > 0.0 && kt.link_efficiency <= 1.0,
            "serving.kv_transfer.link_efficiency",
            "must be in (0, 1]",
        );
        check(
            &mut p,
            finite_nonneg(kt.setup_s),
            "serving.kv_transfer.setup_s",
            "must be >= 0",
        );
        if let Some(d) = kt.domain_gpus {
            check(
                &mut p,
                d >= 1,
                "serving.kv_transfer.domain_gpus",
                "must be >= 1",
            );
        }
        if let Some(n) = self.serving.mtp.draft_tokens {
            check(&mut p, n <= 16, "serving.mtp.draft_tokens", "must be <= 16");
        }
        if let Some(a) = &self.serving.mtp.acceptance {
            check(
                &mut p,
                a.iter().all(|x| x.is_finite() && (0.0..=1.0).contains(x)),
                "serving.mtp.acceptance",
                "every entry must be in [0, 1]",
            );
        }
        check(
            &mut p,
            self.slo.ttft_ms.is_finite() && self.slo.ttft_ms > 0.0,
            "slo.ttft_ms",
            "must be > 0",
        );
        check(
            &mut p,
            self.slo.tpot_ms.is_finite() && self.slo.tpot_ms > 0.0,
            "slo.tpot_ms",
            "must be > 0",
        );
        check(
            &mut p,
            self.limits.max_events >= 1,
            "limits.max_events",
            "must be >= 1",
        );
        check(
            &mut p,
            self.limits.max_live_requests >= 1,
            "limits.max_live_requests",
            "must be >= 1",
        );
        check(
            &mut p,
            self.limits.min_step_s.is_finite() && self.limits.min_step_s >= 1e-9,
            "limits.min_step_s",
            "must be >= 1e-9",
        );
        check(
            &mut p,
            self.limits.sample_interval_s.is_finite() && self.limits.sample_interval_s >= 1e-3,
            "limits.sample_interval_s",
            "must be >= 0.001",
        );
        check(
            &mut p,
            self.router.prefill_recompute_weight.is_finite()
                && self.router.prefill_recompute_weight >= 0.0,
            "router.prefill_recompute_weight",
            "must be >= 0",
        );
        p.extend(self.price.problems());
        p
    }

    /// The pools the mode runs, with their scenario paths.
    pub fn pools(&self) -> Vec<(&'static str, &PoolConfig)> {
        match self.serving.mode {
            Mode::Disaggregated => vec![
                ("serving.prefill", &self.serving.prefill),
                ("serving.decode", &self.serving.decode),
            ],
            Mode::Aggregated => vec![("serving.decode", &self.serving.decode)],
            Mode::PrefillOnly => vec![("serving.prefill", &self.serving.prefill)],
        }
    }

    /// GPUs the deployment occupies.
    pub fn gpus(&self) -> u64 {
        self.pools().iter().map(|(_, p)| p.gpus()).sum()
    }

    pub fn price_basis(&self) -> PriceBasis {
        self.price.basis
    }
}
