//! A corpus on disk: JSON Lines, one [`RunRecord`] a line (`#` lines and blank lines
//! are comments), plain or gzip. Reading reports every bad line at once (up to
//! [`MAX_REPORTED`]); writing goes to a sibling file first and is renamed into place,
//! so a failed write leaves what was there.

use crate::{CorpusError, RunRecord, SCHEMA};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::Path;

/// Bad lines named in one error; the rest are counted.
pub const MAX_REPORTED: usize = 20;

/// The most bytes a corpus file may hold once unzipped.
pub const MAX_BYTES: usize = 512 << 20;

/// The bytes of `path`, gunzipped when they start with gzip's magic.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, CorpusError> {
    let origin = path.display().to_string();
    let raw = std::fs::read(path).map_err(|e| CorpusError::Read {
        origin: origin.clone(),
        message: format!("cannot read it: {e}"),
    })?;
    unzip(&raw, &origin)
}

/// `raw`, gunzipped when it starts with gzip's magic bytes (within [`MAX_BYTES`]).
pub fn unzip(raw: &[u8], origin: &str) -> Result<Vec<u8>, CorpusError> {
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(raw)
        .take(MAX_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| CorpusError::Read {
            origin: origin.to_string(),
            message: format!("not a readable gzip file: {e}"),
        })?;
    if out.len() > MAX_BYTES {
        return Err(CorpusError::Read {
            origin: origin.to_string(),
            message: format!("more than {MAX_BYTES} bytes unzipped"),
        });
    }
    Ok(out)
}

/// The records of a JSON Lines text; every bad line is reported (line number, what
/// is wrong), and so is a repeated id.
pub fn parse_jsonl(text: &str, origin: &str) -> Result<Vec<RunRecord>, CorpusError> {
    let mut records = Vec::new();
    let mut bad = Vec::new();
    let mut ids = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        match serde_json::from_str::<RunRecord>(t) {
            Ok(r) if r.schema != SCHEMA => bad.push(format!(
                "line {}: schema `{}`: this twin reads `{SCHEMA}`",
                i + 1,
                r.schema
            )),
            Ok(r) => match r.problems() {
                p if !p.is_empty() => {
                    let p: Vec<String> = p.iter().map(ToString::to_string).collect();
                    bad.push(format!("line {} ({}): {}", i + 1, r.id, p.join("; ")))
                }
                _ if !ids.insert(r.id.clone()) => bad.push(format!(
                    "line {}: id `{}` repeats an earlier record's",
                    i + 1,
                    r.id
                )),
                _ => records.push(r),
            },
            Err(e) => bad.push(format!("line {}: {e}", i + 1)),
        }
    }
    if bad.is_empty() {
        return Ok(records);
    }
    let more = bad.len().saturating_sub(MAX_REPORTED);
    bad.truncate(MAX_REPORTED);
    if more > 0 {
        bad.push(format!("... and {more} more"));
    }
    Err(CorpusError::Lines {
        origin: origin.to_string(),
        lines: bad,
    })
}

/// The records as JSON Lines text, under a header comment.
pub fn to_jsonl(records: &[RunRecord], header: &str) -> String {
    let mut out = String::new();
    for l in header.lines() {
        out.push_str("# ");
        out.push_str(l);
        out.push('\n');
    }
    for r in records {
        // A record is plain data: serialising it cannot fail.
        out.push_str(&serde_json::to_string(r).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// Writes `text` to `path` (gzip when the name ends in `.gz`) through a sibling file
/// renamed into place.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), CorpusError> {
    let origin = path.display().to_string();
    let err = |e: std::io::Error| CorpusError::Read {
        origin: origin.clone(),
        message: format!("cannot write it: {e}"),
    };
    let bytes = if origin.ends_with(".gz") {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(text.as_bytes()).map_err(err)?;
        enc.finish().map_err(err)?
    } else {
        text.as_bytes().to_vec()
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    std::fs::write(&tmp, bytes).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::*;

    pub(crate) fn sample(id: &str) -> RunRecord {
        RunRecord {
            schema: SCHEMA.into(),
            id: id.into(),
            provenance: Provenance {
                source: "hand-made".into(),
                ..Default::default()
            },
            engine: Engine {
                name: EngineName::Vllm,
                version: Some("0.19.0".into()),
                image: None,
                settings: Default::default(),
            },
            model: ModelRef {
                id: "meta-llama/Llama-3.1-8B-Instruct".into(),
                config: "llama-3.1-8b".into(),
                gemm: Format::Bf16,
                moe: None,
                kv: None,
            },
            gpu: Gpu {
                system: "h100_sxm".into(),
                hardware: "h100".into(),
            },
            layout: Layout::Aggregated {
                workers: Workers {
                    count: Some(1),
                    tp: 2,
                    pp: 1,
                    attention_dp: 1,
                    moe_tp: 1,
                    moe_ep: 1,
                    max_batch: None,
                },
            },
            client: Client {
                tool: "aiperf".into(),
                load: Load::ClosedLoop { concurrency: 8 },
                num_prompts: Some(80),
                warmup_requests: 16,
                input: Lengths::Fixed { tokens: 1024 },
                output: Lengths::Fixed { tokens: 128 },
                shared_prefix: 0,
                ignore_eos: true,
                held: Vec::new(),
            },
            measured: [(Metric::TpotMs, [(Stat::Center, 10.0)].into_iter().collect())]
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn a_corpus_round_trips_through_jsonl() {
        let recs = vec![sample("a"), sample("b")];
        let text = to_jsonl(&recs, "two runs\nmade by hand");
        assert!(text.starts_with("# two runs\n# made by hand\n"));
        assert_eq!(parse_jsonl(&text, "t").unwrap(), recs);
    }

    #[test]
    fn every_bad_line_is_reported_at_once() {
        let good = serde_json::to_string(&sample("a")).unwrap();
        let other_schema = good.replace(SCHEMA, "twin.run.v0");
        let no_figure = serde_json::to_string(&RunRecord {
            measured: Default::default(),
            ..sample("c")
        })
        .unwrap();
        let text = format!("{good}\n{{not json\n{other_schema}\n{good}\n{no_figure}\n");
        let CorpusError::Lines { lines, .. } = parse_jsonl(&text, "t").unwrap_err() else {
            panic!("expected the bad lines")
        };
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].starts_with("line 2: "), "{lines:?}");
        assert!(lines[1].contains("schema `twin.run.v0`"), "{lines:?}");
        assert!(lines[2].contains("id `a` repeats"), "{lines:?}");
        assert!(lines[3].contains("no measured figure"), "{lines:?}");
    }

    /// A record's speculative decoding round-trips, and drafts out of 1..=16 or an
    /// acceptance out of [0, 1] are named where they are.
    #[test]
    fn speculative_decoding_round_trips_and_bad_values_are_named() {
        let mut r = sample("s");
        r.engine.settings.speculative = Some(Speculative {
            method: SpecMethod::Mtp,
            draft_tokens: 3,
            acceptance: Some(0.7),
        });
        let text = to_jsonl(std::slice::from_ref(&r), "h");
        assert!(
            text.contains(r#""speculative":{"method":"mtp","draft_tokens":3,"acceptance":0.7}"#)
        );
        assert_eq!(parse_jsonl(&text, "t").unwrap(), vec![r.clone()]);
        r.engine.settings.speculative = Some(Speculative {
            method: SpecMethod::Mtp,
            draft_tokens: 0,
            acceptance: Some(1.5),
        });
        let keys: Vec<String> = r.problems().iter().map(ToString::to_string).collect();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(keys[0].contains("speculative.draft_tokens"), "{keys:?}");
        assert!(keys[1].contains("speculative.acceptance"), "{keys:?}");
    }

    #[test]
    fn gzip_is_read_back_and_a_write_is_atomic() {
        let dir = std::env::temp_dir().join(format!("corpus-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.jsonl.gz");
        let text = to_jsonl(&[sample("a")], "h");
        write_atomic(&p, &text).unwrap();
        let back = String::from_utf8(read_bytes(&p).unwrap()).unwrap();
        assert_eq!(back, text);
        assert!(!dir.join("c.jsonl.gz.partial").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
