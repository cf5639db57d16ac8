//! `twin validate runs CORPUS`: every measured run of a corpus simulated as it was
//! measured (the client as the workload; the engine's scheduler, host terms and
//! kernel tables; the layout), predicted against measured per record, and the summary
//! by engine, engine version, GPU, model, precision and regime. A record twin cannot
//! price is listed with its reason, never dropped. The work is `measured::validate`; here, the flags,
//! the terms they choose and the HTML report.

use anyhow::{bail, Context, Result};
use clap::Args;
use corpus::summary::GroupSummary;
use measured::load;
use measured::predict::Center;
use measured::validate::{terms_line, validate, Row, View};

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
    /// Write every simulated step of each record as CSV (pool, group, start_s, step_s,
    /// prefill_tokens, prefill_chunks, prompts_done, decode_requests), one file per record here:
    /// `ID.steps.csv` (filter first: every record is simulated once more).
    #[arg(long, value_name = "DIR")]
    pub steps_out: Option<std::path::PathBuf>,
    /// Write every simulated request of each record as CSV (arrival, first token,
    /// finish, tokens, cached tokens), one file per record here: `ID.requests.csv`,
    /// to set beside the run's own per-request file.
    #[arg(long, value_name = "DIR")]
    pub requests_out: Option<std::path::PathBuf>,
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
    let profile = profile_of(a)?;
    let terms = terms_line(profile.as_ref(), a.profile.as_deref(), &loaded.origin);
    let v = validate(&records, &loaded.base, a.seed, a.center, profile.as_ref());
    if let Some(dir) = &a.report {
        write_report(a, dir, &loaded, &v.rows, &v.summaries)?;
    }
    write_runs(a, &records, &loaded.base, profile.as_ref())?;
    let view = View {
        filters: &a.filter,
        center: a.center,
        seed: a.seed,
        worst: a.worst,
        all: a.all,
    };
    if a.json {
        let j = measured::validate::json(&view, &loaded, &v, &terms);
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        print!("{}", measured::validate::text(&view, &loaded, &v, &terms));
    }
    Ok(())
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

/// With --steps-out or --requests-out, each record's simulated steps and requests as
/// CSV files named by its id (a record that cannot be simulated writes none; its
/// reason is in the table).
fn write_runs(
    a: &RunsValidateArgs,
    records: &[&corpus::RunRecord],
    base: &measured::load::Base,
    profile: Option<&calibration::runs::RunsProfile>,
) -> Result<()> {
    use std::sync::Mutex;
    let record = sim::serving::Record {
        steps: a.steps_out.is_some(),
        requests: a.requests_out.is_some(),
    };
    if !record.steps && !record.requests {
        return Ok(());
    }
    for dir in [&a.steps_out, &a.requests_out].into_iter().flatten() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let first_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let wrote = std::sync::atomic::AtomicUsize::new(0);
    measured::predict::record_all(records, base, a.seed, profile, record, |rec, out| {
        let Ok(out) = out else { return };
        let name = file_name(&rec.id);
        let write = || -> Result<()> {
            if let Some(dir) = &a.steps_out {
                crate::simulation::write_csv(&dir.join(format!("{name}.steps.csv")), &out.steps)?;
            }
            if let Some(dir) = &a.requests_out {
                let path = dir.join(format!("{name}.requests.csv"));
                crate::simulation::write_csv(&path, &out.requests)?;
            }
            Ok(())
        };
        match write() {
            Ok(()) => {
                wrote.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => {
                let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert(e);
            }
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let dirs: Vec<String> = [&a.steps_out, &a.requests_out]
        .into_iter()
        .flatten()
        .map(|d| d.display().to_string())
        .collect();
    eprintln!(
        "wrote the simulated runs of {} of {} records to {}",
        wrote.into_inner(),
        records.len(),
        dirs.join(" and ")
    );
    Ok(())
}

/// A record's id as a file name: characters other than ASCII letters, digits, `.`,
/// `-` and `_` become `_`.
fn file_name(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
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
