//! Properties of the analytic cost model over the shipped hardware and models, on
//! shapes drawn from a fixed seed (a failure prints the case to reproduce it).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sim::cost::{AnalyticCostModel, CostModel, CostParams, Layout, Op, Phase, ReqSlice, StepShape};
use spec::dtype::ByteSize;
use spec::{hardware::Hardware, model::Model};

fn hardware() -> Vec<Hardware> {
    [
        include_str!("../../scenarios/hardware/h100.toml"),
        include_str!("../../scenarios/hardware/h800.toml"),
        include_str!("../../scenarios/hardware/h200.toml"),
        include_str!("../../scenarios/hardware/b200.toml"),
        include_str!("../../scenarios/hardware/gb200.toml"),
        include_str!("../../scenarios/hardware/gb300.toml"),
    ]
    .iter()
    .map(|t| toml::from_str(t).unwrap())
    .collect()
}

fn models() -> Vec<Model> {
    [
        include_str!("../../scenarios/models/deepseek-v3.toml"),
        include_str!("../../scenarios/models/deepseek-v3.2.toml"),
        include_str!("../../scenarios/models/deepseek-v4-flash.toml"),
        include_str!("../../scenarios/models/deepseek-v4.1-flash.toml"),
        include_str!("../../scenarios/models/tiny-moe.toml"),
    ]
    .iter()
    .map(|t| toml::from_str(t).unwrap())
    .collect()
}

/// A random shipped hardware and model at a random DEP, priced with the hardware's
/// fitted parameters.
fn random_model(
    rng: &mut ChaCha8Rng,
    hws: &[Hardware],
    ms: &[Model],
) -> (String, String, u32, AnalyticCostModel) {
    let hw = &hws[rng.random_range(0..hws.len())];
    let m = &ms[rng.random_range(0..ms.len())];
    let dep = DEPS[rng.random_range(0..DEPS.len())];
    let c = AnalyticCostModel::new(hw.clone(), m.clone(), Layout::new(dep), params(hw));
    (hw.name.clone(), m.name.clone(), dep, c)
}

/// Decode or prefill, evenly.
fn random_phase(rng: &mut ChaCha8Rng) -> Phase {
    if rng.random_bool(0.5) {
        Phase::Decode
    } else {
        Phase::Prefill
    }
}

fn params(hw: &Hardware) -> CostParams {
    let mut p = CostParams::default();
    for (k, v) in &hw.cost {
        p.set(k, *v).unwrap();
    }
    p
}

fn step(
    c: &AnalyticCostModel,
    phase: Phase,
    per_rank: &[(u32, u32, u64)],
    draft: u32,
) -> sim::cost::StepCost {
    let ranks: Vec<Vec<ReqSlice>> = per_rank
        .iter()
        .map(|&(count, new, ctx)| {
            if count == 0 {
                vec![]
            } else {
                vec![ReqSlice {
                    new_tokens: new,
                    context_tokens: ctx,
                    count,
                }]
            }
        })
        .collect();
    c.step(&StepShape {
        phase,
        ranks: &ranks,
        decode_ranks: &[],
        draft_tokens: draft,
    })
}

const DEPS: [u32; 6] = [1, 2, 4, 8, 16, 32];

#[test]
fn step_time_never_decreases_with_more_tokens_or_context() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let hws = hardware();
    let ms = models();
    for case in 0..400 {
        let hw = &hws[rng.random_range(0..hws.len())];
        let m = &ms[rng.random_range(0..ms.len())];
        let dep = DEPS[rng.random_range(0..DEPS.len())];
        let overlap = rng.random_bool(0.5);
        let c = AnalyticCostModel::new(
            hw.clone(),
            m.clone(),
            Layout {
                overlap_microbatches: overlap,
                ..Layout::new(dep)
            },
            params(hw),
        );
        let phase = random_phase(&mut rng);
        let draft = if phase == Phase::Decode {
            rng.random_range(0..3)
        } else {
            0
        };
        let base: Vec<(u32, u32, u64)> = (0..dep)
            .map(|_| {
                (
                    rng.random_range(0..64),
                    rng.random_range(1..4096),
                    rng.random_range(0..200_000),
                )
            })
            .collect();
        let t0 = step(&c, phase, &base, draft).step_s;
        // More requests on one rank, more new tokens, more context: each never cheaper.
        let r = rng.random_range(0..dep as usize);
        let mut more = base.clone();
        more[r].0 += rng.random_range(1..16);
        let mut longer = base.clone();
        longer[r].2 += rng.random_range(1..500_000);
        let mut wider = base.clone();
        wider[r].1 += rng.random_range(1..4096);
        for (what, shape) in [
            ("requests", &more),
            ("context", &longer),
            ("new tokens", &wider),
        ] {
            if phase == Phase::Decode && what == "new tokens" {
                continue;
            }
            let t1 = step(&c, phase, shape, draft).step_s;
            assert!(
                t1 >= t0 * (1.0 - 1e-12),
                "case {case} (seed 2): more {what} made the step cheaper: {t0:e} -> {t1:e} ({} on {}, DEP{dep}, {phase:?}, overlap {overlap}, base {base:?})",
                m.name,
                hw.name
            );
        }
    }
}

#[test]
fn wider_dep_never_increases_moe_weight_bytes_per_rank() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let hws = hardware();
    for m in models().iter().filter(|m| m.moe.is_some()) {
        let experts = m.moe.as_ref().unwrap().routed_experts;
        let deps: Vec<u32> = DEPS.iter().copied().filter(|d| experts % d == 0).collect();
        for _ in 0..50 {
            let hw = &hws[rng.random_range(0..hws.len())];
            let batch = rng.random_range(1..256);
            let ctx = rng.random_range(0..100_000);
            let mut last = f64::INFINITY;
            for &dep in &deps {
                let c = AnalyticCostModel::new(hw.clone(), m.clone(), Layout::new(dep), params(hw));
                let s = step(&c, Phase::Decode, &vec![(batch, 1, ctx); dep as usize], 0);
                assert!(
                    s.moe_weight_bytes_per_rank <= last * (1.0 + 1e-12),
                    "{}: DEP{dep} with {batch} per rank reads {} B per rank, more than the narrower DEP's {last}",
                    m.name,
                    s.moe_weight_bytes_per_rank
                );
                last = s.moe_weight_bytes_per_rank;
            }
        }
    }
}

#[test]
fn two_mib_pages_never_cost_more_than_4kib() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let hws = hardware();
    let m: Model = models()
        .into_iter()
        .find(|m| m.engram.is_some())
        .expect("a model with Engram tables");
    for _ in 0..200 {
        let hw = &hws[rng.random_range(0..hws.len())];
        let dep = [1, 2, 4, 8][rng.random_range(0..4)];
        let tokens = rng.random_range(1..16_384);
        let ctx = rng.random_range(0..300_000);
        let mut small = m.clone();
        small.engram.as_mut().unwrap().page_size = ByteSize(4096);
        let mut huge = m.clone();
        huge.engram.as_mut().unwrap().page_size = ByteSize(2 << 20);
        let shape = vec![(1, tokens, ctx); dep as usize];
        let cost = |model: Model| {
            let c = AnalyticCostModel::new(hw.clone(), model, Layout::new(dep), params(hw));
            step(&c, Phase::Prefill, &shape, 0)
        };
        let (a, b) = (cost(small), cost(huge));
        assert!(
            b.op(Op::Engram) <= a.op(Op::Engram),
            "{}: 2 MiB pages {} > 4 KiB {}",
            hw.name,
            b.op(Op::Engram),
            a.op(Op::Engram)
        );
        assert!(b.step_s <= a.step_s * (1.0 + 1e-12));
    }
}

#[test]
fn breakdown_sums_to_the_step() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let hws = hardware();
    let ms = models();
    for _ in 0..200 {
        let (hw, m, dep, c) = random_model(&mut rng, &hws, &ms);
        let phase = random_phase(&mut rng);
        let shape: Vec<(u32, u32, u64)> = (0..dep)
            .map(|_| {
                (
                    rng.random_range(0..32),
                    rng.random_range(1..2048),
                    rng.random_range(0..100_000),
                )
            })
            .collect();
        let s = step(
            &c,
            phase,
            &shape,
            if phase == Phase::Decode { 1 } else { 0 },
        );
        let sum: f64 = Op::ALL.iter().map(|o| s.op(*o)).sum();
        assert!(
            (sum - s.step_s).abs() <= 1e-12 * s.step_s.max(1e-9),
            "{m} on {hw} DEP{dep} {phase:?} {:?}: sum {sum:e} step {:e} {:?}",
            shape,
            s.step_s,
            s.op_s
        );
        assert!(
            s.balanced_step_s <= s.step_s * (1.0 + 1e-12),
            "balanced {} > actual {}",
            s.balanced_step_s,
            s.step_s
        );
        assert!(s.op_s.iter().all(|t| t.is_finite() && *t >= 0.0));
    }
}

/// `decode_context_breakpoints` is a promise the simulator relies on: between two
/// breakpoints a decode request's cost is affine in its context, so a batch priced one
/// slice per request equals the batch priced at each piece's mean context (split into
/// two slices so the contexts still sum exactly).
#[test]
fn decode_cost_is_affine_between_breakpoints() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let hws = hardware();
    let ms = models();
    for case in 0..300 {
        let (hw, m, dep, c) = random_model(&mut rng, &hws, &ms);
        let draft = rng.random_range(0..4);
        let bp = c.decode_context_breakpoints(draft);
        assert!(bp.windows(2).all(|w| w[0] < w[1]), "not ascending: {bp:?}");
        // Piece edges: [0, b0), [b0, b1), ..., [b_last, 2M).
        let mut edges = vec![0u64];
        edges.extend(&bp);
        edges.push(2_000_000);
        let mut each: Vec<Vec<ReqSlice>> = Vec::new();
        let mut mean: Vec<Vec<ReqSlice>> = Vec::new();
        for _ in 0..dep {
            let mut one = Vec::new();
            let mut agg = Vec::new();
            for _ in 0..rng.random_range(0..4) {
                let p = rng.random_range(0..edges.len() - 1);
                let (lo, hi) = (edges[p], edges[p + 1]);
                let n = rng.random_range(1..40u64);
                let ctxs: Vec<u64> = (0..n).map(|_| rng.random_range(lo..hi)).collect();
                one.extend(ctxs.iter().map(|&x| ReqSlice::one(1, x)));
                let total: u64 = ctxs.iter().sum();
                let (q, extra) = (total / n, total % n);
                if extra > 0 {
                    agg.push(ReqSlice {
                        new_tokens: 1,
                        context_tokens: q + 1,
                        count: extra as u32,
                    });
                }
                agg.push(ReqSlice {
                    new_tokens: 1,
                    context_tokens: q,
                    count: (n - extra) as u32,
                });
            }
            each.push(one);
            mean.push(agg);
        }
        let price = |ranks: &[Vec<ReqSlice>]| {
            c.step(&StepShape {
                phase: Phase::Decode,
                ranks,
                decode_ranks: &[],
                draft_tokens: draft,
            })
        };
        let (a, b) = (price(&each), price(&mean));
        for (op, (x, y)) in Op::ALL.iter().zip(a.op_s.iter().zip(b.op_s.iter())) {
            assert!(
                (x - y).abs() <= 1e-9 * x.abs().max(1e-12),
                "case {case} (seed 5): {op:?} per request {x:e} vs by piece {y:e} ({m} on {hw}, DEP{dep}, {draft} drafts, breakpoints {bp:?})"
            );
        }
    }
}

/// A group over more nodes (the same tokens per rank, DEP doubling past one NVLink
/// domain) never communicates faster: more distinct ranks and nodes per token, and
/// the slower link carries more.
#[test]
fn more_nodes_are_never_cheaper() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let hws: Vec<Hardware> = hardware()
        .into_iter()
        .filter(|h| h.nvlink_domain_gpus == 8)
        .collect();
    let ms: Vec<Model> = models().into_iter().filter(|m| m.moe.is_some()).collect();
    for case in 0..200 {
        let hw = &hws[rng.random_range(0..hws.len())];
        let m = &ms[rng.random_range(0..ms.len())];
        let experts = m.moe.as_ref().unwrap().routed_experts;
        let phase = random_phase(&mut rng);
        let per_rank = (
            rng.random_range(1..64),
            rng.random_range(1..4096),
            rng.random_range(0..100_000),
        );
        let mut last = 0.0;
        for dep in [8u32, 16, 32, 64]
            .into_iter()
            .filter(|d| experts.is_multiple_of(*d))
        {
            let c = AnalyticCostModel::new(
                hw.clone(),
                m.clone(),
                Layout {
                    overlap_microbatches: false,
                    ..Layout::new(dep)
                },
                params(hw),
            );
            let comm = step(&c, phase, &vec![per_rank; dep as usize], 0)
                .comm
                .total_s;
            assert!(
                comm >= last * (1.0 - 1e-12),
                "case {case} (seed 6): {} on {} {phase:?} {per_rank:?}: DEP{dep} communicates in {comm:e} < {last:e}",
                m.name,
                hw.name
            );
            last = comm;
        }
    }
}

/// Two overlapped micro-batches are never slower than the serial step, and never
/// faster than either stream's busy time.
#[test]
fn overlap_is_never_slower_than_serial_nor_faster_than_its_slowest_stage() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let hws = hardware();
    let ms = models();
    for case in 0..300 {
        let (hw, m, dep, c) = random_model(&mut rng, &hws, &ms);
        let serial = AnalyticCostModel::new(
            c.hardware.clone(),
            c.model.clone(),
            Layout {
                overlap_microbatches: false,
                ..c.layout.clone()
            },
            c.params.clone(),
        );
        let phase = random_phase(&mut rng);
        let shape: Vec<(u32, u32, u64)> = (0..dep)
            .map(|_| {
                (
                    rng.random_range(1..64),
                    rng.random_range(1..4096),
                    rng.random_range(0..100_000),
                )
            })
            .collect();
        let a = step(&c, phase, &shape, 0);
        let b = step(&serial, phase, &shape, 0);
        assert!(
            a.step_s <= b.step_s * (1.0 + 1e-12),
            "case {case} (seed 7): {m} on {hw} DEP{dep}: overlapped {:e} > serial {:e}",
            a.step_s,
            b.step_s
        );
        let compute: f64 = Op::ALL
            .iter()
            .filter(|o| o.is_compute())
            .map(|o| a.op(*o))
            .sum();
        assert!(
            a.step_s >= compute * (1.0 - 1e-12) && a.step_s >= a.comm.total_s * (1.0 - 1e-12),
            "case {case} (seed 7): faster than a stream"
        );
        assert!(
            (a.comm.hidden_s + a.comm.exposed_s - a.comm.total_s).abs()
                <= 1e-12 * a.comm.total_s.max(1e-12)
        );
    }
}

/// The remembered GEMM prices (`cost/analytic/memo.rs`) change nothing: a step priced
/// by a model whose tables have filled over many steps equals, bit for bit, the same
/// step priced by a fresh copy (empty tables: every GEMM priced afresh), across
/// hardware, models, DEPs, phases, odd and even token counts and MTP.
#[test]
fn remembered_gemm_prices_equal_fresh_ones() {
    let mut rng = ChaCha8Rng::seed_from_u64(31);
    let (hws, ms) = (hardware(), models());
    for case in 0..40 {
        let (hw, m, dep, c) = random_model(&mut rng, &hws, &ms);
        for _ in 0..30 {
            let phase = random_phase(&mut rng);
            let per_rank: Vec<(u32, u32, u64)> = (0..dep)
                .map(|_| {
                    let count = rng.random_range(0..9u32);
                    let new = match phase {
                        Phase::Decode => 1,
                        Phase::Prefill => rng.random_range(1..5000u32),
                    };
                    (count, new, rng.random_range(0..200_000u64))
                })
                .collect();
            let draft = rng.random_range(0..4u32);
            let warm = step(&c, phase, &per_rank, draft);
            let again = step(&c, phase, &per_rank, draft);
            let fresh = step(&c.clone(), phase, &per_rank, draft);
            let why = format!("case {case}: {hw} {m} DEP{dep} {phase:?} {per_rank:?} mtp{draft}");
            assert_eq!(format!("{warm:?}"), format!("{fresh:?}"), "{why}");
            assert_eq!(format!("{again:?}"), format!("{fresh:?}"), "{why}");
        }
    }
}

/// A group whose ranks repeat (one copy of the rack simulated, `fidelity.cohort`) is
/// priced from one period of ranks: every figure equals working each rank out on its
/// own, bit for bit, over the shipped hardware, models, DEPs, phases and MTP.
#[test]
fn repeated_ranks_price_as_the_whole_group() {
    let mut rng = ChaCha8Rng::seed_from_u64(37);
    let (hws, ms) = (hardware(), models());
    let mut periodic = 0;
    for case in 0..40 {
        let (hw, m, dep, c) = random_model(&mut rng, &hws, &ms);
        for _ in 0..20 {
            let phase = random_phase(&mut rng);
            let divisors: Vec<u32> = (1..=dep).filter(|p| dep % p == 0).collect();
            let p = divisors[rng.random_range(0..divisors.len())];
            let period: Vec<Vec<ReqSlice>> = (0..p)
                .map(|_| {
                    (0..rng.random_range(0..4))
                        .map(|_| ReqSlice {
                            new_tokens: match phase {
                                Phase::Decode => 1,
                                Phase::Prefill => rng.random_range(1..5000u32),
                            },
                            context_tokens: rng.random_range(0..200_000u64),
                            count: rng.random_range(1..9u32),
                        })
                        .collect()
                })
                .collect();
            let ranks: Vec<Vec<ReqSlice>> = (0..dep as usize)
                .map(|i| period[i % p as usize].clone())
                .collect();
            periodic += (p < dep) as u32;
            let shape = StepShape {
                phase,
                ranks: &ranks,
                decode_ranks: &[],
                draft_tokens: rng.random_range(0..4u32),
            };
            let why = format!("case {case}: {hw} {m} DEP{dep} period {p} {phase:?} {ranks:?}");
            assert_eq!(
                format!("{:?}", c.step(&shape)),
                format!("{:?}", c.step_rank_by_rank(&shape)),
                "{why}"
            );
        }
    }
    assert!(periodic > 200, "{periodic} periodic shapes");
}
