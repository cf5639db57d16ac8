//! A priced step as a deployment's profiler would see it: one layer as an in-situ
//! breakdown reports it ([`InSituLayer`]), and the whole step as a timeline of
//! operations per stream and micro-batch ([`StepTrace`], what `twin forward
//! --trace-out` writes as a Chrome trace).

use super::routed::MoePart;
use super::stages::Local;
use super::{late_shared, AnalyticCostModel, Variant};
use crate::cost::insitu::InSituLayer;
use crate::cost::kernels::overlap::{self, Stages};
use crate::cost::kernels::pipeline;
use crate::cost::{Phase, StepCost};
use spec::insitu::{Category as C, Stream};

/// One operation of a step's timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceSlice {
    pub category: C,
    pub stream: Stream,
    /// The micro-batch (0 or 1) of an overlapped schedule; `None` when serial.
    pub micro_batch: Option<u8>,
    /// Position in the model's layer sequence; `None` outside the layers (LM head).
    pub layer: Option<u32>,
    pub start_s: f64,
    pub dur_s: f64,
}

/// A step's timeline: its operations, each layer's span, and the step's wall time
/// (the time after the last operation is launches and fixed costs, which a profiler
/// sees as idle GPU time).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepTrace {
    pub slices: Vec<TraceSlice>,
    /// `(start, end)` of each layer, in sequence order.
    pub layers: Vec<(f64, f64)>,
    pub two_batch: bool,
    pub step_s: f64,
    /// MTP draft passes after the target model (decode with speculation).
    pub mtp_draft_s: f64,
}

impl StepTrace {
    /// Takes the step's totals once it is priced.
    pub(super) fn finish(&mut self, cost: &StepCost) {
        self.step_s = cost.step_s;
        self.mtp_draft_s = cost.op(crate::cost::Op::MtpDraft);
    }

    fn push(&mut self, s: TraceSlice) {
        if s.dur_s > 0.0 {
            self.slices.push(s);
        }
    }

    /// Adds a layer that spans `spans` (from the first start to the last end); its end.
    fn layer(&mut self, spans: &[(f64, f64)]) -> f64 {
        let first = spans.iter().map(|s| s.0).fold(f64::INFINITY, f64::min);
        let last = spans.iter().map(|s| s.1).fold(0.0, f64::max);
        self.layers.push((first, last));
        last
    }

    /// `ops` one after another from `start` on `stream`.
    fn run(&mut self, ops: &[(C, f64)], stream: Stream, at: (Option<u32>, Option<u8>), start: f64) {
        let mut t = start;
        for &(category, dur_s) in ops {
            self.push(TraceSlice {
                category,
                stream,
                micro_batch: at.1,
                layer: at.0,
                start_s: t,
                dur_s,
            });
            t += dur_s.max(0.0);
        }
    }
}

/// One micro-batch's operations of one layer type, by stage (seconds, in run order).
struct StageOps {
    stages: Stages,
    a: [(C, f64); 7],
    e: [(C, f64); 5],
    /// Run after the combine is launched (the shared expert in prefill).
    post: [(C, f64); 1],
    dispatch: [(C, f64); 2],
    combine: [(C, f64); 2],
    /// Whether the dispatch and combine run on a stream of their own (normal kernels).
    comm_stream: bool,
}

/// Records the five-stage pipeline of the layers `seq` (of types `ops`) into `t`; the
/// step's end. Only the kernels: the low-latency transfers fly while none runs.
fn five_stage_trace(ops: &[StageOps], seq: &[u8], t: &mut StepTrace) -> f64 {
    let mut spans = Vec::with_capacity(seq.len());
    pipeline::five_stage_recorded(seq.len(), |i| ops[seq[i] as usize].stages, Some(&mut spans));
    let fives: Vec<[FiveOps; 5]> = ops.iter().map(StageOps::five).collect();
    let mut end = 0.0f64;
    for (i, sp) in spans.iter().enumerate() {
        let five = &fives[seq[i] as usize];
        for mb in 0..2u8 {
            let at = (Some(i as u32), Some(mb));
            for (j, stage) in five.iter().enumerate() {
                t.run(stage, Stream::Compute, at, sp[2 * j + mb as usize].0);
            }
        }
        end = end.max(t.layer(sp));
    }
    end
}

/// Operations of one stage of the five-stage pipeline.
type FiveOps = Vec<(C, f64)>;

impl StageOps {
    /// The operations of the five-stage pipeline's stages (`A K S E R`), from the
    /// two-batch stages' lists: the attention core and indexer in `K`; each
    /// low-latency kernel's compute time split into a send and a receive
    /// ([`Stages::halves`]); the shared expert in `S`. Each sums to its stage's time.
    fn five(&self) -> [FiveOps; 5] {
        let st = &self.stages;
        let core = |c: C| matches!(c, C::Attention | C::Indexer);
        let prepare = self
            .a
            .iter()
            .filter(|(c, _)| !core(*c) && *c != C::Dispatch)
            .copied()
            .collect();
        let k = self.a.iter().filter(|(c, _)| core(*c)).copied().collect();
        let [d_send, d_recv, c_send, c_recv] = st.halves();
        // The experts' list leads with its GEMMs, the shared expert among them.
        let mut e: FiveOps = vec![(C::Dispatch, d_recv)];
        for &(c, s) in &self.e {
            match c {
                C::Combine => e.push((C::Combine, c_send)),
                C::Gemm => e.push((C::Gemm, (s - st.shared).max(0.0))),
                _ => e.push((c, s)),
            }
        }
        [
            prepare,
            k,
            vec![(C::Dispatch, d_send), (C::Gemm, st.shared)],
            e,
            vec![(C::Combine, c_recv)],
        ]
    }
}

impl AnalyticCostModel {
    /// The share of the SMs overlapped communication kernels take in variant `v`.
    fn sm_share(&self, phase: Phase, two_batch: bool) -> f64 {
        match (two_batch, phase) {
            (true, Phase::Prefill) => {
                (self.params.comm_sms / self.hardware.sms.max(1) as f64).min(1.0)
            }
            _ => 0.0,
        }
    }

    /// The operations of layer type `ti` for one micro-batch (the whole batch when
    /// serial): each stage's stretch (SMs held, overlap) spread over its operations.
    fn stage_ops(
        &self,
        ti: usize,
        local: &Local,
        m: &MoePart,
        sm_share: f64,
        late: bool,
    ) -> StageOps {
        let (st, _) = self.stages(ti, local, m, sm_share, late);
        let t = &local.types[ti];
        let is_moe = self.compiled.types[ti].moe;
        let on = |x: f64| if is_moe { x } else { 0.0 };
        let (ll_d, ll_c) = (on(m.dispatch_compute_s), on(m.combine_compute_s));
        let base_a = t.stage_a();
        // As `stages` prices them: the barrier from the whole layer's compute, the
        // experts' stage without a shared expert that runs late.
        let late_s = if late { t.shared } else { 0.0 };
        let base_e = t.stage_e() + on(m.experts_s + m.elem_s);
        let ma = if base_a > 0.0 {
            (st.attn - ll_d) / base_a
        } else {
            1.0
        };
        let me = if base_e - late_s > 0.0 {
            (st.experts - ll_c) / (base_e - late_s)
        } else {
            1.0
        };
        let barrier = on(m.barrier_frac * (base_a + base_e));
        let ar = local.allreduce_s;
        // A layer-wide QK norm's all-reduce runs before attention (`allreduces_s`).
        let qk = if self.has_mixer(ti) {
            local.qk_norm_s
        } else {
            0.0
        };
        StageOps {
            stages: st,
            a: [
                (C::Elementwise, (t.elem_a + t.mhc) * ma),
                (C::Gather, t.engram * ma),
                (C::Gemm, (t.dense_a + t.replay) * ma),
                (C::Indexer, t.indexer * ma),
                (C::Attention, t.attention * ma),
                (C::Dispatch, ll_d),
                (C::Allreduce, ar + qk),
            ],
            e: [
                (C::Gemm, (t.shared - late_s + t.dense_e) * me),
                (C::Elementwise, (t.elem_e + on(m.elem_s)) * me),
                (C::Moe, on(m.experts_s) * me),
                (C::Combine, ll_c),
                (C::Allreduce, ar),
            ],
            post: [(C::Gemm, st.post)],
            dispatch: [
                (C::DispatchBarrier, barrier),
                (C::Dispatch, on(m.dispatch.s)),
            ],
            combine: [(C::CombineBarrier, barrier), (C::Combine, on(m.combine.s))],
            comm_stream: is_moe && self.compiled.a2a && !m.hooked && m.dispatch.s > 0.0,
        }
    }

    /// One layer of the variant as an in-situ breakdown reports it: the middle layer
    /// of an overlapped schedule (its period from the schedule), or an MoE layer run
    /// serially; both micro-batches together. `launch_s` and `kernels`: the step's.
    pub(super) fn in_situ_layer(
        &self,
        phase: Phase,
        v: &Variant,
        launch_s: f64,
        kernels: f64,
    ) -> InSituLayer {
        let c = &self.compiled;
        let mut out = InSituLayer::default();
        if c.types.is_empty() {
            return out;
        }
        let ti = if v.two_batch {
            c.sequence[v.sched.timeline.layer.min(c.sequence.len() - 1)] as usize
        } else {
            c.types.iter().position(|t| t.moe).unwrap_or(0)
        };
        let ops = self.stage_ops(
            ti,
            v.local,
            &v.moe,
            self.sm_share(phase, v.two_batch),
            v.two_batch && late_shared(phase, &v.moe),
        );
        let reps = if v.two_batch { 2.0 } else { 1.0 };
        for &(cat, s) in ops.a.iter().chain(&ops.e).chain(&ops.post) {
            out.add(Stream::Compute, cat, reps * s);
        }
        out.comm_stream = ops.comm_stream;
        if out.comm_stream {
            for &(cat, s) in ops.dispatch.iter().chain(&ops.combine) {
                out.add(Stream::Comm, cat, reps * s);
            }
        }
        let st = &ops.stages;
        let period = if v.two_batch {
            v.sched.timeline.period_s
        } else {
            st.compute() + st.comm()
        };
        out.compute_bubble_s = (period - out.busy(Stream::Compute)).max(0.0);
        if out.comm_stream {
            out.comm_bubble_s = (period - out.busy(Stream::Comm)).max(0.0);
        }
        let layer_kernels = reps * self.layer_kernels(&c.types[ti]);
        out.launch_s = if kernels > 0.0 {
            launch_s * layer_kernels / kernels
        } else {
            0.0
        };
        out.layer_s = period + out.launch_s;
        out
    }

    /// Records variant `v`'s timeline into `t`: every layer's stages, split into
    /// operations, then the LM head.
    pub(super) fn fill_trace(&self, phase: Phase, v: &Variant, t: &mut StepTrace) {
        let c = &self.compiled;
        let sm_share = self.sm_share(phase, v.two_batch);
        let late = v.two_batch && late_shared(phase, &v.moe);
        let ops: Vec<StageOps> = (0..c.types.len())
            .map(|ti| self.stage_ops(ti, v.local, &v.moe, sm_share, late))
            .collect();
        let seq = &c.sequence;
        t.two_batch = v.two_batch;
        let comm = |o: &StageOps| {
            if o.comm_stream {
                Stream::Comm
            } else {
                Stream::Compute
            }
        };
        let mut end = 0.0f64;
        // Overlapped low-latency kernels leave their transfers to a receive hook: a
        // profiler sees their send and receive halves (in the compute lists), no kernel
        // while the data flies.
        if v.two_batch && self.five_stage(phase, &v.moe) {
            end = five_stage_trace(&ops, seq, t);
        } else if v.two_batch {
            let mut spans = Vec::with_capacity(seq.len());
            overlap::two_batch_recorded(
                seq.len(),
                |i| ops[seq[i] as usize].stages,
                Some(&mut spans),
            );
            for (i, sp) in spans.iter().enumerate() {
                let o = &ops[seq[i] as usize];
                for mb in 0..2u8 {
                    let at = (Some(i as u32), Some(mb));
                    let m = mb as usize;
                    t.run(&o.a, Stream::Compute, at, sp[m].0);
                    if !v.moe.hooked {
                        t.run(&o.dispatch, comm(o), at, sp[2 + m].0);
                    }
                    t.run(&o.e, Stream::Compute, at, sp[4 + m].0);
                    if !v.moe.hooked {
                        t.run(&o.combine, comm(o), at, sp[6 + m].0);
                    }
                    t.run(&o.post, Stream::Compute, at, sp[8 + m].0);
                }
                end = end.max(t.layer(sp));
            }
        } else {
            for (i, &ti) in seq.iter().enumerate() {
                let o = &ops[ti as usize];
                let st = &o.stages;
                let at = (Some(i as u32), None);
                let start = end;
                t.run(&o.a, Stream::Compute, at, start);
                t.run(&o.dispatch, comm(o), at, start + st.attn);
                t.run(&o.e, Stream::Compute, at, start + st.attn + st.dispatch);
                let c0 = start + st.attn + st.dispatch + st.experts;
                t.run(&o.combine, comm(o), at, c0);
                end = c0 + st.combine;
                t.layers.push((start, end));
            }
        }
        let lm_s = v.local.lm_s;
        t.run(&[(C::Gemm, lm_s)], Stream::Compute, (None, None), end);
    }
}
