//! One rank's attention: each attention class priced by twin's roofline per kernel
//! class or by the engine's measured kernel tables (GQA/MHA), the slowest rank's per
//! class, the MLA path (absorbed or un-absorbed) of a prefill, and the recompute of
//! cached context in window layers (replay).

use super::stages::Local;
use super::work::RankWork;
use super::AnalyticCostModel;
use crate::cost::kernels::attention::{self, AttnKernel, AttnWork};
use crate::cost::kernels::gemm::KernelTime;
use crate::cost::tables::family::Shape;
use crate::cost::Phase;
use spec::model::AttentionKind;

/// The sequence length whose causal query-key pairs are `pairs`: `L^2 / 2` over full
/// attention; over a window of `w` tokens, `L w - w^2 / 2` once `L` passes `w` (the
/// tables' own accounting of a prefill, `kernels::tables::family`).
pub(super) fn causal_length(pairs: f64, window: f64) -> f64 {
    if window > 0.0 && pairs > window * window / 2.0 {
        (pairs + window * window / 2.0) / window
    } else {
        (2.0 * pairs).sqrt()
    }
}

impl AnalyticCostModel {
    /// One layer's attention of class `ci` for `w` from the engine's measured kernel
    /// tables, where the model's attention is a GQA/MHA kernel (K and V cached per KV
    /// head: no MLA latent, no indexer, no window branch) of a head size, KV dtype and
    /// window kind the tables time. The rank's requests price as one batch at their
    /// mean shape: decode at the mean KV entries read (one query per request; several,
    /// as under speculative decoding, stay with twin's model); prefill at the
    /// sequence length whose causal (or windowed) query-key pairs are the requests'
    /// mean, so a chunk against a cached prefix prices its real arithmetic.
    fn table_attention(&self, phase: Phase, w: &RankWork, ci: usize) -> Option<f64> {
        let t = self.params.tables.as_ref()?;
        let a = &self.model.attention;
        let c = &self.compiled;
        let cl = &c.classes[ci];
        let plain =
            a.kv_up_params == 0 && a.indexer.is_none() && !cl.window_branch && cl.shape.is_none();
        let windowed = match cl.kind {
            AttentionKind::Dense => false,
            AttentionKind::Window => true,
            _ => return None,
        };
        if !plain || w.requests <= 0.0 || a.qk_head_dim == 0 {
            return None;
        }
        let head_dim = a.qk_head_dim as f64;
        let kv_heads = a.kv_heads.max(1) as f64;
        let entry = if windowed {
            a.window_entry_bytes
        } else {
            a.kv_entry_bytes
        };
        // Bytes of one cached token's K and V per KV head and dimension: 1 (FP8) or 2.
        let kv_fp8 = entry / (2.0 * kv_heads * head_dim) < 1.5;
        let window = if windowed { a.window as f64 } else { 0.0 };
        let heads = (a.heads as f64 / c.tp).max(1.0);
        let kv_gpu = (kv_heads / c.tp).max(1.0);
        let s = &w.classes[ci];
        let per_request = 1.0 / (cl.count * w.requests);
        let shape = match phase {
            Phase::Decode => {
                if w.tokens > w.requests * 1.0001 {
                    return None;
                }
                let read = s.main_bytes * per_request / (entry * c.kv_share);
                Shape::DecodeAttention {
                    kernel: String::new(),
                    batch: w.requests,
                    heads,
                    kv_heads: kv_gpu,
                    head_dim,
                    context: read.max(1.0),
                    window,
                    kv_fp8,
                }
            }
            Phase::Prefill => {
                let sinks = w.tokens * c.sink_flops_per_query * cl.count;
                let pairs = (s.main_flops - sinks).max(0.0) * per_request / c.pair_flops_absorbed;
                Shape::PrefillAttention {
                    kernel: String::new(),
                    batch: w.requests,
                    isl: causal_length(pairs, window).max(1.0),
                    heads,
                    kv_heads: kv_gpu,
                    head_dim,
                    window,
                    fp8: a.compute_dtype.bytes() < 2.0,
                    kv_fp8,
                }
            }
        };
        Some(t.price_attention(&self.hardware, &shape)? * self.params.table_draw.attention)
    }

    /// Attention and indexer seconds of one layer of class `ci` for `w`, with `unabsorbed`
    /// widths for dense MLA prefill.
    fn class_attention(
        &self,
        phase: Phase,
        w: &RankWork,
        ci: usize,
        unabsorbed: bool,
    ) -> (KernelTime, KernelTime) {
        let c = &self.compiled;
        let cl = &c.classes[ci];
        let s = &w.classes[ci];
        let per = 1.0 / cl.count;
        let p = &self.params;
        let a = &self.model.attention;
        let hbm = self.hardware.hbm.bytes_per_s;
        if cl.kind == AttentionKind::None {
            return (KernelTime::default(), KernelTime::default());
        }
        // Recurrent mixers compute in BF16 (their state in FP32 is read, not
        // multiplied at a narrower width).
        let compute = if cl.kind.is_recurrent() {
            spec::dtype::Dtype::Bf16
        } else {
            a.compute_dtype
        };
        let peak = self.hardware.tensor.flops_per_s(compute);
        let kernel = match cl.kind {
            AttentionKind::Sparse => AttnKernel::Sparse,
            k if k.is_recurrent() => AttnKernel::Recurrent,
            _ => AttnKernel::Dense,
        };
        let main_flops = if unabsorbed && kernel == AttnKernel::Dense {
            s.main_flops_unabsorbed
        } else {
            s.main_flops
        };
        let seq = w.seq_tokens();
        let main = AttnWork {
            kernel,
            phase,
            bytes: s.main_bytes * per,
            flops: main_flops * per,
            seq_tokens: seq,
        };
        let mut t = attention::time(p, &main, hbm, peak);
        t.s = match self.table_attention(phase, w, ci) {
            Some(s) => s,
            None => t.s + attention::rate(p, kernel, phase).fixed_s,
        };
        if cl.window_branch {
            let win = AttnWork {
                kernel: AttnKernel::Dense,
                phase,
                bytes: s.win_bytes * per,
                flops: s.win_flops * per,
                seq_tokens: seq,
            };
            let win = attention::time(p, &win, hbm, peak);
            t.s += win.s + attention::rate(p, AttnKernel::Dense, phase).fixed_s;
        }
        let mut idx = KernelTime::default();
        if cl.has_indexer {
            if let Some(i) = &a.indexer {
                let rate = self.hardware.tensor.flops_per_s(i.dtype);
                idx = attention::roofline(
                    s.idx_bytes * per,
                    hbm,
                    s.idx_flops * per,
                    rate,
                    &p.indexer,
                    1.0,
                );
                idx.s += p.indexer.fixed_s;
            }
        }
        (t, idx)
    }

    /// Per rank: MLA's path, attention, indexer and replay, the slowest rank's of each
    /// kept in `out` (attention and indexer) or returned (MLA's seconds and replay's).
    /// `proj_s`: the projections' seconds at `out.tokens` (replay prices by them).
    #[inline]
    pub(super) fn rank_attention(
        &self,
        phase: Phase,
        works: &[RankWork],
        scale: f64,
        proj_s: f64,
        out: &mut Local,
    ) -> (f64, f64) {
        let c = &self.compiled;
        let uniform = works.iter().all(|w| *w == works[0]);
        let mut mla_max: f64 = 0.0;
        let mut replay_max: f64 = 0.0;
        for (r, w0) in works.iter().enumerate() {
            if uniform && r > 0 {
                break;
            }
            let w = w0.scaled(scale);
            if w.all_tokens() <= 0.0 {
                continue;
            }
            let (unabsorbed, mla_s) = self.mla_path(phase, &w);
            mla_max = mla_max.max(mla_s);
            replay_max = replay_max.max(self.replay_s(&w, proj_s, out.tokens));
            let riders = w.riders_work();
            for (ti, ty) in c.types.iter().enumerate() {
                let (mut at, mut ix) = if w.tokens > 0.0 {
                    self.class_attention(phase, &w, ty.class, unabsorbed)
                } else {
                    Default::default()
                };
                // A mixed step's decode requests: a decode kernel over their contexts.
                if let Some(rw) = &riders {
                    let (ra, ri) = self.class_attention(Phase::Decode, rw, ty.class, false);
                    at = then(at, ra);
                    ix = then(ix, ri);
                }
                let x = &mut out.types[ti];
                if at.s > x.attention {
                    x.attention = at.s;
                    out.attn_bound = at.bound;
                }
                if ix.s > x.indexer {
                    x.indexer = ix.s;
                    out.indexer_bound = ix.bound;
                }
            }
        }
        (mla_max, replay_max)
    }

    /// MLA's path for one rank's work `w`: absorbed, or at prefill the up-projection of
    /// the context when that makes the attention cheaper. Whether it runs un-absorbed,
    /// and its GEMMs' seconds.
    #[inline]
    fn mla_path(&self, phase: Phase, w: &RankWork) -> (bool, f64) {
        let c = &self.compiled;
        let absorb: f64 = c
            .absorb
            .iter()
            .map(|g| self.gemm(g, w.all_tokens()).0)
            .sum();
        match (&c.kv_up, phase) {
            (Some(up), Phase::Prefill) => {
                let up_s = self.gemm(up, w.kv_up_tokens).0;
                let (mut un, mut ab) = (up_s, absorb);
                for ci in 0..c.classes.len() {
                    un += self.class_attention(phase, w, ci, true).0.s;
                    ab += self.class_attention(phase, w, ci, false).0.s;
                }
                if un < ab {
                    (true, up_s)
                } else {
                    (false, absorb)
                }
            }
            _ => (false, absorb),
        }
    }

    /// Window replay per layer: replayed tokens run through their layer like new ones
    /// (projections, shared and routed experts, element-wise kernels, window
    /// attention), at the efficiency this step's projections achieve; spread over the
    /// layers.
    /// `proj_s`: the projections' time at `proj_tokens` tokens (their achieved
    /// efficiency prices the replayed tokens' GEMMs).
    fn replay_s(&self, w: &RankWork, proj_s: f64, proj_tokens: f64) -> f64 {
        if w.replay_tokens_layers <= 0.0 || proj_tokens <= 0.0 || proj_s <= 0.0 {
            return 0.0;
        }
        let c = &self.compiled;
        let p = &self.params;
        // Token-expert pairs a GPU computes per replayed token (TP with expert
        // parallelism spreads them over its GPUs; sliced experts are already per GPU).
        let top_k = self.model.moe.as_ref().map(|m| m.top_k).unwrap_or(0) as f64
            / if c.a2a { 1.0 } else { c.expert_ranks };
        let rate = self
            .hardware
            .tensor
            .flops_per_s(self.model.attention.weight_dtype);
        // The projections' achieved fraction of the tensor rate at this step's size.
        let achieved = (2.0 * c.attn_proj_params * proj_tokens / (proj_s * rate)).min(1.0);
        let flops = 2.0 * (c.attn_proj_params + c.shared_params + c.expert_params * top_k);
        let elem = c.elem_attn_bytes + c.elem_moe_bytes + top_k * c.elem_pair_bytes;
        let elem_bw = self.hardware.hbm.bytes_per_s * p.elementwise.mem_eff;
        let attn_rate = self
            .hardware
            .tensor
            .flops_per_s(self.model.attention.compute_dtype)
            * p.attention_prefill.compute_eff;
        let idx_rate = self
            .model
            .attention
            .indexer
            .as_ref()
            .map(|i| self.hardware.tensor.flops_per_s(i.dtype) * p.indexer.compute_eff)
            .unwrap_or(1.0);
        (w.replay_tokens_layers * (flops / (rate * achieved) + elem / elem_bw)
            + w.replay_attn_flops / attn_rate
            + w.replay_indexer_flops / idx_rate)
            / c.layers
    }
}

/// Two kernels one after the other: their times added, bound by the longer one's.
fn then(a: KernelTime, b: KernelTime) -> KernelTime {
    KernelTime {
        s: a.s + b.s,
        bound: if b.s > a.s { b.bound } else { a.bound },
        ..a
    }
}

#[cfg(test)]
mod tests {
    use super::causal_length;

    #[test]
    fn causal_length_inverts_the_tables_pair_count() {
        // Full attention: a 1000-token prompt has 1000^2 / 2 = 500,000 pairs.
        assert!((causal_length(500_000.0, 0.0) - 1000.0).abs() < 1e-9);
        // A 128-token window: past the window, L w - w^2 / 2 pairs; L = 1000 gives
        // 128,000 - 8,192 = 119,808.
        assert!((causal_length(119_808.0, 128.0) - 1000.0).abs() < 1e-9);
        // Within the window (at most w^2 / 2 = 8,192 pairs) it is full attention.
        assert!((causal_length(5_000.0, 128.0) - 100.0).abs() < 1e-9);
    }
}
