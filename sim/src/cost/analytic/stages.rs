//! Pricing one rank's work: the rank-local stages of every layer type (attention and
//! what precedes the router; shared expert, router and dense FFN). Attention itself is
//! priced in `attention.rs`, the routed experts and their all-to-all in `routed.rs`.

use super::layers::{LayerType, TypeFfn};
use super::work::RankWork;
use super::AnalyticCostModel;
use crate::cost::kernels::allreduce;
use crate::cost::kernels::gemm::{self, KernelDevice};
use crate::cost::tables::format::Format;
use crate::cost::{Bound, Phase};

/// Layer types a model may have.
pub const MAX_TYPES: usize = 8;

/// Bytes a layer-wide QK norm all-reduces per token: the query's and the key's sums of
/// squares in FP32.
pub(super) const QK_NORM_BYTES_PER_TOKEN: f64 = 8.0;

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
    /// One all-reduce of the step's tokens' query and key sums of squares, before a
    /// layer-wide QK norm (0 without TP or without such a norm).
    pub qk_norm_s: f64,
    /// Requests of the busiest rank's whole batch (the host's work).
    pub requests: f64,
}

/// The index of the rank with the most tokens (the first of equals).
#[inline]
fn busiest(works: &[RankWork]) -> usize {
    works
        .iter()
        .enumerate()
        .fold((0, f64::MIN), |b, (i, w)| {
            if w.all_tokens() > b.1 {
                (i, w.all_tokens())
            } else {
                b
            }
        })
        .0
}

impl AnalyticCostModel {
    pub(super) fn device(&self) -> KernelDevice {
        KernelDevice::of(&self.hardware)
    }

    /// A weight GEMM's seconds and bound at `m` rows (remembered by row count).
    pub(super) fn gemm(&self, spec: &super::layers::GemmSpec, m: f64) -> (f64, Bound) {
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
            match spec.format.and_then(|f| self.table_gemm(f, &g)) {
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
    fn table_gemm(&self, format: Format, g: &gemm::Gemm) -> Option<f64> {
        let s = self
            .params
            .tables
            .as_ref()?
            .price_gemm(&self.hardware, format, g)?;
        Some(s * self.params.table_draw.gemm)
    }

    /// Rank-local stages of every layer type for the ranks' works, each scaled by
    /// `scale` (a micro-batch's share): every field is the slowest rank's, since all
    /// ranks meet at every MoE layer. Token-driven parts (GEMMs, element-wise, Engram,
    /// mHC) are the busiest rank's; attention, indexer and replay are taken over every
    /// rank (they depend on each rank's contexts).
    pub(super) fn local(&self, phase: Phase, works: &[RankWork], scale: f64) -> Local {
        let c = &self.compiled;
        let t = works[busiest(works)].scaled(scale).all_tokens();
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
            qk_norm_s: 0.0,
            requests: works.iter().map(|w| w.all_requests()).fold(0.0, f64::max),
        };
        if t <= 0.0 {
            return out;
        }
        // Projections at M = tokens: the model's own, and each class's own.
        let (proj, mut dense_bound) = self.gemms_s(&c.proj, t);
        self.token_stages(&mut out, t);
        let (mla_max, replay_max) = self.rank_attention(phase, works, scale, proj, &mut out);
        let mut own = [0.0; super::work::MAX_CLASSES];
        for (ci, cl) in c.classes.iter().enumerate().filter(|(_, cl)| !cl.main) {
            let (s, b) = self.gemms_s(&cl.proj, t);
            own[ci] = s;
            if b == Bound::Compute {
                dense_bound = Bound::Compute;
            }
        }
        for (x, ty) in out.types.iter_mut().zip(c.types.iter()) {
            x.dense_a = if c.classes[ty.class].main {
                proj + mla_max
            } else {
                own[ty.class]
            };
            x.replay = replay_max;
        }
        out.dense_bound = dense_bound;
        out.allreduce_s = self.allreduce_s(t);
        out.qk_norm_s = self.qk_norm_allreduce_s(t);
        let lm_tokens = works
            .iter()
            .map(|w| w.all_lm_tokens() * scale)
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
            let ka = c.classes[ty.class].elem_kernels;
            t.elem_a = s.elementwise_with(t.elem_a, ka, f.elementwise, c.a2a);
            let k = match ty.ffn {
                TypeFfn::Moe => c.elem_kernels_moe,
                TypeFfn::Dense(_) => c.elem_kernels_dense,
                TypeFfn::None => 0.0,
            };
            t.elem_e = s.elementwise_with(t.elem_e, k, f.elementwise, c.a2a);
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
        let dense_ffn =
            |i: usize| -> f64 { c.dense_ffns[i].iter().map(|g| self.gemm(g, t).0).sum() };
        for (ti, ty) in c.types.iter().enumerate() {
            let (dense_e, elem_e) = match ty.ffn {
                TypeFfn::Moe => (router, t * c.elem_moe_bytes / elem_bw),
                TypeFfn::Dense(i) => (dense_ffn(i), t * c.elem_dense_bytes[i] / elem_bw),
                TypeFfn::None => (0.0, 0.0),
            };
            out.types[ti] = TypeLocal {
                engram,
                mhc,
                elem_a: t * c.classes[ty.class].elem_bytes / elem_bw,
                shared: if ty.moe { shared } else { 0.0 },
                dense_e,
                elem_e,
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

    /// One all-reduce of `tokens` hidden vectors over the TP GPUs.
    pub(super) fn allreduce_s(&self, tokens: f64) -> f64 {
        let c = &self.compiled;
        if c.allreduces_per_layer <= 0.0 {
            return 0.0;
        }
        self.allreduce_bytes_s(tokens * c.allreduce_bytes_per_token)
    }

    /// The all-reduce of a layer-wide QK norm (`Attention::layer_qk_norm`) over the TP
    /// GPUs: each token's query and key sums of squares, two FP32 numbers (vLLM's
    /// `minimax_qk_norm_fusion`, one all-reduce for both since vLLM PR #31493); 0
    /// without TP or without such a norm.
    pub(super) fn qk_norm_allreduce_s(&self, tokens: f64) -> f64 {
        let c = &self.compiled;
        if c.allreduces_per_layer <= 0.0 || !self.model.attention.layer_qk_norm {
            return 0.0;
        }
        self.allreduce_bytes_s(tokens * QK_NORM_BYTES_PER_TOKEN)
    }

    /// One all-reduce of `bytes` over the TP GPUs: the engine's table, else twin's model.
    fn allreduce_bytes_s(&self, bytes: f64) -> f64 {
        let c = &self.compiled;
        if let Some(s) = self
            .params
            .tables
            .as_ref()
            .and_then(|t| t.price_allreduce(&self.hardware, c.tp, bytes))
        {
            return s * self.params.table_draw.allreduce;
        }
        allreduce::time(bytes, c.tp, &self.hardware, &self.params.allreduce)
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

    /// Kernels of one layer of type `t`.
    pub(super) fn layer_kernels(&self, t: &LayerType) -> f64 {
        self.compiled.kernels_of(t)
    }
}
