//! Mooncake trace records and their JSONL parser.

use crate::serving::SimError;
use serde::{Deserialize, Serialize};
use std::io::BufRead;

/// One line of a Mooncake trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Arrival, milliseconds from the trace start.
    pub timestamp: u64,
    pub input_length: u32,
    pub output_length: u32,
    /// Prefix-block hashes, `BLOCK_TOKENS` tokens per block.
    #[serde(default)]
    pub hash_ids: Vec<u64>,
}

/// Parses Mooncake JSONL (one object per line; blank lines skipped). The first bad
/// line is reported with its 1-based number.
pub fn parse_mooncake<R: BufRead>(reader: R) -> Result<Vec<TraceRecord>, SimError> {
    let mut out = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|e| SimError::Trace {
            line: line_no,
            message: e.to_string(),
        })?;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let rec: TraceRecord = serde_json::from_str(t).map_err(|e| SimError::Trace {
            line: line_no,
            message: e.to_string(),
        })?;
        if rec.input_length == 0 {
            return Err(SimError::Trace {
                line: line_no,
                message: "input_length must be >= 1".into(),
            });
        }
        out.push(rec);
    }
    Ok(out)
}

pub fn parse_mooncake_str(text: &str) -> Result<Vec<TraceRecord>, SimError> {
    parse_mooncake(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNIPPET: &str = r#"{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}
{"timestamp": 27, "input_length": 700, "output_length": 52, "hash_ids": [1, 3]}

{"timestamp": 30, "input_length": 100, "output_length": 1, "hash_ids": [9]}
"#;

    #[test]
    fn parses_mooncake_lines() {
        let recs = parse_mooncake_str(SNIPPET).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[1].timestamp, 27);
        assert_eq!(recs[1].hash_ids, vec![1, 3]);
        assert_eq!(recs[2].output_length, 1);
    }

    #[test]
    fn bad_line_reports_its_number() {
        let text = format!("{SNIPPET}{{\"timestamp\": 40, \"input_length\": \"many\"}}\n");
        match parse_mooncake_str(&text) {
            Err(SimError::Trace { line, .. }) => assert_eq!(line, 5),
            other => panic!("expected a trace error, got {other:?}"),
        }
        match parse_mooncake_str("{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 1}\n")
        {
            Err(SimError::Trace { line: 1, message }) => assert!(message.contains("input_length")),
            other => panic!("expected a trace error, got {other:?}"),
        }
        assert!(matches!(
            parse_mooncake_str("not json"),
            Err(SimError::Trace { line: 1, .. })
        ));
    }
}
