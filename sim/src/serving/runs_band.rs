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
    /// When the group holds enough runs of that model: `band` is then the band of its
    /// own runs (each priced as the group's band's are), and this says how many and
    /// keeps the group's band for a model it has not seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<OwnBand>,
}

/// A band drawn from the run's model's own runs in the group ([`RunsBand::own`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OwnBand {
    /// The model's runs in the group.
    pub records: usize,
    /// Per metric, the group's band for a model it has not seen (factors).
    pub unseen: std::collections::BTreeMap<String, [f64; 2]>,
}

/// A measured-runs band around one decode step (`RunsBand::decode_step`): TPOT's
/// factors, the step's time and its rates under both ends, lower first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepBand {
    pub factors: [f64; 2],
    pub step_ms: [f64; 2],
    pub tok_s_gpu: [f64; 2],
    pub tok_s_user: [f64; 2],
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
            "measured-runs band  {} ({})",
            ranges.join(", "),
            self.about("p10-p90")
        )
    }

    /// Where the band comes from, after `what` (`p10-p90`): the group's runs and models
    /// (or the model's own runs among them, and the group's band for another model),
    /// the model of the run when it is one of them, what priced them, the profile.
    fn about(&self, what: &str) -> String {
        let priced = if self.by_terms {
            "their terms"
        } else {
            "physics alone"
        };
        let errors = |id: &str, corpus: &str, which: &str| {
            format!(
                "`twin validate runs {corpus} --filter model={}` gives {which}",
                id.to_ascii_lowercase()
            )
        };
        match (&self.includes, &self.own) {
            (Some((id, corpus)), Some(own)) => {
                let unseen: Vec<String> = Self::METRICS
                    .iter()
                    .filter_map(|(key, name)| {
                        let [lo, hi] = own.unseen.get(*key)?;
                        Some(format!("{name} x{lo:.2}-{hi:.2}"))
                    })
                    .collect();
                let each = if self.by_terms {
                    format!("by terms fitted without {id}")
                } else {
                    "by physics alone".to_string()
                };
                format!(
                    "{what} of the {} measured runs of {id} among the {} of {}, each priced {each}; {}; for a model the group has not seen: {}; from {}",
                    own.records,
                    self.records,
                    self.group,
                    errors(id, corpus, "them one by one"),
                    unseen.join(", "),
                    self.from,
                )
            }
            (includes, _) => {
                let includes = includes
                    .as_ref()
                    .map(|(id, corpus)| {
                        format!(
                            "; {id} is one of them: {}",
                            errors(id, corpus, "its own errors")
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "{what} for a model other than the {} of the {} measured runs of {}{includes}; priced by {priced}; from {}",
                    self.models, self.records, self.group, self.from,
                )
            }
        }
    }

    /// The band's TPOT factors put around one decode step (`step_ms`, yielding
    /// `tok_s_gpu` output tokens a second per GPU and `tok_s_user` per user): a step's
    /// time is its requests' time per output token times the tokens a step yields, so
    /// it scales with TPOT, and the rates inversely. `None`: the band has no TPOT.
    pub fn decode_step(&self, step_ms: f64, tok_s_gpu: f64, tok_s_user: f64) -> Option<StepBand> {
        let [lo, hi] = *self.band.get("tpot_ms")?;
        Some(StepBand {
            factors: [lo, hi],
            step_ms: [step_ms * lo, step_ms * hi],
            tok_s_gpu: [tok_s_gpu / hi, tok_s_gpu / lo],
            tok_s_user: [tok_s_user / hi, tok_s_user / lo],
        })
    }

    /// The band around one decode step, in one line of text (`twin forward`'s).
    pub fn step_text(&self, b: &StepBand) -> String {
        format!(
            "measured-runs band  step {:.3}-{:.3} ms, {:.0}-{:.0} output tokens/s per GPU ({})",
            b.step_ms[0],
            b.step_ms[1],
            b.tok_s_gpu[0],
            b.tok_s_gpu[1],
            self.about("TPOT's p10-p90")
        )
    }

    /// The band's factors as one line for many steps (`twin sweep`'s table).
    pub fn steps_text(&self) -> Option<String> {
        let [lo, hi] = *self.band.get("tpot_ms")?;
        Some(format!(
            "measured-runs band  each point's step ms x{lo:.2}-{hi:.2}, its tok/s per GPU and per user x{:.2}-{:.2} ({})",
            1.0 / hi,
            1.0 / lo,
            self.about("TPOT's p10-p90")
        ))
    }

    /// The band around one decode step as JSON: the group, what priced it, the TPOT
    /// factors and the step's ranges.
    pub fn step_json(&self, b: &StepBand) -> serde_json::Value {
        let mut v = self.head_json();
        v["tpot_factors"] = serde_json::json!(b.factors);
        v["step_ms"] = serde_json::json!(b.step_ms);
        v["tokens_per_s_per_gpu"] = serde_json::json!(b.tok_s_gpu);
        v["tokens_per_s_per_user"] = serde_json::json!(b.tok_s_user);
        v
    }

    /// The group, its size, what priced it, the profile and the model it holds.
    pub fn head_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "group": self.group,
            "records": self.records,
            "models": self.models,
            "priced_by": if self.by_terms { "terms" } else { "physics alone" },
            "profile": self.from,
        });
        if let Some((id, _)) = &self.includes {
            v["includes_model"] = serde_json::json!(id);
        }
        if let Some(own) = &self.own {
            v["own_model_runs"] = serde_json::json!(own.records);
            v["unseen_model_band"] = serde_json::json!(own.unseen);
        }
        v
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
        let mut v = self.head_json();
        v["band"] = serde_json::Value::Object(metrics);
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
            own: None,
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
        // With enough of the model's own runs, the band is theirs (here 0.9-1.2) and
        // says so, keeping the group's for another model.
        b.own = Some(OwnBand {
            records: 40,
            unseen: b.band.clone(),
        });
        b.band = [("tpot_ms".to_string(), [0.9, 1.2])].into_iter().collect();
        let t = b.text(100.0, 10.0);
        assert!(t.contains("TPOT mean 9.0-12.0 ms (p10-p90 of the 40 measured runs of meta-llama/Llama-3.1-70B among the 447 of vllm on hopper, each priced by terms fitted without meta-llama/Llama-3.1-70B; `twin validate runs runs --filter model=meta-llama/llama-3.1-70b` gives them one by one; for a model the group has not seen: TPOT x0.50-1.50; from p)"), "{t}");
        let j = b.json(100.0, 10.0);
        assert_eq!(j["own_model_runs"], 40);
        assert_eq!(
            j["unseen_model_band"]["tpot_ms"],
            serde_json::json!([0.5, 1.5])
        );
    }

    /// A decode step's band: its time scales with TPOT's factors, its rates inversely
    /// (hand-derived: factors 0.8 and 1.25 around a 10 ms step of 1,000 tokens/s per
    /// GPU and 100 per user); a band without TPOT gives none.
    #[test]
    fn a_decode_steps_band_scales_its_time_with_tpot_and_its_rates_inversely() {
        let mut b = RunsBand {
            group: "vllm on hopper".into(),
            records: 10,
            models: 2,
            by_terms: false,
            from: "p".into(),
            band: [("tpot_ms".to_string(), [0.8, 1.25])].into_iter().collect(),
            includes: None,
            own: None,
        };
        let s = b.decode_step(10.0, 1000.0, 100.0).unwrap();
        assert_eq!(s.factors, [0.8, 1.25]);
        assert!((s.step_ms[0] - 8.0).abs() < 1e-12 && (s.step_ms[1] - 12.5).abs() < 1e-12);
        assert!((s.tok_s_gpu[0] - 800.0).abs() < 1e-9 && (s.tok_s_gpu[1] - 1250.0).abs() < 1e-9);
        assert!((s.tok_s_user[0] - 80.0).abs() < 1e-9 && (s.tok_s_user[1] - 125.0).abs() < 1e-9);
        let t = b.step_text(&s);
        assert!(t.starts_with("measured-runs band  step 8.000-12.500 ms, 800-1250 output tokens/s per GPU (TPOT's p10-p90 for a model other than the 2 of the 10 measured runs of vllm on hopper; priced by physics alone; from p)"), "{t}");
        let j = b.step_json(&s);
        assert_eq!(j["tpot_factors"], serde_json::json!([0.8, 1.25]));
        assert_eq!(j["priced_by"], "physics alone");
        assert!(b
            .steps_text()
            .unwrap()
            .contains("step ms x0.80-1.25, its tok/s per GPU and per user x0.80-1.25"));
        b.band = [("ttft_ms".to_string(), [0.5, 2.0])].into_iter().collect();
        assert!(b.decode_step(10.0, 1000.0, 100.0).is_none());
        assert!(b.steps_text().is_none());
    }
}
