//! A profile of terms fitted to measured runs (`twin calibrate --from-runs --out`),
//! read and applied: the group of the run's engine and GPU family sets its in-situ
//! factors and host term on the cost parameters, and its front end on the scenario
//! where the scenario does not set one.

use anyhow::{anyhow, Result};
use calibration::runs::{GroupFit, RunsProfile};
use sim::cost::CostParams;
use std::path::Path;

/// The shipped terms (`scenarios/runs/fitted.toml`, fitted to the embedded corpus by
/// `scripts/runs-fit.sh`), which price every run of an engine twin has them for
/// unless `--physics-only`; `None` when none are shipped.
pub fn shipped() -> Option<&'static RunsProfile> {
    static SHIPPED: std::sync::OnceLock<Option<RunsProfile>> = std::sync::OnceLock::new();
    SHIPPED
        .get_or_init(|| {
            let text = crate::embedded_file("runs/fitted.toml")?;
            RunsProfile::parse(text).ok()
        })
        .as_ref()
}

/// The runs profile that prices a run: `--profile`'s when it is one (its path), else
/// the shipped one unless `physics_only`.
pub fn choose(profile: Option<&str>, physics_only: bool) -> Result<Option<(RunsProfile, String)>> {
    if let Some(path) = profile {
        if let Some(p) = read(Path::new(path))? {
            return Ok(Some((p, format!("--profile {path}"))));
        }
        return Ok(None);
    }
    if physics_only {
        return Ok(None);
    }
    Ok(shipped().map(|p| {
        (
            p.clone(),
            "scenarios/runs/fitted.toml (shipped; --physics-only leaves them out)".to_string(),
        )
    }))
}

/// The runs profile at `path`, or `None` when the file is another kind of profile.
pub fn read(path: &Path) -> Result<Option<RunsProfile>> {
    let shown = path.display().to_string();
    let text = crate::read_text(&shown).map_err(|e| anyhow!("--profile {shown}: {e}"))?;
    if !RunsProfile::is_runs_profile(&text) {
        return Ok(None);
    }
    RunsProfile::parse(&text)
        .map(Some)
        .map_err(|e| anyhow!("--profile {shown}: {e}"))
}

/// Sets a group's cost terms on `params` (every factor applying to every step, as
/// fitted); returns its front end, if it has one.
pub fn apply_terms(
    params: &mut CostParams,
    g: &GroupFit,
) -> Result<Option<f64>, sim::cost::params::ParamError> {
    params.set("in_situ.tp_residuals", 1.0)?;
    let before = std::mem::take(&mut params.in_situ.source);
    let mut frontend = None;
    for (key, &v) in &g.terms {
        if key == "frontend_s" {
            frontend = Some(v);
            continue;
        }
        params.set(key, v)?;
    }
    // `forward`'s in-situ line says where the factors came from, and what set the
    // rest of the in-situ terms.
    let fitted = format!(
        "factors fitted to {} measured runs of {}",
        g.records,
        g.name()
    );
    params.in_situ.source = if before.is_empty() {
        fitted
    } else {
        format!("{fitted}; the other terms: {before}")
    };
    Ok(frontend)
}

pub use sim::serving::runs_band::RunsBand;

/// The band of `rp`'s group of `engine` on `hardware` (`from`: where the profile came
/// from), if it has one with a band; it names the group's model that `model` (the
/// run's, as a scenario names it) is, when it is one of them, and is then that model's
/// own band where the group has one.
pub fn band_of(
    rp: &RunsProfile,
    from: &str,
    engine: &str,
    hardware: &str,
    model: &str,
) -> Option<RunsBand> {
    let g = rp.group_of(engine, hardware)?;
    if g.band.is_empty() {
        return None;
    }
    let includes = g
        .models
        .iter()
        .find(|id| sim::serving::runs_band::same_model(model, id))
        .map(|id| (id.clone(), corpus_name(&rp.corpus)));
    // A model the group holds enough runs of carries its own runs' band (a metric
    // with too few of them: the group's).
    let own = includes
        .as_ref()
        .and_then(|(id, _)| g.model_bands.get(id))
        .filter(|mb| !mb.band.is_empty());
    let mut band = g.band.clone();
    if let Some(mb) = own {
        band.extend(mb.band.iter().map(|(k, v)| (k.clone(), *v)));
    }
    Some(RunsBand {
        group: g.name(),
        records: g.records,
        models: g.models.len(),
        by_terms: !g.physics_alone,
        from: from.to_string(),
        band,
        includes,
        own: own.map(|mb| sim::serving::runs_band::OwnBand {
            records: mb.records,
            unseen: g.band.clone(),
        }),
    })
}

/// A profile's corpus as `twin validate runs` takes it: an embedded one by its name
/// (`scenarios/runs/aic-silicon-train.jsonl.gz (embedded)` is `aic-silicon-train`),
/// a file by its path.
fn corpus_name(corpus: &str) -> String {
    match corpus.strip_suffix(" (embedded)") {
        Some(path) => {
            let file = path.rsplit('/').next().unwrap_or(path);
            file.strip_suffix(".jsonl.gz")
                .or_else(|| file.strip_suffix(".jsonl"))
                .unwrap_or(file)
                .to_string()
        }
        None => corpus.to_string(),
    }
}

/// How a group's terms read in a cost model's source line (`from`: where the profile
/// came from).
pub fn describe(g: &GroupFit, from: &str) -> String {
    format!(
        "terms fitted to {} measured runs of {} ({} models; {from})",
        g.records,
        g.name(),
        g.models.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped profile reads (a file that does not would price every run by
    /// physics alone without a word) and its groups' terms are those that passed the
    /// gate of `scripts/runs-fit.sh` (`--only-improving`), the others priced by physics
    /// alone; that its terms are the fit's is checked beside the fit (`measured::fit`).
    #[test]
    fn the_shipped_terms_read_and_passed_their_gate() {
        let text = crate::embedded_file("runs/fitted.toml").expect("shipped");
        let p = RunsProfile::parse(text).expect("scenarios/runs/fitted.toml reads");
        assert!(shipped().is_some());
        assert!(!p.groups.is_empty());
        for g in &p.groups {
            let score = |row: &str| -> Option<f64> {
                let f = g.cv.get(row)?;
                Some(f.get("tpot_ms")?.median_abs_error + 0.25 * f.get("ttft_ms")?.median_abs_error)
            };
            let (lomo, physics) = (score("leave-one-model-out"), score("physics alone"));
            let beats = matches!((lomo, physics), (Some(c), Some(p)) if c < p);
            // A group priced by physics alone is one whose terms did not beat it, and
            // it carries no terms.
            assert_eq!(beats, !g.physics_alone, "{} on {}", g.engine, g.family);
            assert!(!g.physics_alone || g.terms.is_empty());
            // A kept group of several models carries each fitted term's spread over the
            // fits that left one model out.
            if !g.physics_alone && g.models.len() > 1 {
                for k in &g.fitted {
                    let [lo, hi] = g.term_spread[k];
                    assert!(lo <= hi && lo >= 0.0, "{} on {}: {k}", g.engine, g.family);
                }
            }
        }
    }
}
