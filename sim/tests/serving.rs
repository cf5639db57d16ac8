//! Scenario tests of the serving simulator with hand-derived expectations.

mod common;

use common::*;
use sim::serving::*;

fn run(
    sc: &ServingScenario,
    wl: &WorkloadConfig,
    model: &spec::model::Model,
    prefill: &dyn PoolCost,
    decode: &dyn PoolCost,
    trace: &[TraceRecord],
) -> Report {
    let hw = hardware(72);
    let run = checked(sc, wl);
    let input = SimInput {
        run: &run,
        hardware: &hw,
        model,
        prefill_cost: prefill,
        decode_cost: decode,
        trace,
    };
    let r = simulate(&input, sc.seed).expect("simulation runs");
    assert_eq!(r.accounting.violations(), Vec::<String>::new());
    r
}

/// The constant costs of the hand-derived tests: 10 ms prefill steps, 5 ms decode
/// steps, KV never short.
fn hand_cost() -> ConstCost {
    ConstCost {
        prefill_s: 0.010,
        decode_s: 0.005,
        kv_tokens_per_rank: 1 << 30,
    }
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-12)
}

/// One closed-loop user, DEP1 prefill + DEP1 decode, constant step costs: prefill step
/// 10 ms, decode step 5 ms, no MTP, zero KV bytes and zero link latency (instant
/// transfer), 1000 input tokens (all uncached: no shared prefix), 11 output tokens.
///
/// One cycle: prefill 0-10 ms; KV arrives at 10 ms; 11 decode steps 10-65 ms emitting
/// one token each (first at 15 ms); the user's next request arrives at 65 ms.
/// So TTFT = 15 ms, TPOT = (65 - 15) / 10 = 5 ms, end-to-end 65 ms, per-user speed
/// 10 tokens / 50 ms = 200 tok/s. Warm-up 650 ms = 10 cycles, then 100 cycles in the
/// 6.5 s window (the last one ends exactly at 7150 ms = duration):
/// requests/s = 100 / 6.5 = 15.385; per GPU (2 GPUs): uncached 100,000 / 13 s =
/// 7692.3 tok/s, output 1,100 / 13 = 84.62 tok/s, cached 0.
/// Revenue at V4.1-Flash off-peak: 3600e-6 * (7692.31 * 0.15 + 84.615 * 0.60) = $4.3366
/// per GPU-hour. Prefill busy 10 of every 65 ms.
#[test]
fn constant_costs_match_hand_derivation() {
    let cost = hand_cost();
    let sc = scenario(Mode::Disaggregated, pool(1, 1), pool(1, 1), 7.15, 0.65);
    let wl = closed_loop(1, 1000.0, 11.0);
    let r = run(&sc, &wl, &model(0.0, None), &cost, &cost, &[]);
    assert_eq!(r.gpus, 2);
    assert_eq!(r.requests_completed, 100);
    assert!(
        close(r.requests_per_s, 100.0 / 6.5, 1e-9),
        "{}",
        r.requests_per_s
    );
    let t = r.throughput_tok_s_per_gpu;
    assert!(close(t.uncached_input, 100_000.0 / 13.0, 1e-9), "{t:?}");
    assert!(close(t.output, 1_100.0 / 13.0, 1e-9), "{t:?}");
    assert_eq!(t.cached_input, 0.0);
    assert!(close(t.total, 101_100.0 / 13.0, 1e-9));
    assert_eq!((r.ttft_ms.p50, r.ttft_ms.p99), (15.0, 15.0));
    assert_eq!((r.tpot_ms.p50, r.tpot_ms.p90), (5.0, 5.0));
    assert_eq!(r.itl_ms.p50, 5.0);
    assert_eq!(r.e2e_ms.p50, 65.0);
    assert!(close(r.per_user_tok_s.p50, 200.0, 1e-9));
    assert!(
        close(r.revenue_usd_per_gpu_hour, 4.33662, 1e-5),
        "{}",
        r.revenue_usd_per_gpu_hour
    );
    assert_eq!(r.cost_usd_per_gpu_hour, 2.65);
    let prefill = &r.pools[0];
    assert!(
        close(prefill.busy_fraction, 10.0 / 65.0, 1e-9),
        "{}",
        prefill.busy_fraction
    );
    assert!(close(prefill.time_share_by_op["moe"], 0.75, 1e-9));
    assert_eq!(prefill.dp_imbalance_loss, 0.0);
    assert_eq!(r.goodput.fraction, 1.0);
    assert_eq!(r.requests_dropped, 0);
    assert!(r.render_text().contains("TTFT"));
}

/// As above with one MTP draft accepted with probability 1: each decode step emits 2
/// tokens, so 11 tokens take 6 steps (2+2+2+2+2+1) = 30 ms; first token at 15 ms,
/// last at 40 ms: TPOT = 25 / 10 = 2.5 ms; mean tokens per request-step 11/6.
#[test]
fn mtp_with_certain_acceptance() {
    let cost = hand_cost();
    let sc = scenario(Mode::Disaggregated, pool(1, 1), pool(1, 1), 4.4, 0.4);
    let wl = closed_loop(1, 1000.0, 11.0);
    let r = run(
        &sc,
        &wl,
        &model(0.0, Some((1, vec![1.0]))),
        &cost,
        &cost,
        &[],
    );
    assert_eq!(r.ttft_ms.p50, 15.0);
    assert_eq!(r.tpot_ms.p50, 2.5);
    assert_eq!(r.e2e_ms.p50, 40.0);
    assert!(close(r.mtp_tokens_per_step, 11.0 / 6.0, 1e-9));
    assert_eq!(r.requests_completed, 100); // 4.0 s / 40 ms
}

/// `serving.mtp.draws = "per-request"`: request `i` (the `i`-th arrival) decodes its 11
/// tokens in `keyed_steps_for(11, seed, i, [0.5], 1)` steps (`twin live`'s rule), at
/// any decode speed: the same requests see the same acceptances whatever the timing.
/// One closed-loop user, so the decode pool's steps come in one run per request
/// (separated by the next request's 10 ms prefill): their lengths are the rule's.
#[test]
fn per_request_mtp_draws_follow_the_keyed_rule_at_any_speed() {
    use sim::serving::mtp::{keyed_steps_for, MtpDraws};
    for decode_s in [0.005, 0.010] {
        let cost = ConstCost {
            decode_s,
            ..hand_cost()
        };
        let mut sc = scenario(Mode::Disaggregated, pool(1, 1), pool(1, 1), 2.0, 0.0);
        sc.serving.mtp.draws = MtpDraws::PerRequest;
        let wl = closed_loop(1, 1000.0, 11.0);
        let (hw, m) = (hardware(72), model(0.0, Some((1, vec![0.5]))));
        let run = checked(&sc, &wl);
        let input = SimInput {
            run: &run,
            hardware: &hw,
            model: &m,
            prefill_cost: &cost,
            decode_cost: &cost,
            trace: &[],
        };
        let (r, steps) = simulate_with(&input, sc.seed, &Control::default(), Record::STEPS)
            .map(|o| (o.report, o.steps))
            .expect("simulation runs");
        // Lengths of the runs of back-to-back decode steps.
        let mut runs: Vec<u32> = Vec::new();
        let mut end = f64::NEG_INFINITY;
        for st in steps.iter().filter(|st| st.pool == "decode") {
            if (st.start_s - end).abs() < 1e-9 {
                *runs.last_mut().unwrap() += 1;
            } else {
                runs.push(1);
            }
            end = st.start_s + st.step_s;
        }
        let done = r.requests_completed as usize;
        assert!(done > 15 && runs.len() >= done, "{done} of {}", runs.len());
        let rule: Vec<u32> = (0..done as u32)
            .map(|i| keyed_steps_for(11, sc.seed, i, &[0.5], 1))
            .collect();
        assert_eq!(runs[..done], rule[..], "decode step {decode_s} s");
        assert!(rule.iter().any(|&k| k != rule[0]), "the draws vary");
    }
}

/// Aggregated mode, one DEP1 instance: a lone request's prefill step (10 ms) and its
/// 11 decode steps (5 ms) run on the same GPU: same 65 ms cycle, but 1 GPU.
#[test]
fn aggregated_single_user() {
    let cost = hand_cost();
    let sc = scenario(Mode::Aggregated, pool(1, 1), pool(1, 1), 7.15, 0.65);
    let wl = closed_loop(1, 1000.0, 11.0);
    let r = run(&sc, &wl, &model(0.0, None), &cost, &cost, &[]);
    assert_eq!(r.gpus, 1);
    assert_eq!(r.requests_completed, 100);
    assert_eq!(r.ttft_ms.p50, 15.0);
    assert!(close(
        r.throughput_tok_s_per_gpu.uncached_input,
        100_000.0 / 6.5,
        1e-9
    ));
    assert_eq!(r.pools.len(), 1);
}

/// `hand_cost` on a device that takes `wake_s` longer for any step that starts after
/// its group idled.
struct Waking {
    cost: ConstCost,
    wake_s: f64,
}

impl sim::cost::CostModel for Waking {
    fn step(&self, shape: &sim::cost::StepShape<'_>) -> sim::cost::StepCost {
        self.cost.step(shape)
    }
    fn describe(&self) -> String {
        "waking test cost".into()
    }
    fn wake_s(&self, idle_s: f64) -> f64 {
        if idle_s > 0.0 {
            self.wake_s
        } else {
            0.0
        }
    }
}

impl sim::cost::KvCapacity for Waking {
    fn kv_capacity_tokens_per_rank(&self) -> u64 {
        self.cost.kv_capacity_tokens_per_rank()
    }
}

/// Aggregated single user as above, with 35 ms of think time after each request and a
/// 5 ms wake-up after idling. The first request starts at 0 with no idle time; each
/// later one arrives 35 ms after the previous one ended, on an idle GPU: wake 5 ms,
/// prefill 10 ms, then 11 decode steps back to back (no idle, no wake). So TTFT =
/// 5 + 10 + 5 = 20 ms, a cycle is 5 + 65 + 35 = 105 ms, and of its 70 ms of steps 5 ms
/// is waking (7.14%). Without the wake-up: TTFT 15 ms, no wake share.
#[test]
fn a_device_that_idled_pays_its_wake_up() {
    let sc = scenario(Mode::Aggregated, pool(1, 1), pool(1, 1), 2.2, 0.1);
    let mut wl = closed_loop(1, 1000.0, 11.0);
    wl.closed_loop.as_mut().unwrap().think_time_s = Dist::fixed(0.035);
    let waking = Waking {
        cost: hand_cost(),
        wake_s: 0.005,
    };
    let r = run(&sc, &wl, &model(0.0, None), &waking, &waking, &[]);
    assert!(close(r.ttft_ms.p50, 20.0, 0.01), "{}", r.ttft_ms.p50);
    assert!(close(r.ttft_ms.p99, 20.0, 0.01), "{}", r.ttft_ms.p99);
    assert!(
        close(r.pools[0].wake_fraction, 5.0 / 70.0, 0.02),
        "{}",
        r.pools[0].wake_fraction
    );
    let plain = run(&sc, &wl, &model(0.0, None), &hand_cost(), &hand_cost(), &[]);
    assert!(close(plain.ttft_ms.p50, 15.0, 0.01));
    assert_eq!(plain.pools[0].wake_fraction, 0.0);
}

/// Prefill DEP2 with a linear cost (1 us per token, no fixed part) and one user: one
/// rank holds the lone request, the other idles, so each prefill step takes 1 ms
/// against a balanced 0.5 ms: the DP-imbalance loss is exactly 50%. Decode (DEP1)
/// has none.
#[test]
fn dp_imbalance_from_per_rank_loads() {
    let cost = LinearCost {
        fixed_s: 0.0,
        per_token_s: 1e-6,
        per_ctx_s: 0.0,
        kv_tokens_per_rank: 1 << 30,
    };
    let sc = scenario(Mode::Disaggregated, pool(1, 2), pool(1, 1), 2.0, 0.2);
    let wl = closed_loop(1, 1000.0, 5.0);
    let r = run(&sc, &wl, &model(0.0, None), &cost, &cost, &[]);
    assert!(
        close(r.pools[0].dp_imbalance_loss, 0.5, 1e-9),
        "{}",
        r.pools[0].dp_imbalance_loss
    );
    assert_eq!(r.pools[1].dp_imbalance_loss, 0.0);
    assert!(r.pools[0].step_ms_mean > 0.99 && r.pools[0].step_ms_mean < 1.01);
}

/// KV admission control: each request reserves 1000 + 11 tokens; a 2500-token rank
/// admits two at a time, so the batch never exceeds 2 and KV never exceeds capacity;
/// a request larger than a rank's capacity is dropped, not run.
#[test]
fn kv_capacity_limits_the_batch_and_drops_oversized() {
    let cost = ConstCost {
        prefill_s: 0.001,
        decode_s: 0.005,
        kv_tokens_per_rank: 2500,
    };
    let sc = scenario(Mode::Disaggregated, pool(1, 1), pool(1, 1), 5.0, 0.5);
    let r = run(
        &sc,
        &closed_loop(8, 1000.0, 11.0),
        &model(0.0, None),
        &cost,
        &cost,
        &[],
    );
    let d = &r.pools[1];
    assert!(
        d.batch_per_rank.max <= 2.0 && d.batch_per_rank.max >= 1.0,
        "{:?}",
        d.batch_per_rank
    );
    assert!(
        r.accounting.kv_peak_reserved_fraction > 0.8
            && r.accounting.kv_peak_reserved_fraction <= 1.0
    );
    assert_eq!(r.requests_dropped, 0);
    assert!(d.queue_requests.max >= 1.0);

    let r = run(
        &sc,
        &closed_loop(2, 3000.0, 11.0),
        &model(0.0, None),
        &cost,
        &cost,
        &[],
    );
    assert_eq!(r.requests_completed, 0);
    assert!(r.requests_dropped > 0);
}

/// Mooncake replay: the second and third records share the first block (512 tokens)
/// of the first record, so with prefix affinity on one instance they hit the cache.
#[test]
fn mooncake_replay_uses_hash_ids() {
    let text = r#"{"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]}
{"timestamp": 100, "input_length": 900, "output_length": 4, "hash_ids": [1, 3]}
{"timestamp": 200, "input_length": 1500, "output_length": 4, "hash_ids": [1, 2, 7]}
"#;
    let trace = parse_mooncake_str(text).unwrap();
    let cost = hand_cost();
    let sc = scenario(Mode::Disaggregated, pool(1, 1), pool(1, 1), 1.0, 0.0);
    let mut wl = closed_loop(1, 1.0, 1.0);
    wl.closed_loop = None;
    wl.trace = Some(TraceReplay {
        time_scale: 1.0,
        max_requests: None,
    });
    let r = run(&sc, &wl, &model(0.0, None), &cost, &cost, &trace);
    assert_eq!(r.requests_completed, 3);
    // cached: 0 + 512 + 1024 of 3424 input tokens.
    assert!(
        close(r.pools[0].prefix_cache_hit_fraction, 1536.0 / 3424.0, 1e-9),
        "{}",
        r.pools[0].prefix_cache_hit_fraction
    );
    assert!(matches!(
        simulate(
            &one_cost_input(&checked(&sc, &wl), &hardware(72), &model(0.0, None), &cost),
            1
        ),
        Err(SimError::MissingTrace)
    ));
}

/// KV transfer: 1000 tokens x 1000 B over NVLink at 900 GB/s x 0.8 = 1e6 / 7.2e11 s
/// = 1.389 us inside one domain; with a 1-GPU domain the transfer crosses scale-out
/// at 100 GB/s x 0.8 plus 5 us latency = 12.5 + 5 = 17.5 us.
#[test]
fn kv_transfer_time_by_link() {
    let cost = hand_cost();
    let sc = scenario(Mode::Disaggregated, pool(1, 1), pool(1, 1), 1.0, 0.1);
    let wl = closed_loop(1, 1000.0, 3.0);
    let m = model(1000.0, None);
    let r = run(&sc, &wl, &m, &cost, &cost, &[]);
    assert!(
        close(r.kv_transfer.time_ms.p50, 1e6 / 7.2e11 * 1e3, 0.011),
        "{:?}",
        r.kv_transfer.time_ms
    );
    let mut sc2 = sc.clone();
    sc2.serving.kv_transfer.domain_gpus = Some(1);
    let r = run(&sc2, &wl, &m, &cost, &cost, &[]);
    assert!(
        close(r.kv_transfer.time_ms.p50, 0.0175, 0.011),
        "{:?}",
        r.kv_transfer.time_ms
    );
}

fn small_agentx() -> WorkloadConfig {
    let mut wl: WorkloadConfig =
        toml::from_str(include_str!("../../scenarios/workloads/agentx.toml")).unwrap();
    let a = wl.agentx.as_mut().unwrap();
    a.sessions = 24;
    a.max_subagents = 4;
    a.subagent_probability = 0.2;
    wl
}

/// Same seed, same report, byte for byte; another seed differs.
#[test]
fn same_seed_same_report() {
    let cost = LinearCost {
        fixed_s: 0.002,
        per_token_s: 2e-7,
        per_ctx_s: 1e-9,
        kv_tokens_per_rank: 4_000_000,
    };
    let mut sc = scenario(Mode::Disaggregated, pool(2, 2), pool(1, 4), 30.0, 5.0);
    sc.serving.mtp = MtpConfig {
        draft_tokens: Some(2),
        acceptance: Some(vec![0.8, 0.6]),
        ..Default::default()
    };
    let wl = small_agentx();
    let m = model(890.0, None);
    let a = serde_json::to_string(&run(&sc, &wl, &m, &cost, &cost, &[])).unwrap();
    let b = serde_json::to_string(&run(&sc, &wl, &m, &cost, &cost, &[])).unwrap();
    assert_eq!(a, b);
    sc.seed = 2;
    let c = serde_json::to_string(&run(&sc, &wl, &m, &cost, &cost, &[])).unwrap();
    assert_ne!(a, c);
}

/// The repository's scenario and workload files parse and validate.
#[test]
fn scenario_files_parse_and_validate() {
    let sc: ServingScenario = toml::from_str(include_str!(
        "../../scenarios/gb300-nvl72-v4.1-flash-agentx.toml"
    ))
    .unwrap();
    assert_eq!(sc.problems(), Vec::<String>::new());
    assert_eq!(sc.gpus(), 72);
    assert_eq!(sc.hardware, "gb300");
    assert_eq!(sc.model, "deepseek-v4.1-flash");
    let agg: ServingScenario = toml::from_str(include_str!(
        "../../scenarios/gb300-nvl72-v4.1-flash-agentx-aggregated.toml"
    ))
    .unwrap();
    assert_eq!(agg.problems(), Vec::<String>::new());
    assert_eq!((agg.serving.mode, agg.gpus()), (Mode::Aggregated, 72));
    for text in [
        include_str!("../../scenarios/workloads/agentx.toml"),
        include_str!("../../scenarios/workloads/chat-closed-loop.toml"),
        include_str!("../../scenarios/workloads/poisson.toml"),
        include_str!("../../scenarios/workloads/mooncake-conversation.toml"),
    ] {
        let wl: WorkloadConfig = toml::from_str(text).unwrap();
        assert_eq!(wl.problems(), Vec::<String>::new(), "{}", wl.name);
    }
}

/// The AgentX defaults land near the reference's derived token mix (cached ~97%,
/// uncached ~1.6%, output ~1%) once sessions are warm, whatever the step costs.
#[test]
fn agentx_defaults_land_near_reference_mix() {
    let cost = ConstCost {
        prefill_s: 0.02,
        decode_s: 0.005,
        kv_tokens_per_rank: 1 << 40,
    };
    let mut wl: WorkloadConfig =
        toml::from_str(include_str!("../../scenarios/workloads/agentx.toml")).unwrap();
    wl.agentx.as_mut().unwrap().sessions = 64;
    let mut sc = scenario(Mode::Disaggregated, pool(2, 1), pool(1, 1), 300.0, 30.0);
    sc.serving.decode.max_batch_per_rank = 1024;
    let r = run(&sc, &wl, &model(890.0, None), &cost, &cost, &[]);
    eprintln!("{}", r.render_text());
    let m = r.token_mix;
    assert!(m.cached_input > 0.965 && m.cached_input < 0.982, "{m:?}");
    assert!(
        m.uncached_input > 0.012 && m.uncached_input < 0.020,
        "{m:?}"
    );
    assert!(m.output > 0.008 && m.output < 0.012, "{m:?}");
}

/// Regression: prefix affinity once sent every request sharing a system prompt to the
/// first instance that cached it (the other instances idled, capping the pool at 1/4
/// busy here). Cache-aware least work spreads them: 64 users, 4096 of 5000 prompt
/// tokens shared, four DEP1 prefill instances with 10 ms steps, all kept busy.
#[test]
fn regression_shared_system_prompt_does_not_pile_on_one_prefill_instance() {
    let cost = ConstCost {
        prefill_s: 0.010,
        decode_s: 0.001,
        kv_tokens_per_rank: 1 << 30,
    };
    let sc = scenario(Mode::Disaggregated, pool(4, 1), pool(1, 1), 5.0, 1.0);
    let mut wl = closed_loop(64, 5000.0, 2.0);
    wl.closed_loop.as_mut().unwrap().shared_prefix_tokens = 4096;
    let r = run(&sc, &wl, &model(0.0, None), &cost, &cost, &[]);
    assert!(
        r.pools[0].busy_fraction > 0.5,
        "prefill busy {}",
        r.pools[0].busy_fraction
    );
    assert!(
        r.pools[0].prefix_cache_hit_fraction > 0.75,
        "{}",
        r.pools[0].prefix_cache_hit_fraction
    );
}

/// Decode is simulated per request (steps drawn from the MTP yield at join), not per
/// token: the run's tokens per request-step, its TPOT and its output throughput must
/// still be what per-token sampling gives. 32 users, 1000 output tokens each, 5 ms
/// decode steps, acceptance [0.8, 0.6]: 1 + 0.8 + 0.8 * 0.6 = 2.28 tokens per step, so
/// a request runs ~439 steps (TPOT ~ 5 ms * 439 / 999 = 2.19 ms) and each of the
/// 32 users completes a request every 10 ms (prefill) + ~2.19 s.
#[test]
fn per_request_decode_keeps_the_mtp_yield() {
    let cost = hand_cost();
    let mut sc = scenario(Mode::Disaggregated, pool(4, 1), pool(1, 1), 240.0, 20.0);
    sc.serving.mtp = MtpConfig {
        draft_tokens: Some(2),
        acceptance: Some(vec![0.8, 0.6]),
        ..Default::default()
    };
    let wl = closed_loop(32, 1000.0, 1000.0);
    let r = run(&sc, &wl, &model(0.0, None), &cost, &cost, &[]);
    assert_eq!(r.accounting.violations(), Vec::<String>::new());
    // The last step of a request emits only what is left: slightly under 2.28.
    assert!(
        close(r.mtp_tokens_per_step, 2.28, 0.01),
        "{}",
        r.mtp_tokens_per_step
    );
    let steps = 1000.0 / 2.28;
    assert!(
        close(r.tpot_ms.p50, 5.0 * steps / 999.0, 0.03),
        "{}",
        r.tpot_ms.p50
    );
    // Output tokens credited in the window against completed requests.
    let cycle_s = 0.010 + 0.005 * steps;
    let expect_req_s = 32.0 / cycle_s;
    assert!(
        close(r.requests_per_s, expect_req_s, 0.03),
        "{} vs {expect_req_s}",
        r.requests_per_s
    );
    let out_tok_s = r.throughput_tok_s_per_gpu.output * r.gpus as f64;
    assert!(close(out_tok_s, 1000.0 * expect_req_s, 0.03), "{out_tok_s}");
    assert_eq!(r.itl_ms.p50, 5.0);
}

/// A controlled run that is not stopped reports exactly what `simulate` does (looking
/// at the control changes nothing); a stopped one ends its window where it stopped
/// and says so.
#[test]
fn control_changes_nothing_unless_it_stops_the_run() {
    use std::sync::atomic::AtomicBool;
    let cost = LinearCost {
        fixed_s: 0.002,
        per_token_s: 2e-7,
        per_ctx_s: 1e-9,
        kv_tokens_per_rank: 4_000_000,
    };
    let sc = scenario(Mode::Disaggregated, pool(2, 2), pool(1, 4), 240.0, 5.0);
    let mut wl = small_agentx();
    wl.agentx.as_mut().unwrap().sessions = 200;
    let m = model(890.0, None);
    let hw = hardware(72);
    let run = checked(&sc, &wl);
    let input = one_cost_input(&run, &hw, &m, &cost);
    let plain = simulate(&input, 1).unwrap();
    assert!(
        plain.accounting.events > CONTROL_EVENTS,
        "{}",
        plain.accounting.events
    );
    let looks = std::cell::Cell::new(0u32);
    let progress = |_: f64| looks.set(looks.get() + 1);
    let go = AtomicBool::new(false);
    let control = Control {
        stop: Some(&go),
        progress: Some(&progress),
    };
    let watched = simulate_with(&input, 1, &control, Record::default())
        .unwrap()
        .report;
    assert_eq!(
        serde_json::to_string(&plain).unwrap(),
        serde_json::to_string(&watched).unwrap()
    );
    assert!(looks.get() >= 1, "the run never looked at its control");
    let stop = AtomicBool::new(true);
    let control = Control {
        stop: Some(&stop),
        progress: None,
    };
    let stopped = simulate_with(&input, 1, &control, Record::default())
        .unwrap()
        .report;
    let t = stopped.interrupted_at_s.expect("stopped");
    assert!(t < sc.duration_s, "{t}");
    assert!(stopped.accounting.events == CONTROL_EVENTS);
    assert_eq!(stopped.accounting.violations(), Vec::<String>::new());
    assert!(stopped.render_text().contains("INTERRUPTED at t = "));
}

/// Warm-started sessions bring their whole context as cached wherever they land, so
/// the prefix-affinity router places their first turns by load, not by which instance
/// happens to hold their system prompt. 24 sessions of one system prompt arrive at
/// once on 4 prefill instances: every instance prefills some of them (before, the
/// system prompt's 2 x 16K recompute kept all of them on the first instance that held
/// it, and three instances stayed idle).
#[test]
fn warm_sessions_spread_over_the_prefill_instances() {
    let cost = LinearCost {
        fixed_s: 0.002,
        per_token_s: 2e-7,
        per_ctx_s: 1e-9,
        kv_tokens_per_rank: 4_000_000,
    };
    let sc = scenario(Mode::Disaggregated, pool(4, 1), pool(1, 4), 2.0, 0.0);
    let mut wl = small_agentx();
    let a = wl.agentx.as_mut().unwrap();
    a.system_prompts = 1;
    a.subagent_probability = 0.0;
    a.start_spread_s = 0.0;
    assert!(a.warm_start);
    let (_, steps) = run_recorded(&sc, &wl, &model(890.0, None), &cost, &[]);
    let groups: std::collections::BTreeSet<u32> = steps
        .iter()
        .filter(|s| s.pool == "prefill")
        .map(|s| s.group)
        .collect();
    assert_eq!(groups.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3]);
}
