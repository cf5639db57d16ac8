//! The live engine's op calls: [`Call`] (an op, its static key and its variables), the
//! constructor of each op's call, [`CallKey`] (what one fitted cost function covers)
//! and [`forward_pass`], the calls one rank runs for one forward pass of a
//! [`LiveModel`].
//!
//! The list is written once, here: the simulator's fitted cost model prices it
//! (`sim::cost::fitted`), and the executor (`engine::serve::exec`) records a call per
//! device op that the `live` crate's composition test checks against it.
//!
//! A forward pass of `n` rows on one rank (prefill rows are the chunks' tokens; decode
//! rows are `1 + drafts` per sequence):
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
//! its share of all rows' choices.

use crate::dtype::Dtype;
use crate::live_model::{AttnKind, IndexerConfig, LayerConfig, LiveModel, MoeConfig};

/// The live engine's device ops, one per kind of [`Call`]: the names its traces,
/// fitted profiles and op registry (`engine::op::OPS`) use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CallOp {
    Linear,
    Rmsnorm,
    Swiglu,
    GateTopk,
    GatherRows,
    MoeCombine,
    Add,
    KvWrite,
    Argmax,
    IndexerPaged,
    AttnDense,
    AttnSparse,
    AttnWindow,
    Copy,
}

impl CallOp {
    pub const ALL: [CallOp; 14] = [
        CallOp::Linear,
        CallOp::Rmsnorm,
        CallOp::Swiglu,
        CallOp::GateTopk,
        CallOp::GatherRows,
        CallOp::MoeCombine,
        CallOp::Add,
        CallOp::KvWrite,
        CallOp::Argmax,
        CallOp::IndexerPaged,
        CallOp::AttnDense,
        CallOp::AttnSparse,
        CallOp::AttnWindow,
        CallOp::Copy,
    ];

    /// The op's name in traces, profiles and the op registry.
    pub const fn name(self) -> &'static str {
        match self {
            CallOp::Linear => "linear",
            CallOp::Rmsnorm => "rmsnorm",
            CallOp::Swiglu => "swiglu",
            CallOp::GateTopk => "gate_topk",
            CallOp::GatherRows => "gather_rows",
            CallOp::MoeCombine => "moe_combine",
            CallOp::Add => "add",
            CallOp::KvWrite => "kv_write",
            CallOp::Argmax => "argmax",
            CallOp::IndexerPaged => "indexer_paged",
            CallOp::AttnDense => "attn_dense",
            CallOp::AttnSparse => "attn_sparse",
            CallOp::AttnWindow => "attn_window",
            CallOp::Copy => "copy",
        }
    }

    /// The op named `name`, if it is one.
    pub fn parse(name: &str) -> Option<CallOp> {
        CallOp::ALL.into_iter().find(|o| o.name() == name)
    }
}

impl std::fmt::Display for CallOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One op call: the op, its static key (what the model fixes: widths, dtypes) and its
/// variables (what a step varies: rows, groups, positions, bytes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Call {
    pub op: CallOp,
    /// Weight format of a linear layer (the live model's and the kernels' subsets of
    /// `Dtype`); `None` for the other ops.
    pub dtype: Option<Dtype>,
    pub key: Vec<(&'static str, u64)>,
    pub vars: Vec<(&'static str, u64)>,
}

/// What an attention call reads: its mode, the mode's limit (top-k positions of a
/// sparse call, the window of a window call; unused for dense) and its widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnKey {
    pub kind: AttnKind,
    pub limit: usize,
    pub heads: usize,
    pub dim: usize,
    pub page: usize,
}

impl Call {
    fn new(
        op: CallOp,
        dtype: Option<Dtype>,
        key: &[(&'static str, u64)],
        vars: &[(&'static str, u64)],
    ) -> Call {
        Call {
            op,
            dtype,
            key: key.to_vec(),
            vars: vars.to_vec(),
        }
    }

    /// An op over `rows` rows whose key is all widths.
    fn rows_op(op: CallOp, key: &[(&'static str, usize)], rows: u64) -> Call {
        Call {
            op,
            dtype: None,
            key: key.iter().map(|&(k, v)| (k, v as u64)).collect(),
            vars: vec![("rows", rows)],
        }
    }

    /// A grouped linear layer of `n x k` matrices in `dtype`: `rows` rows over `groups`
    /// matrices (1: a dense layer).
    pub fn linear(dtype: Dtype, n: usize, k: usize, groups: u64, rows: u64) -> Call {
        Call::new(
            CallOp::Linear,
            Some(dtype),
            &[("n", n as u64), ("k", k as u64)],
            &[("groups", groups), ("rows", rows)],
        )
    }

    /// RMSNorm of `rows` rows of `dim`, with the residual add when `residual` is 1.
    pub fn rmsnorm(dim: usize, residual: usize, rows: u64) -> Call {
        Call::rows_op(
            CallOp::Rmsnorm,
            &[("dim", dim), ("residual", residual)],
            rows,
        )
    }

    pub fn swiglu(ffn: usize, rows: u64) -> Call {
        Call::rows_op(CallOp::Swiglu, &[("ffn", ffn)], rows)
    }

    pub fn gate_topk(experts: usize, topk: usize, rows: u64) -> Call {
        Call::rows_op(
            CallOp::GateTopk,
            &[("experts", experts), ("topk", topk)],
            rows,
        )
    }

    pub fn gather_rows(dim: usize, rows: u64) -> Call {
        Call::rows_op(CallOp::GatherRows, &[("dim", dim)], rows)
    }

    pub fn moe_combine(topk: usize, dim: usize, rows: u64) -> Call {
        Call::rows_op(CallOp::MoeCombine, &[("topk", topk), ("dim", dim)], rows)
    }

    pub fn add(dim: usize, rows: u64) -> Call {
        Call::rows_op(CallOp::Add, &[("dim", dim)], rows)
    }

    pub fn kv_write(dim: usize, rows: u64) -> Call {
        Call::rows_op(CallOp::KvWrite, &[("dim", dim)], rows)
    }

    pub fn argmax(n: usize, rows: u64) -> Call {
        Call::rows_op(CallOp::Argmax, &[("n", n)], rows)
    }

    /// The paged indexer over `rows` query rows scoring `positions` cached keys in all.
    pub fn indexer_paged(ix: IndexerConfig, page: usize, rows: u64, positions: u64) -> Call {
        Call::new(
            CallOp::IndexerPaged,
            None,
            &[
                ("heads", ix.heads as u64),
                ("dim", ix.dim as u64),
                ("topk", ix.topk as u64),
                ("page", page as u64),
            ],
            &[("rows", rows), ("positions", positions)],
        )
    }

    /// An attention call: `rows` query rows reading `positions` cached entries in all.
    pub fn attention(a: AttnKey, rows: u64, positions: u64) -> Call {
        let (op, extra) = match a.kind {
            AttnKind::Dense => (CallOp::AttnDense, None),
            AttnKind::Sparse => (CallOp::AttnSparse, Some(("topk", a.limit as u64))),
            AttnKind::Window => (CallOp::AttnWindow, Some(("window", a.limit as u64))),
        };
        let mut key = vec![
            ("heads", a.heads as u64),
            ("dim", a.dim as u64),
            ("page", a.page as u64),
        ];
        key.extend(extra);
        Call {
            op,
            dtype: None,
            key,
            vars: vec![("rows", rows), ("positions", positions)],
        }
    }

    /// A host-side exchange of `bytes` between ranks (dispatch or combine).
    pub fn copy(bytes: u64) -> Call {
        Call::new(CallOp::Copy, None, &[], &[("bytes", bytes)])
    }

    /// The static part: op, dtype and key (what one fitted function covers).
    pub fn static_key(&self) -> CallKey {
        CallKey {
            op: self.op.name().to_string(),
            dtype: self.dtype.map_or("", Dtype::name).to_string(),
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

/// Expected distinct experts `n` rows touch with `k` of `e` chosen per row, uniformly.
pub fn expected_touched(e: usize, k: usize, n: f64) -> f64 {
    if e == 0 || n <= 0.0 {
        return 0.0;
    }
    e as f64 * (1.0 - (1.0 - k as f64 / e as f64).powf(n))
}

/// The part of the forward pass a call belongs to (the fitted cost model's breakdown
/// category).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Dense,
    Attention,
    Indexer,
    Moe,
    SharedExpert,
    Communication,
    MtpDraft,
}

/// Cached positions a rank's query rows read in all, by attention mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Positions {
    pub dense: u64,
    /// Each row's positions capped at the indexer's top-k.
    pub sparse: u64,
    /// Each row's positions capped at the window.
    pub window: u64,
}

/// One rank's forward pass: what the calls' variables come from. Expected values
/// (touched experts, rows a rank receives) are derived from these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Decode (LM head and argmax for every row, then the MTP drafts), else prefill.
    pub decode: bool,
    /// MTP draft passes after a decode pass (0 for prefill).
    pub drafts: u32,
    /// Query rows on this rank.
    pub rows: u64,
    /// Sequences on this rank (the MTP head's rows).
    pub sequences: u64,
    pub positions: Positions,
    /// Ranks of the DEP group (at least 1).
    pub ranks: usize,
    /// Query rows over all ranks of the group.
    pub group_rows: u64,
}

impl LiveModel {
    /// The static key of this model's attention calls in mode `kind`.
    pub fn attn_key(&self, kind: AttnKind) -> AttnKey {
        let limit = match kind {
            AttnKind::Dense => 0,
            AttnKind::Sparse => self.indexer.map_or(0, |i| i.topk),
            AttnKind::Window => self.window,
        };
        AttnKey {
            kind,
            limit,
            heads: self.heads,
            dim: self.latent,
            page: self.page_size,
        }
    }
}

/// The calls one rank runs for `pass` of `model`, each with its part, in the order the
/// executor runs them. Expected values (touched experts, rows received) are rounded to
/// whole numbers.
pub fn forward_pass(model: &LiveModel, pass: &Pass) -> Vec<(Part, Call)> {
    let mut c = Composer {
        m: model,
        p: pass,
        out: Vec::new(),
    };
    let n = pass.rows;
    if n > 0 {
        c.push(Part::Dense, Call::gather_rows(model.hidden, n));
    }
    for (li, l) in model.layers.iter().enumerate() {
        if n > 0 {
            c.attention_half(li, l);
        }
        match (l.moe, model.moe) {
            (true, Some(moe)) => c.moe(moe),
            _ => c.dense_ffn(),
        }
    }
    if pass.decode && n > 0 {
        c.decode_head();
    }
    c.out
}

/// Builds one forward pass's list.
struct Composer<'a> {
    m: &'a LiveModel,
    p: &'a Pass,
    out: Vec<(Part, Call)>,
}

impl Composer<'_> {
    fn push(&mut self, part: Part, call: Call) {
        self.out.push((part, call));
    }

    fn dense(&self, n: usize, k: usize, rows: u64) -> Call {
        Call::linear(self.m.weight_dtype.dtype(), n, k, 1, rows)
    }

    /// Layer `li`'s attention half over the rank's rows (some).
    fn attention_half(&mut self, li: usize, l: &LayerConfig) {
        let (m, n) = (self.m, self.p.rows);
        let (h, hl) = (m.hidden, m.heads * m.latent);
        let pos = self.p.positions;
        self.push(Part::Dense, Call::rmsnorm(h, (li > 0) as usize, n));
        self.push(Part::Dense, self.dense(hl, h, n));
        self.push(Part::Dense, self.dense(m.latent, h, n));
        self.push(Part::Attention, Call::kv_write(m.latent, n));
        if let (true, Some(ix)) = (l.has_indexer, m.indexer) {
            self.push(Part::Indexer, self.dense(ix.heads * ix.dim, h, n));
            self.push(Part::Indexer, self.dense(ix.heads, h, n));
            self.push(Part::Indexer, self.dense(ix.dim, h, n));
            self.push(Part::Indexer, Call::kv_write(ix.dim, n));
            let call = Call::indexer_paged(ix, m.page_size, n, pos.dense);
            self.push(Part::Indexer, call);
        }
        let read = match l.attention {
            AttnKind::Dense => pos.dense,
            AttnKind::Sparse => pos.sparse,
            AttnKind::Window => pos.window,
        };
        self.push(
            Part::Attention,
            Call::attention(m.attn_key(l.attention), n, read),
        );
        if l.window_branch {
            let window = m.attn_key(AttnKind::Window);
            self.push(Part::Attention, Call::attention(window, n, pos.window));
            self.push(Part::Attention, Call::add(hl, n));
        }
        self.push(Part::Dense, self.dense(h, hl, n));
        self.push(Part::Dense, Call::rmsnorm(h, 1, n));
    }

    fn dense_ffn(&mut self) {
        let (n, h, f) = (self.p.rows, self.m.hidden, self.m.dense_ffn);
        if n > 0 {
            self.push(Part::Dense, self.dense(2 * f, h, n));
            self.push(Part::Dense, Call::swiglu(f, n));
            self.push(Part::Dense, self.dense(h, f, n));
        }
    }

    /// The routed experts' FFN (with its exchanges, which every rank of a group joins
    /// with or without rows), the shared experts and the combine.
    fn moe(&mut self, moe: MoeConfig) {
        let (n, h) = (self.p.rows, self.m.hidden);
        let (e, k) = (moe.experts, moe.top_k);
        if n > 0 {
            self.push(Part::Moe, self.dense(e, h, n));
            self.push(Part::Moe, Call::gate_topk(e, k, n));
        }
        if self.p.ranks == 1 {
            self.local_experts(moe);
        } else {
            self.exchanged_experts(moe);
        }
        if n > 0 {
            let s = moe.shared_ffn;
            if s > 0 {
                self.push(Part::SharedExpert, self.dense(2 * s, h, n));
                self.push(Part::SharedExpert, Call::swiglu(s, n));
                self.push(Part::SharedExpert, self.dense(h, s, n));
            }
            self.push(Part::Moe, Call::moe_combine(k, h, n));
        }
    }

    /// The expert SwiGLU over `groups` experts and `rows` rows.
    fn expert_swiglu(&mut self, moe: MoeConfig, groups: u64, rows: u64) {
        let (dtype, h, f) = (self.m.weight_dtype.dtype(), self.m.hidden, moe.expert_ffn);
        self.push(Part::Moe, Call::linear(dtype, 2 * f, h, groups, rows));
        self.push(Part::Moe, Call::swiglu(f, rows));
        self.push(Part::Moe, Call::linear(dtype, h, f, groups, rows));
    }

    /// One rank holds every expert: a row gather, then the touched experts.
    fn local_experts(&mut self, moe: MoeConfig) {
        let n = self.p.rows;
        if n > 0 {
            let (e, k) = (moe.experts, moe.top_k);
            let g = expected_touched(e, k, n as f64).round().max(1.0) as u64;
            let m = n * k as u64;
            self.push(Part::Moe, Call::gather_rows(self.m.hidden, m));
            self.expert_swiglu(moe, g, m);
        }
    }

    /// Experts spread over the group: dispatch, the rank's experts over its expected
    /// share of all rows' choices, combine back.
    fn exchanged_experts(&mut self, moe: MoeConfig) {
        let (n, dep, total) = (self.p.rows, self.p.ranks, self.p.group_rows);
        let (e, k, h) = (moe.experts, moe.top_k, self.m.hidden as u64);
        let local = e / dep;
        let m = (total as f64 * k as f64 / dep as f64).round() as u64;
        // Each of the rank's experts is touched unless every row's k choices avoid it.
        let g = local as f64 * (1.0 - (1.0 - k as f64 / e as f64).powf(total as f64));
        let g = (g.round() as u64).clamp(m.min(1), (local as u64).min(m).max(1));
        let sent = n * k as u64 * (h + 1);
        let dispatch = Call::copy(4 * (sent + m * (h + 1)));
        self.push(Part::Communication, dispatch);
        if m > 0 {
            self.expert_swiglu(moe, g, m);
        }
        let combine = Call::copy(4 * h * (m + n * k as u64));
        self.push(Part::Communication, combine);
    }

    /// Decode (some rows): the final norm, LM head and argmax, then the MTP drafts.
    fn decode_head(&mut self) {
        let (m, n) = (self.m, self.p.rows);
        self.push(Part::Dense, Call::rmsnorm(m.hidden, 1, n));
        self.push(Part::Dense, self.dense(m.vocab, m.hidden, n));
        self.push(Part::Dense, Call::argmax(m.vocab, n));
        if self.p.drafts > 0 && m.mtp_ffn > 0 {
            self.mtp_drafts();
        }
    }

    fn mtp_drafts(&mut self) {
        let (m, b, drafts) = (self.m, self.p.sequences, self.p.drafts);
        let (h, fm) = (m.hidden, m.mtp_ffn);
        let mtp = Part::MtpDraft;
        self.push(mtp, Call::gather_rows(h, b));
        self.push(mtp, Call::gather_rows(h, b));
        for i in 0..drafts {
            self.push(mtp, Call::rmsnorm(h, 0, b));
            self.push(mtp, Call::rmsnorm(h, 0, b));
            self.push(mtp, Call::add(h, b));
            self.push(mtp, self.dense(h, h, b));
            self.push(mtp, Call::rmsnorm(h, 0, b));
            self.push(mtp, self.dense(2 * fm, h, b));
            self.push(mtp, Call::swiglu(fm, b));
            self.push(mtp, self.dense(h, fm, b));
            self.push(mtp, Call::rmsnorm(h, 1, b));
            self.push(mtp, self.dense(m.vocab, h, b));
            self.push(mtp, Call::argmax(m.vocab, b));
            if i + 1 < drafts {
                self.push(mtp, Call::gather_rows(h, b));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ops_are_named_once_and_parse_back() {
        let mut names: Vec<&str> = CallOp::ALL.iter().map(|o| o.name()).collect();
        for o in CallOp::ALL {
            assert_eq!(CallOp::parse(o.name()), Some(o));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CallOp::ALL.len());
        assert_eq!(CallOp::parse("gemm"), None);
    }

    #[test]
    fn call_keys_print_and_parse() {
        let c = Call::linear(Dtype::Bf16, 1024, 512, 3, 70);
        let k = c.static_key();
        assert_eq!(k.to_string(), "linear[bf16] n=1024 k=512");
        assert_eq!(k.to_string().parse::<CallKey>(), Ok(k));
        assert_eq!(c.features(), [1.0, 3.0, 70.0]);
        let a = AttnKey {
            kind: AttnKind::Window,
            limit: 128,
            heads: 4,
            dim: 64,
            page: 16,
        };
        let w = Call::attention(a, 2, 9).static_key();
        assert_eq!(
            w.to_string(),
            "attn_window heads=4 dim=64 page=16 window=128"
        );
        assert_eq!(Call::copy(8).static_key().to_string(), "copy");
        assert!("linear[bf16 n=1".parse::<CallKey>().is_err());
    }

    #[test]
    fn expected_touched_by_hand() {
        // 8 experts, top-2, one row: 2 touched; no rows: none.
        assert!((expected_touched(8, 2, 1.0) - 2.0).abs() < 1e-12);
        assert_eq!(expected_touched(8, 2, 0.0), 0.0);
        // Two rows: 8 (1 - (3/4)^2) = 3.5.
        assert!((expected_touched(8, 2, 2.0) - 3.5).abs() < 1e-12);
    }
}
