//! `twin validate runs --report DIR`: measured runs against twin's predictions:
//! predicted-vs-measured scatter plots on log axes per metric, the error against
//! concurrency, the summary by group, the worst records and the records not priced.

use crate::plots::{xy, Chart, Mark, Rule, Series};
use crate::text::fixed;
use crate::{Figure, Page, Section, Table};
use anyhow::Result;
use corpus::summary::{Compared, GroupSummary};
use corpus::Metric;
use std::collections::BTreeMap;

/// One record of the report.
pub struct RunRow {
    pub id: String,
    /// The series a record is drawn in (its engine).
    pub series: String,
    pub gpu: String,
    pub model: String,
    pub concurrency: Option<u32>,
    /// Its comparisons, or why it was not priced.
    pub result: Result<Vec<Compared>, String>,
}

/// The report's page: `origin` names the corpus, `summaries` the summary tables.
pub fn runs(
    origin: &str,
    rows: &[RunRow],
    summaries: &[Vec<GroupSummary>],
    dir: &str,
    force: bool,
) -> Result<String> {
    let mut page = Page::new(
        "twin validate runs",
        format!("Measured runs of {origin} simulated as they were measured; error = predicted / measured - 1."),
    );
    let priced = rows.iter().filter(|r| r.result.is_ok()).count();
    page.fact("records", rows.len().to_string());
    page.fact("priced", priced.to_string());
    page.sections.push(summary_section(summaries));
    for metric in [
        Metric::TtftMs,
        Metric::TpotMs,
        Metric::ItlMs,
        Metric::OutputTokS,
    ] {
        if let Some(s) = metric_section(rows, metric)? {
            page.sections.push(s);
        }
    }
    page.sections.push(worst_section(rows));
    page.sections.push(unpriced_section(rows));
    page.summary = serde_json::json!({ "corpus": origin, "records": rows.len(), "priced": priced, "summary": summaries });
    page.write(dir, force)
}

fn summary_section(summaries: &[Vec<GroupSummary>]) -> Section {
    let mut s = Section::new(
        "summary",
        "Summary",
        "Per group: records, records priced, and per metric the median |error|, the share within its tolerance (TTFT 25%, others 15%), the median signed error and, with a profile's bands, the share of measured values inside the p10-p90 band.",
    );
    for groups in summaries {
        let Some(first) = groups.first() else {
            continue;
        };
        let name = first.dim.name();
        let mut t = Table::new(
            &format!("summary-{}", name.replace(' ', "-")),
            format!("By {name}"),
            &[
                "group",
                "records",
                "priced",
                "metric",
                "n",
                "median |error| %",
                "within %",
                "bias %",
                "band %",
            ],
        );
        for g in groups {
            for m in &g.metrics {
                t.row(vec![
                    g.group.clone(),
                    g.records.to_string(),
                    g.priced.to_string(),
                    m.metric.key().to_string(),
                    m.n.to_string(),
                    fixed(100.0 * m.median_abs_error, 1),
                    fixed(100.0 * m.within, 0),
                    fixed(100.0 * m.median_error, 1),
                    m.band_coverage
                        .map(|c| fixed(100.0 * c, 0))
                        .unwrap_or_default(),
                ]);
            }
        }
        s.tables.push(t);
    }
    s
}

/// One record's point: measured, predicted, concurrency.
type Point = (f64, f64, Option<u32>);

/// The points of `metric` by series.
fn points(rows: &[RunRow], metric: Metric) -> BTreeMap<&str, Vec<Point>> {
    let mut by: BTreeMap<&str, Vec<Point>> = BTreeMap::new();
    for r in rows {
        let Ok(cs) = &r.result else { continue };
        // One point a record: its central figure (center, mean or p50, in that order).
        let pick = cs
            .iter()
            .filter(|c| c.metric == metric && c.measured > 0.0 && c.predicted > 0.0)
            .min_by_key(|c| match c.stat {
                corpus::Stat::Center | corpus::Stat::Value => 0,
                corpus::Stat::Mean => 1,
                corpus::Stat::P50 => 2,
                _ => 3,
            });
        if let Some(c) = pick {
            by.entry(r.series.as_str())
                .or_default()
                .push((c.measured, c.predicted, r.concurrency));
        }
    }
    by
}

fn metric_section(rows: &[RunRow], metric: Metric) -> Result<Option<Section>> {
    let by = points(rows, metric);
    let n: usize = by.values().map(Vec::len).sum();
    if n == 0 {
        return Ok(None);
    }
    let key = metric.key();
    let mut s = Section::new(
        &format!("metric-{key}"),
        key,
        format!(
            "{key}: each record's measured central figure against twin's prediction, by engine."
        ),
    );
    let series = |f: &dyn Fn(&Point) -> Option<(f64, f64)>| -> Vec<Series> {
        by.iter()
            .enumerate()
            .map(|(i, (name, pts))| Series {
                name: name.to_string(),
                points: pts.iter().filter_map(f).collect(),
                mark: Mark::Points,
                color: i,
            })
            .collect()
    };
    let scatter = Chart {
        title: format!("{key}: predicted against measured"),
        x_label: format!("measured {key}"),
        y_label: format!("predicted {key}"),
        series: series(&|p| Some((p.0, p.1))),
        rules: vec![Rule::Diagonal("predicted = measured".into())],
        log: true,
    };
    s.figures.push(Figure::new(
        &format!("{key}-scatter"),
        "Predicted against measured, log-log; the line is equality.",
        xy(&scatter)?,
        n,
    ));
    let by_conc = Chart {
        title: format!("{key}: predicted over measured against concurrency"),
        x_label: "client concurrency".into(),
        y_label: "predicted / measured".into(),
        series: series(&|p| p.2.map(|c| (c as f64, p.1 / p.0))),
        rules: vec![Rule::Y(1.0, "exact".into())],
        log: true,
    };
    s.figures.push(Figure::new(
        &format!("{key}-concurrency"),
        "The ratio of predicted to measured against the client's concurrency, log-log; 1 is exact.",
        xy(&by_conc)?,
        n,
    ));
    Ok(Some(s))
}

fn worst_section(rows: &[RunRow]) -> Section {
    let mut s = Section::new(
        "worst",
        "Worst records",
        "The 40 records with the largest |error| of any metric.",
    );
    let mut scored: Vec<(&RunRow, f64)> = rows
        .iter()
        .filter_map(|r| {
            let cs = r.result.as_ref().ok()?;
            Some((r, cs.iter().map(|c| c.error().abs()).fold(0.0, f64::max)))
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut t = Table::new(
        "worst",
        "Worst records",
        &[
            "id",
            "engine",
            "gpu",
            "model",
            "concurrency",
            "metric",
            "measured",
            "predicted",
            "error %",
        ],
    );
    for (r, _) in scored.into_iter().take(40) {
        for c in r.result.as_ref().map(Vec::as_slice).unwrap_or(&[]) {
            t.row(vec![
                r.id.clone(),
                r.series.clone(),
                r.gpu.clone(),
                r.model.clone(),
                r.concurrency.map(|c| c.to_string()).unwrap_or_default(),
                format!("{} {}", c.metric.key(), c.stat.key()),
                format!("{:.3}", c.measured),
                format!("{:.3}", c.predicted),
                fixed(100.0 * c.error(), 1),
            ]);
        }
    }
    s.tables.push(t);
    s
}

fn unpriced_section(rows: &[RunRow]) -> Section {
    let mut s = Section::new(
        "not-priced",
        "Not priced",
        "Every record twin could not simulate as measured, with the reason.",
    );
    let mut t = Table::new(
        "not-priced",
        "Records not priced",
        &["id", "gpu", "model", "reason"],
    );
    for r in rows {
        if let Err(e) = &r.result {
            t.row(vec![
                r.id.clone(),
                r.gpu.clone(),
                r.model.clone(),
                e.lines().next().unwrap_or_default().to_string(),
            ]);
        }
    }
    s.tables.push(t);
    s
}
