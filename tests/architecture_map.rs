//! ARCHITECTURE.md is a map: every path it names must lead somewhere.
//!
//! The map names code in backticks, in two forms, and both are checked here:
//! - a Rust path that starts with a crate of the workspace (`sim::serving::Driver`,
//!   `sim::cost::CostModel::step`; the binary is `twin`): its modules are followed
//!   through the source tree (`seg.rs` or `seg/mod.rs`, declared with `mod seg` in the
//!   parent), its item must be defined in the module it names (or re-exported there by
//!   `pub use`), and a member after an item (`Type::member`) must be a function,
//!   constant or type of one of the item's `impl` blocks, a trait's or an enum's own;
//! - a file or folder path from the repository root (`sim/src/serving/rack.rs`,
//!   `scenarios/`, `scenarios/*.toml`): it must exist (a `*` in the last part must
//!   match at least one entry).
//!
//! Any other backticked `a::b` (a path from no crate of the workspace, `Type::member`
//! without its module) is an error too: the map names things by their full path.

use std::path::{Path, PathBuf};

/// The workspace's crates and their source roots; `twin` is the binary.
const CRATES: [(&str, &str); 14] = [
    ("spec", "spec/src"),
    ("sim", "sim/src"),
    ("engine", "engine/src"),
    ("kernels", "kernels/src"),
    ("calibration", "calibration/src"),
    ("fitting", "fitting/src"),
    ("live", "live/src"),
    ("corpus", "corpus/src"),
    ("hf", "hf/src"),
    ("scenario", "scenario/src"),
    ("report", "report/src"),
    ("measured", "measured/src"),
    ("published", "published/src"),
    ("twin", "src"),
];

/// Paths outside the workspace that the map may name without resolving them.
const FOREIGN: [&str; 2] = ["std", "serde"];

/// File endings that make a backticked word a file path.
const FILE_ENDINGS: [&str; 12] = [
    ".rs", ".toml", ".md", ".cu", ".csv", ".json", ".sh", ".yaml", ".j2", ".txt", ".gz", ".sbatch",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The backticked spans of a markdown text outside fenced blocks, each with its line
/// (1-based), whitespace inside a span collapsed (a span may wrap).
fn spans(text: &str) -> Vec<(usize, String)> {
    let mut prose = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            prose.push('\n');
            continue;
        }
        if !fenced {
            prose.push_str(line);
        }
        prose.push('\n');
    }
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    let mut line = 1;
    while let Some(open) = rest.find('`') {
        line += rest[..open].matches('\n').count();
        let after = &rest[open + 1..];
        let Some(close) = after.find('`') else {
            break;
        };
        let inner = &after[..close];
        let words: Vec<&str> = inner.split_whitespace().collect();
        out.push((line, words.join(" ").replace(":: ", "::")));
        line += inner.matches('\n').count();
        rest = &after[close + 1..];
    }
    out
}

/// What a span names, if anything this test checks.
#[derive(Debug, PartialEq)]
enum Named {
    Rust(String),
    File(String),
}

fn classify(span: &str) -> Option<Named> {
    let s = span.trim_end_matches("()");
    let ident = |w: &str| {
        !w.is_empty()
            && w.chars().all(|c| c.is_alphanumeric() || c == '_')
            && !w.starts_with(|c: char| c.is_ascii_digit())
    };
    if s.contains("::") && s.split("::").all(ident) {
        return Some(Named::Rust(s.to_string()));
    }
    let path_char = |c: char| c.is_alphanumeric() || "_-.*/".contains(c);
    if s.chars().all(path_char)
        && !s.starts_with('-')
        && (s.contains('/') || FILE_ENDINGS.iter().any(|e| s.ends_with(e)))
    {
        return Some(Named::File(s.to_string()));
    }
    None
}

/// Skips a comment, string or character literal starting at `i`, returning the index
/// after it, or `None` when none starts there.
fn skip_literal(b: &[u8], i: usize) -> Option<usize> {
    let at = |k: usize| b.get(k).copied().unwrap_or(0);
    match (at(i), at(i + 1)) {
        (b'/', b'/') => Some(
            b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p),
        ),
        (b'/', b'*') => Some(
            b[i + 2..]
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(b.len(), |p| i + 2 + p + 2),
        ),
        (b'r', b'#') | (b'r', b'"')
            if i == 0 || !(at(i - 1).is_ascii_alphanumeric() || at(i - 1) == b'_') =>
        {
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if at(i + 1 + hashes) != b'"' {
                return None;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let from = i + 2 + hashes;
            Some(
                b[from..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| from + p + close.len()),
            )
        }
        (b'"', _) => {
            let mut k = i + 1;
            while k < b.len() && b[k] != b'"' {
                k += if b[k] == b'\\' { 2 } else { 1 };
            }
            Some(k + 1)
        }
        (b'\'', b'\\') => Some(
            b[i + 2..]
                .iter()
                .position(|&c| c == b'\'')
                .map_or(b.len(), |p| i + 2 + p + 1),
        ),
        (b'\'', _) if at(i + 2) == b'\'' => Some(i + 3),
        _ => None,
    }
}

/// The body of the block whose `{` is the first after `from` (before any `;`), braces
/// counted outside comments and literals.
fn block_after(text: &str, from: usize) -> Option<&str> {
    let b = text.as_bytes();
    let mut i = from;
    let mut depth = 0usize;
    let mut start = None;
    while i < b.len() {
        if let Some(next) = skip_literal(b, i) {
            i = next;
            continue;
        }
        match b[i] {
            b';' if start.is_none() => return None,
            b'{' => {
                if start.is_none() {
                    start = Some(i + 1);
                }
                depth += 1;
            }
            b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&text[start?..i]);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Where `word` stands alone in `text` (not inside a longer identifier).
fn word_at(text: &str, word: &str) -> Vec<usize> {
    let is_id = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word)
        .filter(|(i, _)| {
            let before = text[..*i].chars().next_back();
            let after = text[i + word.len()..].chars().next();
            !before.is_some_and(is_id) && !after.is_some_and(is_id)
        })
        .map(|(i, _)| i)
        .collect()
}

/// Whether `text` defines `name` as an item (`fn`, `struct`, `enum`, `trait`, `type`,
/// `const`, `static`, `mod`, `macro_rules!`) or re-exports it with `pub use`.
fn defines(text: &str, name: &str) -> bool {
    const KINDS: [&str; 9] = [
        "fn",
        "struct",
        "enum",
        "trait",
        "type",
        "const",
        "static",
        "mod",
        "macro_rules!",
    ];
    for i in word_at(text, name) {
        let before = text[..i].trim_end();
        if KINDS.iter().any(|k| {
            before.ends_with(k)
                && !before[..before.len() - k.len()]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
        }) {
            return true;
        }
    }
    let mut from = 0;
    while let Some(at) = text[from..].find("pub use ") {
        let start = from + at;
        let end = text[start..].find(';').map_or(text.len(), |e| start + e);
        if !word_at(&text[start..end], name).is_empty() {
            return true;
        }
        from = end;
    }
    false
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Whether a member (`fn`, `const`, `type`, or an enum's variant) named `member` belongs
/// to `item` anywhere in the crate's sources: in an `impl` block whose header names
/// `item`, or in `item`'s own `trait` or `enum` body.
fn has_member(sources: &[String], item: &str, member: &str) -> bool {
    let member_in = |body: &str, variants: bool| {
        ["fn", "const", "type"].iter().any(|k| {
            word_at(body, member)
                .iter()
                .any(|&i| body[..i].trim_end().ends_with(k))
        }) || (variants
            && word_at(body, member).iter().any(|&i| {
                let line_start = body[..i].rfind('\n').map_or(0, |p| p + 1);
                body[line_start..i].trim().is_empty()
            }))
    };
    for text in sources {
        for i in word_at(text, "impl") {
            let header_end = text[i..].find(['{', ';']).map_or(text.len(), |p| i + p);
            if word_at(&text[i..header_end], item).is_empty() {
                continue;
            }
            if block_after(text, i).is_some_and(|body| member_in(body, false)) {
                return true;
            }
        }
        for kind in ["trait", "enum"] {
            for i in word_at(text, item) {
                if !text[..i].trim_end().ends_with(kind) {
                    continue;
                }
                if block_after(text, i).is_some_and(|body| member_in(body, kind == "enum")) {
                    return true;
                }
            }
        }
    }
    false
}

/// Resolves `krate::module::...::Item[::member]` in the source tree under `root`.
fn resolve_rust(root: &Path, path: &str) -> Result<(), String> {
    let segs: Vec<&str> = path.split("::").collect();
    if FOREIGN.contains(&segs[0]) {
        return Ok(());
    }
    let Some((_, src)) = CRATES.iter().find(|(c, _)| *c == segs[0]) else {
        return Err(format!(
            "`{path}` does not start with a crate of the workspace (name it by its full path)"
        ));
    };
    let mut dir = root.join(src);
    let mut file = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| dir.join(f))
        .find(|f| f.is_file())
        .ok_or_else(|| format!("`{path}`: {src} has no lib.rs or main.rs"))?;
    let mut rest = &segs[1..];
    while let Some(seg) = rest.first() {
        let text = std::fs::read_to_string(&file).unwrap();
        let declared = word_at(&text, seg)
            .iter()
            .any(|&i| text[..i].trim_end().ends_with("mod"));
        let candidates = [dir.join(format!("{seg}.rs")), dir.join(seg).join("mod.rs")];
        match candidates.iter().find(|f| f.is_file()) {
            Some(f) if declared => {
                file = f.clone();
                dir = dir.join(seg);
                rest = &rest[1..];
            }
            _ => break,
        }
    }
    let module = file.strip_prefix(root).unwrap().display().to_string();
    match rest {
        [] => Ok(()),
        [item] => {
            let text = std::fs::read_to_string(&file).unwrap();
            if defines(&text, item) {
                Ok(())
            } else {
                Err(format!("`{path}`: {module} defines no `{item}`"))
            }
        }
        [item, member] => {
            let text = std::fs::read_to_string(&file).unwrap();
            if !defines(&text, item) {
                return Err(format!("`{path}`: {module} defines no `{item}`"));
            }
            let sources: Vec<String> = rust_files(&root.join(src))
                .iter()
                .map(|f| std::fs::read_to_string(f).unwrap())
                .collect();
            if has_member(&sources, item, member) {
                Ok(())
            } else {
                Err(format!(
                    "`{path}`: `{item}` has no member `{member}` in {src}"
                ))
            }
        }
        _ => Err(format!("`{path}`: no module `{}` under {module}", rest[0])),
    }
}

/// Checks that a file or folder path from the repository root exists.
fn resolve_file(root: &Path, path: &str) -> Result<(), String> {
    let trimmed = path.trim_end_matches('/');
    let (parent, last) = match trimmed.rsplit_once('/') {
        Some((p, l)) => (root.join(p), l),
        None => (root.to_path_buf(), trimmed),
    };
    let found = if let Some((head, tail)) = last.split_once('*') {
        std::fs::read_dir(&parent).is_ok_and(|d| {
            d.flatten().any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.len() >= head.len() + tail.len() && n.starts_with(head) && n.ends_with(tail)
            })
        })
    } else {
        let p = parent.join(last);
        if path.ends_with('/') {
            p.is_dir()
        } else {
            p.exists()
        }
    };
    if found {
        Ok(())
    } else {
        Err(format!("`{path}` is not a path in the repository"))
    }
}

/// Every problem with the names of `markdown`, and how many Rust paths and file paths
/// were checked.
fn check(root: &Path, markdown: &str) -> (Vec<String>, usize, usize) {
    let (mut problems, mut rust, mut files) = (Vec::new(), 0, 0);
    for (line, span) in spans(markdown) {
        let result = match classify(&span) {
            Some(Named::Rust(p)) => {
                rust += 1;
                resolve_rust(root, &p)
            }
            Some(Named::File(p)) => {
                files += 1;
                resolve_file(root, &p)
            }
            None => Ok(()),
        };
        if let Err(e) = result {
            problems.push(format!("line {line}: {e}"));
        }
    }
    (problems, rust, files)
}

#[test]
fn every_name_in_architecture_md_resolves() {
    let root = repo();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let (problems, rust, files) = check(&root, &text);
    assert!(
        problems.is_empty(),
        "ARCHITECTURE.md names what is not there:\n  {}",
        problems.join("\n  ")
    );
    // The map names its code: a parse that found nothing would pass vacuously.
    assert!(
        rust >= 60,
        "only {rust} Rust paths found in ARCHITECTURE.md"
    );
    assert!(
        files >= 20,
        "only {files} file paths found in ARCHITECTURE.md"
    );
    let lines = text.lines().count();
    assert!(
        lines <= 200,
        "ARCHITECTURE.md is a map of about 150 lines, not {lines}"
    );
}

#[test]
fn made_up_names_are_reported() {
    let root = repo();
    let map = "\
`sim::serving::CONTROL_EVENTS` and `sim::serving::simulate_with` are real;\n\
`sim::serving::rack::CONTROL_EVENTS` is only imported there, not defined or re-exported;\n\
`sim::serving::no_such_thing`, `sim::cost::CostModel::no_such_method`,\n\
`sim::nowhere::Driver`, `Host::of_engine` (no module), `nocrate::x::Y`,\n\
`sim/src/no_such_file.rs` and `scenarios/*.nosuch` are not.\n\
`sim::cost::CostModel::step`, `sim::cost::params::CostParams::KEYS`,\n\
`spec::problem::Field::Dep`, `sim/src/serving/`, `scenarios/*.toml`: real.\n";
    let (problems, rust, files) = check(&root, map);
    assert_eq!((rust, files), (11, 4), "{problems:?}");
    let expected = [
        "line 2: `sim::serving::rack::CONTROL_EVENTS`: sim/src/serving/rack.rs defines no `CONTROL_EVENTS`",
        "line 3: `sim::serving::no_such_thing`: sim/src/serving/mod.rs defines no `no_such_thing`",
        "line 3: `sim::cost::CostModel::no_such_method`: `CostModel` has no member `no_such_method` in sim/src",
        "line 4: `sim::nowhere::Driver`: sim/src/lib.rs defines no `nowhere`",
        "line 4: `Host::of_engine` does not start with a crate of the workspace (name it by its full path)",
        "line 4: `nocrate::x::Y` does not start with a crate of the workspace (name it by its full path)",
        "line 5: `sim/src/no_such_file.rs` is not a path in the repository",
        "line 5: `scenarios/*.nosuch` is not a path in the repository",
    ];
    assert_eq!(problems, expected);
}

#[test]
fn literals_do_not_count_as_braces() {
    let text = "impl A { fn f() { let s = \"}\"; let c = '}'; // }\n } fn g<'a>() {} }";
    assert_eq!(
        block_after(text, 0),
        Some(" fn f() { let s = \"}\"; let c = '}'; // }\n } fn g<'a>() {} ")
    );
    assert!(has_member(&[text.to_string()], "A", "g"));
    assert!(!has_member(&[text.to_string()], "A", "h"));
}
