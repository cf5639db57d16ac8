//! Computing a table row: its command parsed with the CLI's own argument parsers, run
//! with extra `--set` overrides (the values being fitted), and its metric read off.

use crate::args::SimulateArgs;
use crate::kernel::{evaluate as kernel, KernelArgs, KernelOut};
use crate::simulation::{execute, to_json};
use crate::step::{evaluate as forward, ForwardArgs};
use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use fitting::Row;
use serde::Deserialize;
use sim::cost::Op;
use std::collections::BTreeMap;

/// Values substituted for `{name}` in commands (`scenarios/published/fitted.toml`).
#[derive(Debug, Clone, Deserialize, Default)]
pub struct Fitted {
    #[serde(default)]
    pub experiment: BTreeMap<String, f64>,
}

#[derive(Parser)]
#[command(name = "twin forward")]
struct ForwardCli {
    #[command(flatten)]
    args: ForwardArgs,
}

#[derive(Parser)]
#[command(name = "twin kernel")]
struct KernelCli {
    #[command(flatten)]
    args: KernelArgs,
}

#[derive(Parser)]
#[command(name = "twin simulate")]
struct SimulateCli {
    #[command(flatten)]
    args: SimulateArgs,
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
pub fn is_simulation(row: &Row) -> bool {
    Program::of(&row.command).ok() == Some(Program::Simulate)
}

/// A table command as an argument vector, placeholders filled and `extra` overrides
/// appended.
fn argv(cmd: &str, program: &str, fitted: &Fitted, extra: &[String]) -> Result<Vec<String>> {
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
    for e in extra {
        v.push("--set".into());
        v.push(e.clone());
    }
    Ok(v)
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
    use sim::cost::insitu::{Category, Stream};
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
#[derive(Default)]
pub struct Evaluator {
    pub fitted: Fitted,
    runs: BTreeMap<String, serde_json::Value>,
}

impl Evaluator {
    pub fn new(fitted: Fitted) -> Self {
        Evaluator {
            fitted,
            runs: BTreeMap::new(),
        }
    }

    /// The row's metric with `extra` `--set` overrides.
    pub fn predict(&mut self, row: &Row, extra: &[String]) -> Result<f64> {
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

    fn kernel_time(&self, cmd: &str, row: &Row, extra: &[String]) -> Result<KernelOut> {
        let args = KernelCli::try_parse_from(argv(cmd, "twin kernel", &self.fitted, extra)?)
            .map(|c| c.args)
            .map_err(|e| anyhow!("row {}: `{cmd}`: {e}", row.id))?;
        kernel(&args).with_context(|| format!("row {}", row.id))
    }

    fn kernel(&self, row: &Row, extra: &[String]) -> Result<f64> {
        let k = self.kernel_time(&row.command, row, extra)?;
        let r = &k.result;
        Ok(match row.metric.as_str() {
            "time_us" => r.time_s * 1e6,
            "tflops" => r.tflops(),
            "gb_s" => r.gb_s(),
            "time_ratio" => {
                if row.baseline.is_empty() {
                    bail!("row {}: metric time_ratio needs a baseline command", row.id);
                }
                let b = self.kernel_time(&row.baseline, row, extra)?;
                r.time_s / b.result.time_s
            }
            other => bail!(
                "row {}: unknown kernel metric `{other}` (time_us, tflops, gb_s, time_ratio)",
                row.id
            ),
        })
    }

    fn forward_args(&self, cmd: &str, row: &Row, extra: &[String]) -> Result<ForwardArgs> {
        ForwardCli::try_parse_from(argv(cmd, "twin forward", &self.fitted, extra)?)
            .map(|c| c.args)
            .map_err(|e| anyhow!("row {}: `{cmd}`: {e}", row.id))
    }

    fn forward(&self, row: &Row, extra: &[String]) -> Result<f64> {
        let f = forward(&self.forward_args(&row.command, row, extra)?)
            .with_context(|| format!("row {}", row.id))?;
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
                let b = forward(&self.forward_args(&row.baseline, row, extra)?)?;
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

    /// A `twin simulate ...` row: its metric is `json:PATH` (dotted path into the
    /// `--json` object, numeric segments index lists).
    fn simulation(&mut self, row: &Row, extra: &[String]) -> Result<f64> {
        let key = format!("{} {}", row.command, extra.join(" "));
        let v = match self.runs.get(&key) {
            Some(v) => v.clone(),
            None => {
                let mut args = SimulateCli::try_parse_from(argv(
                    &row.command,
                    "twin simulate",
                    &self.fitted,
                    &[],
                )?)
                .map(|c| c.args)
                .map_err(|e| anyhow!("row {}: {e}", row.id))?;
                args.set.extend(extra.iter().cloned());
                let (r, report, records) =
                    execute(&args).with_context(|| format!("row {}", row.id))?;
                let v = to_json(&r, &report, records)?;
                self.runs.insert(key, v.clone());
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
}
