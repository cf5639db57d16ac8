use super::*;

fn sim_step(prompts_done: u32, decode_requests: u32, step_ms: f64) -> SimStep {
    SimStep {
        pool: "mixed",
        group: 0,
        start_s: 0.0,
        step_s: step_ms / 1e3,
        prefill_tokens: 0,
        prefill_chunks: prompts_done,
        prompts_done,
        decode_requests,
    }
}

/// Two requests on a server that steps every 10 ms, 30 ms when it prefills: A sent at
/// 0 gets its first token at 20 ms and later ones at 30, 60 and 70 ms; B, sent at
/// 35 ms, its first at 60 ms (the prefill step, with A's third token) and later ones
/// at 70 and 80 ms. Its gaps are 10, 30, 10, 10, 10 ms (median 10 ms: bursts within
/// 5 ms are one step). Read back: a burst at 20 ms (A's first token, nothing before
/// it), then 10 ms to A's decode, 30 ms to the step that finished B's prompt and
/// decoded A, 10 ms to both decoding, 10 ms to B alone: every step after the first
/// continues a request of the one before.
const TWO: &str = r#"{"input_lens": [10, 10], "output_lens": [4, 3], "duration": 0.08,
    "ttfts": [0.020, 0.025], "itls": [[0.010, 0.030, 0.010], [0.010, 0.010]],
    "start_times": [100.0, 100.035]}"#;

#[test]
fn a_files_steps_are_its_bursts_of_tokens_one_per_request() {
    let b = Bench::parse(TWO, "t").unwrap();
    let read = b.read_steps().unwrap();
    assert_eq!(read.bunched, 0);
    let got: Vec<(i64, usize, usize, bool)> = read
        .steps
        .iter()
        .map(|s| {
            (
                (s.gap_s * 1e3).round() as i64,
                s.prompts_done,
                s.decodes,
                s.continued,
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, 1, 0, false),
            (10, 0, 1, true),
            (30, 1, 1, true),
            (10, 0, 2, true),
            (10, 0, 1, true),
        ]
    );
    assert!((read.steps[2].at_s - 0.060).abs() < 1e-9);
}

/// The same file beside twin's steps: decoding one request twin takes 12 and 14 ms
/// (median 13) where the file's two took 10; finishing a prompt beside one decode 25
/// ms where it took 30; decoding two, none of twin's. Twin's prefill-only step (no
/// decode) and its kind the file does not show are left out.
#[test]
fn read_steps_sit_beside_twins_of_the_same_kind() {
    let read = Bench::parse(TWO, "t").unwrap().read_steps().unwrap();
    let twin = [
        sim_step(0, 1, 12.0),
        sim_step(0, 1, 14.0),
        sim_step(1, 1, 25.0),
        sim_step(1, 0, 40.0),
        sim_step(0, 3, 9.0),
    ];
    let kinds = beside(&read, &twin);
    let got: Vec<(&str, usize, f64, usize)> = kinds
        .iter()
        .map(|k| {
            (
                k.kind.as_str(),
                k.measured_steps,
                k.measured_ms_p50,
                k.twin_steps,
            )
        })
        .collect();
    assert_eq!(got.len(), 3, "{kinds:?}");
    assert_eq!((got[0].0, got[0].1, got[0].3), ("decode, 1 req", 2, 2));
    assert!((got[0].2 - 10.0).abs() < 1e-6 && (kinds[0].twin_ms_p50 - 13.0).abs() < 1e-9);
    assert_eq!(
        (got[1].0, got[1].1, got[1].3),
        ("1 prompt done + 1 req", 1, 1)
    );
    assert!((got[1].2 - 30.0).abs() < 1e-6 && (kinds[1].twin_ms_p50 - 25.0).abs() < 1e-9);
    assert_eq!((got[2].0, got[2].1, got[2].3), ("decode, 2 req", 1, 0));
    assert!(kinds[2].twin_ms_p50.is_nan());
}

/// One request whose stream stalls: tokens at 10, 20, 30, 40 ms, then 140, 140.5 and
/// 141 ms (median gap 10 ms). The last two come 0.5 ms after the burst before, under
/// a quarter of the median gap: tokens delivered late, not steps.
#[test]
fn tokens_delivered_late_in_a_bunch_are_not_steps() {
    let text = r#"{"input_lens": [10], "output_lens": [7], "duration": 0.2,
        "ttfts": [0.010], "itls": [[0.010, 0.010, 0.010, 0.100, 0.0005, 0.0005]],
        "start_times": [5.0]}"#;
    let read = Bench::parse(text, "t").unwrap().read_steps().unwrap();
    assert_eq!(read.bunched, 2);
    let gaps: Vec<i64> = read
        .steps
        .iter()
        .map(|s| (s.gap_s * 1e3).round() as i64)
        .collect();
    assert_eq!(gaps, vec![0, 10, 10, 10, 100]);
}

#[test]
fn steps_cannot_be_read_without_send_times_or_from_chunked_streams() {
    let no_starts = TWO.replace(r#""start_times": [100.0, 100.035]"#, r#""x": 0"#);
    let b = Bench::parse(&no_starts, "t").unwrap();
    assert!(b.read_steps().is_none());
    assert_eq!(
        unreadable(&b),
        Some("the file records no send times (`start_times`)")
    );
    // 20 tokens each in one gap: streamed in chunks.
    let chunked = r#"{"input_lens": [10], "output_lens": [21], "duration": 1.0,
        "ttfts": [0.1], "itls": [[0.5]], "start_times": [0.0]}"#;
    let b = Bench::parse(chunked, "t").unwrap();
    assert!(b.read_steps().is_none());
    assert_eq!(
        unreadable(&b),
        Some("the server streamed several tokens per chunk")
    );
}

#[test]
fn a_kind_names_prompts_finished_and_requests_decoded() {
    assert_eq!(kind(0, 200), "decode, 129-256 req");
    assert_eq!(kind(1, 0), "1 prompt done + 0 req");
    assert_eq!(kind(4, 37), "4 prompts done + 33-64 req");
    assert_eq!(kind(6, 3), "5-8 prompts done + 3 req");
}

/// A server stepping every 10 ms (A decodes throughout, tokens at 10 to 100 ms), each
/// step formed when the one before starts, behind a front end of 20 ms. B, sent at 31
/// ms, reaches the scheduler at 51: too late for the step formed at 50 (ending at 70),
/// in time for the one formed at 60 (its first token at 80). C, sent at 44, reaches it
/// at 64: its first token at 90. B bounds the front end from 19 (50 - 31: the step
/// ending at 70 finished no prompt, so it had room) to 29 ms (60 - 31); C from above at
/// 26 (70 - 44; the step before its own finished B's prompt: no lower bound). Read as a
/// server that forms each step when the last ends, the same times say 29 to 36 ms.
#[test]
fn a_front_end_is_bounded_by_the_steps_its_requests_missed_and_made() {
    let text = r#"{"input_lens": [10, 10, 10], "output_lens": [10, 3, 2], "duration": 0.1,
        "ttfts": [0.010, 0.049, 0.046],
        "itls": [[0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01], [0.01, 0.01], [0.01]],
        "start_times": [100.0, 100.031, 100.044]}"#;
    let b = Bench::parse(text, "t").unwrap();
    let f = b.front_end_bounds(true).unwrap();
    assert_eq!((f.lower_n, f.upper_n), (1, 2), "{f:?}");
    assert!(
        (f.lower_s - 0.019).abs() < 1e-9 && (f.upper_s - 0.026).abs() < 1e-9,
        "{f:?}"
    );
    let sync = b.front_end_bounds(false).unwrap();
    assert!(
        (sync.lower_s - 0.029).abs() < 1e-9 && (sync.upper_s - 0.036).abs() < 1e-9,
        "{sync:?}"
    );
    // Without send times, nothing.
    let no_starts = text.replace(r#""start_times": [100.0, 100.031, 100.044]"#, r#""x": 0"#);
    assert!(Bench::parse(&no_starts, "t")
        .unwrap()
        .front_end_bounds(true)
        .is_none());
}

/// A cost model that takes 8 ms a step and 1 ms a request decoded.
struct PerRequest;

impl CostModel for PerRequest {
    fn step(&self, shape: &StepShape<'_>) -> sim::cost::StepCost {
        let n: usize = shape.ranks.iter().map(|r| r.len()).sum();
        sim::cost::StepCost {
            step_s: 0.008 + 0.001 * n as f64,
            ..Default::default()
        }
    }
    fn describe(&self) -> String {
        "8 ms + 1 ms a request".into()
    }
}

/// The decode steps of `TWO` read back whole: A alone at 30 ms (its token computed on
/// the 10-token prompt), A and B at 70 ms (A on 12 tokens, B on its 10), B alone at 80
/// ms (11), each 10 ms after the one before; the step at 60 ms finished B's prompt and
/// is left out. Priced at 9, 10 and 9 ms: errors 10%, 0 and 10% (mean 6.67%), the
/// total 28 ms against 30 (-6.67%).
#[test]
fn read_back_decode_steps_are_priced_at_their_own_batch() {
    let b = Bench::parse(TWO, "t").unwrap();
    let d = b.read_decodes().unwrap();
    let mut got: Vec<(i64, Vec<u64>)> = d
        .iter()
        .map(|s| {
            let mut c = s.contexts.clone();
            c.sort_unstable();
            ((s.gap_s * 1e3).round() as i64, c)
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![(10, vec![10]), (10, vec![10, 12]), (10, vec![11])]
    );
    let p = price_decodes(&PerRequest, 1, &d).unwrap();
    assert_eq!(p.steps, 3);
    assert!((p.mape - 0.2 / 3.0).abs() < 1e-9, "{p:?}");
    assert!((p.bias + 2.0 / 30.0).abs() < 1e-9, "{p:?}");
    assert_eq!(p.kinds[0].kind, "decode, 1 req");
    assert_eq!(p.kinds[0].steps, 2);
    assert!((p.kinds[0].twin_ms_mean - 9.0).abs() < 1e-9);
    assert!((p.kinds[1].measured_ms_mean - 10.0).abs() < 1e-6);
    // Over two ranks the 2-request step deals one to each; this model counts them all.
    assert!((price_decodes(&PerRequest, 2, &d).unwrap().bias - p.bias).abs() < 1e-12);
    assert!(price_decodes(&PerRequest, 1, &[]).is_none());
}
