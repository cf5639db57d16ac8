//! Every `$ twin ...` example in README.md and docs/**/*.md, run against the built binary.
//!
//! An example is a fenced block whose first line starts with `$ twin`. Each line of the
//! block that starts with `$ ` is a command; the lines after it, up to the next command or
//! the closing fence, are its expected output (stdout and stderr together, in the order
//! written). A command runs through `sh -c`, with `twin` on the PATH, so `| md5sum` works.
//!
//! How output is compared, line by line:
//! - the text between numbers must be equal, except that runs of spaces count as one
//!   space and leading and trailing spaces are ignored (columns may shift);
//! - numbers must agree within a relative tolerance of `REL_TOL` (1e-3): |a - b| <=
//!   1e-3 x max(|a|, |b|), so a zero must stay zero;
//! - a line `...` stands for any number of lines (none included), for output that is
//!   left out or varies from machine to machine;
//! - `[..]` inside a line stands for any text on that line (then the rest of the line is
//!   compared as text, numbers exactly).
//!
//! A command whose expected output has a line starting with `error:` must exit non-zero;
//! any other must exit zero.
//!
//! The commands of one markdown file run in order in one fresh directory that looks like
//! the repository root (a symbolic link to each of its top-level entries), so one example
//! may read what an earlier one wrote (`--out prof`, then `--profile prof/profile.toml`)
//! and nothing is written into the repository.
//!
//! A block that cannot run as it stands (a GPU, Ctrl-C, a placeholder in the command) is
//! preceded by the line `<!-- not run: REASON -->`. It is counted, listed and must give a
//! reason; `NOT_RUN` below is the number of such blocks, so a new one fails this test
//! until it is declared here.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Relative tolerance on every number of an expected output.
const REL_TOL: f64 = 1e-3;
/// Blocks marked `<!-- not run: ... -->` across all the markdown files.
const NOT_RUN: usize = 2;
const NOT_RUN_MARK: &str = "<!-- not run:";

/// One `$ ...` command with its expected output.
#[derive(Debug)]
struct Example {
    file: String,
    /// 1-based line of the command in its file.
    line: usize,
    command: String,
    expected: Vec<String>,
}

/// A fenced example block as it stands in a file.
#[derive(Debug)]
struct Block {
    examples: Vec<Example>,
    /// The reason given in a `<!-- not run: ... -->` line before the block.
    not_run: Option<String>,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, then every markdown file under docs/, in path order.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut docs = Vec::new();
    walk(&root.join("docs"), &mut docs);
    docs.sort();
    let mut files = vec![root.join("README.md")];
    files.extend(docs);
    files
}

/// The example blocks of one markdown file.
fn parse_blocks(file: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with("```") {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].trim_start().starts_with("```") {
            end += 1;
        }
        if lines.get(start).is_some_and(|l| l.starts_with("$ twin")) {
            let not_run = (i > 0)
                .then(|| lines[i - 1].trim())
                .and_then(|l| l.strip_prefix(NOT_RUN_MARK))
                .map(|r| r.trim_end_matches("-->").trim().to_string());
            blocks.push(Block {
                examples: parse_examples(file, &lines[start..end], start),
                not_run,
            });
        }
        i = end + 1;
    }
    blocks
}

/// The commands of a block's lines (`first` is the index of its first line in the file).
fn parse_examples(file: &str, lines: &[&str], first: usize) -> Vec<Example> {
    let mut examples: Vec<Example> = Vec::new();
    for (k, line) in lines.iter().enumerate() {
        if let Some(command) = line.strip_prefix("$ ") {
            examples.push(Example {
                file: file.to_string(),
                line: first + k + 1,
                command: command.to_string(),
                expected: Vec::new(),
            });
        } else if let Some(example) = examples.last_mut() {
            example.expected.push(line.to_string());
        }
    }
    examples
}

/// A piece of a line: a number or the text between numbers.
#[derive(Debug, PartialEq)]
enum Piece {
    Number(f64, String),
    Text(String),
}

/// Splits a line into numbers and the text between them (whitespace runs made one space).
fn pieces(line: &str) -> Vec<Piece> {
    let chars: Vec<char> = line.trim().chars().collect();
    let mut out = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while i < chars.len() {
        if let Some(end) = number_end(&chars, i) {
            let raw: String = chars[i..end].iter().collect();
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(Piece::Number(raw.parse().expect("a number"), raw));
            i = end;
            continue;
        }
        let c = chars[i];
        if c.is_whitespace() {
            if !text.ends_with(' ') {
                text.push(' ');
            }
        } else {
            text.push(c);
        }
        i += 1;
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    out
}

/// Where a number starting at `i` ends: digits, a fraction, an exponent; a sign counts
/// when what comes before it is not part of a word.
fn number_end(chars: &[char], i: usize) -> Option<usize> {
    let digit = |k: usize| chars.get(k).is_some_and(|c| c.is_ascii_digit());
    let mut k = i;
    if matches!(chars[i], '+' | '-') {
        let after_word = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '.');
        if after_word || !digit(i + 1) {
            return None;
        }
        k += 1;
    } else if !chars[i].is_ascii_digit() || (i > 0 && chars[i - 1] == '.') {
        return None;
    }
    while digit(k) {
        k += 1;
    }
    if chars.get(k) == Some(&'.') && digit(k + 1) {
        k += 1;
        while digit(k) {
            k += 1;
        }
    }
    if matches!(chars.get(k), Some('e' | 'E')) {
        let sign = usize::from(matches!(chars.get(k + 1), Some('+' | '-')));
        if digit(k + 1 + sign) {
            k += 1 + sign;
            while digit(k) {
                k += 1;
            }
        }
    }
    Some(k)
}

fn numbers_agree(expected: f64, actual: f64) -> bool {
    (expected - actual).abs() <= REL_TOL * expected.abs().max(actual.abs())
}

/// Whether an output line matches an expected line; `Err` says how it differs.
fn line_matches(expected: &str, actual: &str) -> Result<(), String> {
    if expected.contains("[..]") {
        return wildcard_matches(expected, actual);
    }
    let (want, got) = (pieces(expected), pieces(actual));
    if want.len() != got.len() {
        return Err("the lines differ in their numbers and words".into());
    }
    for (w, g) in want.iter().zip(&got) {
        match (w, g) {
            (Piece::Number(a, ra), Piece::Number(b, rb)) if !numbers_agree(*a, *b) => {
                return Err(format!("{ra} != {rb} (relative tolerance {REL_TOL})"))
            }
            (Piece::Number(..), Piece::Number(..)) => {}
            (Piece::Text(a), Piece::Text(b)) if a == b => {}
            _ => return Err("the lines differ".into()),
        }
    }
    Ok(())
}

/// `[..]` matches any text; the rest must appear in order, whitespace runs as one space.
fn wildcard_matches(expected: &str, actual: &str) -> Result<(), String> {
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let actual = squash(actual);
    let parts: Vec<String> = expected.split("[..]").map(squash).collect();
    let mut rest = actual.as_str();
    for (k, part) in parts.iter().enumerate() {
        let part = part.trim();
        let found = if k == 0 {
            rest.starts_with(part).then_some(0)
        } else {
            rest.find(part)
        };
        match found {
            Some(at) => rest = &rest[at + part.len()..],
            None => return Err(format!("`{part}` not found")),
        }
    }
    if parts.last().is_some_and(|p| !p.trim().is_empty()) && !rest.trim().is_empty() {
        return Err("the line goes on past its expected end".into());
    }
    Ok(())
}

/// Matches output lines against expected lines, `...` standing for any lines. On a
/// mismatch, the expected line (index) it failed at and why.
fn output_matches(expected: &[String], actual: &[String]) -> Result<(), (usize, String)> {
    fn go(e: &[String], a: &[String], at: usize) -> Result<(), (usize, String)> {
        let Some(first) = e.first() else {
            return match a.first() {
                None => Ok(()),
                Some(extra) => Err((at, format!("unexpected line `{extra}`"))),
            };
        };
        if first.trim() == "..." {
            let mut last = Err((at, "nothing follows".to_string()));
            for skip in 0..=a.len() {
                last = go(&e[1..], &a[skip..], at + 1);
                if last.is_ok() {
                    return last;
                }
            }
            return last;
        }
        match a.first() {
            None => Err((at, "the output ends here".into())),
            Some(line) => match line_matches(first, line) {
                Ok(()) => go(&e[1..], &a[1..], at + 1),
                Err(why) => Err((at, format!("got `{line}`: {why}"))),
            },
        }
    }
    let trimmed = |v: &[String]| {
        let mut v: Vec<String> = v.iter().map(|l| l.trim_end().to_string()).collect();
        while v.last().is_some_and(|l| l.is_empty()) {
            v.pop();
        }
        v
    };
    go(&trimmed(expected), &trimmed(actual), 0)
}

/// A fresh directory that reads like the repository root: a link to each top-level entry
/// but the build and the local runs (`runs/`, where `scripts/live-figures.sh` writes by
/// default): examples that write `runs/NAME` then write into the fresh directory, not
/// into the checkout.
fn workdir(root: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for entry in std::fs::read_dir(root)
        .expect("the repository root")
        .flatten()
    {
        let name = entry.file_name();
        if name == ".git" || name == "target" || name == "runs" {
            continue;
        }
        std::os::unix::fs::symlink(entry.path(), dir.path().join(&name)).expect("a link");
    }
    let bin = dir.path().join(".bin");
    std::fs::create_dir(&bin).expect("the bin folder");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_twin"), bin.join("twin")).expect("a link");
    dir
}

/// Runs one example in `dir`; `Err` with a report when its output does not match.
fn run_example(dir: &Path, example: &Example) -> Result<(), String> {
    let path = format!(
        "{}:{}",
        dir.join(".bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 2>&1\n{}", example.command))
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .expect("sh runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let actual: Vec<String> = text.lines().map(str::to_string).collect();
    let wants_error = example.expected.iter().any(|l| l.starts_with("error:"));
    let mut report = String::new();
    if out.status.success() == wants_error {
        let _ = writeln!(
            report,
            "exit status {} (expected {})",
            out.status,
            if wants_error { "a failure" } else { "success" }
        );
    }
    if let Err((at, why)) = output_matches(&example.expected, &actual) {
        let _ = writeln!(report, "expected output line {}: {why}", at + 1);
    }
    if report.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{}:{}: $ {}\n{report}--- its output:\n{text}---",
        example.file, example.line, example.command
    ))
}

/// What one markdown file's examples gave: commands run, blocks not run, failures.
#[derive(Default)]
struct Tally {
    commands_run: usize,
    not_run: Vec<String>,
    failures: Vec<String>,
}

fn check_file(root: &Path, path: &Path) -> Tally {
    let name = path
        .strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string();
    let text = std::fs::read_to_string(path).expect("a markdown file");
    let mut tally = Tally::default();
    let blocks = parse_blocks(&name, &text);
    if blocks.is_empty() {
        return tally;
    }
    let dir = workdir(root);
    for block in blocks {
        let first = &block.examples[0];
        match block.not_run {
            Some(reason) if reason.is_empty() => tally
                .failures
                .push(format!("{name}:{}: not run without a reason", first.line)),
            Some(reason) => tally.not_run.push(format!(
                "{name}:{}: $ {} ({reason})",
                first.line, first.command
            )),
            None => {
                for example in &block.examples {
                    tally.commands_run += 1;
                    if let Err(report) = run_example(dir.path(), example) {
                        tally.failures.push(report);
                    }
                }
            }
        }
    }
    tally
}

#[test]
fn every_example_in_the_readme_and_docs_prints_what_it_shows() {
    let root = repo_root();
    let files = markdown_files(&root);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let tallies = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(file) = files.get(k) else { break };
                let tally = check_file(&root, file);
                tallies.lock().unwrap().push(tally);
            });
        }
    });
    let tallies = tallies.into_inner().unwrap();
    let run: usize = tallies.iter().map(|t| t.commands_run).sum();
    let mut not_run: Vec<&String> = tallies.iter().flat_map(|t| &t.not_run).collect();
    not_run.sort();
    let failures: Vec<&String> = tallies.iter().flat_map(|t| &t.failures).collect();
    println!(
        "docs examples: {run} commands run, {} blocks not run:",
        not_run.len()
    );
    for n in &not_run {
        println!("  not run: {n}");
    }
    assert!(run > 0, "no example found");
    assert!(
        failures.is_empty(),
        "{} example(s) differ from what the docs show:\n\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    assert_eq!(
        not_run.len(),
        NOT_RUN,
        "blocks marked not run: {not_run:#?}; NOT_RUN in tests/docs.rs says {NOT_RUN}"
    );
}

#[test]
fn numbers_compare_within_the_tolerance_and_text_exactly() {
    assert!(line_matches("step 10.194 ms", "step   10.194 ms").is_ok());
    assert!(line_matches("step 10.194 ms", "step 10.200 ms").is_ok());
    assert!(line_matches("step 10.194 ms", "step 10.300 ms").is_err());
    assert!(line_matches("loss 0.0%", "loss 0.1%").is_err());
    assert!(line_matches("error -0.2%", "error +0.2%").is_err());
    assert!(line_matches("DEP32 x 2", "DEP16 x 2").is_err());
    assert!(line_matches("moe 3.100", "moe_x 3.100").is_err());
    assert!(line_matches("cpu: [..] (2 threads)", "cpu: AMD EPYC (2 threads)").is_ok());
    assert!(line_matches("cpu: [..] (2 threads)", "gpu: AMD EPYC (2 threads)").is_err());
    assert!(line_matches("calibrate: measured in [..]", "calibrate: measured in 3 s").is_ok());
}

#[test]
fn an_elision_stands_for_any_lines_and_nothing_else_is_skipped() {
    let v = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    let actual = v(&["a 1", "b 2", "c 3"]);
    assert!(output_matches(&v(&["a 1", "...", "c 3"]), &actual).is_ok());
    assert!(output_matches(&v(&["a 1", "b 2", "...", "c 3"]), &actual).is_ok());
    assert!(output_matches(&v(&["...", "b 2", "..."]), &actual).is_ok());
    assert!(output_matches(&v(&["a 1", "c 3"]), &actual).is_err());
    assert!(output_matches(&v(&["a 1", "b 2"]), &actual).is_err());
    assert!(output_matches(&v(&["a 1", "b 2", "c 3", "d 4"]), &actual).is_err());
}

#[test]
fn blocks_split_into_commands_and_a_not_run_mark_needs_its_line() {
    let md = "text\n<!-- not run: needs a GPU -->\n```\n$ twin live x --device cuda:0\nout\n```\n\n```\n$ twin list\nhardware: a\n$ twin kernel gemm\ndense\n```\n```sh\ncargo test\n```\n";
    let blocks = parse_blocks("x.md", md);
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].not_run.as_deref(), Some("needs a GPU"));
    assert_eq!(blocks[1].not_run, None);
    assert_eq!(blocks[1].examples.len(), 2);
    assert_eq!(blocks[1].examples[1].command, "twin kernel gemm");
    assert_eq!(blocks[1].examples[1].expected, vec!["dense"]);
    assert_eq!(blocks[1].examples[1].line, 11);
}

/// The fenced block after `marker` in `text`, without its fences.
fn block_after(text: &str, marker: &str) -> String {
    let rest = &text[text.find(marker).expect("the marker") + marker.len()..];
    let start = rest
        .find("```toml\n")
        .expect("a toml block after the marker")
        + 8;
    let end = rest[start..].find("```").expect("the block's end");
    rest[start..start + end].to_string()
}

/// Every field path of a TOML document (tables and leaves), `provenance` left out.
fn field_paths(prefix: &str, v: &toml::Value, out: &mut Vec<String>) {
    if let toml::Value::Table(t) = v {
        for (k, x) in t {
            let p = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if p != "provenance" {
                field_paths(&p, x, out);
            }
        }
    }
    if !prefix.is_empty() && !matches!(v, toml::Value::Table(_)) {
        out.push(prefix.to_string());
    }
}

/// Every field path has a row `| `PATH` |` in the field table of `doc` (named `name`).
fn assert_every_field_has_a_row(doc: &str, name: &str, fields: &[String]) {
    for f in fields {
        assert!(
            doc.contains(&format!("| `{f}` |")),
            "{name} has no row for `{f}`"
        );
    }
}

#[test]
fn the_adding_hardware_example_file_loads_and_every_field_is_explained() {
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("docs/adding-hardware.md")).unwrap();
    let example = block_after(&doc, "<!-- example hardware file -->");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h100-pcie.toml");
    std::fs::write(&path, &example).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_twin"))
        .args(["forward", "--model", "tiny-moe", "--hardware"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines().any(|l| l
            == "kernel fits: carried from h100 by datasheet ratio (no public kernel benchmark of h100-pcie)"),
        "{text}"
    );
    // Every field of the example, of a file with FP4 and fits, and the optional
    // tables has a row of the field table.
    let mut fields = Vec::new();
    for text in [
        example.clone(),
        std::fs::read_to_string(root.join("scenarios/hardware/b200.toml")).unwrap(),
    ] {
        let v: toml::Value = toml::from_str(&text).unwrap();
        field_paths("", &v, &mut fields);
    }
    fields.retain(|f| !f.starts_with("cost.") || f == "cost.spread");
    fields.extend([
        "cost".to_string(),
        "cost.spread".into(),
        "provenance".into(),
    ]);
    assert_every_field_has_a_row(&doc, "docs/adding-hardware.md", &fields);
    // And every provenance line of the example starts with a kind.
    let v: toml::Value = toml::from_str(&example).unwrap();
    for (k, p) in v["provenance"].as_table().unwrap() {
        let p = p.as_str().unwrap();
        assert!(
            ["published:", "secondary:", "derived:", "assumed:"]
                .iter()
                .any(|kind| p.starts_with(kind)),
            "{k}: {p}"
        );
    }
}

#[test]
fn the_adding_a_model_examples_load_and_every_field_is_explained() {
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("docs/adding-a-model.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut fields = Vec::new();
    // (marker, total parameters in billions by hand, KV bytes per token by hand).
    // GQA: embedding and head 2 x 128,256 x 4096 = 1.051B; per layer q and o 2 x 4096^2,
    // K/V 4096 x 2048, FFN 3 x 4096 x 14,336: 218.1M x 32 = 6.979B; 8.030B in all.
    // MLA: 671.0B (DeepSeek-V3's count, README of deepseek-ai/DeepSeek-V3).
    // Hybrid: embedding and head 2 x 100,000 x 2048 = 409.6M; the full-attention
    // layer's q and its gate 2 x 2048 x 16 x 256, K/V 2048 x 1024, o 16 x 256 x 2048:
    // 27.26M; each DeltaNet layer 2048 x (4096 + 2 x 4096 + 64) + 4096 x 2048 + 8192 x
    // 4 = 33.72M, x 3; 4 MoE layers of 257 experts x 3 x 2048 x 512 and a 2048 x 256
    // router: 3,233.8M; 3.774B in all. KV: the one full-attention layer's 2048 B.
    for (marker, total_b, kv) in [
        ("<!-- example GQA model file -->", 8.030, 131_072.0),
        ("<!-- example MLA model file -->", 671.0, 35_136.0),
        ("<!-- example hybrid model file -->", 3.774, 2048.0),
    ] {
        let example = block_after(&doc, marker);
        let path = dir.path().join("model.toml");
        std::fs::write(&path, &example).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_twin"))
            .args(["model", "show", "--json"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{marker}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let total = v["total_params"].as_f64().unwrap() / 1e9;
        assert!(
            (total - total_b).abs() < 0.005 * total_b,
            "{marker}: {total}B"
        );
        assert_eq!(v["kv_bytes_per_token"].as_f64().unwrap(), kv, "{marker}");
        if marker.contains("hybrid") {
            // 3 DeltaNet layers x (32 x 128 x 128 x 4 B + (4096 + 4096) x 3 x 2 B).
            let state = v["state_bytes_per_request"].as_f64().unwrap();
            assert_eq!(state, 3.0 * (2_097_152.0 + 49_152.0), "{marker}");
        }
        let out = Command::new(env!("CARGO_BIN_EXE_twin"))
            .args(["forward", "--hardware", "h200", "--tp", "8", "--model"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{marker}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        field_paths("", &toml::from_str(&example).unwrap(), &mut fields);
    }
    // And every field any shipped model uses, and those left out at their defaults.
    for entry in std::fs::read_dir(root.join("scenarios/models"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        field_paths("", &toml::from_str(&text).unwrap(), &mut fields);
    }
    fields.extend([
        "tied_embeddings".to_string(),
        "moe.balanced".into(),
        "provenance".into(),
    ]);
    assert_every_field_has_a_row(&doc, "docs/adding-a-model.md", &fields);
}

/// The README stays a page a newcomer reads in five minutes (issue 18); the manual lives
/// in docs/.
const README_MAX_LINES: usize = 250;

#[test]
fn the_readme_is_short() {
    let text = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let n = text.lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines, at most {README_MAX_LINES}: move the detail to a guide in docs/"
    );
}

/// GitHub's anchor of a heading: lower case, spaces to hyphens, other punctuation
/// dropped (letters, digits, `-` and `_` kept).
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            out.push(heading_anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of a line's inline links `[text](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].to_string());
        rest = &after[end..];
    }
    out
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let root = repo_root();
    let mut broken = Vec::new();
    for path in markdown_files(&root) {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut in_code = false;
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
            }
            if in_code {
                continue;
            }
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
                let dest = if file.is_empty() {
                    path.clone()
                } else {
                    path.parent().unwrap().join(file)
                };
                let at = format!("{}:{}: {target}", path.display(), n + 1);
                if !dest.exists() {
                    broken.push(format!("{at} (no such file)"));
                } else if !anchor.is_empty() && dest.extension().is_some_and(|e| e == "md") {
                    let dest_text = std::fs::read_to_string(&dest).unwrap();
                    if !anchors(&dest_text).iter().any(|a| a == anchor) {
                        broken.push(format!("{at} (no such heading)"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn heading_anchors_follow_github() {
    assert_eq!(
        heading_anchor(" A real run: Llama-3.1-70B on 8 x H100"),
        "a-real-run-llama-31-70b-on-8-x-h100"
    );
    assert_eq!(
        heading_anchor(" `twin validate bench FILE.json[.gz] --scenario SCENARIO`"),
        "twin-validate-bench-filejsongz---scenario-scenario"
    );
    assert_eq!(link_targets("see [a](b.md#c) and [d](e)"), ["b.md#c", "e"]);
}
