//! The live scheduler without threads or a clock: steps are formed and "run" by
//! synthesising their outputs, so its rules are checked exactly.

use engine::serve::SeqOut;
use live::sched::{accepted, Action, KvPolicy, SchedConfig, Scheduler, StepPlan};
use sim::serving::{NewRequest, Origin, Prompt, ServingScenario, TRACE_BLOCK_TOKENS};

fn scenario() -> ServingScenario {
    let path = format!(
        "{}/../scenarios/cpu-live-poisson.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn sched(chunk: u32, cap: u64, policy: KvPolicy) -> Scheduler {
    sched_cache(chunk, cap, policy, 4096)
}

fn sched_cache(chunk: u32, cap: u64, policy: KvPolicy, cache_tokens: u64) -> Scheduler {
    let mut sc = scenario();
    sc.serving.decode.chunk_tokens_per_rank = chunk;
    sc.serving.decode.kv_capacity_tokens_per_rank = Some(cap);
    Scheduler::new(SchedConfig {
        scenario: sc,
        policy,
        page: 64,
        vocab: 8192,
        drafts: 1,
        acceptance: vec![0.7],
        seed: 1,
        kv_cap: (0, cap),
        cache_tokens,
    })
}

fn request(input: u32, output: u32, blocks: &[u64]) -> NewRequest<'_> {
    NewRequest {
        input_tokens: input,
        output_tokens: output,
        prompt: Prompt::Listed(blocks),
        origin: Origin::Open,
        prewarm_tokens: 0,
        held_tokens: 0,
        weight: 1,
    }
}

/// Runs group 0's next step: every decode sequence emits its accepted drafts and one
/// more token. Returns the plan and the scheduler's actions.
fn step(s: &mut Scheduler, now: f64) -> Option<(StepPlan, Vec<Action>)> {
    let mut acts = Vec::new();
    let plan = s.form_step(0, now, &mut acts)?;
    let outs: Vec<Vec<SeqOut>> = plan
        .ranks
        .iter()
        .map(|r| {
            r.decode
                .iter()
                .map(|q| SeqOut {
                    emitted: vec![7; q.accept.unwrap_or(0) + 1],
                    drafts: vec![8],
                })
                .collect()
        })
        .collect();
    acts.extend(s.step_done(&plan, &outs, now + 0.01));
    Some((plan, acts))
}

#[test]
fn prefill_is_chunked_under_the_budget_and_the_first_token_comes_from_decode() {
    let mut s = sched(256, 65536, KvPolicy::Reserve);
    s.arrive(0.0, request(600, 3, &[1, 2]));
    let chunks: Vec<usize> = (0..3)
        .map(|i| {
            let (p, _) = step(&mut s, i as f64).unwrap();
            assert!(p.ranks[0].decode.is_empty());
            p.ranks[0].prefill[0].tokens.len()
        })
        .collect();
    // 599 prompt tokens before the last, in order: 256 + 256 + 87.
    assert_eq!(chunks, vec![256, 256, 87]);
    let q = &s.reqs[0];
    assert!(
        q.token_times.is_empty(),
        "no token before the first decode step"
    );
    let (p, _) = step(&mut s, 3.0).unwrap();
    assert_eq!(
        p.ranks[0].decode[0].start, 599,
        "decode starts at the last prompt token"
    );
    assert_eq!(
        p.ranks[0].decode[0].tokens.len(),
        2,
        "last token + one draft"
    );
    assert!(!s.reqs[0].token_times.is_empty());
}

#[test]
fn a_shared_prefix_is_served_from_the_cache() {
    let mut s = sched(4096, 65536, KvPolicy::Reserve);
    let shared = vec![11, 12];
    s.arrive(0.0, request(1100, 2, &[11, 12, 13]));
    while step(&mut s, 1.0).is_some() {}
    // Two full blocks (1024 tokens) were prefilled whole: the next prompt reuses them.
    s.arrive(2.0, request(1200, 2, &[shared.clone(), vec![99]].concat()));
    assert_eq!(s.reqs[1].cached as u64, 2 * TRACE_BLOCK_TOKENS);
    let (p, _) = step(&mut s, 2.0).unwrap();
    assert_eq!(p.ranks[0].prefill[0].start, 1024);
    assert_eq!(p.ranks[0].prefill[0].tokens.len(), 1200 - 1 - 1024);
    // A prompt that shares only the first block.
    s.arrive(3.0, request(900, 2, &[11, 55]));
    assert_eq!(s.reqs[2].cached as u64, TRACE_BLOCK_TOKENS);
    // A prompt whose only block is its last: nothing usable (the last token is computed).
    s.arrive(4.0, request(512, 2, &[11]));
    assert_eq!(s.reqs[3].cached, 0);
}

#[test]
fn reserve_admission_waits_for_kv_and_vllm_preempts() {
    // Room for one request's input + output + draft (300 + 200 + 1) at a time.
    let mut s = sched(4096, 600, KvPolicy::Reserve);
    s.arrive(0.0, request(300, 200, &[1]));
    s.arrive(0.0, request(300, 200, &[2]));
    let (p, _) = step(&mut s, 0.0).unwrap();
    assert_eq!(p.ranks[0].prefill.len(), 1, "the second waits for KV");
    let mut t = 1.0;
    while s.reqs[0].finish_s.is_none() {
        step(&mut s, t).unwrap();
        t += 1.0;
    }
    let (p, _) = step(&mut s, t).unwrap();
    assert_eq!(
        p.ranks[0].prefill_reqs[0].0, 1,
        "admitted once the first finished"
    );
    assert_eq!(s.preemptions, 0);

    // vllm: both admitted by their prompts; decode growth preempts the later one.
    let mut s = sched_cache(4096, 640, KvPolicy::Vllm, 0);
    s.arrive(0.0, request(300, 200, &[1]));
    s.arrive(0.0, request(300, 200, &[2]));
    let (p, _) = step(&mut s, 0.0).unwrap();
    assert_eq!(p.ranks[0].prefill.len(), 2);
    let mut t = 1.0;
    while s.preemptions == 0 && t < 400.0 {
        step(&mut s, t);
        t += 1.0;
    }
    assert!(s.preemptions > 0, "the rank ran out of pages");
    assert_eq!(
        s.reqs[1].preemptions, 1,
        "the most recently admitted is preempted"
    );
    while s.reqs.iter().any(|q| q.finish_s.is_none()) && t < 2000.0 {
        step(&mut s, t);
        t += 1.0;
    }
    assert!(s
        .reqs
        .iter()
        .all(|q| q.finish_s.is_some() && q.generated == q.output));
    assert_eq!(
        s.reqs[1].token_times.len(),
        200,
        "recomputed, not re-emitted"
    );
}

#[test]
fn the_declared_mtp_rule_accepts_at_the_declared_rate() {
    let n = 20_000;
    let a: usize = (0..n).map(|i| accepted(1, i, 0, &[0.7], 1)).sum();
    assert!((a as f64 / n as f64 - 0.7).abs() < 0.02, "{a}");
    // Two drafts: the second only after the first.
    let both = (0..n)
        .filter(|&i| accepted(1, i, 3, &[0.7, 0.5], 2) == 2)
        .count();
    assert!((both as f64 / n as f64 - 0.35).abs() < 0.02, "{both}");
    assert_eq!(
        accepted(5, 3, 9, &[0.7], 1),
        accepted(5, 3, 9, &[0.7], 1),
        "seeded"
    );
}
