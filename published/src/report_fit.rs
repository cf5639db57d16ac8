//! The fit of the vLLM GB300 report's table: settings the report leaves out and the
//! GB300's engine parameters, one parameter per `fit` row, solved in turn until no
//! parameter moves by more than 0.1% (`fitting::gauss_seidel`).
//! Parameters of simulation rows (the rack's unstated load and P/D split) are fitted
//! only with `--simulate`, after the others.

use crate::rows::{fitted_value, Evaluator, Fitted};
use crate::CommandLine;
use anyhow::{anyhow, bail, Context, Result};
use fitting::{rel_error, round5, PublishedFigure, Solve};
use scenario::{embedded_file, Set};

/// Where a fitted value is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Home {
    /// `scenarios/hardware/gb300.toml`, `[cost]` table, this key.
    HardwareCost(&'static str),
    /// `scenarios/hardware/gb300.toml`, this dotted path.
    Hardware(&'static str),
    /// `scenarios/models/deepseek-v4.1-flash.toml`, this dotted path.
    Model(&'static str),
    /// `scenarios/published/fitted.toml`, `[experiment]`, this placeholder name.
    Experiment(&'static str),
    /// `scenarios/workloads/agentx.toml`, this dotted path.
    Workload(&'static str),
    /// The rack scenario's P/D split: the decode group's DEP
    /// (`serving.decode.dep`), the prefill instances of DEP2 taking the rest of the
    /// rack (`serving.prefill.instances`).
    RackSplit,
}

/// A fitted parameter: where it lives, the row it is fitted to, its bounds, and how it
/// is solved.
struct FitParam {
    home: Home,
    row: &'static str,
    lo: f64,
    hi: f64,
    solve: Solve,
    /// Parameters of the same non-zero group are solved together (integer grids
    /// searched as a product, least squares over their rows).
    group: u8,
}

pub const FIT_HARDWARE: &str = "gb300";
const FIT_MODEL: &str = "deepseek-v4.1-flash";
const FIT_WORKLOAD: &str = "agentx";
const FIT_RACK: &str = "gb300-nvl72-v4.1-flash-agentx";
const FITTED: &str = "published/fitted.toml";
const RACK_GPUS: f64 = 72.0;
const RACK_PREFILL_DEP: f64 = 2.0;

/// Cost parameters of the GB300 that this fit owns (the kernel table's fit must not
/// write them).
pub const OWNED_COST_KEYS: [&str; 2] = ["gemm.compute_eff", "moe.compute_eff"];

const FIT_PARAMS: [FitParam; 8] = [
    // The batch of the report's DEP32 context sweep: unpublished, fitted to its 128K
    // step (the 855K step checks it).
    FitParam {
        home: Home::Experiment("decode_batch"),
        row: "decode-dep32-128k",
        lo: 1.0,
        hi: 256.0,
        solve: Solve::Grid(1.0),
        group: 0,
    },
    FitParam {
        home: Home::Model("attention.indexer.top_k"),
        row: "decode-dep4-attn-share",
        lo: 128.0,
        hi: 4096.0,
        solve: Solve::Grid(128.0),
        group: 0,
    },
    // The tensor-core efficiency of GB300 GEMMs: no SM100 GEMM table is published.
    FitParam {
        home: Home::HardwareCost("gemm.compute_eff"),
        row: "prefill-8k",
        lo: 0.05,
        hi: 1.0,
        solve: Solve::Continuous,
        group: 0,
    },
    FitParam {
        home: Home::Experiment("prefill_chunk"),
        row: "swa-replay-4k",
        lo: 512.0,
        hi: 4096.0,
        solve: Solve::Grid(64.0),
        group: 1,
    },
    FitParam {
        home: Home::Experiment("replay_bound_before"),
        row: "swa-replay-32k",
        lo: 0.0,
        hi: 20.0,
        solve: Solve::Grid(1.0),
        group: 1,
    },
    FitParam {
        home: Home::Hardware("tlb.miss_s"),
        row: "engram-2mb-32k",
        lo: 0.0,
        hi: 1e-6,
        solve: Solve::Continuous,
        group: 0,
    },
    // Simulation rows (only with --simulate): the load and the P/D split of the
    // report's rack run are not published. Sessions are solved by bisection to 16
    // sessions; the split by a scan over decode DEPs (those that do not divide the
    // experts are skipped).
    FitParam {
        home: Home::Workload("agentx.sessions"),
        row: "rack-throughput",
        lo: 1024.0,
        hi: 8192.0,
        solve: Solve::Bisect(16.0),
        group: 0,
    },
    FitParam {
        home: Home::RackSplit,
        row: "rack-p90-user",
        lo: 16.0,
        hi: 48.0,
        solve: Solve::Grid(8.0),
        group: 0,
    },
];

impl FitParam {
    fn name(&self) -> String {
        match self.home {
            Home::HardwareCost(k) => format!("hardware.cost.{k}"),
            Home::Hardware(k) => format!("hardware.{k}"),
            Home::Model(k) => format!("model.{k}"),
            Home::Experiment(k) => format!("experiment.{k}"),
            Home::Workload(k) => format!("workload.{k}"),
            Home::RackSplit => format!("{FIT_RACK}.serving.decode.dep"),
        }
    }
    fn simulation(&self) -> bool {
        matches!(self.home, Home::Workload(_) | Home::RackSplit)
    }
}

/// Prefill instances of the rack scenario for a decode group of `decode_dep` GPUs.
fn rack_prefill_instances(decode_dep: f64) -> f64 {
    ((RACK_GPUS - decode_dep) / RACK_PREFILL_DEP).floor()
}

/// The fitted values as overrides and placeholder values. The MoE compute efficiency
/// follows the GEMM efficiency: one tensor-core efficiency is fitted.
fn overrides(values: &[f64], simulation: bool) -> (Vec<Set>, Fitted) {
    let mut sets = Vec::new();
    let mut fitted = Fitted::default();
    let mut set = |path: String, v: f64| sets.push(Set::typed(&path, fitted_value(v), "--set"));
    for (p, v) in FIT_PARAMS.iter().zip(values) {
        if p.simulation() && !simulation {
            continue;
        }
        let v = *v;
        match p.home {
            Home::Experiment(name) => {
                fitted.experiment.insert(name.to_string(), v);
            }
            Home::HardwareCost(k) => {
                set(format!("cost.{k}"), v);
                if k == "gemm.compute_eff" {
                    set("cost.moe.compute_eff".into(), v);
                }
            }
            Home::Hardware(k) => set(format!("hardware.{k}"), v),
            Home::Model(k) => set(format!("model.{k}"), v),
            Home::Workload(k) => set(format!("workload.{k}"), v),
            Home::RackSplit => {
                set("serving.decode.dep".into(), v);
                set(
                    "serving.prefill.instances".into(),
                    rack_prefill_instances(v),
                );
            }
        }
    }
    (sets, fitted)
}

/// One fitted parameter's outcome.
pub struct Fitted1 {
    pub name: String,
    pub row: &'static str,
    /// None: a simulation parameter left unfitted (no --simulate).
    pub value: Option<f64>,
    pub stored: Option<f64>,
}

/// Fits the parameters to their `fit` rows: first those of `forward` rows, then, with
/// `simulate`, those of simulation rows (which see the others' fitted values). A value
/// of a simulation row's grid that makes no valid scenario is skipped, and `skipped`
/// is told why as it happens (the binary prints it).
pub fn fit(
    rows: &[PublishedFigure],
    simulate: bool,
    cli: &dyn CommandLine,
    skipped: &mut dyn FnMut(String),
) -> Result<Vec<Fitted1>> {
    let targets: Vec<&PublishedFigure> = FIT_PARAMS
        .iter()
        .map(|p| {
            let r = rows
                .iter()
                .find(|r| r.id == p.row)
                .ok_or_else(|| anyhow!("the table has no row `{}` to fit", p.row))?;
            if r.role != "fit" {
                bail!(
                    "row `{}` has role `{}`; only `fit` rows may be fitted",
                    r.id,
                    r.role
                );
            }
            Ok(r)
        })
        .collect::<Result<_>>()?;
    let stored = stored_values().ok();
    // Start from the stored values where there are any, else mid-range.
    let mut values: Vec<f64> = match &stored {
        Some(v) => v.iter().map(|(_, v)| *v).collect(),
        None => FIT_PARAMS.iter().map(|p| (p.lo + p.hi) / 2.0).collect(),
    };
    let mut ev = Evaluator::new(cli, Fitted::default());
    let phases: &[bool] = if simulate { &[false, true] } else { &[false] };
    for &sim_phase in phases {
        let params: Vec<fitting::Param> = FIT_PARAMS
            .iter()
            .map(|p| fitting::Param {
                lo: p.lo,
                hi: p.hi,
                solve: p.solve,
                group: p.group,
                active: p.simulation() == sim_phase,
            })
            .collect();
        fitting::gauss_seidel(&params, &mut values, 10, |i, vals| -> Result<Option<f64>> {
            let (sets, fitted) = overrides(vals, sim_phase);
            ev.fitted = fitted;
            let row = targets[i];
            match ev.predict(row, &sets) {
                Ok(x) => Ok(Some(rel_error(x, row.published))),
                // In simulations, values that make an invalid scenario are skipped (a
                // DEP that does not divide the experts).
                Err(e) if sim_phase && matches!(FIT_PARAMS[i].solve, Solve::Grid(_)) => {
                    skipped(format!("fit {}: skipped: {e:#}", FIT_PARAMS[i].name()));
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        })
        .map_err(|e| match e {
            fitting::RoundsError::Eval(e) => e,
            fitting::RoundsError::NoValue { index, lo, hi } => {
                anyhow!(
                    "fit {}: no valid value in {lo}..={hi}",
                    FIT_PARAMS[index].name()
                )
            }
        })?;
    }
    Ok(FIT_PARAMS
        .iter()
        .enumerate()
        .map(|(i, p)| Fitted1 {
            name: p.name(),
            row: p.row,
            value: (simulate || !p.simulation()).then_some(values[i]),
            stored: stored.as_ref().map(|s| s[i].1),
        })
        .collect())
}

pub fn read_fitted() -> Result<Fitted> {
    let text = embedded_file(FITTED).ok_or_else(|| anyhow!("embedded {FITTED} missing"))?;
    scenario::parse_with_sets::<Fitted>(&format!("scenarios/{FITTED}"), text, &[])
}

/// The values the scenario files hold now for the fitted parameters.
pub fn stored_values() -> Result<Vec<(String, f64)>> {
    let hw = scenario::load_hardware(FIT_HARDWARE, &[])?;
    let (_, model_text) = scenario::find_file(scenario::Kind::Model, FIT_MODEL)?;
    let model: toml::Value = toml::from_str(&model_text)?;
    let (_, wl_text) = scenario::find_file(scenario::Kind::Workload, FIT_WORKLOAD)?;
    let workload: toml::Value = toml::from_str(&wl_text)?;
    let (_, rack_text) = scenario::load_scenario_text(FIT_RACK)?;
    let rack: toml::Value = toml::from_str(&rack_text)?;
    let number = |doc: &toml::Value, path: &str, what: &str| -> Result<f64> {
        let mut cur = doc;
        for seg in path.split('.') {
            cur = cur
                .get(seg)
                .ok_or_else(|| anyhow!("{what} has no `{path}`"))?;
        }
        cur.as_float()
            .or_else(|| cur.as_integer().map(|i| i as f64))
            .ok_or_else(|| anyhow!("{what}: `{path}` is not a number"))
    };
    let fitted = read_fitted()?;
    let mut out = Vec::new();
    for p in &FIT_PARAMS {
        let v = match p.home {
            Home::Experiment(name) => *fitted
                .experiment
                .get(name)
                .ok_or_else(|| anyhow!("{FITTED} has no `{name}`"))?,
            Home::HardwareCost(key) => *hw.cost.get(key).ok_or_else(|| {
                anyhow!("scenarios/hardware/{FIT_HARDWARE}.toml [cost] has no fitted `{key}`")
            })?,
            Home::Hardware("tlb.miss_s") => hw.tlb.miss_s,
            Home::Hardware(other) => bail!("fit parameter hardware.{other} has no reader"),
            Home::Model(path) => number(&model, path, &format!("model {FIT_MODEL}"))?,
            Home::Workload(path) => number(&workload, path, &format!("workload {FIT_WORKLOAD}"))?,
            Home::RackSplit => {
                let what = format!("scenario {FIT_RACK}");
                let dep = number(&rack, "serving.decode.dep", &what)?;
                let inst = number(&rack, "serving.prefill.instances", &what)?;
                if inst != rack_prefill_instances(dep) {
                    bail!("{what}: serving.prefill.instances = {inst}, but a decode DEP of {dep} leaves {} DEP2 prefill instances", rack_prefill_instances(dep));
                }
                dep
            }
        };
        out.push((p.name(), v));
    }
    Ok(out)
}

/// Writes the fitted values into the scenario files under `dir` (comments kept), each
/// file whole to a temporary beside it, then renamed: never half a file.
pub fn write(dir: &str, fitted: &[Fitted1]) -> Result<Vec<String>> {
    let paths = [
        format!("{dir}/hardware/{FIT_HARDWARE}.toml"),
        format!("{dir}/models/{FIT_MODEL}.toml"),
        format!("{dir}/{FITTED}"),
        format!("{dir}/workloads/{FIT_WORKLOAD}.toml"),
        format!("{dir}/{FIT_RACK}.toml"),
    ];
    let mut docs = Vec::new();
    for p in &paths {
        let doc: toml_edit::DocumentMut = std::fs::read_to_string(p)
            .with_context(|| format!("cannot read {p}"))?
            .parse()
            .with_context(|| format!("{p} is not valid TOML"))?;
        docs.push(doc);
    }
    for (p, f) in FIT_PARAMS.iter().zip(fitted) {
        let Some(v) = f.value else { continue };
        let item = if p.solve.integer() {
            toml_edit::value(v.round() as i64)
        } else {
            toml_edit::value(round5(v))
        };
        let (doc, path): (&mut toml_edit::DocumentMut, Vec<&str>) = match p.home {
            Home::HardwareCost(k) => (&mut docs[0], vec!["cost", k]),
            Home::Hardware(k) => (&mut docs[0], k.split('.').collect()),
            Home::Model(k) => (&mut docs[1], k.split('.').collect()),
            Home::Experiment(k) => (&mut docs[2], vec!["experiment", k]),
            Home::Workload(k) => (&mut docs[3], k.split('.').collect()),
            Home::RackSplit => {
                let n = rack_prefill_instances(v) as i64;
                docs[4]["serving"]["prefill"]["instances"] = toml_edit::value(n);
                (&mut docs[4], vec!["serving", "decode", "dep"])
            }
        };
        let (last, parents) = path.split_last().expect("non-empty path");
        let mut t: &mut toml_edit::Item = doc.as_item_mut();
        for seg in parents {
            t = &mut t[*seg];
        }
        t[*last] = item.clone();
        if p.home == Home::HardwareCost("gemm.compute_eff") {
            docs[0]["cost"]["moe.compute_eff"] = item;
        }
    }
    for (path, doc) in paths.iter().zip(&docs) {
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, doc.to_string()).with_context(|| format!("cannot write {tmp}"))?;
        std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {path}"))?;
    }
    Ok(paths.to_vec())
}
