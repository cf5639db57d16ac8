//! DeepSeek's five-stage decode pipeline: two micro-batches on one compute stream,
//! the second two stages behind the first, with low-latency all-to-all kernels whose
//! transfers fly while the other micro-batch computes.
//!
//! SGLang's reproduction of DeepSeek's decode schedule,
//! `_compute_moe_deepseek_blog_decode` in sglang
//! `python/sglang/srt/operations_strategy.py` (`tbo_delta_stages=2`), cuts each layer
//! of a micro-batch into five stages at its yield points:
//!
//! 1. `A`: attention's preparation (norms, projections, RoPE; with the previous
//!    layer's output);
//! 2. `K`: the attention core, the gate and the expert selection;
//! 3. `S`: the dispatch's send half, then the shared expert;
//! 4. `E`: the dispatch's receive half (after the tokens arrive), the routed experts,
//!    the combine's send half;
//! 5. `R`: the combine's receive half (after the results arrive).
//!
//! `execute_overlapped_operations` in `python/sglang/srt/two_batch_overlap.py` runs
//! the stages in the order `a0 a1 a2 b0 a3 b1 ... b(n-1)` (stage `k` of the first
//! micro-batch, then stage `k - 2` of the second). So a micro-batch's dispatch flies
//! while the other runs one stage (its `A` or its next layer's `A`), and its combine
//! while the other runs its `K`: the pipeline hides the combine behind attention,
//! where the two-batch schedule ([`super::overlap`]) hides it behind the other
//! micro-batch's experts. It pays when attention is long against the experts (long
//! contexts).
//!
//! The split of each low-latency kernel's compute-stream time into a send half and a
//! receive half is assumed equal: DeepEP's README reports only their sum; the test logs
//! posted with DeepEP pull requests #248 (one node) and #425 (three nodes), on other GPUs
//! and settings, put the send half at 53-80%.

use super::overlap::{LayerTimeline, Schedule, Stages};

/// Spans per layer of a five-stage timeline.
pub const SPANS: usize = 14;

/// The spans' names: the five compute stages of each micro-batch, then the dispatch
/// and combine transfers.
pub const NAMES: [&str; SPANS] = [
    "A0", "A1", "K0", "K1", "S0", "S1", "E0", "E1", "R0", "R1", "D0", "D1", "C0", "C1",
];

/// Share of a low-latency kernel's compute-stream time spent sending (the rest
/// receives); assumed, see the module's doc.
pub const SEND_SHARE: f64 = 0.5;

impl Stages {
    /// The low-latency kernels' compute-stream time split at [`SEND_SHARE`]: dispatch
    /// send and receive, combine send and receive.
    pub fn halves(&self) -> [f64; 4] {
        let (d, c) = (self.dispatch_compute, self.combine_compute);
        [
            d * SEND_SHARE,
            d * (1.0 - SEND_SHARE),
            c * SEND_SHARE,
            c * (1.0 - SEND_SHARE),
        ]
    }

    /// Compute-stream time of one micro-batch's five stages (`A K S E R`).
    pub fn five(&self) -> [f64; 5] {
        let [ds, dr, cs, cr] = self.halves();
        let prepare = (self.attn - self.core - self.dispatch_compute).max(0.0);
        let routed = (self.experts - self.shared - self.combine_compute).max(0.0);
        [prepare, self.core, ds + self.shared, dr + routed + cs, cr]
    }
}

/// The pipeline's state as it runs.
struct Pipe {
    /// When the compute stream and the link are free.
    comp: f64,
    link: f64,
    /// When each micro-batch's dispatched tokens and combined results arrive.
    arrive: [[f64; 2]; 2],
    /// The stage times (and the five stages') and spans of the (at most two) layers in
    /// flight, by parity.
    stages: [Stages; 2],
    five: [[f64; 5]; 2],
    spans: [[(f64, f64); SPANS]; 2],
    compute_s: f64,
    comm_s: f64,
}

impl Pipe {
    /// A transfer of `d` (of it `busy` on the link) issued at `at`: its span.
    fn send(&mut self, at: f64, d: f64, busy: f64) -> (f64, f64) {
        if d <= 0.0 && busy <= 0.0 {
            return (at, at);
        }
        let start = self.link.max(at);
        self.link = start + busy;
        self.comm_s += busy;
        (start, start + d)
    }

    /// Runs stage `j` of layer `i` of micro-batch `m`.
    fn run(&mut self, m: usize, i: usize, j: usize) {
        let s = self.stages[i % 2];
        let d = self.five[i % 2][j];
        let wait = match j {
            3 => self.arrive[m][0],
            4 => self.arrive[m][1],
            _ => 0.0,
        };
        let start = self.comp.max(wait);
        let end = start + d;
        self.comp = end;
        self.compute_s += d;
        self.spans[i % 2][2 * j + m] = (start, end);
        if j == 2 {
            // The send half goes first; the shared expert runs while the tokens fly.
            let issue = start + s.halves()[0];
            let span = self.send(issue, s.dispatch, s.dispatch_busy);
            self.spans[i % 2][10 + m] = span;
            self.arrive[m][0] = span.1;
        } else if j == 3 {
            let span = self.send(end, s.combine, s.combine_busy);
            self.spans[i % 2][12 + m] = span;
            self.arrive[m][1] = span.1;
        }
    }
}

/// The five-stage pipeline over `n` layers, `stage(i)` giving each micro-batch's stage
/// times at layer `i` (its `core`, `shared` and low-latency compute parts set),
/// recording every layer's spans ([`NAMES`], seconds from the step's start) into
/// `record`.
pub fn five_stage_recorded(
    n: usize,
    stage: impl Fn(usize) -> Stages,
    mut record: Option<&mut Vec<[(f64, f64); SPANS]>>,
) -> Schedule {
    let mut p = Pipe {
        comp: 0.0,
        link: 0.0,
        arrive: [[0.0; 2]; 2],
        stages: [Stages::default(); 2],
        five: [[0.0; 5]; 2],
        spans: [[(0.0, 0.0); SPANS]; 2],
        compute_s: 0.0,
        comm_s: 0.0,
    };
    let mut timeline = LayerTimeline {
        pipeline: crate::cost::Pipeline::FiveStage,
        ..LayerTimeline::default()
    };
    let mid = n / 2;
    let mut mid_start = 0.0;
    let total = 5 * n;
    for k in 0..total + 2 {
        if k < total {
            let (i, j) = (k / 5, k % 5);
            if j == 0 {
                p.stages[i % 2] = stage(i);
                p.five[i % 2] = p.stages[i % 2].five();
                p.spans[i % 2] = [(0.0, 0.0); SPANS];
            }
            p.run(0, i, j);
            if j == 0 && i == mid {
                mid_start = p.spans[i % 2][0].0;
            } else if j == 0 && i == mid + 1 {
                timeline.period_s = p.spans[i % 2][0].0 - mid_start;
            }
        }
        if k >= 2 {
            let (i, j) = ((k - 2) / 5, (k - 2) % 5);
            p.run(1, i, j);
            if j == 4 {
                // Layer `i` is complete.
                let spans = p.spans[i % 2];
                if let Some(r) = record.as_deref_mut() {
                    r.push(spans);
                }
                if i == mid {
                    timeline.spans = spans.map(|(a, b)| (a - mid_start, b - mid_start));
                    timeline.layer = i;
                }
            }
        }
    }
    let total_s = p.comp;
    if mid + 1 >= n && n > 0 {
        timeline.period_s = total_s - mid_start;
    }
    Schedule {
        total_s,
        compute_s: p.compute_s,
        comm_s: p.comm_s,
        timeline,
    }
}

/// [`five_stage_recorded`] without a record.
pub fn five_stage_with(n: usize, stage: impl Fn(usize) -> Stages) -> Schedule {
    five_stage_recorded(n, stage, None)
}

#[cfg(test)]
mod tests {
    use super::super::overlap::two_batch;
    use super::*;

    /// A decode layer per micro-batch: prepare `a`, core `k`, shared 1, routed 1,
    /// send/receive halves of 0.5 each (1 per kernel), dispatch and combine flying `d`
    /// and `c` with no link contention (busy 0).
    fn st(a: f64, k: f64, d: f64, c: f64) -> Stages {
        Stages {
            attn: a + k + 1.0,
            core: k,
            dispatch_compute: 1.0,
            experts: 1.0 + 1.0 + 1.0,
            shared: 1.0,
            combine_compute: 1.0,
            dispatch: d,
            combine: c,
            ..Stages::default()
        }
    }

    #[test]
    fn stages_split_as_sglang_yields() {
        // prepare 2, core 3, S = send 0.5 + shared 1, E = recv 0.5 + routed 1 + send
        // 0.5, R = recv 0.5.
        assert_eq!(st(2.0, 3.0, 0.0, 0.0).five(), [2.0, 3.0, 1.5, 2.0, 0.5]);
    }

    #[test]
    fn one_layer_by_hand() {
        // Stages A 1, K 2, S 1.5, E 2, R 0.5; dispatch flies 2, combine 3. Order a0 a1
        // a2 b0 a3 b1 a4 b2 b3 b4:
        // a0 [0,1], a1 [1,3], a2 [3,4.5] (dispatch issued at 3.5, arrives 5.5),
        // b0 [4.5,5.5], a3 waits for 5.5: [5.5,7.5] (combine arrives 10.5),
        // b1 [7.5,9.5], a4 waits for 10.5: [10.5,11], b2 [11,12.5] (issued 11.5,
        // arrives 13.5), b3 [13.5,15.5] (combine arrives 18.5), b4 [18.5,19].
        let mut rec = Vec::new();
        let r = five_stage_recorded(1, |_| st(1.0, 2.0, 2.0, 3.0), Some(&mut rec));
        assert_eq!(r.total_s, 19.0);
        assert_eq!(r.compute_s, 14.0);
        let sp = rec[0];
        assert_eq!(sp[0], (0.0, 1.0));
        assert_eq!(sp[1], (4.5, 5.5));
        assert_eq!(sp[6], (5.5, 7.5));
        assert_eq!(sp[8], (10.5, 11.0));
        assert_eq!(sp[10], (3.5, 5.5));
        assert_eq!(sp[13], (15.5, 18.5));
        assert_eq!(r.timeline.spans, sp);
        assert_eq!(r.timeline.period_s, 19.0);
        assert!(r.timeline.named().all(|(n, _)| NAMES.contains(&n)));
    }

    #[test]
    fn long_attention_hides_the_combine_where_two_batches_do_not() {
        // Per micro-batch: prepare 1, core 4, shared 1, routed 1, halves 0.5; the
        // dispatch flies 1, the combine 4. In the steady state the five-stage pipeline
        // hides the combine behind the other micro-batch's core and runs every layer in
        // its compute (2 x 9 = 18 per layer). The two-batch schedule hides the combine
        // behind the other micro-batch's experts (3): it waits 1 per layer.
        let s = st(1.0, 4.0, 1.0, 4.0);
        let n = 20;
        let five = five_stage_with(n, |_| s);
        let two = two_batch(&vec![s; n]);
        assert_eq!(five.compute_s, two.compute_s);
        assert_eq!(five.timeline.period_s, 18.0);
        assert!(two.timeline.period_s > 18.5, "{}", two.timeline.period_s);
        assert!(five.total_s < two.total_s);
    }

    #[test]
    fn short_attention_leaves_the_transfers_exposed() {
        // Prepare and core of 0.5 cannot hide a combine of 4: each micro-batch waits
        // for its own results every layer; the two-batch schedule hides more of it
        // behind the other micro-batch's whole attention and experts.
        let s = st(0.5, 0.5, 1.0, 4.0);
        let n = 20;
        let five = five_stage_with(n, |_| s);
        let two = two_batch(&vec![s; n]);
        assert!(five.total_s > two.total_s);
        assert!(five.total_s >= five.compute_s);
    }

    #[test]
    fn no_layers_no_time() {
        let r = five_stage_with(0, |_| Stages::default());
        assert_eq!(r.total_s, 0.0);
    }
}
