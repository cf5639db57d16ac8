//! Golden tests of the text report: fixed small scenarios whose `render_text` output is
//! compared byte for byte with `tests/golden/*.txt`. The cost models are the linear
//! test fixtures, so the goldens pin the simulator (routing, caching, steps, MTP,
//! transfers, metrics, money, rendering), not the analytic physics.
//!
//! After an intended change, refresh them and review the diff:
//! `UPDATE_GOLDEN=1 cargo test -p sim --test golden`.

mod common;

use common::*;
use sim::serving::*;
use std::path::PathBuf;

/// Compares `actual` with the golden file `name`, or rewrites it when `UPDATE_GOLDEN`
/// is set.
fn check_golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; create it with UPDATE_GOLDEN=1 cargo test -p sim --test golden",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the report, first at line {}:\n  golden: {:?}\n  actual: {:?}\n\
             whole report:\n{actual}\n\
             if the change is intended: UPDATE_GOLDEN=1 cargo test -p sim --test golden",
            path.display(),
            first + 1,
            expected.lines().nth(first).unwrap_or("<end>"),
            actual.lines().nth(first).unwrap_or("<end>"),
        );
    }
}

fn run(
    sc: &ServingScenario,
    wl: &WorkloadConfig,
    prefill: &dyn PoolCost,
    decode: &dyn PoolCost,
) -> Report {
    let hw = hardware(72);
    let m = model(890.0, None);
    let run = checked(sc, wl);
    let input = SimInput {
        run: &run,
        hardware: &hw,
        model: &m,
        prefill_cost: prefill,
        decode_cost: decode,
        trace: &[],
    };
    let r = simulate(&input, sc.seed).expect("simulation runs");
    assert_eq!(r.accounting.violations(), Vec::<String>::new());
    r
}

fn prefill_cost() -> LinearCost {
    LinearCost {
        fixed_s: 0.005,
        per_token_s: 2e-6,
        per_ctx_s: 1e-8,
        kv_tokens_per_rank: 50_000_000,
    }
}

fn decode_cost() -> LinearCost {
    LinearCost {
        fixed_s: 0.004,
        per_token_s: 2e-5,
        per_ctx_s: 1e-9,
        kv_tokens_per_rank: 50_000_000,
    }
}

/// AgentX-like sessions (64, warm-started, with sub-agents) on two DEP2 prefill
/// instances with a small HBM prefix cache and a host tier (so blocks are evicted and
/// promoted), one DEP4 decode group, MTP with three drafts, 60 s with 10 s warm-up.
#[test]
fn disaggregated_agentx_report() {
    let mut wl: WorkloadConfig =
        toml::from_str(include_str!("../../scenarios/workloads/agentx.toml")).unwrap();
    wl.agentx.as_mut().unwrap().sessions = 64;
    let mut sc = scenario(Mode::Disaggregated, pool(2, 2), pool(1, 4), 60.0, 10.0);
    sc.serving.prefill.prefix_cache_tokens = Some(4_000_000);
    sc.serving.prefill.host_cache_tokens = 2_000_000;
    sc.serving.mtp = MtpConfig {
        draft_tokens: Some(3),
        acceptance: Some(vec![0.87, 0.8, 0.75]),
        ..Default::default()
    };
    let r = run(&sc, &wl, &prefill_cost(), &decode_cost());
    check_golden("disaggregated_agentx.txt", &r.render_text());
}

/// Closed-loop users sharing a system prompt on one aggregated DEP2 group (prefill
/// chunks and decode in the same steps), 20 s with 2 s warm-up.
#[test]
fn aggregated_closed_loop_report() {
    let mut wl = closed_loop(24, 6000.0, 300.0);
    let c = wl.closed_loop.as_mut().unwrap();
    c.shared_prefix_tokens = 4096;
    c.input_tokens = Dist::Lognormal {
        mean: 6000.0,
        cv: 0.5,
    };
    c.think_time_s = Dist::Exponential { mean: 0.5 };
    let mut sc = scenario(Mode::Aggregated, pool(1, 2), pool(1, 2), 20.0, 2.0);
    sc.serving.decode.chunk_tokens_per_rank = 2048;
    let r = run(&sc, &wl, &prefill_cost(), &decode_cost());
    check_golden("aggregated_closed_loop.txt", &r.render_text());
}
