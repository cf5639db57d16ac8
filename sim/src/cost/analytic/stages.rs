//! Pricing one rank's work: the rank-local stages of every layer type (attention and
//! what precedes the router; shared expert, router and dense FFN), the routed experts
//! of the most loaded rank, and the dispatch and combine of one MoE layer.

use super::layers::LayerType;
use super::work::RankWork;
use super::AnalyticCostModel;
use crate::cost::kernels::a2a::{self, Leg, Links};
use crate::cost::kernels::allreduce;
use crate::cost::kernels::attention::{self, AttnKernel, AttnWork};
use crate::cost::kernels::gemm::{self, Device, GemmKind, KernelTime};
use crate::cost::kernels::skew;
use crate::cost::tables::{Fit, Format, Shape, DEPLOYED_MOE_SKEW};
use crate::cost::{Bound, Phase};
use crate::model::AttentionKind;

/// Layer types a model may have.
pub const MAX_TYPES: usize = 8;

/// One layer's rank-local seconds by operation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct TypeLocal {
    pub attention: f64,
    pub indexer: f64,
    /// Projections (and MLA absorption or up-projection) before the router.
    pub dense_a: f64,
    pub elem_a: f64,
    pub mhc: f64,
    pub engram: f64,
    pub replay: f64,
    pub shared: f64,
    /// Router GEMM (MoE layers) or the dense FFN.
    pub dense_e: f64,
    pub elem_e: f64,
}

impl TypeLocal {
    /// Stage A: everything before the router.
    pub fn stage_a(&self) -> f64 {
        self.attention
            + self.indexer
            + self.dense_a
            + self.elem_a
            + self.mhc
            + self.engram
            + self.replay
    }
    /// The rank-local part of stage E.
    pub fn stage_e(&self) -> f64 {
        self.shared + self.dense_e + self.elem_e
    }
    pub fn scaled(&self, f: f64) -> TypeLocal {
        TypeLocal {
            attention: self.attention * f,
            indexer: self.indexer * f,
            dense_a: self.dense_a * f,
            elem_a: self.elem_a * f,
            mhc: self.mhc * f,
            engram: self.engram * f,
            replay: self.replay * f,
            shared: self.shared * f,
            dense_e: self.dense_e * f,
            elem_e: self.elem_e * f,
        }
    }
}

/// Rank-local pricing of one rank's work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Local {
    pub types: [TypeLocal; MAX_TYPES],
    pub attn_bound: Bound,
    pub indexer_bound: Bound,
    pub dense_bound: Bound,
    pub shared_bound: Bound,
    pub engram_bound: Bound,
    /// LM head once per step.
    pub lm_s: f64,
    pub tokens: f64,
    /// One tensor-parallel all-reduce of the step's tokens (0 without TP).
    pub allreduce_s: f64,
    /// Requests of the busiest rank's whole batch (the host's work).
    pub requests: f64,
}

/// The routed experts of the most loaded rank and the all-to-all of one MoE layer.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct MoePart {
    pub experts_s: f64,
    pub elem_s: f64,
    pub bound: Bound,
    /// Expert weight bytes the rank reads per layer, and experts touched.
    pub weight_bytes: f64,
    pub touched: f64,
    pub dispatch: Leg,
    pub combine: Leg,
    /// Low-latency kernels completed by a receive hook: only the transfer occupies the
    /// link, the latency is a delay.
    pub hooked: bool,
    /// In situ: the notify/barrier before each dispatch and combine (communication
    /// stream) as a share of the layer's compute, and the low-latency kernels'
    /// send/receive time on the compute stream.
    pub barrier_frac: f64,
    pub dispatch_compute_s: f64,
    pub combine_compute_s: f64,
}

impl MoePart {
    /// The part as one fused kernel: the transfers run under the GEMMs (the slower
    /// sets the time, plus the kernel's `fixed_s`); activation and quantisation stay
    /// in registers.
    #[inline]
    fn fused(self, fixed_s: f64) -> MoePart {
        let comm = self.dispatch.s + self.combine.s;
        MoePart {
            experts_s: self.experts_s.max(comm + fixed_s),
            elem_s: 0.0,
            bound: if comm > self.experts_s {
                Bound::Link
            } else {
                self.bound
            },
            dispatch: a2a::Leg {
                s: 0.0,
                ..self.dispatch
            },
            combine: a2a::Leg {
                s: 0.0,
                ..self.combine
            },
            hooked: false,
            barrier_frac: 0.0,
            dispatch_compute_s: 0.0,
            combine_compute_s: 0.0,
            ..self
        }
    }
}

/// The index of the rank with the most tokens (the first of equals).
#[inline]
fn busiest(works: &[RankWork]) -> usize {
    works
        .iter()
        .enumerate()
        .fold((0, f64::MIN), |b, (i, w)| {
            if w.tokens > b.1 {
                (i, w.tokens)
            } else {
                b
            }
        })
        .0
}

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
    pub(super) fn device(&self) -> Device {
        Device::of(&self.hardware)
    }

    /// A weight GEMM's seconds and bound at `m` rows (remembered by row count).
    fn gemm(&self, spec: &super::layers::GemmSpec, m: f64) -> (f64, Bound) {
        let p = &self.params;
        let price = || {
            let g = spec.at(m);
            let k = gemm::time(
                &g,
                &self.device(),
                &p.gemm,
                &p.tile,
                &self.compiled.roof_tile,
            );
            match self.table_gemm(&g) {
                Some(s) => (s, k.bound),
                None => (k.s, k.bound),
            }
        };
        match spec.slot {
            Some(slot) => self.memo.gemm(slot as usize, m, price),
            None => price(),
        }
    }

    /// A dense GEMM's price from the engine's measured kernel tables, where they time
    /// its format.
    fn table_gemm(&self, g: &gemm::Gemm) -> Option<f64> {
        let s = self.params.tables.as_ref()?.price_gemm(&self.hardware, g)?;
        Some(s * self.params.table_draw.gemm)
    }

    /// The engine's measured MoE fit for one GPU's routed-expert shard, where the
    /// tables time the experts' format, and the shard's shape at a group's tokens: the
    /// tokens routed over `expert_ranks` GPUs, experts sliced over the rest of the
    /// tensor-parallel GPUs, under the tables' power-law load (`skewed`,
    /// AIConfigurator's default) or a balanced one. twin's experts are gated (gate and
    /// up, then down).
    fn experts_table(&self, skewed: bool) -> Option<(&Fit, impl Fn(f64) -> Shape + '_)> {
        let t = self.params.tables.as_ref()?;
        let m = self.model.moe.as_ref()?;
        let c = &self.compiled;
        let format = Format::of_experts(m.weight_dtype, m.scale_block, m.activation_dtype)?;
        let skew = if skewed { DEPLOYED_MOE_SKEW } else { 0.0 };
        let fit = t.moe_fit(format, skew, true)?;
        let shape = move |tokens: f64| Shape::Moe {
            kernel: String::new(),
            format,
            tokens,
            hidden: self.model.hidden as f64,
            inter: m.expert_ffn as f64,
            top_k: m.top_k as f64,
            experts: m.routed_experts as f64,
            tp: (c.tp / c.expert_ranks).max(1.0),
            ep: c.expert_ranks.max(1.0),
            skew,
            gated: true,
        };
        Some((fit, shape))
    }

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
        let plain = a.kv_up_params == 0 && a.indexer.is_none() && !cl.window_branch;
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
        let peak = self.hardware.tensor.flops_per_s(a.compute_dtype);
        let kernel = if cl.kind == AttentionKind::Sparse {
            AttnKernel::Sparse
        } else {
            AttnKernel::Dense
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

    /// Rank-local stages of every layer type for the ranks' works, each scaled by
    /// `scale` (a micro-batch's share): every field is the slowest rank's, since all
    /// ranks meet at every MoE layer. Token-driven parts (GEMMs, element-wise, Engram,
    /// mHC) are the busiest rank's; attention, indexer and replay are taken over every
    /// rank (they depend on each rank's contexts).
    pub(super) fn local(&self, phase: Phase, works: &[RankWork], scale: f64) -> Local {
        let c = &self.compiled;
        let t = works[busiest(works)].scaled(scale).tokens;
        let mut out = Local {
            types: [TypeLocal::default(); MAX_TYPES],
            attn_bound: Bound::None,
            indexer_bound: Bound::None,
            dense_bound: Bound::None,
            shared_bound: Bound::None,
            engram_bound: Bound::None,
            lm_s: 0.0,
            tokens: t,
            allreduce_s: 0.0,
            requests: works.iter().map(|w| w.requests).fold(0.0, f64::max),
        };
        if t <= 0.0 {
            return out;
        }
        // Projections at M = tokens.
        let (proj, dense_bound) = self.gemms_s(&c.proj, t);
        self.token_stages(&mut out, t);
        let (mla_max, replay_max) = self.rank_attention(phase, works, scale, proj, &mut out);
        for x in out.types.iter_mut().take(c.types.len()) {
            x.dense_a = proj + mla_max;
            x.replay = replay_max;
        }
        out.dense_bound = dense_bound;
        out.allreduce_s = self.allreduce_s(t);
        let lm_tokens = works
            .iter()
            .map(|w| w.lm_tokens * scale)
            .fold(0.0, f64::max);
        out.lm_s = self.gemm(&c.lm_head, lm_tokens).0;
        if self.in_situ {
            self.in_situ_local(phase, &mut out);
        }
        out
    }

    /// The in-situ terms of the rank-local stages: residual factors per class, and the
    /// floor per element-wise kernel.
    fn in_situ_local(&self, phase: Phase, out: &mut Local) {
        let s = &self.params.in_situ;
        let decode = phase == Phase::Decode;
        let c = &self.compiled;
        let f = s.factors_of_step(decode, c.a2a);
        for (ti, ty) in c.types.iter().enumerate() {
            let t = &mut out.types[ti];
            t.attention *= f.attention;
            t.indexer *= f.attention;
            t.dense_a *= f.gemm;
            t.dense_e *= f.gemm;
            t.shared *= f.gemm;
            t.replay *= f.gemm;
            t.elem_a = s.elementwise_with(t.elem_a, c.elem_kernels_attn, f.elementwise);
            let k = if ty.moe {
                c.elem_kernels_moe
            } else {
                c.elem_kernels_dense
            };
            t.elem_e = s.elementwise_with(t.elem_e, k, f.elementwise);
        }
        out.lm_s *= f.gemm;
    }

    /// Weight GEMMs run one after another at `m` rows: their seconds, and `Compute`
    /// when any of them is compute-bound (`Memory` otherwise).
    #[inline]
    fn gemms_s(&self, specs: &[super::layers::GemmSpec], m: f64) -> (f64, Bound) {
        let mut total = 0.0;
        let mut bound = Bound::Memory;
        for g in specs {
            let (s, b) = self.gemm(g, m);
            total += s;
            if b == Bound::Compute {
                bound = Bound::Compute;
            }
        }
        (total, bound)
    }

    /// The token-driven stages of every layer type at the busiest rank's `t` tokens
    /// (Engram, mHC, element-wise kernels, the shared expert, the router or dense
    /// FFN), and the bounds of the shared expert and Engram.
    #[inline]
    fn token_stages(&self, out: &mut Local, t: f64) {
        let c = &self.compiled;
        let elem_bw = self.hardware.hbm.bytes_per_s * self.params.elementwise.mem_eff;
        let (engram, engram_b) = self.engram_s(t);
        let mhc = self.mhc_s(t);
        let router = c.router.as_ref().map(|g| self.gemm(g, t).0).unwrap_or(0.0);
        let (shared, shared_bound) = self.gemms_s(&c.shared, t);
        let dense_ffn: f64 = c.dense_ffn.iter().map(|g| self.gemm(g, t).0).sum();
        let elem_a = t * c.elem_attn_bytes / elem_bw;
        for (ti, ty) in c.types.iter().enumerate() {
            out.types[ti] = TypeLocal {
                engram,
                mhc,
                elem_a,
                shared: if ty.moe { shared } else { 0.0 },
                dense_e: if ty.moe { router } else { dense_ffn },
                elem_e: t * if ty.moe {
                    c.elem_moe_bytes
                } else {
                    c.elem_dense_bytes
                } / elem_bw,
                ..TypeLocal::default()
            };
        }
        out.shared_bound = if c.shared.is_empty() {
            Bound::None
        } else {
            shared_bound
        };
        out.engram_bound = engram_b;
    }

    /// Per rank: MLA's path, attention, indexer and replay, the slowest rank's of each
    /// kept in `out` (attention and indexer) or returned (MLA's seconds and replay's).
    /// `proj_s`: the projections' seconds at `out.tokens` (replay prices by them).
    #[inline]
    fn rank_attention(
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
            if w.tokens <= 0.0 {
                continue;
            }
            let (unabsorbed, mla_s) = self.mla_path(phase, &w);
            mla_max = mla_max.max(mla_s);
            replay_max = replay_max.max(self.replay_s(&w, proj_s, out.tokens));
            for (ti, ty) in c.types.iter().enumerate() {
                let (at, ix) = self.class_attention(phase, &w, ty.class, unabsorbed);
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
        let absorb: f64 = c.absorb.iter().map(|g| self.gemm(g, w.tokens).0).sum();
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

    /// One all-reduce of `tokens` hidden vectors over the TP GPUs.
    pub(super) fn allreduce_s(&self, tokens: f64) -> f64 {
        let c = &self.compiled;
        if c.allreduces_per_layer <= 0.0 {
            return 0.0;
        }
        let bytes = tokens * c.allreduce_bytes_per_token;
        if let Some(s) = self
            .params
            .tables
            .as_ref()
            .and_then(|t| t.price_allreduce(&self.hardware, c.tp, bytes))
        {
            return s * self.params.table_draw.allreduce;
        }
        allreduce::time(
            tokens * c.allreduce_bytes_per_token,
            c.tp,
            &self.hardware,
            &self.params.allreduce,
        )
    }

    /// Engram gathers per layer (spread over the layers).
    fn engram_s(&self, t: f64) -> (f64, Bound) {
        let p = &self.params;
        match &self.model.engram {
            Some(e) if t > 0.0 => {
                let modules = e.at_layers.len() as f64;
                let gathers = t * modules * e.gathers_per_token_per_module() as f64;
                let bytes = gathers * e.row_bytes();
                let (bw, miss, bound) = if e.host_resident {
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
                        Bound::Link,
                    )
                } else {
                    (self.hardware.hbm.bytes_per_s, 0.0, Bound::Memory)
                };
                let s =
                    bytes / (bw * p.gather.mem_eff) + gathers * miss + p.gather.fixed_s * modules;
                (s / self.compiled.layers, bound)
            }
            _ => (0.0, Bound::None),
        }
    }

    /// mHC stream mixing per layer: element traffic per token, BF16.
    fn mhc_s(&self, t: f64) -> f64 {
        match &self.model.mhc {
            Some(m) if t > 0.0 => {
                let n = m.streams as f64;
                let elems = if m.fused {
                    2.0 * n + 2.0
                } else {
                    4.0 * n + 4.0
                };
                let bytes = t * elems * self.model.hidden as f64 * 2.0;
                bytes / (self.hardware.hbm.bytes_per_s * self.params.elementwise.mem_eff)
            }
            _ => 0.0,
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

    /// The routed experts and the dispatch/combine of one MoE layer when the group
    /// routes `group_tokens` tokens and the busiest sender sends `max_tokens`; `skewed`
    /// puts the hottest rank's load on the experts and the receivers.
    pub(super) fn moe_part(
        &self,
        phase: Phase,
        group_tokens: f64,
        max_tokens: f64,
        skewed: bool,
    ) -> MoePart {
        let Some(m) = &self.model.moe else {
            return MoePart::default();
        };
        if group_tokens <= 0.0 {
            return MoePart::default();
        }
        let c = &self.compiled;
        let p = &self.params;
        let d = c.expert_ranks;
        let e = m.routed_experts as f64;
        let k = m.top_k as f64;
        let pairs = group_tokens * k;
        let mean_pairs = pairs / d;
        let hot = if skewed && !m.balanced {
            skew::hottest_pairs(pairs, d, c.popularity_skew, c.z_dep)
        } else {
            mean_pairs
        };
        let slots = c.experts_per_rank + c.redundant_per_rank;
        let touched = slots * (1.0 - (1.0 - k / e).powf(group_tokens));
        // The grouped GEMMs depend on the group's tokens alone: remembered by them.
        // Measured kernel tables, where they time the experts' format, price the whole
        // shard (routing, permutation and activation in).
        let tabled = self.experts_table(skewed && !m.balanced);
        let (experts_s, experts_bound) =
            self.memo
                .experts(phase == Phase::Decode, skewed, group_tokens, || {
                    let (s, b) = self.experts_gemms(phase, touched, hot / touched.max(1e-9));
                    match &tabled {
                        Some((fit, shape)) => (
                            fit.price(&self.hardware, &shape(group_tokens))
                                * self.params.table_draw.moe,
                            b,
                        ),
                        None => (s, b),
                    }
                });
        let elem_s = if tabled.is_some() {
            0.0
        } else {
            hot * c.elem_pair_bytes / (self.hardware.hbm.bytes_per_s * p.elementwise.mem_eff)
        };
        // The busiest sender sends `max_tokens`; the hottest receiver takes its
        // share of the group's tokens scaled by its load: the slower side sets each
        // transfer, which every rank waits for.
        let recv_tokens = if mean_pairs > 0.0 {
            group_tokens / d * hot / mean_pairs
        } else {
            0.0
        };
        let (dispatch, combine) = self.a2a_legs(phase, max_tokens.max(recv_tokens), k);
        let mut part = MoePart {
            experts_s,
            elem_s,
            bound: experts_bound,
            weight_bytes: touched * c.expert_bytes,
            touched,
            dispatch,
            combine,
            hooked: phase == Phase::Decode && c.a2a,
            ..MoePart::default()
        };
        if self.in_situ {
            self.in_situ_moe(phase, &mut part);
        }
        if m.fused {
            part.fused(p.moe.fixed_s)
        } else {
            part
        }
    }

    /// The in-situ terms of the MoE part: residual factors, the element-wise floor,
    /// barriers before normal kernels and the low-latency kernels' compute-stream time.
    fn in_situ_moe(&self, phase: Phase, part: &mut MoePart) {
        let s = &self.params.in_situ;
        let decode = phase == Phase::Decode;
        let f = s.factors_of_step(decode, self.compiled.a2a);
        part.experts_s *= f.moe;
        part.elem_s =
            s.elementwise_with(part.elem_s, self.compiled.elem_kernels_pair, f.elementwise);
        if !self.compiled.a2a || part.dispatch.s <= 0.0 {
            return;
        }
        if part.hooked {
            part.dispatch_compute_s = s.ll_dispatch_s;
            part.combine_compute_s = s.ll_combine_s;
        } else {
            part.dispatch.s *= s.dispatch;
            part.combine.s *= s.combine;
            // Barriers are set per layer type from its compute (`stages`).
            part.barrier_frac = s.barrier_frac;
        }
    }

    /// The dispatch and combine legs of one MoE layer whose slowest side moves
    /// `tokens` tokens of `top_k` experts each: normal kernels in prefill, low-latency
    /// ones in decode, none under tensor parallelism.
    #[inline]
    fn a2a_legs(&self, phase: Phase, tokens: f64, top_k: f64) -> (Leg, Leg) {
        let c = &self.compiled;
        let p = &self.params;
        let links = Links {
            nvlink_bytes_per_s: self.hardware.nvlink.bytes_per_s,
            nic_bytes_per_s: self.hardware.scaleout.bytes_per_s,
        };
        let d = c.expert_ranks;
        let domain = self.hardware.nvlink_domain_gpus.max(1) as f64;
        match phase {
            // Tensor-parallel GPUs already hold every token: no dispatch or combine.
            _ if !c.a2a => (Leg::default(), Leg::default()),
            Phase::Prefill => (
                a2a::normal(tokens, c.copy_normal, &c.fanout, d, &links, p, 1.0),
                a2a::normal(tokens, c.copy_combine, &c.fanout, d, &links, p, 1.0),
            ),
            Phase::Decode => {
                let ll = |bytes: f64, fixed_s: f64| {
                    let send = a2a::LowLatencySend {
                        tokens,
                        top_k,
                        bytes,
                        fixed_s,
                        recv_skew: 1.0,
                    };
                    a2a::low_latency(&send, d, domain, &links, p, &c.roof_ll)
                };
                (
                    ll(c.copy_ll, p.ll.dispatch_s),
                    ll(c.copy_combine, p.ll.combine_s),
                )
            }
        }
    }

    /// The grouped GEMMs of the routed experts over `touched` experts of `per_expert`
    /// rows each: seconds, and whether compute or memory binds them.
    fn experts_gemms(&self, phase: Phase, touched: f64, per_expert: f64) -> (f64, Bound) {
        let c = &self.compiled;
        let p = &self.params;
        let kind = match phase {
            Phase::Decode => GemmKind::Masked,
            Phase::Prefill => GemmKind::Contiguous,
        };
        let mut experts_s = 0.0;
        let mut compute = 0.0;
        let mut memory = 0.0;
        for spec in &c.experts {
            let mut g = *spec;
            g.kind = kind;
            g.groups = touched;
            let kt = gemm::time(
                &g.at(per_expert),
                &self.device(),
                &p.moe,
                &p.tile,
                &c.roof_tile,
            );
            experts_s += kt.s;
            compute += kt.compute_s;
            memory += kt.memory_s;
        }
        let bound = if compute > memory {
            Bound::Compute
        } else {
            Bound::Memory
        };
        (experts_s, bound)
    }

    /// Kernels of one layer of type `t`.
    pub(super) fn layer_kernels(&self, t: &LayerType) -> f64 {
        self.compiled.kernels_of(t)
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
