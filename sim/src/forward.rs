//! `forward`: the simulator's equivalent of timing one exact batch on a real engine
//! (vLLM's `bench forward`). Identical requests on every rank of one DEP group; a
//! prefill may be split into chunks, each one engine step on top of the chunks before.

use crate::cost::analytic::StepTrace;
use crate::cost::{AnalyticCostModel, CostModel, Op, Phase, ReqSlice, StepCost, StepShape};
use crate::serde_defaults::is_one;
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForwardSpec {
    pub phase: Phase,
    /// Attention replicas (DEP ranks), each on `tp` GPUs.
    pub dep: u32,
    #[serde(skip_serializing_if = "is_one")]
    pub tp: u32,
    pub batch_per_rank: u32,
    /// Requests over the whole group, placed round-robin (None = `batch_per_rank` on
    /// every rank). `Some(1)` on DEP2 leaves one rank without attention work.
    pub total_requests: Option<u32>,
    /// Tokens already in KV per request (decode context, or cached prefix for prefill).
    pub context_tokens: u64,
    /// Prefill: new prompt tokens per request.
    pub new_tokens: u32,
    /// Prefill: chunk budget per request and step (None = one step).
    pub chunk_tokens: Option<u32>,
    /// Decode: MTP draft tokens per step.
    pub draft_tokens: u32,
    /// Decode: expected tokens emitted per request per step (1 without MTP).
    pub tokens_per_step: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ForwardResult {
    /// Steps priced (1 unless a prefill is chunked).
    pub steps: u32,
    /// Sum over steps.
    pub total: StepCost,
    /// Tokens per second per GPU: prefill tokens computed, or decode tokens emitted.
    pub tokens_per_s_per_gpu: f64,
    /// Tokens per second one request sees: decode tokens emitted (with MTP's expected
    /// yield) or prefill tokens computed, over the step time.
    pub tokens_per_s_per_user: f64,
}

impl ForwardResult {
    pub fn step_s(&self) -> f64 {
        self.total.step_s
    }
    /// The target model alone (without MTP draft passes).
    pub fn target_step_s(&self) -> f64 {
        self.total.step_s - self.total.op(Op::MtpDraft)
    }
    pub fn share(&self, op: Op) -> f64 {
        if self.total.step_s > 0.0 {
            self.total.op(op) / self.total.step_s
        } else {
            0.0
        }
    }
    /// Share of the target-model step (the report quotes shares this way).
    pub fn target_share(&self, op: Op) -> f64 {
        let t = self.target_step_s();
        if t > 0.0 {
            self.total.op(op) / t
        } else {
            0.0
        }
    }
}

impl ForwardSpec {
    /// Requests on each rank.
    pub fn per_rank(&self) -> Vec<u32> {
        let dep = self.dep.max(1);
        match self.total_requests {
            None => vec![self.batch_per_rank; dep as usize],
            Some(n) => (0..dep).map(|i| n / dep + u32::from(i < n % dep)).collect(),
        }
    }
}

pub fn forward(cost: &dyn CostModel, spec: &ForwardSpec) -> ForwardResult {
    let per_rank = spec.per_rank();
    let (total, steps) = price_steps(cost, spec, &per_rank);
    let gpus = spec.dep.max(1) as f64 * spec.tp.max(1) as f64;
    let requests: f64 = per_rank.iter().map(|&c| c as f64).sum::<f64>() / gpus;
    let tokens = match spec.phase {
        Phase::Decode => requests * spec.tokens_per_step,
        Phase::Prefill => requests * spec.new_tokens as f64,
    };
    let tokens_per_s_per_gpu = if total.step_s > 0.0 {
        tokens / total.step_s
    } else {
        0.0
    };
    let per_user = match spec.phase {
        Phase::Decode => spec.tokens_per_step,
        Phase::Prefill => spec.new_tokens as f64,
    };
    let tokens_per_s_per_user = if total.step_s > 0.0 {
        per_user / total.step_s
    } else {
        0.0
    };
    ForwardResult {
        steps,
        total,
        tokens_per_s_per_gpu,
        tokens_per_s_per_user,
    }
}

/// One rank's requests: `count` alike, none when `count` is 0.
fn rank_of(count: u32, new_tokens: u32, context_tokens: u64) -> Vec<ReqSlice> {
    if count == 0 {
        Vec::new()
    } else {
        vec![ReqSlice {
            new_tokens,
            context_tokens,
            count,
        }]
    }
}

/// Prices `spec`'s steps with `per_rank` requests on each rank: one decode step, or
/// a prefill's chunks one after another. Their sum, and how many there were.
fn price_steps(cost: &dyn CostModel, spec: &ForwardSpec, per_rank: &[u32]) -> (StepCost, u32) {
    let mut total = StepCost::default();
    let steps = each_step(spec, per_rank, |shape| {
        add_step(cost.step(shape), &mut total)
    });
    (total, steps)
}

/// The timeline of each of `spec`'s steps (one decode step, or a prefill's chunks), as
/// the analytic model prices them.
pub fn trace(cost: &AnalyticCostModel, spec: &ForwardSpec) -> Vec<StepTrace> {
    let mut out = Vec::new();
    each_step(spec, &spec.per_rank(), |shape| {
        out.push(cost.step_trace(shape).1)
    });
    out
}

/// Calls `f` with each step of `spec` in order, `per_rank` requests on each rank;
/// returns how many there were.
fn each_step(spec: &ForwardSpec, per_rank: &[u32], mut f: impl FnMut(&StepShape)) -> u32 {
    match spec.phase {
        Phase::Decode => {
            let ranks: Vec<Vec<ReqSlice>> = per_rank
                .iter()
                .map(|&c| rank_of(c, 1, spec.context_tokens))
                .collect();
            f(&StepShape {
                phase: Phase::Decode,
                ranks: &ranks,
                decode_ranks: &[],
                draft_tokens: spec.draft_tokens,
            });
            1
        }
        Phase::Prefill => {
            let chunk = spec.chunk_tokens.unwrap_or(spec.new_tokens).max(1);
            let (mut done, mut steps) = (0u32, 0u32);
            while done < spec.new_tokens {
                let n = chunk.min(spec.new_tokens - done);
                let ranks: Vec<Vec<ReqSlice>> = per_rank
                    .iter()
                    .map(|&c| rank_of(c, n, spec.context_tokens + done as u64))
                    .collect();
                f(&StepShape {
                    phase: Phase::Prefill,
                    ranks: &ranks,
                    decode_ranks: &[],
                    draft_tokens: 0,
                });
                done += n;
                steps += 1;
            }
            steps
        }
    }
}

/// Adds step `c` to the running `total`: times, kernels, traffic and bytes summed;
/// the last step's timeline, expert count and kernel kinds, and each op's bound from
/// the last step that spent time in it.
fn add_step(c: StepCost, total: &mut StepCost) {
    total.step_s += c.step_s;
    total.balanced_step_s += c.balanced_step_s;
    total.unskewed_step_s += c.unskewed_step_s;
    total.kernels += c.kernels;
    let (a, b) = (&mut total.comm, &c.comm);
    a.total_s += b.total_s;
    a.hidden_s += b.hidden_s;
    a.exposed_s += b.exposed_s;
    a.nvlink_s += b.nvlink_s;
    a.rdma_s += b.rdma_s;
    a.nvlink_bytes += b.nvlink_bytes;
    a.rdma_bytes += b.rdma_bytes;
    a.two_batch |= b.two_batch;
    a.low_latency = b.low_latency;
    a.allreduce = b.allreduce;
    // The last step's in-situ layer, as its timeline.
    total.in_situ = c.in_situ;
    if c.timeline.is_some() {
        total.timeline = c.timeline;
    }
    for i in 0..total.op_s.len() {
        total.op_s[i] += c.op_s[i];
        if c.op_s[i] > 0.0 {
            total.op_bound[i] = c.op_bound[i];
        }
    }
    total.moe_weight_bytes_per_rank += c.moe_weight_bytes_per_rank;
    total.experts_touched_per_rank = c.experts_touched_per_rank;
    total.tokens_processed += c.tokens_processed;
}

/// Which points are Pareto-optimal when both coordinates are to be maximised (for
/// example tokens/s per GPU and tokens/s per user): no other point is at least as good
/// in both and better in one. Ties are all kept.
pub fn pareto_max(points: &[(f64, f64)]) -> Vec<bool> {
    points
        .iter()
        .map(|&(x, y)| {
            !points
                .iter()
                .any(|&(a, b)| a >= x && b >= y && (a > x || b > y))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pareto_keeps_the_frontier() {
        // (1,5) and (3,3) and (5,1) trade off; (2,2) is dominated by (3,3); (3,3) twice
        // are both kept.
        let pts = [(1.0, 5.0), (2.0, 2.0), (3.0, 3.0), (5.0, 1.0), (3.0, 3.0)];
        assert_eq!(pareto_max(&pts), vec![true, false, true, true, true]);
        assert!(pareto_max(&[]).is_empty());
    }

    #[test]
    fn requests_are_placed_round_robin() {
        let spec = ForwardSpec {
            phase: Phase::Prefill,
            dep: 4,
            tp: 1,
            batch_per_rank: 1,
            total_requests: Some(6),
            context_tokens: 0,
            new_tokens: 1,
            chunk_tokens: None,
            draft_tokens: 0,
            tokens_per_step: 1.0,
        };
        assert_eq!(spec.per_rank(), vec![2, 2, 1, 1]);
    }
}
