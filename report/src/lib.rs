//! What twin prints, in words and as a report: the words and numbers the commands'
//! text and the HTML report share ([`text`]), and `--report DIR`, a report a person
//! can open and share. One `index.html` (rendered
//! from a minijinja template) with the plots inline as SVG, each plot also as
//! `plots/NAME.svg`, each table as `tables/NAME.csv`, and `summary.json` with the runs
//! under vLLM's `bench serve` key names.
//!
//! Nothing already written is lost: a folder that exists and is not empty is refused
//! unless `--force`, and then only the report's own files are replaced (each written
//! to a temporary name and renamed over the old one); nothing else in it is touched.

mod figures;
mod pages;
pub mod plots;
pub mod text;

pub use pages::{
    plan, runs, simulate, sweep, validate, RunRow, SimulatedRun, SweepPoint, ValidationRow,
};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A plot on the page.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub id: String,
    pub caption: String,
    /// The SVG document.
    pub svg: String,
    /// Data points drawn.
    pub points: usize,
    /// Its file, relative to the report (`plots/ID.svg`).
    pub file: String,
}

impl Figure {
    pub fn new(id: &str, caption: impl Into<String>, svg: String, points: usize) -> Self {
        Figure {
            id: id.to_string(),
            caption: caption.into(),
            svg,
            points,
            file: format!("plots/{id}.svg"),
        }
    }
}

/// A table on the page and in `tables/ID.csv`.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub id: String,
    pub caption: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub file: String,
}

impl Table {
    pub fn new(id: &str, caption: impl Into<String>, header: &[&str]) -> Self {
        Table {
            id: id.to_string(),
            caption: caption.into(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            file: format!("tables/{id}.csv"),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Section {
    pub id: String,
    pub title: String,
    pub text: String,
    pub figures: Vec<Figure>,
    pub tables: Vec<Table>,
    /// Preformatted blocks (command lines).
    pub pre: Vec<String>,
}

impl Section {
    pub fn new(id: &str, title: &str, text: impl Into<String>) -> Self {
        Section {
            id: id.to_string(),
            title: title.to_string(),
            text: text.into(),
            ..Section::default()
        }
    }
}

/// A whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub title: String,
    pub subtitle: String,
    pub version: &'static str,
    pub facts: Vec<(String, String)>,
    pub sections: Vec<Section>,
    /// `summary.json`'s content.
    #[serde(skip)]
    pub summary: serde_json::Value,
}

impl Page {
    pub fn new(title: impl Into<String>, subtitle: impl Into<String>) -> Self {
        Page {
            title: title.into(),
            subtitle: subtitle.into(),
            version: env!("CARGO_PKG_VERSION"),
            facts: Vec::new(),
            sections: Vec::new(),
            summary: serde_json::Value::Null,
        }
    }

    pub fn fact(&mut self, name: &str, value: impl Into<String>) {
        self.facts.push((name.to_string(), value.into()));
    }

    /// The HTML page.
    pub fn render(&self) -> Result<String> {
        let mut env = minijinja::Environment::new();
        env.add_template("index.html", include_str!("index.html.j2"))?;
        Ok(env
            .get_template("index.html")?
            .render(minijinja::value::Serde(self))?)
    }

    /// Writes the report into `dir` (see the module docs for what is refused);
    /// returns a line saying what was written where.
    pub fn write(&self, dir: &str, force: bool) -> Result<String> {
        let root = prepare(dir, force)?;
        let html = self.render()?;
        let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        let mut n_plots = 0;
        let mut n_tables = 0;
        for section in &self.sections {
            for figure in &section.figures {
                files.push((root.join(&figure.file), figure.svg.clone().into_bytes()));
                n_plots += 1;
            }
            for table in &section.tables {
                let mut writer = csv::Writer::from_writer(Vec::new());
                writer.write_record(&table.header)?;
                for row in &table.rows {
                    writer.write_record(row)?;
                }
                files.push((root.join(&table.file), writer.into_inner()?));
                n_tables += 1;
            }
        }
        files.push((
            root.join("summary.json"),
            serde_json::to_string_pretty(&self.summary)?.into_bytes(),
        ));
        files.push((root.join("index.html"), html.into_bytes()));
        for (path, bytes) in &files {
            write_atomic(path, bytes)?;
        }
        Ok(format!(
            "{} ({n_plots} plots, {n_tables} tables, summary.json)",
            root.join("index.html").display()
        ))
    }
}

/// Creates `dir`, or checks that it may be written into.
fn prepare(dir: &str, force: bool) -> Result<PathBuf> {
    let root = PathBuf::from(dir);
    if root.exists() {
        if !root.is_dir() {
            bail!("--report {dir}: exists and is not a folder");
        }
        let entries = std::fs::read_dir(&root)
            .with_context(|| format!("--report {dir}: cannot read the folder"))?
            .count();
        if entries > 0 && !force {
            bail!(
                "--report {dir}: the folder is not empty ({entries} entries); choose a new folder, or pass --force to replace the report's own files in it (nothing else is touched)"
            );
        }
    }
    for sub in ["plots", "tables"] {
        std::fs::create_dir_all(root.join(sub))
            .with_context(|| format!("--report {dir}: cannot create {sub}/"))?;
    }
    Ok(root)
}

/// Writes `bytes` to a temporary file beside `path`, then renames it over `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
