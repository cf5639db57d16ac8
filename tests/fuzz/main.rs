//! Fuzz-style tests on stable Rust: seeded random mutations of what users give twin
//! (scenario, hardware, model and workload files; `--set` overrides; command-line
//! numbers; trace lines) through the same code the commands run, asserting "a clean
//! error or a valid result, never a panic". Debug builds check integer overflow, so an
//! overflow is a panic here too.
//!
//! Each test draws its cases from a fixed seed: a failure prints the case's seed and
//! input, and reruns the same. `TWIN_FUZZ_CASES=N` runs N cases per test instead of the
//! default (a few thousand in all, seconds in a debug build), to fuzz longer locally.
//!
//! This file holds the mutator and the shared machinery; `scenario.rs` fuzzes scenario
//! files and `--set` (and `--bench`), `commands.rs` the `forward` and `kernel` command
//! lines, `trace.rs` Mooncake trace lines.

use ::scenario::flags::forward::ForwardArgs;
use ::scenario::flags::kernel::KernelArgs;
use ::scenario::flags::SimulateArgs;
use ::scenario::request::DEFAULT_SCENARIO;
use ::scenario::resolve;
use ::scenario::run::{execute, to_json};
use ::scenario::{embedded_file, embedded_names, Kind};
use clap::Parser;
use clap::Subcommand;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use report::text::forward;
use std::panic::{catch_unwind, AssertUnwindSafe};

mod commands;
mod scenario;
mod trace;

/// The commands fuzzed, parsed as `twin` parses them (the same flags).
#[derive(Parser)]
#[command(name = "twin")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Forward(ForwardArgs),
    Kernel(KernelArgs),
}

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
            ::scenario::clip(input)
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
