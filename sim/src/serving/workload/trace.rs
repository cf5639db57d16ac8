//! Mooncake trace records and their JSONL parser.

use super::{TraceReplay, MAX_TOKENS, TRACE_BLOCK_TOKENS};
use crate::serving::limits::Limits;
use crate::serving::SimError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Read};

/// One line of a Mooncake trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    /// Arrival, milliseconds from the trace start.
    #[serde(deserialize_with = "whole_ms")]
    pub timestamp: u64,
    pub input_length: u32,
    pub output_length: u32,
    /// Prefix-block hashes, `TRACE_BLOCK_TOKENS` tokens per block.
    #[serde(default)]
    pub hash_ids: Vec<u64>,
}

/// A Mooncake timestamp: whole milliseconds; anything else is refused with the unit.
fn whole_ms<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = serde_json::Number::deserialize(d)?;
    v.as_u64().ok_or_else(|| {
        serde::de::Error::custom(format!(
            "timestamp {v}: Mooncake timestamps are whole milliseconds from the trace's start (seconds? multiply by 1000; another format? --trace-format)"
        ))
    })
}

/// A trace as read: its records, and what reading changed or left out, in words.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TraceRead {
    pub records: Vec<TraceRecord>,
    /// One line per kind of record reading repaired or dropped (with how many and the
    /// first line), for the caller to show.
    pub notes: Vec<String>,
}

/// Records of one kind, counted with the first place (line, or index) they occur at.
#[derive(Debug, Default)]
pub struct Tally {
    count: u64,
    first: usize,
}

impl Tally {
    pub fn add(&mut self, at: usize) {
        if self.count == 0 {
            self.first = at;
        }
        self.count += 1;
    }

    /// "`what`: N records (first at line L); `then`".
    pub fn note(&self, what: &str, then: &str) -> Option<String> {
        self.note_at("line", what, then)
    }

    /// "`what`: N records (first at `unit` L); `then`".
    pub fn note_at(&self, unit: &str, what: &str, then: &str) -> Option<String> {
        (self.count > 0).then(|| {
            format!(
                "{what}: {} record{} (first at {unit} {}); {then}",
                self.count,
                if self.count == 1 { "" } else { "s" },
                self.first
            )
        })
    }
}

/// The trace's line `line_no` into `buf`, trimmed (a first line's byte-order mark
/// skipped), within `limits` (`bytes` counts what was read so far); `None` at the end.
fn next_line<'b, R: BufRead>(
    reader: &mut R,
    buf: &'b mut Vec<u8>,
    line_no: usize,
    limits: &Limits,
    bytes: &mut u64,
) -> Result<Option<&'b str>, SimError> {
    let err = |message: String| SimError::Trace {
        line: line_no,
        message,
    };
    let max_line = limits.max_trace_line_bytes;
    buf.clear();
    let n = reader
        .take(max_line.saturating_add(1))
        .read_until(b'\n', buf)
        .map_err(|e| err(e.to_string()))?;
    if n == 0 {
        return Ok(None);
    }
    *bytes += n as u64;
    let content = n - usize::from(buf.last() == Some(&b'\n'));
    if content as u64 > max_line {
        return Err(err(format!(
            "longer than limits.max_trace_line_bytes = {max_line} bytes (not a Mooncake JSONL trace? raise the limit if it is)"
        )));
    }
    if *bytes > limits.max_trace_bytes {
        return Err(err(format!(
            "the trace is larger than limits.max_trace_bytes = {} bytes (raise the limit to read it)",
            limits.max_trace_bytes
        )));
    }
    let text = std::str::from_utf8(buf).map_err(|_| err("not UTF-8 text".into()))?;
    let text = if line_no == 1 {
        text.strip_prefix('\u{feff}').unwrap_or(text)
    } else {
        text
    };
    Ok(Some(text.trim()))
}

/// Bad lines of a trace an error lists (all are counted).
pub const BAD_LINES_SHOWN: usize = 20;

/// The bad lines of a trace as read, each with its 1-based number.
#[derive(Debug, Default)]
pub struct BadLines {
    bad: u64,
    lines: Vec<(usize, String)>,
}

impl BadLines {
    pub fn add(&mut self, line: usize, message: String) {
        self.bad += 1;
        if self.lines.len() < BAD_LINES_SHOWN {
            self.lines.push((line, message));
        }
    }

    /// None when every line was good; one bad line is `SimError::Trace`, several
    /// are `SimError::TraceLines`.
    pub fn into_error(mut self) -> Option<SimError> {
        match self.bad {
            0 => None,
            1 => self
                .lines
                .pop()
                .map(|(line, message)| SimError::Trace { line, message }),
            _ => Some(SimError::TraceLines {
                bad: self.bad,
                lines: self.lines,
            }),
        }
    }
}

/// Reads Mooncake JSONL (one object per line; blank lines skipped) within `limits`
/// (`max_trace_records`, `max_trace_bytes`, `max_trace_line_bytes`). A first line's
/// byte-order mark is skipped. Every bad line is found before the error, which lists
/// them with their 1-based numbers (the first `BAD_LINES_SHOWN`); records that can be
/// repaired or left out are, and `notes` says so:
/// - `hash_ids` beyond the blocks of `input_length` (`TRACE_BLOCK_TOKENS` each) are cut;
/// - records with `input_length` 0 or `output_length` 0, or either above
///   `MAX_TOKENS`, are dropped;
/// - records out of timestamp order are counted (they replay in timestamp order).
pub fn read_mooncake<R: BufRead>(mut reader: R, limits: &Limits) -> Result<TraceRead, SimError> {
    let mut out = TraceRead::default();
    let mut repairs = Repairs::default();
    let mut bad = BadLines::default();
    let mut latest = 0u64;
    let mut bytes = 0u64;
    let mut buf = Vec::new();
    for line_no in 1usize.. {
        let Some(t) = next_line(&mut reader, &mut buf, line_no, limits, &mut bytes)? else {
            break;
        };
        if t.is_empty() {
            continue;
        }
        let mut rec: TraceRecord = match serde_json::from_str(t) {
            Ok(rec) => rec,
            Err(e) => {
                bad.add(line_no, e.to_string());
                continue;
            }
        };
        if !repairs.keep(&mut rec, line_no) {
            continue;
        }
        if rec.timestamp < latest {
            repairs.unsorted.add(line_no);
        }
        latest = latest.max(rec.timestamp);
        if out.records.len() as u64 >= limits.max_trace_records {
            return Err(SimError::Trace {
                line: line_no,
                message: format!(
                    "more than limits.max_trace_records = {} records (raise the limit, or cut the trace)",
                    limits.max_trace_records
                ),
            });
        }
        out.records.push(rec);
    }
    if let Some(e) = bad.into_error() {
        return Err(e);
    }
    repairs.notes(&mut out.notes);
    Ok(out)
}

/// The records reading repaired or dropped, by kind, each with its first line.
#[derive(Debug, Default)]
struct Repairs {
    cut_ids: Tally,
    too_long: Tally,
    unsorted: Tally,
    no_output: Tally,
    no_input: Tally,
}

impl Repairs {
    /// Counts a record's repairs (cutting extra hash_ids); false when it is dropped.
    fn keep(&mut self, rec: &mut TraceRecord, line_no: usize) -> bool {
        if rec.input_length == 0 {
            self.no_input.add(line_no);
            return false;
        }
        if rec.output_length == 0 {
            self.no_output.add(line_no);
            return false;
        }
        if rec.input_length as f64 > MAX_TOKENS || rec.output_length as f64 > MAX_TOKENS {
            self.too_long.add(line_no);
            return false;
        }
        let blocks = (rec.input_length as u64).div_ceil(TRACE_BLOCK_TOKENS) as usize;
        if rec.hash_ids.len() > blocks {
            self.cut_ids.add(line_no);
            rec.hash_ids.truncate(blocks);
        }
        true
    }

    /// Appends one note per kind of record repaired or dropped to `notes`.
    fn notes(&self, notes: &mut Vec<String>) {
        notes.extend(
            self.no_input
                .note("input_length 0 (an empty prompt)", "dropped"),
        );
        notes.extend(
            self.no_output
                .note("output_length 0 (a failed or empty request)", "dropped"),
        );
        notes.extend(self.too_long.note(
            &format!("input_length or output_length above {MAX_TOKENS} tokens"),
            "dropped",
        ));
        notes.extend(self.cut_ids.note(
            &format!(
                "more hash_ids than input_length covers ({TRACE_BLOCK_TOKENS} tokens per block)"
            ),
            "the extra ids are ignored",
        ));
        notes.extend(self.unsorted.note(
            "timestamps out of order",
            "each record is replayed at its timestamp",
        ));
    }
}

/// Parses Mooncake JSONL within the default limits, without the notes
/// (`read_mooncake`).
pub fn parse_mooncake<R: BufRead>(reader: R) -> Result<Vec<TraceRecord>, SimError> {
    read_mooncake(reader, &Limits::default()).map(|t| t.records)
}

pub fn parse_mooncake_str(text: &str) -> Result<Vec<TraceRecord>, SimError> {
    parse_mooncake(text.as_bytes())
}

/// When a trace's records arrive, against a run of `duration_s` after `warmup_s`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceSpan {
    /// Records the replay takes (all, or the first `max_requests` in time order).
    pub replayed: u64,
    /// Arrivals of the first and last of them, seconds (timestamps x `time_scale`).
    pub first_s: f64,
    pub last_s: f64,
    /// Of them, arriving by the end of the run, and inside the measured window.
    pub in_run: u64,
    pub in_window: u64,
}

/// Where `records`, replayed as `replay` says, fall in a run of `duration_s` seconds
/// whose first `warmup_s` are not measured.
pub fn trace_span(
    records: &[TraceRecord],
    replay: &TraceReplay,
    duration_s: f64,
    warmup_s: f64,
) -> TraceSpan {
    let mut times: Vec<f64> = records
        .iter()
        .map(|r| r.timestamp as f64 / 1e3 * replay.time_scale)
        .collect();
    times.sort_by(f64::total_cmp);
    if let Some(m) = replay.max_requests {
        times.truncate(m.min(times.len() as u64) as usize);
    }
    TraceSpan {
        replayed: times.len() as u64,
        first_s: times.first().copied().unwrap_or(0.0),
        last_s: times.last().copied().unwrap_or(0.0),
        in_run: times.iter().filter(|&&t| t <= duration_s).count() as u64,
        in_window: times
            .iter()
            .filter(|&&t| t >= warmup_s && t <= duration_s)
            .count() as u64,
    }
}

/// Three Mooncake records and a blank line, for the tests of the parser and the driver.
#[cfg(test)]
pub(super) const SNIPPET: &str = r#"{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}
{"timestamp": 27, "input_length": 700, "output_length": 52, "hash_ids": [1, 3]}

{"timestamp": 30, "input_length": 100, "output_length": 1, "hash_ids": [9]}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    use super::SNIPPET;

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
        assert!(matches!(
            parse_mooncake_str("not json"),
            Err(SimError::Trace { line: 1, .. })
        ));
        // Seconds instead of milliseconds: the unit is named.
        match parse_mooncake_str(
            "{\"timestamp\": 12.5, \"input_length\": 3, \"output_length\": 1}\n",
        ) {
            Err(SimError::Trace { line: 1, message }) => {
                assert!(
                    message.contains("timestamp 12.5: Mooncake timestamps are whole milliseconds"),
                    "{message}"
                )
            }
            other => panic!("expected a trace error, got {other:?}"),
        }
    }
    /// Issue 39 item 9: every bad line is reported at once (it stopped at the first:
    /// 1 of 4 problems), and a 0-token prompt is dropped with a note, not an error.
    #[test]
    fn every_bad_line_is_reported_at_once() {
        let good = "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1}";
        let text = [
            good,
            "{\"timestamp\": 2, \"input_length\": \"many\", \"output_length\": 1}",
            good,
            "not json",
            "{\"timestamp\": 2.5, \"input_length\": 5, \"output_length\": 1}",
            "{\"timestamp\": 3, \"input_length\": 0, \"output_length\": 1}",
            "{\"timestamp\": 4}",
        ]
        .join("\n");
        let e = read_mooncake(text.as_bytes(), &Limits::default()).unwrap_err();
        let SimError::TraceLines { bad, lines } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(*bad, 4);
        let at: Vec<usize> = lines.iter().map(|l| l.0).collect();
        assert_eq!(at, [2, 4, 5, 7]);
        let shown = e.to_string();
        assert!(
            shown.starts_with("trace: 4 bad lines:\n  line 2: "),
            "{shown}"
        );
        // More than BAD_LINES_SHOWN: all counted, the first ones listed.
        let many = vec!["x"; BAD_LINES_SHOWN + 5].join("\n");
        let e = read_mooncake(many.as_bytes(), &Limits::default()).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "trace: {} bad lines (the first {BAD_LINES_SHOWN} shown)",
                BAD_LINES_SHOWN + 5
            )),
            "{e}"
        );
        let empty =
            format!("{good}\n{{\"timestamp\": 3, \"input_length\": 0, \"output_length\": 1}}");
        let t = read_mooncake(empty.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(t.records.len(), 1);
        assert!(
            t.notes
                .join("\n")
                .contains("input_length 0 (an empty prompt): 1 record (first at line 2); dropped"),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn reading_repairs_what_it_can_and_says_so() {
        let text = "\u{feff}{\"timestamp\": 50, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1, 2, 3, 4]}\n\
                    {\"timestamp\": 10, \"input_length\": 10, \"output_length\": 4000000000}\n\
                    {\"timestamp\": 20, \"input_length\": 10, \"output_length\": 1}\n\
                    {\"timestamp\": 30, \"input_length\": 10, \"output_length\": 0}";
        let t = read_mooncake(text.as_bytes(), &Limits::default()).unwrap();
        // The BOM is skipped; the absurd and the empty outputs drop; the ids past 2
        // blocks are cut.
        assert_eq!(t.records.len(), 2);
        assert_eq!(t.records[0].hash_ids, vec![1, 2]);
        // The last line has no newline and is kept.
        assert_eq!(t.records[1].timestamp, 20);
        let notes = t.notes.join("\n");
        assert!(
            notes.contains("above 16000000 tokens: 1 record (first at line 2); dropped"),
            "{notes}"
        );
        assert!(
            notes.contains(
                "output_length 0 (a failed or empty request): 1 record (first at line 4); dropped"
            ),
            "{notes}"
        );
        assert!(notes.contains("more hash_ids than input_length covers (512 tokens per block): 1 record (first at line 1)"), "{notes}");
        assert!(
            notes.contains("timestamps out of order: 1 record (first at line 3)"),
            "{notes}"
        );
    }

    #[test]
    fn reading_is_bounded() {
        let limits = Limits {
            max_trace_line_bytes: 100,
            max_trace_records: 2,
            max_trace_bytes: 1000,
            ..Limits::default()
        };
        // An endless stream of zeros stops at the line limit.
        let zeros = std::io::BufReader::new(std::io::repeat(0));
        match read_mooncake(zeros, &limits) {
            Err(SimError::Trace { line: 1, message }) => {
                assert!(message.contains("max_trace_line_bytes = 100"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let line = "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1}\n";
        match read_mooncake(line.repeat(3).as_bytes(), &limits) {
            Err(SimError::Trace { line: 3, message }) => {
                assert!(message.contains("max_trace_records = 2"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let blank = format!("{line}{}", "\n".repeat(2000));
        match read_mooncake(blank.as_bytes(), &limits) {
            Err(SimError::Trace { message, .. }) => {
                assert!(message.contains("max_trace_bytes = 1000"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
}
