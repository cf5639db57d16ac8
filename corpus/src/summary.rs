//! Predicted against measured: each record's comparisons, and the summary by a
//! grouping (engine, GPU, model, precision, regime). An error is `predicted /
//! measured - 1`; a metric's summary is the median absolute error, the median signed
//! error (bias), the share of records within the metric's tolerance and, where the
//! predictions carry a p10-p90 band, the share of measured values inside it. And what
//! a corpus holds, by the same dimensions ([`holdings`]).

use crate::filter::precision;
use crate::{Layout, Metric, RunRecord, Stat};
use serde::Serialize;
use std::collections::BTreeMap;

/// The tolerance a metric's "within" share counts against: 25% for TTFT (a queueing
/// figure), 15% for the others (the bars; docs/fidelity.md).
pub fn tolerance(m: Metric) -> f64 {
    match m {
        Metric::TtftMs => 0.25,
        _ => 0.15,
    }
}

/// One figure predicted against the measured one.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Compared {
    pub metric: Metric,
    /// The record's statistic (what was measured).
    pub stat: Stat,
    pub measured: f64,
    pub predicted: f64,
    /// The prediction's p10-p90 band, where it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band: Option<(f64, f64)>,
}

impl Compared {
    pub fn error(&self) -> f64 {
        self.predicted / self.measured - 1.0
    }

    pub fn within(&self) -> bool {
        self.error().abs() <= tolerance(self.metric)
    }

    pub fn inside_band(&self) -> Option<bool> {
        self.band
            .map(|(lo, hi)| self.measured >= lo && self.measured <= hi)
    }
}

/// What became of one record.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub id: String,
    pub groups: Groups,
    /// The comparisons, or why the record could not be priced.
    pub result: Result<Vec<Compared>, String>,
}

/// The groups a record falls in, one per dimension.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Groups {
    pub engine: String,
    /// The engine and its version (`sglang@0.5.9`; `?` for a version not known).
    pub version: String,
    pub gpu: String,
    pub model: String,
    pub precision: String,
    /// `small-batch` (at most 16 requests per engine instance) or `large-batch`.
    pub batch: String,
    /// `prefill-heavy` (input at least 4x output), `decode-heavy` (output at least 4x
    /// input) or `balanced`.
    pub phase: String,
}

/// The concurrency per instance at and below which a run is small-batch.
pub const SMALL_BATCH: u32 = 16;

impl Groups {
    pub fn of(r: &RunRecord) -> Groups {
        let instances = match &r.layout {
            Layout::Aggregated { workers } => workers.count.unwrap_or(1),
            Layout::Disaggregated { decode, .. } => decode.count.unwrap_or(1),
        }
        .max(1);
        let per = r.concurrency().map(|c| c.div_ceil(instances));
        let (i, o) = (r.client.input.mean(), r.client.output.mean());
        Groups {
            engine: r.engine.name.key().to_string(),
            version: r.engine.label(),
            gpu: r.gpu.hardware.clone(),
            model: r.model.id.clone(),
            precision: precision(r),
            batch: match per {
                Some(c) if c <= SMALL_BATCH => "small-batch".into(),
                Some(_) => "large-batch".into(),
                None => "rate".into(),
            },
            phase: if i >= 4.0 * o {
                "prefill-heavy".into()
            } else if o >= 4.0 * i {
                "decode-heavy".into()
            } else {
                "balanced".into()
            },
        }
    }

    /// This record's group under `dim`.
    pub fn get(&self, dim: Dim) -> String {
        match dim {
            Dim::All => "all".into(),
            Dim::Engine => self.engine.clone(),
            Dim::Version => self.version.clone(),
            Dim::Gpu => self.gpu.clone(),
            Dim::Model => self.model.clone(),
            Dim::Precision => self.precision.clone(),
            Dim::Regime => format!("{} {}", self.batch, self.phase),
            Dim::EngineGpu => format!("{} {}", self.engine, self.gpu),
        }
    }
}

/// A grouping of the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dim {
    All,
    Engine,
    /// The engine at its version: one engine's releases run the same model differently
    /// (SGLang's Qwen3.5 steps before and after 0.5.10).
    Version,
    Gpu,
    Model,
    Precision,
    Regime,
    EngineGpu,
}

impl Dim {
    pub const SUMMARY: [Dim; 7] = [
        Dim::All,
        Dim::Engine,
        Dim::Version,
        Dim::Gpu,
        Dim::Model,
        Dim::Precision,
        Dim::Regime,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dim::All => "all",
            Dim::Engine => "engine",
            Dim::Version => "version",
            Dim::Gpu => "gpu",
            Dim::Model => "model",
            Dim::Precision => "precision",
            Dim::Regime => "regime",
            Dim::EngineGpu => "engine x gpu",
        }
    }
}

/// One metric over a group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricSummary {
    pub metric: Metric,
    pub n: usize,
    pub median_abs_error: f64,
    pub median_error: f64,
    /// Share of records within [`tolerance`].
    pub within: f64,
    pub tolerance: f64,
    /// Share of measured values inside the predicted p10-p90 band (records with a
    /// band only), and how many had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band_coverage: Option<f64>,
    pub banded: usize,
}

/// One group of a grouping.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSummary {
    pub dim: Dim,
    pub group: String,
    pub records: usize,
    /// Records priced (the rest could not be, each with its reason).
    pub priced: usize,
    pub metrics: Vec<MetricSummary>,
}

/// The median of `xs` (the one definition, `spec::stats::median`).
pub use spec::stats::median;

/// A metric's summary over comparisons (`None` when there are none).
pub fn metric_summary(metric: Metric, cs: &[Compared]) -> Option<MetricSummary> {
    if cs.is_empty() {
        return None;
    }
    let errs: Vec<f64> = cs.iter().map(Compared::error).collect();
    let abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
    let inside: Vec<bool> = cs.iter().filter_map(Compared::inside_band).collect();
    Some(MetricSummary {
        metric,
        n: cs.len(),
        median_abs_error: median(&abs),
        median_error: median(&errs),
        within: cs.iter().filter(|c| c.within()).count() as f64 / cs.len() as f64,
        tolerance: tolerance(metric),
        band_coverage: (!inside.is_empty())
            .then(|| inside.iter().filter(|&&b| b).count() as f64 / inside.len() as f64),
        banded: inside.len(),
    })
}

/// The summary of `outcomes` grouped by `dim`, groups in name order.
pub fn summarize(outcomes: &[Outcome], dim: Dim) -> Vec<GroupSummary> {
    let mut groups: BTreeMap<String, Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        groups.entry(o.groups.get(dim)).or_default().push(o);
    }
    groups
        .into_iter()
        .map(|(group, os)| {
            let mut by_metric: BTreeMap<Metric, Vec<Compared>> = BTreeMap::new();
            for c in os.iter().filter_map(|o| o.result.as_ref().ok()).flatten() {
                by_metric.entry(c.metric).or_default().push(*c);
            }
            GroupSummary {
                dim,
                group,
                records: os.len(),
                priced: os.iter().filter(|o| o.result.is_ok()).count(),
                metrics: by_metric
                    .iter()
                    .filter_map(|(m, cs)| metric_summary(*m, cs))
                    .collect(),
            }
        })
        .collect()
}

/// What a corpus holds (`twin runs show`): one line per dimension (engine, GPU, model,
/// precision, layout), each value with its count of `records`.
pub fn holdings(records: &[&RunRecord]) -> String {
    type Key = fn(&RunRecord) -> String;
    let dims: [(&str, Key); 5] = [
        ("engine", |r| r.engine.label()),
        ("gpu", |r| r.gpu.hardware.clone()),
        ("model", |r| r.model.id.clone()),
        ("precision", precision),
        ("layout", |r| r.layout.mode().to_string()),
    ];
    let mut s = String::new();
    for (name, key) in dims {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for r in records {
            *counts.entry(key(r)).or_default() += 1;
        }
        let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        s += &format!("  by {name}: {}\n", parts.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(metric: Metric, measured: f64, predicted: f64, band: Option<(f64, f64)>) -> Compared {
        Compared {
            metric,
            stat: Stat::Center,
            measured,
            predicted,
            band,
        }
    }

    fn groups(engine: &str) -> Groups {
        Groups {
            engine: engine.into(),
            version: format!("{engine}@1.0"),
            gpu: "h100".into(),
            model: "m".into(),
            precision: "bf16".into(),
            batch: "small-batch".into(),
            phase: "balanced".into(),
        }
    }

    /// Three vLLM records (TPOT errors +10%, -20%, +30%; TTFT -50% and +20%) and one
    /// SGLang record that could not be priced. By hand: vLLM TPOT |errors| 0.1, 0.2,
    /// 0.3 -> median 0.2; signed median +0.1; within 15%: 1 of 3. TTFT |errors| 0.5,
    /// 0.2 -> median 0.35; within 25%: 1 of 2. Bands: TPOT 10 in [9, 12] yes, 10 in
    /// [5, 9] no -> coverage 1/2 over 2 banded.
    #[test]
    fn a_small_fixture_summarises_as_derived_by_hand() {
        let outcomes = vec![
            Outcome {
                id: "a".into(),
                groups: groups("vllm"),
                result: Ok(vec![
                    c(Metric::TpotMs, 10.0, 11.0, Some((9.0, 12.0))),
                    c(Metric::TtftMs, 100.0, 50.0, None),
                ]),
            },
            Outcome {
                id: "b".into(),
                groups: groups("vllm"),
                result: Ok(vec![
                    c(Metric::TpotMs, 10.0, 8.0, Some((5.0, 9.0))),
                    c(Metric::TtftMs, 100.0, 120.0, None),
                ]),
            },
            Outcome {
                id: "c".into(),
                groups: groups("vllm"),
                result: Ok(vec![c(Metric::TpotMs, 10.0, 13.0, None)]),
            },
            Outcome {
                id: "d".into(),
                groups: groups("sglang"),
                result: Err("layout not modelled".into()),
            },
        ];
        let s = summarize(&outcomes, Dim::Engine);
        assert_eq!(s.len(), 2);
        // By version, the same two groups under the engine's label.
        let v = summarize(&outcomes, Dim::Version);
        let names: Vec<&str> = v.iter().map(|g| g.group.as_str()).collect();
        assert_eq!(names, ["sglang@1.0", "vllm@1.0"]);
        assert_eq!(v[1].metrics, s[1].metrics);
        let (sg, vl) = (&s[0], &s[1]);
        assert_eq!((sg.group.as_str(), sg.records, sg.priced), ("sglang", 1, 0));
        assert!(sg.metrics.is_empty());
        assert_eq!((vl.group.as_str(), vl.records, vl.priced), ("vllm", 3, 3));
        let ttft = &vl.metrics[0];
        let tpot = &vl.metrics[1];
        assert_eq!((ttft.metric, ttft.n), (Metric::TtftMs, 2));
        assert!((ttft.median_abs_error - 0.35).abs() < 1e-12);
        assert!((ttft.within - 0.5).abs() < 1e-12);
        assert_eq!((tpot.metric, tpot.n), (Metric::TpotMs, 3));
        assert!((tpot.median_abs_error - 0.2).abs() < 1e-12);
        assert!((tpot.median_error - 0.1).abs() < 1e-12);
        assert!((tpot.within - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(tpot.banded, 2);
        assert_eq!(tpot.band_coverage, Some(0.5));
        let all = summarize(&outcomes, Dim::All);
        assert_eq!((all.len(), all[0].records, all[0].priced), (1, 4, 3));
    }
}
