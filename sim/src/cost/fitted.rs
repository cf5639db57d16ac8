//! A cost model fitted from measurements of the live engine's own ops: the second
//! implementation of [`CostModel`] ("empirical models are just another
//! implementation").
//!
//! The live engine (`engine::serve`) runs a step as a fixed sequence of op calls per
//! layer, written once as [`spec::call::forward_pass`]; [`LiveModelExt::step_calls`]
//! lists it for a [`StepShape`], and each call is priced by a cost function fitted per
//! op and static key (widths and dtypes the model fixes) over the call's variables
//! (rows, expert groups, positions read, bytes exchanged): `t = c0 + c1 * var1 + c2 *
//! var2 + ...`. The coefficients come from a calibration profile of the device
//! measured by `twin calibrate --plan live` (independently of any run); this module
//! only takes them as data.
//!
//! A step with both prefill and decode rows is priced as the two passes the engine
//! runs. A DEP step costs its slowest rank.

use super::{clamped_positions, CostModel, KvCapacity, Layout, Op, Phase, StepCost, StepShape};
use spec::call::{forward_pass, Call, CallKey, Part, Pass, Positions};
use spec::live_model::{AttnKind, IndexerConfig, LayerConfig, LinearDtype, LiveModel, MoeConfig};
use spec::model::{AttentionKind, FfnKind, Model};
use std::collections::HashMap;

/// The simulator's side of the live model (defined in `spec`, which knows no model
/// files and no step shapes): its conversion from a model file, and a step's calls.
pub trait LiveModelExt: Sized {
    /// The model file as the live engine runs it: compressed attention, Engram and mHC
    /// are refused (the engine has no kernels for them); every linear layer takes the
    /// routed experts' weight format (the attention's without MoE); the MTP block is a
    /// dense SwiGLU of the dense FFN width, else the expert width.
    fn from_model(m: &Model, page: usize) -> Result<Self, Vec<String>>;

    /// The calls rank `rank` runs for one forward pass of `shape` on a DEP group of
    /// `shape.ranks.len()` ranks, each with its breakdown category.
    fn step_calls(&self, shape: &StepShape<'_>, rank: usize) -> Vec<(Op, Call)>;

    /// Every distinct static key a run on `dep` ranks with `drafts` MTP drafts prices:
    /// what a profile must hold.
    fn required_keys(&self, dep: usize, drafts: u32) -> Vec<CallKey>;
}

impl LiveModelExt for LiveModel {
    fn from_model(m: &Model, page: usize) -> Result<LiveModel, Vec<String>> {
        let mut p = Vec::new();
        if m.engram.is_some() {
            p.push("engram: the live engine has no Engram tables".to_string());
        }
        if m.mhc.is_some() {
            p.push("mhc: the live engine has no hyper-connections".to_string());
        }
        let layers = live_layers(m, &mut p);
        let weight_dtype = linear_dtype(m, &mut p);
        let dense_ffn = m.dense_ffn.as_ref().map_or(0, |d| d.ffn as usize);
        let moe = m.moe.as_ref().map(|x| MoeConfig {
            experts: x.routed_experts as usize,
            top_k: x.top_k as usize,
            expert_ffn: x.expert_ffn as usize,
            shared_ffn: (x.shared_experts * x.expert_ffn) as usize,
        });
        let mtp_ffn = match (&m.mtp, dense_ffn, moe) {
            (None, _, _) => 0,
            (Some(_), f, _) if f > 0 => f,
            (Some(_), _, Some(x)) => x.expert_ffn,
            (Some(_), _, None) => 0,
        };
        if !p.is_empty() {
            return Err(p);
        }
        Ok(LiveModel {
            name: m.name.clone(),
            hidden: m.hidden as usize,
            vocab: m.vocab as usize,
            heads: m.attention.heads as usize,
            latent: m.attention.kv_dim as usize,
            window: m.attention.window as usize,
            indexer: m.attention.indexer.as_ref().map(|i| IndexerConfig {
                heads: i.heads as usize,
                dim: i.head_dim as usize,
                topk: i.top_k as usize,
            }),
            layers,
            moe,
            dense_ffn,
            mtp_ffn,
            weight_dtype,
            page_size: page,
        })
    }

    fn step_calls(&self, shape: &StepShape<'_>, rank: usize) -> Vec<(Op, Call)> {
        let decode = shape.phase == Phase::Decode;
        let drafts = if decode { shape.draft_tokens } else { 0 };
        let rr = rank_rows(self, &shape.ranks[rank], decode, drafts);
        let pass = Pass {
            decode,
            drafts,
            rows: rr.rows,
            sequences: shape.ranks[rank].iter().map(|s| s.count as u64).sum(),
            positions: rr.positions,
            ranks: shape.ranks.len().max(1),
            group_rows: shape
                .ranks
                .iter()
                .map(|s| rank_rows(self, s, decode, drafts).rows)
                .sum(),
        };
        forward_pass(self, &pass)
            .into_iter()
            .map(|(part, c)| (op_of(part), c))
            .collect()
    }

    fn required_keys(&self, dep: usize, drafts: u32) -> Vec<CallKey> {
        let mut keys: Vec<CallKey> = probe_calls(self, dep, drafts)
            .iter()
            .map(Call::static_key)
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

/// The live layers of `m`, with a problem for each the live engine cannot run.
fn live_layers(m: &Model, p: &mut Vec<String>) -> Vec<LayerConfig> {
    let mut layers = Vec::new();
    for l in m.expand_layers() {
        let attention = match l.attention {
            AttentionKind::Dense => AttnKind::Dense,
            AttentionKind::Sparse => AttnKind::Sparse,
            AttentionKind::Window => AttnKind::Window,
            other => {
                p.push(format!(
                    "layer {}: {} attention is not supported by the live engine",
                    l.index,
                    match other {
                        AttentionKind::Compressed => "compressed",
                        AttentionKind::Chunked => "chunked",
                        AttentionKind::Linear => "linear",
                        AttentionKind::Mamba => "mamba",
                        _ => "no",
                    }
                ));
                AttnKind::Dense
            }
        };
        if l.ffn == FfnKind::None {
            p.push(format!(
                "layer {}: a layer without an FFN is not supported by the live engine",
                l.index
            ));
        }
        if l.compress_ratio != 1 {
            p.push(format!(
                "layer {}: compress_ratio {} (the live engine caches every token)",
                l.index, l.compress_ratio
            ));
        }
        layers.push(LayerConfig {
            attention,
            window_branch: l.window_branch && l.attention != AttentionKind::Window,
            has_indexer: l.has_indexer,
            moe: l.ffn == FfnKind::Moe,
        });
    }
    layers
}

/// The linear layers' weight format: the routed experts' (the attention's without MoE).
fn linear_dtype(m: &Model, p: &mut Vec<String>) -> LinearDtype {
    let dt = m
        .moe
        .as_ref()
        .map_or(m.attention.weight_dtype, |x| x.weight_dtype);
    match dt.name() {
        "bf16" => LinearDtype::Bf16,
        "fp8" => LinearDtype::Fp8,
        other => {
            p.push(format!(
                "weight dtype {other}: the live engine's linear kernels take bf16 or fp8"
            ));
            LinearDtype::Bf16
        }
    }
}

/// The breakdown category of a part of the forward pass.
fn op_of(part: Part) -> Op {
    match part {
        Part::Dense => Op::Dense,
        Part::Attention => Op::Attention,
        Part::Indexer => Op::Indexer,
        Part::Moe => Op::Moe,
        Part::SharedExpert => Op::SharedExpert,
        Part::Communication => Op::Communication,
        Part::MtpDraft => Op::MtpDraft,
    }
}

/// Query rows of a rank and the cached positions they see.
#[derive(Debug, Clone, Copy, Default)]
struct RankRows {
    rows: u64,
    positions: Positions,
}

fn rank_rows(lm: &LiveModel, slices: &[super::ReqSlice], decode: bool, drafts: u32) -> RankRows {
    let topk = lm.indexer.map_or(u64::MAX, |i| i.topk as u64);
    let w = if lm.window > 0 {
        lm.window as u64
    } else {
        u64::MAX
    };
    let mut r = RankRows::default();
    for s in slices {
        let new = if decode {
            1 + drafts as u64
        } else {
            s.new_tokens as u64
        };
        let m = s.count as u64;
        let c = s.context_tokens;
        r.rows += m * new;
        r.positions.dense += m * clamped_positions(new, c, u64::MAX) as u64;
        r.positions.sparse += m * clamped_positions(new, c, topk) as u64;
        r.positions.window += m * clamped_positions(new, c, w) as u64;
    }
    r
}

/// The calls of a one-request prefill and a one-request decode step with `drafts`
/// drafts on rank 0 of `dep`: every static key a run prices, in the order first priced.
fn probe_calls(lm: &LiveModel, dep: usize, drafts: u32) -> Vec<Call> {
    let ranks = vec![vec![super::ReqSlice::one(2, 1)]; dep.max(1)];
    let mut calls = Vec::new();
    for (phase, d) in [(Phase::Prefill, 0), (Phase::Decode, drafts)] {
        let shape = StepShape {
            phase,
            ranks: &ranks,
            decode_ranks: &[],
            draft_tokens: d,
        };
        calls.extend(lm.step_calls(&shape, 0).into_iter().map(|(_, c)| c));
    }
    calls
}

/// Coefficients of one fitted function: seconds for the constant and per unit of each
/// variable, in the call's variable order.
pub type Coefficients = Vec<f64>;

/// A device's wake-up after idling, as calibration measures it: a step that starts
/// after `idle_s` seconds idle takes `max_s * (1 - exp(-idle_s / tau_s))` longer
/// (caches refilled, clocks and threads back to speed; 0 back to back).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Wake {
    pub max_s: f64,
    pub tau_s: f64,
}

impl Wake {
    pub fn after(&self, idle_s: f64) -> f64 {
        if !(idle_s > 0.0 && self.tau_s > 0.0) {
            return 0.0;
        }
        self.max_s * -(-idle_s / self.tau_s).exp_m1()
    }
}

/// The fitted cost model of one pool's layout.
#[derive(Debug, Clone)]
pub struct FittedCostModel {
    model: LiveModel,
    layout: Layout,
    fits: HashMap<CallKey, Coefficients>,
    kv_capacity_tokens_per_rank: u64,
    source: String,
    wake: Option<Wake>,
}

impl FittedCostModel {
    /// Builds the model; every static key the run needs (`required_keys`) must have
    /// coefficients of the right length, else the error lists each missing one.
    pub fn new(
        model: LiveModel,
        layout: Layout,
        draft_tokens: u32,
        fits: HashMap<CallKey, Coefficients>,
        kv_capacity_tokens_per_rank: u64,
        source: String,
    ) -> Result<FittedCostModel, Vec<String>> {
        let mut missing = Vec::new();
        let probe = probe_calls(&model, layout.dep as usize, draft_tokens);
        let mut seen = std::collections::BTreeSet::new();
        for c in probe {
            let k = c.static_key();
            if !seen.insert(k.clone()) {
                continue;
            }
            match fits.get(&k) {
                None => missing.push(format!("{k} (no fit)")),
                Some(coef)
                    if coef.len() != 1 + c.vars.len()
                        || coef.iter().any(|x| !x.is_finite() || *x < 0.0) =>
                {
                    missing.push(format!(
                        "{k} (coefficients do not match its {} variables)",
                        c.vars.len()
                    ))
                }
                _ => {}
            }
        }
        if !missing.is_empty() {
            return Err(missing);
        }
        Ok(FittedCostModel {
            model,
            layout,
            fits,
            kv_capacity_tokens_per_rank,
            source,
            wake: None,
        })
    }

    /// The device's measured wake-up after idling (none: steps cost the same after idle).
    pub fn with_wake(mut self, wake: Option<Wake>) -> Self {
        self.wake = wake;
        self
    }

    pub fn live_model(&self) -> &LiveModel {
        &self.model
    }

    /// Seconds of one call (0 for a key without a fit: `new` rejects those).
    pub fn price(&self, c: &Call) -> f64 {
        self.fits.get(&c.static_key()).map_or(0.0, |coef| {
            coef.iter().zip(c.features()).map(|(a, x)| a * x).sum()
        })
    }
}

impl CostModel for FittedCostModel {
    fn wake_s(&self, idle_s: f64) -> f64 {
        self.wake.map_or(0.0, |w| w.after(idle_s))
    }

    /// A mixed step is twin's live engine's two passes, its prefill pass then its
    /// decode pass (`live::compare::price_step` times them so).
    fn step(&self, shape: &StepShape<'_>) -> StepCost {
        if shape.is_mixed() {
            return super::two_passes(self, shape);
        }
        let mut best = StepCost::default();
        let mut op_s_mean = [0.0f64; super::OPS];
        let dep = shape.ranks.len().max(1);
        let mut tokens = 0u64;
        for r in 0..dep {
            let mut cost = StepCost::default();
            for (op, c) in self.model.step_calls(shape, r) {
                let t = self.price(&c);
                cost.step_s += t;
                cost.op_s[op.index()] += t;
            }
            tokens += shape.ranks[r]
                .iter()
                .map(|s| {
                    s.count as u64
                        * if shape.phase == Phase::Decode {
                            1
                        } else {
                            s.new_tokens as u64
                        }
                })
                .sum::<u64>();
            for (a, b) in op_s_mean.iter_mut().zip(cost.op_s.iter()) {
                *a += b / dep as f64;
            }
            if cost.step_s >= best.step_s {
                best = cost;
            }
        }
        best.balanced_step_s = op_s_mean.iter().sum::<f64>().min(best.step_s);
        best.tokens_processed = tokens;
        best
    }

    fn describe(&self) -> String {
        self.source.clone()
    }

    fn decode_context_breakpoints(&self, draft_tokens: u32) -> Vec<u64> {
        let mut v = Vec::new();
        for cap in [
            self.model.indexer.map(|i| i.topk),
            (self.model.window > 0).then_some(self.model.window),
        ]
        .into_iter()
        .flatten()
        {
            v.push((cap as u64).saturating_sub(1 + draft_tokens as u64));
            v.push(cap as u64);
        }
        v.retain(|&b| b > 0);
        v.sort_unstable();
        v.dedup();
        v
    }
}

impl KvCapacity for FittedCostModel {
    fn kv_capacity_tokens_per_rank(&self) -> u64 {
        self.kv_capacity_tokens_per_rank
    }
}

impl FittedCostModel {
    /// The layout this model prices.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
}
