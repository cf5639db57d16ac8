//! Checks of a deployment (a DEP group or a tensor-parallel replica of a model on a
//! GPU) and of a priced step: the DEP's range first, experts over ranks (or heads over
//! TP GPUs), weights and KV in HBM, the rack, with advice that can run; and the inputs
//! behind a step that is not a finite time.

use super::{Field, Message, Problem};
use crate::cost::{AnalyticCostModel, Bound, KvCapacity, Layout, Op, StepCost};
use spec::dtype::{fp8_blocks_whole, FP8_BLOCK_SIDE};
use spec::{hardware::Hardware, model::Model};

/// The largest DEP (ranks in one data + expert parallel group) any check accepts:
/// 4096 ranks, ten times the most routed experts of a shipped model (384) and 56 GB300
/// NVL72 racks. Beyond it no expert-parallel group is meaningful; the bound keeps every
/// per-rank allocation and every search for a better DEP small. A scenario's pools, and
/// `--dep`, are checked against it before anything else.
pub const MAX_DEP: u32 = 4096;

/// A DEP group of `layout` on `hw` running `m`, with `batch_per_rank` requests of
/// `tokens_per_request` tokens of KV each (0 = skip the KV check).
///
/// The DEP is range-checked first (1..=`MAX_DEP`); nothing else runs on a DEP out of
/// range, and every suggestion of a better DEP searches at most `MAX_DEP` sizes.
pub fn deployment(
    hw: &Hardware,
    m: &Model,
    layout: &Layout,
    batch_per_rank: u64,
    tokens_per_request: u64,
) -> Vec<Problem> {
    let mut p = Vec::new();
    let d = layout.dep;
    if d == 0 || d > MAX_DEP {
        p.push(Problem::at(
            Field::Dep,
            format!(
                "DEP {d} is outside 1..={MAX_DEP} (the largest expert-parallel group twin models)"
            ),
        ));
        return p;
    }
    if layout.tp != 1 {
        return tensor_parallel(hw, m, layout, batch_per_rank, tokens_per_request);
    }
    if hw.nvlink_domain_gpus > 8 && d > hw.nvlink_domain_gpus {
        p.push(Problem::at(
            Field::Dep,
            Message::default()
                .text(format!(
                    "DEP {d} is larger than the {}-GPU {} rack; use ",
                    hw.nvlink_domain_gpus, hw.name
                ))
                .field(Field::Dep)
                .text(format!(" {} or less", hw.nvlink_domain_gpus)),
        ));
    }
    if let Some(moe) = &m.moe {
        // Sums in 64 bits: expert counts come from user input.
        let e = moe.routed_experts as u64;
        let redundant = layout.redundant_experts as u64;
        let slots = e + redundant;
        let dd = d as u64;
        if e > 0 && !slots.is_multiple_of(dd) {
            let r = (dd - slots % dd) % dd;
            let (below, above) = nearest_divisors(e, d);
            let mut message = Message::default().text(format!(
                "{e} routed + {redundant} redundant experts do not divide over {d} ranks; use a DEP that divides {slots}"
            ));
            let example = match (below, above) {
                (Some(b), Some(a)) => Some(format!(" {b} or {a})")),
                (Some(x), None) | (None, Some(x)) => Some(format!(" {x})")),
                (None, None) => None,
            };
            if let Some(example) = example {
                message = message.text(" (e.g. ").field(Field::Dep).text(example);
            }
            p.push(Problem::at(
                if redundant > 0 {
                    Field::RedundantExperts
                } else {
                    Field::Dep
                },
                message.text(format!(", or add {r} more redundant experts")),
            ));
        }
        if redundant > 0 && redundant > e {
            p.push(Problem::at(
                Field::RedundantExperts,
                format!("{redundant} redundant experts exceed the {e} routed experts"),
            ));
        }
    }
    if !p.is_empty() {
        return p;
    }
    memory(hw, m, layout, batch_per_rank, tokens_per_request)
}

/// The largest tensor-parallel replica any check accepts.
pub const MAX_TP: u32 = 64;

/// A tensor-parallel replica: one per instance (`dep` 1), heads and (with expert
/// parallelism) routed experts dividing over its GPUs, no redundant experts.
fn tensor_parallel(
    hw: &Hardware,
    m: &Model,
    layout: &Layout,
    batch_per_rank: u64,
    tokens_per_request: u64,
) -> Vec<Problem> {
    let mut p = Vec::new();
    let t = layout.tp;
    if t == 0 || t > MAX_TP {
        p.push(Problem::at(
            Field::Tp,
            format!("TP {t} is outside 1..={MAX_TP}"),
        ));
        return p;
    }
    if layout.dep > 1 {
        p.push(Problem::at(
            Field::Tp,
            Message::default()
                .text(format!(
                    "TP{t} with {} data-parallel replicas is not modelled: use one TP replica (",
                    layout.dep
                ))
                .field(Field::Dep)
                .text(" 1) per instance and more instances, or DEP (")
                .field(Field::Tp)
                .text(" 1)"),
        ));
    }
    let heads = m.attention.heads;
    if !heads.is_multiple_of(t) {
        let fits: Vec<String> = (2..=heads.min(MAX_TP))
            .filter(|x| heads.is_multiple_of(*x))
            .map(|x| x.to_string())
            .collect();
        p.push(Problem::at(
            Field::Tp,
            format!(
                "{heads} attention heads do not divide over {t} GPUs; use a TP size that divides {heads} ({})",
                fits.join(", ")
            ),
        ));
    }
    if let Some(moe) = &m.moe {
        if layout.expert_parallel && !moe.routed_experts.is_multiple_of(t) {
            p.push(Problem::at(
                Field::Tp,
                format!(
                    "{} routed experts do not divide over {t} GPUs with expert parallelism",
                    moe.routed_experts
                ),
            ));
        }
        if !layout.expert_parallel {
            if let Some(problem) = partial_scale_blocks(moe, heads, t) {
                p.push(problem);
            }
        }
    }
    if layout.redundant_experts > 0 {
        p.push(Problem::at(
            Field::RedundantExperts,
            Message::default()
                .text("redundant experts balance a DEP group's expert load; with TP use ")
                .field(Field::RedundantExperts)
                .text(" 0"),
        ));
    }
    if !p.is_empty() {
        return p;
    }
    memory(hw, m, layout, batch_per_rank, tokens_per_request)
}

/// Routed experts in block FP8 (FP8 weights with any `scale_block`, as the kernel
/// tables read them) that slicing over `tp` GPUs would cut into shards that are not
/// whole scale blocks ([`fp8_blocks_whole`]: MiniMax-M2.5 or Qwen3-235B-A22B-FP8 at
/// TP8). Expert parallelism keeps every expert whole; the TP sizes offered instead also
/// divide the `heads`.
fn partial_scale_blocks(moe: &spec::model::Moe, heads: u32, tp: u32) -> Option<Problem> {
    let side = FP8_BLOCK_SIDE;
    let blocked = moe.weight_dtype == spec::dtype::Dtype::Fp8 && moe.scale_block > 0;
    let ffn = moe.expert_ffn;
    if !blocked || fp8_blocks_whole(ffn, tp) {
        return None;
    }
    let whole: Vec<String> = (2..=tp)
        .filter(|x| heads.is_multiple_of(*x) && fp8_blocks_whole(ffn, *x))
        .map(|x| x.to_string())
        .collect();
    let shard = ffn as f64 / tp as f64;
    let mut message = Message::default().text(format!(
        "block-FP8 routed experts {ffn} wide would be cut into {}-wide shards over {tp} GPUs, not whole {side}-wide scale blocks (vLLM and SGLang refuse to load them); keep the experts whole with ",
        if shard.fract() == 0.0 { format!("{shard}") } else { format!("{shard:.1}") }
    ))
    .field(Field::ExpertParallel);
    if !whole.is_empty() {
        message = message.text(", or use a ").field(Field::Tp).text(format!(
            " whose shards are whole blocks ({})",
            whole.join(", ")
        ));
    }
    Some(Problem::at(Field::Tp, message))
}

/// Weights and KV of one rank (a DEP rank, or a TP replica whose GPUs each keep their
/// KV heads' share) in HBM, with advice: a smaller batch, or a layout spreading the
/// weights over more GPUs.
fn memory(
    hw: &Hardware,
    m: &Model,
    layout: &Layout,
    batch_per_rank: u64,
    tokens_per_request: u64,
) -> Vec<Problem> {
    let mut p = Vec::new();
    // A dense model's weights spread only by tensor parallelism: a larger DEP holds
    // a whole copy on every rank.
    let tp = layout.tp > 1 || m.moe.is_none();
    let (grow, larger) = if tp {
        (Field::Tp, "TP")
    } else {
        (Field::Dep, "DEP")
    };
    let cm = AnalyticCostModel::new(hw.clone(), m.clone(), layout.clone(), Default::default());
    let weights = cm.weight_bytes_per_rank();
    let usable = hw.hbm.usable.as_f64();
    let kv_bytes = cm.kv_bytes_per_rank();
    if kv_bytes <= 0.0 {
        p.push(Problem::at(
            grow,
            format!(
                "weights need {:.1} GB per GPU but {} leaves {:.1} GB for weights and KV ({:.1} GB usable, 8% kept for activations); use a larger {larger}",
                weights / 1e9,
                hw.name,
                (weights + kv_bytes) / 1e9,
                usable / 1e9
            ),
        ));
        return p;
    }
    // Tokens the rank holds, and the KV bytes each of its GPUs keeps per token.
    let cap = cm.kv_capacity_tokens_per_rank();
    let per_gpu = kv_bytes / cap.max(1) as f64;
    if batch_per_rank.saturating_mul(tokens_per_request) > cap {
        let need = batch_per_rank as f64 * tokens_per_request as f64 * per_gpu;
        let max_batch = cap / tokens_per_request.max(1);
        let head = format!(
            "{batch_per_rank} requests x {tokens_per_request} tokens x {per_gpu:.0} B = {:.1} GB of KV per GPU, but only {:.1} GB is left after {:.1} GB of weights; ",
            need / 1e9,
            kv_bytes / 1e9,
            weights / 1e9
        );
        let message = if max_batch >= 1 {
            Message::default()
                .text(format!("{head}use "))
                .field(Field::BatchPerRank)
                .text(format!(
                    " {max_batch} or less, a shorter context, or a larger {larger}"
                ))
        } else {
            // Not even one request fits: a smaller batch cannot help.
            let bigger = if tp {
                None
            } else {
                larger_dep_holding(hw, m, layout, tokens_per_request)
            };
            let tail = match bigger {
                Some(dep) => Message::default()
                    .text(", or ")
                    .field(Field::Dep)
                    .text(format!(" {dep}")),
                None if tp => Message::default().text(", or a larger TP"),
                None => Message::default().text(format!(
                    "; no larger DEP (up to {}) holds one such request",
                    dep_ceiling(hw)
                )),
            };
            Message::default()
                .text(format!(
                    "{head}not even one request fits: use requests of at most {cap} tokens (context + new tokens)"
                ))
                .then(tail)
        };
        p.push(Problem::at(Field::BatchPerRank, message));
    }
    p
}

/// The largest DEP a deployment on `hw` may use: its NVLink rack when that is larger
/// than a node (DEP groups do not span racks), else `MAX_DEP`.
fn dep_ceiling(hw: &Hardware) -> u32 {
    if hw.nvlink_domain_gpus > 8 {
        hw.nvlink_domain_gpus.min(MAX_DEP)
    } else {
        MAX_DEP
    }
}

/// The divisors of `experts` nearest below and above `dep` (above: at most `MAX_DEP`).
/// At most `MAX_DEP` candidates are tried.
fn nearest_divisors(experts: u64, dep: u32) -> (Option<u64>, Option<u64>) {
    let d = dep as u64;
    let below = (1..d).rev().find(|x| experts.is_multiple_of(*x));
    let above = (d + 1..=experts.min(MAX_DEP as u64)).find(|x| experts.is_multiple_of(*x));
    (below, above)
}

/// The smallest DEP above `layout.dep` (dividing the expert slots, within
/// `dep_ceiling`) whose ranks hold the KV of one request of `tokens` tokens.
fn larger_dep_holding(hw: &Hardware, m: &Model, layout: &Layout, tokens: u64) -> Option<u32> {
    // Only routed experts spread over the group; without them a larger DEP holds no
    // more per rank.
    let moe = m.moe.as_ref()?;
    let slots = moe.routed_experts as u64 + layout.redundant_experts as u64;
    (layout.dep + 1..=dep_ceiling(hw))
        .filter(|&d| slots.is_multiple_of(d as u64))
        .find(|&d| {
            let l = Layout {
                dep: d,
                ..layout.clone()
            };
            let cm = AnalyticCostModel::new(hw.clone(), m.clone(), l, Default::default());
            cm.kv_capacity_tokens_per_rank() >= tokens
        })
}

/// Why a priced step is not a finite time, or None when it is: the first operation
/// whose time is infinite or not a number, what bound it, and the inputs that set
/// that bound. Inputs within their checked ranges give finite steps; this names the
/// culprit when a combination of extreme ones does not.
pub fn non_finite_step(c: &StepCost) -> Option<String> {
    let bad = |v: f64| !(v.is_finite() && v >= 0.0);
    if !bad(c.step_s) {
        return None;
    }
    let Some(op) = Op::ALL.into_iter().find(|o| bad(c.op(*o))) else {
        return Some(format!(
            "the step time is {} s: check the hardware's rates and the model's sizes",
            c.step_s
        ));
    };
    let inputs = match c.op_bound[op.index()] {
        Bound::Memory => "hardware.hbm.bytes_per_s and the cost.*.mem_eff efficiencies",
        Bound::Compute => "hardware.tensor.*_flops_per_s and the cost.*.compute_eff efficiencies",
        Bound::Link => "hardware.nvlink.bytes_per_s, hardware.scaleout.bytes_per_s and cost.comm.*",
        Bound::Latency => "the latencies (hardware.*.latency_s) and fixed costs (cost.*_s)",
        Bound::None => "the hardware's rates, the cost.* efficiencies and the model's sizes",
    };
    Some(format!(
        "`{}` takes {} s of the step: a non-finite time; check {inputs}",
        op.key(),
        c.op(op)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gb300_flash() -> (Hardware, Model) {
        let hw = toml::from_str(include_str!("../../../scenarios/hardware/gb300.toml")).unwrap();
        let m = toml::from_str(include_str!(
            "../../../scenarios/models/deepseek-v4.1-flash.toml"
        ))
        .unwrap();
        (hw, m)
    }

    fn layout(dep: u32, redundant_experts: u32) -> Layout {
        Layout {
            redundant_experts,
            ..Layout::new(dep)
        }
    }

    /// A deployment problem names its field as a field; each caller words it.
    #[test]
    fn deployment_problems_carry_typed_fields() {
        let (hw, m) = gb300_flash();
        let p = deployment(&hw, &m, &layout(36, 0), 1, 0);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].field, Field::Dep);
        let flag = |f: &Field| match f {
            Field::Dep => "--dep".to_string(),
            other => other.to_string(),
        };
        let scenario = |f: &Field| format!("serving.decode.{f}");
        let cli = p[0].render(&flag);
        assert!(
            cli.starts_with("--dep: 384 routed + 0 redundant experts"),
            "{cli}"
        );
        assert!(
            cli.contains("(e.g. --dep 32 or 48), or add 12 more"),
            "{cli}"
        );
        let file = p[0].render(&scenario);
        assert!(
            file.contains("(e.g. serving.decode.dep 32 or 48)"),
            "{file}"
        );
        assert!(!file.contains("--"), "{file}");
        assert_eq!(p[0].to_string(), p[0].render(&|f| f.to_string()));
        assert!(deployment(&hw, &m, &layout(36, 12), 1, 0).is_empty());
        let p = deployment(&hw, &m, &layout(96, 0), 1, 0);
        assert_eq!(p[0].field, Field::Dep);
        assert!(p[0].render(&flag).ends_with("use --dep 72 or less"));
        let p = deployment(&hw, &m, &layout(8, 0), 4096, 1_000_000);
        assert_eq!(p[0].field, Field::BatchPerRank);
        assert!(p[0]
            .render(&scenario)
            .contains("use serving.decode.batch_per_rank "));
    }
    /// A dense model whose weights do not fit one GPU is told to use TP: a larger DEP
    /// keeps a whole copy of a dense model on every rank.
    #[test]
    fn a_dense_model_that_does_not_fit_is_told_to_use_tp() {
        let hw: Hardware =
            toml::from_str(include_str!("../../../scenarios/hardware/h100.toml")).unwrap();
        let m: Model =
            toml::from_str(include_str!("../../../scenarios/models/llama-3.1-70b.toml")).unwrap();
        let p = deployment(&hw, &m, &layout(1, 0), 1, 0);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].field, Field::Tp);
        let text = p[0].to_string();
        assert!(text.ends_with("use a larger TP"), "{text}");
        assert!(!text.contains("DEP"), "{text}");
        // TP8 holds it: 141 GB of BF16 weights over 8 GPUs of 76 GB usable.
        let tp8 = Layout::tensor_parallel(8);
        assert!(deployment(&hw, &m, &tp8, 1, 0).is_empty());
    }

    /// A step with a non-finite time names the operation, its bound and the inputs
    /// that set it; finite steps pass.
    #[test]
    fn non_finite_step_names_the_op_and_its_inputs() {
        let mut c = StepCost {
            step_s: 0.01,
            ..Default::default()
        };
        assert_eq!(non_finite_step(&c), None);
        c.op_s[Op::Moe.index()] = f64::INFINITY;
        c.op_bound[Op::Moe.index()] = Bound::Memory;
        c.step_s = f64::INFINITY;
        let why = non_finite_step(&c).unwrap();
        assert!(why.starts_with("`moe` takes inf s"), "{why}");
        assert!(why.contains("hardware.hbm.bytes_per_s"), "{why}");
    }

    /// The KV advice names a batch that fits, or says none does and what would: never
    /// a batch of 0.
    #[test]
    fn kv_advice_never_names_an_empty_batch() {
        let (hw, m) = gb300_flash();
        let p = deployment(&hw, &m, &layout(8, 0), 1, 1_000_000_000_000);
        let text = p[0].render(&|f| f.to_string());
        assert!(text.contains("not even one request fits"), "{text}");
        assert!(!text.contains("batch_per_rank 0"), "{text}");
        // A context that fits on a larger DEP: the advice names it.
        let cap8 = AnalyticCostModel::new(hw.clone(), m.clone(), layout(8, 0), Default::default())
            .kv_capacity_tokens_per_rank();
        let p = deployment(&hw, &m, &layout(8, 0), 1, cap8 + 1);
        let text = p[0].render(&|f| f.to_string());
        assert!(text.contains(", or dep "), "{text}");
    }

    /// Out-of-range DEPs are refused before anything else runs; the suggestion search
    /// is bounded by `MAX_DEP` whatever the expert count.
    #[test]
    fn dep_is_range_checked_first() {
        let (hw, mut m) = gb300_flash();
        for d in [0, MAX_DEP + 1, u32::MAX] {
            let p = deployment(&hw, &m, &layout(d, 0), 1, 0);
            assert_eq!(p.len(), 1, "{p:?}");
            assert!(p[0].to_string().contains("outside 1..=4096"), "{p:?}");
        }
        m.moe.as_mut().unwrap().routed_experts = u32::MAX;
        assert_eq!(nearest_divisors(u32::MAX as u64, 7), (Some(5), Some(15)));
        let p = deployment(&hw, &m, &layout(7, u32::MAX), 1, 0);
        assert!(p[0].to_string().contains("divides 8589934590"), "{p:?}");
    }
}
