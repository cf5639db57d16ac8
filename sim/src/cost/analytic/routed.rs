//! The routed experts of the most loaded rank and the dispatch and combine of one MoE
//! layer: twin's grouped GEMMs or the engine's measured MoE tables, under the
//! expert-popularity skew, with the in-situ terms of the all-to-all.

use super::AnalyticCostModel;
use crate::cost::kernels::a2a::{self, Leg, Links};
use crate::cost::kernels::gemm::{self, GemmKind};
use crate::cost::kernels::skew;
use crate::cost::tables::experts_skew;
use crate::cost::tables::family::Shape;
use crate::cost::tables::fit::Fit;
use crate::cost::{Bound, Phase};

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

impl AnalyticCostModel {
    /// The engine's measured MoE fit for one GPU's routed-expert shard, where the
    /// tables time the experts' format, and the shard's shape at a group's tokens: the
    /// tokens routed over `expert_ranks` GPUs, experts sliced over the rest of the
    /// tensor-parallel GPUs, under the tables' power-law load (`skewed`,
    /// AIConfigurator's default) or a balanced one. twin's experts are gated (gate and
    /// up, then down). With the deployment's own expert kernel (`moe_kernel`) where
    /// the tables time it too, that kernel's fit beside: its arithmetic rate bounds the
    /// price from below (`Fit::compute_floor`).
    fn experts_table(
        &self,
        skewed: bool,
    ) -> Option<(&Fit, Option<&Fit>, impl Fn(f64) -> Shape + '_)> {
        let t = self.params.tables.as_ref()?;
        let m = self.model.moe.as_ref()?;
        let c = &self.compiled;
        let format = t.experts_format(m, &self.hardware)?;
        let skew = experts_skew(skewed);
        let (fit, own) = t.experts_fits(format, skew, self.params.moe_kernel)?;
        // The usual kernel itself sets no floor beside its own price.
        let own = own.filter(|f| f.key != fit.key);
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
        Some((fit, own, shape))
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
                        Some((fit, own, shape)) => {
                            let shape = shape(group_tokens);
                            let floor = own
                                .and_then(|o| o.compute_floor(&self.hardware, &shape))
                                .unwrap_or(0.0);
                            (
                                fit.price(&self.hardware, &shape).max(floor)
                                    * self.params.table_draw.moe,
                                b,
                            )
                        }
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
        part.elem_s = s.elementwise_with(
            part.elem_s,
            self.compiled.elem_kernels_pair,
            f.elementwise,
            self.compiled.a2a,
        );
        if !self.compiled.a2a || part.dispatch.s <= 0.0 {
            return;
        }
        if part.hooked {
            part.dispatch_compute_s = s.ll_dispatch_s;
            part.combine_compute_s = s.ll_combine_s;
            // A low-latency kernel's benchmark latency runs from its launch until all
            // data is received, its own send and receive work included (DeepEP issue
            // #84). In situ that work is the send/receive time on the compute stream,
            // so the data flies for the rest of the latency, not for all of it again.
            part.dispatch.s = (part.dispatch.s - s.ll_dispatch_s).max(0.0);
            part.combine.s = (part.combine.s - s.ll_combine_s).max(0.0);
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
}
