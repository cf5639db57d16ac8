//! Never silently worse (issue 42): a GPU calibration profile (`--profile`, measured
//! by `twin calibrate --device cuda:N`) or a kernel-table profile given as a path
//! (`--engine PATH`) prices the steps of `forward`, `simulate` and `plan` only when no
//! operation of the steps it prices is far slower than the reference price of the same
//! GPU and shapes: the shipped kernel tables where `--engine` names them, else twin's
//! kernel model of the hardware (its datasheet rates at efficiencies fitted to public
//! kernel benchmarks, `[cost]`). A profile of the engine's own kernels (33% of HBM
//! bandwidth for MoE weights, 0.2% of FP8 peak for the grouped GEMM, 0.9% of HBM for
//! decode attention on the H200 of 2026-12-04) made a DeepSeek-V3 decode step 7.7x
//! slower without a word; now it is refused with the operation and the ratio, and
//! `--allow-slow-profile` prices with it anyway. `twin validate live` prices the live
//! engine's own runs with such a profile (its fitted op calls): this check is not on
//! that path.

use super::tables::is_path;
use super::{cost_params, Set};
use anyhow::{bail, Result};
use sim::cost::{AnalyticCostModel, CostParams, Layout, Op, Phase};
use sim::forward::{forward, ForwardSpec};
use spec::hardware::Hardware;
use spec::model::Model;

/// How many times the reference price an operation may cost before a profile is
/// refused. The shipped vLLM and TensorRT-LLM tables and twin's kernel model agree per
/// op family within tens of percent (docs/kernel-tables.md: held-out median errors of
/// 1-6% per family, physics alone within 25-50%); a production library measured on a
/// different driver, clock or library version moves a kernel by well under 2x. The
/// engine's own kernels are 3x (MoE weight streaming) to 100x (decode attention) slower.
/// 3x lies between: it lets any production kernel through and stops what would make a
/// step several times slower.
pub const SLOW_RATIO: f64 = 3.0;

/// An operation counts when its price, the reference's or the profile's, is at least
/// this share of the reference step: a launch or element-wise term of a few
/// microseconds is not a kernel whose ratio means anything.
const OP_SHARE: f64 = 0.01;

/// What a check compares: the reference's cost parameters, the flags that gave what is
/// checked, and the reference in words.
pub struct Reference {
    pub params: CostParams,
    pub what: String,
    pub against: String,
}

/// One step the check prices, on a layout, with its words.
pub struct Probe {
    pub layout: Layout,
    pub spec: ForwardSpec,
    pub label: String,
}

/// Whether `--profile PATH` is a device calibration (not a runs profile, not a trace's
/// in-situ section).
fn is_device_profile(path: &str) -> Result<bool> {
    let p = std::path::Path::new(path);
    if crate::runs_profile::read(p)?.is_some() {
        return Ok(false);
    }
    Ok(calibration::insitu::section_of(p)
        .map(|s| s.is_none())
        .unwrap_or(true))
}

/// The reference a GPU profile or table path is checked against; `None` when nothing
/// given needs checking (no such profile or path, or CPU hardware: the live CPU
/// engine's profiles are what price its runs).
pub fn reference(
    hardware: &Hardware,
    profile: Option<&str>,
    cost_sets: &[Set],
    engine: Option<&str>,
    physics_only: bool,
) -> Result<Option<Reference>> {
    if hardware.name.starts_with("cpu") {
        return Ok(None);
    }
    let profile = match profile {
        Some(p) if is_device_profile(p)? => Some(p),
        _ => None,
    };
    let table_path = engine.filter(|e| is_path(e.trim()));
    let mut what = Vec::new();
    if let Some(p) = profile {
        what.push(format!("--profile {p}"));
    }
    if let Some(t) = table_path {
        what.push(format!("--engine {t}"));
    }
    if what.is_empty() {
        return Ok(None);
    }
    // A table path laid over an engine's tables (`--base`) is checked against that
    // engine's shipped tables: what it measured against what the engine's tables price.
    let base = match table_path {
        Some(t) => super::tables::engine_tables(hardware, t)?
            .0
            .and_then(|k| k.base.as_ref().map(|b| b.engine.clone()))
            .filter(|e| !e.is_empty()),
        None => None,
    };
    let shipped = engine
        .filter(|e| !is_path(e.trim()) && e.trim() != super::tables::OWN)
        .or(base.as_deref());
    let params = cost_params(hardware, None, cost_sets, shipped, physics_only)?;
    let against = match (&params.tables, shipped) {
        (Some(t), _) => format!("{}'s shipped tables ({})", hardware.name, t.describe()),
        _ => format!("twin's kernel model of {}", hardware.name),
    };
    Ok(Some(Reference {
        params,
        what: what.join(" and "),
        against,
    }))
}

/// One operation's price against the reference's: the ratio, the operation, both
/// prices (s) and the probe's words.
type Finding = (f64, Op, f64, f64, String);

/// Per operation, its largest ratio over `probes` priced with `params` against
/// `reference`, slowest first.
fn ratios(
    hardware: &Hardware,
    model: &Model,
    probes: &[Probe],
    params: &CostParams,
    reference: &CostParams,
) -> Vec<Finding> {
    let mut worst: Vec<Finding> = Vec::new();
    for p in probes {
        let price = |c: &CostParams| {
            let cm = AnalyticCostModel::new(
                hardware.clone(),
                model.clone(),
                p.layout.clone(),
                c.clone(),
            );
            forward(&cm, &p.spec).total
        };
        let (got, base) = (price(params), price(reference));
        for op in Op::ALL {
            let (g, b) = (got.op(op), base.op(op));
            let ratio = g / b;
            if g.max(b) < OP_SHARE * base.step_s || b <= 0.0 || !ratio.is_finite() {
                continue;
            }
            match worst.iter_mut().find(|w| w.1 == op) {
                Some(w) if w.0 >= ratio => {}
                Some(w) => *w = (ratio, op, g, b, p.label.clone()),
                None => worst.push((ratio, op, g, b, p.label.clone())),
            }
        }
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    worst
}

/// Refuses `params` when an operation of `probes` costs more than [`SLOW_RATIO`] times
/// the reference's price, naming it and the ratio (and the next slowest); with
/// `allow`, returns the words that say it was priced anyway (for the cost model's line).
pub fn check(
    hardware: &Hardware,
    model: &Model,
    probes: &[Probe],
    params: &CostParams,
    r: &Reference,
    allow: bool,
) -> Result<Option<String>> {
    let found = ratios(hardware, model, probes, params, &r.params);
    let slow: Vec<&Finding> = found.iter().filter(|f| f.0 > SLOW_RATIO).collect();
    let Some((ratio, op, got, base, label)) = slow.first() else {
        return Ok(None);
    };
    let also: Vec<String> = slow[1..]
        .iter()
        .take(3)
        .map(|f| format!("{} {:.1}x", f.1.key(), f.0))
        .collect();
    let finding = format!(
        "{} prices {} {ratio:.1}x slower than {} ({:.3} ms against {:.3} ms in {label}{})",
        r.what,
        op.key(),
        r.against,
        got * 1e3,
        base * 1e3,
        if also.is_empty() {
            String::new()
        } else {
            format!("; also {}", also.join(", "))
        }
    );
    if allow {
        return Ok(Some(format!(
            "{finding}: priced with it anyway (--allow-slow-profile)"
        )));
    }
    bail!(
        "{finding}\n  more than {SLOW_RATIO}x slower: it would make predictions worse, not better (kernels measured far from production speed, as twin's own are)\n  \
         --allow-slow-profile prices with it anyway; `twin calibrate --device cuda:N --tables-out DIR` measures production libraries' kernels for --engine DIR; `twin validate live` prices the live engine's own runs with it"
    );
}

/// The steps a scenario's pools are checked on: a decode step of 64 requests per rank
/// at 4,096 tokens of context on the decode pool, a 4,096-token prompt per rank on
/// the prefill pool.
pub fn scenario_probes(sc: &sim::serving::ServingScenario) -> Vec<Probe> {
    sc.pools()
        .into_iter()
        .map(|(path, pool)| {
            let layout = pool.layout();
            let decode = path.ends_with("decode");
            let spec = ForwardSpec {
                phase: if decode {
                    Phase::Decode
                } else {
                    Phase::Prefill
                },
                dep: layout.dep,
                tp: layout.tp,
                batch_per_rank: if decode { 64 } else { 1 },
                total_requests: None,
                context_tokens: if decode { 4096 } else { 0 },
                new_tokens: 4096,
                chunk_tokens: None,
                draft_tokens: 0,
                tokens_per_step: 1.0,
            };
            let label = if decode {
                format!("a decode step of 64 requests per rank at 4,096 tokens of context, {path}")
            } else {
                format!("a prefill step of a 4,096-token prompt per rank, {path}")
            };
            Probe {
                layout,
                spec,
                label,
            }
        })
        .collect()
}
