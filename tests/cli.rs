//! The `twin` binary end to end: `forward`'s contract, errors on bad scenario files and
//! impossible configurations, the published figures, provenance and the crate rules.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn twin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_twin"))
        .args(args)
        .output()
        .expect("run twin")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> Value {
    assert!(o.status.success(), "twin failed:\n{}", stderr(o));
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", stdout(o)))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fails_with(args: &[&str], needles: &[&str]) -> String {
    let o = twin(args);
    assert!(
        !o.status.success(),
        "expected failure for {args:?}, got:\n{}",
        stdout(&o)
    );
    let err = stderr(&o);
    for n in needles {
        assert!(err.contains(n), "stderr of {args:?} lacks `{n}`:\n{err}");
    }
    err
}

#[test]
fn forward_json_has_the_contract_fields() {
    let v = json(&twin(&[
        "forward",
        "--dep",
        "32",
        "--batch-per-rank",
        "64",
        "--context",
        "131072",
        "--json",
    ]));
    let step = v["step_ms"].as_f64().unwrap();
    assert!(step > 0.0);
    for key in ["moe", "attention", "indexer"] {
        assert!(
            v["breakdown_ms"][key].as_f64().unwrap() > 0.0,
            "breakdown_ms.{key}"
        );
    }
    let sum: f64 = v["breakdown_ms"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_f64().unwrap())
        .sum();
    assert!(
        (sum - step).abs() < 1e-9 * step.max(1.0),
        "breakdown {sum} != step {step}"
    );
    assert!(v["tokens_per_s_per_gpu"].as_f64().unwrap() > 0.0);
    assert_eq!(
        v["bound"]["moe"], "memory",
        "decode MoE at 64 per rank reads weights"
    );
}

#[test]
fn forward_is_deterministic_and_set_overrides_any_field() {
    let args = [
        "forward",
        "--phase",
        "prefill",
        "--dep",
        "2",
        "--requests",
        "1",
        "--new-tokens",
        "32768",
        "--chunk",
        "4096",
        "--json",
    ];
    let a = stdout(&twin(&args));
    assert_eq!(a, stdout(&twin(&args)), "same input, same bytes");
    let small = json(&twin(&args));
    let mut big_args = args.to_vec();
    big_args.extend(["--set", "model.engram.page_size=2MiB"]);
    let big = json(&twin(&big_args));
    assert!(
        big["breakdown_ms"]["engram"].as_f64().unwrap()
            < small["breakdown_ms"]["engram"].as_f64().unwrap()
    );
    let mut hw_args = args.to_vec();
    hw_args.extend(["--set", "hardware.hbm.bytes_per_s=4e12"]);
    assert!(
        json(&twin(&hw_args))["step_ms"].as_f64().unwrap() > small["step_ms"].as_f64().unwrap()
    );
}

fn write_model(dir: &Path, edit: impl Fn(String) -> String) -> String {
    let text =
        std::fs::read_to_string(repo().join("scenarios/models/deepseek-v4.1-flash.toml")).unwrap();
    let path = dir.join("bad-model.toml");
    std::fs::write(&path, edit(text)).unwrap();
    path.to_string_lossy().into_owned()
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle in file")
        + 1
}

#[test]
fn unknown_fields_are_all_reported_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let edited = |t: String| {
        t.replacen("top_k = 6\n", "top_k = 6\ntop_kk = 7\n", 1)
            .replacen(
                "[mhc]\nstreams = 4\n",
                "[mhc]\nstreams = 4\nstream_width = 2\n",
                1,
            )
    };
    let path = write_model(dir.path(), edited);
    let text = std::fs::read_to_string(&path).unwrap();
    let err = fails_with(
        &["forward", "--model", &path],
        &[
            &path,
            "2 problems",
            "moe.top_kk",
            "mhc.stream_width",
            "unknown field",
        ],
    );
    assert!(
        err.contains(&format!("line {}", line_of(&text, "top_kk"))),
        "{err}"
    );
    assert!(
        err.contains(&format!("line {}", line_of(&text, "stream_width"))),
        "{err}"
    );
}

#[test]
fn bad_values_and_bad_toml_say_where() {
    let dir = tempfile::tempdir().unwrap();
    // A semantic problem and a type problem in one file: both named, with lines.
    let path = write_model(dir.path(), |t| {
        t.replacen("routed_experts = 384", "routed_experts = 4", 1)
    });
    let text = std::fs::read_to_string(&path).unwrap();
    let err = fails_with(
        &["forward", "--model", &path],
        &["moe.top_k", "must lie in 1..=4"],
    );
    assert!(
        err.contains(&format!("line {}", line_of(&text, "top_k = 6"))),
        "{err}"
    );
    let path = write_model(dir.path(), |t| {
        t.replacen("hidden = 4096", "hidden = \"wide\"", 1)
    });
    fails_with(&["forward", "--model", &path], &["hidden", "line 5"]);
    let path = write_model(dir.path(), |t| t.replacen("[mhc]", "[mhc", 1));
    fails_with(&["forward", "--model", &path], &["not valid TOML", "line"]);
    fails_with(
        &["forward", "--model", "no-such-model"],
        &["unknown model `no-such-model`", "deepseek-v4.1-flash"],
    );
    fails_with(
        &["forward", "--set", "model.moe.top_kk=3"],
        &["moe.top_kk", "--set model.moe.top_kk=3", "unknown field"],
    );
    fails_with(
        &["forward", "--set", "model.engram.page_size=3 parsecs"],
        &["engram.page_size", "byte unit"],
    );
    fails_with(&["forward", "--set", "nonsense"], &["PATH=VALUE"]);
    // An override that creates an unknown table is blamed on the override, not a line.
    fails_with(
        &["forward", "--set", "model.mtpp.draft_tokens=2"],
        &["--set model.mtpp.draft_tokens=2: mtpp: unknown field"],
    );
}

#[test]
fn impossible_configurations_say_what_to_change() {
    fails_with(
        &["forward", "--dep", "36"],
        &[
            "384 routed + 0 redundant experts do not divide over 36 ranks",
            "--dep 32",
            "add 12 more redundant experts",
        ],
    );
    assert!(
        twin(&["forward", "--dep", "36", "--redundant-experts", "12"])
            .status
            .success()
    );
    fails_with(
        &["forward", "--dep", "96"],
        &["larger than the 72-GPU gb300 rack", "--dep 72 or less"],
    );
    fails_with(
        &[
            "forward",
            "--dep",
            "8",
            "--batch-per-rank",
            "4096",
            "--context",
            "1000000",
        ],
        &["GB of KV per rank", "--batch-per-rank", "or less"],
    );
    fails_with(
        &[
            "forward",
            "--hardware",
            "h100",
            "--model",
            "deepseek-v3",
            "--dep",
            "1",
        ],
        &["weights need", "use a larger DEP"],
    );
    fails_with(
        &["forward", "--mtp", "5"],
        &["acceptance rates for 3 draft tokens", "--mtp 3 or less"],
    );
}

fn published() -> Vec<Value> {
    json(&twin(&["validate", "published", "--json"]))
        .as_array()
        .unwrap()
        .clone()
}

/// Check rows the model does not yet reproduce within 10%, each with the bound it must
/// stay inside (so it cannot silently get worse) and why. See the issue notes.
const KNOWN_GAPS: [(&str, f64, &str); 6] = [
    (
        "swa-replay-64k",
        0.20,
        "the receptive-field replay model saturates by ~5K tokens of context; the report's gain keeps growing to 64K",
    ),
    (
        "single-user",
        0.15,
        "the report's specialised low-latency decode path is not modelled; the closest layout (DEP4, 8K context) runs the ordinary kernels",
    ),
    (
        "prefill-only-dep2",
        0.45,
        "prefill of long cached contexts (replay, attention) prices ~1.7x the report's throughput; prompts and GPU count of the run are unpublished",
    ),
    (
        "prefill-only-dep4",
        0.35,
        "as prefill-only-dep2; the model's DEP4 loses only its extra DP imbalance, the report's also ~9% more",
    ),
    (
        "prefill-only-dep2-imbalance",
        0.30,
        "DP imbalance from per-request context spread only; scheduler effects (chunk packing, arrival bursts) are not modelled",
    ),
    (
        "prefill-only-dep4-imbalance",
        0.50,
        "as prefill-only-dep2-imbalance; the direction (DEP4 loses more) is reproduced, the size is half",
    ),
];

/// Asserts every check row of a `validate published --json` answer is within 10% or
/// its known-gap bound; returns how many were checked.
fn assert_check_rows(rows: &[Value], simulation: bool) -> usize {
    let mut checked = 0;
    for r in rows {
        let id = r["id"].as_str().unwrap();
        let is_sim = r["command"].as_str().unwrap().starts_with("twin simulate");
        if r["role"] != "check" || is_sim != simulation {
            continue;
        }
        let err = r["error"]
            .as_f64()
            .unwrap_or_else(|| panic!("check row {id} has no prediction"));
        checked += 1;
        let bound = KNOWN_GAPS
            .iter()
            .find(|g| g.0 == id)
            .map(|g| g.1)
            .unwrap_or(0.10);
        assert!(
            err.abs() <= bound,
            "check row {id}: predicted {} vs published {} ({:+.1}%, bound {:.0}%)",
            r["predicted"],
            r["published"],
            err * 100.0,
            bound * 100.0
        );
    }
    checked
}

#[test]
fn published_check_rows_are_within_10_percent() {
    let rows = published();
    assert!(rows.len() >= 10);
    for r in &rows {
        if r["command"].as_str().unwrap().starts_with("twin simulate") {
            // Simulation rows run only with --simulate (see the test below).
            assert!(
                r["predicted"].is_null(),
                "simulation row {} ran without --simulate",
                r["id"]
            );
        }
    }
    let checked = assert_check_rows(&rows, false);
    assert!(checked >= 5, "only {checked} check rows");
    for (id, _, why) in KNOWN_GAPS {
        assert!(!why.is_empty());
        assert!(
            rows.iter().any(|r| r["id"] == id && r["role"] == "check"),
            "known gap {id} is not a check row"
        );
    }
}

/// The whole-rack and prefill-only simulations against the report (about a minute
/// of optimised simulation). The rack's fit rows must also be met by the stored fit
/// (the fit itself, `validate published --fit --simulate`, takes too long for a test):
/// within 1%, the bisection's tolerance.
#[test]
fn published_simulation_rows_are_within_bounds() {
    let rows = json(&twin(&["validate", "published", "--simulate", "--json"]));
    let rows = rows.as_array().unwrap();
    let checked = assert_check_rows(rows, true);
    assert!(checked >= 5, "only {checked} simulation check rows");
    for r in rows {
        let sim = r["command"].as_str().unwrap().starts_with("twin simulate");
        if sim && r["role"] == "fit" {
            let err = r["error"].as_f64().unwrap();
            assert!(
                err.abs() <= 0.01,
                "fit row {} is {:+.2}% off: re-run `twin validate published --fit --simulate --write scenarios`",
                r["id"],
                err * 100.0
            );
        }
    }
}

#[test]
fn fitted_values_are_what_the_fit_computes() {
    let v = json(&twin(&["validate", "published", "--fit", "--json"]));
    let mut fitted_n = 0;
    for p in v.as_array().unwrap() {
        let stored = p["stored"].as_f64().expect("a stored value");
        // Parameters of simulation rows are fitted only with --simulate (see
        // published_simulation_rows_are_within_bounds).
        let Some(fitted) = p["fitted"].as_f64() else {
            continue;
        };
        fitted_n += 1;
        let tol = 1e-3 * fitted.abs().max(1e-12);
        assert!((fitted - stored).abs() <= tol, "{}: stored {stored} but the fit gives {fitted}; run `twin validate published --fit --write scenarios`", p["name"]);
    }
    assert!(fitted_n >= 6, "only {fitted_n} parameters fitted");
    // The fitted rows are matched closely (integer parameters within their step).
    for r in published()
        .iter()
        .filter(|r| r["role"] == "fit" && !r["predicted"].is_null())
    {
        assert!(
            r["error"].as_f64().unwrap().abs() < 0.06,
            "fit row {} off by {}",
            r["id"],
            r["error"]
        );
    }
}

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
    for dir in ["scenarios/hardware", "scenarios/models"] {
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
    // sim does no file IO.
    for e in walk(&repo().join("sim/src")) {
        let text = std::fs::read_to_string(&e).unwrap();
        for banned in ["std::fs", "File::open", "read_to_string("] {
            assert!(
                !text.contains(banned),
                "{} uses {banned}: sim does no file IO",
                e.display()
            );
        }
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

#[test]
fn sweep_marks_the_frontier_and_lists_what_it_skipped() {
    let v = json(&twin(&[
        "sweep",
        "--deps",
        "8,32,36",
        "--batches",
        "16,128",
        "--context",
        "131072",
        "--json",
    ]));
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 4, "DEP36 cannot hold 384 experts: {v}");
    assert!(points.iter().any(|p| p["pareto"] == true));
    // Within a DEP size, a bigger batch buys throughput per GPU with speed per user.
    for dep in [8, 32] {
        let at = |b: u64| {
            points
                .iter()
                .find(|p| p["dep"] == dep && p["batch_per_rank"] == b)
                .unwrap()
                .clone()
        };
        let (small, big) = (at(16), at(128));
        assert!(big["tokens_per_s_per_gpu"].as_f64() > small["tokens_per_s_per_gpu"].as_f64());
        assert!(big["tokens_per_s_per_user"].as_f64() < small["tokens_per_s_per_user"].as_f64());
    }
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2);
    assert!(skipped[0]["why"]
        .as_str()
        .unwrap()
        .contains("do not divide over 36 ranks"));
}

#[test]
fn simulate_json_is_deterministic_and_has_the_contract_fields() {
    let args = [
        "simulate",
        "--duration",
        "8",
        "--set",
        "warmup_s=2",
        "--json",
    ];
    let a = twin(&args);
    assert_eq!(stdout(&a), stdout(&twin(&args)), "same seed, same bytes");
    let v = json(&a);
    assert_eq!(v["gpus"], 72);
    assert!(v["requests_completed"].as_u64().unwrap() > 0);
    for k in ["total", "cached_input", "uncached_input", "output"] {
        assert!(
            v["throughput_tok_s_per_gpu"][k].as_f64().unwrap() > 0.0,
            "throughput_tok_s_per_gpu.{k}"
        );
    }
    for k in ["p50", "p90"] {
        assert!(v["per_user_tok_s"][k].as_f64().unwrap() > 0.0);
    }
    for m in ["ttft_ms", "tpot_ms"] {
        for k in ["p50", "p90", "p99"] {
            assert!(v[m][k].as_f64().unwrap() > 0.0, "{m}.{k}");
        }
    }
    assert!(v["revenue_usd_per_gpu_hour"].as_f64().unwrap() > 0.0);
    assert!(v["cost_usd_per_gpu_hour"].as_f64().unwrap() > 0.0);
    assert!(
        v["version"].is_string() && v["seed"].is_u64() && v["resolved"]["scenario"].is_object()
    );
    let seeded = [&args[..], &["--seed", "7"]].concat();
    let other = stdout(&twin(&seeded));
    assert_ne!(stdout(&a), other, "another seed, another run");
}

/// `--decode-deps` runs one simulation per P/D split, in the order given; a split that
/// cannot run says why and does not stop the others; the prefill pool fills the rest.
#[test]
fn simulate_compares_pd_splits() {
    let v = json(&twin(&[
        "simulate",
        "--duration",
        "20",
        "--set",
        "warmup_s=5",
        "--decode-deps",
        "24,40,48",
        "--json",
    ]));
    let runs = v.as_array().unwrap();
    let deps: Vec<u64> = runs
        .iter()
        .map(|r| r["decode_dep"].as_u64().unwrap())
        .collect();
    assert_eq!(deps, [24, 40, 48]);
    assert!(runs[1]["error"]
        .as_str()
        .unwrap()
        .contains("do not divide over 40"));
    for (r, prefill) in [(&runs[0], 24), (&runs[2], 12)] {
        assert_eq!(r["prefill_instances"], prefill);
        let rep = &r["report"];
        assert_eq!(rep["gpus"], 72);
        assert_eq!(rep["pools"][0]["instances"], prefill);
        assert_eq!(rep["pools"][1]["dep"], r["decode_dep"]);
        assert!(rep["throughput_tok_s_per_gpu"]["total"].as_f64().unwrap() > 0.0);
        assert!(r["pareto"].is_boolean());
    }
    let aggregated = twin(&[
        "simulate",
        "gb300-nvl72-v4.1-flash-agentx-aggregated",
        "--decode-deps",
        "8",
    ]);
    assert!(!aggregated.status.success());
    assert!(stderr(&aggregated).contains("needs mode = \"disaggregated\""));
}
