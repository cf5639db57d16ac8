//! `twin sweep --report DIR`: the Pareto frontier of forward steps and their money.

use crate::plots::{stacked_bars, xy, Bars, Chart, Mark, Series};
use crate::text::fixed;
use crate::{Figure, Page, Section, Table};
use anyhow::Result;
use serde_json::{json, Value};

/// One point of `twin sweep`.
pub struct SweepPoint {
    pub label: String,
    /// `DEP8`, `TP8`, `TP8 EP`.
    pub layout: String,
    /// GPUs of the group, and its attention replicas (DEP ranks; 1 for TP).
    pub gpus: u32,
    pub ranks: u32,
    pub batch: u32,
    pub step_ms: f64,
    pub tok_s_gpu: f64,
    pub tok_s_user: f64,
    pub usd_per_m: f64,
    pub pareto: bool,
    /// The step's measured-runs band (p10-p90 ms), where the sweep's engine has one.
    pub step_ms_band: Option<[f64; 2]>,
}

/// `twin sweep --report DIR` (`band`: the measured-runs band's line, where the
/// sweep's engine has one).
pub fn sweep(
    title: &str,
    points: &[SweepPoint],
    usd_per_gpu_hour: f64,
    band: Option<&str>,
    dir: &str,
    force: bool,
) -> Result<String> {
    let mut page = Page::new(
        format!("twin sweep: {title}"),
        format!("forward over layout x batch; GPUs at ${usd_per_gpu_hour:.2}/GPU-hour"),
    );
    page.fact("points", points.len().to_string());
    if let Some(b) = band {
        page.fact("measured-runs band", b);
    }
    let mut section = Section::new("frontier", "Throughput per GPU against speed per user", "Each point is one exact step of a DEP group or TP replica (twin forward); the line joins the Pareto-optimal points.");
    section.figures.push(Figure::new(
        "pareto",
        "Each DEP size's batches from small (right) to large (left).",
        xy(&frontier_chart(points))?,
        points.len(),
    ));
    let bars = Bars {
        title: "GPU cost per million tokens".into(),
        value_label: "USD per million tokens".into(),
        categories: points.iter().map(|p| p.label.clone()).collect(),
        components: vec![(
            "rental".into(),
            points.iter().map(|p| p.usd_per_m).collect(),
        )],
    };
    section.figures.push(Figure::new(
        "usd-per-m-tokens",
        "USD per million tokens at the hardware's price.",
        stacked_bars(&bars)?,
        points.len(),
    ));
    section.tables.push(points_table(points));
    page.sections.push(section);
    page.summary = json!(points.iter().map(point_summary).collect::<Vec<_>>());
    page.write(dir, force)
}

/// The Pareto frontier as a line, and each layout's points in its own colour.
fn frontier_chart(points: &[SweepPoint]) -> Chart {
    let mut by_layout: std::collections::BTreeMap<(u32, String), Vec<(f64, f64)>> =
        Default::default();
    for p in points {
        by_layout
            .entry((p.gpus, p.layout.clone()))
            .or_default()
            .push((p.tok_s_user, p.tok_s_gpu));
    }
    let mut frontier: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.pareto)
        .map(|p| (p.tok_s_user, p.tok_s_gpu))
        .collect();
    frontier.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut series = vec![Series {
        name: "Pareto frontier".into(),
        points: frontier,
        mark: Mark::LinePoints,
        color: 7,
    }];
    for (i, ((_, layout), layout_points)) in by_layout.into_iter().enumerate() {
        series.push(Series {
            name: layout,
            points: layout_points,
            mark: Mark::Points,
            color: i % 7,
        });
    }
    Chart {
        title: "Tokens/s per GPU against tokens/s per user".into(),
        x_label: "tokens/s per user".into(),
        y_label: "tokens/s per GPU".into(),
        series,
        rules: Vec::new(),
        log: false,
    }
}

fn points_table(points: &[SweepPoint]) -> Table {
    let banded = points.iter().any(|p| p.step_ms_band.is_some());
    let mut columns = vec!["layout", "batch per rank", "step ms"];
    if banded {
        columns.push("step ms measured-runs p10-p90");
    }
    columns.extend(["tok/s per GPU", "tok/s per user", "$/M tokens", "Pareto"]);
    let mut table = Table::new("points", "Points", &columns);
    for p in points {
        let mut row = vec![p.layout.clone(), p.batch.to_string(), fixed(p.step_ms, 3)];
        if banded {
            row.push(match p.step_ms_band {
                Some([lo, hi]) => format!("{}-{}", fixed(lo, 3), fixed(hi, 3)),
                None => String::new(),
            });
        }
        row.extend([
            fixed(p.tok_s_gpu, 0),
            fixed(p.tok_s_user, 1),
            fixed(p.usd_per_m, 4),
            if p.pareto {
                "yes".into()
            } else {
                String::new()
            },
        ]);
        table.row(row);
    }
    table
}

/// A point under vLLM's bench key names (`summary.json`).
fn point_summary(p: &SweepPoint) -> Value {
    json!({
        "label": p.label, "backend": "twin-forward", "num_gpus": p.gpus,
        "max_concurrency": p.ranks * p.batch,
        "output_throughput": p.tok_s_gpu * p.gpus as f64,
        "mean_tpot_ms": if p.tok_s_user > 0.0 { 1000.0 / p.tok_s_user } else { 0.0 },
        "tokens_per_s_per_gpu": p.tok_s_gpu, "tokens_per_s_per_user": p.tok_s_user,
        "pareto": p.pareto,
    })
}
