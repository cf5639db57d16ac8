//! One module per subcommand.

pub mod calibrate;
pub mod cost;
pub mod forward;
pub mod interrupt;
pub mod kernel;
pub mod live;
pub mod plan;
pub mod simulate;
pub mod sweep;
pub mod validate;
pub mod validate_live;

use crate::scenario::{embedded_names, Kind, Set};
use anyhow::{anyhow, bail, Result};
use sim::cost::CostParams;
use sim::validate::Field;
use sim::Hardware;

/// A deployment field in the words of `twin forward` and `sweep`: its flag.
pub fn flag(f: &Field) -> String {
    match f {
        Field::Path(p) => p.clone(),
        Field::Dep => "--dep".into(),
        Field::Tp => "--tp".into(),
        Field::RedundantExperts => "--redundant-experts".into(),
        Field::BatchPerRank => "--batch-per-rank".into(),
    }
}

/// The cost parameters a command prices with, in layers: the analytic defaults; then
/// the hardware file's `[cost]` (fitted to published figures); then a calibration
/// profile's measured efficiencies and fixed costs (`--profile`), for the operations it
/// has fits for; then `--set cost.KEY=VALUE` overrides.
pub fn cost_params(
    hardware: &Hardware,
    profile: Option<&str>,
    cost_sets: &[Set],
) -> Result<CostParams> {
    let mut params = CostParams::default();
    for (k, v) in &hardware.cost {
        params
            .set(k, *v)
            .map_err(|e| anyhow!("hardware {}: cost.{k}: {e}", hardware.name))?;
    }
    let mut source = if hardware.cost.is_empty() {
        params.source.clone()
    } else {
        format!(
            "analytic defaults + {} fitted cost parameters of {}",
            hardware.cost.len(),
            hardware.name
        )
    };
    if let Some(path) = profile {
        let prof = calibration::Profile::load(std::path::Path::new(path))
            .map_err(|e| anyhow!("--profile {path}: {e}"))?;
        params = prof.cost_params(&params);
        source = format!("{source} + {}", prof.source());
    }
    for s in cost_sets {
        let key = s.path.join(".");
        let v = match &s.value {
            toml::Value::Float(f) => *f,
            toml::Value::Integer(i) => *i as f64,
            _ => bail!("--set {}: a cost parameter takes a number", s.text),
        };
        params
            .set(&key, v)
            .map_err(|e| anyhow!("--set {}: {e}", s.text))?;
    }
    if !cost_sets.is_empty() {
        source = format!("{source} + {} --set overrides", cost_sets.len());
    }
    params.source = source;
    Ok(params)
}

pub fn list() -> Result<()> {
    for (title, kind) in [
        ("hardware", Kind::Hardware),
        ("models", Kind::Model),
        ("workloads", Kind::Workload),
        ("scenarios", Kind::Scenario),
        ("tco presets", Kind::Tco),
    ] {
        println!("{title}: {}", embedded_names(kind).join(", "));
    }
    Ok(())
}
