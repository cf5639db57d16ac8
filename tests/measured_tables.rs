//! Kernel tables measured through production libraries (`twin calibrate --tables-out`,
//! [`calibration::tables::measure`]): the plan is the model's dense GEMMs, the written
//! tables round-trip through the engine loader, and the committed H100 measurements
//! land near the shipped vLLM tables, alone and laid over them.

use calibration::tables::measure::{
    compare, compare_summary, gemm_plan, gemm_row, lay_over, system_of, write_and_fit, ENGINE,
};
use calibration::tables::{self, Measured, Selection};
use scenario::{cost_params, load_hardware, load_model, tables::engine_tables};
use sim::cost::tables::family::Shape;
use sim::cost::tables::format::Format;
use sim::cost::{AnalyticCostModel, CostModel, CostParams, Layout, Phase};
use sim::forward::{forward, ForwardSpec};
use spec::hardware::Hardware;
use spec::model::Model;
use std::path::Path;

/// Synthetic measurements of `model`'s GEMM plan on the H200: each priced by the
/// shipped vLLM tables' fit of its format, times `scale` (a production speed on the
/// same GPU, moved so that the fit is not the shipped one).
fn synthetic(model: &str, batches: &[usize], scale: f64) -> (Hardware, Vec<Measured>) {
    let hw = load_hardware("h200", &[]).unwrap();
    let model = load_model(model, &[]).unwrap();
    let (shipped, _) = engine_tables(&hw, "vllm@0.24.0").unwrap();
    let shipped = shipped.unwrap();
    let rows = gemm_plan(&hw, &model, batches)
        .iter()
        .map(|g| {
            let row = gemm_row(g, "synthetic", 1.0);
            let Shape::Gemm { format, .. } = row.shape else {
                unreachable!()
            };
            let s = shipped.gemm_fit(format).unwrap().price(&hw, &row.shape);
            Measured {
                seconds: scale * s,
                ..row
            }
        })
        .collect();
    (hw, rows)
}

#[test]
fn the_plan_is_the_models_dense_gemms_at_every_batch_in_both_formats() {
    // Llama-3.1-8B: hidden 4096, 32 query and 8 KV heads of 128, FFN 14336, vocab
    // 128256: q 4096x4096, k and v 1024x4096 each (fused or not, as twin prices
    // them), o 4096x4096, gate+up 2x14336 = 28672 x 4096, down 4096 x 14336, LM head
    // 128256 x 4096.
    let hw = load_hardware("h200", &[]).unwrap();
    let model = load_model("llama-3.1-8b", &[]).unwrap();
    let plan = gemm_plan(&hw, &model, &[1, 64]);
    let nk: std::collections::BTreeSet<(usize, usize)> = plan.iter().map(|g| (g.n, g.k)).collect();
    assert!(nk.contains(&(4096, 14336)), "{nk:?}");
    assert!(nk.contains(&(128256, 4096)), "{nk:?}");
    assert!(nk.iter().any(|&(n, k)| k == 4096 && n >= 28672), "{nk:?}");
    assert_eq!(plan.len(), nk.len() * 2 * 2, "{plan:?}");
    assert!(plan.iter().all(|g| g.check().is_ok()));
}

#[test]
fn measured_tables_round_trip_through_the_engine_loader() {
    // Written as tables, read back by the reader, fitted, saved as DIR's profile and
    // loaded by `--engine DIR`'s own loader: the loaded profile is the one written,
    // prices every measured GEMM bit for bit as it and within a few percent of what
    // was measured, and a whole step priced through `--engine DIR` equals one priced
    // with the written profile in memory.
    let batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096];
    let (hw, rows) = synthetic("llama-3.1-8b", &batches, 1.25);
    let dir = tempfile::tempdir().unwrap();
    let sel = Selection {
        system: system_of(&hw.name),
        engine: ENGINE.into(),
        version: "2026-12-05".into(),
    };
    let prof = write_and_fit(dir.path(), &hw, &sel, "synthetic", &rows).unwrap();
    let choice = dir.path().to_str().unwrap();
    let (loaded, note) = engine_tables(&hw, choice).unwrap();
    let loaded = loaded.unwrap();
    assert!(note.is_none());
    assert_eq!(*loaded, prof);
    assert_eq!(
        (loaded.engine.as_str(), loaded.hardware.as_str()),
        (ENGINE, "h200")
    );
    let mut rel = Vec::new();
    for m in &rows {
        let Shape::Gemm { format, .. } = m.shape else {
            unreachable!()
        };
        let a = loaded.gemm_fit(format).unwrap().price(&hw, &m.shape);
        let b = prof.gemm_fit(format).unwrap().price(&hw, &m.shape);
        assert_eq!(a.to_bits(), b.to_bits(), "{:?}", m.shape);
        rel.push((a / m.seconds - 1.0).abs());
    }
    let median = spec::stats::median(&rel);
    assert!(median < 0.05, "median |fitted / measured - 1| = {median}");

    let model = load_model("llama-3.1-8b", &[]).unwrap();
    let spec = ForwardSpec {
        phase: Phase::Decode,
        dep: 1,
        tp: 1,
        batch_per_rank: 32,
        total_requests: None,
        context_tokens: 2048,
        new_tokens: 1,
        chunk_tokens: None,
        draft_tokens: 0,
        tokens_per_step: 1.0,
    };
    let via_flag = cost_params(&hw, None, &[], Some(choice), false).unwrap();
    assert!(via_flag.source.contains("measured"), "{}", via_flag.source);
    let mut in_memory = via_flag.clone();
    in_memory.tables = Some(std::sync::Arc::new(prof));
    let step = |p: &CostParams| {
        let cm = AnalyticCostModel::new(hw.clone(), model.clone(), Layout::new(1), p.clone());
        forward(&cm as &dyn CostModel, &spec).total.step_s
    };
    let (a, b) = (step(&via_flag), step(&in_memory));
    assert_eq!(a.to_bits(), b.to_bits(), "{a} vs {b}");
    // Compared with the shipped tables they were drawn from: 1.25 by construction.
    let (shipped, _) = engine_tables(&hw, "vllm@0.24.0").unwrap();
    let c = compare(&hw, &shipped.unwrap(), &rows);
    assert_eq!(c.len(), rows.len());
    assert!(c.iter().all(|x| (x.4 / x.5 - 1.25).abs() < 1e-9), "{c:?}");
    let text = compare_summary("vllm", &c);
    assert!(text.contains("measured / shipped median 1.250"), "{text}");
    assert!(
        text.contains("median |measured / shipped - 1| 25.0%"),
        "{text}"
    );
    // And the tables price the step's GEMMs: without them the step differs.
    let mut own = via_flag.clone();
    own.tables = None;
    assert_ne!(step(&own).to_bits(), a.to_bits());
}

/// The tables measured through cuBLASLt on an H100 on 2026-12-05
/// (docs/measured/gpu-h100-2026-12-05), as committed.
fn h100_measured(model: &str) -> (Hardware, Vec<Measured>, std::path::PathBuf) {
    let hw = load_hardware("h100", &[]).unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/measured/gpu-h100-2026-12-05")
        .join(format!("tables-{model}"));
    let sel = Selection {
        system: "h100_sxm".into(),
        engine: ENGINE.into(),
        version: "2026-12-05".into(),
    };
    let read = tables::read(&dir, &sel).unwrap();
    assert!(read.skipped.is_empty(), "{:?}", read.skipped);
    (hw, read.rows, dir)
}

#[test]
fn the_h100_measurements_land_within_15_percent_of_the_shipped_vllm_gemm_tables() {
    // Issue 42's goal, reproduced from the committed measurements against the
    // shipped tables as they stand (a change to either shows here): the median over
    // shapes of |measured / shipped - 1| per format, for both models measured.
    for (model, shapes) in [("deepseek-v3", 280), ("llama-3.1-8b", 140)] {
        let (hw, rows, _) = h100_measured(model);
        assert_eq!(rows.len(), shapes, "{model}");
        let (shipped, _) = engine_tables(&hw, "vllm@0.24.0").unwrap();
        let c = compare(&hw, &shipped.unwrap(), &rows);
        for f in [Format::Bf16, Format::Fp8] {
            let dev: Vec<f64> = c
                .iter()
                .filter(|x| x.0 == f)
                .map(|x| (x.4 / x.5 - 1.0).abs())
                .collect();
            assert_eq!(dev.len(), shapes / 2, "{model} {f:?}");
            let m = spec::stats::median(&dev);
            assert!(
                m <= 0.15,
                "{model} {f:?}: median |measured / shipped - 1| {m}"
            );
        }
    }
}

#[test]
fn the_h100_measured_tables_price_llama_steps_within_10_percent_of_vllms() {
    // `forward --engine DIR` with the committed profile against `--engine vllm`
    // (scripts/gpu-check.sh's comparison): Llama-3.1-8B's decode and prefill steps.
    let (hw, _, dir) = h100_measured("llama-3.1-8b");
    let model = load_model("llama-3.1-8b", &[]).unwrap();
    // Tables against tables (`--physics-only`, as scripts/gpu-check.sh compares them).
    let step = |choice: &str, phase: Phase, batch: u32, context: u64, new: u32| {
        let p = cost_params(&hw, None, &[], Some(choice), true).unwrap();
        let spec = ForwardSpec {
            phase,
            dep: 1,
            tp: 1,
            batch_per_rank: batch,
            total_requests: None,
            context_tokens: context,
            new_tokens: new,
            chunk_tokens: None,
            draft_tokens: 0,
            tokens_per_step: 1.0,
        };
        let cm = AnalyticCostModel::new(hw.clone(), model.clone(), Layout::new(1), p);
        forward(&cm as &dyn CostModel, &spec).total.step_s
    };
    let d = dir.to_str().unwrap();
    for (phase, batch, context, new) in [(Phase::Decode, 64, 4096, 1), (Phase::Prefill, 1, 0, 4096)]
    {
        let (a, b) = (
            step(d, phase, batch, context, new),
            step("vllm", phase, batch, context, new),
        );
        assert!(
            (a / b - 1.0).abs() <= 0.10,
            "{phase:?}: {a} s measured, {b} s vllm"
        );
    }
}

#[test]
fn measured_tables_laid_over_vllms_price_the_rest_as_vllm_does() {
    // The committed H100 DeepSeek-V3 measurements, fitted and laid over the shipped
    // vLLM tables (`--base vllm`): the measured formats keep the measured fits, the
    // rest (block FP8, attention, routed experts, collectives) price exactly as
    // `--engine vllm`; a DeepSeek-V3 step then differs from vLLM's by its dense
    // GEMMs alone.
    let (hw, rows, _) = h100_measured("deepseek-v3");
    let dir = tempfile::tempdir().unwrap();
    let sel = Selection {
        system: "h100_sxm".into(),
        engine: ENGINE.into(),
        version: "2026-12-05".into(),
    };
    let measured = write_and_fit(dir.path(), &hw, &sel, "h100", &rows).unwrap();
    let (vllm, _) = engine_tables(&hw, "vllm").unwrap();
    let vllm = vllm.unwrap();
    let layered = lay_over(dir.path(), measured.clone(), &vllm).unwrap();
    let base = layered.base.as_ref().unwrap();
    assert_eq!(base.measured_gemms, ["bfloat16", "fp8"]);
    assert!(layered
        .covers()
        .starts_with("bfloat16 and fp8 GEMMs measured; the rest by vllm"));
    for f in [Format::Bf16, Format::Fp8] {
        assert_eq!(layered.gemm_fit(f), measured.gemm_fit(f), "{f:?}");
    }
    assert_eq!(
        layered.gemm_fit(Format::Fp8Block),
        vllm.gemm_fit(Format::Fp8Block)
    );
    assert!(layered
        .fits
        .iter()
        .any(|f| f.family == sim::cost::tables::family::Family::Moe));
    // Through `--engine DIR`: the step's routed experts and attention as vLLM's.
    let model = load_model("deepseek-v3", &[]).unwrap();
    let spec = ForwardSpec {
        phase: Phase::Prefill,
        dep: 16,
        tp: 1,
        batch_per_rank: 1,
        total_requests: None,
        context_tokens: 0,
        new_tokens: 4096,
        chunk_tokens: None,
        draft_tokens: 0,
        tokens_per_step: 1.0,
    };
    // Tables against tables: without the terms fitted to measured runs, which price
    // an engine named (`vllm`) and not a tables folder.
    let price = |choice: &str| {
        let p = cost_params(&hw, None, &[], Some(choice), true).unwrap();
        let cm = AnalyticCostModel::new(hw.clone(), model.clone(), Layout::new(16), p);
        forward(&cm as &dyn CostModel, &spec)
    };
    let (a, b) = (price(dir.path().to_str().unwrap()), price("vllm"));
    use sim::cost::Op;
    for op in [Op::Moe, Op::Attention, Op::Elementwise] {
        let (x, y) = (a.total.op(op), b.total.op(op));
        assert!((x / y - 1.0).abs() < 1e-9, "{op:?}: {x} vs {y}");
    }
    // The measured dense GEMMs (-15% on the H100 of 2026-12-05; the block-FP8 ones
    // priced by the FP8 fit, as vLLM's H100 tables price them) and the step they
    // move (-1%; issue 42's goal is 10%); likewise a decode step.
    let (x, y) = (a.total.op(Op::Dense), b.total.op(Op::Dense));
    assert!(x != y && (x / y - 1.0).abs() < 0.2, "dense {x} vs {y}");
    let (x, y) = (a.total.step_s, b.total.step_s);
    eprintln!(
        "prefill step: {:.3} ms laid over vllm, {:.3} ms vllm",
        x * 1e3,
        y * 1e3
    );
    assert!((x / y - 1.0).abs() < 0.1, "step {x} vs {y}");
    decode_step_is_near_vllms(&hw, &model, dir.path(), spec);
}

/// Asserts a decode step priced by the tables in `dir` is within 10% of vLLM's.
fn decode_step_is_near_vllms(hw: &Hardware, model: &Model, dir: &Path, spec: ForwardSpec) {
    let decode = ForwardSpec {
        phase: Phase::Decode,
        batch_per_rank: 32,
        context_tokens: 4096,
        new_tokens: 1,
        ..spec
    };
    // Tables against tables, as above: without the runs terms.
    let price = |choice: &str| {
        let p = cost_params(hw, None, &[], Some(choice), true).unwrap();
        let cm = AnalyticCostModel::new(hw.clone(), model.clone(), Layout::new(16), p);
        forward(&cm as &dyn CostModel, &decode).total.step_s
    };
    let (x, y) = (price(dir.to_str().unwrap()), price("vllm"));
    eprintln!(
        "decode step: {:.3} ms laid over vllm, {:.3} ms vllm",
        x * 1e3,
        y * 1e3
    );
    assert!((x / y - 1.0).abs() < 0.1, "decode step {x} vs {y}");
}
