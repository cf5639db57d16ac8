//! Scenario files, `--set` overrides and `--bench` specs, resolved and run.

use super::*;

/// Every leaf field a `twin simulate --set` may name, with its prefix.
fn simulate_paths() -> Vec<Field> {
    let mut fields = leaf_paths(embedded(Kind::Scenario, DEFAULT_SCENARIO));
    for (prefix, kind, name) in [
        ("hardware", Kind::Hardware, "gb300"),
        ("model", Kind::Model, "deepseek-v4.1-flash"),
        ("workload", Kind::Workload, "agentx"),
        ("workload", Kind::Workload, "poisson"),
    ] {
        fields.extend(
            leaf_paths(embedded(kind, name))
                .into_iter()
                .map(|f| f.under(prefix)),
        );
    }
    for (path, value) in [
        ("serving.gpus", "72"),
        ("serving.decode.kv_capacity_tokens_per_rank", "100000"),
        ("serving.prefill.prefix_cache_tokens", "100000"),
        ("serving.prefill.host_cache_tokens", "100000"),
        ("serving.mode", "\"aggregated\""),
        ("serving.mode", "\"prefill-only\""),
        ("serving.mtp.draft_tokens", "2"),
        ("cost.moe.mem_eff", "0.5"),
        ("cost.gemm.fixed_s", "0.0001"),
        ("workload", "\"poisson\""),
        ("workload", "\"chat-closed-loop\""),
    ] {
        fields.push(Field::new(path, value));
    }
    // The harness lowers limits to keep runs short; the fuzzer does not raise them.
    fields.retain(|f| !f.path.starts_with("limits."));
    fields
}

/// Scenario files (and the hardware, model and workload files they name), mutated,
/// with `--set` overrides: resolved as `twin simulate` resolves them; one case in 8
/// that resolves also runs, shortened and with low limits.
#[test]
fn fuzz_scenario_files_and_sets_never_panic() {
    let n = cases(1000);
    let dir = tempfile::tempdir().unwrap();
    let paths = simulate_paths();
    let scenarios = embedded_names(Kind::Scenario);
    let mut failures = Vec::new();
    let (tally, runs) = (Tally::default(), Tally::default());
    for seed in n.clone() {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let text = scenario_text(&mut rng, &scenarios, dir.path(), seed);
        let file = dir.path().join(format!("{seed}.toml"));
        std::fs::write(&file, &text).unwrap();
        let sets: Vec<String> = (0..rng.random_range(0..4))
            .map(|_| random_set(&mut rng, &paths))
            .collect();
        let duration = rng.random_bool(0.1).then(|| {
            NUMBERS
                .choose(&mut rng)
                .unwrap()
                .parse::<f64>()
                .unwrap_or(1.0)
        });
        let args = SimulateArgs {
            scenario: Some(file.to_string_lossy().into_owned()),
            seed: rng.random_bool(0.1).then(|| rng.random()),
            duration,
            set: sets.clone(),
            cohort: None,
            json: false,
            trace: None,
            trace_format: None,
            pricing: Default::default(),
            bench: rng
                .random_bool(0.05)
                .then(|| BENCH_SPECS.choose(&mut rng).unwrap().to_string()),
            decode_deps: Vec::new(),
        };
        let run = rng.random_bool(1.0 / 8.0);
        let input = format!("{text}\n--set {sets:?} --duration {duration:?}");
        no_panic(&mut failures, "scenario", seed, &input, || {
            let resolved = args.request().and_then(|req| resolve(&req));
            tally.count(&resolved);
            if std::env::var_os("TWIN_FUZZ_VERBOSE").is_some() {
                if let Err(e) = &resolved {
                    std::eprintln!("refused: {e:#}");
                }
            }
            let Ok(r) = resolved else {
                return;
            };
            let _ = to_json(&r, one_report(), 0);
            if run {
                let r = short_run(&args);
                if std::env::var_os("TWIN_FUZZ_VERBOSE").is_some() {
                    if let Err(e) = &r {
                        std::eprintln!("run refused: {e:#}");
                    }
                }
                runs.count(&r);
            }
        });
    }
    tally.show("scenarios resolved");
    runs.show("scenarios run");
    check(failures, n);
}

/// An embedded scenario's text, sometimes naming mutated hardware, model or workload
/// files (written under `dir`), and mostly mutated itself.
fn scenario_text(
    rng: &mut ChaCha8Rng,
    scenarios: &[String],
    dir: &std::path::Path,
    seed: u64,
) -> String {
    let name = scenarios.choose(rng).unwrap().clone();
    let mut text = embedded(Kind::Scenario, &name).to_string();
    // Sometimes point the scenario at a mutated file of another kind.
    for (key, kind, file) in [
        ("hardware", Kind::Hardware, "gb300"),
        ("model", Kind::Model, "deepseek-v4.1-flash"),
        ("workload", Kind::Workload, "agentx"),
    ] {
        if rng.random_bool(0.15) {
            let p = dir.join(format!("{seed}-{key}.toml"));
            std::fs::write(&p, mutate(rng, embedded(kind, file))).unwrap();
            text = text.replace(
                &format!("{key} = \""),
                &format!("{key} = \"{}\" # ", p.display()),
            );
        }
    }
    if rng.random_bool(0.8) {
        text = mutate(rng, &text);
    }
    text
}

/// `to_json` needs a report; resolving is what is fuzzed, so one tiny run's does.
fn one_report() -> &'static sim::serving::Report {
    static REPORT: std::sync::OnceLock<sim::serving::Report> = std::sync::OnceLock::new();
    REPORT.get_or_init(|| {
        let mut a = base_sim_args();
        a.duration = Some(0.05);
        a.set.push("workload.agentx.sessions=4".into());
        execute(&a.request().expect("a request"))
            .expect("a tiny default run")
            .1
    })
}

pub(super) fn base_sim_args() -> SimulateArgs {
    SimulateArgs {
        scenario: None,
        seed: None,
        duration: None,
        set: Vec::new(),
        cohort: None,
        json: false,
        trace: None,
        trace_format: None,
        pricing: Default::default(),
        bench: None,
        decode_deps: Vec::new(),
    }
}

/// `--bench` specs the scenario fuzzer tries, good and bad.
const BENCH_SPECS: &[&str] = &[
    "vllm --num-prompts 8 --max-concurrency 2 --random-input-len 64 --random-output-len 4",
    "sglang --num-prompts 4 --random-input-len 32 --random-output-len 2 --request-rate 100",
    "vllm --num-prompts 0",
    "vllm --random-range-ratio 2",
    "aiperf --request-count 3",
    "tgi",
    "",
];

/// Runs `args` for at most half a simulated second, with limits low enough that any
/// resolved scenario ends in well under a second.
pub(super) fn short_run(args: &SimulateArgs) -> anyhow::Result<()> {
    let mut a = args.clone();
    a.duration = Some(0.5);
    a.set.extend([
        "limits.max_events=200000".to_string(),
        "limits.max_sessions=6000".to_string(),
        "limits.max_live_requests=20000".to_string(),
    ]);
    let (r, report, n) = execute(&a.request()?)?;
    let _ = report.render_text();
    let _ = to_json(&r, &report, n);
    Ok(())
}
