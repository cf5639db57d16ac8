//! `twin calibrate --from-runs CORPUS --out PROFILE`: the terms physics leaves open
//! (`measured::fit::TERMS`) fitted to measured runs per engine and GPU family,
//! with leave-one-model-out and leave-one-GPU-out cross-validation printed beside the
//! in-sample fit, every figure checked by simulating the records again under the
//! terms of a fit that did not see them; bands from the cross-validated residuals.

use anyhow::Result;
use calibration::runs::{GroupFit, RunsProfile};
use measured::calibrate::{fit_corpus, gate, FitOptions};
use measured::predict::Center;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct FromRunsArgs {
    /// Fit the terms physics leaves open to a corpus of measured runs (an embedded
    /// name such as `aic-silicon-train`, or a file): per engine and GPU family, with
    /// leave-one-model-out and leave-one-GPU-out cross-validation; --out writes the
    /// profile `simulate`, `plan`, `sweep` and `validate runs` take with --profile.
    #[arg(long, value_name = "CORPUS")]
    pub from_runs: Option<String>,
    /// With --from-runs: keep only records that pass (as `validate runs --filter`).
    #[arg(long = "filter", value_name = "KEY=VALUE", requires = "from_runs")]
    pub filter: Vec<String>,
    /// With --from-runs: the predicted statistic a record's central figure is compared
    /// with.
    #[arg(long, value_enum, default_value = "mean", requires = "from_runs")]
    pub center: Center,
    /// With --from-runs: the seed of every simulation.
    #[arg(long, default_value_t = 1, requires = "from_runs")]
    pub seed: u64,
    /// With --from-runs: fit only these terms (comma-separated keys of the term table,
    /// docs/guide/calibrate.md); the others stay at their priors.
    #[arg(long, value_delimiter = ',', requires = "from_runs")]
    pub terms: Vec<String>,
    /// With --from-runs: scale every prior's standard deviation (below 1: terms kept
    /// nearer their priors).
    #[arg(long, default_value_t = 1.0, requires = "from_runs")]
    pub prior_scale: f64,
    /// With --from-runs: keep the linearised records in this file and read them from it
    /// when it holds this corpus, filters, seed and statistic (the linearisation is the
    /// slow part: one simulation a record and one more per term).
    #[arg(long, value_name = "FILE", requires = "from_runs")]
    pub linearised: Option<PathBuf>,
    /// With --from-runs: report the linear model's cross-validation, without simulating
    /// the records again under each fold's terms (fast, for comparing term sets).
    #[arg(long, requires = "from_runs")]
    pub no_check: bool,
    /// With --from-runs: keep only the groups whose leave-one-model-out check beats
    /// physics alone (their priors) on the fit's objective, the median |error| of TPOT
    /// plus a quarter of TTFT's; the others are left out of --out and price by physics.
    #[arg(long, requires = "from_runs")]
    pub only_improving: bool,
    /// With --only-improving: another term set (comma-separated keys), tried for each
    /// group whose fit of the sets before it does not beat physics alone; the group
    /// keeps the first set that does (repeatable, tried in order).
    #[arg(long = "or-terms", value_name = "TERMS", requires = "only_improving")]
    pub or_terms: Vec<String>,
}

impl FromRunsArgs {
    /// The fit these flags ask for.
    fn options(&self) -> FitOptions {
        FitOptions {
            filter: self.filter.clone(),
            center: self.center,
            seed: self.seed,
            terms: self.terms.clone(),
            prior_scale: self.prior_scale,
            linearised: self.linearised.clone(),
            no_check: self.no_check,
            or_terms: self.or_terms.clone(),
        }
    }
}

pub fn run(a: &FromRunsArgs, corpus_name: &str, out: Option<&std::path::Path>) -> Result<()> {
    let say = |s: &str| eprintln!("{s}");
    let fitted = fit_corpus(&a.options(), corpus_name, &say)?;
    let fits = fitted.fits;
    print_fits(&fits, &fitted.skipped, fitted.records, a.no_check);
    let fits = if a.only_improving {
        let (kept, lines) = gate(fits, &fitted.physics_bands);
        println!();
        for l in lines {
            println!("{l}");
        }
        kept
    } else {
        fits
    };
    let profile = RunsProfile {
        kind: RunsProfile::KIND.into(),
        version: 1,
        created_by: format!("twin {} calibrate --from-runs", env!("CARGO_PKG_VERSION")),
        created_utc: calibration::profile::utc_now(),
        corpus: fitted.origin,
        filters: a.filter.clone(),
        center: format!("{:?}", a.center).to_lowercase(),
        seed: a.seed,
        groups: fits,
    };
    if let Some(out) = out {
        let text = format!(
            "# Terms fitted to measured runs by `twin calibrate --from-runs {corpus_name}`; price with --profile {}\n{}",
            out.display(),
            toml::to_string(&profile)?
        );
        let tmp = out.with_extension("toml.partial");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, out)?;
        println!("wrote {}", out.display());
    }
    Ok(())
}

/// Group `g`'s terms, which of them were fitted, and their spread over the fits that
/// left one model out.
fn print_terms(g: &GroupFit) {
    let terms: Vec<String> = g
        .terms
        .iter()
        .map(|(k, v)| {
            let (x, unit, digits) = in_units(k, *v);
            format!("{k} {x:.digits$}{unit}")
        })
        .collect();
    println!("  terms: {}", terms.join(", "));
    if !g.fitted.is_empty() {
        println!(
            "  fitted: {} (the others at their priors)",
            g.fitted.join(", ")
        );
    }
    if !g.term_spread.is_empty() {
        let cells: Vec<String> = g
            .term_spread
            .iter()
            .map(|(k, [lo, hi])| term_range(k, *lo, *hi))
            .collect();
        println!(
            "  spread over the fits leaving one model out: {}",
            cells.join(", ")
        );
    }
}

/// A term's value as `calibrate` prints it: seconds in ms (2 digits), a streamed
/// chunk's in us (1 digit), factors as they are (3 digits); the value, its unit's
/// suffix and the digits.
fn in_units(key: &str, v: f64) -> (f64, &'static str, usize) {
    if key == "frontend_chunk_s" {
        (v * 1e6, " us", 1)
    } else if key.ends_with("_s") {
        (v * 1e3, " ms", 2)
    } else {
        (v, "", 3)
    }
}

/// A term's range, in the units of [`in_units`].
fn term_range(key: &str, lo: f64, hi: f64) -> String {
    let ((lo, unit, digits), (hi, _, _)) = (in_units(key, lo), in_units(key, hi));
    format!("{key} {lo:.digits$}-{hi:.digits$}{unit}")
}

/// Each model's own band in group `g`, a line each.
fn print_model_bands(g: &GroupFit) {
    for (id, mb) in &g.model_bands {
        let cells: Vec<String> = mb
            .band
            .iter()
            .map(|(m, [lo, hi])| format!("{m} x{lo:.2}-{hi:.2}"))
            .collect();
        println!(
            "  own band of {id} ({} runs): {}",
            mb.records,
            cells.join(", ")
        );
    }
}

fn print_fits(fits: &[GroupFit], skipped: &BTreeMap<String, usize>, n: usize, no_check: bool) {
    let fitted: usize = fits.iter().map(|g| g.records).sum();
    let how = if no_check {
        "errors of the linear model (--no-check: the records not simulated again)"
    } else {
        "errors from simulating each record again"
    };
    println!(
        "fitted {fitted} of {n} records in {} groups (engine x GPU family); {how}:",
        fits.len()
    );
    println!("  in-sample: terms fitted to every record of the group; leave-one-model-out / -gpu-out / -run-out: terms fitted without the record's model / GPU / itself");
    println!("  within: TTFT within 25%, TPOT within 15%; band: measured inside the p10-p90 band from nested cross-validated residuals");
    for g in fits {
        println!();
        println!(
            "{} on {} ({}; {} records; models: {})",
            g.engine,
            g.family,
            g.gpus.join(", "),
            g.records,
            g.models.join(", ")
        );
        print_terms(g);
        for (scheme, figs) in &g.cv {
            let cells: Vec<String> = figs
                .iter()
                .map(|(m, f)| {
                    format!(
                        "{m} within {:.0}% (|err| {:.1}%{})",
                        100.0 * f.within,
                        100.0 * f.median_abs_error,
                        f.band_coverage
                            .map(|c| format!(", band {:.0}%", 100.0 * c))
                            .unwrap_or_default()
                    )
                })
                .collect();
            println!("  {scheme:<20} {}", cells.join("; "));
        }
        print_model_bands(g);
    }
    for (why, k) in skipped {
        println!("not fitted: {k} x {why}");
    }
}
