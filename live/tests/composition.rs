//! The simulator's fitted cost model composes a step from the same op calls the live
//! engine runs: the executor's trace of a forward pass equals the forward pass's op
//! list (`spec::call::forward_pass`, through `LiveModelExt::step_calls`) for the same
//! batch, call for call (expert groups and the rows a rank receives are the only
//! values routing decides; the list uses their expectation, checked here to be close).

use engine::serve::{CpuDevice, Executor, Seq, Shard, Solo, ThreadExchange};
use live::model::{engine_config, PAGE_TOKENS};
use sim::cost::fitted::LiveModelExt;
use sim::cost::{Phase, ReqSlice, StepShape};
use spec::call::{expected_touched, Call, CallOp};
use spec::live_model::LiveModel;

fn model(name: &str) -> LiveModel {
    let path = format!(
        "{}/../scenarios/models/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let m: spec::model::Model = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    LiveModel::from_model(&m, PAGE_TOKENS).unwrap()
}

/// Calls with routing-decided values blanked: every linear's expert groups, the
/// exchanges' bytes, and with several ranks the rows each rank's experts receive.
fn canonical(calls: &[Call], dep: bool) -> Vec<Call> {
    let mut v: Vec<Call> = calls
        .iter()
        .cloned()
        .map(|mut c| {
            let op = c.op;
            for (n, x) in c.vars.iter_mut() {
                let routed = (op == CallOp::Linear && *n == "groups")
                    || (op == CallOp::Copy && *n == "bytes")
                    || (dep && (op == CallOp::Linear || op == CallOp::Swiglu) && *n == "rows");
                if routed {
                    *x = 0;
                }
            }
            c
        })
        .collect();
    v.sort();
    v
}

fn seqs(
    lm: &LiveModel,
    prefill: &[(usize, usize)],
    decode: &[usize],
    drafts: usize,
) -> (Vec<Seq>, Vec<Seq>) {
    let mut page = 0u32;
    let mut pages = |n: usize| {
        let p: Vec<u32> = (page..page + n.div_ceil(PAGE_TOKENS) as u32).collect();
        page += p.len() as u32;
        p
    };
    let tok = |i: usize| (i * 31 % lm.vocab) as u32;
    let p = prefill
        .iter()
        .map(|&(new, ctx)| Seq {
            tokens: (ctx..ctx + new).map(tok).collect(),
            start: ctx,
            pages: pages(ctx + new),
            accept: None,
        })
        .collect();
    let d = decode
        .iter()
        .map(|&ctx| Seq {
            tokens: (0..1 + drafts).map(tok).collect(),
            start: ctx,
            pages: pages(ctx + 1 + drafts),
            accept: Some(drafts.min(1)),
        })
        .collect();
    (p, d)
}

/// The phase a test step runs (prefill when it has prefill sequences, else decode),
/// its sequences and their slices as the cost model sees them.
fn one_phase(
    (p, d): (Vec<Seq>, Vec<Seq>),
    prefill: &[(usize, usize)],
    decode: &[usize],
) -> (Phase, Vec<Seq>, Vec<ReqSlice>) {
    if !p.is_empty() {
        (
            Phase::Prefill,
            p,
            prefill
                .iter()
                .map(|&(n, c)| ReqSlice::one(n as u32, c as u64))
                .collect::<Vec<_>>(),
        )
    } else {
        (
            Phase::Decode,
            d,
            decode.iter().map(|&c| ReqSlice::one(1, c as u64)).collect(),
        )
    }
}

/// Asserts that each routed linear of `traced` touched about as many experts as
/// expected for the step's rows (MoE models only).
fn assert_touched_as_expected(
    name: &str,
    lm: &LiveModel,
    traced: &[Call],
    slices: &[ReqSlice],
    phase: Phase,
    drafts: usize,
) {
    let touched: Vec<u64> = traced
        .iter()
        .filter(|c| c.op == CallOp::Linear && c.vars[0].1 > 1)
        .map(|c| c.vars[0].1)
        .collect();
    let rows: u64 = slices
        .iter()
        .map(|s| {
            if phase == Phase::Decode {
                1 + drafts as u64
            } else {
                s.new_tokens as u64
            }
        })
        .sum();
    if let Some(moe) = lm.moe {
        let want = expected_touched(moe.experts, moe.top_k, rows as f64);
        for t in touched {
            assert!(
                (t as f64 - want).abs() <= 0.35 * want + 1.0,
                "{name}: {t} experts touched, expected {want:.1}"
            );
        }
    }
}

#[test]
fn one_rank_traces_are_the_composed_calls() {
    for name in ["cpu-live-moe", "tiny-moe"] {
        let lm = model(name);
        let shard = Shard {
            seed: 3,
            rank: 0,
            ranks: 1,
            pages: 256,
        };
        let mut ex = Executor::new(Box::new(CpuDevice::new()), engine_config(&lm), shard).unwrap();
        ex.set_trace(true);
        for (prefill, decode, drafts) in [
            (vec![(40usize, 0usize), (17, 300)], vec![], 0usize),
            (vec![], vec![5usize, 130, 700], 1),
            (vec![], vec![64], 0),
        ] {
            let (p, d) = seqs(&lm, &prefill, &decode, drafts);
            let (phase, s, slices) = one_phase((p, d), &prefill, &decode);
            ex.forward(&s, drafts, &mut Solo).unwrap();
            let traced: Vec<Call> = ex.take_trace();
            let ranks = vec![slices];
            let shape = StepShape {
                phase,
                ranks: &ranks,
                decode_ranks: &[],
                draft_tokens: drafts as u32,
            };
            let composed: Vec<Call> = lm
                .step_calls(&shape, 0)
                .into_iter()
                .map(|(_, c)| c)
                .collect();
            assert_eq!(
                canonical(&traced, false),
                canonical(&composed, false),
                "{name}: {phase:?} {prefill:?} {decode:?}"
            );
            // Expert groups: the routing touched about as many experts as expected.
            assert_touched_as_expected(name, &lm, &traced, &shape.ranks[0], phase, drafts);
        }
    }
}

#[test]
fn dep2_traces_are_the_composed_calls() {
    let lm = model("cpu-live-moe");
    let cfg = engine_config(&lm);
    let mut execs: Vec<Executor> = (0..2)
        .map(|r| {
            let shard = Shard {
                seed: 3,
                rank: r,
                ranks: 2,
                pages: 64,
            };
            let mut x = Executor::new(Box::new(CpuDevice::new()), cfg.clone(), shard).unwrap();
            x.set_trace(true);
            x
        })
        .collect();
    // Enough rows that each rank receives expert rows in every layer (the composition
    // assumes its expected share, never none).
    let per_rank = [vec![100usize, 900, 30, 5], vec![20, 40, 60, 80]];
    let work: Vec<Vec<Seq>> = per_rank.iter().map(|d| seqs(&lm, &[], d, 1).1).collect();
    let traces: Vec<Vec<Call>> = std::thread::scope(|s| {
        let hs: Vec<_> = execs
            .iter_mut()
            .zip(ThreadExchange::group(2))
            .zip(&work)
            .map(|((x, mut ex), w)| {
                s.spawn(move || {
                    x.forward(w, 1, &mut ex).unwrap();
                    x.take_trace()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ranks: Vec<Vec<ReqSlice>> = per_rank
        .iter()
        .map(|d| d.iter().map(|&c| ReqSlice::one(1, c as u64)).collect())
        .collect();
    let shape = StepShape {
        phase: Phase::Decode,
        ranks: &ranks,
        decode_ranks: &[],
        draft_tokens: 1,
    };
    for (r, t) in traces.iter().enumerate() {
        let composed: Vec<Call> = lm
            .step_calls(&shape, r)
            .into_iter()
            .map(|(_, c)| c)
            .collect();
        assert_eq!(canonical(t, true), canonical(&composed, true), "rank {r}");
    }
}
