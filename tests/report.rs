//! `--report DIR` end to end: the page and every plot parse as XML, each plot has
//! data (marks in a series colour: axes, grid and reference lines are grey or black),
//! each table has its CSV, `summary.json` carries vLLM's bench keys, and a report
//! never overwrites a folder it was not asked to.

mod common;

use common::twin;
use serde_json::Value;
use std::path::Path;
use std::process::Output;

fn ok(o: Output) -> Output {
    assert!(
        o.status.success(),
        "twin failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A colour that is not a grey: some channel differs from the others.
fn is_series_colour(c: &str) -> bool {
    let c = c.trim_start_matches('#');
    if c.len() != 6 {
        return false;
    }
    let ch = |i: usize| u8::from_str_radix(&c[i..i + 2], 16).unwrap_or(0);
    !(ch(0) == ch(2) && ch(2) == ch(4))
}

/// Data marks in an SVG: shapes filled or stroked in a series colour; a polyline
/// counts when it has two points or more.
fn data_marks(svg: roxmltree::Node) -> usize {
    svg.descendants()
        .filter(|n| n.is_element())
        .filter(|n| {
            let coloured = ["fill", "stroke"]
                .iter()
                .any(|a| n.attribute(*a).is_some_and(is_series_colour));
            let shape = matches!(
                n.tag_name().name(),
                "circle" | "rect" | "polyline" | "path" | "line" | "polygon"
            );
            let points_ok = n.tag_name().name() != "polyline"
                || n.attribute("points")
                    .is_some_and(|p| p.split_whitespace().count() >= 2);
            coloured && shape && points_ok
        })
        .count()
}

/// Checks a report folder; returns the plot ids.
fn check_report(dir: &Path, min_plots: usize) -> Vec<String> {
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    // The page is HTML5 written as well-formed XML (its doctype is the only DTD).
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&html, opts)
        .unwrap_or_else(|e| panic!("index.html: {e}"));
    let figures: Vec<roxmltree::Node> = doc
        .descendants()
        .filter(|n| n.has_tag_name("figure"))
        .collect();
    assert!(figures.len() >= min_plots, "{} plots", figures.len());
    let mut ids = Vec::new();
    for f in &figures {
        let id = f.attribute("data-plot").unwrap().to_string();
        let svg = f
            .descendants()
            .find(|n| n.tag_name().name() == "svg")
            .unwrap_or_else(|| panic!("{id}: no inline svg"));
        assert!(
            data_marks(svg) > 0,
            "plot {id} has no data marks:\n{}",
            &html[svg.range()]
        );
        let points: usize = f.attribute("data-points").unwrap().parse().unwrap();
        assert!(points > 0, "plot {id}: no data points");
        // Axes are labelled: the plot has text beyond its title.
        let texts = svg.descendants().filter(|n| n.has_tag_name("text")).count();
        assert!(texts >= 4, "plot {id}: {texts} texts");
        // Its file too, parsed on its own.
        let file = std::fs::read_to_string(dir.join(format!("plots/{id}.svg"))).unwrap();
        let d = roxmltree::Document::parse(&file).unwrap();
        assert!(data_marks(d.root_element()) > 0, "plots/{id}.svg");
        ids.push(id);
    }
    for t in doc.descendants().filter(|n| n.has_tag_name("table")) {
        let id = t.attribute("id").unwrap();
        let csv = std::fs::read_to_string(dir.join(format!("tables/{id}.csv")))
            .unwrap_or_else(|e| panic!("tables/{id}.csv: {e}"));
        let rows = t.descendants().filter(|n| n.has_tag_name("tr")).count();
        assert_eq!(
            csv.lines().count(),
            rows,
            "tables/{id}.csv has the table's rows"
        );
    }
    ids
}

/// Every id of `wanted` is among `ids`.
fn has_all(what: &str, ids: &[String], wanted: &[&str]) {
    for id in wanted {
        assert!(
            ids.iter().any(|i| i == id),
            "{what} report lacks {id}: {ids:?}"
        );
    }
}

fn summary(dir: &Path) -> Vec<Value> {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    v.as_array().unwrap().clone()
}

/// `twin simulate --duration DURATION --set WARMUP --report DIR EXTRA...`.
fn simulate_report(dir: &Path, duration: &str, warmup: &str, extra: &[&str]) -> Output {
    let mut args = vec!["simulate", "--duration", duration, "--set", warmup];
    args.extend(extra);
    args.extend(["--report", dir.to_str().unwrap()]);
    twin(&args)
}

#[test]
fn simulate_and_plan_reports_have_data_in_every_plot() {
    let dir = tempfile::tempdir().unwrap();
    let sim = dir.path().join("sim");
    ok(simulate_report(
        &sim,
        "20",
        "warmup_s=5",
        &["--tco", "owned-nvl72"],
    ));
    let ids = check_report(&sim, 8);
    has_all(
        "simulate",
        &ids,
        &[
            "ttft-cdf",
            "tpot-cdf",
            "time-by-op",
            "busy",
            "queue",
            "usd-per-m-tokens",
        ],
    );
    let s = summary(&sim);
    for k in [
        "completed",
        "duration",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
        "median_tpot_ms",
        "p99_itl_ms",
        "mean_e2el_ms",
    ] {
        assert!(s[0][k].as_f64().is_some(), "summary.json lacks {k}");
    }
    // A second report into the same folder is refused; with --force only the
    // report's own files are replaced.
    let keep = sim.join("notes.txt");
    std::fs::write(&keep, "mine").unwrap();
    let o = simulate_report(&sim, "8", "warmup_s=2", &[]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("the folder is not empty"));
    ok(simulate_report(&sim, "8", "warmup_s=2", &["--force"]));
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "mine");

    let plan = dir.path().join("plan");
    let args = common::small_plan(&[
        "--slo",
        "tpot_p90_ms=20",
        "--report",
        plan.to_str().unwrap(),
    ]);
    ok(twin(&args));
    let ids = check_report(&plan, 10);
    has_all(
        "plan",
        &ids,
        &[
            "pareto",
            "screen-throughput",
            "best-ttft-cdf",
            "best-time-by-op",
            "best-busy",
            "usd-per-m-tokens",
        ],
    );
    let s = summary(&plan);
    assert_eq!(s.len(), 3);
    assert_eq!(s.iter().filter(|r| r["best"] == true).count(), 1);
    let html = std::fs::read_to_string(plan.join("index.html")).unwrap();
    assert!(html.contains("vllm serve") && html.contains("SLO: TPOT"));
}

#[test]
fn sweep_and_validate_reports_have_data_in_every_plot() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = dir.path().join("sweep");
    ok(twin(&[
        "sweep",
        "--deps",
        "8,32",
        "--batches",
        "16,128",
        "--context",
        "131072",
        "--report",
        sweep.to_str().unwrap(),
    ]));
    check_report(&sweep, 2);
    assert_eq!(summary(&sweep).len(), 4);
    let table = std::fs::read_to_string(sweep.join("tables/points.csv")).unwrap();
    assert!(!table.contains("measured-runs"), "{table}");
    // With an engine the measured runs have a band for, each point carries it.
    let banded = dir.path().join("banded");
    ok(twin(&[
        "sweep",
        "--engine",
        "vllm",
        "--hardware",
        "h100",
        "--model",
        "llama-3.1-70b",
        "--tps",
        "8",
        "--batches",
        "16",
        "--report",
        banded.to_str().unwrap(),
    ]));
    let table = std::fs::read_to_string(banded.join("tables/points.csv")).unwrap();
    assert!(
        table
            .lines()
            .next()
            .unwrap()
            .contains("step ms measured-runs p10-p90"),
        "{table}"
    );
    let html = std::fs::read_to_string(banded.join("index.html")).unwrap();
    assert!(html.contains("measured-runs band"), "{html}");
    let val = dir.path().join("validate");
    ok(twin(&[
        "validate",
        "published",
        "vllm-gb300-deepseek-v4.1-flash",
        "--report",
        val.to_str().unwrap(),
    ]));
    let ids = check_report(&val, 1);
    assert_eq!(ids, ["vllm-gb300-deepseek-v4.1-flash-predicted"]);
}
