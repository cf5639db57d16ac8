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
