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
        "--set",
        "model.moe.fused=false",
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
        &["GB of KV per GPU", "--batch-per-rank", "or less"],
    );
    // Tensor parallelism: heads must divide, one replica per instance, no EPLB.
    fails_with(
        &["forward", "--tp", "3"],
        &["64 attention heads do not divide over 3 GPUs", "2, 4, 8"],
    );
    fails_with(
        &["forward", "--tp", "4", "--dep", "2"],
        &[
            "TP4 with 2 data-parallel replicas is not modelled",
            "--dep 1",
        ],
    );
    fails_with(
        &["forward", "--tp", "4", "--redundant-experts", "8"],
        &["--redundant-experts 0"],
    );
    fails_with(
        &["forward", "--expert-parallel"],
        &["--expert-parallel applies to a TP replica"],
    );
    fails_with(
        &[
            "forward",
            "--hardware",
            "h100",
            "--model",
            "deepseek-v3",
            "--tp",
            "2",
        ],
        &["weights need", "use a larger TP"],
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
    json(&twin(&["validate", "published", "--no-loo", "--json"]))
        .as_array()
        .unwrap()
        .clone()
}

/// Check rows the model does not yet reproduce within their table's bound, each with
/// the bound it must stay inside (so it cannot silently get worse) and why.
const KNOWN_GAPS: [(&str, f64, &str); 21] = [
    (
        "trtllm-onesided-ep64-b1-combine",
        0.25,
        "EP64 combine latency barely grows with the group (31 to 33 us from EP8); the per-peer latency fitted across all rows (0.14 us, driven by EP64's large-batch slowdown) overstates it",
    ),
    (
        "trtllm-onesided-ep64-b2-combine",
        0.25,
        "EP64 combine latency barely grows with the group (31 to 33 us from EP8); the per-peer latency fitted across all rows (0.14 us, driven by EP64's large-batch slowdown) overstates it",
    ),
    (
        "trtllm-onesided-ep64-b4-combine",
        0.25,
        "EP64 combine latency barely grows with the group (31 to 33 us from EP8); the per-peer latency fitted across all rows (0.14 us, driven by EP64's large-batch slowdown) overstates it",
    ),
    (
        "trtllm-onesided-ep64-b8-combine",
        0.25,
        "EP64 combine latency barely grows with the group (31 to 33 us from EP8); the per-peer latency fitted across all rows (0.14 us, driven by EP64's large-batch slowdown) overstates it",
    ),
    (
        "trtllm-onesided-ep32-b16-dispatch",
        0.25,
        "the published EP32 dispatch latency stays flat (18.9-19.8 us) up to 16 tokens; the model's soft maximum of latency and transfer adds the transfer earlier",
    ),
    (
        "megamoe-v4pro-t1",
        0.55,
        "one token per rank: the fused kernel's published latency (108 us) doubles from V4-Flash's shapes to V4-Pro's; the model's latency is the all-to-all's, the same for both",
    ),
    (
        "megamoe-v4pro-t512",
        0.30,
        "64 tokens per expert run as 64-row tiles at the small-tile efficiency fitted on H800; the fused SM100 kernel handles them better",
    ),
    (
        "swa-replay-64k",
        0.20,
        "the receptive-field replay model saturates by ~5K tokens of context; the report's gain keeps growing to 64K",
    ),
    (
        "decode-dep32-855k",
        0.35,
        "with the sweep's batch fitted (60 per rank), the assumed V4.1 indexer (ratio-4 keys of 68 B in 10 layers) makes 855K cost 3.3 ms more than 128K; the report says 0.6 ms",
    ),
    (
        "prefill-8k-512k",
        0.15,
        "long cached prefill prices 11% faster: the indexer top-k fitted to the decode attention share (512) shrinks the sparse layers' prefill work",
    ),
    (
        "prefill-only-dep2",
        0.35,
        "prefill of long cached contexts (replay, attention, indexer) prices below the report's throughput; prompts and GPU count of the run are unpublished",
    ),
    (
        "prefill-only-dep4",
        0.25,
        "as prefill-only-dep2; the model's DEP4 loses only its extra DP imbalance (and the report's DEP4 17% more)",
    ),
    (
        "prefill-only-dep2-imbalance",
        0.20,
        "DP imbalance from per-request context spread only; scheduler effects (chunk packing, arrival bursts) are not modelled",
    ),
    (
        "prefill-only-dep4-imbalance",
        0.40,
        "as prefill-only-dep2-imbalance; the direction (DEP4 loses more) is reproduced, the size is two thirds",
    ),
    (
        "deepgemm-dense-m4096-n2112-k7168",
        0.25,
        "N = 2112 is 16.5 tiles of 128: DeepGEMM's tile choice for it runs slower than the tile model's best tiling",
    ),
    (
        "deepgemm-dense-m128-n4096-k7168",
        0.20,
        "compute and memory are nearly equal; DeepGEMM overlaps them better than the fitted soft roofline there",
    ),
    (
        "deepgemm-dense-m128-n2112-k7168",
        0.20,
        "as deepgemm-dense-m128-n4096-k7168",
    ),
    (
        "deepgemm-masked-g1-m1024-n7168-k2048",
        0.20,
        "the masked kernel's published tables predate its later tile options; one group of 1024 rows runs slower than the model's tiling",
    ),
    (
        "trtllm-onesided-ep64-b8-dispatch",
        0.35,
        "EP64 small-batch latencies are not monotone in the batch (27.8, 24.8, 29.1, then 20.4 us at 8 tokens): run-to-run noise above the model's resolution",
    ),
    (
        "trtllm-onesided-ep64-b16-dispatch",
        0.35,
        "as trtllm-onesided-ep64-b8-dispatch",
    ),
    (
        "trtllm-onesided-ep64-b32-dispatch",
        0.25,
        "as trtllm-onesided-ep64-b8-dispatch",
    ),
];

/// The bound of a check row: its known gap, else 10% for the report's table and 15%
/// for the kernel table (whose goal is 10%; see the issue).
fn bound(id: &str, table: &str) -> f64 {
    KNOWN_GAPS
        .iter()
        .find(|g| g.0 == id)
        .map(|g| g.1)
        .unwrap_or(if table == "kernels-public" {
            0.15
        } else {
            0.10
        })
}

/// Asserts every check row of a `validate published --json` answer is within its
/// bound; returns how many were checked.
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
        let b = bound(id, r["table"].as_str().unwrap());
        assert!(
            err.abs() <= b,
            "check row {id}: predicted {} vs published {} ({:+.1}%, bound {:.0}%)",
            r["predicted"],
            r["published"],
            err * 100.0,
            b * 100.0
        );
    }
    checked
}

#[test]
fn published_check_rows_are_within_their_bounds() {
    let rows = published();
    assert!(rows.len() >= 150);
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
    assert!(checked >= 120, "only {checked} check rows");
    // The kernel table's goal: most check rows within 10%.
    let kernel: Vec<f64> = rows
        .iter()
        .filter(|r| r["table"] == "kernels-public" && r["role"] == "check")
        .map(|r| r["error"].as_f64().unwrap().abs())
        .collect();
    let within = kernel.iter().filter(|e| **e <= 0.10).count();
    assert!(
        within * 4 >= kernel.len() * 3,
        "only {within} of {} kernel checks within 10%",
        kernel.len()
    );
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
/// within 5%, as every fit row (the session count bisects to 16 sessions, the P/D
/// split is a grid of DEPs in steps of 8).
#[test]
fn published_simulation_rows_are_within_bounds() {
    let rows = json(&twin(&[
        "validate",
        "published",
        "vllm-gb300-deepseek-v4.1-flash",
        "--simulate",
        "--json",
    ]));
    let rows = rows.as_array().unwrap();
    let checked = assert_check_rows(rows, true);
    assert!(checked >= 5, "only {checked} simulation check rows");
    for r in rows {
        let sim = r["command"].as_str().unwrap().starts_with("twin simulate");
        if sim && r["role"] == "fit" {
            let err = r["error"].as_f64().unwrap();
            assert!(
                err.abs() <= 0.05,
                "fit row {} is {:+.2}% off: re-run `twin validate published --fit --simulate --write scenarios`",
                r["id"],
                err * 100.0
            );
        }
    }
}

#[test]
fn fitted_values_are_what_the_fit_computes() {
    let v = json(&twin(&[
        "validate",
        "published",
        "--fit",
        "--no-loo",
        "--json",
    ]));
    let mut fitted_n = 0;
    for p in v.as_array().unwrap() {
        if p["table"] == "kernels-public" {
            // Least squares: the stored values are an optimum if refitting from them
            // lowers the sum of squared log errors by no more than rounding does.
            let (fitted, stored) = (
                p["cost_fitted"].as_f64().unwrap(),
                p["cost_stored"].as_f64().unwrap(),
            );
            assert!(
                stored <= fitted + 1e-6 + 1e-3 * fitted,
                "{} ({}): stored values give {stored:e}, the fit {fitted:e}; run `twin validate published kernels-public --fit --write scenarios`",
                p["name"],
                p["group"]
            );
            fitted_n += 1;
            continue;
        }
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
    assert!(fitted_n >= 30, "only {fitted_n} parameters fitted");
    // The fitted rows of the report's table are matched closely (integer parameters
    // within their step).
    for r in published().iter().filter(|r| {
        r["table"] != "kernels-public" && r["role"] == "fit" && !r["predicted"].is_null()
    }) {
        assert!(
            r["error"].as_f64().unwrap().abs() < 0.16,
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
    // sim and fitting do no file IO.
    for dir in ["sim/src", "fitting/src"] {
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

/// Tensor-parallel layouts: `forward --tp` names the layout and its all-reduces, and
/// `sweep --tps` puts TP replicas beside DEP groups; for one user a TP replica is
/// faster than a DEP group of as many GPUs (no all-to-all latency per layer), and for
/// a large batch the DEP group gives more tokens per GPU.
#[test]
fn tensor_parallel_layouts_price_and_sweep() {
    let o = twin(&[
        "forward",
        "--tp",
        "8",
        "--requests",
        "1",
        "--context",
        "8192",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains(", TP8, 1 request over the group"), "{text}");
    assert!(
        text.contains("communication (all-reduce kernels, serial)"),
        "{text}"
    );
    let j = json(&twin(&[
        "sweep",
        "--deps",
        "8",
        "--tps",
        "8",
        "--batches",
        "1,128",
        "--json",
    ]));
    let point = |tp: u64, batch: u64| {
        j["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["tp"] == tp && p["batch_per_rank"] == batch)
            .unwrap_or_else(|| panic!("no point tp {tp} batch {batch}: {j}"))
            .clone()
    };
    let user = |p: &Value| p["tokens_per_s_per_user"].as_f64().unwrap();
    let gpu = |p: &Value| p["tokens_per_s_per_gpu"].as_f64().unwrap();
    assert!(user(&point(8, 1)) > user(&point(1, 1)));
    assert!(gpu(&point(1, 128)) > gpu(&point(8, 128)));
}
