//! Semantic checks of hardware, models and deployments. Every check returns all its
//! problems at once, each with the field it concerns and what to change. Problems
//! name fields, not command-line flags: the caller names each `Field` in its user's
//! words (`--dep` for `twin forward`, `serving.decode.dep` in a scenario).

use spec::model::{AttentionKind, Engram, FfnKind, LayerGroup, Moe, Mtp};
use spec::{hardware::Hardware, model::Model};

mod deployment;

pub use deployment::{deployment, non_finite_step, MAX_DEP, MAX_TP};
use spec::problem::{Field, Message, Problem};

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
    latency_problems(&mut p, hw);
    nonnegative_problems(&mut p, hw);
    kernels_from(&mut p, hw);
    cost_problems(&mut p, hw);
    p
}

/// Link latencies and the TLB miss time: finite seconds in [0, 1].
fn latency_problems(p: &mut Vec<Problem>, hw: &Hardware) {
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
}

/// Power and prices: finite and not negative.
fn nonnegative_problems(p: &mut Vec<Problem>, hw: &Hardware) {
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
}

/// The `[cost]` table: every parameter known and in range, and its spread.
fn cost_problems(p: &mut Vec<Problem>, hw: &Hardware) {
    let mut params = crate::cost::CostParams::default();
    for (k, v) in &hw.cost {
        if let Err(e) = params.set(k, *v) {
            p.push(Problem::new(format!("cost.{k}"), e.to_string()));
        }
    }
    if let Some(t) = &hw.cost.spread {
        if let Err(e) = crate::cost::Spread::from_table(t) {
            p.push(Problem::new("cost.spread", e.to_string()));
        }
    }
}

/// `kernels_from`, when given: the name of another hardware (whether it exists, and
/// that it does not carry in turn, is the loader's check).
fn kernels_from(p: &mut Vec<Problem>, hw: &Hardware) {
    if let Some(src) = &hw.kernels_from {
        if src.trim().is_empty() {
            p.push(Problem::new(
                "kernels_from",
                "must name a hardware whose kernel fits to carry (e.g. \"h100\"), or be left out",
            ));
        } else if *src == hw.name {
            p.push(Problem::new(
                "kernels_from",
                format!(
                    "names this hardware itself (`{}`); a hardware cannot carry kernel fits from itself",
                    hw.name
                ),
            ));
        }
    }
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
    component_size_limits(m, &mut v);
    state_size_limits(m, &mut v);
    v
}

/// Sizes of the MoE and dense FFN tables, the Engram, the mHC streams and MTP.
fn component_size_limits(m: &Model, v: &mut Vec<(String, u64, u64)>) {
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
}

/// Sizes of the recurrent mixers, the chunk, the groups' own shapes and widths.
fn state_size_limits(m: &Model, v: &mut Vec<(String, u64, u64)>) {
    v.push(("attention.chunk".into(), m.attention.chunk as u64, 1 << 24));
    v.push((
        "attention.o_groups".into(),
        m.attention.o_groups.unwrap_or(1) as u64,
        1 << 12,
    ));
    v.push((
        "mtp.modules".into(),
        m.mtp.as_ref().map_or(1, |t| t.modules) as u64,
        64,
    ));
    if let Some(l) = &m.linear_attention {
        for (k, x) in [
            ("key_heads", l.key_heads),
            ("value_heads", l.value_heads),
            ("key_dim", l.key_dim),
            ("value_dim", l.value_dim),
            ("conv_kernel", l.conv_kernel),
            ("chunk", l.chunk),
        ] {
            v.push((format!("linear_attention.{k}"), x as u64, 1 << 12));
        }
    }
    if let Some(x) = &m.mamba {
        for (k, n) in [
            ("heads", x.heads),
            ("head_dim", x.head_dim),
            ("state_size", x.state_size),
            ("groups", x.groups),
            ("conv_kernel", x.conv_kernel),
            ("chunk", x.chunk),
        ] {
            v.push((format!("mamba.{k}"), n as u64, 1 << 12));
        }
    }
    if let Some(moe) = &m.moe {
        v.push((
            "moe.shared_ffn".into(),
            moe.shared_ffn.unwrap_or(0) as u64,
            1 << 22,
        ));
        v.push(("moe.latent".into(), moe.latent.unwrap_or(0) as u64, 1 << 20));
    }
    for (i, g) in m.layers.iter().enumerate() {
        v.push((
            format!("layers[{i}].ffn_width"),
            g.ffn_width.unwrap_or(0) as u64,
            1 << 22,
        ));
        if let Some(s) = &g.attention_shape {
            for (k, x, max) in [
                ("heads", s.heads, 1 << 12),
                ("kv_heads", s.kv_heads, 1 << 12),
                ("qk_head_dim", s.qk_head_dim, 1 << 16),
                ("v_head_dim", s.v_head_dim, 1 << 16),
                ("kv_dim", s.kv_dim, 1 << 20),
            ] {
                v.push((format!("layers[{i}].attention_shape.{k}"), x as u64, max));
            }
        }
    }
}

pub fn model(m: &Model) -> Vec<Problem> {
    let mut p = Vec::new();
    size_problems(m, &mut p);
    if !p.is_empty() {
        // Sizes out of range: the checks below would expand or multiply them.
        return p;
    }
    layer_problems(m, &mut p);
    if let Some(moe) = &m.moe {
        moe_problems(moe, &mut p);
    }
    attention_problems(m, &mut p);
    if let Some(e) = &m.engram {
        engram_problems(e, m.layer_count(), &mut p);
    }
    if let Some(mtp) = &m.mtp {
        mtp_problems(mtp, &mut p);
    }
    p
}

/// The model's sizes against `size_limits` and `MAX_LAYERS`.
fn size_problems(m: &Model, p: &mut Vec<Problem>) {
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
}

/// The layer schedule: layers present, kinds the cost model prices, each group's
/// settings, and the FFN tables its layers need.
fn layer_problems(m: &Model, p: &mut Vec<Problem>) {
    if m.layers.is_empty() || m.layer_count() == 0 {
        p.push(Problem::new("layers", "the model needs at least one layer"));
    }
    // The cost model prices layers by kind: a bounded number of distinct kinds (a
    // group with its own attention shape or FFN width is a kind of its own).
    let (classes, kinds) = kind_counts(m);
    let (max_c, max_k) = (
        crate::cost::analytic::MAX_CLASSES,
        crate::cost::analytic::MAX_TYPES,
    );
    if classes > max_c || kinds > max_k {
        p.push(Problem::new(
            "layers",
            format!(
                "{classes} attention kinds and {kinds} layer kinds; the cost model prices at most {max_c} and {max_k}"
            ),
        ));
    }
    let has_moe_layers = m.layers.iter().any(|g| g.ffn == FfnKind::Moe);
    let has_dense_layers = m.layers.iter().any(|g| g.ffn == FfnKind::Dense);
    for (i, g) in m.layers.iter().enumerate() {
        group_problems(m, i, g, p);
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
    let has = |k: AttentionKind| m.layers.iter().any(|g| g.attention == k);
    if has(AttentionKind::Linear) && m.linear_attention.is_none() {
        p.push(Problem::new(
            "linear_attention",
            "linear layers need a [linear_attention] table",
        ));
    }
    if has(AttentionKind::Mamba) && m.mamba.is_none() {
        p.push(Problem::new("mamba", "mamba layers need a [mamba] table"));
    }
    if has(AttentionKind::Chunked) && m.attention.chunk == 0 {
        p.push(Problem::new(
            "attention.chunk",
            "chunked layers need attention.chunk > 0 (tokens per chunk)",
        ));
    }
    if !m.layers.iter().any(|g| g.attention.caches_every_token()) {
        p.push(Problem::new(
            "layers",
            "no layer caches every token (dense, sparse or compressed attention): twin sizes the KV cache by them",
        ));
    }
    state_problems(m, p);
}

/// How many distinct attention classes and layer kinds (class and FFN) `m` has.
fn kind_counts(m: &Model) -> (usize, usize) {
    let (mut classes, mut kinds) = (Vec::new(), Vec::new());
    for l in m.expand_layers() {
        let g = &m.layers[l.group as usize];
        let class = (
            l.attention,
            l.compress_ratio,
            l.has_indexer,
            l.window_branch,
            g.attention_shape.as_ref().map(|s| {
                (
                    s.heads,
                    s.kv_heads,
                    s.qk_head_dim,
                    s.v_head_dim,
                    s.kv_dim,
                    s.kv_entry_bytes.to_bits(),
                )
            }),
        );
        if !classes.contains(&class) {
            classes.push(class);
        }
        let ffn = (
            l.ffn,
            if l.ffn == FfnKind::Dense {
                m.ffn_width_of(g)
            } else {
                0
            },
        );
        if !kinds.contains(&(class, ffn)) {
            kinds.push((class, ffn));
        }
    }
    (classes.len(), kinds.len())
}

/// The recurrent mixers' tables: every width at least 1.
fn state_problems(m: &Model, p: &mut Vec<Problem>) {
    if let Some(l) = &m.linear_attention {
        for (k, x) in [
            ("key_heads", l.key_heads),
            ("value_heads", l.value_heads),
            ("key_dim", l.key_dim),
            ("value_dim", l.value_dim),
            ("chunk", l.chunk),
        ] {
            if x == 0 {
                p.push(Problem::new(
                    format!("linear_attention.{k}"),
                    "must be at least 1",
                ));
            }
        }
    }
    if let Some(x) = &m.mamba {
        for (k, n) in [
            ("heads", x.heads),
            ("head_dim", x.head_dim),
            ("state_size", x.state_size),
            ("groups", x.groups),
            ("chunk", x.chunk),
        ] {
            if n == 0 {
                p.push(Problem::new(format!("mamba.{k}"), "must be at least 1"));
            }
        }
    }
}

/// Layer group `i` of `m`'s schedule.
fn group_problems(m: &Model, i: usize, g: &LayerGroup, p: &mut Vec<Problem>) {
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
    if let Some(s) = &g.attention_shape {
        let gqa = matches!(
            g.attention,
            AttentionKind::Dense | AttentionKind::Window | AttentionKind::Chunked
        );
        if !gqa || m.attention.kv_up_params > 0 || g.window_branch {
            p.push(Problem::new(
                format!("layers[{i}].attention_shape"),
                "a group's own attention shape is grouped-query attention (dense, window or chunked layers of a model without MLA, no window branch)",
            ));
        }
        if s.heads == 0 || s.kv_heads == 0 || !s.heads.is_multiple_of(s.kv_heads) {
            p.push(Problem::new(
                format!("layers[{i}].attention_shape.kv_heads"),
                format!("must be at least 1 and divide heads {}", s.heads),
            ));
        }
        positive(
            p,
            &format!("layers[{i}].attention_shape.kv_entry_bytes"),
            s.kv_entry_bytes,
        );
    }
    if g.ffn_width.is_some() && g.ffn != FfnKind::Dense {
        p.push(Problem::new(
            format!("layers[{i}].ffn_width"),
            "only dense FFN layers have a width of their own",
        ));
    }
    if g.ffn_width == Some(0) {
        p.push(Problem::new(
            format!("layers[{i}].ffn_width"),
            "must be at least 1",
        ));
    }
}

/// The `[moe]` table.
fn moe_problems(moe: &Moe, p: &mut Vec<Problem>) {
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
    } else if !moe.routed_experts.is_multiple_of(moe.groups) {
        p.push(Problem::new("moe.groups", "must divide moe.routed_experts"));
    }
}

/// Attention, its indexer and the KV entry sizes.
fn attention_problems(m: &Model, p: &mut Vec<Problem>) {
    positive(p, "attention.kv_entry_bytes", m.attention.kv_entry_bytes);
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
        positive(p, "attention.indexer.key_bytes", i.key_bytes);
    }
    positive(p, "kv.bytes_per_token", m.kv.bytes_per_token);
}

/// The `[engram]` table of a model with `layers` layers.
fn engram_problems(e: &Engram, layers: u32, p: &mut Vec<Problem>) {
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
    if e.heads_per_order == 0 || !e.dim_per_order.is_multiple_of(e.heads_per_order) {
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

/// The `[mtp]` table.
fn mtp_problems(mtp: &Mtp, p: &mut Vec<Problem>) {
    for (i, a) in mtp.acceptance.iter().enumerate() {
        fraction(p, &format!("mtp.acceptance[{i}]"), *a);
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

#[cfg(test)]
mod hardware_tests {
    use super::*;

    fn h100() -> Hardware {
        toml::from_str(include_str!("../../scenarios/hardware/h100.toml")).unwrap()
    }

    fn kernels_from_problems(hw: &Hardware) -> Vec<String> {
        hardware(hw)
            .iter()
            .filter(|p| p.field == Field::Path("kernels_from".into()))
            .map(|p| p.message.render(&|f| f.to_string()))
            .collect()
    }

    #[test]
    fn kernels_from_must_name_another_hardware() {
        let mut hw = h100();
        assert!(kernels_from_problems(&hw).is_empty());
        hw.kernels_from = Some("h200".into());
        assert!(kernels_from_problems(&hw).is_empty());
        hw.kernels_from = Some("h100".into());
        let p = kernels_from_problems(&hw);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("cannot carry kernel fits from itself"),
            "{p:?}"
        );
        hw.kernels_from = Some("  ".into());
        let p = kernels_from_problems(&hw);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("must name a hardware"), "{p:?}");
    }
}
