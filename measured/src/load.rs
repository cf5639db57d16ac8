//! A corpus by name (embedded under `scenarios/runs/`) or path: JSON Lines of
//! `twin.run.v1` records (plain or gzip), or AIConfigurator's silicon CSV, imported
//! in memory. Model configs a record names are read relative to the corpus.

use anyhow::{anyhow, bail, Context, Result};
use corpus::RunRecord;
use std::path::{Path, PathBuf};

/// The embedded corpora: name and path under `scenarios/`.
pub const EMBEDDED: [(&str, &str); 2] = [
    ("aic-silicon-train", "runs/aic-silicon-train.jsonl.gz"),
    ("h100-public-bench", "runs/h100-public-bench.jsonl.gz"),
];

/// Where a corpus's relative paths (model configs) are read from.
#[derive(Debug, Clone)]
pub enum Base {
    /// The embedded tree, under this folder of `scenarios/`.
    Embedded(&'static str),
    /// A folder on disk.
    Dir(PathBuf),
}

impl Base {
    /// A file named relative to the corpus: its origin and text.
    pub fn text(&self, rel: &str) -> Result<(String, String)> {
        if Path::new(rel).is_absolute() {
            // A user's corpus may name a config where it lies.
            let text = scenario::read_text(rel).with_context(|| format!("cannot read `{rel}`"))?;
            return Ok((rel.to_string(), text));
        }
        if rel.split('/').any(|p| p == "..") {
            bail!("`{rel}`: a corpus names its files below its own folder, or by an absolute path");
        }
        match self {
            Base::Embedded(dir) => {
                let path = format!("{dir}{rel}");
                scenario::embedded_file(&path)
                    .map(|t| (format!("scenarios/{path} (embedded)"), t.to_string()))
                    .ok_or_else(|| anyhow!("`{rel}`: no such file in the embedded corpus"))
            }
            Base::Dir(d) => {
                let p = d.join(rel);
                let shown = p.display().to_string();
                if !p.exists() {
                    // A corpus beside no models of its own reads the shipped ones.
                    if let Ok(found) = Base::Embedded("runs/").text(rel) {
                        return Ok(found);
                    }
                }
                let text = scenario::read_text(&shown)
                    .with_context(|| format!("cannot read `{shown}`"))?;
                Ok((shown, text))
            }
        }
    }
}

/// A corpus read.
pub struct Loaded {
    /// Where it came from, for messages.
    pub origin: String,
    pub records: Vec<RunRecord>,
    pub base: Base,
    /// What reading it decided (an import in memory, rows it could not read).
    pub notes: Vec<String>,
}

impl Loaded {
    /// The records that pass every filter (`KEY=VALUE`, as `validate runs --filter`).
    pub fn filtered(&self, filters: &[String]) -> Result<Vec<&RunRecord>> {
        let filters = filters
            .iter()
            .map(|f| corpus::filter::Filter::parse(f))
            .collect::<Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?;
        Ok(corpus::filter::apply(&self.records, &filters))
    }

    /// What the corpus holds (`twin runs show`), of the records that pass every filter:
    /// their count, the notes of reading it, and their counts by engine, GPU, model,
    /// precision and layout.
    pub fn show(&self, filters: &[String]) -> Result<String> {
        let records = self.filtered(filters)?;
        let mut s = format!(
            "{}: {} records{}\n",
            self.origin,
            records.len(),
            if filters.is_empty() {
                String::new()
            } else {
                format!(" of {} (filtered)", self.records.len())
            }
        );
        for n in &self.notes {
            s += &format!("note: {n}\n");
        }
        Ok(s + &corpus::summary::holdings(&records))
    }
}

/// The names `load` knows.
pub fn names() -> Vec<&'static str> {
    EMBEDDED.iter().map(|(n, _)| *n).collect()
}

/// The corpus `name_or_path` names.
pub fn load(name_or_path: &str) -> Result<Loaded> {
    if let Some((_, rel)) = EMBEDDED.iter().find(|(n, _)| *n == name_or_path) {
        let raw =
            scenario::embedded_blob(rel).ok_or_else(|| anyhow!("embedded corpus {rel} missing"))?;
        let origin = format!("scenarios/{rel} (embedded)");
        let text = String::from_utf8(corpus::io::unzip(raw, &origin)?)
            .map_err(|_| anyhow!("{origin}: not UTF-8"))?;
        return Ok(Loaded {
            records: corpus::io::parse_jsonl(&text, &origin)?,
            origin,
            base: Base::Embedded("runs/"),
            notes: Vec::new(),
        });
    }
    let path = Path::new(name_or_path);
    if !path.exists() {
        bail!(
            "corpus `{name_or_path}`: no such file, and not an embedded corpus ({})",
            names().join(", ")
        );
    }
    let bytes = corpus::io::read_bytes(path)?;
    let origin = path.display().to_string();
    let text = String::from_utf8(bytes).map_err(|_| anyhow!("{origin}: not UTF-8 text"))?;
    let base = Base::Dir(path.parent().map(Path::to_path_buf).unwrap_or_default());
    if text.starts_with("id,silicon_data_source,") {
        let imp = corpus::aic::import(&text)?;
        let mut notes = vec![format!(
            "{origin}: read as AIConfigurator's silicon CSV: {} records ({} rows folded in as the same measurement); `twin runs import` writes them as a corpus",
            imp.records.len(),
            imp.duplicates
        )];
        notes.extend(
            imp.refused
                .iter()
                .map(|r| format!("{origin}: not read: {r}")),
        );
        return Ok(Loaded {
            origin,
            records: imp.records,
            base,
            notes,
        });
    }
    Ok(Loaded {
        records: corpus::io::parse_jsonl(&text, &origin)?,
        origin,
        base,
        notes: Vec::new(),
    })
}
