//! Fuzz-style tests on stable Rust: seeded random mutations of what users give twin
//! (scenario, hardware, model and workload files; `--set` overrides; command-line
//! numbers; trace lines) through the same code the commands run, asserting "a clean
//! error or a valid result, never a panic". Debug builds check integer overflow, so an
//! overflow is a panic here too.
//!
//! Each test draws its cases from a fixed seed: a failure prints the case's seed and
//! input, and reruns the same. `TWIN_FUZZ_CASES=N` runs N cases per test instead of the
//! default (a few thousand in all, seconds in a debug build), to fuzz longer locally.

use crate::args::SimulateArgs;
use crate::cmd::forward;
use crate::kernel;
use crate::scenario::resolve::DEFAULT_SCENARIO;
use crate::scenario::resolve_args;
use crate::scenario::{embedded_file, embedded_names, Kind};
use crate::simulation::{execute, to_json};
use crate::step::{self, ForwardArgs};
use crate::{Cli, Command};
use clap::Parser;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Numbers at the edges of what each type holds, and values no datasheet has.
const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "3",
    "7",
    "0.5",
    "1e-300",
    "1e300",
    "1e18",
    "-1e18",
    "inf",
    "-inf",
    "nan",
    "65535",
    "65536",
    "4096",
    "4097",
    "2147483647",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1e9",
];

/// Strings a field may be given instead of what it expects.
fn strings(rng: &mut ChaCha8Rng) -> String {
    let pick = [
        "\"\"",
        "\"x\"",
        "\"gb300\"",
        "\"deepseek-v3\"",
        "\"poisson\"",
        "\"/dev/zero\"",
        "\"/nonexistent/x.toml\"",
        "\"2MiB\"",
        "\"1e400B\"",
        "true",
        "[]",
        "[1, 2, 3]",
        "{}",
        "{ dist = \"fixed\", value = 1e300 }",
        "{ dist = \"lognormal\", mean = 0, cv = 1 }",
    ];
    if rng.random_bool(0.05) {
        format!("\"{}\"", "z".repeat(5000))
    } else {
        pick.choose(rng).unwrap().to_string()
    }
}

/// Numbers a field plausibly takes, to reach past the checks into the code behind.
const PLAUSIBLE: &[&str] = &[
    "1", "2", "4", "8", "16", "24", "32", "48", "64", "128", "256", "1000", "8192", "0.1", "0.9",
    "100.0", "2.5",
];

fn value(rng: &mut ChaCha8Rng) -> String {
    match rng.random_range(0..10) {
        0..4 => NUMBERS.choose(rng).unwrap().to_string(),
        4..8 => PLAUSIBLE.choose(rng).unwrap().to_string(),
        _ => strings(rng),
    }
}

/// A value of the same kind as `old` (number, string, boolean), mostly: past the
/// type checks into the checks and code behind them; one in ten of any kind.
fn value_like(rng: &mut ChaCha8Rng, old: &str) -> String {
    if rng.random_bool(0.1) {
        return value(rng);
    }
    match old.chars().next() {
        Some('"') => strings(rng),
        Some('t') | Some('f') => ["true", "false"].choose(rng).unwrap().to_string(),
        Some('[') | Some('{') => value(rng),
        _ if rng.random_bool(0.5) => NUMBERS.choose(rng).unwrap().to_string(),
        _ => PLAUSIBLE.choose(rng).unwrap().to_string(),
    }
}

/// Cases per test: `default`, or `TWIN_FUZZ_CASES`; from seed `TWIN_FUZZ_FROM` (0).
fn cases(default: u64) -> std::ops::Range<u64> {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse().ok());
    let from = env("TWIN_FUZZ_FROM").unwrap_or(0);
    from..from + env("TWIN_FUZZ_CASES").unwrap_or(default)
}

/// Runs `f`; a panic becomes a failure line with the case's seed and input.
fn no_panic(failures: &mut Vec<String>, what: &str, seed: u64, input: &str, f: impl FnOnce()) {
    if std::env::var_os("TWIN_FUZZ_VERBOSE").is_some() {
        std::eprintln!("{what} seed {seed}");
        if std::env::var_os("TWIN_FUZZ_VERBOSE") == Some("2".into()) {
            std::eprintln!("{input}");
        }
    }
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        failures.push(format!(
            "{what}, seed {seed}: panicked on\n{}",
            crate::scenario::clip(input)
        ));
    }
}

/// Outcomes of a test's cases, shown with `--nocapture`.
#[derive(Default)]
struct Tally {
    ok: std::cell::Cell<u64>,
    err: std::cell::Cell<u64>,
}

impl Tally {
    fn count<T, E>(&self, r: &Result<T, E>) {
        let c = if r.is_ok() { &self.ok } else { &self.err };
        c.set(c.get() + 1);
    }
    fn show(&self, what: &str) {
        std::eprintln!(
            "{what}: {} valid, {} refused",
            self.ok.get(),
            self.err.get()
        );
    }
}

fn check(failures: Vec<String>, cases: std::ops::Range<u64>) {
    assert!(
        failures.is_empty(),
        "{} of {} cases panicked:\n{}",
        failures.len(),
        cases.end - cases.start,
        failures[..failures.len().min(5)].join("\n---\n")
    );
}

/// The leaf fields of a TOML text (path, value as TOML), except provenance.
fn leaf_paths(text: &str) -> Vec<Field> {
    fn walk(v: &toml::Value, prefix: &str, out: &mut Vec<Field>) {
        match v {
            toml::Value::Table(t) => {
                for (k, c) in t {
                    if k != "provenance" {
                        let p = if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}.{k}")
                        };
                        walk(c, &p, out);
                    }
                }
            }
            toml::Value::Array(a) if a.iter().all(|x| x.is_table()) => {
                for (i, c) in a.iter().enumerate() {
                    walk(c, &format!("{prefix}.{i}"), out);
                }
            }
            _ => out.push(Field {
                path: prefix.to_string(),
                value: v.to_string(),
            }),
        }
    }
    let mut out = Vec::new();
    if let Ok(t) = toml::from_str::<toml::Table>(text) {
        walk(&toml::Value::Table(t), "", &mut out);
    }
    out
}

/// A field a `--set` may name, with its value in the shipped file.
#[derive(Clone)]
struct Field {
    path: String,
    value: String,
}

impl Field {
    fn new(path: &str, value: &str) -> Field {
        Field {
            path: path.into(),
            value: value.into(),
        }
    }

    fn under(self, prefix: &str) -> Field {
        Field {
            path: format!("{prefix}.{}", self.path),
            ..self
        }
    }
}

/// A `--set` override: usually a real field with a value of its kind (often an
/// edge); sometimes junk.
fn random_set(rng: &mut ChaCha8Rng, fields: &[Field]) -> String {
    let f = fields.choose(rng).unwrap();
    match rng.random_range(0..20) {
        0 => "=".into(),
        1 => "a..b=1".into(),
        2 => format!("{}=", f.path),
        3 => format!("{}.x.y=1", f.path),
        4 => "serving.decode.dep=4294967295".into(),
        5 => format!("{}.{}x=1", f.path, "a.".repeat(rng.random_range(1..5000))),
        // Strings are mostly names and kinds: keep them half the time.
        _ if f.value.starts_with('"') && rng.random_bool(0.5) => {
            format!("{}={}", f.path, f.value)
        }
        _ => format!("{}={}", f.path, value_like(rng, &f.value)),
    }
}

/// Mutates a TOML text once or twice: mostly (4 in 5) an edge or plausible value in place of a
/// field's value (outside `[provenance]`); else a deleted, doubled or cut line, a
/// byte-order mark, a stray character.
fn mutate(rng: &mut ChaCha8Rng, text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let end = lines
        .iter()
        .position(|l| l.trim() == "[provenance]")
        .unwrap_or(lines.len());
    let values: Vec<usize> = (0..end)
        .filter(|&i| !lines[i].trim_start().starts_with('#') && lines[i].contains('='))
        .collect();
    for _ in 0..rng.random_range(1..=2) {
        if lines.is_empty() {
            break;
        }
        let i = rng.random_range(0..lines.len());
        match rng.random_range(0..20) {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            2 => {
                let l = &mut lines[i];
                let cut = rng.random_range(0..=l.len());
                if l.is_char_boundary(cut) {
                    l.truncate(cut);
                }
            }
            3 if rng.random_bool(0.5) => lines[0] = format!("\u{feff}{}", lines[0]),
            3 => {
                let l = &mut lines[i];
                let at = rng.random_range(0..=l.len());
                if l.is_char_boundary(at) {
                    l.insert(at, *['[', '"', '=', '.', '\'', '#'].choose(rng).unwrap());
                }
            }
            _ => {
                if let Some(&j) = values.choose(rng) {
                    if let Some((k, old)) = lines[j].split_once('=') {
                        lines[j] = format!("{k}= {}", value_like(rng, old.trim()));
                    }
                }
            }
        }
    }
    lines.join("\n")
}

fn embedded(kind: Kind, name: &str) -> &'static str {
    let folder = kind.folder();
    embedded_file(&format!("{folder}{name}.toml")).expect("embedded file")
}

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
        let name = scenarios.choose(&mut rng).unwrap().clone();
        let mut text = embedded(Kind::Scenario, &name).to_string();
        // Sometimes point the scenario at a mutated file of another kind.
        for (key, kind, file) in [
            ("hardware", Kind::Hardware, "gb300"),
            ("model", Kind::Model, "deepseek-v4.1-flash"),
            ("workload", Kind::Workload, "agentx"),
        ] {
            if rng.random_bool(0.15) {
                let p = dir.path().join(format!("{seed}-{key}.toml"));
                std::fs::write(&p, mutate(&mut rng, embedded(kind, file))).unwrap();
                text = text.replace(
                    &format!("{key} = \""),
                    &format!("{key} = \"{}\" # ", p.display()),
                );
            }
        }
        if rng.random_bool(0.8) {
            text = mutate(&mut rng, &text);
        }
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
            profile: None,
            engine: None,
            bench: rng
                .random_bool(0.05)
                .then(|| BENCH_SPECS.choose(&mut rng).unwrap().to_string()),
            decode_deps: Vec::new(),
        };
        let run = rng.random_bool(1.0 / 8.0);
        let input = format!("{text}\n--set {sets:?} --duration {duration:?}");
        no_panic(&mut failures, "scenario", seed, &input, || {
            let resolved = resolve_args(&args);
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

/// `to_json` needs a report; resolving is what is fuzzed, so one tiny run's does.
fn one_report() -> &'static sim::serving::Report {
    static REPORT: std::sync::OnceLock<sim::serving::Report> = std::sync::OnceLock::new();
    REPORT.get_or_init(|| {
        let mut a = base_sim_args();
        a.duration = Some(0.05);
        a.set.push("workload.agentx.sessions=4".into());
        execute(&a).expect("a tiny default run").1
    })
}

fn base_sim_args() -> SimulateArgs {
    SimulateArgs {
        scenario: None,
        seed: None,
        duration: None,
        set: Vec::new(),
        cohort: None,
        json: false,
        trace: None,
        profile: None,
        engine: None,
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
fn short_run(args: &SimulateArgs) -> anyhow::Result<()> {
    let mut a = args.clone();
    a.duration = Some(0.5);
    a.set.extend([
        "limits.max_events=200000".to_string(),
        "limits.max_sessions=6000".to_string(),
        "limits.max_live_requests=20000".to_string(),
    ]);
    let (r, report, n) = execute(&a)?;
    let _ = report.render_text();
    let _ = to_json(&r, &report, n);
    Ok(())
}

/// `twin forward` and `twin kernel` command lines with edge numbers and `--set`
/// overrides (some naming mutated hardware and model files), parsed by clap and
/// evaluated as the commands do.
#[test]
fn fuzz_forward_and_kernel_command_lines_never_panic() {
    let n = cases(2000);
    let dir = tempfile::tempdir().unwrap();
    let mut paths: Vec<Field> = leaf_paths(embedded(Kind::Hardware, "gb300"))
        .into_iter()
        .map(|f| f.under("hardware"))
        .collect();
    paths.extend(
        leaf_paths(embedded(Kind::Model, "deepseek-v4.1-flash"))
            .into_iter()
            .map(|f| f.under("model")),
    );
    paths.extend([
        Field::new("cost.moe.mem_eff", "0.5"),
        Field::new("cost.ll.dispatch_s", "0.00001"),
    ]);
    let mut failures = Vec::new();
    let tally = Tally::default();
    for seed in n.clone() {
        let mut rng = ChaCha8Rng::seed_from_u64(1 << 32 | seed);
        let mut argv: Vec<String> = vec!["twin".into()];
        let kernel = rng.random_bool(0.3);
        if kernel {
            argv.extend(kernel_args(&mut rng));
        } else {
            argv.push("forward".into());
            for (flag, p) in [
                ("--dep", 0.6),
                ("--batch-per-rank", 0.5),
                ("--requests", 0.15),
                ("--context", 0.5),
                ("--new-tokens", 0.3),
                ("--chunk", 0.15),
                ("--mtp", 0.2),
                ("--redundant-experts", 0.15),
            ] {
                if rng.random_bool(p) {
                    argv.push(format!("{flag}={}", number(&mut rng)));
                }
            }
            if rng.random_bool(0.4) {
                argv.extend(["--phase".into(), "prefill".into()]);
            }
            for flag in ["--no-overlap", "--eager-decode", "--prefill-graphs"] {
                if rng.random_bool(0.1) {
                    argv.push(flag.into());
                }
            }
            for (flag, kind, name) in [
                ("--hardware", Kind::Hardware, "gb300"),
                ("--model", Kind::Model, "deepseek-v4.1-flash"),
            ] {
                if rng.random_bool(0.2) {
                    let p = dir.path().join(format!("{seed}{flag}.toml"));
                    std::fs::write(&p, mutate(&mut rng, embedded(kind, name))).unwrap();
                    argv.extend([flag.to_string(), p.to_string_lossy().into_owned()]);
                } else if rng.random_bool(0.2) {
                    let others = embedded_names(kind);
                    argv.extend([flag.to_string(), others.choose(&mut rng).unwrap().clone()]);
                }
            }
        }
        for _ in 0..rng.random_range(0..3) {
            let set = random_set(&mut rng, &paths);
            argv.extend(["--set".into(), set]);
        }
        let input = argv.join(" ");
        no_panic(&mut failures, "command line", seed, &input, || {
            let Ok(cli) = Cli::try_parse_from(&argv) else {
                return;
            };
            match &cli.command {
                Command::Forward(a) => tally.count(&evaluate_forward(a)),
                Command::Kernel(a) => {
                    let k = kernel::evaluate(a);
                    tally.count(&k);
                    if let Ok(k) = k {
                        let _ = kernel::to_json(&k);
                    }
                }
                _ => {}
            }
        });
    }
    tally.show("command lines evaluated");
    check(failures, n);
}

fn evaluate_forward(a: &ForwardArgs) -> anyhow::Result<()> {
    let f = step::evaluate(a)?;
    let _ = forward::render(&f);
    let _ = forward::to_json(&f);
    Ok(())
}

/// An integer for a command-line flag: mostly plausible, else an edge of the integer
/// types, and one in ten anything (`-1`, `nan`, `0.5`: clap refuses those).
fn number(rng: &mut ChaCha8Rng) -> String {
    const PLAUSIBLE_INT: &[&str] = &[
        "1", "2", "4", "8", "16", "24", "32", "48", "64", "128", "256", "1000", "8192",
    ];
    const EDGE_INT: &[&str] = &[
        "0",
        "3",
        "7",
        "4096",
        "4097",
        "65536",
        "4294967295",
        "4294967296",
        "18446744073709551615",
    ];
    match rng.random_range(0..10) {
        0..6 => PLAUSIBLE_INT.choose(rng).unwrap().to_string(),
        6..9 => EDGE_INT.choose(rng).unwrap().to_string(),
        _ => NUMBERS.choose(rng).unwrap().to_string(),
    }
}

/// The required `--ep` and `--tokens`, and each of `optional` two times in five, with
/// numbers.
fn some_flags(rng: &mut ChaCha8Rng, v: &mut Vec<String>, optional: &[&str]) {
    for f in ["--ep", "--tokens"] {
        v.push(format!("{f}={}", number(rng)));
    }
    for f in optional {
        if rng.random_bool(0.4) {
            v.push(format!("{f}={}", number(rng)));
        }
    }
}

/// A `twin kernel` command line with edge numbers.
fn kernel_args(rng: &mut ChaCha8Rng) -> Vec<String> {
    let num = number;
    let mut v: Vec<String> = vec!["kernel".into()];
    match rng.random_range(0..5) {
        0 => {
            v.push("gemm".into());
            for f in ["--m", "--n", "--k", "--groups"] {
                v.push(format!("{f}={}", num(rng)));
            }
            v.extend([
                "--layout".into(),
                ["dense", "contiguous", "masked"]
                    .choose(rng)
                    .unwrap()
                    .to_string(),
            ]);
        }
        1 | 2 => {
            v.push(
                if rng.random_bool(0.5) {
                    "dispatch"
                } else {
                    "combine"
                }
                .into(),
            );
            some_flags(
                rng,
                &mut v,
                &[
                    "--hidden",
                    "--experts",
                    "--top-k",
                    "--groups",
                    "--topk-groups",
                ],
            );
            if rng.random_bool(0.5) {
                v.extend(["--kernels".into(), "low-latency".into()]);
            }
        }
        3 => {
            v.push("moe".into());
            some_flags(rng, &mut v, &["--hidden", "--experts", "--top-k", "--ffn"]);
            if rng.random_bool(0.5) {
                v.push("--fused".into());
            }
        }
        _ => {
            v.push("attention".into());
            let kind = [
                "dense-decode",
                "sparse-decode",
                "dense-prefill",
                "sparse-prefill",
            ];
            v.extend(["--kind".into(), kind.choose(rng).unwrap().to_string()]);
            for f in [
                "--heads",
                "--q-tokens",
                "--dqk",
                "--dv",
                "--kv-bytes",
                "--context",
                "--top-k",
                "--batch",
            ] {
                if ["--heads", "--q-tokens", "--dqk", "--dv", "--kv-bytes"].contains(&f)
                    || rng.random_bool(0.4)
                {
                    v.push(format!("{f}={}", num(rng)));
                }
            }
        }
    }
    if rng.random_bool(0.3) {
        let hw = embedded_names(Kind::Hardware);
        v.extend(["--hardware".into(), hw.choose(rng).unwrap().clone()]);
    }
    v
}

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
                sim::serving::core::stream(seed, "workload"),
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

#[test]
fn the_mutator_changes_files_and_keeps_seeds_reproducible() {
    let text = embedded(Kind::Hardware, "gb300");
    let a = mutate(&mut ChaCha8Rng::seed_from_u64(5), text);
    let b = mutate(&mut ChaCha8Rng::seed_from_u64(5), text);
    assert_eq!(a, b);
    let changed = (0..20)
        .filter(|s| mutate(&mut ChaCha8Rng::seed_from_u64(*s), text) != text.trim_end())
        .count();
    assert!(
        changed >= 15,
        "only {changed} of 20 mutations changed the file"
    );
}
