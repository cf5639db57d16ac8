//! `twin forward`: one exact step of a DEP group, priced by the cost model.

use crate::scenario::{load_hardware, load_model, Set};
use anyhow::{anyhow, bail, Result};
use clap::{Args, ValueEnum};
use serde_json::json;
use sim::cost::{AnalyticCostModel, Bound, CostModel, Layout, Op, Phase};
use sim::forward::{forward, ForwardResult, ForwardSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PhaseArg {
    Prefill,
    Decode,
}

#[derive(Debug, Clone, Args)]
pub struct ForwardArgs {
    /// Hardware name (`twin list`) or path to a hardware TOML.
    #[arg(long, default_value = "gb300")]
    pub hardware: String,
    /// Model name (`twin list`) or path to a model TOML.
    #[arg(long, default_value = "deepseek-v4.1-flash")]
    pub model: String,
    #[arg(long, value_enum, default_value = "decode")]
    pub phase: PhaseArg,
    /// Ranks in the data + expert parallel group (default 8; 1 with --tp).
    #[arg(long)]
    pub dep: Option<u32>,
    /// GPUs of one tensor-parallel replica (heads and dense layers split over them,
    /// all-reduce after attention and after the FFN) instead of a DEP group.
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// With --tp: routed experts whole on each GPU (expert parallelism) instead of
    /// sliced over the TP GPUs.
    #[arg(long)]
    pub expert_parallel: bool,
    /// Redundant expert copies spread over the group (EPLB).
    #[arg(long, default_value_t = 0)]
    pub redundant_experts: u32,
    /// Requests per rank.
    #[arg(long, default_value_t = 64)]
    pub batch_per_rank: u32,
    /// Requests over the whole group, placed round-robin over the ranks (instead of
    /// --batch-per-rank); `--requests 1` on DEP2 times one request, one rank idle.
    #[arg(long)]
    pub requests: Option<u32>,
    /// Tokens already in KV per request (decode context or cached prefix).
    #[arg(long, default_value_t = 0)]
    pub context: u64,
    /// Prefill: new tokens per request.
    #[arg(long, default_value_t = 8192)]
    pub new_tokens: u32,
    /// Prefill: chunk budget per request per step (default: the whole prompt in one step).
    #[arg(long)]
    pub chunk: Option<u32>,
    /// Decode: MTP draft tokens per step (default: the model's `mtp.draft_tokens`).
    #[arg(long)]
    pub mtp: Option<u32>,
    /// Do not overlap dispatch/combine with compute (no two-micro-batch overlap).
    #[arg(long)]
    pub no_overlap: bool,
    /// Launch decode kernels eagerly from the host instead of replaying CUDA graphs.
    #[arg(long)]
    pub eager_decode: bool,
    /// Replay prefill steps as CUDA graphs instead of launching kernels eagerly.
    #[arg(long)]
    pub prefill_graphs: bool,
    /// Override any field: `model.engram.page_size=2MiB`, `hardware.hbm.bytes_per_s=7e12`,
    /// `cost.moe.mem_eff=0.9` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// A calibration profile (`twin calibrate --out DIR` writes DIR/profile.toml): price
    /// with its measured efficiencies instead of the analytic defaults.
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Most chunks a chunked prefill may take (each is priced as one step): a 1M-token
/// prompt in 1K-token chunks is a thousand.
pub const MAX_CHUNK_STEPS: u32 = 100_000;

/// Everything `forward` computed, for printing and for `validate`.
pub struct Forward {
    pub spec: ForwardSpec,
    pub layout: Layout,
    pub result: ForwardResult,
    pub cost_model: String,
    pub model: String,
    pub hardware: String,
}

/// Loads, validates and prices the step described by `args`.
pub fn evaluate(args: &ForwardArgs) -> Result<Forward> {
    let sets = Set::parse_all(&args.set)?;
    let (hw_sets, rest) = Set::split_prefix(&sets, "hardware");
    let (model_sets, rest) = Set::split_prefix(&rest, "model");
    let (cost_sets, rest) = Set::split_prefix(&rest, "cost");
    if let Some(s) = rest.first() {
        bail!(
            "--set {}: the path must start with `hardware.`, `model.` or `cost.`",
            s.text
        );
    }
    let hardware = load_hardware(&args.hardware, &hw_sets)?;
    let model = load_model(&args.model, &model_sets)?;
    let params = super::cost_params(&hardware, args.profile.as_deref(), &cost_sets)?;
    let dep = args.dep.unwrap_or(if args.tp > 1 { 1 } else { 8 });
    if args.expert_parallel && args.tp <= 1 {
        bail!("--expert-parallel applies to a TP replica (--tp 2 or more); a DEP group is expert-parallel already");
    }
    let layout = Layout {
        dep,
        tp: args.tp,
        expert_parallel: args.expert_parallel,
        redundant_experts: args.redundant_experts,
        overlap_microbatches: !args.no_overlap,
        decode_graphs: !args.eager_decode,
        prefill_graphs: args.prefill_graphs,
    };
    let phase = match args.phase {
        PhaseArg::Prefill => Phase::Prefill,
        PhaseArg::Decode => Phase::Decode,
    };
    let draft_tokens = match phase {
        Phase::Decode => args
            .mtp
            .unwrap_or_else(|| model.mtp.as_ref().map(|m| m.draft_tokens).unwrap_or(0)),
        Phase::Prefill => 0,
    };
    if draft_tokens > 0 {
        match &model.mtp {
            None => bail!("--mtp {draft_tokens}: model {} has no MTP module; use --mtp 0", model.name),
            Some(m) if (m.acceptance.len() as u32) < draft_tokens => bail!(
                "--mtp {draft_tokens}: model {} gives acceptance rates for {} draft tokens; use --mtp {} or less, or --set model.mtp.acceptance=[...]",
                model.name,
                m.acceptance.len(),
                m.acceptance.len()
            ),
            _ => {}
        }
    }
    if args.batch_per_rank == 0 {
        bail!("--batch-per-rank must be at least 1");
    }
    if args.requests == Some(0) {
        bail!("--requests must be at least 1");
    }
    let batch_check = match args.requests {
        Some(n) => n.div_ceil(dep.max(1)),
        None => args.batch_per_rank,
    };
    if phase == Phase::Prefill && args.new_tokens == 0 {
        bail!("--new-tokens must be at least 1 for a prefill step");
    }
    if args.chunk == Some(0) {
        bail!("--chunk must be at least 1");
    }
    if let (Phase::Prefill, Some(c)) = (phase, args.chunk) {
        // Each chunk is one priced step.
        let steps = args.new_tokens.div_ceil(c);
        if steps > MAX_CHUNK_STEPS {
            bail!(
                "--chunk {c}: {} new tokens make {steps} chunks; at most {MAX_CHUNK_STEPS} are priced (use a larger --chunk)",
                args.new_tokens
            );
        }
    }
    let step_tokens = if phase == Phase::Prefill {
        args.new_tokens as u64
    } else {
        1 + draft_tokens as u64
    };
    let kv_tokens = args.context.checked_add(step_tokens).ok_or_else(|| {
        anyhow!(
            "--context {}: with the step's {step_tokens} new tokens that is more tokens than twin can count",
            args.context
        )
    })?;
    let problems =
        sim::validate::deployment(&hardware, &model, &layout, batch_check as u64, kv_tokens);
    if !problems.is_empty() {
        let lines: Vec<String> = problems
            .iter()
            .map(|p| format!("  {}", p.render(&super::flag)))
            .collect();
        bail!("impossible configuration:\n{}", lines.join("\n"));
    }
    let tokens_per_step = model
        .mtp
        .as_ref()
        .map(|m| m.expected_tokens_per_step(draft_tokens))
        .unwrap_or(1.0);
    let spec = ForwardSpec {
        phase,
        dep,
        tp: args.tp,
        batch_per_rank: args.batch_per_rank,
        total_requests: args.requests,
        context_tokens: args.context,
        new_tokens: args.new_tokens,
        chunk_tokens: args.chunk,
        draft_tokens,
        tokens_per_step,
    };
    let cm = AnalyticCostModel::new(hardware.clone(), model.clone(), layout, params);
    let result = forward(&cm, &spec);
    if let Some(why) = sim::validate::non_finite_step(&result.total) {
        bail!("this step cannot be priced: {why}");
    }
    Ok(Forward {
        spec,
        layout: cm.layout.clone(),
        result,
        cost_model: cm.describe(),
        model: model.name,
        hardware: hardware.name,
    })
}

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
            "kernels": comm_kernels(&r.total.comm),
        },
        "timeline_us": r.total.timeline.map(|t| {
            sim::cost::LayerTimeline::NAMES
                .iter()
                .zip(t.spans.iter())
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
        "version": env!("CARGO_PKG_VERSION"),
    })
}

pub fn render(f: &Forward) -> String {
    use std::fmt::Write as _;
    let r = &f.result;
    let s = &f.spec;
    let mut out = String::new();
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
    writeln!(out, "{:<15} {:>10.3} {:>6.1}%", "total", total * 1e3, 100.0).unwrap();
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
    out
}

/// The communication legs, the overlap timeline, launches and skew loss.
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

fn render_terms(out: &mut String, r: &ForwardResult) {
    use std::fmt::Write as _;
    let t = &r.total;
    let c = &t.comm;
    if c.total_s > 0.0 {
        writeln!(
            out,
            "\ncommunication ({} kernels, {}): {:.3} ms in all, {:.3} ms hidden under compute, {:.3} ms exposed",
            comm_kernels(c),
            if c.two_batch { "two overlapped micro-batches" } else { "serial" },
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
        let spans: Vec<String> = sim::cost::LayerTimeline::NAMES
            .iter()
            .zip(tl.spans.iter())
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

pub fn run(args: &ForwardArgs) -> Result<()> {
    let f = evaluate(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&f))?);
    } else {
        print!("{}", render(&f));
    }
    Ok(())
}
