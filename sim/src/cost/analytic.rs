//! Analytic (roofline) cost model: each operation costs the larger of its bytes over the
//! achieved bandwidth and its flops over the achieved tensor rate, plus fixed costs per
//! launch, layer and step. Efficiencies and fixed costs come from [`CostParams`]
//! (documented defaults, or a calibration profile).
//!
//! What decides the costs, as on real racks (see `shared/reference/cost-model-notes.md`):
//! - Routed experts: each rank reads the weights of every local expert that at least one
//!   of the group's tokens hits, once per step; compute grows with the routed tokens of
//!   the most loaded rank. Wider DEP → fewer experts per rank → fewer bytes per rank.
//! - The group waits for its slowest rank: attention work differs between ranks (DP
//!   imbalance) and expert load differs (multinomial routing, skew); both are reported
//!   against the same step with every rank at the mean.
//! - Attention: dense layers read all context, sparse layers read the indexer's top-k,
//!   compressed layers read one entry per `compress_ratio` tokens, window branches read
//!   the last `window` tokens; the indexer reads every compressed position.
//! - Prefill on a cached prefix: window branches replay cached context (bounded or not).
//! - Engram host gathers pay a TLB miss when the tables exceed the TLB reach.
//! - Dispatch/combine over NVLink or the scale-out network, hidden behind compute when
//!   two micro-batches overlap.

use super::{
    clamped_positions, Bound, CostModel, CostParams, KvCapacity, Layout, Op, OpRate, Phase,
    StepCost, StepShape,
};
use crate::model::{AttentionKind, FfnKind};
use crate::units::Dtype;
use crate::{Hardware, Model};

/// Layers that cost the same per token, grouped so a step is priced per class, not per
/// layer.
#[derive(Debug, Clone, PartialEq)]
struct AttnClass {
    kind: AttentionKind,
    count: f64,
    ratio: f64,
    has_indexer: bool,
    window_branch: bool,
}

/// Replay of cached context in window layers: how many layers replay how many tokens.
#[derive(Debug, Clone, PartialEq)]
struct ReplayLayer {
    /// Cap on replayed tokens for this layer (bounded: `bounded_tokens`; unbounded:
    /// the window's receptive field from this layer to the top, `window * depth`).
    cap_tokens: u64,
    /// The layer's own attention, which the replayed tokens run through in full.
    kind: AttentionKind,
    ratio: f64,
    has_indexer: bool,
}

/// Attention and indexer traffic and arithmetic, summed over requests and layers.
#[derive(Debug, Clone, Copy, Default)]
struct AttnSums {
    attn_bytes: f64,
    attn_flops: f64,
    idx_bytes: f64,
    idx_flops: f64,
}

/// Per-rank work of one step, before costing.
#[derive(Debug, Clone, Copy, Default)]
struct RankWork {
    requests: f64,
    /// Query tokens through the target model.
    tokens: f64,
    /// Tokens that reach the LM head.
    lm_tokens: f64,
    attn_s: f64,
    attn_bound: Bound,
    indexer_s: f64,
    indexer_bound: Bound,
    /// Replay: token-layers through the dense parts, and attention/indexer flops.
    replay_tokens_layers: f64,
    replay_attn_flops: f64,
    replay_indexer_flops: f64,
}

#[derive(Debug, Clone)]
pub struct AnalyticCostModel {
    pub hardware: Hardware,
    pub model: Model,
    pub layout: Layout,
    pub params: CostParams,
    // Derived once.
    layers: f64,
    moe_layers: f64,
    dense_ffn_layers: f64,
    classes: Vec<AttnClass>,
    replay: Vec<ReplayLayer>,
    hbm_bw: f64,
    attn_flops_per_pair: f64,
    indexer_flops_per_pair: f64,
    attn_proj_params: f64,
    attn_proj_bytes: f64,
    shared_params: f64,
    shared_bytes: f64,
    dense_ffn_params: f64,
    dense_ffn_bytes: f64,
    lm_head_params: f64,
    lm_head_bytes: f64,
    expert_params: f64,
    expert_bytes: f64,
    experts_per_rank: f64,
    redundant_per_rank: f64,
    link_bw: f64,
    link_latency_s: f64,
}

impl AnalyticCostModel {
    pub fn new(hardware: Hardware, model: Model, layout: Layout, params: CostParams) -> Self {
        let expanded = model.expand_layers();
        let layers = expanded.len() as f64;
        let moe_layers = expanded.iter().filter(|l| l.ffn == FfnKind::Moe).count() as f64;
        let dense_ffn_layers = layers - moe_layers;
        let mut classes: Vec<AttnClass> = Vec::new();
        for l in &expanded {
            let c = AttnClass {
                kind: l.attention,
                count: 1.0,
                ratio: l.compress_ratio as f64,
                has_indexer: l.has_indexer,
                window_branch: l.window_branch && l.attention != AttentionKind::Window,
            };
            match classes.iter_mut().find(|x| {
                x.kind == c.kind
                    && x.ratio == c.ratio
                    && x.has_indexer == c.has_indexer
                    && x.window_branch == c.window_branch
            }) {
                Some(x) => x.count += 1.0,
                None => classes.push(c),
            }
        }
        let a = &model.attention;
        let mut replay = Vec::new();
        if let Some(r) = &a.replay {
            let window = a.window as u64;
            let n = expanded.len() as u64;
            for l in &expanded {
                if !l.window_branch {
                    continue;
                }
                let cap = if l.index < r.bounded_layers {
                    r.bounded_tokens as u64
                } else {
                    // Exact recompute: the top layer's window needs `window` tokens at
                    // this layer for every layer above it (receptive field).
                    window * (n - l.index as u64)
                };
                replay.push(ReplayLayer {
                    cap_tokens: cap,
                    kind: l.attention,
                    ratio: l.compress_ratio as f64,
                    has_indexer: l.has_indexer,
                });
            }
        }
        let h = model.hidden as f64;
        let attn_proj_params = model.attention_params_per_layer();
        let (shared_params, shared_bytes) = match &model.moe {
            Some(m) => {
                let p = 3.0 * h * m.expert_ffn as f64 * m.shared_experts as f64;
                (p, p * m.shared_weight_dtype.bytes())
            }
            None => (0.0, 0.0),
        };
        let (dense_ffn_params, dense_ffn_bytes) = match &model.dense_ffn {
            Some(d) => {
                let p = 3.0 * h * d.ffn as f64;
                (p, p * d.weight_dtype.bytes())
            }
            None => (0.0, 0.0),
        };
        let lm_head_params = model.vocab as f64 * h;
        let (experts_per_rank, redundant_per_rank) = match &model.moe {
            Some(m) => (
                m.routed_experts as f64 / layout.dep.max(1) as f64,
                layout.redundant_experts as f64 / layout.dep.max(1) as f64,
            ),
            None => (0.0, 0.0),
        };
        let in_domain = layout.dep <= hardware.nvlink_domain_gpus;
        let (link_bw, link_latency_s) = if in_domain {
            (hardware.nvlink.bytes_per_s, hardware.nvlink.latency_s)
        } else {
            (hardware.scaleout.bytes_per_s, hardware.scaleout.latency_s)
        };
        let indexer_flops_per_pair = a
            .indexer
            .as_ref()
            .map(|i| 2.0 * i.heads as f64 * i.head_dim as f64)
            .unwrap_or(0.0);
        AnalyticCostModel {
            hbm_bw: hardware.hbm.bytes_per_s,
            attn_flops_per_pair: 2.0 * a.heads as f64 * (a.score_dim + a.value_dim) as f64,
            indexer_flops_per_pair,
            attn_proj_params,
            attn_proj_bytes: attn_proj_params * a.weight_dtype.bytes(),
            shared_params,
            shared_bytes,
            dense_ffn_params,
            dense_ffn_bytes,
            lm_head_params,
            lm_head_bytes: lm_head_params * model.embedding_dtype.bytes(),
            expert_params: model.expert_params(),
            expert_bytes: model.expert_bytes(),
            experts_per_rank,
            redundant_per_rank,
            link_bw,
            link_latency_s,
            layers,
            moe_layers,
            dense_ffn_layers,
            classes,
            replay,
            hardware,
            model,
            layout,
            params,
        }
    }

    /// Seconds for `bytes` at `bw * eff` and `flops` at `rate * eff`, whichever binds.
    fn roofline(bytes: f64, bw: f64, flops: f64, rate: f64, r: &OpRate) -> (f64, Bound) {
        let mem = if bytes > 0.0 {
            bytes / (bw * r.mem_eff)
        } else {
            0.0
        };
        let cmp = if flops > 0.0 {
            flops / (rate * r.compute_eff)
        } else {
            0.0
        };
        if mem >= cmp {
            (
                mem,
                if bytes > 0.0 {
                    Bound::Memory
                } else {
                    Bound::None
                },
            )
        } else {
            (cmp, Bound::Compute)
        }
    }

    fn tensor_rate(&self, dtype: Dtype) -> f64 {
        self.hardware.tensor.flops_per_s(dtype)
    }

    /// Adds the attention and indexer bytes and flops of `n` requests with `q` queries
    /// each on `ctx` cached tokens, over all layers.
    #[inline]
    fn attn_sums(&self, q: u64, ctx: u64, n: f64, s: &mut AttnSums) {
        let a = &self.model.attention;
        let idx = a.indexer.as_ref();
        let window = a.window as u64;
        // Causal query-key pairs over all positions, and the positions stored.
        let all_pairs = clamped_positions(q, ctx, u64::MAX);
        let stored = (ctx + q) as f64;
        let window_read = (ctx + q).min(window + q) as f64;
        let window_pairs = clamped_positions(q, ctx, window);
        for c in &self.classes {
            let (entries_read, pairs) = match c.kind {
                AttentionKind::Dense => (stored, all_pairs),
                AttentionKind::Compressed => (stored / c.ratio, all_pairs / c.ratio),
                AttentionKind::Sparse => {
                    let top_k = idx.map(|i| i.top_k as u64).unwrap_or(u64::MAX);
                    let cap = top_k.saturating_mul(c.ratio as u64);
                    let pairs = clamped_positions(q, ctx, cap) / c.ratio;
                    // Decode reads the union of the queries' selections.
                    let read = (stored / c.ratio).min(q as f64 * top_k as f64);
                    (read, pairs)
                }
                AttentionKind::Window => (window_read, window_pairs),
            };
            let entry_bytes = if c.kind == AttentionKind::Window {
                a.window_entry_bytes
            } else {
                a.kv_entry_bytes
            };
            let k = n * c.count;
            s.attn_bytes += k * entries_read * entry_bytes;
            s.attn_flops += k * pairs * self.attn_flops_per_pair;
            if c.window_branch {
                s.attn_bytes += k * window_read * a.window_entry_bytes;
                s.attn_flops += k * window_pairs * self.attn_flops_per_pair;
            }
            if c.has_indexer {
                if let Some(i) = idx {
                    s.idx_bytes += k * stored / c.ratio * i.key_bytes;
                    s.idx_flops += k * all_pairs / c.ratio * self.indexer_flops_per_pair;
                }
            }
        }
    }

    fn finish_attention(&self, s: &AttnSums, w: &mut RankWork) {
        let a = &self.model.attention;
        let p = &self.params;
        let attn_rate = self.tensor_rate(a.compute_dtype);
        let idx_rate = a
            .indexer
            .as_ref()
            .map(|i| self.tensor_rate(i.dtype))
            .unwrap_or(1.0);
        (w.attn_s, w.attn_bound) = Self::roofline(
            s.attn_bytes,
            self.hbm_bw,
            s.attn_flops,
            attn_rate,
            &p.attention,
        );
        (w.indexer_s, w.indexer_bound) =
            Self::roofline(s.idx_bytes, self.hbm_bw, s.idx_flops, idx_rate, &p.indexer);
    }

    /// Attention, indexer and replay work of one rank with `q_per_req` decode queries
    /// per request; with `draft`, also the same rank's work at one query per request
    /// (an MTP draft pass), from the same walk over the requests.
    fn rank_work(
        &self,
        shape: &StepShape<'_>,
        rank: &[super::ReqSlice],
        q_per_req: u64,
        draft: bool,
    ) -> (RankWork, RankWork) {
        let a = &self.model.attention;
        let idx = a.indexer.as_ref();
        let window = a.window as u64;
        let mut sums = AttnSums::default();
        let mut draft_sums = AttnSums::default();
        let mut w = RankWork::default();
        let mut d = RankWork::default();
        for s in rank {
            let n = s.count as f64;
            let ctx = s.context_tokens;
            let q = match shape.phase {
                Phase::Decode => q_per_req,
                Phase::Prefill => s.new_tokens as u64,
            };
            if q == 0 || n == 0.0 {
                continue;
            }
            w.requests += n;
            w.tokens += n * q as f64;
            w.lm_tokens += match shape.phase {
                Phase::Decode => n * q as f64,
                Phase::Prefill => n,
            };
            self.attn_sums(q, ctx, n, &mut sums);
            if draft {
                d.requests += n;
                d.tokens += n;
                d.lm_tokens += n;
                self.attn_sums(1, ctx, n, &mut draft_sums);
            }
            if shape.phase == Phase::Prefill && ctx > 0 {
                let top_k = idx.map(|i| i.top_k as f64).unwrap_or(f64::INFINITY);
                for r in &self.replay {
                    let t = n * ctx.min(r.cap_tokens) as f64;
                    w.replay_tokens_layers += t;
                    // Each replayed token attends over the cached context like a new one.
                    let entries = match r.kind {
                        AttentionKind::Dense => ctx as f64,
                        AttentionKind::Compressed => ctx as f64 / r.ratio,
                        AttentionKind::Sparse => (ctx as f64 / r.ratio).min(top_k),
                        AttentionKind::Window => 0.0,
                    } + window as f64;
                    w.replay_attn_flops += t * entries * self.attn_flops_per_pair;
                    if r.has_indexer {
                        w.replay_indexer_flops +=
                            t * ctx as f64 / r.ratio * self.indexer_flops_per_pair;
                    }
                }
            }
        }
        self.finish_attention(&sums, &mut w);
        if draft {
            self.finish_attention(&draft_sums, &mut d);
        }
        (w, d)
    }

    /// Rank-local time other than attention/indexer: projections, shared expert, dense
    /// FFN, LM head, Engram, mHC, replay. Returns (op, seconds, bound) triples.
    fn rank_local(&self, w: &RankWork) -> [(Op, f64, Bound); 6] {
        let p = &self.params;
        let t = w.tokens;
        let a_dtype = self.model.attention.weight_dtype;
        // Dense: attention projections (every layer), dense FFN layers, LM head.
        let (proj, proj_b) = Self::roofline(
            self.attn_proj_bytes * self.layers,
            self.hbm_bw,
            2.0 * self.attn_proj_params * t * self.layers,
            self.tensor_rate(a_dtype),
            &p.gemm,
        );
        let dense_dtype = self
            .model
            .dense_ffn
            .as_ref()
            .map(|d| d.weight_dtype)
            .unwrap_or(a_dtype);
        let (dffn, _) = Self::roofline(
            self.dense_ffn_bytes * self.dense_ffn_layers,
            self.hbm_bw,
            2.0 * self.dense_ffn_params * t * self.dense_ffn_layers,
            self.tensor_rate(dense_dtype),
            &p.gemm,
        );
        let (lm, _) = Self::roofline(
            self.lm_head_bytes,
            self.hbm_bw,
            2.0 * self.lm_head_params * w.lm_tokens,
            self.tensor_rate(self.model.embedding_dtype),
            &p.gemm,
        );
        let dense_fixed = p.gemm.fixed_s * (self.layers + self.dense_ffn_layers + 1.0);
        let dense = proj + dffn + lm + dense_fixed;
        // Shared expert on every MoE layer.
        let (shared, shared_b) = match &self.model.moe {
            Some(m) if self.shared_params > 0.0 => Self::roofline(
                self.shared_bytes * self.moe_layers,
                self.hbm_bw,
                2.0 * self.shared_params * t * self.moe_layers,
                self.tensor_rate(m.shared_weight_dtype),
                &p.gemm,
            ),
            _ => (0.0, Bound::None),
        };
        let shared = if shared > 0.0 {
            shared + p.gemm.fixed_s * self.moe_layers
        } else {
            0.0
        };
        // Engram gathers.
        let (engram, engram_b) = match &self.model.engram {
            Some(e) if t > 0.0 => {
                let modules = e.at_layers.len() as f64;
                let gathers = t * modules * e.gathers_per_token_per_module() as f64;
                let bytes = gathers * e.row_bytes();
                let (bw, miss) = if e.host_resident {
                    let reach = self.hardware.tlb.entries as f64 * e.page_size.as_f64();
                    let table = e.table_bytes();
                    let p_miss = if table > reach {
                        1.0 - reach / table
                    } else {
                        0.0
                    };
                    (
                        self.hardware.host.link_bytes_per_s,
                        p_miss * self.hardware.tlb.miss_s,
                    )
                } else {
                    (self.hbm_bw, 0.0)
                };
                let time =
                    bytes / (bw * p.gather.mem_eff) + gathers * miss + p.gather.fixed_s * modules;
                (
                    time,
                    if e.host_resident {
                        Bound::Link
                    } else {
                        Bound::Memory
                    },
                )
            }
            _ => (0.0, Bound::None),
        };
        // mHC stream mixing: element traffic per token per layer, bf16.
        let (mhc, mhc_b) = match &self.model.mhc {
            Some(m) if t > 0.0 => {
                let n = m.streams as f64;
                let elems = if m.fused {
                    2.0 * n + 2.0
                } else {
                    4.0 * n + 4.0
                };
                let bytes = t * self.layers * elems * self.model.hidden as f64 * 2.0;
                (
                    bytes / (self.hbm_bw * p.elementwise.mem_eff)
                        + p.elementwise.fixed_s * self.layers,
                    Bound::Memory,
                )
            }
            _ => (0.0, Bound::None),
        };
        // Window replay: replayed tokens run through their layer (projections, shared
        // expert, routed experts at compute rate, window attention).
        let replay = if w.replay_tokens_layers > 0.0 {
            let per_token_layer_flops = 2.0
                * (self.attn_proj_params
                    + self.shared_params
                    + self.expert_params
                        * self.model.moe.as_ref().map(|m| m.top_k).unwrap_or(0) as f64);
            let gemm_rate = self.tensor_rate(a_dtype) * p.gemm.compute_eff;
            let attn_rate =
                self.tensor_rate(self.model.attention.compute_dtype) * p.attention.compute_eff;
            let idx_rate = self
                .model
                .attention
                .indexer
                .as_ref()
                .map(|i| self.tensor_rate(i.dtype) * p.indexer.compute_eff)
                .unwrap_or(1.0);
            w.replay_tokens_layers * per_token_layer_flops / gemm_rate
                + w.replay_attn_flops / attn_rate
                + w.replay_indexer_flops / idx_rate
        } else {
            0.0
        };
        [
            (Op::Dense, dense, proj_b),
            (Op::SharedExpert, shared, shared_b),
            (Op::Engram, engram, engram_b),
            (Op::Mhc, mhc, mhc_b),
            (Op::WindowReplay, replay, Bound::Compute),
            (Op::Overhead, 0.0, Bound::None),
        ]
    }

    /// Routed-expert time for `pairs_on_rank` token-expert pairs on one rank when the
    /// whole group routes `group_tokens` tokens.
    fn moe_time(&self, group_tokens: f64, pairs_on_rank: f64) -> (f64, Bound, f64, f64) {
        let Some(m) = &self.model.moe else {
            return (0.0, Bound::None, 0.0, 0.0);
        };
        if group_tokens <= 0.0 {
            return (0.0, Bound::None, 0.0, 0.0);
        }
        let e = m.routed_experts as f64;
        let k = m.top_k as f64;
        let slots = self.experts_per_rank + self.redundant_per_rank;
        // Probability that a given expert is hit by none of the group's tokens.
        let miss = (1.0 - k / e).powf(group_tokens);
        let touched = slots * (1.0 - miss);
        let bytes = touched * self.expert_bytes;
        let flops = 2.0 * self.expert_params * pairs_on_rank;
        let (t, b) = Self::roofline(
            bytes,
            self.hbm_bw,
            flops,
            self.tensor_rate(m.weight_dtype),
            &self.params.moe,
        );
        (t + self.params.moe.fixed_s, b, bytes, touched)
    }

    /// Dispatch + combine seconds per MoE layer for a rank sending `tokens` tokens.
    fn comm_time(&self, tokens: f64) -> f64 {
        let Some(m) = &self.model.moe else { return 0.0 };
        let d = self.layout.dep as f64;
        if d <= 1.0 || tokens <= 0.0 {
            return 0.0;
        }
        // Each token goes once to each distinct remote rank among its experts' ranks.
        let dest = d * (1.0 - (1.0 - 1.0 / d).powf(m.top_k as f64)) * (d - 1.0) / d;
        let h = self.model.hidden as f64;
        let bytes = tokens
            * dest
            * h
            * (self.model.dispatch_dtype.bytes() + self.model.combine_dtype.bytes());
        bytes / (self.link_bw * self.params.comm.mem_eff)
            + 2.0 * (self.link_latency_s + self.params.comm.fixed_s)
    }

    /// Per-peer signalling of dispatch + combine per MoE layer: every rank waits for
    /// every peer's arrival flag, so this part is serial even when transfers overlap.
    fn comm_sync_time(&self) -> f64 {
        let d = self.layout.dep as f64;
        if self.model.moe.is_none() || d <= 1.0 {
            return 0.0;
        }
        2.0 * (d - 1.0) * self.params.comm_per_peer_s
    }

    /// Prices the step from each rank's work (the target model, or one draft pass).
    fn step_from_works(&self, phase: Phase, works: &[RankWork]) -> StepCost {
        let d = works.len().max(1) as f64;
        let total_tokens: f64 = works.iter().map(|w| w.tokens).sum();
        let mut out = StepCost {
            tokens_processed: total_tokens.round() as u64,
            ..Default::default()
        };
        if total_tokens <= 0.0 {
            return out;
        }
        // Rank-local time per rank; the critical rank is the slowest.
        let mut max_i = 0;
        let mut max_local = f64::MIN;
        let mut max_parts = [(Op::Overhead, 0.0, Bound::None); 6];
        let mut mean_local = 0.0;
        for (i, w) in works.iter().enumerate() {
            let parts = self.rank_local(w);
            let sum: f64 = w.attn_s + w.indexer_s + parts.iter().map(|p| p.1).sum::<f64>();
            if sum > max_local {
                max_i = i;
                max_local = sum;
                max_parts = parts;
            }
            mean_local += sum / d;
        }
        let crit = &works[max_i];
        for (op, t, b) in max_parts {
            out.op_s[op.index()] += t;
            if t > 0.0 {
                out.op_bound[op.index()] = b;
            }
        }
        out.op_s[Op::Attention.index()] += crit.attn_s;
        out.op_bound[Op::Attention.index()] = crit.attn_bound;
        out.op_s[Op::Indexer.index()] += crit.indexer_s;
        out.op_bound[Op::Indexer.index()] = crit.indexer_bound;
        // Attention launches are fixed per layer.
        let p = &self.params;
        out.op_s[Op::Attention.index()] += p.attention.fixed_s * self.layers;
        let idx_layers: f64 = self
            .classes
            .iter()
            .filter(|c| c.has_indexer)
            .map(|c| c.count)
            .sum();
        out.op_s[Op::Indexer.index()] += p.indexer.fixed_s * idx_layers;

        // Routed experts: the most loaded rank; expert load ~ multinomial with
        // dispersion, expected max over D ranks ~ mean + sigma * sqrt(2 ln D).
        let mut moe_s = 0.0;
        let mut moe_bal = 0.0;
        let mut comm_layer = 0.0;
        let mut comm_bal = 0.0;
        if let Some(m) = &self.model.moe {
            let pairs = total_tokens * m.top_k as f64;
            let mean = pairs / d;
            let sigma = (mean * (1.0 - 1.0 / d) * m.load_dispersion).sqrt();
            let balancing = if self.redundant_per_rank > 0.0 {
                self.experts_per_rank / (self.experts_per_rank + self.redundant_per_rank)
            } else {
                1.0
            };
            let z = if d > 1.0 { (2.0 * d.ln()).sqrt() } else { 0.0 };
            let max_pairs = mean + z * sigma * balancing;
            let (t, b, bytes, touched) = self.moe_time(total_tokens, max_pairs);
            let (tb, _, _, _) = self.moe_time(total_tokens, mean);
            moe_s = t * self.moe_layers;
            moe_bal = tb * self.moe_layers;
            out.op_bound[Op::Moe.index()] = b;
            out.moe_weight_bytes_per_rank = bytes * self.moe_layers;
            out.experts_touched_per_rank = touched;
            let max_tokens = works.iter().map(|w| w.tokens).fold(0.0, f64::max);
            comm_layer = self.comm_time(max_tokens);
            comm_bal = self.comm_time(total_tokens / d);
        }
        out.op_s[Op::Moe.index()] = moe_s;
        // Communication per MoE layer, hidden behind the other micro-batch's compute
        // when overlapped.
        let exposed = |comm: f64, compute_total: f64| -> f64 {
            if self.moe_layers == 0.0 {
                return 0.0;
            }
            if self.layout.overlap_microbatches {
                let per_layer_compute = compute_total / self.moe_layers;
                (comm - per_layer_compute).max(0.0) * self.moe_layers
            } else {
                comm * self.moe_layers
            }
        };
        let compute_crit = max_local + moe_s;
        let compute_bal = mean_local + moe_bal;
        let sync = self.comm_sync_time() * self.moe_layers;
        out.op_s[Op::Communication.index()] = exposed(comm_layer, compute_crit) + sync;
        if out.op_s[Op::Communication.index()] > 0.0 {
            out.op_bound[Op::Communication.index()] = Bound::Link;
        }
        let (layer_fixed, step_fixed) = match phase {
            Phase::Decode => (p.layer_fixed_decode_s, p.step_fixed_decode_s),
            Phase::Prefill => (p.layer_fixed_prefill_s, p.step_fixed_prefill_s),
        };
        let fixed = layer_fixed * self.layers + step_fixed;
        out.op_s[Op::Overhead.index()] += fixed;
        out.op_bound[Op::Overhead.index()] = Bound::Latency;
        out.step_s = out.op_s.iter().sum();
        out.balanced_step_s = compute_bal
            + exposed(comm_bal, compute_bal)
            + sync
            + fixed
            + p.attention.fixed_s * self.layers
            + p.indexer.fixed_s * idx_layers;
        out
    }

    /// One MTP draft pass: one average layer of the model over one token per request,
    /// plus the LM head and a layer's fixed cost.
    fn draft_pass_s(&self, draft_works: &[RankWork]) -> f64 {
        let one = self.step_from_works(Phase::Decode, draft_works);
        let per_layer = (one.step_s - one.op(Op::Overhead)) / self.layers.max(1.0);
        per_layer + self.lm_head_only(draft_works) + self.params.layer_fixed_decode_s
    }

    /// The LM head over one token per request on the rank with the most requests.
    fn lm_head_only(&self, draft_works: &[RankWork]) -> f64 {
        let max_req = draft_works.iter().map(|w| w.requests).fold(0.0, f64::max);
        Self::roofline(
            self.lm_head_bytes,
            self.hbm_bw,
            2.0 * self.lm_head_params * max_req,
            self.tensor_rate(self.model.embedding_dtype),
            &self.params.gemm,
        )
        .0
    }

    /// Bytes of weights resident on one rank.
    pub fn weight_bytes_per_rank(&self) -> f64 {
        let routed = match &self.model.moe {
            Some(_) => {
                (self.experts_per_rank + self.redundant_per_rank)
                    * self.expert_bytes
                    * self.moe_layers
            }
            None => 0.0,
        };
        let mtp = if self.model.mtp.is_some() {
            self.attn_proj_bytes + self.shared_bytes + self.experts_per_rank * self.expert_bytes
        } else {
            0.0
        };
        routed
            + self.attn_proj_bytes * self.layers
            + self.shared_bytes * self.moe_layers
            + self.dense_ffn_bytes * self.dense_ffn_layers
            + 2.0 * self.lm_head_bytes
            + mtp
    }

    /// HBM left for KV on one rank after weights and an activation/graph reserve
    /// (assumed 8% of usable HBM).
    pub fn kv_bytes_per_rank(&self) -> f64 {
        let usable = self.hardware.hbm.usable.as_f64();
        usable * 0.92 - self.weight_bytes_per_rank()
    }
}

impl CostModel for AnalyticCostModel {
    fn step(&self, shape: &StepShape<'_>) -> StepCost {
        debug_assert!(
            shape.ranks.len() == self.layout.dep as usize,
            "step has {} ranks, layout has DEP {}",
            shape.ranks.len(),
            self.layout.dep
        );
        let drafting = shape.phase == Phase::Decode && shape.draft_tokens > 0;
        let q = 1 + if drafting {
            shape.draft_tokens as u64
        } else {
            0
        };
        let mut works = Vec::with_capacity(shape.ranks.len());
        let mut draft_works = Vec::with_capacity(if drafting { shape.ranks.len() } else { 0 });
        for rank in shape.ranks {
            let (w, d) = self.rank_work(shape, rank, q, drafting);
            works.push(w);
            if drafting {
                draft_works.push(d);
            }
        }
        let mut cost = self.step_from_works(shape.phase, &works);
        if drafting && cost.tokens_processed > 0 {
            let draft = shape.draft_tokens as f64 * self.draft_pass_s(&draft_works);
            cost.op_s[Op::MtpDraft.index()] = draft;
            cost.op_bound[Op::MtpDraft.index()] = Bound::Latency;
            cost.step_s += draft;
            cost.balanced_step_s += draft;
        }
        cost
    }

    fn describe(&self) -> String {
        self.params.source.clone()
    }

    /// Where `attn_sums` changes form for a decode request with `q` queries: the
    /// window (reads and causal pairs clamp at `window`), each sparse class's cap
    /// (`top_k * ratio` positions) and the point where the union of the queries'
    /// selections saturates (`q * top_k * ratio - q`). Where a step's `q` queries
    /// straddle a causal clamp (contexts `cap - q ..= cap`) the pair count is
    /// quadratic in the context, so each of those contexts is a piece of its own.
    fn decode_context_breakpoints(&self, draft_tokens: u32) -> Vec<u64> {
        let a = &self.model.attention;
        let top_k = a.indexer.as_ref().map(|i| i.top_k as u64);
        let mut bp = Vec::new();
        for q in [1u64, 1 + draft_tokens as u64] {
            let straddle = |bp: &mut Vec<u64>, cap: u64| bp.extend(cap.saturating_sub(q)..=cap);
            straddle(&mut bp, a.window as u64);
            for c in &self.classes {
                if c.kind == AttentionKind::Sparse {
                    if let Some(k) = top_k {
                        let cap = k.saturating_mul(c.ratio as u64);
                        straddle(&mut bp, cap);
                        let union = q.saturating_mul(cap);
                        bp.push(union.saturating_sub(q));
                    }
                }
            }
        }
        bp.retain(|&b| b > 0 && b < u64::MAX / 2);
        bp.sort_unstable();
        bp.dedup();
        bp
    }
}

impl KvCapacity for AnalyticCostModel {
    fn kv_capacity_tokens_per_rank(&self) -> u64 {
        let bytes = self.kv_bytes_per_rank();
        if bytes <= 0.0 || self.model.kv.bytes_per_token <= 0.0 {
            0
        } else {
            (bytes / self.model.kv.bytes_per_token) as u64
        }
    }
}
