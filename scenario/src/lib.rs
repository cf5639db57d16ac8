//! Scenario files and the run a command asks for: finding the files under
//! `scenarios/` (embedded in the build, or on disk), applying `--set` overrides,
//! deserializing with every unknown field collected and every problem reported at once
//! with its file, line and field path; the typed request of a run ([`RunRequest`]) and
//! its one resolution into a checked run ([`resolve`]), with what prices its steps
//! (calibration profiles, engine kernel tables, the shipped runs terms) and the traces
//! and benchmark clients it replays; one forward step as asked, checked and priced
//! ([`step`]); a resolved run through the simulator ([`run`]), without the binary's
//! progress bar and Ctrl-C.

use anyhow::{anyhow, bail, Context, Result};
use serde::de::DeserializeOwned;
use spec::problem::{Field, Problem};
use spec::{hardware::Hardware, model::Model};
use std::fmt::Write as _;

pub mod bench_client;
mod carry;
mod cost;
mod deser;
pub mod fields;
#[cfg(feature = "clap")]
pub mod flags;
pub mod kernel;
pub mod request;
pub mod resolve;
pub mod run;
pub mod runs_profile;
pub mod slow;
pub mod step;
pub mod tables;
pub mod trace_formats;

pub use cost::{apply_moe_kernel, apply_pdl, cost_params, usual_moe_kernel};
pub use request::{Overrides, Pricing, RunRequest, TraceSource};
pub use resolve::{
    read_trace_within, resolve, resolve_parts, resolve_with_trace, runs_band_on, step_prices,
    trace_fit, Parts, Resolved,
};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_scenarios.rs"));
}

/// The kinds of scenario file, by folder under `scenarios/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Hardware,
    Model,
    Workload,
    Scenario,
    /// Total-cost-of-ownership presets (`scenarios/tco/`).
    Tco,
}

impl Kind {
    pub fn folder(self) -> &'static str {
        match self {
            Kind::Hardware => "hardware/",
            Kind::Model => "models/",
            Kind::Workload => "workloads/",
            Kind::Scenario => "",
            Kind::Tco => "tco/",
        }
    }
    fn noun(self) -> &'static str {
        match self {
            Kind::Hardware => "hardware",
            Kind::Model => "model",
            Kind::Workload => "workload",
            Kind::Scenario => "scenario",
            Kind::Tco => "TCO preset",
        }
    }
}

/// Names of the embedded files of one kind (`gb300`, `deepseek-v4.1-flash`, ...).
pub fn embedded_names(kind: Kind) -> Vec<String> {
    let folder = kind.folder();
    embedded::FILES
        .iter()
        .filter_map(|(path, _)| {
            let rest = path.strip_prefix(folder)?;
            let name = rest.strip_suffix(".toml")?;
            (!name.contains('/')).then(|| name.to_string())
        })
        .collect()
}

/// An embedded file by its path under `scenarios/` (e.g. `published/x.csv`).
pub fn embedded_file(rel: &str) -> Option<&'static str> {
    embedded::FILES
        .iter()
        .find(|(p, _)| *p == rel)
        .map(|(_, t)| *t)
}

/// An embedded compressed file by its path under `scenarios/` (a corpus, a kernel
/// table).
pub fn embedded_blob(rel: &str) -> Option<&'static [u8]> {
    embedded::BLOBS
        .iter()
        .find(|(p, _)| *p == rel)
        .map(|(_, b)| *b)
}

/// Finds a file by embedded name or disk path. Returns (origin for messages, text).
pub fn find_file(kind: Kind, name_or_path: &str) -> Result<(String, String)> {
    let looks_like_path = name_or_path.ends_with(".toml")
        || name_or_path.contains('/')
        || name_or_path.contains('\\');
    if looks_like_path {
        let text = read_text(name_or_path).map_err(|e| {
            anyhow!(
                "cannot read {} file `{}`: {e}",
                kind.noun(),
                clip(name_or_path)
            )
        })?;
        return Ok((name_or_path.to_string(), text));
    }
    let rel = format!("{}{}.toml", kind.folder(), name_or_path);
    if let Some(text) = embedded_file(&rel) {
        return Ok((format!("scenarios/{rel} (embedded)"), text.to_string()));
    }
    let known = embedded_names(kind);
    let guess = fields::closest(name_or_path, known.iter().map(|s| s.as_str()))
        .map(|c| format!("did you mean `{c}`? "))
        .unwrap_or_default();
    bail!(
        "unknown {} `{name_or_path}`; {guess}known: {} (or give a path to a .toml file)",
        kind.noun(),
        known.join(", ")
    )
}

/// Largest input file read (scenario, hardware, model, workload, published table):
/// a thousand times the largest shipped one.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// The text of a user-named file, refused past `MAX_FILE_BYTES` (`/dev/zero` would
/// otherwise be read without end) or when it is not UTF-8.
pub fn read_text(path: &str) -> Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        bail!("larger than {MAX_FILE_BYTES} bytes, too large for an input file");
    }
    String::from_utf8(bytes).map_err(|_| anyhow!("not UTF-8 text"))
}

/// A message that may quote user input, at most about `4 * MAX_ECHO_CHARS`
/// characters: a long middle is cut, so both the start and what follows the quote
/// (`expected u32`) stay.
pub fn clip_middle(s: &str) -> String {
    let n = s.chars().count();
    let keep = 2 * MAX_ECHO_CHARS;
    if n <= 2 * keep {
        return s.to_string();
    }
    let head: String = s.chars().take(keep).collect();
    let tail: String = s.chars().skip(n - keep).collect();
    format!("{head}... ({} characters cut) ...{tail}", n - 2 * keep)
}

/// A full scenario's text by embedded name or path.
pub fn load_scenario_text(name_or_path: &str) -> Result<(String, String)> {
    find_file(Kind::Scenario, name_or_path)
}

/// One `--set path=value` override.
#[derive(Debug, Clone, PartialEq)]
pub struct Set {
    pub path: Vec<String>,
    pub value: toml::Value,
    /// The override as typed, for messages.
    pub text: String,
    /// Where it was given, for messages: `--set`, or `workload_set of FILE`.
    pub from: String,
}

/// Most segments of a `--set` path: the deepest field is four (`model.attention.
/// indexer.top_k`); a path of thousands would nest tables past the stack.
pub const MAX_SET_DEPTH: usize = 16;

/// Longest piece of user input a message repeats; the rest is cut (`clip`).
pub const MAX_ECHO_CHARS: usize = 120;

/// `s` as a message repeats it: at most `MAX_ECHO_CHARS` characters, then how many
/// more were cut.
pub fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_ECHO_CHARS) {
        None => s.to_string(),
        Some((cut, _)) => format!(
            "{}... ({} more characters)",
            &s[..cut],
            s[cut..].chars().count()
        ),
    }
}

/// The segments of a field path: split at dots, except inside double quotes (a TOML
/// quoted key, `cost.spread."in_situ.moe"`), the quotes removed; `None` when a quote is
/// not closed.
fn split_path(path: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut seg = String::new();
    let mut quoted = false;
    for c in path.chars() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => out.push(std::mem::take(&mut seg).trim().to_string()),
            _ => seg.push(c),
        }
    }
    if quoted {
        return None;
    }
    out.push(seg.trim().to_string());
    Some(out)
}

impl Set {
    /// Parses `a.b.c=value`; the value is read as TOML (`2`, `1.5`, `true`, `[1, 2]`,
    /// `"x"`) and otherwise taken as a string (`2MiB`, `gb300`).
    pub fn parse(s: &str) -> Result<Set> {
        Set::parse_from(s, "--set")
    }

    /// As `parse`, for an override given in `from` (`--set`, `workload_set of FILE`).
    pub fn parse_from(s: &str, from: &str) -> Result<Set> {
        let (path, value) = s.split_once('=').ok_or_else(|| {
            anyhow!(
                "{from} `{}`: expected PATH=VALUE, e.g. model.engram.page_size=2MiB",
                clip(s)
            )
        })?;
        let path = split_path(path.trim()).ok_or_else(|| {
            anyhow!(
                "{from} `{}`: a quote in the field path is not closed",
                clip(s)
            )
        })?;
        if path.iter().any(|p| p.is_empty()) {
            bail!("{from} `{}`: empty segment in the field path", clip(s));
        }
        if path.len() > MAX_SET_DEPTH {
            bail!(
                "{from} `{}`: {} segments in the field path; fields are at most {MAX_SET_DEPTH} deep",
                clip(s),
                path.len()
            );
        }
        let raw = value.trim();
        let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        Ok(Set {
            path,
            value,
            text: s.to_string(),
            from: from.to_string(),
        })
    }

    /// An override set in code: `path` (dotted, no quoted keys) to `value`, given by
    /// `from`.
    pub fn typed(path: &str, value: toml::Value, from: &str) -> Set {
        Set {
            path: path.split('.').map(str::to_string).collect(),
            text: format!("{path}={value}"),
            value,
            from: from.to_string(),
        }
    }

    pub fn parse_all(list: &[String]) -> Result<Vec<Set>> {
        list.iter().map(|s| Set::parse(s)).collect()
    }

    fn apply(&self, root: &mut toml::Value) -> Result<(), String> {
        let mut cur = root;
        let (last, parents) = self.path.split_last().expect("non-empty path");
        for seg in parents {
            cur = match cur {
                toml::Value::Table(t) => t
                    .entry(seg.clone())
                    .or_insert_with(|| toml::Value::Table(Default::default())),
                toml::Value::Array(a) => {
                    let i: usize = seg
                        .parse()
                        .map_err(|_| format!("`{seg}` is not an index into a list"))?;
                    let n = a.len();
                    a.get_mut(i)
                        .ok_or_else(|| format!("index {i} is past the end of a list of {n}"))?
                }
                _ => return Err(format!("`{seg}` is inside a value that is not a table")),
            };
        }
        match cur {
            toml::Value::Table(t) => {
                t.insert(last.clone(), self.value.clone());
            }
            toml::Value::Array(a) => {
                let i: usize = last
                    .parse()
                    .map_err(|_| format!("`{last}` is not an index into a list"))?;
                let n = a.len();
                *a.get_mut(i)
                    .ok_or_else(|| format!("index {i} is past the end of a list of {n}"))? =
                    self.value.clone();
            }
            _ => return Err(format!("`{last}` is inside a value that is not a table")),
        }
        Ok(())
    }
}

/// A parsed file kept with its text, to put line numbers on later problems.
pub struct Parsed<T> {
    pub value: T,
    pub origin: String,
    text: String,
    sets: Vec<Set>,
}

impl<T> Parsed<T> {
    /// Turns semantic problems into one error naming file, line and field for each.
    pub fn check(self, problems: Vec<Problem>) -> Result<T> {
        if problems.is_empty() {
            return Ok(self.value);
        }
        Err(report(&self.origin, &self.text, &self.sets, problems))
    }
}

/// Splits `layers[1].count` or `layers.1.count` into segments.
fn segments(path: &str) -> Vec<String> {
    path.replace('[', ".")
        .replace(']', "")
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// 1-based line of a field path in a TOML text, or of its closest existing parent.
pub fn locate(text: &str, path: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text.to_string()).ok()?;
    let segs = segments(path);
    let root = doc.as_table();
    table_span(root, &segs).map(|r| line_of(text, r.start))
}

type Span = std::ops::Range<usize>;

fn item_span(item: &toml_edit::Item, segs: &[String]) -> Option<Span> {
    use toml_edit::Item;
    match item {
        Item::Table(t) => table_span(t, segs),
        Item::ArrayOfTables(a) => {
            let own = a.span();
            match segs.split_first() {
                None => own,
                Some((f, rest)) => f
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| a.get(i))
                    .and_then(|t| table_span(t, rest))
                    .or(own),
            }
        }
        Item::Value(v) => value_span(v, segs),
        Item::None => None,
    }
}

fn table_span(t: &toml_edit::Table, segs: &[String]) -> Option<Span> {
    let own = t.span();
    match segs.split_first() {
        None => own,
        Some((f, rest)) => t.get(f).and_then(|c| item_span(c, rest)).or(own),
    }
}

fn value_span(v: &toml_edit::Value, segs: &[String]) -> Option<Span> {
    let own = v.span();
    match segs.split_first() {
        None => own,
        Some((f, rest)) => match v {
            toml_edit::Value::InlineTable(t) => t.get(f).and_then(|c| value_span(c, rest)),
            toml_edit::Value::Array(a) => f
                .parse::<usize>()
                .ok()
                .and_then(|i| a.get(i))
                .and_then(|c| value_span(c, rest)),
            _ => None,
        }
        .or(own),
    }
}

fn line_of(text: &str, byte: usize) -> usize {
    text[..byte.min(text.len())]
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

fn report(origin: &str, text: &str, sets: &[Set], problems: Vec<Problem>) -> anyhow::Error {
    let mut msg = format!(
        "{origin}: {} problem{}",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for p in &problems {
        let place = match &p.field {
            Field::Path(path) => {
                // The override set this field, or created the unknown table above it.
                let segs = segments(path);
                let by_set = sets.iter().find(|s| {
                    !segs.is_empty() && (segs.starts_with(&s.path) || s.path.starts_with(&segs))
                });
                match (by_set, locate(text, path)) {
                    _ if path.is_empty() => "file".to_string(),
                    (Some(s), _) => format!("{} {}", s.from, clip(&s.text)),
                    (None, Some(l)) => format!("line {l}"),
                    (None, None) => "file".to_string(),
                }
            }
            _ => "command line".to_string(),
        };
        let line = match &p.field {
            // A problem with the whole file (a missing top-level field).
            Field::Path(path) if path.is_empty() => p.message.render(&|f| f.to_string()),
            _ => p.to_string(),
        };
        write!(msg, "\n  {place}: {}", clip_middle(&line)).unwrap();
    }
    anyhow!(msg)
}

/// Parses `text` as a `T`, after applying `sets`; every unknown field and every type
/// error (up to `deser::MAX_TYPE_ERRORS`) are reported together, with lines.
pub fn parse_located<T: DeserializeOwned>(
    origin: &str,
    text: &str,
    sets: &[Set],
) -> Result<Parsed<T>> {
    let mut value: toml::Value = match toml::from_str::<toml::Table>(text) {
        Ok(t) => toml::Value::Table(t),
        Err(e) => {
            let line = e.span().map(|r| line_of(text, r.start));
            let place = line
                .map(|l| format!("line {l}"))
                .unwrap_or_else(|| "file".into());
            bail!("{origin}: not valid TOML\n  {place}: {}", e.message());
        }
    };
    let mut problems = Vec::new();
    for s in sets {
        if let Err(e) = s.apply(&mut value) {
            problems.push(Problem::new(
                s.path.join("."),
                format!("{} {}: {e}", s.from, clip(&s.text)),
            ));
        }
    }
    if !problems.is_empty() {
        return Err(report(origin, text, sets, problems));
    }
    let (parsed, problems) = deser::deserialize_all::<T>(value);
    match parsed {
        Some(v) if problems.is_empty() => Ok(Parsed {
            value: v,
            origin: origin.to_string(),
            text: text.to_string(),
            sets: sets.to_vec(),
        }),
        _ => Err(report(origin, text, sets, problems)),
    }
}

/// Whether `text`, with `sets` applied, has a value at `path` (a table or a field):
/// what the file declares, as opposed to what deserialising fills in by default.
pub fn declares(text: &str, sets: &[Set], path: &[&str]) -> bool {
    let Ok(table) = toml::from_str::<toml::Table>(text) else {
        return false;
    };
    let mut value = toml::Value::Table(table);
    for s in sets {
        if s.apply(&mut value).is_err() {
            return false;
        }
    }
    let mut cur = &value;
    for seg in path {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return false,
        }
    }
    true
}

/// Parses `text` as a `T` after `sets` (no semantic checks).
pub fn parse_with_sets<T: DeserializeOwned>(origin: &str, text: &str, sets: &[Set]) -> Result<T> {
    parse_located(origin, text, sets).map(|p| p.value)
}

/// A hardware file by embedded name or path, with `sets` applied, checked, and with
/// the kernel fits of its `kernels_from` hardware carried in (`carry`).
pub fn load_hardware(name_or_path: &str, sets: &[Set]) -> Result<Hardware> {
    let (origin, text) = find_file(Kind::Hardware, name_or_path)?;
    let parsed = parse_located::<Hardware>(&origin, &text, sets)?;
    let problems = sim::validate::hardware(&parsed.value);
    let mut hardware = parsed.check(problems)?;
    carry::kernel_fits(&mut hardware, &origin)?;
    Ok(hardware)
}

pub fn load_model(name_or_path: &str, sets: &[Set]) -> Result<Model> {
    load_model_quant(name_or_path, sets, None)
}

/// As [`load_model`]; a config (or checkpoint folder) is imported with the
/// quantization config `quant` when one is given, else with the one beside it.
pub fn load_model_quant(name_or_path: &str, sets: &[Set], quant: Option<&str>) -> Result<Model> {
    let (origin, text) = if hf::is_config(name_or_path) {
        imported(&hf::config_path(name_or_path), quant)?
    } else {
        if let Some(q) = quant {
            bail!("--quant {}: a quantization config goes with a Hugging Face config (.json) or checkpoint folder, not model `{}`", clip(q), clip(name_or_path));
        }
        find_file(Kind::Model, name_or_path)?
    };
    let parsed = parse_located::<Model>(&origin, &text, sets)?;
    let problems = sim::validate::model(&parsed.value);
    parsed.check(problems)
}

/// A Hugging Face config imported in memory, as a model file's origin and text; says
/// so once (a note, `spec::note`), with every fallback it took.
fn imported(path: &str, quant: Option<&str>) -> Result<(String, String)> {
    let text =
        read_text(path).map_err(|e| anyhow!("cannot read model config `{}`: {e}", clip(path)))?;
    let mut opts = hf_options(path)?;
    if let Some(q) = quant {
        let qtext = read_text(q)
            .map_err(|e| anyhow!("cannot read quantization config `{}`: {e}", clip(q)))?;
        opts.quant = Some((q.to_string(), qtext));
    }
    let (model, notes) = hf::import_noted(path, &text, &opts)?;
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if said.iter().any(|p| p == path) {
        return Ok((format!("{path} (imported)"), hf::to_toml(&model)?));
    }
    said.push(path.to_string());
    let with = match &opts.quant {
        Some((q, _)) => format!(" with the quantization of {q}"),
        None => String::new(),
    };
    spec::note::say(&format!(
        "note: imported {path} in memory as model `{}`{with} (`twin model import {path}` writes it as a file to review)",
        model.name
    ));
    for n in notes {
        spec::note::say(&format!("note: assumed: {n}"));
    }
    Ok((format!("{path} (imported)"), hf::to_toml(&model)?))
}

/// A TCO preset by name (`scenarios/tco/`) or path, checked.
pub fn load_tco(name_or_path: &str, sets: &[Set]) -> Result<sim::tco::Tco> {
    // Renamed: their figures are an owner's cost, not what a renter pays.
    for (old, new) in [
        ("hyperscaler-rental", "hyperscaler-tco"),
        ("neocloud-rental", "neocloud-tco"),
    ] {
        if name_or_path == old {
            bail!(
                "TCO preset `{old}` is now `{new}`: its figure is what a GPU-hour costs its owner (SemiAnalysis AI Cloud TCO), not what a renter pays; for a renter's price use `on-demand-rental` or `rental-3yr`"
            );
        }
    }
    let (origin, text) = find_file(Kind::Tco, name_or_path)?;
    let parsed = parse_located::<sim::tco::Tco>(&origin, &text, sets)?;
    let problems = parsed.value.problems();
    parsed.check(problems)
}

/// The TCO: a preset or file with `--set tco.*`, or rental at the scenario's basis.
pub fn resolve_tco(
    name: Option<&str>,
    sets: &[Set],
    basis: spec::hardware::PriceBasis,
) -> Result<sim::tco::Tco> {
    match name {
        Some(n) => load_tco(n, sets),
        None if sets.is_empty() => Ok(sim::tco::Tco::rental_at(basis)),
        None => bail!("--set tco.*: name a TCO preset with --tco (e.g. owned-nvl72)"),
    }
}

/// The options a Hugging Face config at `path` imports with by default: its sibling
/// quantization config, read (`hf::sibling_quant`).
pub fn hf_options(path: &str) -> Result<hf::ImportOptions> {
    let mut o = hf::ImportOptions::default();
    if let Some(q) = hf::sibling_quant(std::path::Path::new(path)) {
        let origin = q.display().to_string();
        let text = read_text(&origin).with_context(|| format!("cannot read {origin}"))?;
        o.quant = Some((origin, text));
    }
    Ok(o)
}

#[cfg(test)]
mod set_tests {
    use super::*;

    #[test]
    fn a_quoted_segment_keeps_its_dots() {
        let s = Set::parse(r#"hardware.cost.spread."in_situ.moe"=0.25"#).unwrap();
        assert_eq!(s.path, ["hardware", "cost", "spread", "in_situ.moe"]);
        assert_eq!(s.value, toml::Value::Float(0.25));
        assert_eq!(Set::parse(" a . b =1").unwrap().path, ["a", "b"]);
        let e = Set::parse(r#"cost."in_situ.moe=1"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not closed"), "{e}");
        let e = Set::parse(r#"cost..x=1"#).unwrap_err().to_string();
        assert!(e.contains("empty segment"), "{e}");
    }
}
