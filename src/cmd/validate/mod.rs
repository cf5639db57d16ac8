//! `twin validate published [TABLE]`: every published figure next to twin's
//! prediction, with its error; `--fit` re-derives the fitted parameters from the `fit`
//! rows.
//!
//! The tables ship in `scenarios/published/`: public kernel benchmarks
//! (`kernels-public`, computed by `twin kernel` commands), the vLLM GB300 report
//! (computed by `twin forward` and `twin simulate`) and others. The `published` crate
//! evaluates the rows and fits the parameters; here its rows' command lines are parsed
//! by the commands' own flags ([`Flags`]), and the outcomes printed.

mod bench_server;
mod bench_steps;
pub mod corpus;
pub mod runs;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};
use published::{
    coverage, evaluate, format_value, in_situ_fit, kernel_fit, load_tables, report_fit, Bands,
    CommandLine, Coverage, Outcome, Table, KERNELS, MEASURED, TABLES,
};
use scenario::flags::forward::ForwardArgs;
use scenario::flags::kernel::KernelArgs;
use scenario::flags::SimulateArgs;
use scenario::kernel::KernelRequest;
use scenario::step::StepRequest;
use scenario::RunRequest;
use std::collections::BTreeMap;

/// The commands' own flag parsers, for the rows' command lines.
pub struct Flags;

/// A row's command line (its program's words first) parsed by the flags `A`.
fn parse<A: Args>(argv: &[String]) -> Result<A> {
    #[derive(Parser)]
    struct Cli<A: Args> {
        #[command(flatten)]
        args: A,
    }
    Ok(Cli::<A>::try_parse_from(argv)?.args)
}

impl CommandLine for Flags {
    fn forward(&self, argv: &[String]) -> Result<StepRequest> {
        parse::<ForwardArgs>(argv)?.request()
    }

    fn kernel(&self, argv: &[String]) -> Result<KernelRequest> {
        parse::<KernelArgs>(argv)?.request()
    }

    fn simulate(&self, argv: &[String]) -> Result<RunRequest> {
        parse::<SimulateArgs>(argv)?.request()
    }
}

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    #[command(subcommand)]
    pub what: ValidateWhat,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ValidateWhat {
    /// Predicted vs published figures, with the error of every row.
    Published {
        /// A table: `kernels-public`, `vllm-gb300-deepseek-v4.1-flash`, or a CSV path
        /// (default: both embedded tables).
        table: Option<String>,
        /// Re-fit the fitted parameters to the `fit` rows and print them.
        #[arg(long)]
        fit: bool,
        /// With --fit: write the fitted values into the scenario files under this
        /// folder (comments kept), e.g. `--write scenarios`.
        #[arg(long, requires = "fit", value_name = "SCENARIOS_DIR")]
        write: Option<String>,
        /// Also run the rows computed by `twin simulate` (minutes each; without it they
        /// are listed as not run).
        #[arg(long)]
        simulate: bool,
        /// Skip the leave-one-out refits of the kernel table.
        #[arg(long)]
        no_loo: bool,
        /// Do not draw each row's p10-p90 band from its hardware's kernel-fit spreads.
        #[arg(long)]
        no_band: bool,
        /// With --simulate: give simulation rows a band of N simulations, one per draw
        /// of the cost parameters (default: simulation rows have no band).
        #[arg(long, value_name = "N", requires = "simulate", default_value_t = 0)]
        sim_band: u32,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Write an HTML report (predicted against published, per table) here.
        #[arg(long, value_name = "DIR", conflicts_with = "fit")]
        report: Option<String>,
        /// Let --report write into a folder that is not empty.
        #[arg(long)]
        force: bool,
    },
    /// A live run (`twin live --out DIR`) against twin's prediction of it.
    Live(runs::LiveValidateArgs),
    /// A vLLM `bench serve` result (saved with per-request details) against twin's
    /// prediction of it.
    Bench(runs::BenchValidateArgs),
    /// Every measured run of a corpus (`aic-silicon-train`, or a file of records)
    /// simulated as it was measured: predicted against measured per record, and the
    /// summary by engine, engine version, GPU, model, precision and regime.
    Runs(corpus::RunsValidateArgs),
}

pub fn run(args: &ValidateArgs) -> Result<()> {
    let (table, fit, write, simulate, no_loo, json, report, force, bands) = match &args.what {
        ValidateWhat::Published {
            table,
            fit,
            write,
            simulate,
            no_loo,
            no_band,
            sim_band,
            json,
            report,
            force,
        } => (
            table,
            fit,
            write,
            simulate,
            no_loo,
            json,
            report,
            force,
            Bands {
                on: !*no_band,
                sim_draws: *sim_band,
            },
        ),
        ValidateWhat::Live(a) => return runs::run_live(a),
        ValidateWhat::Bench(a) => return runs::run_bench(a),
        ValidateWhat::Runs(a) => return corpus::run(a),
    };
    let tables = load_tables(table.as_deref())?;
    if *fit {
        return run_fit(&tables, *simulate, write.as_deref(), *json, !*no_loo);
    }
    let mut all_json = Vec::new();
    let mut for_report = Vec::new();
    for t in &tables {
        let out = evaluate(t, *simulate, !*no_loo, bands, &Flags)?;
        let cov = coverage(&out);
        if report.is_some() {
            let rows = report_rows(&out);
            for_report.push((t.name.clone(), t.origin.clone(), rows));
        }
        if *json {
            all_json.extend(json_rows(t, &out, cov));
        } else {
            print_table(t, &out);
        }
    }
    if *json {
        println!("{}", serde_json::to_string_pretty(&all_json)?);
    }
    if let Some(dir) = report {
        let written = report::validate(&for_report, dir, *force)?;
        eprintln!("report: {written}");
    }
    Ok(())
}

/// A table's outcomes as the HTML report's validation rows.
fn report_rows(out: &[Outcome]) -> Vec<report::ValidationRow> {
    out.iter()
        .map(|o| report::ValidationRow {
            id: o.row.id.clone(),
            figure: o.row.figure.clone(),
            unit: o.row.unit.clone(),
            role: o.row.role.clone(),
            published: o.row.published,
            predicted: o.predicted,
            error: o.error,
        })
        .collect()
}

/// A table's outcomes as `--json` objects, one per row, each with the table's coverage.
fn json_rows(t: &Table, out: &[Outcome], cov: Coverage) -> Vec<serde_json::Value> {
    out.iter()
        .map(|o| {
            serde_json::json!({
                "table": t.name, "id": o.row.id, "figure": o.row.figure,
                "metric": o.row.metric, "published": o.row.published,
                "predicted": o.predicted, "error": o.error, "loo_error": o.loo,
                "role": o.row.role, "unit": o.row.unit, "command": o.row.command,
                "source": o.row.source,
                "band": o.band.map(|b| [b.p10, b.p90]), "in_band": o.in_band(),
                "band_coverage": cov,
            })
        })
        .collect()
}

fn fmt_num(v: f64, unit: &str) -> String {
    if v.abs() >= 1e4 {
        format!("{:.1}K {unit}", v / 1e3)
    } else {
        format!("{v:.2} {unit}")
    }
}

fn print_table(t: &Table, out: &[Outcome]) {
    println!("{}", t.origin);
    let cells = table_cells(out);
    let head = [
        "id",
        "figure",
        "published",
        "predicted",
        "error",
        "role",
        "leave-one-out",
        "band p10-p90",
    ];
    let mut w = head.map(str::len);
    for c in &cells {
        for (wi, x) in w.iter_mut().zip(c) {
            *wi = (*wi).max(x.chars().count());
        }
    }
    let line = |c: [&str; 8]| {
        let text = format!(
            "{:<w0$}  {:<w1$}  {:>w2$}  {:>w3$}  {:>w4$}  {:<w5$}  {:<w6$}  {}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            c[5],
            c[6],
            c[7],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3],
            w4 = w[4],
            w5 = w[5],
            w6 = w[6],
        );
        println!("{}", text.trim_end())
    };
    line(head);
    for c in &cells {
        line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6], &c[7]]);
    }
    print_summary(out);
}

/// A table's cells, row by row: id, figure, published, predicted, error, role,
/// leave-one-out error and band.
fn table_cells(out: &[Outcome]) -> Vec<[String; 8]> {
    out.iter()
        .map(|o| {
            let band = match (o.band, o.in_band()) {
                (Some(b), Some(inside)) => format!(
                    "{}-{} {}",
                    fmt_band(b.p10),
                    fmt_band(b.p90),
                    if inside { "in" } else { "out" }
                ),
                _ => String::new(),
            };
            let (predicted, error) = match (o.predicted, o.error) {
                (Some(p), Some(e)) => (fmt_num(p, &o.row.unit), format!("{:+.1}%", e * 100.0)),
                _ => ("not run".to_string(), "--simulate".to_string()),
            };
            [
                o.row.id.clone(),
                o.row.figure.clone(),
                fmt_num(o.row.published, &o.row.unit),
                predicted,
                error,
                o.row.role.clone(),
                o.loo
                    .map(|e| format!("{:+.1}%", e * 100.0))
                    .unwrap_or_default(),
                band,
            ]
        })
        .collect()
}

/// The lines under a table: errors of its check rows, leave-one-out errors, and band
/// coverage.
fn print_summary(out: &[Outcome]) {
    let checks: Vec<f64> = out
        .iter()
        .filter(|o| o.row.role == "check")
        .filter_map(|o| o.error.map(f64::abs))
        .collect();
    let worst = checks.iter().copied().fold(0.0, f64::max);
    let within = |b: f64| checks.iter().filter(|e| **e <= b).count();
    let loos: Vec<f64> = out.iter().filter_map(|o| o.loo.map(f64::abs)).collect();
    let not_run = out.iter().filter(|o| o.error.is_none()).count();
    println!(
        "\n{} check rows evaluated: {} within 10%, {} within 15%, worst {:.1}%{}{}\n",
        checks.len(),
        within(0.10),
        within(0.15),
        worst * 100.0,
        if loos.is_empty() {
            String::new()
        } else {
            format!(
                "; fit rows left out one at a time: mean {:.1}%, worst {:.1}%",
                loos.iter().sum::<f64>() / loos.len() as f64 * 100.0,
                loos.iter().copied().fold(0.0, f64::max) * 100.0
            )
        },
        if not_run > 0 {
            format!("; {not_run} simulation rows not run (add --simulate)")
        } else {
            String::new()
        }
    );
    let c = coverage(out);
    if c.with_band > 0 {
        println!(
            "band coverage: {} of {} check rows with a band lie inside their p10-p90 ({:.0}%; an honest band holds about 80%){}\n",
            c.inside,
            c.with_band,
            c.inside as f64 / c.with_band as f64 * 100.0,
            if c.with_band < c.check_rows {
                format!(
                    "; {} check rows without band (no spread known, or simulation rows: --simulate --sim-band N)",
                    c.check_rows - c.with_band
                )
            } else {
                String::new()
            }
        );
    } else if c.check_rows > 0 {
        println!("band coverage: no check row has a band (no spread known, bands off, or simulation rows run without --sim-band)\n");
    }
    print_by_engine(out);
}

/// Check rows priced with an engine's kernel tables (`--engine`), summed by kernel,
/// hardware and engine: count, median error, share within 20%.
fn print_by_engine(out: &[Outcome]) {
    let mut by: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
    for o in out.iter().filter(|o| o.row.role == "check") {
        let words: Vec<&str> = o.row.command.split_whitespace().collect();
        let flag = |f: &str| {
            words
                .iter()
                .position(|w| *w == f)
                .and_then(|i| words.get(i + 1))
                .map(|s| s.to_string())
        };
        let (Some(engine), Some(e)) = (flag("--engine"), o.error) else {
            continue;
        };
        let op = words.get(2).copied().unwrap_or("").to_string();
        let hw = flag("--hardware").unwrap_or_default();
        by.entry((op, hw, engine)).or_default().push(e.abs());
    }
    if by.is_empty() {
        return;
    }
    println!("by kernel, hardware and engine (median error, rows within 20%):");
    for ((op, hw, engine), e) in by {
        let s = calibration::tables::fit::errors(&e);
        let n = s.rows;
        let within = (s.within_20 * n as f64).round() as usize;
        println!(
            "  {op:<10} {hw:<6} {engine:<18} {n:>3} rows  median {:>5.1}%  within 20% {within}/{n}",
            s.median * 100.0
        );
    }
    println!();
}

/// A band end, short.
fn fmt_band(v: f64) -> String {
    if v.abs() >= 1e4 {
        format!("{:.1}K", v / 1e3)
    } else {
        format!("{v:.2}")
    }
}

fn run_fit(
    tables: &[Table],
    simulate: bool,
    write: Option<&str>,
    json: bool,
    loo: bool,
) -> Result<()> {
    let mut items = Vec::new();
    for t in tables {
        match t.name.as_str() {
            KERNELS => fit_kernels(t, kernel_fit::GROUPS, write, json, loo, &mut items)?,
            in_situ_fit::TABLE => {
                fit_kernels(t, in_situ_fit::GROUPS, write, json, loo, &mut items)?
            }
            "vllm-gb300-deepseek-v4.1-flash" => {
                let fitted = report_fit::fit(&t.rows, simulate, &Flags, &mut |m| eprintln!("{m}"))?;
                for f in &fitted {
                    items.push(serde_json::json!({
                        "table": t.name, "name": f.name, "fitted": f.value, "row": f.row,
                        "stored": f.stored,
                    }));
                }
                if !json {
                    println!("fitted to the `fit` rows of {}:", t.origin);
                    for f in &fitted {
                        let v = f
                            .value
                            .map(format_value)
                            .unwrap_or_else(|| "not fitted".into());
                        let was = f
                            .stored
                            .map(|s| format!("(stored: {})", format_value(s)))
                            .unwrap_or_default();
                        println!("  {:<40} = {:<14} row {:<22} {was}", f.name, v, f.row);
                    }
                    if !simulate {
                        println!("(parameters of simulation rows are fitted with --simulate, several minutes)");
                    }
                }
                if let Some(dir) = write {
                    let files = report_fit::write(dir, &fitted)?;
                    if !json {
                        println!("written to {}; rebuild to embed them", files.join(", "));
                    }
                }
            }
            // All check rows (the profiles are fitted by `calibrate --from-tables`):
            // nothing to fit when every table is, an error when it alone is named.
            MEASURED if tables.len() > 1 => {}
            other => bail!(
                "table {other} has no fitted parameters (tables with fits: {})",
                TABLES
                    .map(|t| t.0)
                    .into_iter()
                    .filter(|t| *t != MEASURED)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&items)?);
    } else if write.is_none() {
        println!("store them with --write scenarios");
    }
    Ok(())
}

/// Each group's fitted values against the stored ones.
fn print_group_fits(t: &Table, fits: &[kernel_fit::GroupFit]) {
    println!(
        "fitted to the `fit` rows of {} (least squares of log errors):",
        t.origin
    );
    for f in fits {
        println!(
            "  {} [{}; sum of squares {:.3e}, stored {:.3e}]",
            f.group.name,
            f.group.fitted_in.join(", "),
            f.cost_fitted,
            f.cost_stored
        );
        for ((p, v), s) in f.group.params.iter().zip(&f.values).zip(&f.stored) {
            println!("    cost.{:<38} = {:<12.5e} (stored {:.5e})", p.key, v, s);
        }
    }
}

/// `--fit` of the kernel table: the groups' fits and the class spreads, printed (or
/// pushed onto `items` for --json) and written with --write.
fn fit_kernels(
    t: &Table,
    groups: &'static [kernel_fit::Group],
    write: Option<&str>,
    json: bool,
    loo: bool,
    items: &mut Vec<serde_json::Value>,
) -> Result<()> {
    let fits = kernel_fit::fit_groups(groups, &t.rows, loo, &Flags)?;
    for f in &fits {
        for ((p, v), s) in f.group.params.iter().zip(&f.values).zip(&f.stored) {
            items.push(serde_json::json!({
                "table": t.name, "group": f.group.name, "name": format!("cost.{}", p.key),
                "fitted": v, "stored": s, "hardware": f.group.fitted_in,
                "cost_fitted": f.cost_fitted, "cost_stored": f.cost_stored,
            }));
        }
    }
    if !json {
        print_group_fits(t, &fits);
    }
    // The kernel classes' spreads come from the kernel table's out-of-sample rows
    // only; the in-situ table's rows are op categories of one deployment.
    if t.name != KERNELS {
        if let Some(dir) = write {
            let files = kernel_fit::write(dir, &fits, None, &t.name)?;
            if !json {
                println!("written to {}; rebuild to embed them", files.join(", "));
            }
        }
        return Ok(());
    }
    if !loo {
        if write.is_some() {
            bail!("--write stores the spreads, estimated from the leave-one-out refits: drop --no-loo");
        }
        if !json {
            println!("spreads: estimated with the leave-one-out refits (drop --no-loo)");
        }
        return Ok(());
    }
    let held = kernel_fit::held_out(&t.rows, &fits, &Flags)?;
    let spreads = calibration::spread_fit::estimate(&held);
    let (inside, judged) = calibration::spread_fit::held_out_coverage(&held);
    for s in &spreads {
        items.push(serde_json::json!({
            "table": t.name, "spread": s.class.key(), "architecture": s.architecture,
            "rows": s.rows.len(), "rms_log_error": s.rms, "fitted": s.spread,
            "hardware_with_rows": s.hardware_with_rows(),
        }));
    }
    if !json {
        print_spreads(held.len(), &spreads, inside, judged);
    }
    if let Some(dir) = write {
        let files = kernel_fit::write(dir, &fits, Some(&spreads), &t.name)?;
        if !json {
            println!("written to {}; rebuild to embed them", files.join(", "));
        }
    }
    Ok(())
}

/// Prints the kernel classes' fitted spreads and how many held-out rows fall inside them.
fn print_spreads(
    held: usize,
    spreads: &[calibration::spread_fit::ClassSpread],
    inside: usize,
    judged: usize,
) {
    println!(
        "spreads (log-space sd of a kernel class's price; {held} out-of-sample rows: check rows and fit rows left out; RMS raised to its 90% upper confidence bound):"
    );
    for s in spreads {
        let worst = s
            .rows
            .iter()
            .max_by(|a, b| a.log_error.abs().total_cmp(&b.log_error.abs()))
            .map(|r| format!("{} {:+.3}", r.id, r.log_error))
            .unwrap_or_default();
        println!(
            "  {:<6} cost.spread.{:<16} = {:.5} ({} rows on {}; RMS {:.4}; worst {worst})",
            s.architecture,
            s.class.key(),
            s.spread,
            s.rows.len(),
            s.hardware_with_rows().join(", "),
            s.rms
        );
    }
    println!(
        "  held out one at a time, {inside} of {judged} rows fall inside the p10-p90 of their pool's spread without them ({:.0}%)",
        inside as f64 / judged.max(1) as f64 * 100.0
    );
}
