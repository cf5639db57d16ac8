//! In-situ factors: how much longer (or shorter) each op category takes inside a
//! running deployment (a trace's layers) than twin's isolated price of it.
//!
//! [`fit_factors`] is pure: per category present in both the measured layers and the
//! prediction, the factor is the mean measured layer's seconds over the predicted
//! seconds, with its spread over the layers (the 10th and 90th percentiles of the
//! per-layer ratios, linearly interpolated, and their coefficient of variation).
//! [`to_toml`] writes the `[in_situ]` section of a profile; [`section_of`] reads it
//! back as the cost keys it sets (what `--profile SECTION` applies).

use crate::error::Result;
use serde::{Deserialize, Serialize};
use spec::insitu::{Category, LayerBreakdown};
use std::collections::BTreeMap;
use std::path::Path;

/// One category's in-situ factor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Factor {
    pub category: Category,
    /// Mean measured seconds / predicted seconds.
    pub factor: f64,
    pub p10: f64,
    pub p90: f64,
    /// The smallest and largest per-layer ratio: a mean outside p10-p90 (a few layers
    /// far from the rest) is read with them.
    pub min: f64,
    pub max: f64,
    /// Standard deviation over mean of the per-layer ratios (population).
    pub cv: f64,
    /// Layers the spread is taken over.
    pub layers: usize,
}

/// The factors of every category both sides have, in `Category::ALL` order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InSituFit {
    pub layers: usize,
    pub factors: Vec<Factor>,
}

impl InSituFit {
    pub fn get(&self, category: Category) -> Option<&Factor> {
        self.factors.iter().find(|f| f.category == category)
    }
}

/// Factors per category from `measured` layers (one breakdown each) against
/// `predicted` (twin's isolated prices of one layer of the same deployment). A category
/// counts when the prediction gives it positive time and some measured layer does too;
/// derived categories (bubble, launch) count like any other.
pub fn fit_factors(measured: &[LayerBreakdown], predicted: &LayerBreakdown) -> InSituFit {
    let mut factors = Vec::new();
    for c in Category::ALL {
        let p = predicted.category(c);
        if !(p > 0.0 && p.is_finite()) || measured.is_empty() {
            continue;
        }
        let per: Vec<f64> = measured.iter().map(|m| m.category(c)).collect();
        if per.iter().all(|&s| s <= 0.0) {
            continue;
        }
        let n = per.len() as f64;
        let mut ratios: Vec<f64> = per.iter().map(|s| s / p).collect();
        let mean = ratios.iter().sum::<f64>() / n;
        let var = ratios.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n;
        ratios.sort_by(f64::total_cmp);
        factors.push(Factor {
            category: c,
            factor: (per.iter().sum::<f64>() / n) / p,
            p10: spec::stats::percentile_sorted(&ratios, 0.1),
            p90: spec::stats::percentile_sorted(&ratios, 0.9),
            min: ratios[0],
            max: ratios[ratios.len() - 1],
            cv: if mean > 0.0 { var.sqrt() / mean } else { 0.0 },
            layers: per.len(),
        });
    }
    InSituFit {
        layers: measured.len(),
        factors,
    }
}

impl Factor {
    /// Whether the mean lies outside p10-p90 (beyond rounding): a few layers far
    /// from the rest pull it there, and p10-p90 alone would contradict it.
    pub fn mean_outside_p10_p90(&self) -> bool {
        let tol = 5e-4 * self.factor.abs().max(1e-12);
        self.factor < self.p10 - tol || self.factor > self.p90 + tol
    }

    /// The log-space standard deviation of the factor over the layers (log-normal
    /// with the factor's coefficient of variation): what a hardware file's
    /// `[cost.spread]` `"in_situ.CATEGORY"` key holds.
    pub fn log_spread(&self) -> f64 {
        (1.0 + self.cv * self.cv).ln().sqrt()
    }
}

#[derive(Serialize, Deserialize)]
struct Section {
    in_situ: InSitu,
}

#[derive(Serialize, Deserialize)]
struct InSitu {
    source: Source,
    configuration: String,
    date: String,
    /// Applying the factors also sets `in_situ.tp_residuals = 1` (a deployment
    /// without all-to-all; absent in sections written before 2026-12-04).
    #[serde(default)]
    tp_residuals_one: bool,
    #[serde(flatten)]
    categories: BTreeMap<String, Row>,
}

#[derive(Serialize, Deserialize)]
struct Source {
    file: String,
    sha256: String,
}

#[derive(Serialize, Deserialize)]
struct Row {
    factor: f64,
    p10: f64,
    p90: f64,
    layers: usize,
    /// The cost key the factor sets (absent: none prices the category).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    /// [`Factor::log_spread`] (absent in sections written before 2026-12-04).
    #[serde(default)]
    spread: f64,
}

/// The cost key the host's time per launched kernel sets.
pub const HOST_KEY: &str = "launch.eager_s";

/// The share of a traced layer its launch time must hold for the layer to count as
/// bound by the host launching kernels.
pub const HOST_BOUND_SHARE: f64 = 0.5;

/// The host's time per launched kernel of a trace whose layers it bound: the traced
/// layer's wall time over the kernels twin launches a layer (its mean, and the p10-p90
/// over the layers), so that twin's eager launch price (`launch.eager_s` x kernels, where
/// it exceeds the GPU's time) gives the traced layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub eager_s: f64,
    pub p10_s: f64,
    pub p90_s: f64,
    pub layers: usize,
    /// Twin's kernels a layer, and the share of the traced layer that was launch time.
    pub kernels_per_layer: f64,
    pub launch_share: f64,
}

impl Host {
    /// From the traced layers and twin's kernels a layer; none where the layers were
    /// not bound by the host (launch under [`HOST_BOUND_SHARE`] of the mean layer).
    pub fn of(layers: &[LayerBreakdown], kernels_per_layer: f64) -> Option<Host> {
        if layers.is_empty() || kernels_per_layer.is_nan() || kernels_per_layer <= 0.0 {
            return None;
        }
        let n = layers.len() as f64;
        let wall = layers.iter().map(|l| l.layer_s).sum::<f64>() / n;
        let launch = layers
            .iter()
            .map(|l| l.category(Category::Launch))
            .sum::<f64>()
            / n;
        let share = if wall > 0.0 { launch / wall } else { 0.0 };
        if share < HOST_BOUND_SHARE {
            return None;
        }
        let mut per: Vec<f64> = layers
            .iter()
            .map(|l| l.layer_s / kernels_per_layer)
            .collect();
        per.sort_by(f64::total_cmp);
        let q = |p: f64| per[((per.len() - 1) as f64 * p).round() as usize];
        Some(Host {
            eager_s: wall / kernels_per_layer,
            p10_s: q(0.1),
            p90_s: q(0.9),
            layers: layers.len(),
            kernels_per_layer,
            launch_share: share,
        })
    }
}

/// An `[in_situ]` section read back: the cost keys it sets, the spreads of its
/// categories, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// `(cost key, value)`, e.g. `("in_situ.prefill.moe", 1.21)`.
    pub sets: Vec<(String, f64)>,
    /// `(category, log-space spread)` of the categories with a cost key.
    pub spreads: Vec<(Category, f64)>,
    /// `trace FILE (sha256 ...), fitted to `CONFIGURATION` on DATE`.
    pub source: String,
}

/// Reads the file at `path` as an `[in_situ]` section (a top-level `in_situ` table
/// and nothing else, as [`to_toml`] writes it): every category with a cost key sets it
/// to its factor (and `in_situ.tp_residuals` to 1 where the section says so). `None`
/// when the file is something else, or cannot be read within a profile's size (the
/// profile loader then says why).
pub fn section_of(path: &Path) -> Result<Option<Applied>> {
    let bad = |msg: String| crate::CalibrationError::Profile {
        path: path.to_path_buf(),
        msg,
    };
    let Some(text) = crate::log::read_bounded(path, crate::log::MAX_PROFILE_BYTES)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
    else {
        return Ok(None);
    };
    let Some(table) = text
        .parse::<toml::Table>()
        .ok()
        .filter(|t| t.len() == 1 && t.get("in_situ").is_some_and(|v| v.is_table()))
    else {
        return Ok(None);
    };
    let s: Section = toml::Value::Table(table)
        .try_into()
        .map_err(|e| bad(format!("not an [in_situ] section: {e}")))?;
    let mut sets = Vec::new();
    let mut spreads = Vec::new();
    for (name, row) in &s.in_situ.categories {
        let c = Category::from_key(name)
            .ok_or_else(|| bad(format!("in_situ.{name}: not a category")))?;
        if !(row.factor.is_finite() && row.factor > 0.0) {
            return Err(bad(format!(
                "in_situ.{name}.factor = {}: must be a positive number",
                row.factor
            )));
        }
        if let Some(k) = &row.key {
            sets.push((k.clone(), row.factor));
            // The host's time is a value, not a factor with a spread for the band.
            if c != Category::Launch {
                spreads.push((c, row.spread));
            }
        }
    }
    if s.in_situ.tp_residuals_one {
        sets.push(("in_situ.tp_residuals".to_string(), 1.0));
    }
    Ok(Some(Applied {
        sets,
        spreads,
        source: format!(
            "in-situ factors of trace {} (sha256 {}), fitted to `{}` on {}",
            s.in_situ.source.file, s.in_situ.source.sha256, s.in_situ.configuration, s.in_situ.date
        ),
    }))
}

/// The `[in_situ]` TOML section for `fit`: `source` (the trace's file name and
/// sha256), `configuration` (the caller's words for the deployment), `date`, and one
/// table per category `{ factor, p10, p90, layers }`; with `host` (the trace's layers
/// were bound by the host launching kernels), a `launch` row whose value sets
/// `launch.eager_s`.
pub fn to_toml(
    fit: &InSituFit,
    keys: &[(Category, Option<String>)],
    tp_residuals_one: bool,
    trace: &Path,
    configuration: &str,
    date: &str,
    host: Option<&Host>,
) -> Result<String> {
    let sha256 = crate::profile::sha256_file(trace)?;
    let file = trace
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| trace.display().to_string());
    let key_of = |c: Category| {
        keys.iter()
            .find(|(k, _)| *k == c)
            .and_then(|(_, k)| k.clone())
    };
    let section = Section {
        in_situ: InSitu {
            source: Source { file, sha256 },
            configuration: configuration.to_string(),
            date: date.to_string(),
            tp_residuals_one,
            categories: fit
                .factors
                .iter()
                .map(|f| {
                    (
                        f.category.key().to_string(),
                        Row {
                            factor: f.factor,
                            p10: f.p10,
                            p90: f.p90,
                            layers: f.layers,
                            key: key_of(f.category),
                            spread: f.log_spread(),
                        },
                    )
                })
                .chain(host.map(|h| {
                    (
                        Category::Launch.key().to_string(),
                        Row {
                            factor: h.eager_s,
                            p10: h.p10_s,
                            p90: h.p90_s,
                            layers: h.layers,
                            key: Some(HOST_KEY.to_string()),
                            spread: 0.0,
                        },
                    )
                }))
                .collect(),
        },
    };
    toml::to_string(&section).map_err(|e| crate::CalibrationError::Profile {
        path: trace.to_path_buf(),
        msg: format!("in-situ section not writable as TOML: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use spec::insitu::Stream;

    /// By hand: layers of 2, 2 and 5 ms wall, each with 1.5 ms of kernels and the
    /// rest launch time (mean 3 ms, of which 1.5 ms launch: half, bound by the host);
    /// twin launches 20 kernels a layer: 150 us a kernel, p10 100 us, p90 250 us. A
    /// layer whose kernels hold most of it is not host-bound: none.
    #[test]
    fn the_hosts_time_a_kernel_is_the_layer_over_twins_kernels() {
        let layer = |wall: f64| {
            let mut b = LayerBreakdown {
                layers: 1.0,
                layer_s: wall,
                entries: Vec::new(),
            };
            b.add(Stream::Compute, Category::Moe, 1.5e-3);
            b.add(Stream::Compute, Category::Launch, wall - 1.5e-3);
            b
        };
        let h = Host::of(&[layer(2e-3), layer(2e-3), layer(5e-3)], 20.0).expect("host-bound");
        assert!((h.eager_s - 150e-6).abs() < 1e-12, "{h:?}");
        assert!((h.p10_s - 100e-6).abs() < 1e-12 && (h.p90_s - 250e-6).abs() < 1e-12);
        assert!((h.launch_share - 0.5).abs() < 1e-12 && h.layers == 3);
        assert!(Host::of(&[layer(1.6e-3)], 20.0).is_none());
        assert!(Host::of(&[layer(2e-3)], 0.0).is_none());
    }

    fn layer(moe: f64, attention: f64, dispatch: f64) -> LayerBreakdown {
        let mut b = LayerBreakdown {
            layers: 1.0,
            layer_s: moe + attention + dispatch,
            entries: Vec::new(),
        };
        b.add(Stream::Compute, Category::Moe, moe);
        b.add(Stream::Compute, Category::Attention, attention);
        if dispatch > 0.0 {
            b.add(Stream::Comm, Category::Dispatch, dispatch);
        }
        b
    }

    /// Issue 39 item 4: 19 layers at the prediction and one at twice it: the mean
    /// ratio 1.05 lies outside p10-p90 (both 1), which the factor says with the
    /// per-layer range 1-2 instead of contradicting its own spread.
    #[test]
    fn a_mean_outside_p10_p90_comes_with_its_range() {
        let mut measured: Vec<LayerBreakdown> = (0..19).map(|_| layer(2.0, 1.0, 0.0)).collect();
        measured.push(layer(4.0, 1.0, 0.0));
        let fit = fit_factors(&measured, &layer(2.0, 1.0, 0.0));
        let moe = fit.get(Category::Moe).unwrap();
        assert!((moe.factor - 1.05).abs() < 1e-12, "{}", moe.factor);
        assert_eq!((moe.p10, moe.p90, moe.min, moe.max), (1.0, 1.0, 1.0, 2.0));
        assert!(moe.mean_outside_p10_p90());
        assert!(!fit.get(Category::Attention).unwrap().mean_outside_p10_p90());
    }

    #[test]
    fn factors_by_hand() {
        // moe over 5 layers: 1, 2, 3, 4, 5 against a prediction of 2: ratios 0.5 .. 2.5,
        // mean layer 3 / 2 = 1.5; p10 at rank 0.4: 0.5 + 0.4 * 0.5 = 0.7; p90 at rank 3.6:
        // 2.0 + 0.6 * 0.5 = 2.3; cv = sqrt(mean((r - 1.5)^2)) / 1.5 = sqrt(0.5) / 1.5.
        let measured: Vec<LayerBreakdown> = (1..=5).map(|i| layer(i as f64, 1.0, 0.0)).collect();
        let mut predicted = layer(2.0, 0.5, 0.0);
        predicted.add(Stream::Compute, Category::Gemm, 1.0);
        let fit = fit_factors(&measured, &predicted);
        assert_eq!(fit.layers, 5);
        let moe = fit.get(Category::Moe).unwrap();
        assert!((moe.factor - 1.5).abs() < 1e-12);
        assert!((moe.p10 - 0.7).abs() < 1e-12, "{}", moe.p10);
        assert!((moe.p90 - 2.3).abs() < 1e-12, "{}", moe.p90);
        assert!((moe.cv - 0.5f64.sqrt() / 1.5).abs() < 1e-12);
        let att = fit.get(Category::Attention).unwrap();
        assert_eq!((att.factor, att.p10, att.p90, att.cv), (2.0, 2.0, 2.0, 0.0));
        // gemm is predicted but never measured; dispatch measured nowhere: both absent.
        assert!(fit.get(Category::Gemm).is_none());
        assert!(fit.get(Category::Dispatch).is_none());
        assert_eq!(fit.factors.len(), 2);
    }

    #[test]
    fn a_category_the_prediction_lacks_is_left_out() {
        let fit = fit_factors(&[layer(1.0, 1.0, 2.0)], &layer(1.0, 1.0, 0.0));
        assert!(fit.get(Category::Dispatch).is_none());
        assert_eq!(fit.get(Category::Moe).unwrap().layers, 1);
    }

    #[test]
    fn the_toml_section_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("t.json");
        std::fs::write(&trace, b"[]").unwrap();
        let fit = fit_factors(&[layer(3.0, 1.0, 0.0)], &layer(2.0, 1.0, 0.0));
        let keys = [(Category::Moe, Some("in_situ.prefill.moe".to_string()))];
        let text = to_toml(
            &fit,
            &keys,
            false,
            &trace,
            "dsv3 dep8 prefill",
            "2026-12-02",
            None,
        )
        .unwrap();
        let v: toml::Value = toml::from_str(&text).unwrap();
        let s = &v["in_situ"];
        assert_eq!(s["source"]["file"].as_str(), Some("t.json"));
        // sha256 of the two bytes "[]"
        assert_eq!(
            s["source"]["sha256"].as_str(),
            Some("4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945")
        );
        assert_eq!(s["configuration"].as_str(), Some("dsv3 dep8 prefill"));
        assert_eq!(s["date"].as_str(), Some("2026-12-02"));
        assert_eq!(s["moe"]["factor"].as_float(), Some(1.5));
        assert_eq!(s["moe"]["layers"].as_integer(), Some(1));
        assert_eq!(s["attention"]["p90"].as_float(), Some(1.0));
        assert_eq!(s["moe"]["key"].as_str(), Some("in_situ.prefill.moe"));
        assert!(s["attention"].get("key").is_none());
        // Read back: the keyed category sets its key; one layer has no spread.
        let path = dir.path().join("s.toml");
        std::fs::write(&path, &text).unwrap();
        let a = section_of(&path).unwrap().unwrap();
        assert_eq!(a.sets, vec![("in_situ.prefill.moe".to_string(), 1.5)]);
        assert_eq!(a.spreads, vec![(Category::Moe, 0.0)]);
        assert!(a.source.contains("t.json") && a.source.contains("dsv3 dep8 prefill"));
        // A deployment without all-to-all also sets tp_residuals; a bad factor or
        // category is refused with the file.
        let text = to_toml(&fit, &keys, true, &trace, "tp8", "2026-12-04", None).unwrap();
        std::fs::write(&path, &text).unwrap();
        let a = section_of(&path).unwrap().unwrap();
        assert_eq!(a.sets[1], ("in_situ.tp_residuals".to_string(), 1.0));
        std::fs::write(&path, text.replace("factor = 1.5", "factor = -1.5")).unwrap();
        let e = section_of(&path).unwrap_err().to_string();
        assert!(
            e.contains("s.toml") && e.contains("in_situ.moe.factor"),
            "{e}"
        );
        std::fs::write(&path, text.replace("[in_situ.moe]", "[in_situ.moee]")).unwrap();
        let e = section_of(&path).unwrap_err().to_string();
        assert!(e.contains("in_situ.moee: not a category"), "{e}");
        // A file that is not a section is not read as one.
        std::fs::write(&path, "[provenance]\ndevice = \"x\"\n").unwrap();
        assert_eq!(section_of(&path).unwrap(), None);
    }

    #[test]
    fn a_factors_log_spread_is_the_log_normal_sd_of_its_cv() {
        // Two layers at ratios 1 and 3: mean 2, sd 1, cv 0.5; sd of the log-normal
        // with that cv: sqrt(ln(1.25)).
        let fit = fit_factors(
            &[layer(1.0, 1.0, 0.0), layer(3.0, 1.0, 0.0)],
            &layer(1.0, 1.0, 0.0),
        );
        let moe = fit.get(Category::Moe).unwrap();
        assert!((moe.cv - 0.5).abs() < 1e-12);
        assert!((moe.log_spread() - 1.25f64.ln().sqrt()).abs() < 1e-12);
    }
}
