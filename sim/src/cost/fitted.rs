//! A cost model fitted from measurements of the live engine's own ops: the second
//! implementation of [`CostModel`] ("empirical models are just another
//! implementation").
//!
//! The live engine (`engine::serve`) runs a step as a fixed sequence of op calls per
//! layer; [`LiveModel::step_calls`] composes the same sequence for a [`StepShape`], and
//! each call is priced by a cost function fitted per op and static key (widths and
//! dtypes the model fixes) over the call's variables (rows, expert groups, positions
//! read, bytes exchanged): `t = c0 + c1 * var1 + c2 * var2 + ...`. The coefficients
//! come from a calibration profile of the device measured by `twin calibrate --plan
//! live` (independently of any run); this module only takes them as data.
//!
//! Composition, per rank and forward pass of `n` rows (prefill rows are the chunks'
//! tokens; decode rows are `1 + drafts` per request; a step with both is priced as the
//! two passes the engine runs), mirroring `engine::serve::exec`:
//! - embedding gather;
//! - per layer: RMSNorm (with the residual add after the first layer), query and latent
//!   projections, KV write; with an indexer, its three projections, its key write and
//!   the paged indexer; the attention (dense, sparse top-k, window), a window branch and
//!   an add when declared; the output projection; RMSNorm with the residual; the FFN:
//!   dense SwiGLU, or the gate, top-k, (one rank) a row gather and the expert SwiGLU over
//!   the touched experts, (several ranks) two exchanges around the rank's experts over
//!   the rows it receives, the shared experts and the combine;
//! - decode: final RMSNorm, LM head and argmax for every row, then per MTP draft pass:
//!   two RMSNorms, an add, the projection, a SwiGLU block, an RMSNorm, the LM head, the
//!   argmax and the next embedding gather.
//!
//! With routing uniform over experts (random weights route near-uniformly), a pass
//! touches `E (1 - (1 - k/E)^n)` experts in expectation; the rows a rank receives are
//! its share of all rows' choices. A DEP step costs its slowest rank.

use super::{clamped_positions, CostModel, KvCapacity, Layout, Op, Phase, StepCost, StepShape};
use crate::model::{AttentionKind, FfnKind, Model};
use std::collections::HashMap;

/// How a layer attends (the live engine's three modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveAttn {
    Dense,
    Sparse,
    Window,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveLayer {
    pub attention: LiveAttn,
    pub window_branch: bool,
    pub has_indexer: bool,
    pub moe: bool,
}

/// The live engine's view of a model file: every width its ops run at.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveModel {
    pub name: String,
    pub hidden: usize,
    pub vocab: usize,
    pub heads: usize,
    /// Width of the cached latent entry (`attention.kv_dim`).
    pub latent: usize,
    pub window: usize,
    /// Indexer (heads, head width, top-k).
    pub indexer: Option<(usize, usize, usize)>,
    pub layers: Vec<LiveLayer>,
    /// Routed experts (count, top-k, expert FFN width, total shared-expert width).
    pub moe: Option<(usize, usize, usize, usize)>,
    pub dense_ffn: usize,
    /// FFN width of the MTP block (0 = no draft head).
    pub mtp_ffn: usize,
    /// Weight format of every linear layer (`bf16` or `fp8`).
    pub dtype: &'static str,
    /// KV cache page, tokens.
    pub page: usize,
}

impl LiveModel {
    /// The model file as the live engine runs it: compressed attention, Engram and mHC
    /// are refused (the engine has no kernels for them); every linear layer takes the
    /// routed experts' weight format (the attention's without MoE); the MTP block is a
    /// dense SwiGLU of the dense FFN width, else the expert width.
    pub fn from_model(m: &Model, page: usize) -> Result<LiveModel, Vec<String>> {
        let mut p = Vec::new();
        if m.engram.is_some() {
            p.push("engram: the live engine has no Engram tables".to_string());
        }
        if m.mhc.is_some() {
            p.push("mhc: the live engine has no hyper-connections".to_string());
        }
        let mut layers = Vec::new();
        for l in m.expand_layers() {
            let attention = match l.attention {
                AttentionKind::Dense => LiveAttn::Dense,
                AttentionKind::Sparse => LiveAttn::Sparse,
                AttentionKind::Window => LiveAttn::Window,
                AttentionKind::Compressed => {
                    p.push(format!(
                        "layer {}: compressed attention is not supported by the live engine",
                        l.index
                    ));
                    LiveAttn::Dense
                }
            };
            if l.compress_ratio != 1 {
                p.push(format!(
                    "layer {}: compress_ratio {} (the live engine caches every token)",
                    l.index, l.compress_ratio
                ));
            }
            layers.push(LiveLayer {
                attention,
                window_branch: l.window_branch && l.attention != AttentionKind::Window,
                has_indexer: l.has_indexer,
                moe: l.ffn == FfnKind::Moe,
            });
        }
        let dt = m
            .moe
            .as_ref()
            .map_or(m.attention.weight_dtype, |x| x.weight_dtype);
        let dtype = match dt.name() {
            "bf16" => "bf16",
            "fp8" => "fp8",
            other => {
                p.push(format!(
                    "weight dtype {other}: the live engine's linear kernels take bf16 or fp8"
                ));
                "bf16"
            }
        };
        let dense_ffn = m.dense_ffn.as_ref().map_or(0, |d| d.ffn as usize);
        let moe = m.moe.as_ref().map(|x| {
            (
                x.routed_experts as usize,
                x.top_k as usize,
                x.expert_ffn as usize,
                (x.shared_experts * x.expert_ffn) as usize,
            )
        });
        let mtp_ffn = match (&m.mtp, dense_ffn, moe) {
            (None, _, _) => 0,
            (Some(_), f, _) if f > 0 => f,
            (Some(_), _, Some((_, _, f, _))) => f,
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
            indexer: m
                .attention
                .indexer
                .as_ref()
                .map(|i| (i.heads as usize, i.head_dim as usize, i.top_k as usize)),
            layers,
            moe,
            dense_ffn,
            mtp_ffn,
            dtype,
            page,
        })
    }

    /// Bytes of every linear layer's weights a decode step reads on one rank of `dep`
    /// (projections, gate, routed and shared experts, LM head, MTP head): how far apart
    /// two uses of one weight matrix are.
    pub fn linear_weight_bytes(&self, dep: usize) -> usize {
        let b = |n: usize, k: usize| n * k * if self.dtype == "fp8" { 1 } else { 2 };
        let (h, hl) = (self.hidden, self.heads * self.latent);
        let mut total = b(self.vocab, h);
        for l in &self.layers {
            total += b(hl, h) + b(self.latent, h) + b(h, hl);
            if let (true, Some((ih, id, _))) = (l.has_indexer, self.indexer) {
                total += b(ih * id + ih + id, h);
            }
            total += match (l.moe, self.moe) {
                (true, Some((e, _, f, s))) => {
                    b(e, h)
                        + e.div_ceil(dep.max(1)) * (b(2 * f, h) + b(h, f))
                        + b(2 * s, h)
                        + b(h, s)
                }
                _ => b(2 * self.dense_ffn, h) + b(h, self.dense_ffn),
            };
        }
        if self.mtp_ffn > 0 {
            total += b(h, h) + b(2 * self.mtp_ffn, h) + b(h, self.mtp_ffn);
        }
        total
    }

    /// Bytes of KV cache per token on one rank (latent entries, indexer keys, scales).
    pub fn kv_bytes_per_token(&self) -> usize {
        self.layers
            .iter()
            .map(|l| {
                self.latent
                    + 4
                    + if l.has_indexer {
                        self.indexer.map_or(0, |i| i.1 + 4)
                    } else {
                        0
                    }
            })
            .sum()
    }
}

/// One op call of the live engine, as `engine::op::live::Call` describes it, with the
/// breakdown category it counts in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LiveCall {
    pub op: &'static str,
    pub dtype: &'static str,
    pub key: Vec<(&'static str, u64)>,
    pub vars: Vec<(&'static str, u64)>,
}

impl LiveCall {
    /// The static part: op, dtype and key (what one fitted function covers).
    pub fn static_key(&self) -> CallKey {
        CallKey {
            op: self.op.to_string(),
            dtype: self.dtype.to_string(),
            key: self.key.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    /// Regressors of the fitted function: 1, then the variables in order.
    pub fn features(&self) -> Vec<f64> {
        std::iter::once(1.0)
            .chain(self.vars.iter().map(|(_, v)| *v as f64))
            .collect()
    }
}

/// The static identity of a fitted function: `linear[bf16] n=1024 k=512`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallKey {
    pub op: String,
    pub dtype: String,
    pub key: Vec<(String, u64)>,
}

impl std::fmt::Display for CallKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.op)?;
        if !self.dtype.is_empty() {
            write!(f, "[{}]", self.dtype)?;
        }
        for (k, v) in &self.key {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for CallKey {
    type Err = String;
    /// Parses the `Display` form.
    fn from_str(s: &str) -> Result<CallKey, String> {
        let mut parts = s.split_whitespace();
        let head = parts.next().ok_or("empty op key")?;
        let (op, dtype) = match head.split_once('[') {
            Some((op, rest)) => (
                op,
                rest.strip_suffix(']')
                    .ok_or_else(|| format!("bad op key {s:?}"))?,
            ),
            None => (head, ""),
        };
        let mut key = Vec::new();
        for kv in parts {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("bad op key {s:?}"))?;
            key.push((
                k.to_string(),
                v.parse().map_err(|_| format!("bad op key {s:?}"))?,
            ));
        }
        Ok(CallKey {
            op: op.to_string(),
            dtype: dtype.to_string(),
            key,
        })
    }
}

fn call(
    op: &'static str,
    dtype: &'static str,
    key: &[(&'static str, u64)],
    vars: &[(&'static str, u64)],
) -> LiveCall {
    LiveCall {
        op,
        dtype,
        key: key.to_vec(),
        vars: vars.to_vec(),
    }
}

/// Expected distinct experts `n` rows touch with `k` of `e` chosen per row, uniformly.
pub fn expected_touched(e: usize, k: usize, n: f64) -> f64 {
    if e == 0 || n <= 0.0 {
        return 0.0;
    }
    e as f64 * (1.0 - (1.0 - k as f64 / e as f64).powf(n))
}

/// Query rows of a rank and the cached positions they see.
#[derive(Debug, Clone, Copy, Default)]
struct RankRows {
    rows: u64,
    dense: u64,
    sparse: u64,
    window: u64,
}

impl LiveModel {
    fn rank_rows(&self, slices: &[super::ReqSlice], decode: bool, drafts: u32) -> RankRows {
        let topk = self.indexer.map_or(u64::MAX, |i| i.2 as u64);
        let w = if self.window > 0 {
            self.window as u64
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
            r.dense += m * clamped_positions(new, c, u64::MAX) as u64;
            r.sparse += m * clamped_positions(new, c, topk) as u64;
            r.window += m * clamped_positions(new, c, w) as u64;
        }
        r
    }

    fn linear(&self, n: usize, k: usize, groups: u64, rows: u64) -> LiveCall {
        call(
            "linear",
            self.dtype,
            &[("n", n as u64), ("k", k as u64)],
            &[("groups", groups), ("rows", rows)],
        )
    }

    fn rowop(op: &'static str, key: &[(&'static str, u64)], rows: u64) -> LiveCall {
        call(op, "", key, &[("rows", rows)])
    }

    fn attention(&self, mode: LiveAttn, rows: u64, positions: u64) -> LiveCall {
        let base = [
            ("heads", self.heads as u64),
            ("dim", self.latent as u64),
            ("page", self.page as u64),
        ];
        let (op, extra) = match mode {
            LiveAttn::Dense => ("attn_dense", None),
            LiveAttn::Sparse => (
                "attn_sparse",
                Some(("topk", self.indexer.map_or(0, |i| i.2) as u64)),
            ),
            LiveAttn::Window => ("attn_window", Some(("window", self.window as u64))),
        };
        let mut key = base.to_vec();
        key.extend(extra);
        call(op, "", &key, &[("rows", rows), ("positions", positions)])
    }

    /// The calls rank `rank` runs for one forward pass of `shape` on a DEP group of
    /// `shape.ranks.len()` ranks, each with its breakdown category. Expected values
    /// (touched experts, rows received) are rounded to whole numbers.
    pub fn step_calls(&self, shape: &StepShape<'_>, rank: usize) -> Vec<(Op, LiveCall)> {
        let decode = shape.phase == Phase::Decode;
        let drafts = if decode { shape.draft_tokens } else { 0 };
        let dep = shape.ranks.len().max(1);
        let rr = self.rank_rows(&shape.ranks[rank], decode, drafts);
        let total_rows: u64 = shape
            .ranks
            .iter()
            .map(|s| self.rank_rows(s, decode, drafts).rows)
            .sum();
        let n = rr.rows;
        let (h, v) = (self.hidden as u64, self.vocab as u64);
        let hl = (self.heads * self.latent) as u64;
        let mut out = Vec::new();
        let mut push = |op: Op, c: LiveCall| out.push((op, c));
        if n > 0 {
            push(Op::Dense, Self::rowop("gather_rows", &[("dim", h)], n));
        }
        for (li, l) in self.layers.iter().enumerate() {
            if n > 0 {
                push(
                    Op::Dense,
                    Self::rowop("rmsnorm", &[("dim", h), ("residual", (li > 0) as u64)], n),
                );
                push(
                    Op::Dense,
                    self.linear(self.heads * self.latent, self.hidden, 1, n),
                );
                push(Op::Dense, self.linear(self.latent, self.hidden, 1, n));
                push(
                    Op::Attention,
                    Self::rowop("kv_write", &[("dim", self.latent as u64)], n),
                );
                if let (true, Some((ih, id, topk))) = (l.has_indexer, self.indexer) {
                    push(Op::Indexer, self.linear(ih * id, self.hidden, 1, n));
                    push(Op::Indexer, self.linear(ih, self.hidden, 1, n));
                    push(Op::Indexer, self.linear(id, self.hidden, 1, n));
                    push(
                        Op::Indexer,
                        Self::rowop("kv_write", &[("dim", id as u64)], n),
                    );
                    push(
                        Op::Indexer,
                        call(
                            "indexer_paged",
                            "",
                            &[
                                ("heads", ih as u64),
                                ("dim", id as u64),
                                ("topk", topk as u64),
                                ("page", self.page as u64),
                            ],
                            &[("rows", n), ("positions", rr.dense)],
                        ),
                    );
                }
                let pos = match l.attention {
                    LiveAttn::Dense => rr.dense,
                    LiveAttn::Sparse => rr.sparse,
                    LiveAttn::Window => rr.window,
                };
                push(Op::Attention, self.attention(l.attention, n, pos));
                if l.window_branch {
                    push(
                        Op::Attention,
                        self.attention(LiveAttn::Window, n, rr.window),
                    );
                    push(Op::Attention, Self::rowop("add", &[("dim", hl)], n));
                }
                push(
                    Op::Dense,
                    self.linear(self.hidden, self.heads * self.latent, 1, n),
                );
                push(
                    Op::Dense,
                    Self::rowop("rmsnorm", &[("dim", h), ("residual", 1)], n),
                );
            }
            match (l.moe, self.moe) {
                (true, Some((e, k, f, shared))) => {
                    if n > 0 {
                        push(Op::Moe, self.linear(e, self.hidden, 1, n));
                        push(
                            Op::Moe,
                            Self::rowop(
                                "gate_topk",
                                &[("experts", e as u64), ("topk", k as u64)],
                                n,
                            ),
                        );
                    }
                    if dep == 1 {
                        if n > 0 {
                            let g = expected_touched(e, k, n as f64).round().max(1.0) as u64;
                            let m = n * k as u64;
                            push(Op::Moe, Self::rowop("gather_rows", &[("dim", h)], m));
                            push(Op::Moe, self.linear(2 * f, self.hidden, g, m));
                            push(Op::Moe, Self::rowop("swiglu", &[("ffn", f as u64)], m));
                            push(Op::Moe, self.linear(self.hidden, f, g, m));
                        }
                    } else {
                        let local = e / dep;
                        let m = (total_rows as f64 * k as f64 / dep as f64).round() as u64;
                        // Each of the rank's experts is touched unless every row's k
                        // choices avoid it.
                        let g = local as f64
                            * (1.0 - (1.0 - k as f64 / e as f64).powf(total_rows as f64));
                        let g = (g.round() as u64).clamp(m.min(1), (local as u64).min(m).max(1));
                        let sent = n * k as u64 * (h + 1);
                        push(
                            Op::Communication,
                            call("copy", "", &[], &[("bytes", 4 * (sent + m * (h + 1)))]),
                        );
                        if m > 0 {
                            push(Op::Moe, self.linear(2 * f, self.hidden, g, m));
                            push(Op::Moe, Self::rowop("swiglu", &[("ffn", f as u64)], m));
                            push(Op::Moe, self.linear(self.hidden, f, g, m));
                        }
                        push(
                            Op::Communication,
                            call("copy", "", &[], &[("bytes", 4 * h * (m + n * k as u64))]),
                        );
                    }
                    if n > 0 {
                        if shared > 0 {
                            push(Op::SharedExpert, self.linear(2 * shared, self.hidden, 1, n));
                            push(
                                Op::SharedExpert,
                                Self::rowop("swiglu", &[("ffn", shared as u64)], n),
                            );
                            push(Op::SharedExpert, self.linear(self.hidden, shared, 1, n));
                        }
                        push(
                            Op::Moe,
                            Self::rowop("moe_combine", &[("topk", k as u64), ("dim", h)], n),
                        );
                    }
                }
                _ => {
                    if n > 0 {
                        push(
                            Op::Dense,
                            self.linear(2 * self.dense_ffn, self.hidden, 1, n),
                        );
                        push(
                            Op::Dense,
                            Self::rowop("swiglu", &[("ffn", self.dense_ffn as u64)], n),
                        );
                        push(Op::Dense, self.linear(self.hidden, self.dense_ffn, 1, n));
                    }
                }
            }
        }
        if decode && n > 0 {
            push(
                Op::Dense,
                Self::rowop("rmsnorm", &[("dim", h), ("residual", 1)], n),
            );
            push(Op::Dense, self.linear(self.vocab, self.hidden, 1, n));
            push(Op::Dense, Self::rowop("argmax", &[("n", v)], n));
            let b: u64 = shape.ranks[rank].iter().map(|s| s.count as u64).sum();
            if drafts > 0 && self.mtp_ffn > 0 {
                let fm = self.mtp_ffn;
                push(Op::MtpDraft, Self::rowop("gather_rows", &[("dim", h)], b));
                push(Op::MtpDraft, Self::rowop("gather_rows", &[("dim", h)], b));
                for i in 0..drafts {
                    push(
                        Op::MtpDraft,
                        Self::rowop("rmsnorm", &[("dim", h), ("residual", 0)], b),
                    );
                    push(
                        Op::MtpDraft,
                        Self::rowop("rmsnorm", &[("dim", h), ("residual", 0)], b),
                    );
                    push(Op::MtpDraft, Self::rowop("add", &[("dim", h)], b));
                    push(Op::MtpDraft, self.linear(self.hidden, self.hidden, 1, b));
                    push(
                        Op::MtpDraft,
                        Self::rowop("rmsnorm", &[("dim", h), ("residual", 0)], b),
                    );
                    push(Op::MtpDraft, self.linear(2 * fm, self.hidden, 1, b));
                    push(
                        Op::MtpDraft,
                        Self::rowop("swiglu", &[("ffn", fm as u64)], b),
                    );
                    push(Op::MtpDraft, self.linear(self.hidden, fm, 1, b));
                    push(
                        Op::MtpDraft,
                        Self::rowop("rmsnorm", &[("dim", h), ("residual", 1)], b),
                    );
                    push(Op::MtpDraft, self.linear(self.vocab, self.hidden, 1, b));
                    push(Op::MtpDraft, Self::rowop("argmax", &[("n", v)], b));
                    if i + 1 < drafts {
                        push(Op::MtpDraft, Self::rowop("gather_rows", &[("dim", h)], b));
                    }
                }
            }
        }
        out
    }

    /// Every distinct static key a run on `dep` ranks with `drafts` MTP drafts prices:
    /// what a profile must hold.
    pub fn required_keys(&self, dep: usize, drafts: u32) -> Vec<CallKey> {
        let one = vec![super::ReqSlice::one(2, 1)];
        let ranks: Vec<Vec<super::ReqSlice>> = vec![one; dep.max(1)];
        let mut keys = Vec::new();
        for (phase, d) in [(Phase::Prefill, 0), (Phase::Decode, drafts)] {
            let shape = StepShape {
                phase,
                ranks: &ranks,
                draft_tokens: d,
            };
            keys.extend(
                self.step_calls(&shape, 0)
                    .into_iter()
                    .map(|(_, c)| c.static_key()),
            );
        }
        keys.sort();
        keys.dedup();
        keys
    }
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
        let probe = {
            let r = vec![vec![super::ReqSlice::one(2, 1)]; layout.dep.max(1) as usize];
            let mut calls: Vec<LiveCall> = Vec::new();
            for (phase, d) in [(Phase::Prefill, 0), (Phase::Decode, draft_tokens)] {
                let s = StepShape {
                    phase,
                    ranks: &r,
                    draft_tokens: d,
                };
                calls.extend(model.step_calls(&s, 0).into_iter().map(|(_, c)| c));
            }
            calls
        };
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
    pub fn price(&self, c: &LiveCall) -> f64 {
        self.fits.get(&c.static_key()).map_or(0.0, |coef| {
            coef.iter().zip(c.features()).map(|(a, x)| a * x).sum()
        })
    }
}

impl CostModel for FittedCostModel {
    fn wake_s(&self, idle_s: f64) -> f64 {
        self.wake.map_or(0.0, |w| w.after(idle_s))
    }

    fn step(&self, shape: &StepShape<'_>) -> StepCost {
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
            self.model.indexer.map(|i| i.2),
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
