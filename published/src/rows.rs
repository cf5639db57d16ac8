//! Computing a table row: its command parsed with the binary's own flag parsers
//! ([`CommandLine`]), run with extra overrides (the values being fitted, typed), and
//! its metric read off.

use crate::CommandLine;
use anyhow::{anyhow, bail, Context, Result};
use fitting::PublishedFigure;
use scenario::kernel::{
    evaluate as kernel, evaluate_with as kernel_with, inputs as kernel_inputs, KernelOut,
    KernelRequest,
};
use scenario::run::{execute, simulate, to_json, RunHow};
use scenario::step::{evaluate as forward, prepare, Forward, StepRequest};
use scenario::Set;
use serde::Deserialize;
use sim::cost::band::{Band, DEFAULT_DRAWS, DEFAULT_SEED};
use sim::cost::{Op, Spread};
use sim::serving::Control;
use std::collections::BTreeMap;

/// Values substituted for `{name}` in commands (`scenarios/published/fitted.toml`).
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Fitted {
    #[serde(default)]
    pub experiment: BTreeMap<String, f64>,
}

/// The program a row's command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    Forward,
    Kernel,
    Simulate,
}

impl Program {
    pub fn of(cmd: &str) -> Result<Program> {
        let c = cmd.trim_start();
        for (p, name) in [
            (Program::Forward, "twin forward"),
            (Program::Kernel, "twin kernel"),
            (Program::Simulate, "twin simulate"),
        ] {
            if c.starts_with(name) {
                return Ok(p);
            }
        }
        bail!("command `{cmd}` must start with `twin forward`, `twin kernel` or `twin simulate`")
    }
}

/// Whether a row is computed by a (slow) simulation.
pub fn is_simulation(row: &PublishedFigure) -> bool {
    Program::of(&row.command).ok() == Some(Program::Simulate)
}

/// A table command as an argument vector, placeholders filled.
fn argv(cmd: &str, program: &str, fitted: &Fitted) -> Result<Vec<String>> {
    let mut text = cmd.trim().to_string();
    for (k, v) in &fitted.experiment {
        text = text.replace(&format!("{{{k}}}"), &format_value(*v));
    }
    if text.contains('{') {
        bail!("command `{cmd}` has a placeholder with no value in scenarios/published/fitted.toml");
    }
    let rest = text
        .strip_prefix(program)
        .ok_or_else(|| anyhow!("command `{cmd}` must start with `{program}`"))?;
    let mut v = vec![program.to_string()];
    v.extend(rest.split_whitespace().map(str::to_string));
    Ok(v)
}

/// A fitted number as an override: an integer where it is whole (a DEP, a batch), as a
/// command line would give it.
pub fn fitted_value(v: f64) -> toml::Value {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        toml::Value::Integer(v as i64)
    } else {
        toml::Value::Float(v)
    }
}

/// A number as a command line takes it.
pub fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:e}")
    }
}

/// One figure of a priced step's in-situ layer, in seconds: `layer` (its wall time),
/// `STREAM.total` (the stream's kernels, bubbles and launch gaps), or
/// `STREAM.CATEGORY`.
fn in_situ_s(l: &sim::cost::insitu::InSituLayer, key: &str) -> Option<f64> {
    use spec::insitu::{Category, Stream};
    if key == "layer" {
        return Some(l.layer_s);
    }
    let (stream, cat) = key.split_once('.')?;
    let stream = Stream::from_key(stream)?;
    if cat == "total" {
        let extra = l.get(stream, Category::Bubble) + l.get(stream, Category::Launch);
        return Some(l.busy(stream) + extra);
    }
    Some(l.get(stream, Category::from_key(cat)?))
}

/// Runs rows; rows that share a simulation command and overrides share one run.
pub struct Evaluator<'a> {
    cli: &'a dyn CommandLine,
    pub fitted: Fitted,
    runs: BTreeMap<String, serde_json::Value>,
    /// The `--json` objects of a simulation row's band draws, by command.
    sim_bands: BTreeMap<String, Vec<serde_json::Value>>,
}

impl<'a> Evaluator<'a> {
    pub fn new(cli: &'a dyn CommandLine, fitted: Fitted) -> Self {
        Evaluator {
            cli,
            fitted,
            runs: BTreeMap::new(),
            sim_bands: BTreeMap::new(),
        }
    }

    /// The row's metric with `extra` overrides after the command's own.
    pub fn predict(&mut self, row: &PublishedFigure, extra: &[Set]) -> Result<f64> {
        let x = match Program::of(&row.command)? {
            Program::Simulate => self.simulation(row, extra)?,
            Program::Forward => self.forward(row, extra)?,
            Program::Kernel => self.kernel(row, extra)?,
        };
        if !x.is_finite() {
            bail!("row {}: the prediction is not a finite number", row.id);
        }
        Ok(x)
    }

    fn kernel_time(&self, cmd: &str, row: &PublishedFigure, extra: &[Set]) -> Result<KernelOut> {
        let mut req = self.kernel_request(cmd, row)?;
        req.sets.extend(extra);
        kernel(&req).with_context(|| format!("row {}", row.id))
    }

    fn kernel(&self, row: &PublishedFigure, extra: &[Set]) -> Result<f64> {
        let k = self.kernel_time(&row.command, row, extra)?;
        let base = match row.metric.as_str() {
            "time_ratio" => {
                if row.baseline.is_empty() {
                    bail!("row {}: metric time_ratio needs a baseline command", row.id);
                }
                Some(self.kernel_time(&row.baseline, row, extra)?)
            }
            _ => None,
        };
        kernel_metric(row, &k, base.as_ref())
    }

    /// The hardware a `twin kernel` row runs on (its `--hardware`, or the default).
    pub fn kernel_hardware(&self, row: &PublishedFigure) -> Result<String> {
        Ok(self.kernel_request(&row.command, row)?.hardware)
    }

    fn kernel_request(&self, cmd: &str, row: &PublishedFigure) -> Result<KernelRequest> {
        self.cli
            .kernel(&argv(cmd, "twin kernel", &self.fitted)?)
            .map_err(|e| anyhow!("row {}: `{cmd}`: {e}", row.id))
    }

    /// A `twin kernel` row's band: every draw prices the kernel (and its baseline,
    /// with the same draw) with the drawn parameters.
    fn kernel_band(&self, row: &PublishedFigure) -> Result<Option<Band>> {
        let args = self.kernel_request(&row.command, row)?;
        let (hw, p) = kernel_inputs(&args)?;
        let base: Option<(KernelRequest, _, _)> = match row.baseline.is_empty() {
            true => None,
            false => {
                let a = self.kernel_request(&row.baseline, row)?;
                let (bhw, bp) = kernel_inputs(&a)?;
                Some((a, bhw, bp))
            }
        };
        if p.spread.is_unknown() {
            return Ok(None);
        }
        let mut v = Vec::new();
        for z in Spread::normals(DEFAULT_DRAWS, DEFAULT_SEED) {
            let k = kernel_with(&args, &hw, p.spread.apply(&p, &z))?;
            let b = match &base {
                Some((a, bhw, bp)) => Some(kernel_with(a, bhw, bp.spread.apply(bp, &z))?),
                None => None,
            };
            v.push(kernel_metric(row, &k, b.as_ref())?);
        }
        // No draw moved it (measured kernel tables price the op, not the spread's
        // parameters): no band, rather than one of zero width.
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
        if p.tables.is_some() && hi - lo <= 1e-12 * hi.abs() {
            return Ok(None);
        }
        Ok(Some(Band::of(&v)))
    }

    /// The band of a row's metric over the kernel-fit spreads' draws (`sim_draws`
    /// simulations for a `twin simulate` row; 0: none); `None` when the row's
    /// hardware knows no spread.
    pub fn band(&mut self, row: &PublishedFigure, sim_draws: u32) -> Result<Option<Band>> {
        match Program::of(&row.command)? {
            Program::Kernel => self.kernel_band(row),
            Program::Forward => self.forward_band(row),
            Program::Simulate if sim_draws == 0 => Ok(None),
            Program::Simulate => self.simulation_band(row, sim_draws),
        }
    }

    fn forward_band(&self, row: &PublishedFigure) -> Result<Option<Band>> {
        let prep = prepare(&self.forward_request(&row.command, row, &[])?)
            .with_context(|| format!("row {}", row.id))?;
        let base = match row.baseline.is_empty() {
            true => None,
            false => Some(prepare(&self.forward_request(&row.baseline, row, &[])?)?),
        };
        let p = &prep.params;
        if p.spread.is_unknown() {
            return Ok(None);
        }
        let mut v = Vec::new();
        for z in Spread::normals(DEFAULT_DRAWS, DEFAULT_SEED) {
            let f = prep.price_with(p.spread.apply(p, &z))?;
            let b = match &base {
                Some(b) => Some(b.price_with(b.params.spread.apply(&b.params, &z))?),
                None => None,
            };
            v.push(forward_metric(row, &f, b.as_ref())?);
        }
        Ok(Some(Band::of(&v)))
    }

    fn simulation_band(&mut self, row: &PublishedFigure, draws: u32) -> Result<Option<Band>> {
        let key = format!("{} --band {draws}", row.command);
        let runs = match self.sim_bands.get(&key) {
            Some(v) => v.clone(),
            None => {
                let req = self.simulate_request(row)?;
                let (r, trace) = scenario::resolve_with_trace(&req)
                    .with_context(|| format!("row {}", row.id))?;
                let mut runs = Vec::new();
                if !r.params.spread.is_unknown() {
                    for (i, z) in Spread::normals(draws as usize, DEFAULT_SEED)
                        .iter()
                        .enumerate()
                    {
                        let p = r.params.spread.apply(&r.params, z);
                        let how = RunHow {
                            params: Some(&p),
                            ..RunHow::default()
                        };
                        let (report, _) = simulate(&r, &trace, how, &Control::default())
                            .with_context(|| format!("row {}: band draw {i}", row.id))?;
                        runs.push(to_json(&r, &report, trace.len())?);
                    }
                }
                self.sim_bands.insert(key, runs.clone());
                runs
            }
        };
        if runs.is_empty() {
            return Ok(None);
        }
        let v: Vec<f64> = runs
            .iter()
            .map(|j| json_metric(row, j))
            .collect::<Result<_>>()?;
        Ok(Some(Band::of(&v)))
    }
}

impl Evaluator<'_> {
    fn forward_request(
        &self,
        cmd: &str,
        row: &PublishedFigure,
        extra: &[Set],
    ) -> Result<StepRequest> {
        let mut req = self
            .cli
            .forward(&argv(cmd, "twin forward", &self.fitted)?)
            .map_err(|e| anyhow!("row {}: `{cmd}`: {e}", row.id))?;
        req.sets.extend(extra);
        Ok(req)
    }

    fn simulate_request(&self, row: &PublishedFigure) -> Result<scenario::RunRequest> {
        self.cli
            .simulate(&argv(&row.command, "twin simulate", &self.fitted)?)
            .map_err(|e| anyhow!("row {}: {e}", row.id))
    }

    fn forward(&self, row: &PublishedFigure, extra: &[Set]) -> Result<f64> {
        let f = forward(&self.forward_request(&row.command, row, extra)?)
            .with_context(|| format!("row {}", row.id))?;
        let base = match row.metric.as_str() {
            "gain_pct" => {
                if row.baseline.is_empty() {
                    bail!("row {}: metric gain_pct needs a baseline command", row.id);
                }
                Some(forward(&self.forward_request(
                    &row.baseline,
                    row,
                    extra,
                )?)?)
            }
            _ => None,
        };
        forward_metric(row, &f, base.as_ref())
    }

    /// A `twin simulate ...` row: its metric is `json:PATH` (dotted path into the
    /// `--json` object, numeric segments index lists).
    fn simulation(&mut self, row: &PublishedFigure, extra: &[Set]) -> Result<f64> {
        let texts: Vec<&str> = extra.iter().map(|s| s.text.as_str()).collect();
        let key = format!("{} {}", row.command, texts.join(" "));
        let v = match self.runs.get(&key) {
            Some(v) => v.clone(),
            None => {
                let mut req = self.simulate_request(row)?;
                req.sets.extend(extra);
                let (r, report, records) =
                    execute(&req).with_context(|| format!("row {}", row.id))?;
                let v = to_json(&r, &report, records)?;
                self.runs.insert(key, v.clone());
                v
            }
        };
        json_metric(row, &v)
    }
}

/// A kernel row's metric from its priced kernel (and baseline).
fn kernel_metric(row: &PublishedFigure, k: &KernelOut, base: Option<&KernelOut>) -> Result<f64> {
    let r = &k.result;
    Ok(match row.metric.as_str() {
        "time_us" => r.time_s * 1e6,
        "tflops" => r.tflops(),
        "gb_s" => r.gb_s(),
        "time_ratio" => {
            let b = base.ok_or_else(|| {
                anyhow!("row {}: metric time_ratio needs a baseline command", row.id)
            })?;
            r.time_s / b.result.time_s
        }
        other => bail!(
            "row {}: unknown kernel metric `{other}` (time_us, tflops, gb_s, time_ratio)",
            row.id
        ),
    })
}

/// A forward row's metric from its priced step (and baseline).
fn forward_metric(row: &PublishedFigure, f: &Forward, base: Option<&Forward>) -> Result<f64> {
    let r = &f.result;
    Ok(match row.metric.as_str() {
        "step_ms" => r.step_s() * 1e3,
        "target_step_ms" => r.target_step_s() * 1e3,
        "user_tok_s" => r.tokens_per_s_per_user,
        "gain_pct" => {
            let b = base.ok_or_else(|| {
                anyhow!("row {}: metric gain_pct needs a baseline command", row.id)
            })?;
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
        m if m.starts_with("in_situ_ms:") => {
            let key = &m["in_situ_ms:".len()..];
            in_situ_s(&r.total.in_situ, key).ok_or_else(|| {
                anyhow!(
                    "row {}: unknown in-situ figure `{key}` (layer, STREAM.total, or STREAM.CATEGORY with STREAM compute or comm)",
                    row.id
                )
            })? * 1e3
        }
        other => bail!(
            "row {}: unknown metric `{other}` (step_ms, target_step_ms, user_tok_s, gain_pct, target_share_pct:OP[+OP], in_situ_ms:FIGURE)",
            row.id
        ),
    })
}

/// A simulation row's metric read off a run's `--json` object.
fn json_metric(row: &PublishedFigure, v: &serde_json::Value) -> Result<f64> {
    let path = row.metric.strip_prefix("json:").ok_or_else(|| {
        anyhow!(
            "row {}: a simulation row's metric is json:PATH, got `{}`",
            row.id,
            row.metric
        )
    })?;
    let mut cur = v;
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
