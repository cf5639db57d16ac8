//! What one rank does in a step, before pricing: tokens, and the attention, indexer and
//! replay traffic and arithmetic summed over its requests, per attention class.

use super::layers::{AttnClass, Compiled};
use super::AnalyticCostModel;
use crate::cost::{clamped_positions, Phase, ReqSlice};
use spec::model::AttentionKind;

/// Attention classes a model may have (distinct kind, ratio, indexer, window branch).
pub const MAX_CLASSES: usize = 4;

/// One attention class's traffic and arithmetic on one rank, summed over requests and
/// the class's layers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct ClassSums {
    pub main_bytes: f64,
    /// Main attention flops at absorbed and at un-absorbed (MLA prefill) widths.
    pub main_flops: f64,
    pub main_flops_unabsorbed: f64,
    /// Sliding-window branch (dense kernel).
    pub win_bytes: f64,
    pub win_flops: f64,
    pub idx_bytes: f64,
    pub idx_flops: f64,
}

impl ClassSums {
    fn scale(&mut self, f: f64) {
        self.main_bytes *= f;
        self.main_flops *= f;
        self.main_flops_unabsorbed *= f;
        self.win_bytes *= f;
        self.win_flops *= f;
        self.idx_bytes *= f;
        self.idx_flops *= f;
    }
}

/// A mixed step's decode requests on one rank: their queries join the weight GEMMs,
/// their attention is a decode kernel's over their own contexts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Riders {
    pub requests: f64,
    /// Query tokens (one per request, more with MTP drafts), all reaching the LM head.
    pub tokens: f64,
    pub classes: [ClassSums; MAX_CLASSES],
}

/// Per-rank work of one step.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct RankWork {
    /// Requests and query tokens of the step's phase (a mixed step's prefill chunks);
    /// `riders` holds a mixed step's decode requests, and `all_*` the totals.
    pub requests: f64,
    pub tokens: f64,
    /// Tokens that reach the LM head.
    pub lm_tokens: f64,
    /// Context tokens an un-absorbed MLA prefill up-projects (cached prefix and the
    /// chunk itself), per layer.
    pub kv_up_tokens: f64,
    pub classes: [ClassSums; MAX_CLASSES],
    /// Replay: token-layers through the dense parts, and attention/indexer flops.
    pub replay_tokens_layers: f64,
    pub replay_attn_flops: f64,
    pub replay_indexer_flops: f64,
    pub riders: Riders,
}

impl RankWork {
    /// Query tokens through the weight GEMMs: the step's and its riders'.
    pub fn all_tokens(&self) -> f64 {
        self.tokens + self.riders.tokens
    }

    /// Tokens that reach the LM head, riders included.
    pub fn all_lm_tokens(&self) -> f64 {
        self.lm_tokens + self.riders.tokens
    }

    /// Requests the host serves, riders included.
    pub fn all_requests(&self) -> f64 {
        self.requests + self.riders.requests
    }

    /// The riders as work of their own (their attention's), if any.
    pub fn riders_work(&self) -> Option<RankWork> {
        (self.riders.requests > 0.0).then(|| RankWork {
            requests: self.riders.requests,
            tokens: self.riders.tokens,
            lm_tokens: self.riders.tokens,
            classes: self.riders.classes,
            ..RankWork::default()
        })
    }

    /// Takes `d`'s decode work as this step's riders.
    pub fn ride(&mut self, d: &RankWork) {
        self.riders = Riders {
            requests: d.requests,
            tokens: d.tokens,
            classes: d.classes,
        };
    }
    /// The same work split `f` ways evenly (a micro-batch's share).
    pub fn scaled(&self, f: f64) -> RankWork {
        let mut w = *self;
        w.requests *= f;
        w.tokens *= f;
        w.lm_tokens *= f;
        w.kv_up_tokens *= f;
        for c in w.classes.iter_mut() {
            c.scale(f);
        }
        w.replay_tokens_layers *= f;
        w.replay_attn_flops *= f;
        w.replay_indexer_flops *= f;
        w.riders.requests *= f;
        w.riders.tokens *= f;
        for c in w.riders.classes.iter_mut() {
            c.scale(f);
        }
        w
    }

    /// Mean query tokens per request of the step's phase (a prefill sequence's length).
    pub fn seq_tokens(&self) -> f64 {
        if self.requests > 0.0 {
            self.tokens / self.requests
        } else {
            0.0
        }
    }

    /// The mean work of `n` ranks that are `works` repeated: their sum in rank order,
    /// scaled by `1 / n` (one multiplication per field, not one division per rank).
    pub fn mean(works: &[RankWork], n: usize) -> RankWork {
        let mut m = RankWork::default();
        for w in (0..n).map(|i| &works[i % works.len()]) {
            m.add(w);
        }
        m.scaled(1.0 / n.max(1) as f64)
    }

    fn add(&mut self, w: &RankWork) {
        self.requests += w.requests;
        self.tokens += w.tokens;
        self.lm_tokens += w.lm_tokens;
        self.kv_up_tokens += w.kv_up_tokens;
        add_classes(&mut self.classes, &w.classes);
        self.replay_tokens_layers += w.replay_tokens_layers;
        self.replay_attn_flops += w.replay_attn_flops;
        self.replay_indexer_flops += w.replay_indexer_flops;
        self.riders.requests += w.riders.requests;
        self.riders.tokens += w.riders.tokens;
        add_classes(&mut self.riders.classes, &w.riders.classes);
    }
}

fn add_classes(acc: &mut [ClassSums; MAX_CLASSES], w: &[ClassSums; MAX_CLASSES]) {
    for (a, b) in acc.iter_mut().zip(w.iter()) {
        a.main_bytes += b.main_bytes;
        a.main_flops += b.main_flops;
        a.main_flops_unabsorbed += b.main_flops_unabsorbed;
        a.win_bytes += b.win_bytes;
        a.win_flops += b.win_flops;
        a.idx_bytes += b.idx_bytes;
        a.idx_flops += b.idx_flops;
    }
}

impl AnalyticCostModel {
    /// Adds the attention and indexer bytes and flops of `n` requests with `q` queries
    /// each on `ctx` cached tokens, over every class's layers (`prefill`: a prefill
    /// chunk, which chunked attention and the recurrent mixers price by their chunked
    /// algorithms).
    #[inline]
    fn attn_sums(&self, c: &Compiled, q: u64, ctx: u64, n: f64, prefill: bool, w: &mut RankWork) {
        let a = &self.model.attention;
        let idx = a.indexer.as_ref();
        let window = a.window as u64;
        // Causal query-key pairs over all positions, and the positions stored.
        let all_pairs = clamped_positions(q, ctx, u64::MAX);
        let stored = (ctx + q) as f64;
        let window_read = (ctx + q).min(window + q) as f64;
        let window_pairs = clamped_positions(q, ctx, window);
        for (ci, cl) in c.classes.iter().enumerate() {
            let k = n * cl.count;
            let s = &mut w.classes[ci];
            if cl.kind.is_recurrent() {
                recurrent_sums(cl, q, k, prefill, s);
                continue;
            }
            let (entries_read, pairs) = match cl.kind {
                AttentionKind::Dense => (stored, all_pairs),
                AttentionKind::Compressed => (stored / cl.ratio, all_pairs / cl.ratio),
                AttentionKind::Sparse => {
                    let top_k = idx.map(|i| i.top_k as u64).unwrap_or(u64::MAX);
                    let cap = top_k.saturating_mul(cl.ratio as u64);
                    let pairs = clamped_positions(q, ctx, cap) / cl.ratio;
                    // Decode reads the union of the queries' selections.
                    let read = (stored / cl.ratio).min(q as f64 * top_k as f64);
                    (read, pairs)
                }
                AttentionKind::Window => (window_read, window_pairs),
                AttentionKind::Chunked => local_reads(q, ctx, cl.span, prefill),
                _ => (0.0, 0.0),
            };
            // Under TP a GPU reads its KV heads' share (the whole latent with MLA).
            let entry_bytes = cl.kv_share
                * if cl.kind == AttentionKind::Window {
                    cl.window_entry_bytes
                } else {
                    cl.entry_bytes
                };
            s.main_bytes += k * entries_read * entry_bytes;
            s.main_flops += k * pairs * cl.pair_flops;
            s.main_flops_unabsorbed += k * pairs * cl.pair_flops_unabsorbed;
            if cl.sink_flops > 0.0 {
                let sink = k * q as f64 * cl.sink_flops;
                s.main_flops += sink;
                s.main_flops_unabsorbed += sink;
            }
            if cl.window_branch {
                s.win_bytes += k * window_read * a.window_entry_bytes * cl.kv_share;
                s.win_flops += k * window_pairs * cl.pair_flops;
            }
            if cl.has_indexer {
                if let Some(i) = idx {
                    s.idx_bytes += k * stored / cl.ratio * i.key_bytes;
                    s.idx_flops += k * all_pairs / cl.ratio * c.indexer_flops_per_pair;
                }
            }
        }
    }

    /// Adds the work of one rank with `q_per_req` decode queries per request to `w`;
    /// with `draft`, also the same rank's work at one query per request (an MTP draft
    /// pass), from the same walk over the requests.
    pub(super) fn rank_work(
        &self,
        phase: Phase,
        rank: &[ReqSlice],
        q_per_req: u64,
        w: &mut RankWork,
        mut draft: Option<&mut RankWork>,
    ) {
        let c = &self.compiled;
        let a = &self.model.attention;
        let idx = a.indexer.as_ref();
        let window = a.window as u64;
        for s in rank {
            let n = s.count as f64;
            let ctx = s.context_tokens;
            let q = match phase {
                Phase::Decode => q_per_req,
                Phase::Prefill => s.new_tokens as u64,
            };
            if q == 0 || n == 0.0 {
                continue;
            }
            w.requests += n;
            w.tokens += n * q as f64;
            w.lm_tokens += match phase {
                Phase::Decode => n * q as f64,
                Phase::Prefill => n,
            };
            w.kv_up_tokens += n * (ctx + q) as f64;
            self.attn_sums(c, q, ctx, n, phase == Phase::Prefill, w);
            if let Some(d) = draft.as_deref_mut() {
                d.requests += n;
                d.tokens += n;
                d.lm_tokens += n;
                d.kv_up_tokens += n * (ctx + 1) as f64;
                self.attn_sums(c, 1, ctx, n, false, d);
            }
            if phase == Phase::Prefill && ctx > 0 {
                let top_k = idx.map(|i| i.top_k as f64).unwrap_or(f64::INFINITY);
                for r in &c.replay {
                    let t = n * ctx.min(r.cap_tokens) as f64;
                    w.replay_tokens_layers += t;
                    // Each replayed token attends over the cached context like a new one.
                    let entries = match r.kind {
                        AttentionKind::Dense => ctx as f64,
                        AttentionKind::Compressed => ctx as f64 / r.ratio,
                        AttentionKind::Sparse => (ctx as f64 / r.ratio).min(top_k),
                        _ => 0.0,
                    } + window as f64;
                    w.replay_attn_flops += t * entries * c.pair_flops_absorbed;
                    if r.has_indexer {
                        w.replay_indexer_flops +=
                            t * ctx as f64 / r.ratio * c.indexer_flops_per_pair;
                    }
                }
            }
        }
    }
}

/// Entries read and query-key pairs of `q` queries after `ctx` cached tokens in a
/// local layer over `span` tokens: a sliding window (the last `span` tokens), or, at
/// prefill, chunked attention (each query attends to its own chunk's tokens so far:
/// `(p mod span) + 1` at position `p`). A decode step of chunked attention is priced
/// as a window of the chunk: the kernel reads from the chunk's start, `span / 2`
/// tokens on average over a long decode and at most `span`; twin takes the most,
/// since the simulator prices decode steps as affine in the context between the
/// breakpoints the model declares.
fn local_reads(q: u64, ctx: u64, span: u64, chunked: bool) -> (f64, f64) {
    if !chunked || span == 0 {
        return (
            (ctx + q).min(span + q) as f64,
            clamped_positions(q, ctx, span),
        );
    }
    // Sum of (p mod span) + 1 over positions 0..n.
    let f = |n: u64| {
        let (whole, r) = (n / span, n % span);
        whole as f64 * (span as f64 * (span as f64 + 1.0) / 2.0)
            + (r as f64 * (r as f64 + 1.0) / 2.0)
    };
    let pairs = f(ctx + q) - f(ctx);
    // The chunk(s) the queries fall in, read once.
    let first = ctx - ctx % span;
    ((ctx + q - first) as f64, pairs)
}

/// A recurrent mixer's state traffic and arithmetic for `k` request-layers of `q`
/// tokens: the request's state read and written back once per step; at prefill also
/// every chunk's state, written by the chunked kernel and read back for the outputs;
/// and the tokens' inputs and outputs.
fn recurrent_sums(cl: &AttnClass, q: u64, k: f64, prefill: bool, s: &mut ClassSums) {
    let q = q as f64;
    let (chunks, flops) = if prefill {
        ((q / cl.chunk).ceil().max(1.0), cl.prefill_flops)
    } else {
        (0.0, cl.decode_flops)
    };
    s.main_bytes +=
        k * (2.0 * cl.state_bytes + 2.0 * chunks * cl.chunk_state_bytes + q * cl.io_bytes);
    s.main_flops += k * q * flops;
    s.main_flops_unabsorbed += k * q * flops;
}
