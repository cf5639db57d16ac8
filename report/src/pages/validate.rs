//! `twin validate published --report DIR`: predicted against published, per table.

use crate::plots::{xy, Chart, Mark, Rule, Series};
use crate::text::fixed;
use crate::{Figure, Page, Section, Table};
use anyhow::Result;
use serde_json::json;

/// One row of `twin validate published`.
pub struct ValidationRow {
    pub id: String,
    pub figure: String,
    pub unit: String,
    pub role: String,
    pub published: f64,
    pub predicted: Option<f64>,
    pub error: Option<f64>,
}

/// `twin validate published --report DIR`: one section per table.
pub fn validate(
    tables: &[(String, String, Vec<ValidationRow>)],
    dir: &str,
    force: bool,
) -> Result<String> {
    let mut page = Page::new(
        "twin validate published",
        "Predictions against published figures: fit rows set parameters, check rows never do.",
    );
    let mut summary = Vec::new();
    for (name, origin, rows) in tables {
        let mut section = Section::new(&format!("table-{name}"), name, format!("{origin}: each row's published value against twin's prediction (log-log; the line is equality)."));
        section.figures.push(predicted_figure(name, rows)?);
        section.tables.push(rows_table(name, rows, &mut summary));
        page.sections.push(section);
    }
    page.summary = json!(summary);
    page.write(dir, force)
}

/// A table's figure: each row's prediction against its published value, log-log, fit
/// and check rows apart.
fn predicted_figure(name: &str, rows: &[ValidationRow]) -> Result<Figure> {
    let pts = |role: &str| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| r.role == role)
            .filter_map(|r| r.predicted.map(|p| (r.published, p)))
            .filter(|(a, b)| *a > 0.0 && *b > 0.0)
            .collect()
    };
    let (fit, check) = (pts("fit"), pts("check"));
    let n_points = fit.len() + check.len();
    let chart = Chart {
        title: format!("{name}: predicted against published"),
        x_label: "published (each row's unit)".into(),
        y_label: "predicted (same unit)".into(),
        series: vec![
            Series {
                name: "check rows".into(),
                points: check,
                mark: Mark::Points,
                color: 0,
            },
            Series {
                name: "fit rows".into(),
                points: fit,
                mark: Mark::Crosses,
                color: 1,
            },
        ],
        rules: vec![Rule::Diagonal("predicted = published".into())],
        log: true,
    };
    Ok(Figure::new(
        &format!("{name}-predicted"),
        "Predicted against published, log-log.",
        xy(&chart)?,
        n_points,
    ))
}

/// A table's rows as a report table; each row is also added to `summary`.
fn rows_table(name: &str, rows: &[ValidationRow], summary: &mut Vec<serde_json::Value>) -> Table {
    let mut table = Table::new(
        name,
        "Rows",
        &[
            "id",
            "figure",
            "unit",
            "role",
            "published",
            "predicted",
            "error %",
        ],
    );
    for r in rows {
        table.row(vec![
            r.id.clone(),
            r.figure.clone(),
            r.unit.clone(),
            r.role.clone(),
            format!("{}", r.published),
            r.predicted
                .map(|p| format!("{p:.4}"))
                .unwrap_or_else(|| "not run".into()),
            r.error.map(|e| fixed(100.0 * e, 1)).unwrap_or_default(),
        ]);
        summary.push(json!({"table": name, "id": r.id, "published": r.published, "predicted": r.predicted, "error": r.error, "role": r.role, "unit": r.unit}));
    }
    table
}
