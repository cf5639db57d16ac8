//! The band measured runs put around a run's mean TTFT and TPOT: the p10-p90 of
//! measured over predicted of the runs profile's group of the run's engine and GPU
//! family, for a model the group's runs did not include (the profile and its groups
//! are read outside this crate; this is the band as a value and its words).

use serde::{Deserialize, Serialize};

/// How far measured runs say a run's mean TTFT and TPOT may lie from twin's: the p10-p90
/// band (factors, measured over predicted) of the profile's group of the run's engine
/// and GPU family, for a model the group's runs did not include.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunsBand {
    /// The group, as `ENGINE on FAMILY`.
    pub group: String,
    pub records: usize,
    pub models: usize,
    /// Whether the group's terms price the run (else physics alone does).
    pub by_terms: bool,
    /// Where the profile came from.
    pub from: String,
    /// Per metric (`ttft_ms`, `tpot_ms`), the band's factors.
    pub band: std::collections::BTreeMap<String, [f64; 2]>,
}

impl RunsBand {
    /// The metrics a band covers, each as its key and name: TTFT, then TPOT (the
    /// order of the means the methods take).
    pub const METRICS: [(&'static str, &'static str); 2] =
        [("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")];

    /// The band of metric `key` around a run's `mean` (`None`: the band has no such
    /// metric).
    pub fn range(&self, key: &str, mean: f64) -> Option<(f64, f64)> {
        self.band.get(key).map(|[lo, hi]| (mean * lo, mean * hi))
    }

    /// The band around a run's mean TTFT and TPOT (ms), in one line of text.
    pub fn text(&self, ttft_ms: f64, tpot_ms: f64) -> String {
        let ranges: Vec<String> = Self::METRICS
            .iter()
            .zip([ttft_ms, tpot_ms])
            .filter_map(|((key, name), mean)| {
                let (lo, hi) = self.range(key, mean)?;
                Some(format!("{name} mean {lo:.1}-{hi:.1} ms"))
            })
            .collect();
        format!(
            "measured-runs band  {} (p10-p90 for a model other than the {} of the {} measured runs of {}; priced by {}; from {})",
            ranges.join(", "),
            self.models,
            self.records,
            self.group,
            if self.by_terms { "their terms" } else { "physics alone" },
            self.from,
        )
    }

    /// Whether a measured mean lies in the band of metric `key` around the predicted
    /// mean (`None`: the band has no such metric).
    pub fn holds(&self, key: &str, predicted: f64, measured: f64) -> Option<bool> {
        self.range(key, predicted)
            .map(|(lo, hi)| measured >= lo && measured <= hi)
    }

    /// The band as JSON: the group, what priced it, and per metric the factors and the
    /// range around the run's means.
    pub fn json(&self, ttft_ms: f64, tpot_ms: f64) -> serde_json::Value {
        let metrics: serde_json::Map<String, serde_json::Value> = Self::METRICS
            .iter()
            .zip([ttft_ms, tpot_ms])
            .filter_map(|((key, _), mean)| {
                let [flo, fhi] = self.band.get(*key)?;
                let (lo, hi) = self.range(key, mean)?;
                Some((
                    key.to_string(),
                    serde_json::json!({"factors": [flo, fhi], "mean_ms": [lo, hi]}),
                ))
            })
            .collect();
        serde_json::json!({
            "group": self.group,
            "records": self.records,
            "models": self.models,
            "priced_by": if self.by_terms { "terms" } else { "physics alone" },
            "profile": self.from,
            "band": metrics,
        })
    }
}
