//! No function outside tests is longer than `MAX_LINES` lines (issue 18: a function a
//! newcomer can read on one screen or two). The check reads every `.rs` file under the
//! crates' `src/` folders as text: a small lexer skips comments, strings and character
//! literals, drops `#[cfg(test)]` items, and measures each `fn` from its first line to
//! its closing brace.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// The longest a function outside tests may be, in lines from `fn` to its closing brace.
const MAX_LINES: usize = 100;

/// One byte of code with comments, string and character literals blanked to spaces
/// (newlines kept), so braces and keywords found afterwards are real ones.
fn code_only(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (1, i + 2);
                while j < b.len() && depth > 0 {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                blank(&mut out, i, j);
                i = j;
            }
            b'r' if raw_string_hashes(b, i).is_some() && !ident_before(b, i) => {
                let hashes = raw_string_hashes(b, i).unwrap();
                let body = i + 2 + hashes;
                let mut close = vec![b'"'];
                close.extend(std::iter::repeat_n(b'#', hashes));
                let end = b[body..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| body + p + close.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                blank(&mut out, i, end);
                i = end;
            }
            b'\'' => {
                // A character literal ('x', '\n', '\u{..}', '{'), not a lifetime ('a).
                let end = if b.get(i + 1) == Some(&b'\\') {
                    b[i + 2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map(|p| i + 3 + p)
                } else if b.get(i + 2) == Some(&b'\'') {
                    Some(i + 3)
                } else {
                    None
                };
                match end {
                    Some(e) => {
                        blank(&mut out, i, e);
                        i = e;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    out
}

/// `r"`, `r#"`, `r##"`...: the number of hashes of a raw string starting at `i`.
fn raw_string_hashes(b: &[u8], i: usize) -> Option<usize> {
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    (b.get(i + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// The index just past the item that starts at `from`: its matching closing brace, or
/// the `;` that ends a body-less item.
fn item_end(code: &[u8], from: usize) -> usize {
    let mut depth = 0usize;
    for (j, &c) in code.iter().enumerate().skip(from) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j + 1;
                }
            }
            b';' if depth == 0 => return j + 1,
            _ => {}
        }
    }
    code.len()
}

fn is_word_at(code: &[u8], i: usize, word: &[u8]) -> bool {
    code[i..].starts_with(word)
        && !ident_before(code, i)
        && code
            .get(i + word.len())
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
}

/// Every function longer than `max` lines in `text`, outside `#[cfg(test)]` items, as
/// (name, first line, lines).
fn long_functions(text: &str, max: usize) -> Vec<(String, usize, usize)> {
    let mut code = code_only(text);
    // Blank every #[cfg(test)] item (a test module, a test-only function).
    let marker = b"#[cfg(test)]";
    let mut i = 0;
    while let Some(p) = code[i..].windows(marker.len()).position(|w| w == marker) {
        let start = i + p;
        let end = item_end(&code, start + marker.len());
        for c in &mut code[start..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        i = end;
    }
    let line_of = |at: usize| code[..at].iter().filter(|&&c| c == b'\n').count() + 1;
    let mut found = Vec::new();
    for i in 0..code.len() {
        if !is_word_at(&code, i, b"fn") {
            continue;
        }
        let name_start = i
            + 2
            + code[i + 2..]
                .iter()
                .take_while(|c| c.is_ascii_whitespace())
                .count();
        let name_len = code[name_start..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .count();
        if name_len == 0 {
            continue; // `fn(` in a type
        }
        let end = item_end(&code, name_start + name_len);
        let lines = line_of(end.saturating_sub(1)) - line_of(i) + 1;
        if lines > max {
            let name = String::from_utf8_lossy(&code[name_start..name_start + name_len]);
            found.push((name.into_owned(), line_of(i), lines));
        }
    }
    found
}

#[test]
fn the_lexer_measures_functions_as_written() {
    let src = "fn short() {\n    let s = \"}\";\n    let c = '{';\n}\n\
               // fn commented() {\n\
               fn long<'a>(x: &'a str) -> &'a str {\n    /* { */\n    let r = r#\"}\"#;\n    x\n}\n\
               #[cfg(test)]\nmod tests {\n    fn long_test() {\n\n\n\n    }\n}\n";
    // `short` is 4 lines, `long` 5 (its braces in a comment and raw string do not
    // count); `long_test` is 5 but inside #[cfg(test)].
    assert!(long_functions(src, 5).is_empty());
    assert_eq!(long_functions(src, 4), vec![("long".to_string(), 6, 5)]);
    assert_eq!(long_functions(src, 3).len(), 2);
}

#[test]
fn no_function_outside_tests_is_over_the_limit() {
    let mut long = Vec::new();
    for dir in SOURCE_DIRS {
        let root = repo().join(dir);
        if !root.exists() {
            continue;
        }
        for path in rust_files(&root) {
            if is_test_only(&path) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let rel = path.strip_prefix(repo()).unwrap().display().to_string();
            for (name, line, lines) in long_functions(&text, MAX_LINES) {
                long.push(format!("{rel}:{line} fn {name}: {lines} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "{} functions outside tests are over {MAX_LINES} lines; split them:\n{}",
        long.len(),
        long.join("\n")
    );
}

/// Every `.rs` file below `dir`, in name order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// Files compiled only under `cfg(test)` (the binary's fuzz module).
fn is_test_only(path: &Path) -> bool {
    path.to_string_lossy().contains("src/fuzz/")
        || path.file_name().is_some_and(|n| n == "tests.rs")
}
