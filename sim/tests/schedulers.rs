//! Engine schedulers against hand-traced schedules of a few requests (which step
//! admits which chunk), and the benchmark client against hand-derived timelines.

mod common;

use common::*;
use sim::serving::scheduler::SchedulerChoice;
use sim::serving::workload::bench::{BenchClient, Client};
use sim::serving::*;

/// One mixed pool of one rank: a 1000-token budget, at most 2 running requests; KV
/// for everything; no front end (`serving.frontend_s` 0) unless a test sets one.
fn mixed(choice: SchedulerChoice, async_scheduling: Option<bool>) -> ServingScenario {
    let mut p = pool(1, 1);
    p.chunk_tokens_per_rank = 1000;
    p.max_batch_per_rank = 2;
    p.max_prefill_requests_per_rank = 16;
    p.kv_capacity_tokens_per_rank = Some(1_000_000);
    let mut sc = scenario(Mode::Aggregated, pool(1, 1), p, 10.0, 0.0);
    sc.serving.scheduler = choice;
    sc.serving.async_scheduling = async_scheduling;
    sc.serving.frontend_s = Some(0.0);
    sc.serving.frontend_token_s = Some(0.0);
    sc
}

/// 10 ms a step plus 1 us per token: steps are told apart by their contents.
fn cost() -> LinearCost {
    LinearCost {
        fixed_s: 0.010,
        per_token_s: 1e-6,
        per_ctx_s: 0.0,
        kv_tokens_per_rank: 1_000_000,
    }
}

fn bench(requests: &[[u32; 2]], max_concurrency: Option<u32>) -> WorkloadConfig {
    WorkloadConfig::bench_run(
        "bench",
        BenchClient::recorded(Client::Vllm, requests.to_vec(), max_concurrency, None, 1.0),
    )
}

/// (prefill tokens, prefill chunks, decode requests) of the first `n` steps.
fn schedule(
    sc: &ServingScenario,
    wl: &WorkloadConfig,
    trace: &[TraceRecord],
    n: usize,
) -> Vec<(u64, u32, u32)> {
    let (_, steps) = run_recorded(sc, wl, &model(0.0, None), &cost(), trace);
    steps
        .iter()
        .take(n)
        .map(|s| (s.prefill_tokens, s.prefill_chunks, s.decode_requests))
        .collect()
}

/// A trace of two prompts, 8 output tokens each: 600 tokens at 0 ms and 300 at `ms`.
fn two_prompts(ms: u64) -> [TraceRecord; 2] {
    [(0, 600), (ms, 300)].map(|(t, input)| TraceRecord {
        timestamp: t,
        input_length: input,
        output_length: 8,
        hash_ids: Vec::new(),
    })
}

/// Three prompts at t = 0 (600, 600, 300 tokens), 4 output tokens each.
const THREE: [[u32; 2]; 3] = [[600, 4], [600, 4], [300, 4]];

#[test]
fn twin_chunks_prompts_beside_the_whole_batch() {
    // Step 1: r0 600 + r1 400 of 1000. Step 2: r0 decodes (it joined); r1's last 200
    // and r2's 300 (twin's prefill needs no batch slot). Step 3: r1 decodes beside r0;
    // r2 waits for a slot (two running).
    let s = schedule(
        &mixed(SchedulerChoice::Twin, None),
        &bench(&THREE, None),
        &[],
        3,
    );
    assert_eq!(s, vec![(1000, 2, 0), (500, 2, 1), (0, 0, 2)]);
    // Prompts finished per step: r0 in step 1 (r1's first chunk does not finish it),
    // r1 and r2 in step 2, none in step 3.
    let (_, steps) = run_recorded(
        &mixed(SchedulerChoice::Twin, None),
        &bench(&THREE, None),
        &model(0.0, None),
        &cost(),
        &[],
    );
    let done: Vec<u32> = steps.iter().take(3).map(|s| s.prompts_done).collect();
    assert_eq!(done, vec![1, 2, 0]);
}

#[test]
fn vllm_counts_prefilling_requests_against_max_num_seqs_and_decodes_first() {
    // Step 1: r0 600 + r1 400 (two running: r2 waits). Step 2: r0 decodes first (1 of
    // the 1000 tokens), then r1's last 200; r2 still has no slot.
    let s = schedule(
        &mixed(SchedulerChoice::Vllm, Some(false)),
        &bench(&THREE, None),
        &[],
        2,
    );
    assert_eq!(s, vec![(1000, 2, 0), (200, 1, 1)]);
}

#[test]
fn sglang_runs_prefill_alone_and_decodes_when_none_is_ready() {
    // Step 1: prefill r0 600 + r1 400. Step 2: r1's last 200 alone: r0, ready to
    // decode, waits (prefill first). Step 3: nothing to prefill (r2 has no slot):
    // decode r0 and r1.
    let s = schedule(
        &mixed(SchedulerChoice::Sglang, Some(false)),
        &bench(&THREE, None),
        &[],
        3,
    );
    assert_eq!(s, vec![(1000, 2, 0), (200, 1, 0), (0, 0, 2)]);
}

#[test]
fn sglang_mixed_chunk_decodes_beside_prefill_within_the_budget() {
    // `--enable-mixed-chunk`: step 1 as without it (nothing decodes yet). Step 2: r0
    // decodes beside r1's last 200 (its 1 token taken from the 1000 first). Step 3:
    // r2 has no slot: decode r0 and r1.
    let mut sc = mixed(SchedulerChoice::Sglang, Some(false));
    sc.serving.mixed_chunk = Some(true);
    let s = schedule(&sc, &bench(&THREE, None), &[], 3);
    assert_eq!(s, vec![(1000, 2, 0), (200, 1, 1), (0, 0, 2)]);
    // Two 600-token prompts, r0 then r1 at 5 ms (after step 1 was formed): step 2
    // takes r1's 600 beside r0's decode, which leaves 999 tokens; prefill first would
    // have paused r0.
    let mut p = sc.clone();
    p.serving.decode.max_batch_per_rank = 8;
    let trace = [(0, 600), (5, 600)].map(|(t, input)| TraceRecord {
        timestamp: t,
        input_length: input,
        output_length: 8,
        hash_ids: Vec::new(),
    });
    let s = schedule(&p, &trace_workload(), &trace, 2);
    assert_eq!(s, vec![(600, 1, 0), (600, 1, 1)]);
    p.serving.mixed_chunk = None;
    let s = schedule(&p, &trace_workload(), &trace, 2);
    assert_eq!(s, vec![(600, 1, 0), (600, 1, 0)]);
}

#[test]
fn trtllm_schedules_prompts_whole_after_the_generation_requests() {
    // Step 1: r0 600; r1's 600 do not fit the 400 left (no chunking). Step 2: r0
    // generates (1 token), r1's 600 fit the 999 left; r2 has no slot.
    let s = schedule(
        &mixed(SchedulerChoice::Trtllm, Some(false)),
        &bench(&THREE, None),
        &[],
        2,
    );
    assert_eq!(s, vec![(600, 1, 0), (600, 1, 1)]);
}

#[test]
fn trtllm_batch_waiting_holds_prompts_while_requests_decode() {
    // r0 (600) at 0 ms, r1 (300) at 5 ms, 8 output tokens each; TensorRT-LLM, steps
    // formed when the last ends. Step 1: r0 alone (nothing decodes: no wait). With
    // `batch_wait_iters` 2: steps 2 and 3 hold r1 back and decode r0 alone (count 1,
    // 2); step 4 has waited 2 and takes r1 beside r0's decode.
    let trace = two_prompts(5);
    let mut p = mixed(SchedulerChoice::Trtllm, Some(false));
    p.serving.decode.max_batch_per_rank = 8;
    p.serving.batch_wait_iters = Some(2);
    let s = schedule(&p, &trace_workload(), &trace, 4);
    assert_eq!(s, vec![(600, 1, 0), (0, 0, 1), (0, 0, 1), (300, 1, 1)]);
    // A ratio the step reaches ends the wait at once: r1's 300 and r0's 1 token are
    // 301 of the 1000-token budget, at least 0.3 of it; 0.5 of it holds as before.
    p.serving.batch_wait_tokens_ratio = Some(0.3);
    let s = schedule(&p, &trace_workload(), &trace, 2);
    assert_eq!(s, vec![(600, 1, 0), (300, 1, 1)]);
    p.serving.batch_wait_tokens_ratio = Some(0.5);
    let s = schedule(&p, &trace_workload(), &trace, 4);
    assert_eq!(s, vec![(600, 1, 0), (0, 0, 1), (0, 0, 1), (300, 1, 1)]);
    // Without it, step 2 takes r1 at once.
    p.serving.batch_wait_iters = None;
    p.serving.batch_wait_tokens_ratio = None;
    let s = schedule(&p, &trace_workload(), &trace, 2);
    assert_eq!(s, vec![(600, 1, 0), (300, 1, 1)]);
    // A ratio outside [0, 1] is refused by name.
    p.serving.batch_wait_tokens_ratio = Some(1.5);
    let problems: Vec<String> = p.problems().iter().map(|x| x.to_string()).collect();
    assert_eq!(
        problems,
        ["serving.batch_wait_tokens_ratio: must be 0 to 1, got 1.5"]
    );
    // And a wait beyond 10000 steps, with the value given.
    p.serving.batch_wait_tokens_ratio = None;
    p.serving.batch_wait_iters = Some(20_000);
    let problems: Vec<String> = p.problems().iter().map(|x| x.to_string()).collect();
    assert_eq!(
        problems,
        ["serving.batch_wait_iters: must be 0 to 10000 decode steps, got 20000"]
    );
}

#[test]
fn a_step_formed_ahead_leaves_a_request_that_arrives_during_it_for_the_next() {
    // r0 at 0 ms; r1 arrives at 5 ms, while step 1 (10.6 ms: r0's 600 tokens) runs.
    let trace = two_prompts(5);
    let mut p = mixed(SchedulerChoice::Vllm, Some(false));
    p.serving.decode.max_batch_per_rank = 8;
    // Formed when step 1 ends: step 2 takes r1's prompt beside r0's decode.
    let s = schedule(&p, &trace_workload(), &trace, 2);
    assert_eq!(s, vec![(600, 1, 0), (300, 1, 1)]);
    // Formed when step 1 started (async scheduling, vLLM's default): r1 was not there
    // yet, so step 2 decodes r0 alone and step 3 takes r1.
    p.serving.async_scheduling = None;
    let s = schedule(&p, &trace_workload(), &trace, 3);
    assert_eq!(s, vec![(600, 1, 0), (0, 0, 1), (300, 1, 1)]);
}

#[test]
fn a_step_formed_ahead_sees_a_request_only_once_it_is_through_the_front_end() {
    // A 3 ms front end: r0, sent at 0, reaches the scheduler at 3 ms and prefills in
    // step 1 (3 to 13.6 ms); r1, sent at 2 ms, reaches it at 5 ms, after step 1
    // started. Step 2, formed when step 1 started (async scheduling), cannot hold it
    // although the client sent it before then: it decodes r0 alone, step 3 takes r1.
    let trace = two_prompts(2);
    let mut p = mixed(SchedulerChoice::Vllm, None);
    p.serving.decode.max_batch_per_rank = 8;
    p.serving.frontend_s = Some(0.003);
    let s = schedule(&p, &trace_workload(), &trace, 3);
    assert_eq!(s, vec![(600, 1, 0), (0, 0, 1), (300, 1, 1)]);
}

#[test]
fn requests_sent_together_reach_the_engine_one_tokenisation_apart() {
    // Four prompts of 200 tokens sent at once, a 3 ms front end and 1 us a prompt token
    // of tokenisation, one request after another: they pass at 3.0, 3.2, 3.4 and 3.6
    // ms. The idle engine starts step 1 with r0 alone at 3.0 ms; step 2, formed then
    // (async scheduling), decodes r0; step 3 takes the other three. Tokenised at once
    // (0 a token), all four pass at 3 ms and step 1 holds them together.
    let mut p = mixed(SchedulerChoice::Vllm, None);
    p.serving.decode.max_batch_per_rank = 8;
    p.serving.frontend_s = Some(0.003);
    p.serving.frontend_token_s = Some(1e-6);
    let wl = bench(&[[200, 8]; 4], None);
    let s = schedule(&p, &wl, &[], 3);
    assert_eq!(s, vec![(200, 1, 0), (0, 0, 1), (600, 3, 1)]);
    // Without the intake work the tokenisation still holds them apart (0.2, 0.4, 0.6
    // and 0.8 ms), and the scheduler's line says so.
    p.serving.frontend_s = Some(0.0);
    assert_eq!(schedule(&p, &wl, &[], 3), s);
    assert!(
        p.scheduler_line()
            .ends_with("; front end: prompts tokenised one after another (1.0 us a token)"),
        "{}",
        p.scheduler_line()
    );
    p.serving.frontend_s = Some(0.003);
    p.serving.frontend_token_s = Some(0.0);
    let s = schedule(&p, &wl, &[], 1);
    assert_eq!(s, vec![(800, 4, 0)]);
    // Unset, the engines': 1.1 us a prompt token (Hugging Face tokenizers, one
    // thread); none for twin's own scheduler.
    p.serving.frontend_token_s = None;
    assert_eq!(p.frontend_token_s(), 1.1e-6);
    assert_eq!(mixed(SchedulerChoice::Twin, None).frontend_token_s(), 0.0);
}

#[test]
fn a_scheduler_with_a_receive_interval_takes_new_requests_every_few_decode_steps() {
    // SGLang, steps formed when the last ends, new requests taken every 3 decode steps
    // (`--scheduler-recv-interval 3`). Step 1 prefills r0 (idle: taken at once, 0 to
    // 10.6 ms); step 2 follows a step with prefill work: a take at 10.6 ms, before r1
    // (15 ms) arrived; steps 3 and 4 count one each; step 5 takes r1 and prefills it
    // alone (SGLang's prefill first). Every step: r1 is prefilled in step 3.
    let trace = two_prompts(15);
    let mut p = mixed(SchedulerChoice::Sglang, Some(false));
    p.serving.decode.max_batch_per_rank = 8;
    let s = schedule(&p, &trace_workload(), &trace, 3);
    assert_eq!(s, vec![(600, 1, 0), (0, 0, 1), (300, 1, 0)]);
    p.serving.scheduler_recv_interval = Some(3);
    let s = schedule(&p, &trace_workload(), &trace, 5);
    assert_eq!(
        s,
        vec![(600, 1, 0), (0, 0, 1), (0, 0, 1), (0, 0, 1), (300, 1, 0)]
    );
}

#[test]
fn the_client_sends_each_prompt_when_a_slot_frees_and_the_run_ends_with_the_last() {
    // One slot, three prompts of 100 tokens and 2 output tokens, 10 ms + 1 us per
    // token a step, vLLM's scheduler (steps formed when the last ends): each request
    // prefills (10.1 ms, sampling its first token), decodes once (10.001 ms), ends; the
    // next is sent then. TTFT 10.1 ms each, E2E 20.101 ms, the run over at
    // 3 x 20.101 = 60.303 ms although duration_s is 10 s.
    let sc = mixed(SchedulerChoice::Vllm, Some(false));
    let wl = bench(&[[100, 2]; 3], Some(1));
    let (r, steps) = run_recorded(&sc, &wl, &model(0.0, None), &cost(), &[]);
    assert_eq!(r.requests_completed, 3);
    assert_eq!(steps.len(), 6);
    let starts: Vec<f64> = steps.iter().map(|s| (s.start_s * 1e6).round()).collect();
    assert_eq!(
        starts,
        vec![0.0, 10100.0, 20101.0, 30201.0, 40202.0, 50302.0]
    );
    assert!((r.ttft_ms.mean - 10.1).abs() < 1e-6, "{}", r.ttft_ms.mean);
    assert!((r.e2e_ms.mean - 20.101).abs() < 1e-6, "{}", r.e2e_ms.mean);
    assert!((r.measured_s - 0.060303).abs() < 1e-9, "{}", r.measured_s);
    // Formed ahead (async scheduling, vLLM's default), the same: an engine with nothing
    // to run schedules what arrives at once (the request sent when the last ended).
    let (r2, steps2) = run_recorded(
        &mixed(SchedulerChoice::Vllm, None),
        &wl,
        &model(0.0, None),
        &cost(),
        &[],
    );
    assert_eq!(r2.requests_completed, 3);
    assert_eq!(steps2, steps);
    // twin's own convention: the first token comes with the first decode step, and
    // both tokens are decoded: 3 steps a request, TTFT 10.1 + 10.001 ms.
    let (r, steps) = run_recorded(
        &mixed(SchedulerChoice::Twin, None),
        &wl,
        &model(0.0, None),
        &cost(),
        &[],
    );
    assert_eq!(steps.len(), 9);
    assert!((r.ttft_ms.mean - 20.101).abs() < 1e-6, "{}", r.ttft_ms.mean);
}

#[test]
fn without_a_cap_every_prompt_is_sent_at_once() {
    // Three at t = 0, no cap: all prefill in step 1 (2 x 100 + 100 = 300 tokens).
    let sc = mixed(SchedulerChoice::Twin, None);
    let wl = bench(&[[100, 2]; 3], None);
    let (r, steps) = run_recorded(&sc, &wl, &model(0.0, None), &cost(), &[]);
    assert_eq!((steps[0].prefill_tokens, steps[0].prefill_chunks), (300, 3));
    assert_eq!(r.requests_completed, 3);
}

#[test]
fn a_benchmark_run_refuses_a_cohort() {
    let mut sc = mixed(SchedulerChoice::Twin, None);
    sc.serving.decode.instances = 2;
    sc.fidelity.cohort = 2;
    let hw = hardware(72);
    let m = model(0.0, None);
    let c = cost();
    let wl = bench(&[[100, 2]; 3], Some(1));
    let run = checked(&sc, &wl);
    let e = simulate(&one_cost_input(&run, &hw, &m, &c), 1).unwrap_err();
    assert!(e.to_string().contains("simulated whole"), "{e}");
}

#[test]
fn the_front_end_delays_each_request_into_the_engine_and_into_its_ttft() {
    // The one-slot run above with a 5 ms front end (`serving.frontend_s`): each request
    // reaches the engine 5 ms after it was sent, its steps as before from then on. Sent
    // at 0, 25.101 and 50.202 ms; steps at 5, 15.1, 30.101, 40.201, 55.202 and
    // 65.302 ms; TTFT 15.1 ms and E2E 25.101 ms each (both from the send); the run
    // over at 3 x 25.101 = 75.303 ms.
    let mut sc = mixed(SchedulerChoice::Vllm, Some(false));
    sc.serving.frontend_s = Some(0.005);
    sc.serving.frontend_token_s = None; // the engine's
    let wl = bench(&[[100, 2]; 3], Some(1));
    let (r, steps) = run_recorded(&sc, &wl, &model(0.0, None), &cost(), &[]);
    assert_eq!(r.requests_completed, 3);
    let starts: Vec<f64> = steps.iter().map(|s| (s.start_s * 1e6).round()).collect();
    assert_eq!(
        starts,
        vec![5000.0, 15100.0, 30101.0, 40201.0, 55202.0, 65302.0]
    );
    assert!((r.ttft_ms.mean - 15.1).abs() < 1e-6, "{}", r.ttft_ms.mean);
    assert!((r.e2e_ms.mean - 25.101).abs() < 1e-6, "{}", r.e2e_ms.mean);
    assert!((r.measured_s - 0.075303).abs() < 1e-9, "{}", r.measured_s);
    // Unset, the engine's: vLLM's 12 ms (PR #21139), none for twin's own scheduler.
    sc.serving.frontend_s = None;
    assert_eq!(sc.frontend_s(), 0.012);
    assert!(
        sc.scheduler_line().ends_with(
            "; front end 12 ms a request, prompts tokenised one after another (1.1 us a token)"
        ),
        "{}",
        sc.scheduler_line()
    );
    assert_eq!(mixed(SchedulerChoice::Twin, None).frontend_s(), 0.0);
    // A fitted front end prints to a tenth of a millisecond.
    sc.serving.frontend_s = Some(0.021719069888953364);
    assert!(
        sc.scheduler_line().ends_with(
            "; front end 21.7 ms a request, prompts tokenised one after another (1.1 us a token)"
        ),
        "{}",
        sc.scheduler_line()
    );
    // A negative front end is refused by name.
    sc.serving.frontend_s = Some(-0.001);
    let p = sc.problems();
    assert!(
        p.iter()
            .any(|p| p.to_string().contains("serving.frontend_s")),
        "{p:?}"
    );
}

#[test]
fn the_front_end_stretches_with_the_streams_its_api_server_sends() {
    // The one-slot run above with a 5 ms front end whose API server spends 5 ms on each
    // streamed chunk (`serving.frontend_chunk_s`). Request 1 meets no streams: through
    // at 5 ms, prefilled 5-15.1 ms, decoded 15.1-25.101 ms. Request 2, sent at 25.101
    // ms, meets the decode step that just ended (1 chunk in 10.001 ms): a load of
    // 0.005 / 0.010001 = 0.49995, so 5 ms / (1 - 0.49995) = 9.999 ms (to the ns) to
    // get through: its steps start at 35.1 and 45.2 ms, request 3's at 65.2 and 75.3.
    // TTFT 15.1, 20.099 and 20.099 ms.
    let mut sc = mixed(SchedulerChoice::Vllm, Some(false));
    sc.serving.frontend_s = Some(0.005);
    sc.serving.frontend_token_s = None; // the engine's
    sc.serving.frontend_chunk_s = Some(0.005);
    let wl = bench(&[[100, 2]; 3], Some(1));
    let (r, steps) = run_recorded(&sc, &wl, &model(0.0, None), &cost(), &[]);
    let starts: Vec<f64> = steps.iter().map(|s| (s.start_s * 1e6).round()).collect();
    assert_eq!(
        starts,
        vec![5000.0, 15100.0, 35100.0, 45200.0, 65200.0, 75300.0]
    );
    let ttft = (15.1 + 2.0 * 20.099) / 3.0;
    assert!((r.ttft_ms.mean - ttft).abs() < 1e-6, "{}", r.ttft_ms.mean);
    // The scheduler's line says what the API server costs and how busy it was: 0,
    // 0.49995 and 0.49995 as the three requests arrived.
    let line = r.pools[0]
        .scheduler
        .clone()
        .expect("a mixed pool's scheduler");
    assert!(
        line.ends_with(
            "; front end 5 ms a request, 5000.0 us of its API server a streamed chunk \
             (1 API server an instance), prompts tokenised one after another (1.1 us a \
             token); its API server streaming 33% busy as requests arrived (50% at most)"
        ),
        "{line}"
    );
    // Two API servers share the streams: a load of 0.249975, 6.666444 ms to get through.
    sc.serving.api_servers = Some(2);
    let (_, steps) = run_recorded(&sc, &wl, &model(0.0, None), &cost(), &[]);
    assert!(
        (steps[2].start_s - (0.025101 + 0.006666444)).abs() < 1e-12,
        "{}",
        steps[2].start_s
    );
    // Without a streaming cost, the front end's work alone (the run above).
    sc.serving.frontend_chunk_s = Some(0.0);
    let (_, steps) = run_recorded(&sc, &wl, &model(0.0, None), &cost(), &[]);
    assert!(
        (steps[2].start_s - 0.030101).abs() < 1e-12,
        "{}",
        steps[2].start_s
    );
    // Refused by name: a negative cost, no API server.
    sc.serving.frontend_chunk_s = Some(-1e-6);
    sc.serving.api_servers = Some(0);
    let p: Vec<String> = sc.problems().iter().map(|p| p.to_string()).collect();
    assert!(
        p.iter().any(|p| p.contains("serving.frontend_chunk_s")),
        "{p:?}"
    );
    assert!(p.iter().any(|p| p.contains("serving.api_servers")), "{p:?}");
}

#[test]
fn tokens_an_earlier_run_left_on_the_server_are_cached_to_the_token() {
    // THREE again, but the server holds 333 of r0's 600 tokens and all 300 of r2's
    // (an earlier run sent their prefixes): not whole 512-token blocks, the tokens
    // themselves; r2 still computes its last token. SGLang's scheduler: step 1
    // prefills r0's 267 and r1's 600 (867 of the 1000); step 2 r1... no: r1 fits
    // whole, so step 1 is 267 + 600 = 867, two chunks. Step 2: r2 has no slot (two
    // running), nothing to prefill: decode r0 and r1.
    let mut wl = bench(&THREE, None);
    wl.bench.as_mut().unwrap().held = vec![333, 0, 300];
    let s = schedule(&mixed(SchedulerChoice::Sglang, Some(false)), &wl, &[], 2);
    assert_eq!(s, vec![(867, 2, 0), (0, 0, 2)]);
    // Without a cap on running requests r2 joins step 1 with its one last token.
    let mut sc = mixed(SchedulerChoice::Sglang, Some(false));
    sc.serving.decode.max_batch_per_rank = 8;
    let s = schedule(&sc, &wl, &[], 1);
    assert_eq!(s, vec![(868, 3, 0)]);
}

#[test]
fn held_tokens_must_fit_their_requests() {
    let mut c = BenchClient::recorded(Client::Sglang, THREE.to_vec(), None, None, 1.0);
    c.held = vec![1, 2];
    assert!(c
        .problems()
        .iter()
        .any(|p| p.to_string().contains("bench.held: 2 entries for 3")));
    c.held = vec![0, 601, 0];
    assert!(c
        .problems()
        .iter()
        .any(|p| p.to_string().contains("bench.held[1]: 601 held tokens")
            && p.to_string().contains("600")));
    c.held = vec![600, 0, 300];
    assert!(c.problems().is_empty(), "{:?}", c.problems());
}

#[test]
fn a_first_gap_runs_from_the_first_token_a_prefill_step_sampled() {
    // SGLang, two running at most, prompts 600, 600, 300 with 2 output tokens each
    // (one gap each). Step 1 prefills r0 600 + r1 400 (11 ms: r0's first token at
    // 11 ms); step 2 r1's last 200 alone (10.2 ms, to 21.2 ms: r1's first token); step
    // 3 decodes both (10.002 ms, to 31.202 ms): r0's gap 20.202 ms, r1's 10.002 ms,
    // not the 31.202 ms since the last decode step. Then r2: prefill 300 (10.3 ms, to
    // 41.502), decode (10.001 ms): its gap 10.001 ms.
    let wl = bench(&[[600, 2], [600, 2], [300, 2]], None);
    let (r, steps) = run_recorded(
        &mixed(SchedulerChoice::Sglang, Some(false)),
        &wl,
        &model(0.0, None),
        &cost(),
        &[],
    );
    assert_eq!(steps.len(), 5);
    assert_eq!(r.itl_ms.count, 3);
    assert!((r.itl_ms.max - 20.202).abs() < 1e-6, "{:?}", r.itl_ms);
    let mean = (20.202 + 10.002 + 10.001) / 3.0;
    assert!((r.itl_ms.mean - mean).abs() < 1e-6, "{:?}", r.itl_ms);
}

/// `cost()`, recording whether each step it prices is a mixed one.
struct Recording {
    cost: LinearCost,
    mixed: std::sync::Mutex<Vec<bool>>,
}

impl sim::cost::CostModel for Recording {
    fn step(&self, shape: &sim::cost::StepShape<'_>) -> sim::cost::StepCost {
        self.mixed.lock().unwrap().push(shape.is_mixed());
        self.cost.step(shape)
    }
    fn describe(&self) -> String {
        "recording test cost".into()
    }
}

impl sim::cost::KvCapacity for Recording {
    fn kv_capacity_tokens_per_rank(&self) -> u64 {
        self.cost.kv_tokens_per_rank
    }
}

#[test]
fn issue_38_a_step_of_chunks_and_decodes_is_priced_once_as_a_mixed_step() {
    // twin's scheduler on THREE: step 2 runs r0's decode beside r1's and r2's chunks
    // (`twin_chunks_prompts_beside_the_whole_batch`). The cost model sees it as one
    // mixed step (one forward pass), not a prefill step and a decode step.
    let rec = Recording {
        cost: cost(),
        mixed: Default::default(),
    };
    let (_, steps) = run_recorded(
        &mixed(SchedulerChoice::Twin, None),
        &bench(&THREE, None),
        &model(0.0, None),
        &rec,
        &[],
    );
    let both = steps
        .iter()
        .filter(|s| s.prefill_chunks > 0 && s.decode_requests > 0)
        .count();
    let priced_mixed = rec.mixed.lock().unwrap().iter().filter(|&&m| m).count();
    assert!(both >= 1);
    assert_eq!(priced_mixed, both);
}

/// One mixed DEP2 group (TensorRT-LLM, steps formed when the last ends), each rank as
/// `mixed`'s, at most 8 running; `trace` of 600-token prompts, 8 output tokens each.
fn dep2_trtllm(trace: &[(u64, u32)]) -> (ServingScenario, Vec<TraceRecord>) {
    let mut sc = mixed(SchedulerChoice::Trtllm, Some(false));
    sc.serving.decode.dep = 2;
    sc.serving.decode.max_batch_per_rank = 8;
    let trace = trace
        .iter()
        .map(|&(t, input)| TraceRecord {
            timestamp: t,
            input_length: input,
            output_length: 8,
            hash_ids: Vec::new(),
        })
        .collect();
    (sc, trace)
}

#[test]
fn trtllm_attention_dp_balance_holds_prompts_until_every_rank_has_one() {
    // r0 and r1 (600 each) at 0 ms take one rank each; step 1 prefills both (nothing
    // decodes: no hold). r2 (300) at 5 ms lands on one rank, the other has no prompt:
    // with the balance (timeout 3 steps) steps 2 and 3 hold it (wait 1, 2) and decode
    // r0 and r1; step 4 has waited 3 and takes it.
    let (mut sc, trace) = dep2_trtllm(&[(0, 600), (0, 600), (5, 300)]);
    sc.serving.adp_balance = Some(true);
    sc.serving.adp_timeout_iters = Some(3);
    sc.serving.adp_batching_iters = Some(0);
    let s = schedule(&sc, &trace_workload(), &trace, 4);
    assert_eq!(s, vec![(1200, 2, 0), (0, 0, 2), (0, 0, 2), (300, 1, 2)]);
    // The wait counts steps without prompts too: r2 at 25 ms, during step 3 (steps
    // are 11.2, then 10.0 ms), finds the count at 2 and is taken by step 4 all the same.
    let (_, late) = dep2_trtllm(&[(0, 600), (0, 600), (25, 300)]);
    let s = schedule(&sc, &trace_workload(), &late, 4);
    assert_eq!(s, vec![(1200, 2, 0), (0, 0, 2), (0, 0, 2), (300, 1, 2)]);
    // Prompts on both ranks (r2 and r3 at 5 ms) end the wait, and the batching wait
    // then holds them 2 more steps (count 1, 2) while every rank decodes.
    let (_, both) = dep2_trtllm(&[(0, 600), (0, 600), (5, 300), (5, 300)]);
    sc.serving.adp_batching_iters = Some(2);
    let s = schedule(&sc, &trace_workload(), &both, 4);
    assert_eq!(s, vec![(1200, 2, 0), (0, 0, 2), (0, 0, 2), (600, 2, 2)]);
    // Without the balance r2 is taken by step 2.
    sc.serving.adp_balance = None;
    let s = schedule(&sc, &trace_workload(), &trace, 2);
    assert_eq!(s, vec![(1200, 2, 0), (300, 1, 2)]);
    // A count beyond 10000 steps is refused by name.
    sc.serving.adp_timeout_iters = Some(20_000);
    let problems: Vec<String> = sc.problems().iter().map(|x| x.to_string()).collect();
    assert_eq!(
        problems,
        ["serving.adp_timeout_iters: must be 0 to 10000 decode steps, got 20000"]
    );
}

#[test]
fn vllm_preempts_the_newest_request_when_kv_runs_short_and_it_recomputes() {
    // vLLM on a rank of `CAP` KV tokens, two prompts of `IN` tokens with `OUT` output
    // tokens each, one token a decode step (no MTP). Reserving input + output (700
    // each) would run them one after the other; vLLM admits both (their 800 prompt
    // tokens fit under its watermark, 1% of the pool), prefills them in one step (the
    // first token of each) and decodes both, their KV growing by 2 a step, until it
    // passes the pool: after G decode steps with 800 + 2G > CAP. The newer, r1, is
    // preempted then, with 1 + G tokens out; r0 decodes alone to its last token (OUT - 1
    // decode steps in all); r1 waits (its prompt and output, IN + 1 + G, do not fit
    // beside r0's KV), then recomputes them in one prefill step and decodes the
    // OUT - 1 - G tokens it has left.
    const CAP: u64 = 1000;
    const IN: u64 = 400;
    const OUT: u64 = 300;
    let mut sc = mixed(SchedulerChoice::Vllm, Some(false));
    sc.serving.decode.kv_capacity_tokens_per_rank = Some(CAP);
    let wl = bench(&[[IN as u32, OUT as u32]; 2], None);
    let (r, steps) = run_recorded(&sc, &wl, &model(0.0, None), &cost(), &[]);
    let g = (CAP - 2 * IN) / 2 + 1;
    let shape: Vec<(u64, u32, u32)> = steps
        .iter()
        .map(|s| (s.prefill_tokens, s.prefill_chunks, s.decode_requests))
        .collect();
    let mut want = vec![(2 * IN, 2, 0)];
    want.extend(std::iter::repeat_n((0, 0, 2), g as usize));
    want.extend(std::iter::repeat_n((0, 0, 1), (OUT - 1 - g) as usize));
    want.push((IN + 1 + g, 1, 0));
    want.extend(std::iter::repeat_n((0, 0, 1), (OUT - 1 - g) as usize));
    assert_eq!(shape.len(), want.len());
    assert_eq!(shape, want);
    assert_eq!(r.requests_completed, 2);
    assert_eq!(r.accounting.preemptions, 1);
    assert_eq!(r.accounting.tokens_recomputed, IN + 1 + g);
    assert_eq!(r.accounting.output_tokens_emitted, 2 * OUT);
    // TensorRT-LLM reserves each request's 700 tokens: never two at once.
    let mut trt = mixed(SchedulerChoice::Trtllm, Some(false));
    trt.serving.decode.kv_capacity_tokens_per_rank = Some(CAP);
    let (t, steps) = run_recorded(&trt, &wl, &model(0.0, None), &cost(), &[]);
    assert!(steps.iter().all(|s| s.decode_requests <= 1));
    assert_eq!(t.accounting.preemptions, 0);
}
