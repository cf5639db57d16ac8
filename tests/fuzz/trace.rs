//! Mooncake trace lines.

use super::scenario::{base_sim_args, short_run};
use super::*;

/// A Mooncake trace line, mutated.
fn trace_line(rng: &mut ChaCha8Rng) -> String {
    let num = |rng: &mut ChaCha8Rng| -> String {
        if rng.random_bool(0.9) {
            rng.random_range(0..20_000u64).to_string()
        } else {
            NUMBERS.choose(rng).unwrap().to_string()
        }
    };
    let ids: Vec<String> = (0..rng.random_range(0..40))
        .map(|_| {
            if rng.random_bool(0.99) {
                rng.random_range(0..64u64).to_string()
            } else {
                num(rng)
            }
        })
        .collect();
    let mut line = format!(
        "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [{}]}}",
        num(rng),
        num(rng),
        num(rng),
        ids.join(", ")
    );
    match rng.random_range(0..40) {
        0 => line.truncate(rng.random_range(0..line.len())),
        1 => line.insert(0, '\u{feff}'),
        2 => line = String::new(),
        3 => line = "\u{0}\u{1}\u{ff}".into(),
        4 => line = line.replace("input_length", "input"),
        _ => {}
    }
    line
}

/// Traces of mutated lines: read as `twin simulate --trace` reads them (small
/// limits), driven through the workload driver, and one in 25 replayed in a short run.
#[test]
fn fuzz_trace_lines_never_panic() {
    let n = cases(2000);
    let dir = tempfile::tempdir().unwrap();
    let limits = sim::serving::Limits {
        max_trace_records: 50,
        max_trace_line_bytes: 4096,
        max_trace_bytes: 1 << 16,
        ..Default::default()
    };
    let wl: sim::serving::WorkloadConfig =
        toml::from_str(embedded(Kind::Workload, "mooncake-conversation")).unwrap();
    let mut failures = Vec::new();
    let (tally, runs) = (Tally::default(), Tally::default());
    for seed in n.clone() {
        let mut rng = ChaCha8Rng::seed_from_u64(2 << 32 | seed);
        let lines: Vec<String> = (0..rng.random_range(0..12))
            .map(|_| trace_line(&mut rng))
            .collect();
        let text = lines.join(if rng.random_bool(0.1) { "\r\n" } else { "\n" });
        let replay = rng.random_bool(1.0 / 25.0);
        no_panic(&mut failures, "trace", seed, &text, || {
            let t = sim::serving::read_mooncake(text.as_bytes(), &limits);
            tally.count(&t);
            let Ok(t) = t else {
                return;
            };
            if let Some(r) = &wl.trace {
                let _ = sim::serving::trace_span(&t.records, r, 100.0, 10.0);
            }
            if let Ok(mut d) = sim::serving::Driver::new(
                &wl,
                &t.records,
                sim::serving::streams::stream(seed, "workload"),
            ) {
                let mut out = Vec::new();
                d.start(&mut out);
                for _ in 0..100 {
                    let Some((at, ev)) = out.pop() else { break };
                    if let Some(req) = d.on_event(at, ev, &mut out) {
                        d.on_request_end(at, req.origin, true, req.input_tokens as u64, &mut out);
                    }
                }
            }
            if replay {
                let p = dir.path().join(format!("{seed}.jsonl"));
                std::fs::write(&p, &text).unwrap();
                let mut a = base_sim_args();
                a.set.push("workload=mooncake-conversation".into());
                // Timestamps up to 20 s arrive within the short run's first 0.4 s.
                a.set.push("workload.trace.time_scale=0.02".into());
                a.trace = Some(p.to_string_lossy().into_owned());
                let r = short_run(&a);
                if std::env::var_os("TWIN_FUZZ_VERBOSE").is_some() {
                    if let Err(e) = &r {
                        std::eprintln!("replay refused: {e:#}");
                    }
                }
                runs.count(&r);
            }
        });
    }
    tally.show("traces read");
    runs.show("traces replayed");
    check(failures, n);
}
