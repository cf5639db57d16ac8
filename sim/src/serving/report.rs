//! The result of a run: figures over the measured window (warm-up excluded), money, and
//! an accounting section that the invariant tests check; its assembly from the rack's
//! metrics and its text rendering.

use super::config::{Mode, ServingScenario};
use super::metrics::Metrics;
use super::money::Money;
use super::money::UsdPerMTokens;
use super::pool::Pool;
use super::rack::{Rack, SimInput};
use super::stats::{SeriesPoint, Summary};
use crate::cost::{Layout, Op};
use crate::serde_defaults::{is_one, one};
use serde::{Deserialize, Serialize};
use spec::hardware::PriceBasis;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Tokens per second per GPU by kind; `total` is their sum (the reference report's
/// measure: cached input + uncached input + output).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Throughput {
    pub total: f64,
    pub cached_input: f64,
    pub uncached_input: f64,
    pub output: f64,
}

/// Fractions of all tokens by kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct TokenMix {
    pub cached_input: f64,
    pub uncached_input: f64,
    pub output: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Goodput {
    pub slo_ttft_ms: f64,
    pub slo_tpot_ms: f64,
    /// Completed requests per second meeting both SLOs.
    pub requests_per_s: f64,
    /// Fraction of completed requests meeting both SLOs.
    pub fraction: f64,
    /// Tokens (all kinds) per second per GPU of requests meeting both SLOs.
    pub tok_s_per_gpu: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct GaugeReport {
    pub mean: f64,
    pub max: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PoolReport {
    pub name: String,
    pub instances: u32,
    pub dep: u32,
    /// Tensor-parallel GPUs per rank (absent: 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub tp: u32,
    /// TP ranks hold routed experts whole (absent: sliced, or DEP).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expert_parallel: bool,
    pub gpus: u64,
    pub cost_model: String,
    /// Whose scheduler formed a mixed pool's steps (`super::scheduler`); absent for
    /// prefill and decode pools (twin's own policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<String>,
    pub throughput_tok_s_per_gpu: Throughput,
    pub steps: u64,
    pub step_ms_mean: f64,
    /// Fraction of busy time (sum of op seconds) per operation.
    pub time_share_by_op: BTreeMap<String, f64>,
    /// Fraction of step time lost to rank imbalance: sum(step - balanced) / sum(step).
    pub dp_imbalance_loss: f64,
    /// Fraction of wall time the pool's groups spent in steps.
    pub busy_fraction: f64,
    /// Fraction of step time spent waking devices after idling (a calibrated CPU's
    /// [`crate::cost::CostModel::wake_s`]; absent: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wake_fraction: f64,
    pub kv_capacity_tokens_per_rank: u64,
    /// KV tokens held per rank as a fraction of capacity (sampled).
    pub kv_used_fraction: GaugeReport,
    /// Running requests preempted in the measured window because KV ran short (an
    /// engine that allocates KV on demand: vLLM); each recomputes its prompt and output.
    #[serde(default, skip_serializing_if = "is_zero_count")]
    pub preemptions: u64,
    /// Requests in a step per rank (decode: running batch; sampled).
    pub batch_per_rank: GaugeReport,
    /// Requests waiting in the pool (prefill queue or decode admission; sampled).
    pub queue_requests: GaugeReport,
    /// Prefill: fraction of input tokens served from the prefix cache.
    pub prefix_cache_hit_fraction: f64,
    /// Prefill: cached tokens that came from the host tier.
    pub host_cache_hit_tokens: u64,
    /// Use and queue over the measured window, sampled every
    /// `limits.sample_interval_s` (bounded: see `stats::Series`).
    #[serde(default)]
    pub series: Vec<SeriesPoint>,
}

/// Latency and speed distributions as (quantile, value) points (`LogHistogram::cdf`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Distributions {
    pub ttft_ms: Vec<(f64, f64)>,
    pub tpot_ms: Vec<(f64, f64)>,
    pub per_user_tok_s: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TransferReport {
    pub transfers: u64,
    pub gib: f64,
    /// From admission at the decode rank to KV arrival, link queueing included.
    pub time_ms: Summary,
}

/// Whole-run counts (warm-up included) for invariant checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Accounting {
    pub arrived: u64,
    pub completed: u64,
    pub dropped: u64,
    /// Of the dropped, those refused for prompt + output over the context limit.
    #[serde(default)]
    pub refused_context: u64,
    pub in_flight_end: u64,
    pub input_tokens_arrived: u64,
    pub uncached_tokens_prefilled: u64,
    pub cached_tokens_credited: u64,
    pub output_tokens_emitted: u64,
    pub input_tokens_completed: u64,
    pub output_tokens_completed: u64,
    /// Input of requests dropped after their prefill ran (no decode rank could hold them).
    pub input_tokens_dropped_after_prefill: u64,
    /// Prefill progress of requests in flight at the end (uncached done, plus cached
    /// once their prefill finished).
    pub input_tokens_in_flight_progress: u64,
    pub output_tokens_in_flight: u64,
    /// Highest KV use of any decode rank as a fraction of its capacity.
    pub kv_peak_used_fraction: f64,
    pub kv_peak_reserved_fraction: f64,
    /// Running requests preempted because KV ran short (`Scheduler::kv_on_demand`).
    #[serde(default, skip_serializing_if = "is_zero_count")]
    pub preemptions: u64,
    /// Tokens preempted requests computed again (their input and the output they had).
    #[serde(default, skip_serializing_if = "is_zero_count")]
    pub tokens_recomputed: u64,
    pub events: u64,
    pub last_event_s: f64,
}

impl Accounting {
    /// Every broken conservation law, described; empty when all hold.
    pub fn violations(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.arrived != self.completed + self.dropped + self.in_flight_end {
            v.push(format!(
                "requests: arrived {} != completed {} + dropped {} + in flight {}",
                self.arrived, self.completed, self.dropped, self.in_flight_end
            ));
        }
        let prefilled = self.uncached_tokens_prefilled + self.cached_tokens_credited;
        let accounted = self.input_tokens_completed
            + self.input_tokens_dropped_after_prefill
            + self.input_tokens_in_flight_progress;
        if prefilled != accounted {
            v.push(format!(
                "input tokens: prefilled {prefilled} != accounted {accounted}"
            ));
        }
        if self.output_tokens_emitted != self.output_tokens_completed + self.output_tokens_in_flight
        {
            v.push(format!(
                "output tokens: emitted {} != completed {} + in flight {}",
                self.output_tokens_emitted,
                self.output_tokens_completed,
                self.output_tokens_in_flight
            ));
        }
        if self.kv_peak_used_fraction > 1.0 + 1e-12 || self.kv_peak_reserved_fraction > 1.0 + 1e-12
        {
            v.push(format!(
                "KV over capacity: used {:.4}, reserved {:.4}",
                self.kv_peak_used_fraction, self.kv_peak_reserved_fraction
            ));
        }
        v
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub scenario: String,
    pub mode: Mode,
    pub seed: u64,
    pub gpus: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub measured_s: f64,
    pub workload: String,
    pub requests_completed: u64,
    pub requests_per_s: f64,
    pub requests_dropped: u64,
    /// Of `requests_dropped`, those refused on arrival because their prompt plus output
    /// tokens exceed `context_limit_tokens` (the engine answers them with an error).
    #[serde(default)]
    pub requests_refused_context: u64,
    /// The longest request the engine accepts: `serving.max_model_len`, else the
    /// model's `max_position_embeddings`; null: no limit known.
    #[serde(default)]
    pub context_limit_tokens: Option<u64>,
    /// Tokens per prefix-cache block, the engine's (`serving.kv_block_tokens`, else its
    /// default: vLLM 16, SGLang 1, TensorRT-LLM 32, twin's own 512): a cached prefix is
    /// a whole number of them.
    #[serde(default)]
    pub prefix_cache_block_tokens: u64,
    pub throughput_tok_s_per_gpu: Throughput,
    pub token_mix: TokenMix,
    /// Arrival to the first output token (prefill queue, prefill, KV transfer and the
    /// first decode step), requests that arrived after warm-up and finished in time.
    pub ttft_ms: Summary,
    /// (last token - first token) / (output tokens - 1), per request.
    pub tpot_ms: Summary,
    /// Time between successive emissions of one request (one per decode step; with
    /// MTP a step emits 1 + accepted drafts tokens at once).
    pub itl_ms: Summary,
    pub e2e_ms: Summary,
    /// Output speed seen by one user: (output tokens - 1) / (last - first token). Its
    /// p90 is the speed the fastest 10% of users reach or beat (the published
    /// figure `rack-p90-user`, the GB300 report's "P90 tokens/s per user", is read
    /// this way); its p10 is the speed 90% of users reach, which an SLO on per-user
    /// speed means (`--slo user_tok_s_p10`).
    pub per_user_tok_s: Summary,
    /// The same distributions as CDF points, for plots.
    #[serde(default)]
    pub distributions: Distributions,
    pub goodput: Goodput,
    pub price_sheet: String,
    pub price_basis: PriceBasis,
    pub revenue_usd_per_gpu_hour: f64,
    pub cost_usd_per_gpu_hour: f64,
    pub margin_usd_per_gpu_hour: f64,
    pub usd_per_m_tokens: UsdPerMTokens,
    pub mtp_draft_tokens: u32,
    pub mtp_tokens_per_step: f64,
    pub pools: Vec<PoolReport>,
    pub kv_transfer: TransferReport,
    pub accounting: Accounting,
    /// Set when the run was stopped early (`Control::stop`): the simulated second it
    /// stopped at, which ends the measured window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_at_s: Option<f64>,
    /// Identical copies of the rack the run stood for, one simulated
    /// (`fidelity.cohort`; 1: exact, and left out of the JSON).
    #[serde(
        default = "crate::serde_defaults::one",
        skip_serializing_if = "crate::serde_defaults::is_one"
    )]
    pub cohort: u32,
}

impl Throughput {
    /// Tokens per second per GPU from token counts over `gpu_s` GPU-seconds.
    fn of(cached: u64, uncached: u64, output: u64, gpu_s: f64) -> Throughput {
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
}

impl TokenMix {
    /// Each kind's fraction of the cached, uncached and output tokens together.
    fn of(cached: f64, uncached: f64, output: f64) -> TokenMix {
        let all = cached + uncached + output;
        TokenMix {
            cached_input: ratio(cached, all),
            uncached_input: ratio(uncached, all),
            output: ratio(output, all),
        }
    }
}

impl Goodput {
    /// The requests and tokens of the window that met `sc`'s SLOs.
    fn of(m: &Metrics, sc: &ServingScenario, measured_s: f64, gpus: u64) -> Goodput {
        Goodput {
            slo_ttft_ms: sc.slo.ttft_ms,
            slo_tpot_ms: sc.slo.tpot_ms,
            requests_per_s: m.good as f64 / measured_s,
            fraction: ratio(m.good as f64, m.completed as f64),
            tok_s_per_gpu: m.good_tokens as f64 / measured_s / gpus.max(1) as f64,
        }
    }
}

impl Distributions {
    /// The TTFT, TPOT and per-user speed distributions of `m`.
    fn of(m: &Metrics) -> Distributions {
        Distributions {
            ttft_ms: m.ttft_ms.cdf(),
            tpot_ms: m.tpot_ms.cdf(),
            per_user_tok_s: m.user_tok_s.cdf(),
        }
    }
}

/// `part / whole`, 0 when `whole` is 0.
fn ratio(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole
    } else {
        0.0
    }
}

impl Rack<'_> {
    /// The report of a finished run: requests still decoding settle their partial
    /// output, those in flight are counted, and the window's figures are assembled.
    pub(super) fn into_report(mut self, input: &SimInput<'_>, seed: u64) -> Report {
        self.settle_running();
        self.count_in_flight();
        let sc = self.sc;
        let measured_s = self.window.seconds();
        let gpus = sc.gpus();
        let pools: Vec<PoolReport> = self
            .pools
            .iter()
            .map(|p| pool_report(p, sc, measured_s, self.frontend.loads()))
            .collect();
        let (cached, uncached, output) = self.token_totals();
        let token_mix = TokenMix::of(cached, uncached, output);
        let rack = Throughput::of(
            cached as u64,
            uncached as u64,
            output as u64,
            gpus.max(1) as f64 * measured_s,
        );
        let money = Money::of(&sc.price, &self.hw.price, &rack);
        let m = &self.m;
        Report {
            scenario: sc.name.clone(),
            mode: sc.serving.mode,
            seed,
            gpus,
            duration_s: sc.duration_s,
            warmup_s: sc.warmup_s,
            measured_s,
            workload: input.run.workload().name.clone(),
            requests_completed: m.completed,
            requests_per_s: m.completed as f64 / measured_s,
            requests_dropped: m.dropped,
            requests_refused_context: m.refused_context,
            context_limit_tokens: self.context_limit,
            prefix_cache_block_tokens: self.kv_block_tokens,
            throughput_tok_s_per_gpu: rack,
            token_mix,
            ttft_ms: m.ttft_ms.summary(),
            tpot_ms: m.tpot_ms.summary(),
            itl_ms: m.itl_ms.summary(),
            e2e_ms: m.e2e_ms.summary(),
            per_user_tok_s: m.user_tok_s.summary(),
            distributions: Distributions::of(m),
            goodput: Goodput::of(m, sc, measured_s, gpus),
            price_sheet: sc.price.sheet.key().to_string(),
            price_basis: sc.price.basis,
            revenue_usd_per_gpu_hour: money.revenue_usd_per_gpu_hour,
            cost_usd_per_gpu_hour: money.cost_usd_per_gpu_hour,
            margin_usd_per_gpu_hour: money.revenue_usd_per_gpu_hour - money.cost_usd_per_gpu_hour,
            usd_per_m_tokens: money.usd_per_m_tokens,
            mtp_draft_tokens: self.mtp.draft_tokens,
            mtp_tokens_per_step: ratio(m.mtp_tokens as f64, m.mtp_steps as f64),
            pools,
            kv_transfer: TransferReport {
                transfers: m.transfers,
                gib: m.transfer_bytes / (1u64 << 30) as f64,
                time_ms: m.transfer_ms.summary(),
            },
            accounting: self.acc.clone(),
            interrupted_at_s: None,
            cohort: self.pools.copies(),
        }
    }
}

impl Rack<'_> {
    /// Tokens by kind over all pools: cached input, uncached input and output.
    fn token_totals(&self) -> (f64, f64, f64) {
        let (mut cached, mut uncached, mut output) = (0u64, 0u64, 0u64);
        for p in self.pools.iter() {
            cached += p.stats.cached_tokens;
            uncached += p.stats.uncached_tokens;
            output += p.stats.output_tokens;
        }
        (cached as f64, uncached as f64, output as f64)
    }

    /// Counts the requests in flight at the end and the progress they made.
    fn count_in_flight(&mut self) {
        for (_, req) in self.reqs.iter() {
            let acc = &mut self.acc;
            let w = req.w();
            acc.in_flight_end += w;
            // A preempted request's input was all computed before it was.
            acc.input_tokens_in_flight_progress += w * if req.prefill.recompute > 0 {
                req.input as u64
            } else {
                req.prefill.computed as u64
                    + if req.prefill.done {
                        req.prefill.cached as u64
                    } else {
                        0
                    }
            };
            acc.output_tokens_in_flight += req.decode.generated as u64 * w;
        }
    }
}

/// A pool's figures over the `measured_s` window (`loads`: `FrontEnd::loads`).
fn pool_report(
    p: &Pool<'_>,
    sc: &ServingScenario,
    measured_s: f64,
    loads: Option<(f64, f64)>,
) -> PoolReport {
    let st = &p.stats;
    let op_sum: f64 = st.op_s.iter().sum();
    PoolReport {
        name: p.name.to_string(),
        instances: p.cfg.instances,
        dep: p.cfg.dep,
        tp: p.cfg.tp,
        expert_parallel: p.cfg.expert_parallel,
        gpus: p.cfg.gpus(),
        cost_model: p.cost.describe(),
        scheduler: (p.role == super::pool::Role::Mixed)
            .then(|| sc.scheduler_line() + &super::frontend::describe_loads(loads)),
        throughput_tok_s_per_gpu: Throughput::of(
            st.cached_tokens,
            st.uncached_tokens,
            st.output_tokens,
            p.cfg.gpus().max(1) as f64 * measured_s,
        ),
        steps: st.steps * p.group_copies as u64,
        step_ms_mean: ratio(1e3 * st.step_s, st.steps as f64),
        time_share_by_op: Op::ALL
            .iter()
            .map(|op| (op.key().to_string(), ratio(st.op_s[op.index()], op_sum)))
            .collect(),
        dp_imbalance_loss: ratio(st.step_s - st.balanced_s, st.step_s).max(0.0),
        busy_fraction: st.busy_ns as f64 / 1e9 / (measured_s * p.groups.len().max(1) as f64),
        wake_fraction: ratio(st.wake_s, st.step_s),
        kv_capacity_tokens_per_rank: p.kv_cap,
        kv_used_fraction: GaugeReport {
            mean: st.kv_used.mean(),
            max: st.kv_used_max,
        },
        preemptions: st.preemptions,
        batch_per_rank: GaugeReport {
            mean: st.batch.mean(),
            max: st.batch_max,
        },
        queue_requests: GaugeReport {
            mean: st.queue.mean(),
            max: st.queue.max(),
        },
        prefix_cache_hit_fraction: ratio(
            st.cache_hit_tokens as f64,
            st.input_tokens_looked_up as f64,
        ),
        host_cache_hit_tokens: st.host_hit_tokens,
        series: st.series.points(),
    }
}

impl PoolReport {
    /// The pool's section of the text report, appended to `s`.
    /// The pool's imbalance, batch, queue and KV use on one line, and its preemptions
    /// on the next when there were any.
    fn use_line(&self) -> String {
        let mut line = format!(
            "  DP imbalance loss {:.1}%; batch/rank mean {:.1} max {:.0}; queue mean {:.1} max {:.0}; KV used mean {:.1}% max {:.1}%",
            100.0 * self.dp_imbalance_loss,
            self.batch_per_rank.mean,
            self.batch_per_rank.max,
            self.queue_requests.mean,
            self.queue_requests.max,
            100.0 * self.kv_used_fraction.mean,
            100.0 * self.kv_used_fraction.max
        );
        if self.preemptions > 0 {
            line += &format!(
                "\n  {} requests preempted: KV ran short; each recomputes its prompt and output when it returns",
                self.preemptions
            );
        }
        line
    }

    fn render_text(&self, s: &mut String) {
        let _ = writeln!(s);
        let pt = &self.throughput_tok_s_per_gpu;
        let _ = writeln!(
            s,
            "pool {}: {} x {} = {} GPUs  [{}]",
            self.name,
            self.instances,
            Layout {
                tp: self.tp,
                expert_parallel: self.expert_parallel,
                ..Layout::new(self.dep)
            }
            .name(),
            self.gpus,
            self.cost_model
        );
        if let Some(sched) = &self.scheduler {
            let _ = writeln!(s, "  scheduler: {sched}");
        }
        let _ = writeln!(
            s,
            "  tok/s per GPU {} (cached {}, uncached {}, output {}); {} steps, mean {:.2} ms, busy {:.0}%",
            k(pt.total),
            k(pt.cached_input),
            k(pt.uncached_input),
            k(pt.output),
            self.steps,
            self.step_ms_mean,
            100.0 * self.busy_fraction
        );
        let _ = writeln!(s, "{}", self.use_line());
        if self.wake_fraction > 0.0 {
            let _ = writeln!(
                s,
                "  waking from idle {:.1}% of step time",
                100.0 * self.wake_fraction
            );
        }
        if self.prefix_cache_hit_fraction > 0.0 {
            // Hits are counted when a prompt is looked up (it arrived in the window);
            // its cached tokens count in the throughput when its prefill finishes.
            let _ = writeln!(
                s,
                "  prefix cache hit {:.1}% of the input tokens looked up in the window{}",
                100.0 * self.prefix_cache_hit_fraction,
                if self.throughput_tok_s_per_gpu.cached_input > 0.0 {
                    ""
                } else {
                    " (none of their prefills finished in it: cached throughput 0)"
                }
            );
        }
        let shares: Vec<String> = self
            .time_share_by_op
            .iter()
            .filter(|(_, v)| **v >= 0.005)
            .map(|(op, v)| format!("{op} {:.0}%", 100.0 * v))
            .collect();
        if !shares.is_empty() {
            let _ = writeln!(s, "  time by op: {}", shares.join(", "));
        }
    }
}

/// A figure in a few characters: `1.14M`, `951.3K`, `9388.4`.
pub fn k(x: f64) -> String {
    if x.abs() >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x.abs() >= 1e4 {
        format!("{:.1}K", x / 1e3)
    } else {
        format!("{x:.1}")
    }
}

impl Report {
    /// A readable summary table.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        self.render_run(&mut s);
        self.render_tokens(&mut s);
        self.render_latency(&mut s);
        self.render_money(&mut s);
        for p in &self.pools {
            p.render_text(&mut s);
        }
        if self.kv_transfer.transfers > 0 {
            let _ = writeln!(s);
            let x = &self.kv_transfer;
            let _ = writeln!(
                s,
                "KV transfer: {} transfers, {:.1} GiB, time p50 {:.2} ms p99 {:.2} ms",
                x.transfers, x.gib, x.time_ms.p50, x.time_ms.p99
            );
        }
        s
    }

    /// The run: scenario, window, fidelity, and where an interrupted run stopped.
    fn render_run(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "scenario  {}  (workload {}, seed {}, {})",
            self.scenario,
            self.workload,
            self.seed,
            self.mode.name()
        );
        let _ = writeln!(
            s,
            "window    {:.0} s measured after {:.0} s warm-up; {} GPUs",
            self.measured_s, self.warmup_s, self.gpus
        );
        if self.cohort > 1 {
            let _ = writeln!(
                s,
                "fidelity  coarse: one of {} identical copies of the rack simulated, each request standing for {} (fidelity.cohort)",
                self.cohort, self.cohort
            );
        }
        if let Some(t) = self.interrupted_at_s {
            let _ = writeln!(
                s,
                "INTERRUPTED at t = {t:.1} s of {:.0} s: the figures cover the window up to then{}",
                self.duration_s,
                if t <= self.warmup_s {
                    " (still in the warm-up: nothing was measured)"
                } else {
                    ""
                }
            );
        }
    }

    /// Throughput per GPU, the token mix and the request counts.
    fn render_tokens(&self, s: &mut String) {
        let t = &self.throughput_tok_s_per_gpu;
        let _ = writeln!(s);
        let _ = writeln!(s, "throughput per GPU (tok/s)   total {:>9}   cached {:>9}   uncached {:>8}   output {:>8}", k(t.total), k(t.cached_input), k(t.uncached_input), k(t.output));
        let m = &self.token_mix;
        let _ = writeln!(
            s,
            "token mix                    cached {:.1}%   uncached {:.2}%   output {:.2}%",
            100.0 * m.cached_input,
            100.0 * m.uncached_input,
            100.0 * m.output
        );
        // Refused requests are dropped ones with a reason: said beside the count.
        let refused = match (self.requests_refused_context, self.context_limit_tokens) {
            (0, _) | (_, None) => String::new(),
            (r, Some(l)) => {
                format!(" ({r} refused: prompt + output over the context limit of {l} tokens)")
            }
        };
        let _ = writeln!(
            s,
            "requests                     {} completed ({:.2}/s), {} dropped{refused}",
            self.requests_completed, self.requests_per_s, self.requests_dropped
        );
    }

    /// Latency percentiles, goodput and the MTP yield.
    fn render_latency(&self, s: &mut String) {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<22}{:>10}{:>10}{:>10}{:>10}",
            "latency", "mean", "p50", "p90", "p99"
        );
        for (name, x) in [
            ("TTFT (ms)", &self.ttft_ms),
            ("TPOT (ms)", &self.tpot_ms),
            ("ITL (ms)", &self.itl_ms),
            ("end-to-end (ms)", &self.e2e_ms),
            ("per-user (tok/s)", &self.per_user_tok_s),
        ] {
            if x.count == 0 {
                // No samples: no value, not 0.
                let _ = writeln!(s, "{name:<22}{:>10}{:>10}{:>10}{:>10}", "-", "-", "-", "-");
                continue;
            }
            let _ = writeln!(
                s,
                "{name:<22}{:>10.1}{:>10.1}{:>10.1}{:>10.1}",
                x.mean, x.p50, x.p90, x.p99
            );
        }
        // A speed's slow tail is its low percentiles: the p90 above is what the
        // fastest 10% of users reach; what 90% of users reach is the p10.
        if self.per_user_tok_s.count > 0 {
            let _ = writeln!(
                s,
                "per-user speed 90% of users reach: {:.1} tok/s (p10; --slo user_tok_s_p10)",
                self.per_user_tok_s.p10
            );
        }
        let g = &self.goodput;
        if self.requests_completed == 0 {
            // A share of no requests is no figure.
            let _ = writeln!(
                s,
                "goodput (TTFT<={:.0} ms, TPOT<={:.1} ms): - (no request completed)",
                g.slo_ttft_ms, g.slo_tpot_ms
            );
        } else {
            let _ = writeln!(
                s,
                "goodput (TTFT<={:.0} ms, TPOT<={:.1} ms): {:.1}% of requests, {:.2} req/s, {} tok/s per GPU",
                g.slo_ttft_ms,
                g.slo_tpot_ms,
                100.0 * g.fraction,
                g.requests_per_s,
                k(g.tok_s_per_gpu)
            );
        }
        self.render_mtp(s);
    }

    /// MTP's yield, or that it is off (without drafts a step emits one token; the
    /// first token, sampled at prefill, would make a yield over 1 appear).
    fn render_mtp(&self, s: &mut String) {
        if self.mtp_draft_tokens == 0 {
            let _ = writeln!(s, "MTP: off (no draft tokens)");
        } else if self.mtp_tokens_per_step > 0.0 {
            let _ = writeln!(
                s,
                "MTP: {} drafts, {:.2} tokens per request-step",
                self.mtp_draft_tokens, self.mtp_tokens_per_step
            );
        } else {
            let _ = writeln!(
                s,
                "MTP: {} drafts, tokens per request-step - (no decode step ended)",
                self.mtp_draft_tokens
            );
        }
    }

    /// Revenue, cost and margin per GPU-hour, and per million tokens.
    fn render_money(&self, s: &mut String) {
        let _ = writeln!(s);
        // Without a price sheet the tokens have no price: revenue is not computed.
        let priced = self.price_sheet != super::PriceSheet::None.key();
        if priced {
            let _ = writeln!(
                s,
                "money ({}, {} GPU cost): revenue ${:.2}/GPU-h, cost ${:.2}/GPU-h, margin ${:.2}/GPU-h",
                self.price_sheet,
                self.price_basis.name(),
                self.revenue_usd_per_gpu_hour,
                self.cost_usd_per_gpu_hour,
                self.margin_usd_per_gpu_hour
            );
        } else {
            let _ = writeln!(
                s,
                "money (no price sheet, {} GPU cost): cost ${:.2}/GPU-h; revenue and margin not computed",
                self.price_basis.name(),
                self.cost_usd_per_gpu_hour
            );
        }
        let u = &self.usd_per_m_tokens;
        let t = &self.throughput_tok_s_per_gpu;
        // Per million of no tokens is no figure.
        let per = |x: f64, tokens: f64, decimals: usize| match tokens > 0.0 {
            true => format!("${x:.decimals$}"),
            false => "-".to_string(),
        };
        let _ = writeln!(
            s,
            "per M tokens: cost {} (all), {} (output); mean price {}",
            per(u.cost_all_tokens, t.total, 4),
            per(u.cost_output_tokens, t.output, 3),
            match priced {
                true => per(u.revenue_all_tokens, t.total, 4),
                false => "-".to_string(),
            }
        );
    }
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

fn is_zero_count(x: &u64) -> bool {
    *x == 0
}
