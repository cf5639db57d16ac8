//! Analytic cost model: every kernel of a step priced from datasheets and the kernel
//! models of [`crate::cost::kernels`], composed layer by layer the way an engine runs
//! them. See docs/step-pricing.md for the terms and their sources.
//!
//! A step of a DEP group:
//! - **Work per rank.** Each rank's requests give its tokens and, per attention class,
//!   the KV bytes read and the score/value flops (decode and sparse layers at absorbed
//!   MLA widths, dense MLA prefill at un-absorbed widths plus the latent KV's
//!   up-projection, whichever is cheaper), the indexer's traffic, and window replay.
//! - **Stages per layer.** A: attention, indexer, projections (tile-model GEMMs at the
//!   rank's token count), element-wise kernels (norms, RoPE, quantisation, KV writes),
//!   mHC, Engram. E: the shared expert, router, dense FFN, and the routed experts of the
//!   most loaded rank (grouped GEMMs over the experts its tokens touch; the hottest
//!   rank carries popularity skew and sampling noise). D and C: dispatch and combine
//!   by node and link (normal kernels in prefill, low-latency ones in decode).
//! - **Schedule.** Serially, or as two overlapped micro-batches (stage times of half
//!   the work, weights read once per micro-batch, normal kernels taking `comm_sms`
//!   SMs from compute) where that is faster.
//! - **Step.** The schedule, the LM head, kernel launches (CUDA-graph gaps in decode,
//!   eager host launches in prefill when they outrun the GPU) and a fixed cost per
//!   step. The slowest rank sets every stage; the same step with every rank at the
//!   mean load (`balanced_step_s`) and with expert load at the mean
//!   (`unskewed_step_s`) give the imbalance and skew losses.

mod attention;
mod launch;
mod layers;
mod memo;
mod routed;
mod situ;
mod stages;
mod work;

use self::layers::Compiled;
use self::memo::Memo;
use self::routed::MoePart;
use self::stages::{Local, TypeLocal};
use self::work::RankWork;
use super::kernels::a2a;
use super::kernels::overlap::{self, Schedule, Stages};
use super::kernels::pipeline;
use super::{
    Bound, CommCost, CostModel, CostParams, KvCapacity, Layout, Op, Phase, Pipeline, StepCost,
    StepShape,
};
use spec::model::AttentionKind;
use spec::{hardware::Hardware, model::Model};

pub use self::situ::{StepTrace, TraceSlice};
pub use self::stages::MAX_TYPES;
pub use self::work::MAX_CLASSES;

#[derive(Debug, Clone)]
pub struct AnalyticCostModel {
    pub hardware: Hardware,
    pub model: Model,
    pub layout: Layout,
    pub params: CostParams,
    compiled: Compiled,
    memo: Memo,
    /// Whether any in-situ term differs from the isolated price.
    in_situ: bool,
}

/// One way of running the step: the schedule and the pieces it was built from.
#[derive(Clone, Copy)]
struct Variant<'a> {
    sched: Schedule,
    local: &'a Local,
    moe: MoePart,
    /// Stage times are of half the work (two micro-batches).
    two_batch: bool,
    /// Compute time lost over the step to SMs that overlapped communication kernels
    /// occupy (included in the schedule's compute stream).
    sm_penalty_s: f64,
}

/// Whether two micro-batches of `phase` run the shared expert while their combine is
/// in flight: prefill with normal kernels, as SGLang's reproduction of DeepSeek's
/// prefill schedule does (`_compute_moe_deepseek_blog_prefill`, sglang
/// `python/sglang/srt/operations_strategy.py`). Decode keeps it in the experts' stage.
fn late_shared(phase: Phase, moe: &MoePart) -> bool {
    phase == Phase::Prefill && !moe.hooked
}

impl AnalyticCostModel {
    /// Whether two micro-batches of `phase` run the five-stage decode pipeline
    /// ([`pipeline`]): decode with low-latency kernels, where the layout asks for it.
    fn five_stage(&self, phase: Phase, moe: &MoePart) -> bool {
        phase == Phase::Decode && moe.hooked && self.layout.decode_pipeline == Pipeline::FiveStage
    }

    pub fn new(hardware: Hardware, model: Model, layout: Layout, params: CostParams) -> Self {
        let compiled = Compiled::new(&hardware, &model, &layout, &params);
        let memo = Memo::new(compiled.gemm_slots);
        let in_situ = !params.in_situ.is_isolated();
        AnalyticCostModel {
            hardware,
            model,
            layout,
            params,
            compiled,
            memo,
            in_situ,
        }
    }

    /// The dense weight GEMMs a step of this model and layout prices, each once, as
    /// `(n, k, activation bytes, weight bytes)` per element (block scales in): the
    /// attention projections, the MoE router and shared experts, the dense FFNs and
    /// the LM head (the shapes `twin calibrate --tables-out` measures). Batched and
    /// grouped GEMMs (MLA absorption, routed experts) are not among them.
    pub fn dense_gemm_shapes(&self) -> Vec<(f64, f64, f64, f64)> {
        let c = &self.compiled;
        let mut out: Vec<(f64, f64, f64, f64)> = Vec::new();
        let all = c
            .proj
            .iter()
            .chain(c.kv_up.iter())
            .chain(c.router.iter())
            .chain(c.shared.iter())
            .chain(c.dense_ffns.iter().flatten())
            .chain(std::iter::once(&c.lm_head));
        for g in all.filter(|g| g.groups == 1.0) {
            let s = (g.n, g.k, g.a_bytes, g.b_bytes);
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    /// Whether layer type `ti` has a token mixer (attention or its like).
    fn has_mixer(&self, ti: usize) -> bool {
        let c = &self.compiled;
        c.classes[c.types[ti].class].kind != AttentionKind::None
    }

    /// Tensor parallelism's all-reduces in layer type `ti`, after attention and after
    /// the FFN (every layer that has them): their partial outputs summed, and before
    /// attention a layer-wide QK norm's sums of squares.
    fn allreduces_s(&self, ti: usize, local: &Local) -> (f64, f64) {
        let ty = &self.compiled.types[ti];
        let ar = local.allreduce_s;
        let ar_a = if self.has_mixer(ti) {
            ar + local.qk_norm_s
        } else {
            0.0
        };
        let ar_e = if ty.ffn == layers::TypeFfn::None {
            0.0
        } else {
            ar
        };
        (ar_a, ar_e)
    }

    /// Stage times of layer type `ti` from a rank-local pricing and the MoE part, and
    /// the compute time the communication kernels cost the compute stream in them.
    /// `sm_share` of the SMs is taken by overlapped communication kernels: held for
    /// the in-situ `sm_hold` share of the step, every compute stage runs on the rest
    /// (`compute_stretch`); otherwise a compute stage running beside a dispatch or
    /// combine of the other micro-batch loses that share for as long as the kernel
    /// runs. Low-latency kernels' send/receive halves run on the compute stream. With
    /// `late_shared`, the shared expert runs after the combine is launched (the post
    /// stage of [`overlap`]), not in the experts' stage.
    fn stages(
        &self,
        ti: usize,
        local: &Local,
        moe: &MoePart,
        sm_share: f64,
        late_shared: bool,
    ) -> (Stages, f64) {
        let t = &local.types[ti];
        let is_moe = self.compiled.types[ti].moe;
        let busy = |l: &a2a::Leg| {
            if moe.hooked {
                l.nvlink_s.max(l.rdma_s).min(l.s)
            } else {
                l.s
            }
        };
        let on = |x: f64| if is_moe { x } else { 0.0 };
        // Tensor parallelism sums attention's and the FFN's partial outputs (every
        // layer that has them), where DEP dispatches and combines (MoE layers).
        let (ar_a, ar_e) = self.allreduces_s(ti, local);
        let base_a = t.stage_a();
        let base_e = t.stage_e() + on(moe.experts_s + moe.elem_s);
        let barrier = on(moe.barrier_frac * (base_a + base_e));
        let (db, cb) = (barrier, barrier);
        let (d, c) = (on(busy(&moe.dispatch)) + db, on(busy(&moe.combine)) + cb);
        let (ll_d, ll_c) = (on(moe.dispatch_compute_s), on(moe.combine_compute_s));
        let hold = self.params.in_situ.sm_hold.clamp(0.0, 1.0);
        let stretch = if sm_share > 0.0 {
            self.params.in_situ.compute_stretch(sm_share)
        } else {
            1.0
        };
        let overlap = sm_share * (1.0 - hold);
        let attn = base_a * stretch + overlap * d + ll_d;
        let experts = base_e * stretch + overlap * c + ll_c;
        let post = if late_shared { t.shared * stretch } else { 0.0 };
        let stages = Stages {
            attn,
            dispatch: on(moe.dispatch.s) + db + ar_a,
            experts: experts - post,
            combine: on(moe.combine.s) + cb + ar_e,
            dispatch_busy: d,
            combine_busy: c,
            post,
            core: (t.attention + t.indexer) * stretch,
            shared: if late_shared { 0.0 } else { t.shared * stretch },
            dispatch_compute: ll_d,
            combine_compute: ll_c,
        };
        // Written so that the isolated price (stretch 1, no low-latency halves) is the
        // overlap term alone, bit for bit.
        let penalty = overlap * (d + c) + (ll_d + ll_c) + (stretch - 1.0) * (base_a + base_e);
        (stages, penalty)
    }

    fn serial<'a>(&self, local: &'a Local, moe: MoePart) -> Variant<'a> {
        let mut sched = Schedule::default();
        let mut penalty = 0.0;
        for (ti, ty) in self.compiled.types.iter().enumerate() {
            let (s, p) = self.stages(ti, local, &moe, 0.0, false);
            sched.compute_s += ty.count * s.compute();
            sched.comm_s += ty.count * s.comm();
            penalty += ty.count * p;
        }
        sched.total_s = sched.compute_s + sched.comm_s;
        Variant {
            sched,
            local,
            moe,
            two_batch: false,
            sm_penalty_s: penalty,
        }
    }

    fn two_batch<'a>(&self, phase: Phase, local: &'a Local, moe: MoePart) -> Variant<'a> {
        // Normal (prefill) kernels run on SMs; low-latency ones complete by a hook.
        let sms = self.hardware.sms.max(1) as f64;
        let sm_share = match phase {
            Phase::Prefill => (self.params.comm_sms / sms).min(1.0),
            Phase::Decode => 0.0,
        };
        let late = late_shared(phase, &moe);
        let seq = &self.compiled.sequence;
        let mut stages = [Stages::default(); stages::MAX_TYPES];
        let mut penalty = 0.0;
        for (ti, s) in stages
            .iter_mut()
            .enumerate()
            .take(self.compiled.types.len())
        {
            let (st, p) = self.stages(ti, local, &moe, sm_share, late);
            *s = st;
            penalty += 2.0 * self.compiled.types[ti].count * p;
        }
        let sched = if self.five_stage(phase, &moe) {
            pipeline::five_stage_with(seq.len(), |i| stages[seq[i] as usize])
        } else {
            overlap::two_batch_with(seq.len(), |i| stages[seq[i] as usize])
        };
        Variant {
            sched,
            local,
            moe,
            two_batch: true,
            sm_penalty_s: penalty,
        }
    }

    /// Exposed host seconds of a step with `requests` on the busiest rank and `gpu_s`
    /// of GPU work, launches included (`crate::cost::host`).
    fn host_s(&self, phase: Phase, requests: f64, gpu_s: f64) -> f64 {
        let fixed = match phase {
            Phase::Decode => self.params.step_fixed_decode_s,
            Phase::Prefill => self.params.step_fixed_prefill_s,
        };
        self.params.host.exposed_s(fixed, requests, gpu_s)
    }

    /// The faster of running `local`/`moe` serially and as two micro-batches, their
    /// launches included (`lm_s`: the LM head, the same for both).
    fn best<'a>(
        &self,
        phase: Phase,
        full: (&'a Local, MoePart),
        half: Option<(&'a Local, MoePart)>,
        lm_s: f64,
    ) -> Variant<'a> {
        let s = self.serial(full.0, full.1);
        match half {
            Some((l, m)) => {
                let t = self.two_batch(phase, l, m);
                if self.total(phase, &t, lm_s) < self.total(phase, &s, lm_s) {
                    t
                } else {
                    s
                }
            }
            None => s,
        }
    }

    /// Wall time of a variant with its LM head, launches and fixed cost.
    fn total(&self, phase: Phase, v: &Variant, lm_s: f64) -> f64 {
        let gpu = v.sched.total_s + lm_s;
        let busy = gpu + self.launches_of(phase, v, gpu).exposed_s;
        busy + self.host_s(phase, v.local.requests, busy)
    }

    /// Prices the target model's step from each rank's work: the group's `n` ranks
    /// are `works` repeated (`period`), so maxima are `works`' own and sums run over
    /// all `n` in rank order, as over the whole group.
    fn price_step(
        &self,
        phase: Phase,
        works: &[RankWork],
        n: usize,
        trace: Option<&mut StepTrace>,
    ) -> StepCost {
        let d = n.max(1) as f64;
        let group_tokens = repeated_sum(works, n);
        let mut out = StepCost {
            tokens_processed: group_tokens.round() as u64,
            ..Default::default()
        };
        if group_tokens <= 0.0 {
            return out;
        }
        let max_tokens = works.iter().map(|w| w.all_tokens()).fold(0.0, f64::max);
        let local = self.local(phase, works, 1.0);
        let uniform = works.iter().all(|w| *w == works[0]);
        // Two micro-batches can only pay by hiding dispatch and combine, which a fused
        // MoE kernel already overlaps inside itself; tensor-parallel all-reduces are
        // not overlapped (the engines run them in line).
        let overlap = self.layout.overlap_microbatches
            && d > 1.0
            && self.compiled.a2a
            && self.model.moe.as_ref().is_some_and(|m| !m.fused);
        let half = overlap.then(|| self.local(phase, works, 0.5));
        let moe = |tokens: f64, max: f64, skewed: bool, two: bool| {
            if two {
                self.moe_part(phase, tokens / 2.0, max / 2.0, skewed)
            } else {
                self.moe_part(phase, tokens, max, skewed)
            }
        };
        let actual = self.best(
            phase,
            (&local, moe(group_tokens, max_tokens, true, false)),
            half.as_ref()
                .map(|l| (l, moe(group_tokens, max_tokens, true, true))),
            local.lm_s,
        );
        // The counterfactuals run the same way as the step (serial or overlapped):
        // expert load at the mean; and every rank at the mean load.
        let two = actual.two_batch;
        let same_way = |l: &Local, lh: Option<&Local>, m: MoePart| match (two, lh) {
            (true, Some(lh)) => self.two_batch(phase, lh, m).sched,
            _ => self.serial(l, m).sched,
        };
        let requests = local.requests;
        let total = |sched: Schedule, lm_s: f64| {
            let gpu = sched.total_s + lm_s;
            let busy = gpu + self.launch_two(phase, gpu, two, max_tokens);
            busy + self.host_s(phase, requests, busy)
        };
        let unskewed = same_way(
            &local,
            half.as_ref(),
            moe(group_tokens, max_tokens, false, two),
        );
        out.unskewed_step_s = total(unskewed, local.lm_s);
        out.balanced_step_s = if uniform {
            // Every rank at the mean already; the mean sender is the busiest one.
            out.unskewed_step_s
        } else {
            // The mean rank's token counts, whole (then its GEMM prices come from the
            // memo's tables): at most half a token from the exact mean, which moves
            // the counterfactual by far less than the imbalance it measures.
            let mut mean = RankWork::mean(works, n);
            mean.tokens = mean.tokens.round();
            mean.lm_tokens = mean.lm_tokens.round();
            mean.riders.tokens = mean.riders.tokens.round();
            let lm = self.local(phase, std::slice::from_ref(&mean), 1.0);
            let lmh = two.then(|| self.local(phase, std::slice::from_ref(&mean), 0.5));
            let b = same_way(
                &lm,
                lmh.as_ref(),
                moe(group_tokens, group_tokens / d, false, two),
            );
            total(b, lm.lm_s)
        };
        out.step_s = self.total(phase, &actual, local.lm_s);
        self.breakdown(phase, &actual, local.lm_s, &mut out);
        if let Some(t) = trace {
            self.fill_trace(phase, &actual, t);
        }
        out
    }

    /// Tensor parallelism's all-reduces of one step, over its `reps` passes through the
    /// layers: their seconds and the bytes they sum (every layer's partial outputs, and
    /// a layer-wide QK norm's sums of squares before each attention).
    fn allreduce_totals(&self, v: &Variant, reps: f64) -> (f64, f64) {
        let c = &self.compiled;
        let allreduces = reps * c.allreduces_per_pass;
        let qk_norms = if v.local.qk_norm_s > 0.0 {
            reps * c.mixer_layers_per_pass
        } else {
            0.0
        };
        let tokens = v.local.tokens;
        (
            allreduces * v.local.allreduce_s + qk_norms * v.local.qk_norm_s,
            allreduces * tokens * c.allreduce_bytes_per_token
                + qk_norms * tokens * stages::QK_NORM_BYTES_PER_TOKEN,
        )
    }

    /// Splits a variant's time into operations (summing to `out.step_s`).
    /// `lm_s`: the LM head, once per step at the whole batch.
    fn breakdown(&self, phase: Phase, v: &Variant, lm_s: f64, out: &mut StepCost) {
        let c = &self.compiled;
        let reps = if v.two_batch { 2.0 } else { 1.0 };
        let f = reps;
        let mut sum = TypeLocal::default();
        for (ti, ty) in c.types.iter().enumerate() {
            let t = v.local.types[ti].scaled(ty.count * f);
            sum.attention += t.attention;
            sum.indexer += t.indexer;
            sum.dense_a += t.dense_a;
            sum.elem_a += t.elem_a;
            sum.mhc += t.mhc;
            sum.engram += t.engram;
            sum.replay += t.replay;
            sum.shared += t.shared;
            sum.dense_e += t.dense_e;
            sum.elem_e += t.elem_e;
        }
        let l = &v.local;
        let moe_layers = c.moe_layers;
        let mut set = |op: Op, s: f64, b: Bound| {
            out.op_s[op.index()] += s;
            if s > 0.0 {
                out.op_bound[op.index()] = b;
            }
        };
        set(Op::Attention, sum.attention, l.attn_bound);
        set(Op::Indexer, sum.indexer, l.indexer_bound);
        set(Op::Dense, sum.dense_a + sum.dense_e + lm_s, l.dense_bound);
        set(
            Op::Elementwise,
            sum.elem_a + sum.elem_e + moe_layers * f * v.moe.elem_s,
            Bound::Memory,
        );
        set(Op::Mhc, sum.mhc, Bound::Memory);
        set(Op::Engram, sum.engram, l.engram_bound);
        set(Op::WindowReplay, sum.replay, Bound::Compute);
        set(Op::SharedExpert, sum.shared, l.shared_bound);
        set(Op::Moe, moe_layers * f * v.moe.experts_s, v.moe.bound);
        let exposed = v.sched.exposed_comm_s();
        // Communication costs what the compute stream waits for, and the compute the
        // kernels' SMs took from it.
        set(Op::Communication, exposed + v.sm_penalty_s, Bound::Link);
        let gpu = v.sched.total_s + lm_s;
        let kernels = self.kernels(v.two_batch);
        let launched = self.launches_of(phase, v, gpu);
        let launch = launched.exposed_s;
        set(Op::Launch, launch, Bound::Latency);
        out.host_launch_s = launched.host_s;
        out.host_serial_s = launched.serial_s;
        let host = self.host_s(phase, v.local.requests, gpu + launch);
        set(Op::Overhead, host, Bound::Latency);
        // Rounding: the schedule's compute equals the sum of the compute operations.
        let (ar_s, ar_bytes) = self.allreduce_totals(v, reps);
        out.comm = CommCost {
            total_s: v.sched.comm_s,
            hidden_s: (v.sched.comm_s - exposed).max(0.0),
            exposed_s: exposed,
            nvlink_s: moe_layers * reps * (v.moe.dispatch.nvlink_s + v.moe.combine.nvlink_s) + ar_s,
            rdma_s: moe_layers * reps * (v.moe.dispatch.rdma_s + v.moe.combine.rdma_s),
            nvlink_bytes: moe_layers
                * reps
                * (v.moe.dispatch.nvlink_bytes + v.moe.combine.nvlink_bytes)
                + ar_bytes,
            rdma_bytes: moe_layers * reps * (v.moe.dispatch.rdma_bytes + v.moe.combine.rdma_bytes),
            two_batch: v.two_batch,
            low_latency: phase == Phase::Decode && c.a2a,
            allreduce: c.allreduces_per_layer > 0.0,
        };
        out.timeline = v.two_batch.then_some(v.sched.timeline);
        out.in_situ = self.in_situ_layer(phase, v, launch, kernels);
        out.kernels = kernels;
        out.moe_weight_bytes_per_rank = moe_layers * reps * v.moe.weight_bytes;
        out.experts_touched_per_rank = v.moe.touched;
    }

    /// One MTP draft pass: one average layer over one token per request, serially, plus
    /// the LM head and the layer's launches.
    /// `draft_works` repeated over the group's `n` ranks, as in `price_step`.
    fn draft_pass_s(&self, draft_works: &[RankWork], n: usize) -> f64 {
        let c = &self.compiled;
        let group = repeated_sum(draft_works, n);
        if group <= 0.0 {
            return 0.0;
        }
        let max = draft_works.iter().map(|w| w.tokens).fold(0.0, f64::max);
        let local = self.local(Phase::Decode, draft_works, 1.0);
        let moe = self.moe_part(Phase::Decode, group, max, true);
        let v = self.serial(&local, moe);
        let per_layer = v.sched.total_s / c.layers.max(1.0);
        let kernels: f64 = c
            .types
            .iter()
            .map(|t| t.count * self.layer_kernels(t))
            .sum::<f64>()
            / c.layers.max(1.0)
            + c.kernels_step;
        let gpu = per_layer + local.lm_s;
        let per_pass = 1.0 / c.layers.max(1.0);
        gpu + self
            .launches(Phase::Decode, gpu, kernels, per_pass, local.tokens)
            .exposed_s
    }

    /// One MoE layer of a group whose every rank routes `tokens_per_rank` tokens: the
    /// routed experts of the hottest rank with its dispatch and combine, run serially
    /// (or inside one fused kernel); what `twin kernel moe` prices.
    pub fn moe_layer(&self, phase: Phase, tokens_per_rank: f64) -> (f64, Bound) {
        let d = self.layout.dep.max(1) as f64;
        let m = self.moe_part(phase, tokens_per_rank * d, tokens_per_rank, true);
        // In situ, low-latency kernels' send/receive time on the compute stream is part
        // of their latency (`MoePart::dispatch_compute_s`).
        let t = m.experts_s
            + m.elem_s
            + m.dispatch.s
            + m.combine.s
            + m.dispatch_compute_s
            + m.combine_compute_s;
        let bound = if m.dispatch.s + m.combine.s > m.experts_s {
            Bound::Link
        } else {
            m.bound
        };
        (t, bound)
    }

    /// Bytes of weights resident on one GPU.
    pub fn weight_bytes_per_rank(&self) -> f64 {
        let c = &self.compiled;
        let routed = match &self.model.moe {
            Some(_) => (c.experts_per_rank + c.redundant_per_rank) * c.expert_bytes * c.moe_layers,
            None => 0.0,
        };
        let mtp = if self.model.mtp.is_some() {
            c.attn_proj_bytes + c.shared_bytes + c.experts_per_rank * c.expert_bytes
        } else {
            0.0
        };
        let dense_ffn: f64 = c
            .dense_ffn_bytes
            .iter()
            .zip(&c.dense_ffn_layers)
            .map(|(b, n)| b * n)
            .sum();
        routed
            + c.mixer_bytes
            + c.shared_bytes * c.moe_layers
            + dense_ffn
            + if self.model.tied_embeddings { 1.0 } else { 2.0 } * c.lm_head_bytes
            + mtp
    }

    /// HBM left for KV on one GPU after weights, by the serving engine's arithmetic
    /// (`params.memory`; twin's own: 92% of usable HBM, 8% kept for activations).
    pub fn kv_bytes_per_rank(&self) -> f64 {
        self.params.memory.kv_bytes(
            self.hardware.hbm.usable.as_f64(),
            self.hardware.hbm.capacity.as_f64(),
            self.weight_bytes_per_rank(),
            self.layout.tp,
        )
    }
}

/// The shortest `p` dividing `ranks.len()` with every rank equal to the one `p` before
/// it (the ranks are their first `p` repeated); `ranks.len()` when there is none.
pub(crate) fn period<T: PartialEq>(ranks: &[T]) -> usize {
    let n = ranks.len();
    (1..n)
        .filter(|&p| n.is_multiple_of(p))
        .find(|&p| (p..n).all(|i| ranks[i] == ranks[i - p]))
        .unwrap_or(n)
}

/// The period of a step's ranks: of its slices, and of its decode requests too in a
/// mixed step.
fn step_period(shape: &StepShape<'_>) -> usize {
    if shape.is_mixed() {
        let both: Vec<_> = shape.ranks.iter().zip(shape.decode_ranks).collect();
        period(&both)
    } else {
        period(shape.ranks)
    }
}

/// The tokens of `n` ranks that are `works` repeated, summed in rank order.
fn repeated_sum(works: &[RankWork], n: usize) -> f64 {
    (0..n).map(|i| works[i % works.len()].all_tokens()).sum()
}

impl AnalyticCostModel {
    /// [`CostModel::step`] working every rank out on its own (the reference the
    /// periodic pricing is tested against).
    pub fn step_rank_by_rank(&self, shape: &StepShape<'_>) -> StepCost {
        self.step_in_periods(shape, shape.ranks.len(), None)
    }

    /// The step of `shape` as a timeline: every layer's stages on the compute and
    /// communication streams, per micro-batch, split into their operations.
    pub fn step_trace(&self, shape: &StepShape<'_>) -> (StepCost, StepTrace) {
        let mut t = StepTrace::default();
        let cost = self.step_in_periods(shape, step_period(shape), Some(&mut t));
        t.finish(&cost);
        (cost, t)
    }

    /// Prices `shape` whose ranks are their first `p` repeated (and, given `trace`,
    /// records its timeline there).
    fn step_in_periods(
        &self,
        shape: &StepShape<'_>,
        p: usize,
        trace: Option<&mut StepTrace>,
    ) -> StepCost {
        debug_assert!(
            shape.ranks.len() == self.layout.dep as usize,
            "step has {} ranks, layout has DEP {}",
            shape.ranks.len(),
            self.layout.dep
        );
        let mixed = shape.is_mixed();
        let drafting = (shape.phase == Phase::Decode || mixed) && shape.draft_tokens > 0;
        let q = 1 + if drafting {
            shape.draft_tokens as u64
        } else {
            0
        };
        let n = shape.ranks.len();
        let mut works = vec![RankWork::default(); p];
        let mut draft_works = vec![RankWork::default(); if drafting { p } else { 0 }];
        for (i, rank) in shape.ranks[..p].iter().enumerate() {
            let d = if drafting && !mixed {
                Some(&mut draft_works[i])
            } else {
                None
            };
            self.rank_work(shape.phase, rank, q, &mut works[i], d);
            if mixed {
                // One forward pass: the decode requests' queries join the GEMMs, their
                // attention stays a decode kernel's (their MTP drafts run after it).
                let mut riders = RankWork::default();
                let d = draft_works.get_mut(i);
                self.rank_work(Phase::Decode, &shape.decode_ranks[i], q, &mut riders, d);
                works[i].ride(&riders);
            }
        }
        let mut cost = self.price_step(shape.phase, &works, n, trace);
        if drafting && cost.tokens_processed > 0 {
            let draft = shape.draft_tokens as f64 * self.draft_pass_s(&draft_works, n);
            cost.op_s[Op::MtpDraft.index()] = draft;
            cost.op_bound[Op::MtpDraft.index()] = Bound::Latency;
            cost.step_s += draft;
            cost.balanced_step_s += draft;
            cost.unskewed_step_s += draft;
        }
        cost
    }
}

impl CostModel for AnalyticCostModel {
    /// A group whose ranks repeat (one copy of the rack simulated, or a uniform batch)
    /// is priced from one period of them: the same figures, bit for bit, as
    /// [`AnalyticCostModel::step_rank_by_rank`].
    fn step(&self, shape: &StepShape<'_>) -> StepCost {
        self.step_in_periods(shape, step_period(shape), None)
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
    /// Attention kernels are rooflines per class, which are affine only where one
    /// resource binds: the model declares no breakpoint for a roofline's crossover,
    /// so decode steps priced as aggregates are exact up to that crossover's rounding
    /// (`cost_properties::decode_cost_is_affine_between_breakpoints` bounds it).
    fn decode_context_breakpoints(&self, draft_tokens: u32) -> Vec<u64> {
        let a = &self.model.attention;
        let top_k = a.indexer.as_ref().map(|i| i.top_k as u64);
        let mut bp = Vec::new();
        for q in [1u64, 1 + draft_tokens as u64] {
            let straddle = |bp: &mut Vec<u64>, cap: u64| bp.extend(cap.saturating_sub(q)..=cap);
            straddle(&mut bp, a.window as u64);
            straddle(&mut bp, a.chunk as u64);
            for c in &self.compiled.classes {
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
    /// Tokens one attention replica holds: a DEP rank's, or a TP replica's, whose
    /// GPUs each keep their KV heads' share (all of it with MLA).
    fn kv_capacity_tokens_per_rank(&self) -> u64 {
        let bytes = self.kv_bytes_per_rank();
        let per_gpu = self.model.kv.bytes_per_token * self.compiled.kv_share;
        if bytes <= 0.0 || per_gpu <= 0.0 {
            0
        } else {
            (bytes / per_gpu) as u64
        }
    }

    fn kv_extra_tokens(&self, tokens: u64) -> u64 {
        crate::serving::kv_extra_tokens(&self.model, self.model.kv.bytes_per_token, tokens) as u64
    }
}
