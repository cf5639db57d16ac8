//! The JSON the benchmark clients write, read as plain JSON values.
//!
//! Python's `json.dump` writes `NaN`, `Infinity` and `-Infinity` for non-finite
//! floats (its default `allow_nan=True`): SGLang's result line holds
//! `"request_rate": Infinity` for `--request-rate inf`
//! (`sgl-project/sglang@0033168f0f58b2bc05aa0273bd475d9c01bafb1c:python/sglang/bench_serving.py`,
//! `"request_rate": request_rate`), and vLLM writes `--burstiness inf` so
//! (`vllm-project/vllm@009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1:vllm/benchmarks/serve.py`,
//! `result_json["burstiness"] = args.burstiness`). Strict JSON has no such tokens: they
//! are turned into the strings `"NaN"`, `"Infinity"` and `"-Infinity"` before parsing,
//! so that a reader can accept an infinite rate where the tool means "all at once" and
//! name a non-finite figure anywhere else (the same idea as the `live` crate's reader
//! of vLLM results, written again here so that `corpus` does not depend on `live`).
//!
//! A file may hold several JSON values one after another: SGLang appends one result
//! line per run, `vllm bench serve --append-result` appends one object per run, and
//! inference-perf's report files can be concatenated. Every value is returned with the
//! line it starts on.

use serde_json::Value;

/// Python's non-finite float tokens, as strings a reader can recognise.
pub(crate) const NON_FINITE: [&str; 3] = ["-Infinity", "Infinity", "NaN"];

/// `text` with Python's bare `NaN`, `Infinity` and `-Infinity` (outside strings)
/// quoted; everything else, line breaks included, is kept as it is.
pub(crate) fn quote_non_finite(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_str = false;
    let mut esc = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if let Some(tok) = NON_FINITE.iter().find(|t| rest.starts_with(**t)) {
            out.push('"');
            out.push_str(tok);
            out.push('"');
            rest = &rest[tok.len()..];
            continue;
        }
        if c == '"' {
            in_str = true;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The JSON values of `text`, each with the (1-based) line it starts on; every value
/// that cannot be parsed is named by its line. A text of one value per line is read
/// line by line, so that one bad line does not hide the others.
pub(crate) fn values(text: &str) -> Result<Vec<(usize, Value)>, Vec<String>> {
    let clean = quote_non_finite(text);
    let mut out = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(&clean).into_iter::<Value>();
    loop {
        let start = stream.byte_offset();
        match stream.next() {
            None => return Ok(out),
            Some(Ok(v)) => {
                let skipped = clean[start..].len() - clean[start..].trim_start().len();
                out.push((line_of(&clean, start + skipped), v));
            }
            Some(Err(e)) => {
                if looks_line_oriented(&clean) {
                    return by_line(&clean);
                }
                return Err(vec![format!("line {}: not JSON: {e}", e.line())]);
            }
        }
    }
}

/// The 1-based line of byte `offset`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Whether the text's first non-blank line is a whole JSON value of its own.
fn looks_line_oriented(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .is_some_and(|l| serde_json::from_str::<Value>(l).is_ok())
}

/// Every non-blank line as one JSON value; every bad line named.
fn by_line(text: &str) -> Result<Vec<(usize, Value)>, Vec<String>> {
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(l) {
            Ok(v) => out.push((i + 1, v)),
            Err(e) => bad.push(format!("line {}: not JSON: {e}", i + 1)),
        }
    }
    if bad.is_empty() {
        Ok(out)
    } else {
        Err(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_non_finite_tokens_become_strings_outside_strings_only() {
        let text =
            r#"{"a": Infinity, "b": -Infinity, "c": NaN, "d": "NaN Infinity \" x", "e": [NaN]}"#;
        let v: Value = serde_json::from_str(&quote_non_finite(text)).unwrap();
        assert_eq!(v["a"], "Infinity");
        assert_eq!(v["b"], "-Infinity");
        assert_eq!(v["c"], "NaN");
        assert_eq!(v["d"], "NaN Infinity \" x");
        assert_eq!(v["e"][0], "NaN");
    }

    #[test]
    fn several_values_are_read_with_their_lines_and_bad_lines_are_all_named() {
        let vals = values("{\"a\": 1}\n\n{\"a\": 2}{\"a\": 3}\n").unwrap();
        let lines: Vec<usize> = vals.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, vec![1, 3, 3]);
        let pretty = values("{\n \"a\": 1\n}\n").unwrap();
        assert_eq!(pretty.len(), 1);
        let bad = values("{\"a\": 1}\n{oops\n{\"a\": 2}\n[1,\n").unwrap_err();
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].starts_with("line 2: not JSON"), "{bad:?}");
        assert!(bad[1].starts_with("line 4: not JSON"), "{bad:?}");
        assert!(values("{\n \"a\": \n").unwrap_err()[0].starts_with("line 3"));
    }
}
