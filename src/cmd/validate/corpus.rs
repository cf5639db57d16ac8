//! `twin validate runs CORPUS`: every measured run of a corpus simulated as it was
//! measured (the client as the workload; the engine's scheduler, host terms and
//! kernel tables; the layout), predicted against measured per record, and the summary
//! by engine, GPU, model, precision and regime. A record twin cannot price is listed
//! with its reason, never dropped.

use anyhow::{bail, Result};
use clap::Args;
use corpus::summary::{summarize, Dim, GroupSummary, Groups, Outcome};
use corpus::{Metric, RunRecord};
use measured::predict::{compare, Center};
use measured::{load, predict_all, Cache};

#[derive(Debug, Clone, Args)]
pub struct RunsValidateArgs {
    /// The corpus: an embedded name (`aic-silicon-train`) or a file (`.jsonl` or
    /// `.jsonl.gz` of twin.run.v1 records, or AIConfigurator's silicon CSV).
    pub corpus: String,
    /// Keep only records that pass: `KEY=V1,V2` (any of), `KEY~TEXT` (contains),
    /// `concurrency<=N`, `concurrency>=N`; KEY one of id, engine, version, gpu,
    /// model, precision, mode, concurrency, source (repeatable: all must hold).
    #[arg(long = "filter", value_name = "KEY=VALUE")]
    pub filter: Vec<String>,
    /// The predicted statistic a record's unstated central figure (mean or median,
    /// docs/runs-corpus.md) is compared with.
    #[arg(long, value_enum, default_value = "mean")]
    pub center: Center,
    /// Seed of every simulation (each record's lengths are drawn from it and the
    /// record's id).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worst records listed (by the largest error of any metric).
    #[arg(long, default_value_t = 15, value_name = "N")]
    pub worst: usize,
    /// Print every record's comparison, not only the worst.
    #[arg(long)]
    pub all: bool,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Write an HTML report (predicted against measured per metric, error against
    /// concurrency, worst records, records not priced) here.
    #[arg(long, value_name = "DIR")]
    pub report: Option<String>,
    /// Let --report write into a folder that is not empty.
    #[arg(long)]
    pub force: bool,
    /// Terms fitted to measured runs (`twin calibrate --from-runs --out`): each record
    /// is priced with its engine and GPU family's terms, and carries their p10-p90 band
    /// (coverage is reported).
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<std::path::PathBuf>,
    /// Price with physics alone: leave out the shipped terms fitted to measured runs
    /// (scenarios/runs/fitted.toml), which otherwise price every record of an engine
    /// and GPU family they have terms for.
    #[arg(long, conflicts_with = "profile")]
    pub physics_only: bool,
}

/// One record's outcome with what priced it.
struct Row<'a> {
    rec: &'a RunRecord,
    pricing: String,
    outcome: Outcome,
}

pub fn run(a: &RunsValidateArgs) -> Result<()> {
    let loaded = load(&a.corpus)?;
    let records = loaded.filtered(&a.filter)?;
    if records.is_empty() {
        bail!(
            "{}: no record passes the filters ({} records in all)",
            loaded.origin,
            loaded.records.len()
        );
    }
    let cache = Cache::default();
    let one = records.len() == 1;
    let profile = profile_of(a)?;
    let terms_line = terms_line(a, profile.as_ref(), &loaded.origin);
    let mut predictions = predict_all(
        &records,
        &loaded.base,
        &cache,
        a.seed,
        profile.as_ref(),
        one,
    );
    let report = predictions.first_mut().and_then(|p| p.report.take());
    let rows: Vec<Row> = records
        .iter()
        .zip(predictions)
        .map(|(rec, p)| Row {
            rec,
            pricing: p.pricing,
            outcome: Outcome {
                id: rec.id.clone(),
                groups: Groups::of(rec),
                result: p
                    .result
                    .map(|pred| compare(&rec.measured, &pred, a.center, &p.band))
                    .map_err(|e| e.to_string()),
            },
        })
        .collect();
    let outcomes: Vec<Outcome> = rows.iter().map(|r| r.outcome.clone()).collect();
    let summaries: Vec<Vec<GroupSummary>> = Dim::SUMMARY
        .iter()
        .map(|d| summarize(&outcomes, *d))
        .collect();
    if let Some(dir) = &a.report {
        write_report(a, dir, &loaded, &rows, &summaries)?;
    }
    if a.json {
        print_json(a, &loaded, &rows, &summaries, &terms_line)
    } else {
        println!("{terms_line}");
        print_text(a, &loaded, &rows, &summaries);
        if let (Some(r), Some(row)) = (report, rows.first()) {
            println!();
            println!("the simulation of {} ({}):", row.rec.id, row.pricing);
            print!("{}", r.render_text());
        }
        Ok(())
    }
}

/// The terms fitted to runs that price the records: --profile's, none with
/// --physics-only, else the shipped ones.
fn profile_of(a: &RunsValidateArgs) -> Result<Option<calibration::runs::RunsProfile>> {
    Ok(match &a.profile {
        Some(p) => Some(scenario::runs_profile::read(p)?.ok_or_else(|| {
            anyhow::anyhow!(
                "--profile {}: not a profile of terms fitted to runs (`twin calibrate --from-runs --out`)",
                p.display()
            )
        })?),
        None if a.physics_only => None,
        None => scenario::runs_profile::shipped().cloned(),
    })
}

/// Writes the HTML report of the records' comparisons into `dir` and says where on stderr.
fn write_report(
    a: &RunsValidateArgs,
    dir: &str,
    loaded: &measured::Loaded,
    rows: &[Row],
    summaries: &[Vec<GroupSummary>],
) -> Result<()> {
    let report_rows: Vec<report::RunRow> = rows
        .iter()
        .map(|r| report::RunRow {
            id: r.outcome.id.clone(),
            series: r.rec.engine.name.key().to_string(),
            gpu: r.rec.gpu.hardware.clone(),
            model: r.rec.model.id.clone(),
            concurrency: r.rec.concurrency(),
            result: r.outcome.result.clone(),
        })
        .collect();
    let wrote = report::runs(&loaded.origin, &report_rows, summaries, dir, a.force)?;
    eprintln!("report: {wrote}");
    Ok(())
}

/// What priced the records beyond physics, in one line: the terms, and whether they
/// were fitted to these very records (in-sample).
fn terms_line(
    a: &RunsValidateArgs,
    profile: Option<&calibration::runs::RunsProfile>,
    origin: &str,
) -> String {
    match (profile, &a.profile) {
        (None, _) => "priced by physics alone (--physics-only)".to_string(),
        (Some(p), given) => {
            let from = match given {
                Some(path) => format!("--profile {}", path.display()),
                None => "the shipped terms (scenarios/runs/fitted.toml)".to_string(),
            };
            let same = p.corpus == origin;
            format!(
                "priced with {from}, fitted to {} ({} group{}: {}){}",
                p.corpus,
                p.groups.len(),
                if p.groups.len() == 1 { "" } else { "s" },
                p.groups
                    .iter()
                    .map(|g| format!("{} on {}", g.engine, g.family))
                    .collect::<Vec<_>>()
                    .join(", "),
                if same {
                    ": these records were fitted to, so the figures are in-sample; `twin calibrate --from-runs` prints the cross-validated ones (docs/fidelity.md)"
                } else {
                    ""
                }
            )
        }
    }
}

fn print_json(
    a: &RunsValidateArgs,
    loaded: &measured::Loaded,
    rows: &[Row],
    summaries: &[Vec<GroupSummary>],
    terms_line: &str,
) -> Result<()> {
    let records: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.outcome.id,
                "groups": r.outcome.groups,
                "pricing": r.pricing,
                "compared": r.outcome.result.as_ref().ok(),
                "not_priced": r.outcome.result.as_ref().err(),
            })
        })
        .collect();
    let v = serde_json::json!({
        "twin": env!("CARGO_PKG_VERSION"),
        "corpus": loaded.origin,
        "filters": a.filter,
        "center": format!("{:?}", a.center).to_lowercase(),
        "seed": a.seed,
        "terms": terms_line,
        "notes": loaded.notes,
        "summary": summaries,
        "records": records,
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// `x` as a signed percentage.
fn pct(x: f64) -> String {
    format!("{:+.1}%", 100.0 * x)
}

fn print_text(
    a: &RunsValidateArgs,
    loaded: &measured::Loaded,
    rows: &[Row],
    summaries: &[Vec<GroupSummary>],
) {
    let priced = rows.iter().filter(|r| r.outcome.result.is_ok()).count();
    println!(
        "twin {} validate runs: {} ({} of {} records{}); seed {}; a record's central figure is compared with the predicted {}",
        env!("CARGO_PKG_VERSION"),
        loaded.origin,
        rows.len(),
        loaded.records.len(),
        if a.filter.is_empty() { String::new() } else { format!(" passing {}", a.filter.join(" ")) },
        a.seed,
        match a.center {
            Center::P50 => "median",
            Center::Mean => "mean",
        }
    );
    for n in &loaded.notes {
        println!("note: {n}");
    }
    println!(
        "priced {priced} of {}; error = predicted / measured - 1",
        rows.len()
    );
    for groups in summaries {
        print_groups(groups);
    }
    print_records(a, rows);
    print_unpriced(rows);
}

/// One grouping as a table: per group, each metric's median |error|, share within its
/// tolerance, and median signed error.
fn print_groups(groups: &[GroupSummary]) {
    let Some(first) = groups.first() else { return };
    println!();
    println!(
        "by {:<40} {:>7} {:>6}   {:>26}   {:>26}",
        first.dim.name(),
        "records",
        "priced",
        "TTFT |err| within bias",
        "TPOT |err| within bias"
    );
    for g in groups {
        let cell = |m: Metric| {
            g.metrics
                .iter()
                .find(|s| s.metric == m)
                .map(|s| {
                    format!(
                        "{:>6.1}% {:>5.0}% {:>7}{}",
                        100.0 * s.median_abs_error,
                        100.0 * s.within,
                        pct(s.median_error),
                        s.band_coverage
                            .map(|c| format!(" band {:>3.0}%", 100.0 * c))
                            .unwrap_or_default()
                    )
                })
                .unwrap_or_else(|| format!("{:>26}", "-"))
        };
        println!(
            "   {:<40} {:>7} {:>6}   {}   {}",
            scenario::clip(&g.group),
            g.records,
            g.priced,
            cell(Metric::TtftMs),
            cell(Metric::TpotMs)
        );
    }
}

/// The worst records (or all with `--all`), by their largest |error|.
fn print_records(a: &RunsValidateArgs, rows: &[Row]) {
    let mut priced: Vec<(&Row, f64)> = rows
        .iter()
        .filter_map(|r| {
            let cs = r.outcome.result.as_ref().ok()?;
            let worst = cs.iter().map(|c| c.error().abs()).fold(0.0, f64::max);
            Some((r, worst))
        })
        .collect();
    if !a.all {
        priced.sort_by(|x, y| y.1.total_cmp(&x.1));
        priced.truncate(a.worst);
    }
    if priced.is_empty() {
        return;
    }
    println!();
    println!(
        "{}",
        if a.all {
            "every record:"
        } else {
            "worst records:"
        }
    );
    for (r, _) in priced {
        let cs = r.outcome.result.as_ref().map(Vec::as_slice).unwrap_or(&[]);
        let figs: Vec<String> = cs
            .iter()
            .map(|c| {
                format!(
                    "{} {} {:.1} / {:.1} ({})",
                    c.metric.key(),
                    c.stat.key(),
                    c.measured,
                    c.predicted,
                    pct(c.error())
                )
            })
            .collect();
        println!(
            "  {} [{} {} c{}]: {}",
            r.rec.id,
            r.rec.engine.label(),
            r.rec.gpu.hardware,
            r.rec.concurrency().unwrap_or(0),
            figs.join(", ")
        );
    }
}

/// Records twin could not price, by reason.
fn print_unpriced(rows: &[Row]) {
    let mut by_reason: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for r in rows {
        if let Err(e) = &r.outcome.result {
            let first = e.lines().next().unwrap_or_default();
            by_reason.entry(first).or_default().push(&r.outcome.id);
        }
    }
    if by_reason.is_empty() {
        return;
    }
    println!();
    println!(
        "not priced ({} records), by reason:",
        by_reason.values().map(Vec::len).sum::<usize>()
    );
    for (reason, ids) in by_reason {
        let more = if ids.len() > 3 {
            format!(" and {} more", ids.len() - 3)
        } else {
            String::new()
        };
        println!(
            "  {} x {reason} ({}{more})",
            ids.len(),
            ids.iter().take(3).copied().collect::<Vec<_>>().join(", ")
        );
    }
}
