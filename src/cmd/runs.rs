//! `twin runs import FILE... --out CORPUS` and `twin runs show CORPUS`: measured
//! serving runs as a corpus of `twin.run.v1` records (docs/runs-corpus.md), and what
//! a corpus holds.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use corpus::filter::{precision, Filter};
use corpus::RunRecord;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub what: RunsWhat,
}

#[derive(Debug, Clone, Subcommand)]
pub enum RunsWhat {
    /// Read measured runs into one corpus of twin.run.v1 records: AIConfigurator's
    /// silicon CSV (what each row means is read from the code that produced it:
    /// docs/runs-corpus.md), or corpora to merge.
    Import(ImportArgs),
    /// What a corpus holds: its records by engine, GPU, model, precision and layout.
    Show(ShowArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// Files of runs: an AIConfigurator silicon CSV, or corpora (`.jsonl`,
    /// `.jsonl.gz`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The corpus to write (`.jsonl`, or `.jsonl.gz` compressed); default: standard
    /// output.
    #[arg(long, value_name = "CORPUS")]
    pub out: Option<PathBuf>,
    /// Replace the --out file if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// The corpus: an embedded name (`aic-silicon-train`) or a file.
    pub corpus: String,
    /// Keep only records that pass (as `validate runs --filter`).
    #[arg(long = "filter", value_name = "KEY=VALUE")]
    pub filter: Vec<String>,
}

pub fn run(a: &RunsArgs) -> Result<()> {
    match &a.what {
        RunsWhat::Import(i) => import(i),
        RunsWhat::Show(s) => show(s),
    }
}

fn import(a: &ImportArgs) -> Result<()> {
    if let Some(out) = &a.out {
        if out.exists() && !a.force {
            bail!(
                "--out {}: the file exists; give --force to replace it",
                out.display()
            );
        }
    }
    let mut records: Vec<RunRecord> = Vec::new();
    let mut sources = Vec::new();
    for f in &a.files {
        let shown = f.display().to_string();
        let loaded = crate::runs::load(&shown).with_context(|| format!("importing {shown}"))?;
        for n in &loaded.notes {
            eprintln!("note: {n}");
        }
        sources.push(format!("{shown} ({} records)", loaded.records.len()));
        records.extend(loaded.records);
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(dup) = records.iter().find(|r| !seen.insert(r.id.clone())) {
        bail!(
            "record id `{}` is in more than one of the files: a corpus holds each run once",
            dup.id
        );
    }
    let header = format!(
        "twin.run.v1 corpus: {} records, written by twin {} `runs import` from:\n{}",
        records.len(),
        env!("CARGO_PKG_VERSION"),
        sources.join("\n")
    );
    let text = corpus::io::to_jsonl(&records, &header);
    match &a.out {
        Some(out) => {
            corpus::io::write_atomic(out, &text)?;
            eprintln!("wrote {} ({} records)", out.display(), records.len());
        }
        None => print!("{text}"),
    }
    Ok(())
}

fn show(a: &ShowArgs) -> Result<()> {
    let loaded = crate::runs::load(&a.corpus)?;
    let filters = a
        .filter
        .iter()
        .map(|f| Filter::parse(f))
        .collect::<Result<Vec<_>, _>>()
        .map_err(anyhow::Error::msg)?;
    let records = corpus::filter::apply(&loaded.records, &filters);
    println!(
        "{}: {} records{}",
        loaded.origin,
        records.len(),
        if filters.is_empty() {
            String::new()
        } else {
            format!(" of {} (filtered)", loaded.records.len())
        }
    );
    for n in &loaded.notes {
        println!("note: {n}");
    }
    type Key = fn(&RunRecord) -> String;
    let dims: [(&str, Key); 5] = [
        ("engine", |r| r.engine.label()),
        ("gpu", |r| r.gpu.hardware.clone()),
        ("model", |r| r.model.id.clone()),
        ("precision", precision),
        ("layout", |r| r.layout.mode().to_string()),
    ];
    for (name, key) in dims {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for r in &records {
            *counts.entry(key(r)).or_default() += 1;
        }
        let parts: Vec<String> = counts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        println!("  by {name}: {}", parts.join(", "));
    }
    Ok(())
}
