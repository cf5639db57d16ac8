//! One forward step in words and as JSON: `twin forward`'s table and `--json` object
//! (the fuzz tests render random steps through here too).

use scenario::step::Forward;
use serde_json::json;
use sim::cost::{Bound, Op, Phase, Pipeline};
use sim::forward::ForwardResult;
use std::fmt::Write as _;

/// The step as `twin forward --json` prints it.
pub fn to_json(f: &Forward) -> serde_json::Value {
    let r = &f.result;
    let mut breakdown = serde_json::Map::new();
    let mut share = serde_json::Map::new();
    let mut bound = serde_json::Map::new();
    for op in Op::ALL {
        breakdown.insert(op.key().into(), json!(r.total.op(op) * 1e3));
        share.insert(op.key().into(), json!(r.share(op)));
        bound.insert(op.key().into(), json!(r.total.op_bound[op.index()].name()));
    }
    json!({
        "step_ms": r.step_s() * 1e3,
        "target_step_ms": r.target_step_s() * 1e3,
        "steps": r.steps,
        "breakdown_ms": breakdown,
        "share": share,
        "bound": bound,
        "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
        "tokens_per_s_per_user": r.tokens_per_s_per_user,
        "imbalance_ms": r.total.imbalance_s() * 1e3,
        "skew_loss_ms": r.total.skew_loss_s() * 1e3,
        "balanced_step_ms": r.total.balanced_step_s * 1e3,
        "unskewed_step_ms": r.total.unskewed_step_s * 1e3,
        "kernels": r.total.kernels,
        "comm": {
            "total_ms": r.total.comm.total_s * 1e3,
            "hidden_ms": r.total.comm.hidden_s * 1e3,
            "exposed_ms": r.total.comm.exposed_s * 1e3,
            "nvlink_ms": r.total.comm.nvlink_s * 1e3,
            "rdma_ms": r.total.comm.rdma_s * 1e3,
            "nvlink_bytes_per_rank": r.total.comm.nvlink_bytes,
            "rdma_bytes_per_rank": r.total.comm.rdma_bytes,
            "two_batch_overlap": r.total.comm.two_batch,
            "pipeline": r.total.timeline.map(|l| l.pipeline.name()),
            "kernels": comm_kernels(&r.total.comm),
        },
        "timeline_us": r.total.timeline.map(|t| {
            t.named()
                .map(|(n, (a, b))| json!({"stage": n, "start": a * 1e6, "end": b * 1e6}))
                .collect::<Vec<_>>()
        }),
        "moe_weight_bytes_per_rank": r.total.moe_weight_bytes_per_rank,
        "experts_touched_per_rank_per_layer": r.total.experts_touched_per_rank,
        "inputs": {
            "hardware": f.hardware,
            "model": f.model,
            "spec": f.spec,
        },
        "cost_model": f.cost_model,
        "in_situ": f.in_situ,
        "in_situ_layer_ms": super::in_situ::layer_json(&r.total.in_situ),
        "version": env!("CARGO_PKG_VERSION"),
    })
}

/// The step as `twin forward` prints it: heading, operations, communication, cost model.
pub fn render(f: &Forward) -> String {
    let r = &f.result;
    let mut out = String::new();
    render_step(&mut out, f);
    writeln!(
        out,
        "\n{:<15} {:>10} {:>7}  bound",
        "operation", "ms", "share"
    )
    .unwrap();
    for op in Op::ALL {
        let t = r.total.op(op);
        if t <= 0.0 {
            continue;
        }
        let b = r.total.op_bound[op.index()];
        writeln!(
            out,
            "{:<15} {:>10.3} {:>6.1}%  {}",
            op.key(),
            t * 1e3,
            r.share(op) * 100.0,
            if b == Bound::None { "-" } else { b.name() }
        )
        .unwrap();
    }
    writeln!(
        out,
        "{:<15} {:>10.3} {:>6.1}%",
        "total",
        r.step_s() * 1e3,
        100.0
    )
    .unwrap();
    render_terms(&mut out, r);
    if r.total.moe_weight_bytes_per_rank > 0.0 {
        writeln!(
            out,
            "\nrouted-expert weights read per rank: {:.2} GB per step ({:.1} experts touched per rank per layer)",
            r.total.moe_weight_bytes_per_rank / 1e9,
            r.total.experts_touched_per_rank
        )
        .unwrap();
    }
    writeln!(out, "cost model: {}", f.cost_model).unwrap();
    writeln!(out, "{}", f.in_situ).unwrap();
    out
}

/// The step's heading: what ran on what, its time, throughput and imbalance.
fn render_step(out: &mut String, f: &Forward) {
    let r = &f.result;
    let s = &f.spec;
    let phase = match s.phase {
        Phase::Decode => format!(
            "decode, context {} tokens, MTP {} (expected {:.2} tokens/step)",
            s.context_tokens, s.draft_tokens, s.tokens_per_step
        ),
        Phase::Prefill => format!(
            "prefill of {} new tokens on {} cached{}",
            s.new_tokens,
            s.context_tokens,
            match s.chunk_tokens {
                Some(c) => format!(", chunks of {c} ({} steps)", r.steps),
                None => String::new(),
            }
        ),
    };
    let placement = match s.total_requests {
        Some(n) => format!(
            "{n} request{} over the group",
            if n == 1 { "" } else { "s" }
        ),
        None => format!(
            "{} request{} per rank",
            s.batch_per_rank,
            if s.batch_per_rank == 1 { "" } else { "s" }
        ),
    };
    writeln!(
        out,
        "{} on {}, {}, {placement}: {phase}",
        f.model,
        f.hardware,
        f.layout.name()
    )
    .unwrap();
    let total = r.step_s();
    let draft = r.total.op(Op::MtpDraft);
    if draft > 0.0 {
        writeln!(
            out,
            "step {:.3} ms (target model {:.3} ms + MTP drafts {:.3} ms)",
            total * 1e3,
            r.target_step_s() * 1e3,
            draft * 1e3
        )
        .unwrap();
    } else {
        writeln!(out, "step {:.3} ms", total * 1e3).unwrap();
    }
    let what = if s.phase == Phase::Decode {
        "output"
    } else {
        "prefill"
    };
    writeln!(out, "{:.0} {what} tokens/s per GPU", r.tokens_per_s_per_gpu).unwrap();
    writeln!(
        out,
        "imbalance {:.3} ms ({:.1}% of the step, against every rank at the mean load)",
        r.total.imbalance_s() * 1e3,
        if total > 0.0 {
            r.total.imbalance_s() / total * 100.0
        } else {
            0.0
        }
    )
    .unwrap();
}

/// Which communication kernels a step ran.
fn comm_kernels(c: &sim::cost::CommCost) -> &'static str {
    if c.allreduce {
        "all-reduce"
    } else if c.low_latency {
        "low-latency"
    } else {
        "normal"
    }
}

/// The communication legs, the overlap timeline, launches and skew loss.
fn render_terms(out: &mut String, r: &ForwardResult) {
    let t = &r.total;
    let c = &t.comm;
    if c.total_s > 0.0 {
        writeln!(
            out,
            "\ncommunication ({} kernels, {}): {:.3} ms in all, {:.3} ms hidden under compute, {:.3} ms exposed",
            comm_kernels(c),
            match t.timeline.map(|l| l.pipeline) {
                Some(Pipeline::FiveStage) => "two micro-batches in the five-stage pipeline",
                _ if c.two_batch => "two overlapped micro-batches",
                _ => "serial",
            },
            c.total_s * 1e3,
            c.hidden_s * 1e3,
            c.exposed_s * 1e3
        )
        .unwrap();
        writeln!(
            out,
            "  legs: NVLink {:.3} ms ({:.1} MB per rank), RDMA {:.3} ms ({:.1} MB per rank)",
            c.nvlink_s * 1e3,
            c.nvlink_bytes / 1e6,
            c.rdma_s * 1e3,
            c.rdma_bytes / 1e6
        )
        .unwrap();
    } else if t.timeline.is_none() {
        writeln!(out).unwrap();
    }
    if let Some(tl) = &t.timeline {
        let spans: Vec<String> = tl
            .named()
            .map(|(n, (a, b))| format!("{n} {:.0}-{:.0}", a * 1e6, b * 1e6))
            .collect();
        writeln!(out, "  middle layer (us): {}", spans.join(", ")).unwrap();
    }
    writeln!(
        out,
        "launches: {:.0} kernels, {:.3} ms; expert-load skew costs {:.3} ms ({:.1}% of the step)",
        t.kernels,
        t.op(Op::Launch) * 1e3,
        t.skew_loss_s() * 1e3,
        if t.step_s > 0.0 {
            t.skew_loss_s() / t.step_s * 100.0
        } else {
            0.0
        }
    )
    .unwrap();
}
