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
    /// The group's model (its id in the runs) that the run's model is, when it is one
    /// of them, and the corpus (as `twin validate runs` names it) that holds its runs:
    /// the band is then wider than that model's own runs need, and they say more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub includes: Option<(String, String)>,
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
        let includes = match &self.includes {
            Some((id, corpus)) => format!(
                "; {id} is one of them: `twin validate runs {corpus} --filter model={}` gives its own errors",
                id.to_ascii_lowercase()
            ),
            None => String::new(),
        };
        format!(
            "measured-runs band  {} (p10-p90 for a model other than the {} of the {} measured runs of {}{includes}; priced by {}; from {})",
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
        let mut v = serde_json::json!({
            "group": self.group,
            "records": self.records,
            "models": self.models,
            "priced_by": if self.by_terms { "terms" } else { "physics alone" },
            "profile": self.from,
            "band": metrics,
        });
        if let Some((id, _)) = &self.includes {
            v["includes_model"] = serde_json::json!(id);
        }
        v
    }
}

/// Whether a run's model (`name`, as a scenario names it: `llama-3.1-70b`) is the
/// model `id` of a measured run (`meta-llama/Llama-3.1-70B`): the id's last part, case
/// aside, less an `-Instruct` and a precision suffix (`-FP8`, `-NVFP4`), is the name.
pub fn same_model(name: &str, id: &str) -> bool {
    let base = |s: &str| {
        let mut s = s.rsplit('/').next().unwrap_or(s).to_ascii_lowercase();
        for suffix in ["-fp8", "-nvfp4", "-instruct"] {
            if let Some(t) = s.strip_suffix(suffix) {
                s = t.to_string();
            }
        }
        s
    };
    !name.trim().is_empty() && base(name) == base(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenarios_model_is_matched_to_a_runs_model_id() {
        assert!(same_model("llama-3.1-70b", "meta-llama/Llama-3.1-70B"));
        assert!(same_model("gpt-oss-120b", "openai/gpt-oss-120b"));
        assert!(same_model(
            "llama-3.1-8b",
            "nvidia/Llama-3.1-8B-Instruct-FP8"
        ));
        assert!(same_model("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B-FP8"));
        assert!(!same_model("llama-3.1-8b", "meta-llama/Llama-3.1-70B"));
        assert!(!same_model("qwen3-32b", "Qwen/Qwen3-235B-A22B-FP8"));
        assert!(!same_model("", "openai/gpt-oss-120b"));
    }

    #[test]
    fn a_band_that_includes_the_runs_model_says_how_to_see_its_own_errors() {
        let mut b = RunsBand {
            group: "vllm on hopper".into(),
            records: 447,
            models: 6,
            by_terms: true,
            from: "p".into(),
            band: [("tpot_ms".to_string(), [0.5, 1.5])].into_iter().collect(),
            includes: None,
        };
        assert!(!b.text(100.0, 10.0).contains("one of them"));
        assert!(b.json(100.0, 10.0).get("includes_model").is_none());
        b.includes = Some(("meta-llama/Llama-3.1-70B".into(), "runs".into()));
        let t = b.text(100.0, 10.0);
        assert!(t.contains("TPOT mean 5.0-15.0 ms"), "{t}");
        assert!(
            t.contains("meta-llama/Llama-3.1-70B is one of them: `twin validate runs runs --filter model=meta-llama/llama-3.1-70b` gives its own errors"),
            "{t}"
        );
        assert_eq!(
            b.json(100.0, 10.0)["includes_model"],
            "meta-llama/Llama-3.1-70B"
        );
    }
}
