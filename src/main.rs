//! `twin`: a digital twin for LLM-serving capacity planning.
//!
//! The binary parses arguments, loads scenario files and prints; the crates compute
//! (`sim` predicts, `engine` measures, `calibration` fits).

use anyhow::Result;
use clap::{Parser, Subcommand};

mod cmd;
mod scenario;

#[derive(Parser)]
#[command(
    name = "twin",
    version,
    about = "Digital twin for LLM-serving capacity planning"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a serving system (default: DeepSeek-V4.1-Flash on a GB300 NVL72 rack,
    /// AgentX-like workload) and report throughput, latency and money.
    Simulate(cmd::simulate::SimulateArgs),
    /// Price one exact prefill or decode step of a DEP group, with a breakdown by operation.
    Forward(cmd::forward::ForwardArgs),
    /// `forward` over a grid of DEP and batch sizes: throughput per GPU against speed
    /// per user (Pareto frontier), and the cost of a million tokens.
    Sweep(cmd::sweep::SweepArgs),
    /// Compare predictions with published figures (and refit the fitted parameters).
    Validate(cmd::validate::ValidateArgs),
    /// Measure per-layer operations on a device and fit a cost profile.
    Calibrate(cmd::calibrate::CalibrateArgs),
    /// Serve a scenario for real with the engine (CPU or one GPU) and record the run.
    Live(cmd::live::LiveArgs),
    /// List the embedded hardware, models, workloads and scenarios.
    List,
}

fn main() {
    // Behave like other Unix tools when the reader goes away (`twin ... | head`):
    // end quietly instead of panicking on a broken pipe.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result: Result<()> = match &cli.command {
        Command::Simulate(a) => cmd::simulate::run(a),
        Command::Forward(a) => cmd::forward::run(a),
        Command::Sweep(a) => cmd::sweep::run(a),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::Live(a) => cmd::live::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::List => cmd::list(),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}
