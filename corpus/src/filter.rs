//! `--filter KEY=VALUE[,VALUE...]` over records: every filter must hold (and), any
//! of a filter's values may (or). Text keys compare case-insensitively, `~` instead
//! of `=` matches a substring: `model~llama`, `engine=vllm,sglang`, `gpu=h100`,
//! `concurrency<=64`.

use crate::{CorpusError, Layout, RunRecord};

/// The keys a filter may name.
pub const KEYS: &[&str] = &[
    "id",
    "engine",
    "version",
    "gpu",
    "model",
    "precision",
    "mode",
    "concurrency",
    "source",
];

#[derive(Debug, Clone, PartialEq)]
enum Test {
    Is(Vec<String>),
    Contains(Vec<String>),
    AtMost(u64),
    AtLeast(u64),
}

/// One parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    key: String,
    test: Test,
}

impl Filter {
    /// `KEY=V`, `KEY~V`, `concurrency<=N`, `concurrency>=N`.
    pub fn parse(s: &str) -> Result<Filter, CorpusError> {
        let bad = || CorpusError::Filter(s.to_string());
        let (key, test) = if let Some((k, v)) = s.split_once("<=") {
            (k, Test::AtMost(v.trim().parse().map_err(|_| bad())?))
        } else if let Some((k, v)) = s.split_once(">=") {
            (k, Test::AtLeast(v.trim().parse().map_err(|_| bad())?))
        } else if let Some((k, v)) = s.split_once('~') {
            (k, Test::Contains(values(v)))
        } else if let Some((k, v)) = s.split_once('=') {
            (k, Test::Is(values(v)))
        } else {
            return Err(bad());
        };
        let key = key.trim().to_ascii_lowercase();
        if !KEYS.contains(&key.as_str()) {
            return Err(bad());
        }
        let numeric = matches!(test, Test::AtMost(_) | Test::AtLeast(_));
        if numeric != (key == "concurrency") && !matches!(&test, Test::Is(_)) {
            return Err(bad());
        }
        Ok(Filter { key, test })
    }

    /// Whether `r` passes.
    pub fn accepts(&self, r: &RunRecord) -> bool {
        let conc = r.concurrency().map(u64::from);
        let text = match self.key.as_str() {
            "id" => r.id.clone(),
            "engine" => r.engine.name.key().to_string(),
            "version" => r.engine.version.clone().unwrap_or_default(),
            "gpu" => format!("{} {}", r.gpu.hardware, r.gpu.system),
            "model" => r.model.id.clone(),
            "precision" => precision(r),
            "mode" => match r.layout {
                Layout::Aggregated { .. } => "aggregated".into(),
                Layout::Disaggregated { .. } => "disaggregated".into(),
            },
            "concurrency" => conc.map(|c| c.to_string()).unwrap_or_default(),
            _ => r.provenance.detail.clone().unwrap_or_default(),
        }
        .to_ascii_lowercase();
        match &self.test {
            Test::Is(vs) if self.key == "gpu" => vs.iter().any(|v| text.split(' ').any(|w| w == v)),
            Test::Is(vs) => vs.iter().any(|v| &text == v),
            Test::Contains(vs) => vs.iter().any(|v| text.contains(v.as_str())),
            Test::AtMost(n) => conc.is_some_and(|c| c <= *n),
            Test::AtLeast(n) => conc.is_some_and(|c| c >= *n),
        }
    }
}

fn values(v: &str) -> Vec<String> {
    v.split(',')
        .map(|x| x.trim().to_ascii_lowercase())
        .filter(|x| !x.is_empty())
        .collect()
}

/// The record's precision as one word: its GEMM format, and its routed experts' where
/// they differ (`bf16+mxfp4`).
pub fn precision(r: &RunRecord) -> String {
    match r.model.moe {
        Some(m) if m != r.model.gemm => format!("{}+{}", r.model.gemm.key(), m.key()),
        _ => r.model.gemm.key().to_string(),
    }
}

/// The records every filter accepts.
pub fn apply<'a>(records: &'a [RunRecord], filters: &[Filter]) -> Vec<&'a RunRecord> {
    records
        .iter()
        .filter(|r| filters.iter().all(|f| f.accepts(r)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::tests::sample;

    #[test]
    fn filters_and_their_values_combine() {
        let r = sample("x");
        let ok = |s: &str| Filter::parse(s).unwrap().accepts(&r);
        assert!(ok("engine=vllm"));
        assert!(ok("engine=sglang,VLLM"));
        assert!(!ok("engine=trtllm"));
        assert!(ok("gpu=h100") && ok("gpu=h100_sxm") && !ok("gpu=h10"));
        assert!(ok("model~llama-3.1"));
        assert!(ok("concurrency<=8") && !ok("concurrency>=9"));
        assert!(ok("mode=aggregated") && ok("precision=bf16"));
        assert!(Filter::parse("colour=red").is_err());
        assert!(Filter::parse("engine<=3").is_err());
        assert!(Filter::parse("engine").is_err());
    }
}
