//! `twin plan --report DIR` (and `twin plan merge --report DIR`): the frontier, the
//! screen against the simulation, the best configuration's run, money, the rate
//! curve's day, the rejections and the vLLM command lines.

use crate::figures::{latency_section, money_section, pools_section, vllm_summary};
use crate::plots::{xy, Chart, Mark, Rule, Series};
use crate::text::fixed;
use crate::text::plan::{curve_of, sizing_text, slo_text, verdict};
use crate::text::vllm;
use crate::{Figure, Page, Section, Table};
use anyhow::Result;
use serde_json::{json, Value};
use sim::plan::{Metrics, Outcome, Record, Status};
use sim::tco::{CurveFinance, Finance};

/// `twin plan --report DIR` (and `twin plan merge --report DIR`).
pub fn plan(o: &Outcome, dir: &str, force: bool) -> Result<String> {
    let header = &o.header;
    let best = &o.records[o.best.expect("a best")];
    let best_metrics = best.metrics.unwrap_or_default();
    let mut page = Page::new(
        format!("twin plan: {}", best.candidate.label()),
        format!(
            "{} ({}), {}; {}; objective {}",
            header.scenario,
            header.model,
            sizing_text(header.sizing),
            slo_text(header),
            header.objective.key()
        ),
    );
    let counts = &o.counts;
    page.fact("evaluated", format!("{} screened: {} rejected by the screen, {} ranked out, {} simulated ({} feasible, {} rejected)", counts.screened, counts.rejected_by_screen, counts.ranked_out, counts.simulated, counts.feasible, counts.rejected_after_simulation));
    page.fact("best", best.candidate.label());
    page.fact("best figures", format!("{} GPUs; {:.0} tok/s per GPU; TTFT P90 {:.0} ms; TPOT P90 {:.2} ms; {:.1} tok/s for 90% of users (per-user p10; p90 {:.1}); ${:.5} per M tokens", best_metrics.gpus, best_metrics.tok_s_per_gpu, best_metrics.ttft_p90_ms, best_metrics.tpot_p90_ms, best_metrics.user_tok_s_p10, best_metrics.user_tok_s_p90, best_metrics.usd_per_m_tokens));
    page.fact(
        "grid",
        format!(
            "{} (seed {}, {} s per run, TCO {})",
            header.grid, header.seed, header.duration_s, header.tco
        ),
    );
    let simulated: Vec<usize> = (0..o.records.len())
        .filter(|&i| o.records[i].status == Status::Simulated && o.records[i].metrics.is_some())
        .collect();
    page.sections
        .push(frontier_section(o, &simulated, &best_metrics)?);
    page.sections.push(screen_section(o, &simulated)?);
    if let Some(rep) = &best.report {
        let mut latency = latency_section(rep, "best-")?;
        latency.title = format!("Best configuration: {}", latency.title.to_lowercase());
        page.sections.push(latency);
        let mut pools = pools_section(rep, "best-")?;
        pools.title = format!("Best configuration: {}", pools.title.to_lowercase());
        page.sections.push(pools);
    }
    let finances: Vec<(String, &Finance)> = simulated
        .iter()
        .filter_map(|&i| {
            o.records[i]
                .finance
                .as_ref()
                .map(|x| (o.records[i].candidate.label(), x))
        })
        .collect();
    page.sections
        .push(money_section(&finances, "", header.price_sheet != "none")?);
    if let Some(day) = curve_of(o) {
        page.sections
            .push(day_section(header.curve_peak, &day, best)?);
    }
    page.sections.push(not_simulated_section(o));
    page.sections.push(vllm_section(best, o.header.moe));
    page.summary = json!(simulated
        .iter()
        .filter_map(|&i| record_summary(o, i))
        .collect::<Vec<_>>());
    page.write(dir, force)
}

/// Record `i`'s simulated figures: (tokens/s per user that 90% of users reach,
/// tokens/s per GPU).
fn frontier_point(o: &Outcome, i: usize) -> (f64, f64) {
    let m = o.records[i].metrics.expect("simulated");
    (m.user_tok_s_p10, m.tok_s_per_gpu)
}

/// The simulated configurations on the plane of speed per user and throughput per
/// GPU, with the SLO line; and their table.
fn frontier_section(o: &Outcome, simulated: &[usize], best: &Metrics) -> Result<Section> {
    let mut section = Section::new("frontier", "Throughput per GPU against speed per user", "Every simulated configuration: feasible ones as dots, infeasible ones as crosses; the line joins the Pareto frontier; the dashed line is the SLO on speed per user (a TPOT SLO is shown as its speed, 1000 / TPOT).");
    let feasible: Vec<(f64, f64)> = simulated
        .iter()
        .filter(|&&i| o.feasible(i))
        .map(|&i| frontier_point(o, i))
        .collect();
    let infeasible: Vec<(f64, f64)> = simulated
        .iter()
        .filter(|&&i| !o.feasible(i))
        .map(|&i| frontier_point(o, i))
        .collect();
    let mut frontier: Vec<(f64, f64)> = o.frontier.iter().map(|&i| frontier_point(o, i)).collect();
    frontier.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n_points = feasible.len() + infeasible.len();
    let chart = Chart {
        title: "Pareto frontier of the simulated configurations".into(),
        x_label: "output tokens/s per user, reached by 90% of users (p10)".into(),
        y_label: "tokens/s per GPU (all kinds)".into(),
        series: vec![
            Series {
                name: "Pareto frontier".into(),
                points: frontier,
                mark: Mark::LinePoints,
                color: 2,
            },
            Series {
                name: "feasible".into(),
                points: feasible,
                mark: Mark::Points,
                color: 0,
            },
            Series {
                name: "infeasible".into(),
                points: infeasible,
                mark: Mark::Crosses,
                color: 3,
            },
            Series {
                name: "best".into(),
                points: vec![(best.user_tok_s_p10, best.tok_s_per_gpu)],
                mark: Mark::Points,
                color: 1,
            },
        ],
        rules: slo_rules(o),
        log: false,
    };
    section.figures.push(Figure::new(
        "pareto",
        "Tokens/s per GPU against the tokens/s per user 90% of users reach (p10).",
        xy(&chart)?,
        n_points,
    ));
    section.tables.push(simulated_table(o, simulated));
    Ok(section)
}

/// The SLO on speed per user as a vertical line (a TPOT SLO as its speed).
fn slo_rules(o: &Outcome) -> Vec<Rule> {
    let slo = &o.header.slo;
    let mut rules = Vec::new();
    if let Some(u) = slo.user_tok_s_p10 {
        rules.push(Rule::X(u, format!("SLO: 90% of users >= {u} tok/s (p10)")));
    } else if let Some(t) = slo.tpot_p90_ms {
        rules.push(Rule::X(
            1000.0 / t,
            format!("SLO: TPOT <= {t} ms (~{:.0} tok/s per user)", 1000.0 / t),
        ));
    }
    rules
}

/// Every simulated configuration with the screen's estimates beside its figures.
fn simulated_table(o: &Outcome, simulated: &[usize]) -> Table {
    let mut table = Table::new(
        "simulated",
        "Simulated configurations (screen estimates beside the simulated values)",
        &[
            "configuration",
            "GPUs",
            "tok/s per GPU",
            "estimated",
            "tok/s per user, p10 (90% reach)",
            "TTFT P90 ms",
            "estimated",
            "TPOT P90 ms",
            "estimated",
            "$/M tokens",
            "Pareto",
            "verdict",
        ],
    );
    for &i in simulated {
        let r = &o.records[i];
        let m = r.metrics.expect("simulated");
        let e = &r.estimate;
        table.row(vec![
            r.candidate.label(),
            m.gpus.to_string(),
            fixed(m.tok_s_per_gpu, 0),
            fixed(e.tok_s_per_gpu, 0),
            fixed(m.user_tok_s_p10, 1),
            fixed(m.ttft_p90_ms, 0),
            fixed(e.ttft_p90_ms, 0),
            fixed(m.tpot_p90_ms, 2),
            fixed(e.tpot_ms, 2),
            fixed(m.usd_per_m_tokens, 5),
            if o.frontier.contains(&i) {
                "yes".into()
            } else {
                String::new()
            },
            verdict(o, i),
        ]);
    }
    table
}

/// Predicted (the screen) against measured (the simulation), throughput and TPOT.
fn screen_section(o: &Outcome, simulated: &[usize]) -> Result<Section> {
    let mut section = Section::new("screen", "The screen's estimates against the simulation", "Each simulated configuration's steady-state estimate (the analytic screen) against what the discrete-event simulation measured; the dashed line is equality.");
    let throughput = |r: &Record| {
        (
            r.metrics.expect("simulated").tok_s_per_gpu,
            r.estimate.tok_s_per_gpu,
        )
    };
    let tpot = |r: &Record| {
        (
            r.metrics.expect("simulated").tpot_p90_ms,
            r.estimate.tpot_ms,
        )
    };
    for (id, title, unit, simulated_and_estimated) in [
        (
            "screen-throughput",
            "Tokens/s per GPU",
            "tokens/s per GPU",
            &throughput as &dyn Fn(&Record) -> (f64, f64),
        ),
        ("screen-tpot", "TPOT", "ms", &tpot),
    ] {
        let points: Vec<(f64, f64)> = simulated
            .iter()
            .map(|&i| simulated_and_estimated(&o.records[i]))
            .collect();
        let chart = Chart {
            title: format!("{title}: screen estimate against simulation"),
            x_label: format!("simulated ({unit})"),
            y_label: format!("screen estimate ({unit})"),
            series: vec![Series {
                name: "configuration".into(),
                points: points.clone(),
                mark: Mark::Points,
                color: 0,
            }],
            rules: vec![Rule::Diagonal("estimate = simulation".into())],
            log: false,
        };
        section.figures.push(Figure::new(
            id,
            format!("{title}: the screen's estimate against the simulated value."),
            xy(&chart)?,
            points.len(),
        ));
    }
    Ok(section)
}

/// The best configuration over the day's rate curve: load and pool use by hour.
fn day_section(curve_peak: f64, day: &CurveFinance, best: &Record) -> Result<Section> {
    let mut section = Section::new("curve", "Over the day's rate curve", format!("The deployment is planned for the curve's peak (x{:.2}); below it, tokens and busy time scale with the load. Mean load {:.0}% of the peak: revenue ${:.2}/GPU-h, cost ${:.2}/GPU-h, ${:.5} per M tokens over the day.", curve_peak, 100.0 * day.mean_load_fraction, day.revenue_usd_per_gpu_hour, day.cost_usd_per_gpu_hour, day.cost_usd_per_m_tokens));
    let pool_names: Vec<String> = best
        .report
        .as_ref()
        .map(|r| r.pools.iter().map(|p| p.name.clone()).collect())
        .unwrap_or_default();
    let mut series = vec![Series {
        name: "load (fraction of peak)".into(),
        points: day
            .hours
            .iter()
            .map(|x| (x.hour as f64 + 0.5, x.load_fraction))
            .collect(),
        mark: Mark::LinePoints,
        color: 0,
    }];
    for (pool, name) in pool_names.iter().enumerate() {
        series.push(Series {
            name: format!("{name} busy"),
            points: day
                .hours
                .iter()
                .map(|x| {
                    (
                        x.hour as f64 + 0.5,
                        x.busy_fraction.get(pool).copied().unwrap_or(0.0),
                    )
                })
                .collect(),
            mark: Mark::Line,
            color: pool + 1,
        });
    }
    let chart = Chart {
        title: "Load and pool use by hour".into(),
        x_label: "hour of the day".into(),
        y_label: "fraction".into(),
        series,
        rules: Vec::new(),
        log: false,
    };
    section.figures.push(Figure::new(
        "curve",
        "Load and estimated busy fraction per pool by hour.",
        xy(&chart)?,
        24,
    ));
    let mut table = Table::new(
        "curve",
        "By hour",
        &["hour", "multiplier", "load % of peak", "revenue $/GPU-h"],
    );
    for x in &day.hours {
        table.row(vec![
            x.hour.to_string(),
            fixed(x.multiplier, 2),
            fixed(100.0 * x.load_fraction, 0),
            fixed(x.revenue_usd_per_gpu_hour, 2),
        ]);
    }
    section.tables.push(table);
    Ok(section)
}

/// Why each configuration was rejected by the screen (or failed to run), and the
/// estimates of those that passed it but ranked below the simulated ones.
fn not_simulated_section(o: &Outcome) -> Section {
    let mut section = Section::new("rejected", "Rejected and not simulated", "Why each configuration was rejected by the screen, and the screen's estimates of those that passed but ranked below the simulated ones.");
    let mut rejected = Table::new(
        "rejected",
        "Rejected by the screen",
        &["configuration", "rule", "why"],
    );
    for r in o.records.iter().filter(|r| {
        matches!(
            r.status,
            Status::RejectedByScreen | Status::SimulationFailed
        )
    }) {
        rejected.row(vec![
            r.candidate.label(),
            r.reasons
                .iter()
                .map(|x| x.rule.clone())
                .collect::<Vec<_>>()
                .join(", "),
            r.reasons
                .iter()
                .map(|x| x.message.clone())
                .collect::<Vec<_>>()
                .join("; "),
        ]);
    }
    section.tables.push(rejected);
    let mut ranked_out = Table::new(
        "ranked-out",
        "Passed the screen, not simulated",
        &[
            "configuration",
            "estimated tok/s per GPU",
            "estimated TPOT ms",
            "estimated TTFT P90 ms",
            "prefill use %",
        ],
    );
    for r in o.records.iter().filter(|r| r.status == Status::RankedOut) {
        let e = &r.estimate;
        ranked_out.row(vec![
            r.candidate.label(),
            fixed(e.tok_s_per_gpu, 0),
            fixed(e.tpot_ms, 2),
            fixed(e.ttft_p90_ms, 0),
            fixed(100.0 * e.prefill_utilisation, 0),
        ]);
    }
    section.tables.push(ranked_out);
    section
}

/// The best configuration's `vllm serve` command lines.
fn vllm_section(best: &Record, moe: bool) -> Section {
    let mut section = Section::new("vllm", "A starting point for deployment", "vLLM command lines for the best configuration (MODEL: the model's Hugging Face id or path). They carry the planned sizes; check the flags against the vLLM version you deploy, then tune.");
    for p in vllm::commands(&best.candidate, moe) {
        section.pre.push(format!(
            "# {}: {} instance(s) of {} GPUs\n{}",
            p.role, p.instances, p.gpus_per_instance, p.command
        ));
    }
    section
}

/// Simulated record `i` under vLLM's bench keys, marked best, Pareto and feasible.
fn record_summary(o: &Outcome, i: usize) -> Option<Value> {
    let r = &o.records[i];
    r.report.as_ref().map(|rep| {
        let mut v = vllm_summary(&r.candidate.label(), rep);
        v["best"] = json!(Some(i) == o.best);
        v["pareto"] = json!(o.frontier.contains(&i));
        v["feasible"] = json!(o.feasible(i));
        v
    })
}
