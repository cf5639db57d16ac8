//! A profile of terms fitted to measured runs (`twin calibrate --from-runs --out`),
//! read and applied: the group of the run's engine and GPU family sets its in-situ
//! factors and host term on the cost parameters, and its front end on the scenario
//! where the scenario does not set one.

use anyhow::{anyhow, Result};
use calibration::runs::{GroupFit, RunsProfile};
use sim::cost::CostParams;
use std::path::Path;

/// The runs profile at `path`, or `None` when the file is another kind of profile.
pub fn read(path: &Path) -> Result<Option<RunsProfile>> {
    let shown = path.display().to_string();
    let text = crate::scenario::read_text(&shown).map_err(|e| anyhow!("--profile {shown}: {e}"))?;
    if !RunsProfile::is_runs_profile(&text) {
        return Ok(None);
    }
    RunsProfile::parse(&text)
        .map(Some)
        .map_err(|e| anyhow!("--profile {shown}: {e}"))
}

/// Sets a group's cost terms on `params` (every factor applying to every step, as
/// fitted; element-wise kernels with their phase's GEMMs); returns its front end, if
/// it has one.
pub fn apply_terms(params: &mut CostParams, g: &GroupFit) -> Result<Option<f64>, String> {
    params.set("in_situ.tp_residuals", 1.0)?;
    let mut frontend = None;
    for (key, &v) in &g.terms {
        if key == "frontend_s" {
            frontend = Some(v);
            continue;
        }
        params.set(key, v)?;
        if let Some(phase) = key.strip_suffix(".gemm") {
            params.set(&format!("{phase}.elementwise"), v)?;
        }
    }
    Ok(frontend)
}

/// How a group's terms read in a cost model's source line.
pub fn describe(g: &GroupFit, profile: &Path) -> String {
    format!(
        "terms fitted to {} measured runs of {} on {} ({}; --profile {})",
        g.records,
        g.engine,
        g.family,
        g.models.len().to_string() + " models",
        profile.display()
    )
}
