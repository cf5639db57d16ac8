//! Two-micro-batch overlap of communication with compute, stage by stage.
//!
//! Each MoE layer runs four stages per micro-batch: attention (and everything before
//! the router), dispatch, experts, combine. With two micro-batches the compute stream
//! runs `A0 A1 E0 E1` and the communication stream `D0 D1 C0 C1` per layer, each stage
//! waiting for the one before it in its micro-batch (`D_m` after `A_m`, `E_m` after
//! `D_m`, `C_m` after `E_m`, the next layer's `A_m` after `C_m`): DeepSeek's and
//! SGLang's two-batch overlap. Unequal stages leave communication exposed; the step is
//! never shorter than either stream's busy time. Splitting has a price the caller
//! puts into the stage times: weights are read once per micro-batch, and smaller
//! GEMMs run less efficiently.
//!
//! A fifth compute stage, `S_m` (`post`), runs work that needs neither exchange after
//! the combine is launched: in prefill, SGLang's reproduction of DeepSeek's schedule
//! computes the shared expert while the micro-batch's combine is in flight
//! (`_compute_moe_deepseek_blog_prefill` in sglang `python/sglang/srt/operations_strategy.py`:
//! `op_shared_experts` between `op_combine_a` and `op_combine_b`). The compute stream
//! then runs `A0 A1 E0 E1 S0 A0' S1 A1' ...`: `S_m` after `E_1`, and the next layer's
//! `A_m` after both `S_m` and `C_m`. With `post` zero the schedule is the four-stage one.
//!
//! A communication stage occupies its stream for `*_busy` and completes after its full
//! time: normal kernels run on SMs for their whole time (busy = time); low-latency
//! kernels post their sends and let a receive hook complete them in the background
//! (DeepEP), so only the transfer occupies the link and their latency is a delay the
//! other micro-batch's compute can fill.

use crate::cost::Pipeline;

/// One micro-batch's stage times at one layer (for the serial schedule: the whole
/// batch's).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stages {
    pub attn: f64,
    pub dispatch: f64,
    pub experts: f64,
    pub combine: f64,
    /// Time the dispatch and combine occupy the communication stream (at most their
    /// full time).
    pub dispatch_busy: f64,
    pub combine_busy: f64,
    /// Compute run after the combine is launched, while it is in flight (the shared
    /// expert in prefill); the next layer's attention waits for it.
    pub post: f64,
    /// Parts of `attn` and `experts` that the five-stage decode pipeline
    /// ([`super::pipeline`]) runs in stages of their own: the attention core (with the
    /// indexer), the shared expert, and the low-latency kernels' send/receive time on
    /// the compute stream (in `attn` for the dispatch, in `experts` for the combine).
    /// The two-batch schedule reads only the sums.
    pub core: f64,
    pub shared: f64,
    pub dispatch_compute: f64,
    pub combine_compute: f64,
}

impl Stages {
    pub fn compute(&self) -> f64 {
        self.attn + self.experts + self.post
    }
    /// Full communication time (what a serial schedule waits for).
    pub fn comm(&self) -> f64 {
        self.dispatch + self.combine
    }
}

/// Start and end of each stage of one layer, both micro-batches.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LayerTimeline {
    /// Two-batch schedule: `[A0, A1, D0, D1, E0, E1, C0, C1, S0, S1]` as (start, end),
    /// seconds from the layer's first start (`S_m` empty at `E_m`'s end when there is
    /// no `post`); the rest unused. Five-stage pipeline: [`super::pipeline::NAMES`].
    pub spans: [(f64, f64); super::pipeline::SPANS],
    /// Position of that layer in the model's layer sequence, and its period: from its
    /// first start to the next layer's (to the step's end for the last layer).
    pub layer: usize,
    pub period_s: f64,
    /// The schedule the spans are of.
    pub pipeline: Pipeline,
}

impl LayerTimeline {
    pub const NAMES: [&'static str; SPANS] =
        ["A0", "A1", "D0", "D1", "E0", "E1", "C0", "C1", "S0", "S1"];

    /// The stages that take time, by name (two-batch: the four stages always).
    pub fn named(&self) -> impl Iterator<Item = (&'static str, (f64, f64))> + '_ {
        let five = self.pipeline == Pipeline::FiveStage;
        let names: &'static [&'static str] = if five {
            &super::pipeline::NAMES
        } else {
            &Self::NAMES
        };
        names
            .iter()
            .zip(self.spans.iter())
            .filter(move |(n, (a, b))| b > a || !(five || n.starts_with('S')))
            .map(|(n, s)| (*n, *s))
    }
}

/// Stages per layer of a two-batch timeline.
pub const SPANS: usize = 10;

/// A schedule's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Schedule {
    pub total_s: f64,
    /// Time the compute stream is busy.
    pub compute_s: f64,
    /// Time the communication stream is busy.
    pub comm_s: f64,
    /// The middle layer's stages (two-batch schedules only).
    pub timeline: LayerTimeline,
}

impl Schedule {
    /// Communication the compute stream waits for.
    pub fn exposed_comm_s(&self) -> f64 {
        (self.total_s - self.compute_s).max(0.0)
    }
}

/// Every stage one after another.
pub fn serial(layers: &[Stages]) -> Schedule {
    let compute_s: f64 = layers.iter().map(Stages::compute).sum();
    let comm_s: f64 = layers.iter().map(Stages::comm).sum();
    Schedule {
        total_s: compute_s + comm_s,
        compute_s,
        comm_s,
        timeline: LayerTimeline::default(),
    }
}

/// Two micro-batches, each with the stage times `layers[i]` at layer `i`.
pub fn two_batch(layers: &[Stages]) -> Schedule {
    two_batch_with(layers.len(), |i| layers[i])
}

/// Two micro-batches over `n` layers, `stage(i)` giving each micro-batch's stage times
/// at layer `i`.
pub fn two_batch_with(n: usize, stage: impl Fn(usize) -> Stages) -> Schedule {
    two_batch_recorded(n, stage, None)
}

/// [`two_batch_with`], recording every layer's spans (`[A0, A1, D0, D1, E0, E1, C0,
/// C1, S0, S1]`, seconds from the step's start) into `record`.
pub fn two_batch_recorded(
    n: usize,
    stage: impl Fn(usize) -> Stages,
    mut record: Option<&mut Vec<[(f64, f64); SPANS]>>,
) -> Schedule {
    let (mut comp, mut comm) = (0.0f64, 0.0f64);
    let mut ready = [0.0f64; 2];
    let mut timeline = LayerTimeline::default();
    let mid = n / 2;
    let mut mid_start = 0.0;
    let (mut compute_s, mut comm_s) = (0.0, 0.0);
    // The previous layer's post stages: when each may start (its `E_m`'s end), and
    // how long they run.
    let mut post_after = [0.0f64; 2];
    let mut post = 0.0f64;
    let mut prev = [(0.0, 0.0); SPANS];
    for i in 0..n {
        let s = &stage(i);
        let mut spans = [(0.0, 0.0); SPANS];
        spans[0] = run(&mut comp, ready[0], s.attn, s.attn);
        if i > 0 {
            // `S1` of the layer before runs between this layer's `A0` and `A1`.
            prev[9] = run(&mut comp, post_after[1], post, post);
            if let Some(r) = record.as_deref_mut() {
                r[i - 1] = prev;
            }
            if i == mid + 1 {
                timeline.spans[9] = (prev[9].0 - mid_start, prev[9].1 - mid_start);
            }
        }
        layer_rest(&mut comp, &mut comm, ready[1], s, &mut spans);
        (post_after, post) = ([spans[4].1, spans[5].1], s.post);
        // The next layer's attention waits for its combine (and, on the compute
        // stream, for the post stage before it).
        ready = [spans[6].1, spans[7].1];
        if let Some(r) = record.as_deref_mut() {
            r.push(spans);
        }
        compute_s += 2.0 * s.compute();
        comm_s += 2.0 * (s.dispatch_busy + s.combine_busy);
        note_middle(&mut timeline, &mut mid_start, i, mid, &spans);
        prev = spans;
    }
    if n > 0 {
        // The last layer's `S1`.
        prev[9] = run(&mut comp, post_after[1], post, post);
        if let Some(r) = record {
            r[n - 1] = prev;
        }
        if mid + 1 == n {
            timeline.spans[9] = (prev[9].0 - mid_start, prev[9].1 - mid_start);
        }
    }
    let total_s = comp.max(ready[0]).max(ready[1]);
    if mid + 1 >= n && n > 0 {
        timeline.period_s = total_s - mid_start;
    }
    Schedule {
        total_s,
        compute_s,
        comm_s,
        timeline,
    }
}

/// Runs a stage of time `d` on a stream (busy for `busy`) after `after`: its (start, end).
fn run(free: &mut f64, after: f64, d: f64, busy: f64) -> (f64, f64) {
    let start = free.max(after);
    *free = start + busy;
    (start, start + d)
}

/// Schedules one layer's stages after `A0`: `A1`, `D`, `E`, `C` and `S0` (`S1` left empty).
fn layer_rest(
    comp: &mut f64,
    comm: &mut f64,
    ready1: f64,
    s: &Stages,
    spans: &mut [(f64, f64); SPANS],
) {
    spans[1] = run(comp, ready1, s.attn, s.attn);
    spans[2] = run(comm, spans[0].1, s.dispatch, s.dispatch_busy);
    spans[3] = run(comm, spans[1].1, s.dispatch, s.dispatch_busy);
    spans[4] = run(comp, spans[2].1, s.experts, s.experts);
    spans[5] = run(comp, spans[3].1, s.experts, s.experts);
    spans[6] = run(comm, spans[4].1, s.combine, s.combine_busy);
    spans[7] = run(comm, spans[5].1, s.combine, s.combine_busy);
    // `S0` follows `E1` on the compute stream; `S1` waits for the next layer's `A0`.
    spans[8] = run(comp, spans[4].1, s.post, s.post);
    spans[9] = (spans[5].1, spans[5].1);
}

/// Records the middle layer's spans in `timeline`, and its period when the next layer starts.
fn note_middle(
    timeline: &mut LayerTimeline,
    mid_start: &mut f64,
    i: usize,
    mid: usize,
    spans: &[(f64, f64); SPANS],
) {
    if i == mid {
        let t0 = spans[0].0;
        *mid_start = t0;
        for (t, (a, b)) in timeline.spans.iter_mut().zip(*spans) {
            *t = (a - t0, b - t0);
        }
        timeline.layer = i;
    } else if i == mid + 1 {
        timeline.period_s = spans[0].0 - *mid_start;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(attn: f64, dispatch: f64, experts: f64, combine: f64) -> Stages {
        Stages {
            attn,
            dispatch,
            experts,
            combine,
            dispatch_busy: dispatch,
            combine_busy: combine,
            ..Stages::default()
        }
    }

    #[test]
    fn post_stage_runs_while_the_combine_flies() {
        // Two layers of A 1, D 1, E 1, C 2 and a post stage of 1. Layer 0: A0 [0,1],
        // A1 [1,2]; D0 [1,2], D1 [2,3]; E0 [2,3], E1 [3,4]; C0 [3,5], C1 [5,7]; S0
        // after E1 [4,5]. Layer 1: A0 after C0 [5,6]; S1 of layer 0 [6,7]; A1 after C1
        // [7,8]; D0 [7,8], D1 [8,9]; E0 [8,9], E1 [9,10]; C0 [9,11], C1 [11,13]; S0
        // [10,11]; the last S1 [11,12]. The step ends with C1 at 13.
        let s = Stages {
            post: 1.0,
            ..st(1.0, 1.0, 1.0, 2.0)
        };
        let mut rec = Vec::new();
        let r = two_batch_recorded(2, |_| s, Some(&mut rec));
        assert_eq!(r.total_s, 13.0);
        assert_eq!(r.compute_s, 12.0);
        assert_eq!(rec[0][8], (4.0, 5.0));
        assert_eq!(rec[0][9], (6.0, 7.0));
        assert_eq!(rec[1][1], (7.0, 8.0));
        assert_eq!(rec[1][9], (11.0, 12.0));
        // The middle layer is the last: from its A0 at 5 to the step's end.
        assert_eq!(r.timeline.period_s, 8.0);
        assert_eq!(r.timeline.spans[9], (6.0, 7.0));
        // The same work inside the experts' stage (E 2) keeps the combine waiting:
        // layer 0 E0 [2,4], E1 [4,6], C0 [4,6], C1 [6,8]; layer 1 A0 [6,7], A1 [8,9],
        // D0 [8,9], D1 [9,10], E0 [9,11], E1 [11,13], C0 [11,13], C1 [13,15].
        assert_eq!(two_batch(&[st(1.0, 1.0, 2.0, 2.0); 2]).total_s, 15.0);
        // No post stage: the four-stage schedule, its S spans empty and not named.
        let r = two_batch(&[st(1.0, 1.0, 1.0, 1.0); 3]);
        assert!(r.timeline.named().all(|(n, _)| !n.starts_with('S')));
    }

    #[test]
    fn balanced_stages_hide_communication() {
        // One layer, every stage 1: compute A0 [0,1] A1 [1,2]; D0 [1,2] D1 [2,3];
        // E0 [2,3] E1 [3,4]; C0 [3,4] C1 [4,5]. Total 5 against a serial 8 (whole
        // batch stages of 2 each).
        let s = two_batch(&[st(1.0, 1.0, 1.0, 1.0)]);
        assert_eq!(s.total_s, 5.0);
        // One layer: its period runs to the step's end.
        assert_eq!(s.timeline.period_s, 5.0);
        assert_eq!(s.compute_s, 4.0);
        assert_eq!(s.comm_s, 4.0);
        assert_eq!(s.exposed_comm_s(), 1.0);
        assert_eq!(serial(&[st(2.0, 2.0, 2.0, 2.0)]).total_s, 8.0);
        // Many layers: the steady state hides all but the edges; per layer 4.
        let s = two_batch(&[st(1.0, 1.0, 1.0, 1.0); 10]);
        assert_eq!(s.total_s, 41.0);
        assert_eq!(s.timeline.spans[2], (1.0, 2.0));
        // The middle layer (5) starts at 20 and the next at 24: a period of 4.
        assert_eq!(s.timeline.layer, 5);
        assert_eq!(s.timeline.period_s, 4.0);
    }

    #[test]
    fn long_communication_stays_exposed() {
        // Dispatch 3 per micro-batch against compute of 1 per stage: the comm stream
        // is busy 2 * (3 + 1) = 8 per layer and binds.
        let s = two_batch(&[st(1.0, 3.0, 1.0, 1.0); 4]);
        assert!(s.total_s >= 4.0 * 8.0);
        assert!(s.total_s >= s.compute_s && s.total_s >= s.comm_s);
        assert!(s.exposed_comm_s() > 0.0);
    }

    #[test]
    fn latency_of_hooked_kernels_overlaps_itself() {
        // Dispatch and combine of 3 with only 0.5 of it on the link: both micro-
        // batches' latencies run concurrently. One layer: A0 [0,1], A1 [1,2]; D0 [1,4]
        // (link busy to 1.5), D1 [2,5]; E0 [4,5], E1 [5,6]; C0 [5,8], C1 [6,9].
        let mut s = st(1.0, 3.0, 1.0, 3.0);
        s.dispatch_busy = 0.5;
        s.combine_busy = 0.5;
        let r = two_batch(&[s]);
        assert_eq!(r.total_s, 9.0);
        assert_eq!(r.comm_s, 2.0);
        // Occupying the stream for the whole time serialises them: D0 [1,4], D1 [4,7],
        // E0 [4,5], E1 [7,8], C0 [7,10], C1 [10,13].
        assert_eq!(two_batch(&[st(1.0, 3.0, 1.0, 3.0)]).total_s, 13.0);
    }

    #[test]
    fn no_communication_is_the_compute_stream() {
        let s = two_batch(&[st(2.0, 0.0, 3.0, 0.0); 3]);
        assert_eq!(s.total_s, 30.0);
        assert_eq!(s.exposed_comm_s(), 0.0);
    }
}
