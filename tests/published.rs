//! The published tables: every check row within its bound, and the fitted values what
//! the fit computes.

mod common;

use common::*;
use serde_json::Value;

fn published() -> Vec<Value> {
    json(&twin(&["validate", "published", "--no-loo", "--json"]))
        .as_array()
        .unwrap()
        .clone()
}

/// Check rows the model does not yet reproduce within their table's bound, each with
/// the bound it must stay inside (so it cannot silently get worse) and why.
const KNOWN_GAPS: [(&str, f64, &str); 27] = [
    (
        "deepep-initial-ep64-dispatch",
        0.22,
        "DeepEP's initial release ran EP64 as fast as EP32 (46 against 44 GB/s); the RDMA fanout model, with the one efficiency fitted to EP32, slows EP64 by its larger node fanout as it does for the update (51 against 58 GB/s, within 3%)",
    ),
    (
        "deepep-initial-ep64-combine",
        0.20,
        "as deepep-initial-ep64-dispatch (45 against 47 GB/s at EP32)",
    ),
    (
        "prefill-compute-bubble",
        0.50,
        "the two-stage schedule (four stages per micro-batch) idles the compute stream in longer, fewer waits than the real, finer interleaving; a small difference of two large stream totals, which are within 3.1%",
    ),
    (
        "prefill-comm-bubble",
        0.25,
        "as prefill-compute-bubble, on the communication stream",
    ),
    (
        "decode-launch",
        0.40,
        "the gap per graph node (0.58 us) is a consumer-GPU probe's (kernel-benchmarks-public.md 6.1); in the deployment the gaps are about 1.6 times that; no H800 figure is published",
    ),
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
        "single-user",
        0.20,
        "one request, 4 tokens a step (MTP 3): its GEMMs stream their weights on small-M kernels (swap-AB, split-K: issue 38, item 6.1) instead of padded 64-row tiles, 7% faster than before (+9% to +17%); the rest of its step (launches, host, all-reduces at one token) is assumed, and the report names neither the GPU count nor the layout of its specialised path",
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

/// The bound of a check row: its known gap, else 10% for the report's table, 15% for
/// the kernel table (whose goal is 10%; see the issue), and 60% for a measured
/// kernel-table row (no gross error; their targets are by family, in the test below).
fn bound(id: &str, table: &str) -> f64 {
    KNOWN_GAPS
        .iter()
        .find(|g| g.0 == id)
        .map(|g| g.1)
        .unwrap_or(match table {
            "kernels-public" => 0.15,
            MEASURED => 0.60,
            _ => 0.10,
        })
}

const MEASURED: &str = "kernel-tables-measured";

#[test]
fn measured_kernel_table_rows_meet_their_targets_per_gpu_engine_and_family() {
    // Held-out rows of every shipped profile, priced through `twin kernel --engine`:
    // per GPU x engine and op family, the median error at most 10% and at least 80% of
    // rows within 20%.
    let o = twin(&["validate", "published", MEASURED, "--no-loo", "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    let rows = json(&o).as_array().unwrap().clone();
    let mut by: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for r in &rows {
        // ids: tables-<hardware>-<engine>-<family>-...
        let id = r["id"].as_str().unwrap();
        // TensorRT-LLM's NVFP4 GEMM rows time the collector's untuned default tactic;
        // twin prices TensorRT-LLM's NVFP4 GEMMs by the same GPU's vLLM fit instead
        // (`KernelTables::nvfp4_rows_untuned`), so they are not its target here (their
        // own bound, in `published_check_rows_are_within_their_bounds`, still holds).
        if id.contains("-trtllm-gemm-fp4-") {
            continue;
        }
        let parts: Vec<&str> = id.splitn(5, '-').collect();
        let key = format!("{} {} {}", parts[1], parts[2], parts[3]);
        by.entry(key)
            .or_default()
            .push(r["error"].as_f64().unwrap().abs());
    }
    assert!(by.len() >= 20, "{:?}", by.keys());
    for (key, mut e) in by {
        e.sort_by(f64::total_cmp);
        let median = e[e.len() / 2];
        let within = e.iter().filter(|x| **x <= 0.2).count() as f64 / e.len() as f64;
        assert!(
            median <= 0.10 && within >= 0.8,
            "{key}: median {median}, within 20% {within}, {} rows",
            e.len()
        );
    }
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
