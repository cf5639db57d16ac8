//! `twin`: a digital twin for LLM-serving capacity planning.
//!
//! The binary parses arguments, loads scenario files and prints; the crates compute
//! (`sim` predicts, `engine` measures, `calibration` fits).

use anyhow::Result;
use clap::{Parser, Subcommand};

mod cmd;
mod scenario;

#[derive(Parser)]
#[command(name = "twin", version, about = "Digital twin for LLM-serving capacity planning")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Price one exact prefill or decode step of a DEP group, with a breakdown by operation.
    Forward(cmd::forward::ForwardArgs),
    /// Compare predictions with published figures (and refit the fitted parameters).
    Validate(cmd::validate::ValidateArgs),
    /// List the embedded hardware, models, workloads and scenarios.
    List,
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match &cli.command {
        Command::Forward(a) => cmd::forward::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::List => cmd::list(),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}
