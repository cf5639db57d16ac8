//! Published figures against twin's predictions. A table (`scenarios/published/*.csv`,
//! [`fitting::PublishedFigure`] rows) pairs each published figure with the twin
//! command that reproduces it; [`rows::Evaluator`] runs the command (its flags parsed
//! by the binary's own parsers, through [`CommandLine`]), reads the row's metric off
//! and draws its band; [`evaluate`] gives every row's error. The fits re-derive the
//! fitted parameters from the `fit` rows: the public kernel table's groups
//! ([`kernel_fit`], the in-situ table's in [`in_situ_fit`]) by least squares, the vLLM
//! GB300 report's settings ([`report_fit`]) one parameter per row.

use anyhow::{anyhow, Context, Result};
use fitting::{read_table, rel_error, PublishedFigure};
use scenario::embedded_file;
use scenario::kernel::KernelRequest;
use scenario::step::StepRequest;
use scenario::RunRequest;
use sim::cost::band::Band;
use std::collections::BTreeMap;

pub mod in_situ_fit;
pub mod kernel_fit;
pub mod report_fit;
pub mod rows;

pub use rows::{format_value, is_simulation, Evaluator, Fitted};

/// How a row's command line (`twin forward ...`, `twin kernel ...`, `twin simulate
/// ...`, as an argument vector with the program's words first) becomes the typed
/// request the command would run: the binary's own flag parsers.
pub trait CommandLine {
    fn forward(&self, argv: &[String]) -> Result<StepRequest>;
    fn kernel(&self, argv: &[String]) -> Result<KernelRequest>;
    fn simulate(&self, argv: &[String]) -> Result<RunRequest>;
}

/// The embedded tables: name and path under `scenarios/`.
pub const TABLES: [(&str, &str); 4] = [
    ("kernels-public", "published/kernels-public.csv"),
    (
        "kernel-tables-measured",
        "published/kernel-tables-measured.csv",
    ),
    (
        "vllm-gb300-deepseek-v4.1-flash",
        "published/vllm-gb300-deepseek-v4.1-flash.csv",
    ),
    (in_situ_fit::TABLE, "published/in-situ-deepseek-h800.csv"),
];
/// The public kernel table.
pub const KERNELS: &str = "kernels-public";
/// The measured kernel tables' held-out rows (check rows only).
pub const MEASURED: &str = "kernel-tables-measured";

/// A table read: its name (embedded name, or the file's stem), where it came from,
/// its rows.
pub struct Table {
    pub name: String,
    pub origin: String,
    pub rows: Vec<PublishedFigure>,
}

/// The embedded table named `which` (every embedded table when `None`), else the CSV
/// file at that path.
pub fn load_tables(which: Option<&str>) -> Result<Vec<Table>> {
    let mut out = Vec::new();
    for (name, rel) in TABLES {
        if which.is_some_and(|w| w != name) {
            continue;
        }
        let text = embedded_file(rel).ok_or_else(|| anyhow!("embedded table {rel} missing"))?;
        let origin = format!("scenarios/{rel} (embedded)");
        out.push(Table {
            name: name.to_string(),
            rows: read_table(&origin, text)?,
            origin,
        });
    }
    if let (Some(path), true) = (which, out.is_empty()) {
        let text = scenario::read_text(path).with_context(|| {
            format!(
                "cannot read {path} (tables: {})",
                TABLES.map(|t| t.0).join(", ")
            )
        })?;
        let name = std::path::Path::new(path)
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        out.push(Table {
            name,
            rows: read_table(path, &text)?,
            origin: path.to_string(),
        });
    }
    Ok(out)
}

/// One evaluated row.
pub struct Outcome {
    pub row: PublishedFigure,
    /// None: a simulation row left out (run with --simulate).
    pub predicted: Option<f64>,
    pub error: Option<f64>,
    /// Leave-one-out error of a fit row.
    pub loo: Option<f64>,
    /// The p10-p90 band of the prediction (None: no spread known, bands off, or a
    /// simulation row run without a band).
    pub band: Option<Band>,
}

impl Outcome {
    /// Whether the published figure lies inside the band, if there is one.
    pub fn in_band(&self) -> Option<bool> {
        self.band.map(|b| b.contains(self.row.published))
    }
}

/// A table's band coverage: check rows inside their band, of those with one.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Coverage {
    pub inside: usize,
    pub with_band: usize,
    pub check_rows: usize,
}

pub fn coverage(out: &[Outcome]) -> Coverage {
    let checks: Vec<&Outcome> = out.iter().filter(|o| o.row.role == "check").collect();
    Coverage {
        inside: checks.iter().filter(|o| o.in_band() == Some(true)).count(),
        with_band: checks.iter().filter(|o| o.band.is_some()).count(),
        check_rows: checks.len(),
    }
}

/// What `evaluate` draws bands for: off, or every forward and kernel row (and
/// simulation rows with `sim_draws` > 0).
#[derive(Debug, Clone, Copy)]
pub struct Bands {
    pub on: bool,
    pub sim_draws: u32,
}

/// Every row of `table` priced (simulation rows only with `simulate`), with its error,
/// band and (the kernel table's fit rows, with `loo`) leave-one-out error.
pub fn evaluate(
    table: &Table,
    simulate: bool,
    loo: bool,
    bands: Bands,
    cli: &dyn CommandLine,
) -> Result<Vec<Outcome>> {
    let mut ev = Evaluator::new(cli, report_fit::read_fitted()?);
    let mut loo_of: BTreeMap<String, f64> = BTreeMap::new();
    if loo && table.name == KERNELS {
        for g in kernel_fit::fit(&table.rows, true, cli)? {
            for (id, e) in g.loo {
                if let Some(e) = e {
                    loo_of.insert(id, e);
                }
            }
        }
    }
    table
        .rows
        .iter()
        .map(|r| {
            if is_simulation(r) && !simulate {
                return Ok(Outcome {
                    row: r.clone(),
                    predicted: None,
                    error: None,
                    loo: None,
                    band: None,
                });
            }
            let predicted = ev.predict(r, &[])?;
            let band = match bands.on {
                true => ev.band(r, bands.sim_draws)?,
                false => None,
            };
            Ok(Outcome {
                row: r.clone(),
                predicted: Some(predicted),
                error: Some(rel_error(predicted, r.published)),
                loo: loo_of.get(&r.id).copied(),
                band,
            })
        })
        .collect()
}
