//! `twin validate published [FILE]`: every published figure next to twin's prediction,
//! with its error; `--fit` re-derives the fitted parameters from the `fit` rows.
//!
//! The table (`scenarios/published/*.csv`) holds, per figure, the `twin forward` command
//! that computes it, the metric read from the result, the published value, and its role:
//! `fit` rows may be used to fit parameters; `check` rows never are.
//!
//! Fitting: each fitted parameter belongs to one `fit` row (a square system). The
//! parameters are solved in turn, each by a one-dimensional least-squares solve of its
//! row's relative error (bisection on a monotone response, or a scan over integers),
//! and the rounds repeat until no parameter moves by more than 0.1%: a Gauss-Seidel
//! least-squares fit. Stored values live in the scenario files and
//! `scenarios/published/fitted.toml`; a test checks they equal what this fit computes.
//! Parameters fitted to simulation rows (the rack's unstated load and P/D split) are
//! fitted only with `--simulate`, after the others, by the same solves over whole
//! simulations (several minutes).

use super::forward::{evaluate, ForwardArgs};
use crate::scenario::embedded_file;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use serde::Deserialize;
use sim::cost::Op;
use std::collections::BTreeMap;

pub const DEFAULT_TABLE: &str = "published/vllm-gb300-deepseek-v4.1-flash.csv";
const FITTED: &str = "published/fitted.toml";

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    #[command(subcommand)]
    pub what: ValidateWhat,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ValidateWhat {
    /// Predicted vs published figures, with the error of every row.
    Published {
        /// A published-figures CSV (default: the embedded vLLM GB300 table).
        file: Option<String>,
        /// Re-fit the fitted parameters to the `fit` rows and print them.
        #[arg(long)]
        fit: bool,
        /// With --fit: write the fitted values into the scenario files under this
        /// folder (comments kept), e.g. `--write scenarios`.
        #[arg(long, requires = "fit", value_name = "SCENARIOS_DIR")]
        write: Option<String>,
        /// Also run the rows computed by `twin simulate` (minutes each; without it they
        /// are listed as not run).
        #[arg(long)]
        simulate: bool,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A live run (`twin live --out DIR`) against twin's prediction of it.
    Live(super::validate_live::LiveValidateArgs),
    /// A vLLM `bench serve` result (saved with per-request details) against twin's
    /// prediction of it.
    Bench(super::validate_live::BenchValidateArgs),
}

/// One row of a published-figures table.
#[derive(Debug, Clone, Deserialize)]
pub struct Row {
    pub id: String,
    pub figure: String,
    pub metric: String,
    pub published: f64,
    pub unit: String,
    pub role: String,
    pub command: String,
    #[serde(default)]
    pub baseline: String,
    pub source: String,
}

/// Values substituted for `{name}` in commands.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Fitted {
    #[serde(default)]
    pub experiment: BTreeMap<String, f64>,
}

pub fn read_table(file: Option<&str>) -> Result<(String, Vec<Row>)> {
    let (origin, text) = match file {
        Some(p) => (
            p.to_string(),
            std::fs::read_to_string(p).with_context(|| format!("cannot read {p}"))?,
        ),
        None => (
            format!("scenarios/{DEFAULT_TABLE} (embedded)"),
            embedded_file(DEFAULT_TABLE)
                .ok_or_else(|| anyhow!("embedded table missing"))?
                .to_string(),
        ),
    };
    let mut rdr = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let mut rows = Vec::new();
    for (i, r) in rdr.deserialize::<Row>().enumerate() {
        let row = r.map_err(|e| {
            let line = e.position().map(|p| p.line()).unwrap_or(i as u64 + 2);
            anyhow!("{origin}: line {line}: {e}")
        })?;
        if row.role != "fit" && row.role != "check" {
            bail!(
                "{origin}: row {}: role must be `fit` or `check`, got `{}`",
                row.id,
                row.role
            );
        }
        rows.push(row);
    }
    if rows.is_empty() {
        bail!("{origin}: no rows");
    }
    Ok((origin, rows))
}

pub fn read_fitted() -> Result<Fitted> {
    let text = embedded_file(FITTED).ok_or_else(|| anyhow!("embedded {FITTED} missing"))?;
    crate::scenario::parse_with_sets::<Fitted>(&format!("scenarios/{FITTED}"), text, &[])
}

#[derive(Parser)]
#[command(name = "twin forward")]
struct ForwardCli {
    #[command(flatten)]
    args: ForwardArgs,
}

/// Parses a `twin forward ...` command of the table, with `{name}` placeholders
/// filled and `extra` overrides appended.
fn parse_command(cmd: &str, fitted: &Fitted, extra: &[String]) -> Result<ForwardArgs> {
    let mut text = cmd.trim().to_string();
    for (k, v) in &fitted.experiment {
        text = text.replace(&format!("{{{k}}}"), &format_value(*v));
    }
    if text.contains('{') {
        bail!("command `{cmd}` has a placeholder with no value in {FITTED}");
    }
    let mut argv = argv_of(&text, "twin forward")?;
    for e in extra {
        argv.push("--set".into());
        argv.push(e.clone());
    }
    ForwardCli::try_parse_from(argv)
        .map(|c| c.args)
        .map_err(|e| anyhow!("command `{cmd}`: {e}"))
}

/// A table command as an argument vector for clap, the program name being `program`.
fn argv_of(cmd: &str, program: &str) -> Result<Vec<String>> {
    let rest = cmd
        .trim()
        .strip_prefix(program)
        .ok_or_else(|| anyhow!("command `{cmd}` must start with `{program}`"))?;
    let mut argv = vec![program.to_string()];
    argv.extend(rest.split_whitespace().map(str::to_string));
    Ok(argv)
}

fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:e}")
    }
}

#[derive(Parser)]
#[command(name = "twin simulate")]
struct SimulateCli {
    #[command(flatten)]
    args: super::simulate::SimulateArgs,
}

/// Whether a row is computed by a (slow) simulation rather than one `forward` step.
pub fn is_simulation(row: &Row) -> bool {
    row.command.trim_start().starts_with("twin simulate")
}

/// Runs a `twin simulate ...` row (with `extra` overrides) and reads its metric
/// `json:PATH` (dotted path into the `--json` object, numeric segments index lists).
fn predict_simulation(row: &Row, extra: &[String]) -> Result<f64> {
    let argv = argv_of(&row.command, "twin simulate")?;
    let mut args = SimulateCli::try_parse_from(argv)
        .map(|c| c.args)
        .map_err(|e| anyhow!("row {}: {e}", row.id))?;
    args.set.extend(extra.iter().cloned());
    let key = format!("{} {}", row.command, extra.join(" "));
    // Rows that share a command share one run.
    static RUNS: std::sync::Mutex<BTreeMap<String, serde_json::Value>> =
        std::sync::Mutex::new(BTreeMap::new());
    let cached = RUNS
        .lock()
        .expect("no panics while held")
        .get(&key)
        .cloned();
    let v = match cached {
        Some(v) => v,
        None => {
            let (r, report, records) =
                super::simulate::execute(&args).with_context(|| format!("row {}", row.id))?;
            let v = super::simulate::to_json(&r, &report, records)?;
            RUNS.lock()
                .expect("no panics while held")
                .insert(key, v.clone());
            v
        }
    };
    let path = row.metric.strip_prefix("json:").ok_or_else(|| {
        anyhow!(
            "row {}: a simulation row's metric is json:PATH, got `{}`",
            row.id,
            row.metric
        )
    })?;
    let mut cur = &v;
    for seg in path.split('.') {
        cur = match seg.parse::<usize>() {
            Ok(i) if cur.is_array() => &cur[i],
            _ => &cur[seg],
        };
    }
    let x = cur.as_f64().ok_or_else(|| {
        anyhow!(
            "row {}: `{path}` is not a number in the simulation's JSON",
            row.id
        )
    })?;
    // The JSON keeps fractions; a row published in % compares percentages.
    Ok(if row.unit == "%" { 100.0 * x } else { x })
}

/// Evaluates one row's metric; `extra` are `--set` overrides (used while fitting).
pub fn predict(row: &Row, fitted: &Fitted, extra: &[String]) -> Result<f64> {
    if is_simulation(row) {
        return predict_simulation(row, extra);
    }
    let args = parse_command(&row.command, fitted, extra)?;
    let f = evaluate(&args).with_context(|| format!("row {}", row.id))?;
    let r = &f.result;
    let metric = row.metric.as_str();
    Ok(match metric {
        "step_ms" => r.step_s() * 1e3,
        "target_step_ms" => r.target_step_s() * 1e3,
        "user_tok_s" => r.tokens_per_s_per_user,
        "gain_pct" => {
            if row.baseline.is_empty() {
                bail!("row {}: metric gain_pct needs a baseline command", row.id);
            }
            let b = evaluate(&parse_command(&row.baseline, fitted, extra)?)?;
            (b.result.step_s() / r.step_s() - 1.0) * 100.0
        }
        m if m.starts_with("target_share_pct:") => {
            let mut share = 0.0;
            for key in m["target_share_pct:".len()..].split('+') {
                let op = Op::ALL
                    .into_iter()
                    .find(|o| o.key() == key)
                    .ok_or_else(|| anyhow!("row {}: unknown operation `{key}`", row.id))?;
                share += r.target_share(op);
            }
            share * 100.0
        }
        other => bail!(
            "row {}: unknown metric `{other}` (step_ms, target_step_ms, user_tok_s, gain_pct, target_share_pct:OP[+OP])",
            row.id
        ),
    })
}

pub fn rel_error(predicted: f64, published: f64) -> f64 {
    (predicted - published) / published
}

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

/// How a parameter's one-dimensional least-squares problem is solved.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Solve {
    /// Bisection on the sign of a monotone error, stored to 5 significant digits.
    Continuous,
    /// Integers on a grid of this step: the point of least squared error.
    Grid(f64),
    /// Integers: bisection until the bracket is this narrow (each evaluation is a
    /// whole simulation), rounded to a multiple of it.
    Bisect(f64),
}

impl Solve {
    fn integer(self) -> bool {
        self != Solve::Continuous
    }
}

/// A fitted parameter: where it lives, the row it is fitted to, its bounds, and how it
/// is solved.
struct FitParam {
    home: Home,
    row: &'static str,
    lo: f64,
    hi: f64,
    solve: Solve,
}

const FIT_HARDWARE: &str = "gb300";
const FIT_MODEL: &str = "deepseek-v4.1-flash";
const FIT_WORKLOAD: &str = "agentx";
const FIT_RACK: &str = "gb300-nvl72-v4.1-flash-agentx";
const RACK_GPUS: f64 = 72.0;
const RACK_PREFILL_DEP: f64 = 2.0;

const FIT_PARAMS: [FitParam; 8] = [
    FitParam {
        home: Home::HardwareCost("comm_per_peer_s"),
        row: "decode-dep32-128k",
        lo: 0.0,
        hi: 20e-6,
        solve: Solve::Continuous,
    },
    FitParam {
        home: Home::Model("attention.indexer.top_k"),
        row: "decode-dep4-attn-share",
        lo: 128.0,
        hi: 4096.0,
        solve: Solve::Grid(128.0),
    },
    FitParam {
        home: Home::HardwareCost("gemm.compute_eff"),
        row: "prefill-8k",
        lo: 0.05,
        hi: 1.0,
        solve: Solve::Continuous,
    },
    FitParam {
        home: Home::Experiment("prefill_chunk"),
        row: "swa-replay-4k",
        lo: 512.0,
        hi: 4096.0,
        solve: Solve::Grid(256.0),
    },
    FitParam {
        home: Home::Experiment("replay_bound_before"),
        row: "swa-replay-32k",
        lo: 0.0,
        hi: 20.0,
        solve: Solve::Grid(1.0),
    },
    FitParam {
        home: Home::Hardware("tlb.miss_s"),
        row: "engram-2mb-32k",
        lo: 0.0,
        hi: 1e-6,
        solve: Solve::Continuous,
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
    },
    FitParam {
        home: Home::RackSplit,
        row: "rack-p90-user",
        lo: 16.0,
        hi: 48.0,
        solve: Solve::Grid(8.0),
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
}

/// Prefill instances of the rack scenario for a decode group of `decode_dep` GPUs.
fn rack_prefill_instances(decode_dep: f64) -> f64 {
    ((RACK_GPUS - decode_dep) / RACK_PREFILL_DEP).floor()
}

/// The fitted values as `--set` overrides and placeholder values. The MoE compute
/// efficiency follows the GEMM efficiency: one tensor-core efficiency is fitted.
fn overrides(values: &[f64], simulation: bool) -> (Vec<String>, Fitted) {
    let mut sets = Vec::new();
    let mut fitted = Fitted::default();
    for (p, v) in FIT_PARAMS.iter().zip(values) {
        if is_simulation_param(p) && !simulation {
            continue;
        }
        if let Home::Experiment(name) = p.home {
            fitted.experiment.insert(name.to_string(), *v);
            continue;
        }
        let (x, v) = (*v, format_value(*v));
        match p.home {
            Home::Experiment(_) => unreachable!("handled above"),
            Home::HardwareCost(k) => {
                sets.push(format!("cost.{k}={v}"));
                if k == "gemm.compute_eff" {
                    sets.push(format!("cost.moe.compute_eff={v}"));
                }
            }
            Home::Hardware(k) => sets.push(format!("hardware.{k}={v}")),
            Home::Model(k) => sets.push(format!("model.{k}={v}")),
            Home::Workload(k) => sets.push(format!("workload.{k}={v}")),
            Home::RackSplit => {
                sets.push(format!("serving.decode.dep={v}"));
                let n = rack_prefill_instances(x);
                sets.push(format!("serving.prefill.instances={n}"));
            }
        }
    }
    (sets, fitted)
}

/// Whether a fitted parameter belongs to a simulation row.
fn is_simulation_param(p: &FitParam) -> bool {
    matches!(p.home, Home::Workload(_) | Home::RackSplit)
}

/// Fits the parameters to their `fit` rows: first those of `forward` rows, then, with
/// `simulate`, those of simulation rows (which see the others' fitted values). Returns
/// (name, value, fitted) triples; a parameter not fitted keeps its stored value.
pub fn fit(rows: &[Row], simulate: bool) -> Result<Vec<(String, f64, bool)>> {
    let find = |id: &str| -> Result<&Row> {
        let r = rows
            .iter()
            .find(|r| r.id == id)
            .ok_or_else(|| anyhow!("the table has no row `{id}` to fit"))?;
        if r.role != "fit" {
            bail!(
                "row `{id}` has role `{}`; only `fit` rows may be fitted",
                r.role
            );
        }
        Ok(r)
    };
    // Start from the stored values where there are any, else mid-range.
    let mut values: Vec<f64> = match stored_fit_values() {
        Ok(v) => v.into_iter().map(|(_, v)| v).collect(),
        Err(_) => FIT_PARAMS.iter().map(|p| (p.lo + p.hi) / 2.0).collect(),
    };
    let phases: &[bool] = if simulate { &[false, true] } else { &[false] };
    for &sim_phase in phases {
        for _round in 0..10 {
            let before = values.clone();
            for i in 0..FIT_PARAMS.len() {
                let p = &FIT_PARAMS[i];
                if is_simulation_param(p) != sim_phase {
                    continue;
                }
                let row = find(p.row)?;
                let eval = |v: f64| -> Result<f64> {
                    let mut vals = values.clone();
                    vals[i] = v;
                    let (sets, fitted) = overrides(&vals, sim_phase);
                    Ok(rel_error(predict(row, &fitted, &sets)?, row.published))
                };
                values[i] = solve(p, sim_phase, eval)?;
            }
            let moved = values
                .iter()
                .zip(&before)
                .any(|(a, b)| (a - b).abs() > 1e-3 * b.abs().max(1e-12));
            if !moved {
                break;
            }
        }
    }
    Ok(FIT_PARAMS
        .iter()
        .zip(values)
        .map(|(p, v)| (p.name(), v, simulate || !is_simulation_param(p)))
        .collect())
}

/// One parameter's least-squares solve of its row's relative error `eval`.
fn solve(p: &FitParam, sim: bool, eval: impl Fn(f64) -> Result<f64>) -> Result<f64> {
    if let Solve::Grid(step) = p.solve {
        // The point of least squared error (in simulations, points that make an
        // invalid scenario are skipped).
        let mut best = (f64::INFINITY, p.lo);
        let mut v = p.lo;
        while v <= p.hi + 1e-9 {
            match eval(v) {
                Ok(e) if e * e < best.0 => best = (e * e, v),
                Ok(_) => {}
                Err(e) if sim => eprintln!("fit {}: {v} skipped: {e:#}", p.name()),
                Err(e) => return Err(e),
            }
            v += step;
        }
        if !best.0.is_finite() {
            bail!("fit {}: no valid value in {}..={}", p.name(), p.lo, p.hi);
        }
        return Ok(best.1);
    }
    // The error is monotone in each parameter over its bounds: bisection on its sign is
    // the least-squares solution (zero residual when bracketed).
    let (mut lo, mut hi) = (p.lo, p.hi);
    let (elo, ehi) = (eval(lo)?, eval(hi)?);
    if elo.signum() == ehi.signum() {
        return Ok(if elo.abs() < ehi.abs() { lo } else { hi });
    }
    let tol = match p.solve {
        Solve::Bisect(tol) => tol,
        _ => 0.0,
    };
    for _ in 0..50 {
        if hi - lo <= tol {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if eval(mid)?.signum() == elo.signum() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mid = 0.5 * (lo + hi);
    Ok(if tol > 0.0 {
        (mid / tol).round() * tol
    } else {
        round5(mid)
    })
}

/// The values the scenario files hold now for the fitted parameters.
pub fn stored_fit_values() -> Result<Vec<(String, f64)>> {
    let hw = crate::scenario::load_hardware(FIT_HARDWARE, &[])?;
    let (_, model_text) = crate::scenario::resolve(crate::scenario::Kind::Model, FIT_MODEL)?;
    let model: toml::Value = toml::from_str(&model_text)?;
    let (_, wl_text) = crate::scenario::resolve(crate::scenario::Kind::Workload, FIT_WORKLOAD)?;
    let workload: toml::Value = toml::from_str(&wl_text)?;
    let (_, rack_text) = crate::scenario::load_scenario_text(FIT_RACK)?;
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

pub struct Outcome {
    pub row: Row,
    /// None: a simulation row left out (run with --simulate).
    pub predicted: Option<f64>,
    pub error: Option<f64>,
}

pub fn evaluate_table(rows: &[Row], simulate: bool) -> Result<Vec<Outcome>> {
    let fitted = read_fitted()?;
    rows.iter()
        .map(|r| {
            if is_simulation(r) && !simulate {
                return Ok(Outcome {
                    row: r.clone(),
                    predicted: None,
                    error: None,
                });
            }
            let predicted = predict(r, &fitted, &[])?;
            Ok(Outcome {
                row: r.clone(),
                predicted: Some(predicted),
                error: Some(rel_error(predicted, r.published)),
            })
        })
        .collect()
}

pub fn run(args: &ValidateArgs) -> Result<()> {
    let (file, do_fit, write, simulate, json) = match &args.what {
        ValidateWhat::Published {
            file,
            fit,
            write,
            simulate,
            json,
        } => (file, fit, write, simulate, json),
        ValidateWhat::Live(a) => return super::validate_live::run_live(a),
        ValidateWhat::Bench(a) => return super::validate_live::run_bench(a),
    };
    let (origin, rows) = read_table(file.as_deref())?;
    if *do_fit {
        let fitted = fit(&rows, *simulate)?;
        let values: Vec<(String, f64)> = fitted.iter().map(|(n, v, _)| (n.clone(), *v)).collect();
        let stored = stored_fit_values().ok();
        if *json {
            let items: Vec<serde_json::Value> = fitted
                .iter()
                .enumerate()
                .map(|(i, (name, v, done))| {
                    serde_json::json!({
                        "name": name, "fitted": if *done { Some(*v) } else { None },
                        "row": FIT_PARAMS[i].row,
                        "stored": stored.as_ref().map(|s| s[i].1),
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&items)?);
            if let Some(dir) = write {
                write_fit(dir, &values)?;
            }
            return Ok(());
        }
        println!("fitted to the `fit` rows of {origin}:");
        for (i, (path, v, done)) in fitted.iter().enumerate() {
            let was = stored
                .as_ref()
                .map(|s| format!("(stored: {})", format_value(s[i].1)))
                .unwrap_or_default();
            let v = if *done {
                format_value(*v)
            } else {
                "not fitted".to_string()
            };
            println!(
                "  {:<40} = {:<14} row {:<22} {was}",
                path, v, FIT_PARAMS[i].row
            );
        }
        if !*simulate {
            println!("(parameters of simulation rows are fitted with --simulate, several minutes)");
        }
        match write {
            Some(dir) => {
                write_fit(dir, &values)?;
                println!("written to {dir}/hardware/{FIT_HARDWARE}.toml, {dir}/models/{FIT_MODEL}.toml, {dir}/workloads/{FIT_WORKLOAD}.toml, {dir}/{FIT_RACK}.toml and {dir}/{FITTED}; rebuild to embed them");
            }
            None => println!("store them with --write scenarios"),
        }
        return Ok(());
    }
    let out = evaluate_table(&rows, *simulate)?;
    if *json {
        let items: Vec<serde_json::Value> = out
            .iter()
            .map(|o| {
                serde_json::json!({
                    "id": o.row.id, "figure": o.row.figure, "metric": o.row.metric,
                    "published": o.row.published, "predicted": o.predicted,
                    "error": o.error, "role": o.row.role, "unit": o.row.unit,
                    "command": o.row.command, "source": o.row.source,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&items)?);
        return Ok(());
    }
    println!("{origin}");
    let fmt_num = |v: f64, unit: &str| {
        if v.abs() >= 1e4 {
            format!("{:.1}K {unit}", v / 1e3)
        } else {
            format!("{v:.2} {unit}")
        }
    };
    let cells: Vec<[String; 6]> = out
        .iter()
        .map(|o| {
            let (predicted, error) = match (o.predicted, o.error) {
                (Some(p), Some(e)) => (fmt_num(p, &o.row.unit), format!("{:+.1}%", e * 100.0)),
                _ => ("not run".to_string(), "--simulate".to_string()),
            };
            [
                o.row.id.clone(),
                o.row.figure.clone(),
                fmt_num(o.row.published, &o.row.unit),
                predicted,
                error,
                o.row.role.clone(),
            ]
        })
        .collect();
    let head = ["id", "figure", "published", "predicted", "error", "role"];
    let mut w = head.map(str::len);
    for c in &cells {
        for (wi, x) in w.iter_mut().zip(c) {
            *wi = (*wi).max(x.chars().count());
        }
    }
    let line = |c: [&str; 6]| {
        println!(
            "{:<w0$}  {:<w1$}  {:>w2$}  {:>w3$}  {:>w4$}  {}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4]
        )
    };
    line(head);
    for c in &cells {
        line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5]]);
    }
    let checks: Vec<&Outcome> = out
        .iter()
        .filter(|o| o.row.role == "check" && o.error.is_some())
        .collect();
    let worst = checks
        .iter()
        .filter_map(|o| o.error)
        .map(f64::abs)
        .fold(0.0, f64::max);
    let not_run = out.iter().filter(|o| o.error.is_none()).count();
    println!(
        "\n{} check rows evaluated, worst error {:.1}% (goal: every check within 10%){}; fit rows are matched by `twin validate published --fit`",
        checks.len(),
        worst * 100.0,
        if not_run > 0 { format!("; {not_run} simulation rows not run (add --simulate)") } else { String::new() }
    );
    Ok(())
}

/// Rounds to 5 significant digits, so stored values read cleanly.
fn round5(v: f64) -> f64 {
    if v == 0.0 {
        return 0.0;
    }
    let mag = 10f64.powf(4.0 - v.abs().log10().floor());
    (v * mag).round() / mag
}

fn write_fit(dir: &str, values: &[(String, f64)]) -> Result<()> {
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
    for (i, (_, v)) in values.iter().enumerate() {
        let p = &FIT_PARAMS[i];
        let item = if p.solve.integer() {
            toml_edit::value(v.round() as i64)
        } else {
            toml_edit::value(round5(*v))
        };
        let (doc, path): (&mut toml_edit::DocumentMut, Vec<&str>) = match p.home {
            Home::HardwareCost(k) => (&mut docs[0], vec!["cost", k]),
            Home::Hardware(k) => (&mut docs[0], k.split('.').collect()),
            Home::Model(k) => (&mut docs[1], k.split('.').collect()),
            Home::Experiment(k) => (&mut docs[2], vec!["experiment", k]),
            Home::Workload(k) => (&mut docs[3], k.split('.').collect()),
            Home::RackSplit => {
                let n = rack_prefill_instances(*v) as i64;
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
    // Write each file whole to a temporary beside it, then rename: never half a file.
    for (path, doc) in paths.iter().zip(&docs) {
        let tmp = format!("{path}.tmp");
        std::fs::write(&tmp, doc.to_string()).with_context(|| format!("cannot write {tmp}"))?;
        std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {path}"))?;
    }
    Ok(())
}
