//! `twin forward`: one exact step of a DEP group, priced by the cost model.

use crate::scenario::{load_hardware, load_model, Set};
use anyhow::{bail, Result};
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
    /// Ranks in the data + expert parallel group.
    #[arg(long, default_value_t = 8)]
    pub dep: u32,
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

/// Everything `forward` computed, for printing and for `validate`.
pub struct Forward {
    pub spec: ForwardSpec,
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
    let layout = Layout {
        dep: args.dep,
        redundant_experts: args.redundant_experts,
        overlap_microbatches: !args.no_overlap,
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
        Some(n) => n.div_ceil(args.dep.max(1)),
        None => args.batch_per_rank,
    };
    if phase == Phase::Prefill && args.new_tokens == 0 {
        bail!("--new-tokens must be at least 1 for a prefill step");
    }
    if args.chunk == Some(0) {
        bail!("--chunk must be at least 1");
    }
    let kv_tokens = args.context
        + if phase == Phase::Prefill {
            args.new_tokens as u64
        } else {
            1 + draft_tokens as u64
        };
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
        dep: args.dep,
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
    Ok(Forward {
        spec,
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
        None => format!("{} requests per rank", s.batch_per_rank),
    };
    writeln!(
        out,
        "{} on {}, DEP{}, {placement}: {phase}",
        f.model, f.hardware, s.dep
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

pub fn run(args: &ForwardArgs) -> Result<()> {
    let f = evaluate(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&f))?);
    } else {
        print!("{}", render(&f));
    }
    Ok(())
}
