//! Semantic checks of hardware, models and deployments. Every check returns all its
//! problems at once, each with the field it concerns and what to change. Problems
//! name fields, not command-line flags: the caller names each `Field` in its user's
//! words (`--dep` for `twin forward`, `serving.decode.dep` in a scenario).

use crate::cost::{AnalyticCostModel, Bound, KvCapacity, Layout, Op, StepCost};
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

/// The largest DEP (ranks in one data + expert parallel group) any check accepts:
/// 4096 ranks, ten times the most routed experts of a shipped model (384) and 56 GB300
/// NVL72 racks. Beyond it no expert-parallel group is meaningful; the bound keeps every
/// per-rank allocation and every search for a better DEP small. A scenario's pools, and
/// `--dep`, are checked against it before anything else.
pub const MAX_DEP: u32 = 4096;

/// Plausible range of a datasheet rate (bytes/s or flop/s per GPU): from a slow host
/// link (1 MB/s) to a hundred times the fastest tensor rate shipped (about 1e16 flop/s
/// of FP4). A rate outside it is a typo (`1e-300`, `7e30`) and would price steps at
/// zero or infinity.
pub const RATE_RANGE: (f64, f64) = (1e6, 1e18);

/// A number as a message shows it: plain in the everyday range, else in exponent form
/// (`1e-300`, not three hundred zeros).
pub fn show(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e15).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

fn positive(out: &mut Vec<Problem>, path: &str, v: f64) {
    if !v.is_finite() {
        out.push(Problem::new(path, format!("must be finite, got {v}")));
    } else if v <= 0.0 {
        out.push(Problem::new(
            path,
            format!("must be a positive number, got {}", show(v)),
        ));
    }
}

/// A datasheet rate: positive, finite and within `RATE_RANGE`.
fn rate(out: &mut Vec<Problem>, path: &str, v: f64) {
    let before = out.len();
    positive(out, path, v);
    let (lo, hi) = RATE_RANGE;
    if out.len() == before && !(lo..=hi).contains(&v) {
        out.push(Problem::new(
            path,
            format!(
                "{} per second is outside the plausible range {lo:e}..={hi:e}",
                show(v)
            ),
        ));
    }
}

fn fraction(out: &mut Vec<Problem>, path: &str, v: f64) {
    if !v.is_finite() {
        out.push(Problem::new(path, format!("must be finite, got {v}")));
    } else if !(v > 0.0 && v <= 1.0) {
        out.push(Problem::new(
            path,
            format!("must lie in (0, 1], got {}", show(v)),
        ));
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
    rate(&mut p, "hbm.bytes_per_s", hw.hbm.bytes_per_s);
    rate(
        &mut p,
        "tensor.bf16_flops_per_s",
        hw.tensor.bf16_flops_per_s,
    );
    rate(&mut p, "tensor.fp8_flops_per_s", hw.tensor.fp8_flops_per_s);
    if let Some(f) = hw.tensor.fp4_flops_per_s {
        rate(&mut p, "tensor.fp4_flops_per_s", f);
    }
    rate(&mut p, "nvlink.bytes_per_s", hw.nvlink.bytes_per_s);
    rate(&mut p, "scaleout.bytes_per_s", hw.scaleout.bytes_per_s);
    rate(&mut p, "host.link_bytes_per_s", hw.host.link_bytes_per_s);
    if hw.sms == 0 {
        p.push(Problem::new("sms", "must be at least 1"));
    }
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
        if !v.is_finite() {
            p.push(Problem::new(path, format!("must be finite, got {v}")));
        } else if !(0.0..=1.0).contains(&v) {
            p.push(Problem::new(
                path,
                format!("must be a number of seconds in [0, 1], got {}", show(v)),
            ));
        }
    }
    for (path, v) in [
        ("power_w", hw.power_w),
        (
            "price.hyperscaler_usd_per_gpu_hour",
            hw.price.hyperscaler_usd_per_gpu_hour,
        ),
        (
            "price.neocloud_usd_per_gpu_hour",
            hw.price.neocloud_usd_per_gpu_hour,
        ),
        (
            "price.rental_3yr_usd_per_gpu_hour",
            hw.price.rental_3yr_usd_per_gpu_hour,
        ),
    ] {
        if !v.is_finite() {
            p.push(Problem::new(path, format!("must be finite, got {v}")));
        } else if v < 0.0 {
            p.push(Problem::new(
                path,
                format!("must not be negative, got {}", show(v)),
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

/// Largest layer count a model may have: sixteen times the deepest shipped (61).
pub const MAX_LAYERS: u32 = 1024;

/// Model sizes past which twin refuses a model: each many times the largest shipped
/// model's, small enough that products of sizes (weights, flops, bytes per token) stay
/// exact in 64-bit integers and far from overflow in `f64`.
fn size_limits(m: &Model) -> Vec<(String, u64, u64)> {
    let a = &m.attention;
    let mut v: Vec<(String, u64, u64)> = vec![
        ("hidden".into(), m.hidden as u64, 1 << 20),
        ("vocab".into(), m.vocab as u64, 1 << 24),
        ("attention.heads".into(), a.heads as u64, 1 << 12),
        ("attention.score_dim".into(), a.score_dim as u64, 1 << 16),
        ("attention.value_dim".into(), a.value_dim as u64, 1 << 16),
        (
            "attention.qk_head_dim".into(),
            a.qk_head_dim as u64,
            1 << 16,
        ),
        ("attention.v_head_dim".into(), a.v_head_dim as u64, 1 << 16),
        ("attention.q_lora".into(), a.q_lora as u64, 1 << 20),
        ("attention.kv_dim".into(), a.kv_dim as u64, 1 << 20),
        ("attention.kv_up_params".into(), a.kv_up_params, 1 << 40),
        (
            "attention.o_lora".into(),
            a.o_lora.unwrap_or(0) as u64,
            1 << 20,
        ),
        ("attention.window".into(), a.window as u64, 1 << 24),
    ];
    if let Some(i) = &a.indexer {
        v.push(("attention.indexer.heads".into(), i.heads as u64, 1 << 12));
        v.push((
            "attention.indexer.head_dim".into(),
            i.head_dim as u64,
            1 << 16,
        ));
        v.push(("attention.indexer.top_k".into(), i.top_k as u64, 1 << 24));
    }
    for (i, g) in m.layers.iter().enumerate() {
        v.push((
            format!("layers[{i}].compress_ratio"),
            g.compress_ratio as u64,
            1 << 20,
        ));
    }
    if let Some(moe) = &m.moe {
        v.push((
            "moe.routed_experts".into(),
            moe.routed_experts as u64,
            1 << 16,
        ));
        v.push((
            "moe.shared_experts".into(),
            moe.shared_experts as u64,
            1 << 10,
        ));
        v.push(("moe.expert_ffn".into(), moe.expert_ffn as u64, 1 << 20));
        v.push(("moe.scale_block".into(), moe.scale_block as u64, 1 << 20));
    }
    if let Some(d) = &m.dense_ffn {
        v.push(("dense_ffn.ffn".into(), d.ffn as u64, 1 << 22));
    }
    if let Some(e) = &m.engram {
        v.push(("engram.orders".into(), e.orders.len() as u64, 64));
        v.push((
            "engram.heads_per_order".into(),
            e.heads_per_order as u64,
            1 << 12,
        ));
        v.push((
            "engram.dim_per_order".into(),
            e.dim_per_order as u64,
            1 << 20,
        ));
        v.push(("engram.rows_per_table".into(), e.rows_per_table, 1 << 40));
    }
    if let Some(x) = &m.mhc {
        v.push(("mhc.streams".into(), x.streams as u64, 64));
    }
    if let Some(t) = &m.mtp {
        v.push(("mtp.draft_tokens".into(), t.draft_tokens as u64, 16));
    }
    v
}

pub fn model(m: &Model) -> Vec<Problem> {
    let mut p = Vec::new();
    if m.hidden == 0 {
        p.push(Problem::new("hidden", "must be at least 1"));
    }
    for (path, v, max) in size_limits(m) {
        if v > max {
            p.push(Problem::new(
                path,
                format!("{v} is larger than the {max} twin models"),
            ));
        }
    }
    let layers: u64 = m.layers.iter().map(|g| g.count as u64).sum();
    if layers > MAX_LAYERS as u64 {
        p.push(Problem::new(
            "layers",
            format!("{layers} layers in all; twin models at most {MAX_LAYERS}"),
        ));
    }
    if !p.is_empty() {
        // Sizes out of range: the checks below would expand or multiply them.
        return p;
    }
    if m.layers.is_empty() || m.layer_count() == 0 {
        p.push(Problem::new("layers", "the model needs at least one layer"));
    }
    // The cost model prices layers by kind: a bounded number of distinct kinds.
    let (mut classes, mut kinds) = (Vec::new(), Vec::new());
    for l in m.expand_layers() {
        let class = (
            l.attention,
            l.compress_ratio,
            l.has_indexer,
            l.window_branch,
        );
        if !classes.contains(&class) {
            classes.push(class);
        }
        if !kinds.contains(&(class, l.ffn)) {
            kinds.push((class, l.ffn));
        }
    }
    let (max_c, max_k) = (
        crate::cost::analytic::MAX_CLASSES,
        crate::cost::analytic::MAX_TYPES,
    );
    if classes.len() > max_c || kinds.len() > max_k {
        p.push(Problem::new(
            "layers",
            format!(
                "{} attention kinds and {} layer kinds; the cost model prices at most {max_c} and {max_k}",
                classes.len(),
                kinds.len()
            ),
        ));
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
        if !(moe.expert_load_cv.is_finite() && moe.expert_load_cv >= 0.0) {
            p.push(Problem::new(
                "moe.expert_load_cv",
                "must be a finite number >= 0",
            ));
        }
        if moe.groups == 0 || moe.topk_groups == 0 || moe.topk_groups > moe.groups {
            p.push(Problem::new(
                "moe.topk_groups",
                "groups and topk_groups must be at least 1, topk_groups at most groups",
            ));
        } else if moe.routed_experts % moe.groups != 0 {
            p.push(Problem::new("moe.groups", "must divide moe.routed_experts"));
        }
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
        let head = format!(
            "{batch_per_rank} requests x {tokens_per_request} tokens x {} B = {:.1} GB of KV per rank, but only {:.1} GB is left after {:.1} GB of weights; ",
            m.kv.bytes_per_token,
            need / 1e9,
            kv_bytes / 1e9,
            weights / 1e9
        );
        let message = if max_batch >= 1 {
            Message::default()
                .text(format!("{head}use "))
                .field(Field::BatchPerRank)
                .text(format!(
                    " {max_batch} or less, a shorter context, or a larger DEP"
                ))
        } else {
            // Not even one request fits: a smaller batch cannot help.
            let larger = larger_dep_holding(hw, m, layout, tokens_per_request);
            let tail = match larger {
                Some(dep) => Message::default()
                    .text(", or ")
                    .field(Field::Dep)
                    .text(format!(" {dep}")),
                None => Message::default().text(format!(
                    "; no larger DEP (up to {}) holds one such request",
                    dep_ceiling(hw)
                )),
            };
            let mut msg = Message::default().text(format!(
                "{head}not even one request fits: use requests of at most {cap} tokens (context + new tokens)"
            ));
            msg.0.extend(tail.0);
            msg
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
        let hw = toml::from_str(include_str!("../../scenarios/hardware/gb300.toml")).unwrap();
        let m = toml::from_str(include_str!(
            "../../scenarios/models/deepseek-v4.1-flash.toml"
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
