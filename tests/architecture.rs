//! Provenance of every parameter, and the crate graph's rules.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn leaves(prefix: &str, v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, x) in t {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if p == "provenance" || p == "name" || p == "description" {
                    continue;
                }
                leaves(&p, x, out);
            }
        }
        // A list (layer schedule, acceptance curve) carries one provenance entry.
        _ => out.push(prefix.to_string()),
    }
}

#[test]
fn every_parameter_says_where_it_comes_from() {
    let kinds = [
        "published",
        "secondary",
        "unconfirmed",
        "derived",
        "fitted",
        "assumed",
    ];
    for dir in ["scenarios/hardware", "scenarios/models", "scenarios/tco"] {
        for e in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = e.unwrap().path();
            let doc: toml::Value =
                toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let prov = doc
                .get("provenance")
                .and_then(|p| p.as_table())
                .unwrap_or_else(|| panic!("{} has no [provenance]", path.display()));
            let mut fields = Vec::new();
            leaves("", &doc, &mut fields);
            for f in &fields {
                let entry = prov
                    .get(f)
                    .and_then(|x| x.as_str())
                    .unwrap_or_else(|| panic!("{}: `{f}` has no provenance", path.display()));
                assert!(
                    kinds.iter().any(|k| entry.starts_with(k)),
                    "{}: provenance of `{f}` must start with one of {kinds:?}: {entry}",
                    path.display()
                );
            }
            for k in prov.keys() {
                assert!(
                    fields.contains(k),
                    "{}: provenance for `{k}`, which is not a field",
                    path.display()
                );
            }
        }
    }
}

#[test]
#[allow(clippy::too_many_lines)] // a test reads as one story; tests are exempt
fn crate_dependencies_keep_the_architecture() {
    let o = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let meta: Value = serde_json::from_slice(&o.stdout).unwrap();
    let deps = |name: &str| -> Vec<String> {
        let p = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap();
        p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null())
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect()
    };
    let sim = deps("sim");
    for banned in [
        "cudarc",
        "engine",
        "kernels",
        "calibration",
        "toml",
        "csv",
        "clap",
        "rayon",
    ] {
        assert!(
            !sim.contains(&banned.to_string()),
            "sim must not depend on {banned}: {sim:?}"
        );
    }
    // spec is the shared vocabulary: nothing but serde and thiserror, and sim speaks it.
    let spec = deps("spec");
    assert!(
        spec.iter().all(|d| d == "serde" || d == "thiserror"),
        "spec depends on serde and thiserror only: {spec:?}"
    );
    assert!(
        sim.contains(&"spec".to_string()),
        "sim takes its hardware, model, dtype and problem types from spec: {sim:?}"
    );
    assert!(
        !deps("engine").contains(&"sim".to_string()),
        "engine measures; it must not know the simulator"
    );
    // engine speaks the vocabulary (spec: the live model, its op calls) and runs the
    // kernels; of the workspace's crates it depends on those two only.
    let members: Vec<String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    for d in deps("engine").iter().filter(|d| members.contains(d)) {
        assert!(
            ["spec", "kernels"].contains(&d.as_str()),
            "engine may depend on spec and kernels of the workspace, not on {d}"
        );
    }
    assert!(
        deps("engine").contains(&"spec".to_string()) && deps("sim").contains(&"spec".to_string()),
        "engine and sim share the live model and its op calls through spec"
    );
    for lib in ["sim", "engine", "kernels", "calibration"] {
        assert!(
            !deps(lib).contains(&"live".to_string()),
            "{lib} must not depend on live (live runs sit on top of the other crates)"
        );
    }
    let live = deps("live");
    for banned in ["clap", "indicatif", "anyhow", "cudarc"] {
        assert!(
            !live.contains(&banned.to_string()),
            "live is a library: no {banned} ({live:?})"
        );
    }
    assert!(
        !live.contains(&"calibration".to_string()),
        "live records runs; it takes nothing from calibration (dates come from chrono): {live:?}"
    );
    // sim, spec and fitting do no file IO.
    for dir in ["sim/src", "spec/src", "fitting/src"] {
        for e in walk(&repo().join(dir)) {
            let text = std::fs::read_to_string(&e).unwrap();
            for banned in ["std::fs", "File::open", "read_to_string("] {
                assert!(
                    !text.contains(banned),
                    "{} uses {banned}: {dir} does no file IO",
                    e.display()
                );
            }
        }
    }
    for banned in ["sim", "engine", "kernels", "calibration", "clap"] {
        assert!(
            !deps("fitting").contains(&banned.to_string()),
            "fitting solves; it must not depend on {banned}"
        );
    }
    // scenario resolves what a run asks for: it reads files and prices steps, but it
    // measures nothing and serves nothing, and it is no command line (clap only as an
    // optional feature, for the binary's flags).
    for banned in ["engine", "kernels", "live", "cudarc", "rayon", "indicatif"] {
        assert!(
            !deps("scenario").contains(&banned.to_string()),
            "scenario resolves runs; it must not depend on {banned}"
        );
    }
    // published runs the rows of the published tables as their commands would, their
    // command lines parsed by the binary's own flags (handed in): no command line of
    // its own, and nothing measured or served.
    for banned in ["clap", "engine", "kernels", "live", "cudarc", "indicatif"] {
        assert!(
            !deps("published").contains(&banned.to_string()),
            "published evaluates the tables' rows; it must not depend on {banned}"
        );
    }
    for lib in [
        "sim",
        "engine",
        "kernels",
        "calibration",
        "live",
        "corpus",
        "hf",
    ] {
        assert!(
            !deps(lib).contains(&"scenario".to_string()),
            "{lib} must not depend on scenario (the binary and its commands resolve runs)"
        );
    }
    // hf reads Hugging Face configs into spec's model: of the workspace it knows spec
    // only, and it reads no file (the binary reads them and hands it their text).
    for d in deps("hf").iter().filter(|d| members.contains(d)) {
        assert_eq!(
            d, "spec",
            "hf may depend on spec of the workspace, not on {d}"
        );
    }
    for e in walk(&repo().join("hf/src")) {
        if e.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("tests"))
        {
            continue;
        }
        let text = std::fs::read_to_string(&e).unwrap();
        for banned in ["File::open", "read_to_string(", "fs::read(", "fs::write("] {
            assert!(
                !text.contains(banned),
                "{} uses {banned}: hf reads no file",
                e.display()
            );
        }
    }
}

/// Library crates print nothing: what they must say as it happens goes through
/// `spec::note`, whose sink the binary sets (its stderr). Test code (after a file's
/// `#[cfg(test)]`) may print.
#[test]
fn library_crates_print_nothing() {
    let libs = [
        "spec",
        "sim",
        "engine",
        "kernels",
        "calibration",
        "fitting",
        "live",
        "corpus",
        "hf",
        "scenario",
        "report",
        "measured",
        "published",
    ];
    let mut found = Vec::new();
    for lib in libs {
        for file in walk(&repo().join(lib).join("src")) {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, line) in code.lines().enumerate() {
                let t = line.trim_start();
                if t.starts_with("//") {
                    continue;
                }
                for mac in ["println!(", "eprintln!(", "print!(", "eprint!(", "dbg!("] {
                    let at = t.find(mac);
                    // `eprintln!(` also contains `println!(`: a match preceded by a
                    // letter is the longer macro, counted once.
                    let own =
                        at.is_some_and(|k| k == 0 || !t.as_bytes()[k - 1].is_ascii_alphanumeric());
                    if own {
                        found.push(format!("{}:{}: {t}", file.display(), i + 1));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "library crates print nothing (say notes through spec::note):\n{}",
        found.join("\n")
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// The command a file under `src/cmd/` belongs to: `cmd/plan/exec.rs` is `plan`'s.
fn command_of(module: &[String]) -> Option<String> {
    module.get(1).cloned()
}

/// The modules a file names through `crate::` or `super::` paths, as full paths from
/// the crate root (`super` resolved against the file's own module; one level of
/// `{a, b}` groups).
fn named_modules(module: &[String], text: &str) -> Vec<Vec<String>> {
    let path_char = |c: char| c.is_alphanumeric() || "_:{}, \n".contains(c);
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find(['c', 's']).map(|i| at + i) {
        at = i + 1;
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let tail = &text[i..];
        let (mut base, mut rest) = if let Some(r) = tail.strip_prefix("crate::") {
            (Vec::new(), r)
        } else if tail.starts_with("super::") {
            (module.to_vec(), tail)
        } else {
            continue;
        };
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let end = rest.find(|c: char| !path_char(c)).unwrap_or(rest.len());
        let rest = &rest[..end];
        let (head, group) = match rest.split_once('{') {
            Some((h, g)) => (h, g.split('}').next().unwrap_or("")),
            None => (rest.split([' ', '\n', ',']).next().unwrap_or(""), ""),
        };
        let prefix: Vec<String> = head
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let members: Vec<&str> = if group.is_empty() {
            vec![""]
        } else {
            group.split(',').map(str::trim).collect()
        };
        for m in members {
            let mut path = base.clone();
            path.extend(prefix.iter().cloned());
            path.extend(m.split("::").filter(|s| !s.is_empty()).map(str::to_string));
            out.push(path);
        }
    }
    out
}

#[test]
fn no_command_imports_another() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for file in walk(&root.join("src/cmd")) {
        let rel = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let mut module: Vec<String> = rel
            .trim_start_matches("src/")
            .trim_end_matches(".rs")
            .split('/')
            .map(str::to_string)
            .collect();
        if module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        let Some(own) = command_of(&module) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for path in named_modules(&module, &text) {
            if path.first().map(String::as_str) != Some("cmd") {
                continue;
            }
            // A test module's `use super::*` names its own file.
            let Some(other) = command_of(&path).filter(|c| c != "*") else {
                continue;
            };
            if other != own {
                found.push(format!("{rel} ({own}) names cmd::{other}"));
            }
        }
    }
    found.sort();
    found.dedup();
    assert!(
        found.is_empty(),
        "a command imports another; what they share belongs outside src/cmd/:\n  {}",
        found.join("\n  ")
    );
}
