//! Clap argument groups of the binary's own that several commands share
//! (`#[command(flatten)]`); the flags of a run, a step and a kernel are
//! [`scenario::flags`]'s.

use clap::Args;

/// An HTML report folder (`twin simulate`, `sweep`, `plan`).
#[derive(Debug, Clone, Default, Args)]
pub struct ReportArgs {
    /// Write an HTML report (index.html, SVG plots, CSV tables, summary.json) here.
    #[arg(long, value_name = "DIR")]
    pub report: Option<String>,
    /// Let --report write into a folder that is not empty.
    #[arg(long)]
    pub force: bool,
}
