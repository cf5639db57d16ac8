//! The analytic screen: steady-state estimates of a candidate from the cost model, and
//! the rules that reject it before any simulation.
//!
//! The model (means unless said otherwise):
//! - **Decode.** A request needs `output / mu` decode steps (`mu`: MTP tokens per
//!   step). At arrival rate `lambda` over `R` decode ranks, Little's law gives the
//!   running batch per rank `B = lambda * steps * s(B) / R`, with `s(B)` the cost
//!   model's decode step with `B` requests per rank at the mean context (input + half
//!   the output); solved by bisection. `B` above the cap (or the KV room) means decode
//!   cannot carry the load. TPOT = `s(B) / mu`, per-user speed `mu / s(B)`.
//! - **Prefill.** A rank's steps are full chunks: `k = chunk / uncached` requests per
//!   step (or one request over several chunks), priced at the cached context; the
//!   rank serves `k / t` requests per second. The pool is an M/M/c queue with one
//!   server per rank: Erlang C gives the chance to wait and the P90 wait,
//!   `ln(C / 0.1) / (c mu - lambda)` when `C > 0.1`. TTFT P90 = P90 wait + the prefill
//!   + one decode step.
//! - **Aggregated.** A mixed step runs the decode batch and, whenever any rank of the
//!   group has prefill work (the group steps in lock-step), a full prefill chunk:
//!   `s = s_dec(B) + (1 - (1 - f)^dep) t_chunk`, with `f` the share of steps a rank
//!   has prefill work, `f = need * s / chunk tokens`; an M/M/1 queue per rank, busy
//!   `f`, for the TTFT.
//! - **Closed loops** (users who think between requests): the rate is the fixed point
//!   `lambda (think + response(lambda)) = users`, by bisection below the capacity.
//! - **Sizing for a target rate**: the fewest prefill (or aggregated) instances whose
//!   utilisation stays at or below the space's `target_utilisation`.

use super::queue::{bisect, prefill_rate, DecodeCurve, Prefill, QueueModel, Response};
use super::shape::{Arrivals, WorkShape};
use super::{Candidate, PoolChoice, Reason, SearchSpace, Sizing, Slo};
use crate::cost::{AnalyticCostModel, CostParams, Layout};
use crate::serving::mtp::MtpYield;
use crate::serving::{Mode, PoolCost};
use crate::tco::GpuHourCost;
use serde::{Deserialize, Serialize};
use spec::problem::{Field, Problem};
use spec::{hardware::Hardware, model::Model};
use std::collections::BTreeMap;

/// What prices a candidate's pools: a cost model per pool (or why the deployment
/// cannot run) and the GPU-hour cost of its hardware.
pub trait Pricer: Sync {
    /// The cost model of one instance of `p`, or the deployment's problems (named in
    /// the planner's words by `plan_name`).
    fn pool_cost(&self, p: &PoolChoice) -> Result<Box<dyn PoolCost + '_>, Vec<Problem>>;
    /// What one GPU of hardware `name` costs per hour (None: unknown hardware).
    fn gpu_hour(&self, name: &str) -> Option<GpuHourCost>;
}

/// A pool hardware's pricing: the hardware, its cost parameters and GPU-hour cost.
#[derive(Debug, Clone)]
pub struct PoolPricing {
    pub hardware: Hardware,
    pub params: CostParams,
    pub gpu_hour: GpuHourCost,
}

/// A deployment problem's field in the planner's words.
fn plan_name(f: &Field) -> String {
    match f {
        Field::Path(x) => x.clone(),
        Field::Dep => "DEP".into(),
        Field::Tp => "TP".into(),
        Field::RedundantExperts => "redundant experts".into(),
        Field::ExpertParallel => "expert parallelism".into(),
        Field::BatchPerRank => "batch cap".into(),
    }
}

/// The analytic cost model on each hardware, deployments checked by
/// `validate::deployment`.
pub struct AnalyticPricer<'a> {
    pub model: &'a Model,
    /// By hardware name.
    pub pricing: BTreeMap<String, PoolPricing>,
    /// Two-micro-batch overlap, and how decode schedules it (the scenario's settings).
    pub overlap: bool,
    pub decode_pipeline: crate::cost::Pipeline,
}

impl AnalyticPricer<'_> {
    /// The cost-model layout of one instance of `p`.
    pub fn layout(&self, p: &PoolChoice) -> Layout {
        let base = if p.tp > 1 {
            Layout::tensor_parallel(p.tp)
        } else {
            Layout::new(p.dep)
        };
        Layout {
            redundant_experts: p.redundant_experts,
            overlap_microbatches: self.overlap && p.tp <= 1,
            decode_pipeline: self.decode_pipeline,
            ..base
        }
    }
}

impl Pricer for AnalyticPricer<'_> {
    fn pool_cost(&self, p: &PoolChoice) -> Result<Box<dyn PoolCost + '_>, Vec<Problem>> {
        let pr = self.pricing.get(&p.hardware).ok_or_else(|| {
            vec![Problem::sentence(
                "hardware",
                format!("unknown hardware `{}`", p.hardware),
            )]
        })?;
        let layout = self.layout(p);
        let problems = crate::validate::deployment(&pr.hardware, self.model, &layout, 0, 0);
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Box::new(AnalyticCostModel::new(
            pr.hardware.clone(),
            self.model.clone(),
            layout,
            pr.params.clone(),
        )))
    }

    fn gpu_hour(&self, name: &str) -> Option<GpuHourCost> {
        self.pricing.get(name).map(|p| p.gpu_hour)
    }
}

/// What the screen needs besides the candidate.
pub struct ScreenInputs<'a> {
    pub pricer: &'a dyn Pricer,
    /// The workload's nominal shape (load scale 1).
    pub shape: WorkShape,
    pub slo: Slo,
    pub sizing: Sizing,
    pub space: &'a SearchSpace,
    /// MTP acceptance rates (draft i given all before accepted).
    pub mtp_acceptance: &'a [f64],
}

/// The screen's steady-state estimates of a candidate (0 where not reached).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Estimate {
    pub gpus: u64,
    pub requests_per_s: f64,
    pub tok_s_per_gpu: f64,
    pub ttft_p90_ms: f64,
    pub tpot_ms: f64,
    pub user_tok_s: f64,
    pub decode_batch_per_rank: f64,
    /// Requests whose KV (input + output) fits on one decode rank.
    pub kv_requests_per_rank: f64,
    /// Prefill (or mixed) ranks' busy fraction.
    pub prefill_utilisation: f64,
    pub usd_per_m_tokens: f64,
}

/// Screens `cand`: the candidate as evaluated (sized for a target rate), its
/// estimates, and the reasons it is rejected (empty: it survives).
pub fn screen(cand: &Candidate, inp: &ScreenInputs<'_>) -> (Candidate, Estimate, Vec<Reason>) {
    let mut c = cand.clone();
    let mut est = Estimate {
        gpus: c.gpus(),
        ..Estimate::default()
    };
    let costs = match pool_costs(&c, inp) {
        Ok(costs) => costs,
        Err(reasons) => return (c, est, reasons),
    };
    let reasons = match estimate(&mut c, &mut est, &costs, inp) {
        Ok(()) => slo_misses(&est, inp),
        Err(reason) => vec![reason],
    };
    (c, est, reasons)
}

/// The deployment rules: each pool's cost model, or every reason a pool cannot run
/// (its deployment, its hardware's GPU-hour cost, a GPU budget it does not fit).
fn pool_costs<'a>(
    c: &Candidate,
    inp: &ScreenInputs<'a>,
) -> Result<Vec<Box<dyn PoolCost + 'a>>, Vec<Reason>> {
    let mut reasons = Vec::new();
    let mut costs: Vec<Box<dyn PoolCost + 'a>> = Vec::new();
    let pools: Vec<(&str, &PoolChoice)> = match &c.prefill {
        Some(p) => vec![("prefill", p), ("decode", &c.decode)],
        None => vec![("aggregated", &c.decode)],
    };
    for (name, p) in &pools {
        match inp.pricer.pool_cost(p) {
            Ok(cost) => costs.push(cost),
            Err(problems) => {
                for problem in problems {
                    let text = problem.render(&plan_name);
                    reasons.push(Reason::new("deployment", format!("{name}: {text}")));
                }
            }
        }
        if inp.pricer.gpu_hour(&p.hardware).is_none() {
            reasons.push(Reason::new(
                "hardware",
                format!("{name}: no GPU-hour cost for hardware `{}`", p.hardware),
            ));
        }
    }
    let short = c.prefill.as_ref().is_some_and(|p| p.instances == 0) || c.decode.instances == 0;
    if let (Sizing::Gpus(n), true) = (inp.sizing, short) {
        let what = if c.mode == Mode::Disaggregated {
            format!(
                "decode takes {} GPUs of the budget of {n}, leaving no {} prefill instance",
                c.decode.gpus(),
                c.prefill
                    .as_ref()
                    .map_or(String::new(), |p| p.layout_name())
            )
        } else {
            format!(
                "an aggregated {} instance does not fit in {n} GPUs",
                c.decode.layout_name()
            )
        };
        reasons.push(Reason::new("budget", what));
    }
    if reasons.is_empty() {
        Ok(costs)
    } else {
        Err(reasons)
    }
}

/// The candidate's estimates at its load (or sized for the target rate, which sets
/// `c`'s instances and load scale), or the first rule it breaks on the way. `est`
/// holds what was estimated before a rule broke.
fn estimate(
    c: &mut Candidate,
    est: &mut Estimate,
    costs: &[Box<dyn PoolCost + '_>],
    inp: &ScreenInputs<'_>,
) -> Result<(), Reason> {
    let decode_cost: &dyn PoolCost = costs.last().expect("a decode pool").as_ref();
    let shape = inp.shape;
    let cap = decode_batch_cap(c, est, decode_cost, &shape)?;
    let drafts = c.mtp_draft_tokens;
    let mu_tokens = mtp_tokens_per_step(drafts, inp.mtp_acceptance)?;
    let ctx = (shape.input_tokens + 0.5 * shape.output_tokens).round() as u64;
    let decode = DecodeCurve::new(decode_cost, c.decode.dep, cap as u32, ctx, drafts);
    let (prefill, prefill_dep) = prefill_of(c, costs, &shape)?;
    let mut m = QueueModel {
        mode: c.mode,
        decode,
        decode_ranks: c.decode.ranks() as f64,
        steps_per_request: (shape.output_tokens / mu_tokens).max(1.0),
        mu_tokens,
        prefill,
        prefill_ranks: c.prefill.as_ref().map_or(0, |p| p.ranks()),
        uncached: shape.uncached_tokens(),
        group_dep: prefill_dep,
    };
    // The load: a fixed rate, a closed loop's fixed point, or a target to size for.
    let target = match inp.sizing {
        Sizing::Gpus(_) => None,
        Sizing::RequestsPerS(r) => Some(r),
        Sizing::TokensPerS(t) => Some(t / shape.tokens()),
    };
    let lambda = match target {
        Some(lambda) => {
            size_for(c, est, &mut m, inp, lambda)?;
            lambda
        }
        None => load_rate(c, &m, &shape),
    };
    est.requests_per_s = lambda;
    est.tok_s_per_gpu = lambda * shape.tokens() / c.gpus().max(1) as f64;
    let Some(r) = m.respond(lambda) else {
        return Err(saturation(c, &m, lambda));
    };
    let saturated_wait_s = match target {
        None => closed_loop_wait_s(&shape.scaled(c.load_scale).arrivals, lambda, &r),
        Some(_) => 0.0,
    };
    est.ttft_p90_ms = (r.ttft_p90_s + saturated_wait_s) * 1e3;
    est.tpot_ms = r.step_s / m.mu_tokens * 1e3;
    est.user_tok_s = m.mu_tokens / r.step_s;
    est.decode_batch_per_rank = r.batch;
    est.prefill_utilisation = r.prefill_util;
    // Closed-loop target sizing: users needed for the rate at this response time.
    if target.is_some() {
        if let Arrivals::Closed { users, think_s } = shape.arrivals {
            let need = lambda * (think_s + r.ttft_mean_s + r.decode_s);
            c.load_scale = need / users.max(1e-9);
        } else if let Arrivals::Open { rate_per_s } = shape.arrivals {
            c.load_scale = lambda / rate_per_s.max(1e-9);
        }
    }
    est.usd_per_m_tokens = usd_per_m_tokens(c, inp, est.tok_s_per_gpu);
    Ok(())
}

/// The decode batch cap per rank: the candidate's, or fewer where the KV room for
/// whole requests (reserved input + output) is smaller (recorded in `est`).
fn decode_batch_cap(
    c: &Candidate,
    est: &mut Estimate,
    decode_cost: &dyn PoolCost,
    shape: &WorkShape,
) -> Result<f64, Reason> {
    let tokens = shape.tokens().max(1.0);
    let per_req = tokens + decode_cost.kv_extra_tokens(tokens as u64) as f64;
    let kv_reqs = decode_cost.kv_capacity_tokens_per_rank() as f64 / per_req;
    est.kv_requests_per_rank = kv_reqs;
    let cap = (c.decode.max_batch_per_rank as f64).min(kv_reqs.floor());
    if cap < 1.0 {
        return Err(Reason::new(
            "kv",
            format!(
                "a decode rank holds {} KV tokens, one request needs {:.0}",
                decode_cost.kv_capacity_tokens_per_rank(),
                per_req
            ),
        ));
    }
    Ok(cap)
}

/// Mean tokens per decode step with `drafts` MTP draft tokens.
fn mtp_tokens_per_step(drafts: u32, acceptance: &[f64]) -> Result<f64, Reason> {
    if drafts as usize <= acceptance.len() {
        Ok(MtpYield::new(&acceptance[..drafts as usize]).mean_tokens_per_step())
    } else {
        Err(Reason::new(
            "mtp",
            format!(
                "{drafts} draft tokens but {} acceptance rates",
                acceptance.len()
            ),
        ))
    }
}

/// The prefill of the mean request on the pool that prefills (the prefill pool, or
/// the aggregated one) and that pool's DEP; a prompt must fit a prefill rank's KV.
fn prefill_of(
    c: &Candidate,
    costs: &[Box<dyn PoolCost + '_>],
    shape: &WorkShape,
) -> Result<(Prefill, u32), Reason> {
    let (cost, pool) = match &c.prefill {
        Some(p) => {
            let cost = costs[0].as_ref();
            if (shape.input_tokens as u64) > cost.kv_capacity_tokens_per_rank() {
                return Err(Reason::new(
                    "kv",
                    format!(
                        "a prefill rank holds {} KV tokens, a prompt needs {:.0}",
                        cost.kv_capacity_tokens_per_rank(),
                        shape.input_tokens
                    ),
                ));
            }
            (cost, p)
        }
        None => (costs.last().expect("a decode pool").as_ref(), &c.decode),
    };
    let rate = prefill_rate(
        cost,
        pool.dep,
        pool.chunk_tokens_per_rank,
        shape.uncached_tokens(),
        shape.cached_tokens,
    );
    Ok((rate, pool.dep))
}

/// Sizes `c` for the target rate `lambda`: the fewest prefill instances (or
/// aggregated instances whose prefill share and batch stay in bounds) at the space's
/// target utilisation, within `max_gpus`.
fn size_for(
    c: &mut Candidate,
    est: &mut Estimate,
    m: &mut QueueModel,
    inp: &ScreenInputs<'_>,
    lambda: f64,
) -> Result<(), Reason> {
    let util = inp.space.target_utilisation;
    let prefill = m.prefill;
    if c.mode == Mode::Disaggregated {
        let p = c.prefill.as_mut().expect("disaggregated");
        let need = lambda / (util * p.dep as f64 * prefill.rate_per_rank);
        p.instances = need.ceil().max(1.0).min(u32::MAX as f64) as u32;
        m.prefill_ranks = p.ranks();
    } else {
        // The fewest instances whose prefill share and batch stay in bounds.
        let prefill_dep = m.group_dep;
        let per_rank_prefill = prefill.step_tokens / (m.uncached * prefill.step_s);
        let mut n = (lambda / (util * prefill_dep as f64 * per_rank_prefill))
            .ceil()
            .max(1.0) as u64;
        let most = inp.space.max_gpus / prefill_dep as u64 + 1;
        loop {
            m.decode_ranks = (n * prefill_dep as u64) as f64;
            if m.respond(lambda).is_some() || n > most {
                break;
            }
            n += 1;
        }
        c.decode.instances = n.min(u32::MAX as u64) as u32;
    }
    est.gpus = c.gpus();
    if c.gpus() > inp.space.max_gpus {
        return Err(Reason::new(
            "budget",
            format!(
                "{lambda:.1} req/s needs {} GPUs here, above max_gpus {}",
                c.gpus(),
                inp.space.max_gpus
            ),
        ));
    }
    Ok(())
}

/// The arrival rate of the candidate's load: an open loop's, or a closed loop's
/// fixed point below the capacity.
fn load_rate(c: &Candidate, m: &QueueModel, shape: &WorkShape) -> f64 {
    match shape.scaled(c.load_scale).arrivals {
        Arrivals::Open { rate_per_s } => rate_per_s,
        Arrivals::Closed { users, think_s } => {
            let cap_rate = m.capacity() * 0.9999;
            bisect(0.0, cap_rate, |l| match m.respond(l) {
                Some(r) => l * (think_s + r.ttft_mean_s + r.decode_s) - users,
                None => 1.0,
            })
        }
    }
}

/// Why the deployment has no response at `lambda`: the pool that saturates.
fn saturation(c: &Candidate, m: &QueueModel, lambda: f64) -> Reason {
    let capacity = m.capacity();
    let disagg = c.mode == Mode::Disaggregated;
    let (rule, what) = if disagg && lambda >= m.prefill_ranks as f64 * m.prefill.rate_per_rank {
        ("prefill-capacity", "prefill")
    } else {
        ("decode-capacity", "decode")
    };
    Reason::new(
        rule,
        format!(
            "{what} saturates: the deployment carries about {capacity:.1} req/s, the load is {lambda:.1} req/s"
        ),
    )
}

/// A closed loop with more users than the deployment carries: the rate sits at
/// capacity and the users it cannot absorb wait in a queue, which the steady-state
/// response at that rate does not hold (Little's law over the whole cycle). 0 for an
/// open loop or a loop that is not saturated.
fn closed_loop_wait_s(arrivals: &Arrivals, lambda: f64, r: &Response) -> f64 {
    match *arrivals {
        Arrivals::Closed { users, think_s } if lambda > 0.0 => {
            let cycle = think_s + r.ttft_mean_s + r.decode_s;
            let wait = users / lambda - cycle;
            // Below the bisection's precision the loop is not saturated.
            if wait > 1e-6 * cycle {
                wait
            } else {
                0.0
            }
        }
        _ => 0.0,
    }
}

/// USD per million tokens at `tok_s_per_gpu`, the pools' GPU-hours blended.
fn usd_per_m_tokens(c: &Candidate, inp: &ScreenInputs<'_>, tok_s_per_gpu: f64) -> f64 {
    let pools_cost: Vec<(u64, GpuHourCost)> = [c.prefill.as_ref(), Some(&c.decode)]
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p.gpus(),
                inp.pricer.gpu_hour(&p.hardware).unwrap_or_default(),
            )
        })
        .collect();
    let cost = crate::tco::blended(&pools_cost).total;
    crate::serving::money::usd_per_m_tokens(cost, tok_s_per_gpu)
}

/// The SLOs the estimates miss by more than the screen's slack.
fn slo_misses(est: &Estimate, inp: &ScreenInputs<'_>) -> Vec<Reason> {
    let mut reasons = Vec::new();
    let slack = inp.space.screen_slack;
    for (name, limit, larger_better) in inp.slo.constraints() {
        let v = match name {
            "ttft_p90_ms" => est.ttft_p90_ms,
            "tpot_p90_ms" => est.tpot_ms,
            _ => est.user_tok_s,
        };
        let miss = if larger_better {
            v * slack < limit
        } else {
            v > limit * slack
        };
        if miss {
            reasons.push(Reason::new(
                name,
                format!(
                    "estimated {name} {v:.1} misses the SLO {limit} by more than the screen's slack x{slack}"
                ),
            ));
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::super::queue::{erlang_c, mmc_wait_s};
    use super::*;

    /// Erlang C by hand: c = 1 is M/M/1, P(wait) = rho. c = 2, a = 1 (rho 0.5):
    /// B(2, 1) = (1/2) / (1 + 1 + 1/2) = 0.2, C = 0.2 / (1 - 0.5 * 0.8) = 1/3.
    #[test]
    fn erlang_c_by_hand() {
        assert!((erlang_c(1, 0.7) - 0.7).abs() < 1e-12);
        assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(erlang_c(4, 4.0), 1.0);
        // M/M/1 at rho 0.5, mu 10/s: P(W > t) = 0.5 e^(-5t): P90 at ln(5) / 5 s,
        // mean 0.5 / 5 = 0.1 s.
        let (p90, mean) = mmc_wait_s(1, 10.0, 5.0);
        assert!((p90 - 5f64.ln() / 5.0).abs() < 1e-12);
        assert!((mean - 0.1).abs() < 1e-12);
        // Lightly loaded: under 10% wait, P90 wait is 0.
        assert_eq!(mmc_wait_s(8, 10.0, 5.0).0, 0.0);
    }

    #[test]
    fn bisection_finds_the_root() {
        let x = bisect(0.0, 10.0, |x| x * x - 2.0);
        assert!((x - 2f64.sqrt()).abs() < 1e-12);
    }
}
