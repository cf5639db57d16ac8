//! `twin`: a digital twin for LLM-serving capacity planning.
//!
//! The binary parses arguments, loads scenario files and prints; the crates compute
//! (`sim` predicts, `engine` measures, `calibration` fits).

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::io::Write as _;

// First: its print macros shadow `std`'s in every module below.
#[macro_use]
mod out;

mod args;
mod band;
mod cmd;
mod interrupt;
mod simulation;

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
    Simulate(cmd::simulate::SimulateCmd),
    /// Price one exact prefill or decode step of a DEP group, with a breakdown by operation.
    Forward(scenario::flags::forward::ForwardArgs),
    /// Price one kernel (GEMM, dispatch/combine, attention) as its public benchmark
    /// reports it.
    Kernel(scenario::flags::kernel::KernelArgs),
    /// `forward` over a grid of DEP and batch sizes: throughput per GPU against speed
    /// per user (Pareto frontier), and the cost of a million tokens.
    Sweep(cmd::sweep::SweepArgs),
    /// The best deployment under latency SLOs for a GPU budget, or the GPUs a target
    /// rate needs: analytic screen, simulation of the best candidates, vLLM commands.
    Plan(cmd::plan::PlanArgs),
    /// Total cost of ownership per GPU-hour and the run's margin under TCO presets.
    Cost(cmd::cost::CostArgs),
    /// Compare predictions with published figures (and refit the fitted parameters).
    Validate(cmd::validate::ValidateArgs),
    /// Measure per-layer operations on a device and fit a cost profile.
    Calibrate(Box<cmd::calibrate::CalibrateArgs>),
    /// Serve a scenario for real with the engine (CPU or one GPU) and record the run.
    Live(cmd::live::LiveArgs),
    /// Import a Hugging Face config as a model file, or show what a model holds.
    Model(cmd::model::ModelArgs),
    /// Measured serving runs as a corpus of records: import them, show what one holds
    /// (`twin validate runs` checks twin against them).
    Runs(cmd::runs::RunsArgs),
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
    // The notes libraries say as they happen (spec::note) go to stderr.
    spec::note::set_sink(|line| eprintln!("{line}"));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help, version and usage errors; a failed print is an error too.
        Err(e) => match e.print() {
            Ok(()) => std::process::exit(e.exit_code()),
            Err(_) => std::process::exit(2),
        },
    };
    let result: Result<()> = match &cli.command {
        Command::Simulate(a) => cmd::simulate::run(a),
        Command::Forward(a) => cmd::forward::run(a),
        Command::Kernel(a) => cmd::kernel::run(a),
        Command::Sweep(a) => cmd::sweep::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::Cost(a) => cmd::cost::run(a),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::Live(a) => cmd::live::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::Model(a) => cmd::model::run(a),
        Command::Runs(a) => cmd::runs::run(a),
        Command::List => cmd::list::run(),
    };
    if let Err(e) = result {
        let interrupted = e.downcast_ref::<interrupt::Interrupted>().is_some();
        // No line of a message repeats a very long input in full.
        let text: Vec<String> = format!("{e:#}")
            .lines()
            .map(scenario::clip_middle)
            .collect();
        eprintln!(
            "{}: {}",
            if interrupted { "interrupted" } else { "error" },
            text.join("\n")
        );
        out::finish();
        std::process::exit(if interrupted { 130 } else { 2 });
    }
    if let Some(why) = out::finish() {
        // Best effort: stderr may be the stream that failed.
        let _ = writeln!(std::io::stderr(), "error: {why}");
        std::process::exit(2);
    }
}

#[cfg(test)]
mod help_tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every option and argument of every command, `twin` down to the leaves, says
    /// what it does in `--help`.
    #[test]
    fn every_option_of_every_command_has_a_help_text() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} --{}", a.get_long().unwrap_or(id)));
                }
            }
            for s in cmd.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "twin", &mut missing);
        assert!(
            missing.is_empty(),
            "{} options without help:\n{}",
            missing.len(),
            missing.join("\n")
        );
    }

    /// `kernel` and `forward` price on one default hardware.
    #[test]
    fn kernel_and_forward_share_the_default_hardware() {
        use clap::Parser;
        let k = match Cli::try_parse_from([
            "twin", "kernel", "gemm", "--m", "1", "--n", "1", "--k", "1",
        ])
        .unwrap()
        .command
        {
            super::Command::Kernel(k) => k.hardware,
            _ => unreachable!(),
        };
        let f = match Cli::try_parse_from(["twin", "forward"]).unwrap().command {
            super::Command::Forward(f) => f.hardware,
            _ => unreachable!(),
        };
        assert_eq!(k, f);
    }
}
