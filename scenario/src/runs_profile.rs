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

/// A group's terms that are the serving section's knobs, not cost parameters: the
/// front end's work per request and its API server's per streamed chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServingTerms {
    pub frontend_s: Option<f64>,
    pub frontend_chunk_s: Option<f64>,
}

impl ServingTerms {
    /// Sets them on `serving`: every one the group has, or with `only_unset` only
    /// where the scenario sets none (a group's fitted terms only: `fitted`).
    pub fn set_on(&self, serving: &mut sim::serving::config::ServingConfig, only_unset: bool) {
        if let Some(f) = self.frontend_s {
            if !only_unset || serving.frontend_s.is_none() {
                serving.frontend_s = Some(f);
            }
        }
        if let Some(c) = self.frontend_chunk_s {
            if !only_unset || serving.frontend_chunk_s.is_none() {
                // A linear fit may step below zero: no time is less than none.
                serving.frontend_chunk_s = Some(c.max(0.0));
            }
        }
    }

    /// The group's fitted ones (a term left at its prior says nothing).
    pub fn fitted(g: &GroupFit) -> ServingTerms {
        let get = |k: &str| g.terms.get(k).copied().filter(|_| g.fitted_term(k));
        ServingTerms {
            frontend_s: get("frontend_s"),
            frontend_chunk_s: get("frontend_chunk_s"),
        }
    }
}

/// Sets a group's cost terms on `params` (every factor applying to every step, as
/// fitted); returns its serving terms (the front end's).
pub fn apply_terms(
    params: &mut CostParams,
    g: &GroupFit,
) -> Result<ServingTerms, sim::cost::params::ParamError> {
    params.set("in_situ.tp_residuals", 1.0)?;
    let before = std::mem::take(&mut params.in_situ.source);
    let mut serving = ServingTerms::default();
    for (key, &v) in &g.terms {
        match key.as_str() {
            "frontend_s" => serving.frontend_s = Some(v),
            "frontend_chunk_s" => serving.frontend_chunk_s = Some(v),
            _ => params.set(key, v)?,
        }
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
    Ok(serving)
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

    /// A group's front-end terms are the serving section's, not cost parameters: the
    /// cost factor lands on the parameters, the two front-end terms come back, a fitted
    /// one sets a scenario that sets none, and a chunk's time below zero reads as none.
    #[test]
    fn the_front_end_terms_go_to_the_serving_section() {
        let mut g = shipped().expect("shipped").groups[0].clone();
        g.physics_alone = false;
        g.terms = [
            ("frontend_s".to_string(), 0.02),
            ("frontend_chunk_s".to_string(), -1e-6),
            ("in_situ.decode.gemm".to_string(), 1.1),
        ]
        .into_iter()
        .collect();
        g.fitted = vec!["frontend_chunk_s".into(), "in_situ.decode.gemm".into()];
        let mut params = CostParams::default();
        let terms = apply_terms(&mut params, &g).expect("applies");
        assert_eq!(params.in_situ.decode.gemm, 1.1);
        assert_eq!(terms.frontend_s, Some(0.02));
        assert_eq!(terms.frontend_chunk_s, Some(-1e-6));
        // Only the fitted ones, only where the scenario sets none.
        let fitted = ServingTerms::fitted(&g);
        assert_eq!(fitted.frontend_s, None);
        let mut serving: sim::serving::config::ServingConfig =
            toml::from_str("").expect("every serving knob has a default");
        serving.frontend_chunk_s = Some(5e-5);
        fitted.set_on(&mut serving, true);
        assert_eq!(serving.frontend_chunk_s, Some(5e-5));
        serving.frontend_chunk_s = None;
        fitted.set_on(&mut serving, true);
        assert_eq!(serving.frontend_chunk_s, Some(0.0));
        assert_eq!(serving.frontend_s, None);
        // Every one the group has, set or not (as a fit applies its terms).
        terms.set_on(&mut serving, false);
        assert_eq!(serving.frontend_s, Some(0.02));
    }

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
