//! Semantic checks of hardware, models and deployments. Every check returns all its
//! problems at once, each with the field it concerns and what to change. Problems
//! name fields, not command-line flags: the caller names each `Field` in its user's
//! words (`--dep` for `twin forward`, `serving.decode.dep` in a scenario).

use crate::cost::{AnalyticCostModel, KvCapacity, Layout};
use crate::model::{AttentionKind, FfnKind};
use crate::{Hardware, Model};
use std::fmt;

/// What a problem is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// A field of a hardware, model or scenario file, by path (`moe.top_k`,
    /// `layers[1].count`).
    Path(String),
    /// A deployment's DEP size (ranks per instance).
    Dep,
    /// A deployment's redundant experts per instance.
    RedundantExperts,
    /// A deployment's requests per rank.
    BatchPerRank,
}

impl fmt::Display for Field {
    /// The field's own name (a path, or the deployment setting's name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Path(p) => f.write_str(p),
            Field::Dep => f.write_str("dep"),
            Field::RedundantExperts => f.write_str("redundant_experts"),
            Field::BatchPerRank => f.write_str("batch_per_rank"),
        }
    }
}

/// A problem's text: words, and fields it mentions (in its advice) for the caller to
/// name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message(Vec<Part>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(Field),
}

impl Message {
    pub fn text(mut self, s: impl Into<String>) -> Self {
        self.0.push(Part::Text(s.into()));
        self
    }

    pub fn field(mut self, f: Field) -> Self {
        self.0.push(Part::Field(f));
        self
    }

    /// The text, each field named by `name`.
    pub fn render(&self, name: &dyn Fn(&Field) -> String) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.clone(),
                Part::Field(f) => name(f),
            })
            .collect()
    }
}

impl From<String> for Message {
    fn from(s: String) -> Self {
        Message::default().text(s)
    }
}

impl From<&str> for Message {
    fn from(s: &str) -> Self {
        Message::default().text(s)
    }
}

/// One problem with an input: the field it concerns and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: Field,
    pub message: Message,
}

impl Problem {
    /// A problem with the file field at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<Message>) -> Self {
        Problem::at(Field::Path(path.into()), message)
    }

    pub fn at(field: Field, message: impl Into<Message>) -> Self {
        Problem {
            field,
            message: message.into(),
        }
    }

    /// `field: message`, every field named by `name`.
    pub fn render(&self, name: &dyn Fn(&Field) -> String) -> String {
        format!("{}: {}", name(&self.field), self.message.render(name))
    }
}

impl fmt::Display for Problem {
    /// With each field's own name (`Field`'s `Display`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&|f| f.to_string()))
    }
}

fn positive(out: &mut Vec<Problem>, path: &str, v: f64) {
    if !(v.is_finite() && v > 0.0) {
        out.push(Problem::new(
            path,
            format!("must be a positive number, got {v}"),
        ));
    }
}

fn fraction(out: &mut Vec<Problem>, path: &str, v: f64) {
    if !(v.is_finite() && v > 0.0 && v <= 1.0) {
        out.push(Problem::new(path, format!("must lie in (0, 1], got {v}")));
    }
}

pub fn hardware(hw: &Hardware) -> Vec<Problem> {
    let mut p = Vec::new();
    positive(&mut p, "hbm.capacity", hw.hbm.capacity.as_f64());
    positive(&mut p, "hbm.usable", hw.hbm.usable.as_f64());
    if hw.hbm.usable > hw.hbm.capacity {
        p.push(Problem::new(
            "hbm.usable",
            format!("{} exceeds hbm.capacity {}", hw.hbm.usable, hw.hbm.capacity),
        ));
    }
    positive(&mut p, "hbm.bytes_per_s", hw.hbm.bytes_per_s);
    positive(
        &mut p,
        "tensor.bf16_flops_per_s",
        hw.tensor.bf16_flops_per_s,
    );
    positive(&mut p, "tensor.fp8_flops_per_s", hw.tensor.fp8_flops_per_s);
    if let Some(f) = hw.tensor.fp4_flops_per_s {
        positive(&mut p, "tensor.fp4_flops_per_s", f);
    }
    positive(&mut p, "nvlink.bytes_per_s", hw.nvlink.bytes_per_s);
    positive(&mut p, "scaleout.bytes_per_s", hw.scaleout.bytes_per_s);
    positive(&mut p, "host.link_bytes_per_s", hw.host.link_bytes_per_s);
    if hw.nvlink_domain_gpus == 0 {
        p.push(Problem::new("nvlink_domain_gpus", "must be at least 1"));
    }
    if hw.tlb.entries == 0 {
        p.push(Problem::new("tlb.entries", "must be at least 1"));
    }
    for (path, v) in [
        ("nvlink.latency_s", hw.nvlink.latency_s),
        ("scaleout.latency_s", hw.scaleout.latency_s),
        ("host.link_latency_s", hw.host.link_latency_s),
        ("tlb.miss_s", hw.tlb.miss_s),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            p.push(Problem::new(
                path,
                format!("must be a non-negative number of seconds, got {v}"),
            ));
        }
    }
    let mut params = crate::cost::CostParams::default();
    for (k, v) in &hw.cost {
        if let Err(e) = params.set(k, *v) {
            p.push(Problem::new(format!("cost.{k}"), e));
        }
    }
    p
}

pub fn model(m: &Model) -> Vec<Problem> {
    let mut p = Vec::new();
    if m.hidden == 0 {
        p.push(Problem::new("hidden", "must be at least 1"));
    }
    if m.layers.is_empty() || m.layer_count() == 0 {
        p.push(Problem::new("layers", "the model needs at least one layer"));
    }
    let has_moe_layers = m.layers.iter().any(|g| g.ffn == FfnKind::Moe);
    let has_dense_layers = m.layers.iter().any(|g| g.ffn == FfnKind::Dense);
    for (i, g) in m.layers.iter().enumerate() {
        if g.count == 0 {
            p.push(Problem::new(
                format!("layers[{i}].count"),
                "must be at least 1",
            ));
        }
        if g.compress_ratio == 0 {
            p.push(Problem::new(
                format!("layers[{i}].compress_ratio"),
                "must be at least 1",
            ));
        }
        if g.attention == AttentionKind::Sparse && m.attention.indexer.is_none() {
            p.push(Problem::new(
                format!("layers[{i}].attention"),
                "sparse attention needs an [attention.indexer] table",
            ));
        }
        if (g.window_branch || g.attention == AttentionKind::Window) && m.attention.window == 0 {
            p.push(Problem::new(
                format!("layers[{i}].window_branch"),
                "window layers need attention.window > 0",
            ));
        }
        if g.shares_selection && g.attention != AttentionKind::Sparse {
            p.push(Problem::new(
                format!("layers[{i}].shares_selection"),
                "only sparse layers share a top-k selection",
            ));
        }
    }
    if has_moe_layers && m.moe.is_none() {
        p.push(Problem::new("moe", "MoE layers need a [moe] table"));
    }
    if has_dense_layers && m.dense_ffn.is_none() {
        p.push(Problem::new(
            "dense_ffn",
            "dense FFN layers need a [dense_ffn] table",
        ));
    }
    if let Some(moe) = &m.moe {
        if moe.routed_experts == 0 {
            p.push(Problem::new("moe.routed_experts", "must be at least 1"));
        }
        if moe.top_k == 0 || moe.top_k > moe.routed_experts {
            p.push(Problem::new(
                "moe.top_k",
                format!(
                    "must lie in 1..={} (the routed experts), got {}",
                    moe.routed_experts, moe.top_k
                ),
            ));
        }
        if moe.expert_ffn == 0 {
            p.push(Problem::new("moe.expert_ffn", "must be at least 1"));
        }
        positive(&mut p, "moe.load_dispersion", moe.load_dispersion);
    }
    positive(
        &mut p,
        "attention.kv_entry_bytes",
        m.attention.kv_entry_bytes,
    );
    if m.attention.heads == 0 {
        p.push(Problem::new("attention.heads", "must be at least 1"));
    }
    if let Some(i) = &m.attention.indexer {
        if i.top_k == 0 {
            p.push(Problem::new(
                "attention.indexer.top_k",
                "must be at least 1",
            ));
        }
        positive(&mut p, "attention.indexer.key_bytes", i.key_bytes);
    }
    positive(&mut p, "kv.bytes_per_token", m.kv.bytes_per_token);
    if let Some(e) = &m.engram {
        let layers = m.layer_count();
        for (i, l) in e.at_layers.iter().enumerate() {
            if *l >= layers {
                p.push(Problem::new(
                    format!("engram.at_layers[{i}]"),
                    format!(
                        "layer {l} does not exist (the model has {layers} layers, 0..{})",
                        layers - 1
                    ),
                ));
            }
        }
        if e.heads_per_order == 0 || e.dim_per_order % e.heads_per_order != 0 {
            p.push(Problem::new(
                "engram.heads_per_order",
                format!("must divide dim_per_order {}", e.dim_per_order),
            ));
        }
        if !e.page_size.0.is_power_of_two() || e.page_size.0 < 4096 {
            p.push(Problem::new(
                "engram.page_size",
                format!(
                    "{} is not a page size (4KiB, 64KiB, 2MiB, 1GiB)",
                    e.page_size
                ),
            ));
        }
    }
    if let Some(mtp) = &m.mtp {
        for (i, a) in mtp.acceptance.iter().enumerate() {
            fraction(&mut p, &format!("mtp.acceptance[{i}]"), *a);
        }
        if (mtp.acceptance.len() as u32) < mtp.draft_tokens {
            p.push(Problem::new(
                "mtp.acceptance",
                format!(
                    "gives {} acceptance rates for {} draft tokens; give one per draft position",
                    mtp.acceptance.len(),
                    mtp.draft_tokens
                ),
            ));
        }
    }
    p
}

/// A DEP group of `layout` on `hw` running `m`, with `batch_per_rank` requests of
/// `tokens_per_request` tokens of KV each (0 = skip the KV check).
pub fn deployment(
    hw: &Hardware,
    m: &Model,
    layout: &Layout,
    batch_per_rank: u64,
    tokens_per_request: u64,
) -> Vec<Problem> {
    let mut p = Vec::new();
    let d = layout.dep;
    if d == 0 {
        p.push(Problem::at(Field::Dep, "DEP size must be at least 1"));
        return p;
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
        let slots = moe.routed_experts + layout.redundant_experts;
        if !slots.is_multiple_of(d) {
            let r = (d - slots % d) % d;
            let e = moe.routed_experts;
            let below = (1..d).rev().find(|x| e % x == 0);
            let above = (d + 1..=e).find(|x| e % x == 0);
            let mut message = Message::default().text(format!(
                "{} routed + {} redundant experts do not divide over {d} ranks; use a DEP that divides {slots}",
                moe.routed_experts, layout.redundant_experts
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
                if layout.redundant_experts > 0 {
                    Field::RedundantExperts
                } else {
                    Field::Dep
                },
                message.text(format!(", or add {r} more redundant experts")),
            ));
        }
        if layout.redundant_experts > 0 && layout.redundant_experts > moe.routed_experts {
            p.push(Problem::at(
                Field::RedundantExperts,
                format!(
                    "{} redundant experts exceed the {} routed experts",
                    layout.redundant_experts, moe.routed_experts
                ),
            ));
        }
    }
    if !p.is_empty() {
        return p;
    }
    let cm = AnalyticCostModel::new(hw.clone(), m.clone(), layout.clone(), Default::default());
    let weights = cm.weight_bytes_per_rank();
    let usable = hw.hbm.usable.as_f64();
    let kv_bytes = cm.kv_bytes_per_rank();
    if kv_bytes <= 0.0 {
        p.push(Problem::at(
            Field::Dep,
            format!(
                "weights need {:.1} GB per rank but {} has {:.1} GB usable (8% kept for activations); use a larger DEP",
                weights / 1e9,
                hw.name,
                usable / 1e9
            ),
        ));
        return p;
    }
    let need = batch_per_rank as f64 * tokens_per_request as f64 * m.kv.bytes_per_token;
    if need > kv_bytes {
        let cap = cm.kv_capacity_tokens_per_rank();
        let max_batch = cap / tokens_per_request.max(1);
        p.push(Problem::at(
            Field::BatchPerRank,
            Message::default()
                .text(format!(
                    "{batch_per_rank} requests x {tokens_per_request} tokens x {} B = {:.1} GB of KV per rank, but only {:.1} GB is left after {:.1} GB of weights; use ",
                    m.kv.bytes_per_token,
                    need / 1e9,
                    kv_bytes / 1e9,
                    weights / 1e9
                ))
                .field(Field::BatchPerRank)
                .text(format!(" {max_batch} or less, a shorter context, or a larger DEP")),
        ));
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gb300_flash() -> (Hardware, Model) {
        let hw = toml::from_str(include_str!("../../scenarios/hardware/gb300.toml")).unwrap();
        let m = toml::from_str(include_str!(
            "../../scenarios/models/deepseek-v4.1-flash.toml"
        ))
        .unwrap();
        (hw, m)
    }

    fn layout(dep: u32, redundant_experts: u32) -> Layout {
        Layout {
            dep,
            redundant_experts,
            overlap_microbatches: true,
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
}
