//! The request traces users have, read into twin's trace records: Mooncake JSONL
//! (twin's own form), Azure's LLM inference trace CSV (the 2023 and 2024 releases, code
//! and conversation), BurstGPT's CSV, and a `vllm bench serve --save-detailed` result
//! replayed as the trace of its sends. Chosen with `--trace-format` or detected from the
//! file's first line. Each format's time unit is stated (`TraceFormat::time_unit`) and
//! checked: a span no trace has is an error that names the unit. The formats without
//! prefix information give records without `hash_ids`: each is a prefix family of its
//! own (no cache hits, and `--cohort` keeps or leaves each record on its own).

use anyhow::{anyhow, bail, Context, Result};
use sim::serving::{read_mooncake, BadLines, Limits, Tally, TraceRead, TraceRecord};
use std::io::{BufRead, Read};

/// A trace file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TraceFormat {
    /// Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
    Mooncake,
    /// Azure LLM inference trace CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`.
    Azure,
    /// BurstGPT CSV: `Timestamp,Model,Request tokens,Response tokens,...`.
    Burstgpt,
    /// A `vllm bench serve --save-detailed` result: its `start_times`, `input_lens`,
    /// `output_lens`.
    VllmBench,
}

/// The longest span a trace may cover: 400 days (Azure's longest release is a week).
const MAX_SPAN_MS: f64 = 400.0 * 86_400e3;

impl TraceFormat {
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Mooncake => "Mooncake JSONL",
            TraceFormat::Azure => "Azure LLM inference CSV",
            TraceFormat::Burstgpt => "BurstGPT CSV",
            TraceFormat::VllmBench => "vllm bench serve result",
        }
    }

    /// How the format states arrival times.
    pub fn time_unit(self) -> &'static str {
        match self {
            TraceFormat::Mooncake => "whole milliseconds from the trace's start",
            TraceFormat::Azure => {
                "dates and times like `2023-11-16 18:15:46.6805900` (a UTC offset allowed)"
            }
            TraceFormat::Burstgpt => "seconds from the trace's start",
            TraceFormat::VllmBench => "seconds of the client's clock (`start_times`)",
        }
    }

    /// The format of a file whose first non-blank line is `first`, if it is one of
    /// these.
    pub fn detect(first: &str) -> Option<TraceFormat> {
        let t = first.trim_start_matches('\u{feff}').trim();
        let lower = t.to_ascii_lowercase();
        if t.starts_with('{') {
            // One JSON object per line is Mooncake's; a bench result is one object,
            // its first line `{` alone or holding its summary keys.
            return Some(if lower.contains("\"input_length\"") {
                TraceFormat::Mooncake
            } else {
                TraceFormat::VllmBench
            });
        }
        if lower.contains("contexttokens") && lower.contains("generatedtokens") {
            return Some(TraceFormat::Azure);
        }
        if lower.contains("request tokens") && lower.contains("response tokens") {
            return Some(TraceFormat::Burstgpt);
        }
        None
    }
}

/// Reads the trace at `path` (`shown` in messages) as `format`, or as the format its
/// first line shows, within `limits`.
pub fn read_trace(
    path: &std::path::Path,
    shown: &str,
    format: Option<TraceFormat>,
    limits: &Limits,
) -> Result<(TraceFormat, TraceRead)> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open trace `{shown}`"))?;
    let mut reader = std::io::BufReader::new(file);
    let format = match format {
        Some(f) => f,
        None => {
            let first = first_line(&mut reader)?;
            match TraceFormat::detect(&first) {
                Some(f) => f,
                // Nothing but blank lines: an empty trace, whichever format.
                None if first.trim().is_empty() => TraceFormat::Mooncake,
                None => {
                    // Read as Mooncake's, twin's own form: its first error says where.
                    let e = match read_mooncake(reader, limits) {
                        Err(e) => anyhow::Error::from(e),
                        Ok(read) => {
                            check_span(&read.records, TraceFormat::Mooncake)?;
                            return Ok((TraceFormat::Mooncake, read));
                        }
                    };
                    return Err(e.context(format!(
                        "trace `{shown}`: its first line is none of the trace formats twin reads (Mooncake JSONL, Azure LLM inference CSV, BurstGPT CSV, a vllm bench serve result): `{}`; name one with --trace-format; read as Mooncake JSONL",
                        clip(&first, 80)
                    )));
                }
            }
        }
    };
    let read = match format {
        TraceFormat::Mooncake => read_mooncake(reader, limits).map_err(anyhow::Error::from),
        TraceFormat::Azure => read_csv(reader, limits, format),
        TraceFormat::Burstgpt => read_csv(reader, limits, format),
        TraceFormat::VllmBench => read_vllm_bench(reader, limits),
    }
    .with_context(|| {
        format!(
            "trace `{shown}` ({}; arrival times as {})",
            format.name(),
            format.time_unit()
        )
    })?;
    check_span(&read.records, format)
        .with_context(|| format!("trace `{shown}` ({})", format.name()))?;
    Ok((format, read))
}

/// The first non-blank line, the reader left at the file's start.
fn first_line<R: BufRead + std::io::Seek>(reader: &mut R) -> Result<String> {
    let mut line = String::new();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .by_ref()
            .take(64 * 1024)
            .read_until(b'\n', &mut buf)
            .context("cannot read the trace")?;
        if n == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&buf);
        if !text.trim().trim_start_matches('\u{feff}').is_empty() {
            line = text.into_owned();
            break;
        }
    }
    reader.rewind().context("cannot read the trace")?;
    Ok(line)
}

fn clip(s: &str, n: usize) -> String {
    let shown: String = s
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let t = shown.trim();
    if t.chars().count() <= n {
        t.to_string()
    } else {
        t.chars().take(n).collect::<String>() + "..."
    }
}

/// Records as read, before the checks every format shares.
struct Raw {
    /// (line or index, arrival in ms from any origin, input, output).
    rows: Vec<(usize, f64, u64, u64)>,
}

/// Arrivals relative to the first, whole ms; input 0 or output 0, and lengths above
/// twin's limit, dropped with a note; `max_trace_records`.
fn finish(raw: Raw, limits: &Limits, what: &str) -> Result<TraceRead> {
    let mut out = TraceRead::default();
    let origin = raw.rows.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
    let (mut no_input, mut no_output, mut too_long, mut unsorted) = (
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
    );
    let mut latest = f64::NEG_INFINITY;
    let max = sim::serving::MAX_TOKENS as u64;
    for (at, t_ms, input, output) in raw.rows {
        if input == 0 {
            no_input.add(at);
            continue;
        }
        if output == 0 {
            no_output.add(at);
            continue;
        }
        if input > max || output > max {
            too_long.add(at);
            continue;
        }
        if t_ms < latest {
            unsorted.add(at);
        }
        latest = latest.max(t_ms);
        if out.records.len() as u64 >= limits.max_trace_records {
            bail!(
                "{what} {at}: more than limits.max_trace_records = {} records (raise the limit, or cut the trace)",
                limits.max_trace_records
            );
        }
        out.records.push(TraceRecord {
            timestamp: (t_ms - origin).round() as u64,
            input_length: input as u32,
            output_length: output as u32,
            hash_ids: Vec::new(),
        });
    }
    out.notes
        .extend(no_input.note_at(what, "0 prompt tokens (an empty prompt)", "dropped"));
    out.notes.extend(no_output.note_at(
        what,
        "0 output tokens (a failed or empty request)",
        "dropped",
    ));
    out.notes.extend(too_long.note_at(
        what,
        &format!("prompt or output above {max} tokens"),
        "dropped",
    ));
    out.notes.extend(unsorted.note_at(
        what,
        "arrivals out of order",
        "each is replayed at its time",
    ));
    if !out.records.is_empty() {
        out.notes.push(
            "no prefix information: each record is a prefix family of its own (no cache hits)"
                .into(),
        );
    }
    Ok(out)
}

/// Azure's and BurstGPT's CSV: columns found by header name, errors by line.
fn read_csv<R: BufRead>(reader: R, limits: &Limits, format: TraceFormat) -> Result<TraceRead> {
    let mut rdr = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(false)
        .from_reader(reader.take(limits.max_trace_bytes.saturating_add(1)));
    let headers: Vec<String> = rdr
        .headers()
        .context("cannot read the header line")?
        .iter()
        .map(|h| h.trim_start_matches('\u{feff}').to_ascii_lowercase())
        .collect();
    let col = |name: &str| {
        headers.iter().position(|h| h == name).ok_or_else(|| {
            anyhow!(
                "line 1: no `{name}` column (the header has {})",
                headers.join(", ")
            )
        })
    };
    let (t, i, o) = match format {
        TraceFormat::Azure => (
            col("timestamp")?,
            col("contexttokens")?,
            col("generatedtokens")?,
        ),
        _ => (
            col("timestamp")?,
            col("request tokens")?,
            col("response tokens")?,
        ),
    };
    let mut raw = Raw { rows: Vec::new() };
    let mut bytes = 0u64;
    // Every bad line is found before the error, which lists them.
    let mut bad = BadLines::default();
    for (k, rec) in rdr.records().enumerate() {
        let line = k + 2;
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                bad.add(line, e.to_string());
                continue;
            }
        };
        bytes += rec.as_slice().len() as u64 + rec.len() as u64;
        if bytes > limits.max_trace_bytes {
            bail!(
                "line {line}: the trace is larger than limits.max_trace_bytes = {} bytes (raise the limit to read it)",
                limits.max_trace_bytes
            );
        }
        match csv_row(&rec, format, (t, i, o)) {
            Ok((t_ms, input, output)) => raw.rows.push((line, t_ms, input, output)),
            Err(why) => bad.add(line, why),
        }
    }
    if let Some(e) = bad.into_error() {
        return Err(e.into());
    }
    if raw.rows.is_empty() {
        bail!("no records after the header line");
    }
    finish(raw, limits, "line")
}

/// One CSV row's arrival (ms), prompt and output tokens, from columns `(t, i, o)`;
/// or what is wrong with it.
fn csv_row(
    rec: &csv::StringRecord,
    format: TraceFormat,
    (t, i, o): (usize, usize, usize),
) -> std::result::Result<(f64, u64, u64), String> {
    let field = |c: usize| rec.get(c).unwrap_or("");
    let count = |c: usize, name: &str| -> std::result::Result<u64, String> {
        let v = field(c);
        v.parse::<u64>()
            .or_else(|_| {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0 && x.fract() == 0.0)
                    .map(|x| x as u64)
                    .ok_or(())
            })
            .map_err(|_| format!("{name} `{}` is not a whole number of tokens", clip(v, 40)))
    };
    let t_ms = match format {
        TraceFormat::Azure => azure_time_ms(field(t)).ok_or_else(|| {
            format!(
                "TIMESTAMP `{}` is not a date and time like `2023-11-16 18:15:46.6805900`",
                clip(field(t), 40)
            )
        })?,
        _ => {
            let v = field(t);
            let s: f64 = v
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| format!("Timestamp `{}` is not a number of seconds", clip(v, 40)))?;
            s * 1e3
        }
    };
    let (ni, no) = match format {
        TraceFormat::Azure => ("ContextTokens", "GeneratedTokens"),
        _ => ("Request tokens", "Response tokens"),
    };
    Ok((t_ms, count(i, ni)?, count(o, no)?))
}

/// Milliseconds since 1970 of Azure's `YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]`.
fn azure_time_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    let (date, rest) = s.split_once([' ', 'T'])?;
    // A UTC offset, if any, after the seconds.
    let (time, offset_s) = match rest.rfind(['+', '-']) {
        Some(p) if p > 0 => {
            let (hm, sign) = (&rest[p + 1..], if &rest[p..=p] == "-" { -1.0 } else { 1.0 });
            let (h, m) = hm.split_once(':').unwrap_or((hm, "0"));
            (
                &rest[..p],
                sign * (h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0),
            )
        }
        _ => (rest.trim_end_matches('Z'), 0.0),
    };
    let d = chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
    let mut parts = time.splitn(3, ':');
    let (h, m, sec): (u32, u32, f64) = (
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
        parts.next()?.parse().ok()?,
    );
    if h > 23 || m > 59 || !(0.0..61.0).contains(&sec) {
        return None;
    }
    let midnight = d.and_hms_opt(0, 0, 0)?.and_utc().timestamp() as f64;
    Some((midnight + h as f64 * 3600.0 + m as f64 * 60.0 + sec - offset_s) * 1e3)
}

/// A `vllm bench serve --save-detailed` result: one request per entry of its
/// `start_times` (seconds), `input_lens` and `output_lens`.
fn read_vllm_bench<R: BufRead>(reader: R, limits: &Limits) -> Result<TraceRead> {
    let mut text = String::new();
    reader
        .take(limits.max_trace_bytes.saturating_add(1))
        .read_to_string(&mut text)
        .context("cannot read the result")?;
    if text.len() as u64 > limits.max_trace_bytes {
        bail!(
            "the result is larger than limits.max_trace_bytes = {} bytes (raise the limit to read it)",
            limits.max_trace_bytes
        );
    }
    let v: serde_json::Value = serde_json::from_str(text.trim_start_matches('\u{feff}'))
        .map_err(|e| anyhow!("not one JSON object: {e}"))?;
    let list = |k: &str| -> Result<Vec<f64>> {
        v.get(k)
            .and_then(|x| x.as_array())
            .ok_or_else(|| anyhow!("no `{k}` list (save the result with --save-detailed)"))?
            .iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .ok_or_else(|| anyhow!("`{k}`[{i}] is not a number >= 0: {x}"))
            })
            .collect()
    };
    let (starts, inputs, outputs) = (
        list("start_times")?,
        list("input_lens")?,
        list("output_lens")?,
    );
    if starts.len() != inputs.len() || starts.len() != outputs.len() {
        bail!(
            "`start_times`, `input_lens` and `output_lens` differ in length ({}, {}, {})",
            starts.len(),
            inputs.len(),
            outputs.len()
        );
    }
    if starts.is_empty() {
        bail!("no requests (`start_times` is empty)");
    }
    let rows = (0..starts.len())
        .map(|i| (i, starts[i] * 1e3, inputs[i] as u64, outputs[i] as u64))
        .collect();
    finish(Raw { rows }, limits, "request")
}

/// Arrivals over more than `MAX_SPAN_MS` are a unit mistake.
fn check_span(records: &[TraceRecord], format: TraceFormat) -> Result<()> {
    let last = records.iter().map(|r| r.timestamp).max().unwrap_or(0) as f64;
    if last > MAX_SPAN_MS {
        bail!(
            "its arrivals span {:.0} days, more than any trace covers: {} gives arrival times as {}; were they in another unit?",
            last / 86_400e3,
            format.name(),
            format.time_unit()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str, format: Option<TraceFormat>) -> Result<(TraceFormat, TraceRead)> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, text).unwrap();
        read_trace(&p, "t", format, &Limits::default())
    }

    #[test]
    fn the_first_line_names_the_format() {
        let d = TraceFormat::detect;
        assert_eq!(
            d("{\"timestamp\": 0, \"input_length\": 5}"),
            Some(TraceFormat::Mooncake)
        );
        assert_eq!(d("{"), Some(TraceFormat::VllmBench));
        assert_eq!(
            d("\u{feff}TIMESTAMP,ContextTokens,GeneratedTokens"),
            Some(TraceFormat::Azure)
        );
        assert_eq!(
            d("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"),
            Some(TraceFormat::Burstgpt)
        );
        assert_eq!(d("a,b,c"), None);
    }

    #[test]
    fn azure_times_are_dates_read_to_the_millisecond() {
        // 2023-11-16 18:15:46.68059 UTC, and the 2024 release's offset form.
        let a = azure_time_ms("2023-11-16 18:15:46.6805900").unwrap();
        assert!((a - 1_700_158_546_680.59).abs() < 1e-3, "{a}");
        let b = azure_time_ms("2024-05-10 00:00:00.009930+00:00").unwrap();
        assert!((b - 1_715_299_200_009.93).abs() < 1e-3, "{b}");
        let c = azure_time_ms("2024-05-10 02:00:00+02:00").unwrap();
        assert_eq!(c, 1_715_299_200_000.0);
        assert_eq!(azure_time_ms("2023-11-16"), None);
        assert_eq!(azure_time_ms("2023-13-16 00:00:00"), None);
    }

    #[test]
    fn an_azure_trace_is_replayed_from_its_first_arrival() {
        let (f, t) = read_text(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n\
             2023-11-16 18:15:46.6805900,4808,10\n\
             2023-11-16 18:15:50.9951690,3180,8\n\
             2023-11-16 18:15:51.0000000,100,0\n",
            None,
        )
        .unwrap();
        assert_eq!(f, TraceFormat::Azure);
        let got: Vec<(u64, u32, u32)> = t
            .records
            .iter()
            .map(|r| (r.timestamp, r.input_length, r.output_length))
            .collect();
        assert_eq!(got, vec![(0, 4808, 10), (4315, 3180, 8)]);
        assert!(t.notes[0].starts_with("0 output tokens"), "{:?}", t.notes);
        assert!(t.notes[0].contains("first at line 4"), "{:?}", t.notes);
        assert!(t.records.iter().all(|r| r.hash_ids.is_empty()));
    }

    #[test]
    fn a_burstgpt_trace_is_in_seconds() {
        let (f, t) = read_text(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
             5,ChatGPT,472,18,490,Conversation log\n\
             45.5,GPT-4,1087,0,1087,Conversation log\n\
             46.25,ChatGPT,417,176,593,API log\n",
            None,
        )
        .unwrap();
        assert_eq!(f, TraceFormat::Burstgpt);
        let got: Vec<(u64, u32)> = t
            .records
            .iter()
            .map(|r| (r.timestamp, r.output_length))
            .collect();
        assert_eq!(got, vec![(0, 18), (41_250, 176)]);
    }

    #[test]
    fn a_vllm_bench_result_replays_its_sends() {
        let text = r#"{"backend": "vllm", "start_times": [100.5, 100.25, 101.0],
            "input_lens": [2047, 2047, 10], "output_lens": [128, 128, 4]}"#;
        let (f, t) = read_text(text, None).unwrap();
        assert_eq!(f, TraceFormat::VllmBench);
        let got: Vec<u64> = t.records.iter().map(|r| r.timestamp).collect();
        assert_eq!(got, vec![250, 0, 750]);
        assert!(
            t.notes
                .iter()
                .any(|n| n.starts_with("arrivals out of order")),
            "{:?}",
            t.notes
        );
    }

    /// Issue 39 item 9: a 0-token prompt is dropped with a note, as a 0-token output
    /// is (it aborted the whole replay).
    #[test]
    fn empty_prompts_are_dropped_with_a_note() {
        let (_, t) = read_text(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,3\n2023-11-16 18:15:47,12,3\n2023-11-16 18:15:48,0,3\n",
            None,
        )
        .unwrap();
        assert_eq!(t.records.len(), 1);
        let notes = t.notes.join("\n");
        assert!(
            notes.contains(
                "0 prompt tokens (an empty prompt): 2 records (first at line 2); dropped"
            ),
            "{notes}"
        );
    }

    #[test]
    fn bad_traces_say_what_and_where() {
        let e =
            |text: &str, f: Option<TraceFormat>| format!("{:#}", read_text(text, f).unwrap_err());
        let s = e(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12x,3\n",
            None,
        );
        assert!(s.contains("line 2: ContextTokens `12x`"), "{s}");
        let s = e(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n16/11/2023,12,3\n",
            None,
        );
        assert!(s.contains("line 2: TIMESTAMP `16/11/2023`"), "{s}");
        let s = e(
            "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,12\n",
            Some(TraceFormat::Azure),
        );
        assert!(s.contains("no `generatedtokens` column"), "{s}");
        // Issue 39 item 9: every bad line at once (reading stopped at the first).
        let s = e(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12x,3\n2023-11-16 18:15:47,12,3\n16/11/2023,12,3\n2023-11-16 18:15:48,1,2,3\n2023-11-16 18:15:49,7,y\n",
            None,
        );
        assert!(s.contains("trace: 4 bad lines:"), "{s}");
        for want in [
            "line 2: ContextTokens `12x`",
            "line 4: TIMESTAMP `16/11/2023`",
            "line 5: ",
            "line 6: GeneratedTokens `y`",
        ] {
            assert!(s.contains(want), "{want}: {s}");
        }
        let s = e("id,len\n1,2\n", None);
        assert!(
            s.contains("none of the trace formats") && s.contains("--trace-format"),
            "{s}"
        );
        // BurstGPT times in milliseconds by mistake: a span of years.
        let s = e(
            "Timestamp,Model,Request tokens,Response tokens\n0,a,5,5\n40000000000,a,5,5\n",
            None,
        );
        assert!(
            s.contains("span 462963 days") && s.contains("seconds from the trace's start"),
            "{s}"
        );
        let s = e(
            r#"{"start_times": [1, 2], "input_lens": [3], "output_lens": [4, 5]}"#,
            None,
        );
        assert!(s.contains("differ in length (2, 1, 2)"), "{s}");
    }
}
