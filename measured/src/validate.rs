//! A corpus's records simulated as they were measured and compared with what was
//! measured (`twin validate runs` without its flags and printing): predicted against
//! measured per record, the summary by engine, engine version, GPU, model, precision
//! and regime, and both as text and as JSON. A record twin cannot price is listed
//! with its reason, never dropped.

use crate::load::{Base, Loaded};
use crate::predict::{compare, Center};
use crate::{predict_all, Cache};
use calibration::runs::RunsProfile;
use corpus::summary::{summarize, Dim, GroupSummary, Groups, Outcome};
use corpus::{Metric, RunRecord};
use std::path::Path;

/// One record's outcome with what priced it.
pub struct Row<'a> {
    pub rec: &'a RunRecord,
    pub pricing: String,
    pub outcome: Outcome,
    /// The share of its GPUs' dense peak its throughput implies
    /// ([`crate::plausible`]).
    pub peak_share: Option<f64>,
}

/// The records compared: one row each, in the corpus's order, and the summaries by
/// every grouping of [`Dim::SUMMARY`].
pub struct Validated<'a> {
    pub rows: Vec<Row<'a>>,
    pub summaries: Vec<Vec<GroupSummary>>,
    /// The whole simulated report when there is one record, to look at closely.
    pub report: Option<Box<sim::serving::Report>>,
}

/// Each of `records` simulated (seed `seed`, priced with `profile`'s terms where it has
/// its group's) and compared with what was measured, its unstated central figure with
/// the predicted `center`.
pub fn validate<'a>(
    records: &[&'a RunRecord],
    base: &Base,
    seed: u64,
    center: Center,
    profile: Option<&RunsProfile>,
) -> Validated<'a> {
    let cache = Cache::default();
    let one = records.len() == 1;
    let mut predictions = predict_all(records, base, &cache, seed, profile, one);
    let report = predictions.first_mut().and_then(|p| p.report.take());
    let rows: Vec<Row> = records
        .iter()
        .zip(predictions)
        .map(|(rec, p)| Row {
            rec,
            peak_share: p.peak_share,
            pricing: p.pricing,
            outcome: Outcome {
                id: rec.id.clone(),
                groups: Groups::of(rec),
                result: p
                    .result
                    .map(|pred| compare(&rec.measured, &pred, center, &p.band))
                    .map_err(|e| e.to_string()),
            },
        })
        .collect();
    let outcomes: Vec<Outcome> = rows.iter().map(|r| r.outcome.clone()).collect();
    let summaries = Dim::SUMMARY
        .iter()
        .map(|d| summarize(&outcomes, *d))
        .collect();
    Validated {
        rows,
        summaries,
        report,
    }
}

/// What priced the records beyond physics, in one line: the terms (`given`: the
/// profile file they were read from; none: the shipped ones), and whether they were
/// fitted to these very records (in-sample).
pub fn terms_line(profile: Option<&RunsProfile>, given: Option<&Path>, origin: &str) -> String {
    let Some(p) = profile else {
        return "priced by physics alone (--physics-only)".to_string();
    };
    let from = match given {
        Some(path) => format!("--profile {}", path.display()),
        None => "the shipped terms (scenarios/runs/fitted.toml)".to_string(),
    };
    let same = p.corpus == origin;
    let (fitted, physics) = (p.group_names(false), p.group_names(true));
    let with_terms = match fitted.len() {
        0 => "no group's terms apply".to_string(),
        1 => format!("1 group: {}", fitted[0]),
        n => format!("{n} groups: {}", fitted.join(", ")),
    };
    format!(
        "priced with {from}, fitted to {} ({with_terms}{}){}",
        p.corpus,
        if physics.is_empty() {
            String::new()
        } else {
            format!("; by physics alone, with its band: {}", physics.join(", "))
        },
        if same {
            ": these records were fitted to, so the figures are in-sample; `twin calibrate --from-runs` prints the cross-validated ones (docs/fidelity.md)"
        } else {
            ""
        }
    )
}

/// How the comparison is shown: the filters the records passed, the central figure
/// and seed they were compared at, and which records are listed.
pub struct View<'a> {
    pub filters: &'a [String],
    pub center: Center,
    pub seed: u64,
    /// Worst records listed.
    pub worst: usize,
    /// List every record, not only the worst.
    pub all: bool,
}

/// The comparison as one JSON object.
pub fn json(view: &View, loaded: &Loaded, v: &Validated, terms_line: &str) -> serde_json::Value {
    let records: Vec<serde_json::Value> = v
        .rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "id": r.outcome.id,
                "groups": r.outcome.groups,
                "pricing": r.pricing,
                "compared": r.outcome.result.as_ref().ok(),
                "not_priced": r.outcome.result.as_ref().err(),
                "implied_peak_share": r.peak_share,
            })
        })
        .collect();
    serde_json::json!({
        "twin": env!("CARGO_PKG_VERSION"),
        "corpus": loaded.origin,
        "filters": view.filters,
        "center": format!("{:?}", view.center).to_lowercase(),
        "seed": view.seed,
        "terms": terms_line,
        "notes": loaded.notes,
        "summary": v.summaries,
        "records": records,
    })
}

/// `x` as a signed percentage.
fn pct(x: f64) -> String {
    format!("{:+.1}%", 100.0 * x)
}

/// The comparison as text: what priced it, the corpus and how it was compared, each
/// grouping's table, the worst records (or every one), those not priced, and a lone
/// record's simulation.
pub fn text(view: &View, loaded: &Loaded, v: &Validated, terms_line: &str) -> String {
    let rows = &v.rows;
    let priced = rows.iter().filter(|r| r.outcome.result.is_ok()).count();
    let mut s = format!("{terms_line}\n");
    s += &format!(
        "twin {} validate runs: {} ({} of {} records{}); seed {}; a record's central figure is compared with the predicted {}\n",
        env!("CARGO_PKG_VERSION"),
        loaded.origin,
        rows.len(),
        loaded.records.len(),
        if view.filters.is_empty() { String::new() } else { format!(" passing {}", view.filters.join(" ")) },
        view.seed,
        match view.center {
            Center::P50 => "median",
            Center::Mean => "mean",
        }
    );
    for n in &loaded.notes {
        s += &format!("note: {n}\n");
    }
    s += &format!(
        "priced {priced} of {}; error = predicted / measured - 1\n",
        rows.len()
    );
    for groups in &v.summaries {
        s += &groups_text(groups);
    }
    s += &records_text(view, rows);
    s += &unpriced_text(rows);
    s += &implausible_text(rows);
    if let (Some(r), Some(row)) = (&v.report, rows.first()) {
        s += &format!(
            "\nthe simulation of {} ({}):\n{}",
            row.rec.id,
            row.pricing,
            r.render_text()
        );
    }
    s
}

/// The records whose throughput implies more of their GPUs' dense peak than any
/// serving run reaches ([`crate::plausible::PEAK_SHARE`]), with the share; empty
/// without.
fn implausible_text(rows: &[Row]) -> String {
    let limit = crate::plausible::PEAK_SHARE;
    let over: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let share = r.peak_share.filter(|&s| s > limit)?;
            Some(format!("  {} {:.0}%", r.rec.id, 100.0 * share))
        })
        .collect();
    if over.is_empty() {
        return String::new();
    }
    format!(
        "
implausible as described ({}): their throughput, 2 flops a token per active weight (the LM head's for the output only), implies more than {:.0}% of their GPUs' dense peak (the best dense GEMMs reach about 78%): cached or shorter prompts than the record states, or another run's figures; compared all the same
{}
",
        over.len(),
        100.0 * limit,
        over.join("\n")
    )
}

/// One grouping as a table: per group, each metric's median |error|, share within its
/// tolerance, and median signed error.
fn groups_text(groups: &[GroupSummary]) -> String {
    let Some(first) = groups.first() else {
        return String::new();
    };
    let mut s = format!(
        "\nby {:<40} {:>7} {:>6}   {:>26}   {:>26}\n",
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
        s += &format!(
            "   {:<40} {:>7} {:>6}   {}   {}\n",
            scenario::clip(&g.group),
            g.records,
            g.priced,
            cell(Metric::TtftMs),
            cell(Metric::TpotMs)
        );
    }
    s
}

/// The worst records (or all with `view.all`), by their largest |error|.
fn records_text(view: &View, rows: &[Row]) -> String {
    let mut priced: Vec<(&Row, f64)> = rows
        .iter()
        .filter_map(|r| {
            let cs = r.outcome.result.as_ref().ok()?;
            let worst = cs.iter().map(|c| c.error().abs()).fold(0.0, f64::max);
            Some((r, worst))
        })
        .collect();
    if !view.all {
        priced.sort_by(|x, y| y.1.total_cmp(&x.1));
        priced.truncate(view.worst);
    }
    if priced.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\n{}\n",
        if view.all {
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
        s += &format!(
            "  {} [{} {} c{}]: {}\n",
            r.rec.id,
            r.rec.engine.label(),
            r.rec.gpu.hardware,
            r.rec.concurrency().unwrap_or(0),
            figs.join(", ")
        );
    }
    s
}

/// Records twin could not price, by reason.
fn unpriced_text(rows: &[Row]) -> String {
    let mut by_reason: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for r in rows {
        if let Err(e) = &r.outcome.result {
            let first = e.lines().next().unwrap_or_default();
            by_reason.entry(first).or_default().push(&r.outcome.id);
        }
    }
    if by_reason.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\nnot priced ({} records), by reason:\n",
        by_reason.values().map(Vec::len).sum::<usize>()
    );
    for (reason, ids) in by_reason {
        let more = if ids.len() > 3 {
            format!(" and {} more", ids.len() - 3)
        } else {
            String::new()
        };
        s += &format!(
            "  {} x {reason} ({}{more})\n",
            ids.len(),
            ids.iter().take(3).copied().collect::<Vec<_>>().join(", ")
        );
    }
    s
}
