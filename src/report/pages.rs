//! The report of each command: `simulate`, `plan`, `sweep` and `validate published`.
//! Which plots each has: simulate: TTFT/TPOT/per-user CDFs, time by op per pool, use,
//! queue and batch over time, $/M tokens by component. plan: the Pareto frontier with
//! the SLO line, screen estimates against simulated values, the best configuration's
//! plots as for simulate, $/M tokens of every simulated configuration, the rate
//! curve's day. sweep: the Pareto frontier, $/M tokens per point. validate: predicted
//! against published values per table.

use super::figures::{latency, money, pools, vllm_summary};
use super::plots::{stacked_bars, xy, Bars, Chart, Mark, Rule, Series};
use super::{Figure, Page, Section, Table};
use crate::cmd::plan::print::{sizing_text, slo_text, verdict};
use crate::scenario::Resolved;
use anyhow::Result;
use serde_json::json;
use sim::plan::{Outcome, Status};
use sim::serving::Report;
use sim::tco::{finance, Finance, Tco};

fn f(x: f64, d: usize) -> String {
    format!("{x:.d$}")
}

/// `twin simulate --report DIR`.
pub fn simulate(
    r: &Resolved,
    rep: &Report,
    fin: Option<&Finance>,
    dir: &str,
    force: bool,
) -> Result<String> {
    let mut page = Page::new(
        format!("twin simulate: {}", rep.scenario),
        format!(
            "{} on {}, workload {}, seed {}; {} GPUs; {:.0} s measured after {:.0} s warm-up",
            r.model.name,
            r.hardware.name,
            rep.workload,
            rep.seed,
            rep.gpus,
            rep.measured_s,
            rep.warmup_s
        ),
    );
    let t = &rep.throughput_tok_s_per_gpu;
    page.fact("scenario file", r.scenario_origin.clone());
    page.fact(
        "tokens/s per GPU",
        format!(
            "{:.0} (cached {:.0}, uncached {:.0}, output {:.0})",
            t.total, t.cached_input, t.uncached_input, t.output
        ),
    );
    page.fact("P90 tokens/s per user", f(rep.per_user_tok_s.p90, 1));
    page.fact(
        "TTFT / TPOT P90",
        format!("{:.0} ms / {:.2} ms", rep.ttft_ms.p90, rep.tpot_ms.p90),
    );
    page.fact(
        "requests",
        format!(
            "{} completed ({:.2}/s), {} dropped",
            rep.requests_completed, rep.requests_per_s, rep.requests_dropped
        ),
    );
    page.fact("cost model", r.params.source.clone());
    page.sections.push(latency(rep, "")?);
    page.sections.push(pools(rep, "")?);
    let default_fin;
    let fin = match fin {
        Some(x) => x,
        None => {
            // The report's own money: rental at the scenario's basis, through the same code.
            let tco = Tco::rental_at(r.scenario.price.basis);
            let cost = tco
                .gpu_hour(&r.hardware)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let prices = r
                .scenario
                .price
                .token_prices()
                .unwrap_or(sim::serving::TokenPrices::ZERO);
            default_fin = finance(&tco.name, cost, &prices, t);
            &default_fin
        }
    };
    page.sections
        .push(money(&[(rep.scenario.clone(), fin)], "")?);
    page.summary = json!([vllm_summary(&rep.scenario, rep)]);
    page.write(dir, force)
}

/// `twin plan --report DIR` (and `twin plan merge --report DIR`).
pub fn plan(o: &Outcome, dir: &str, force: bool) -> Result<String> {
    let h = &o.header;
    let best = &o.records[o.best.expect("a best")];
    let bm = best.metrics.unwrap_or_default();
    let mut page = Page::new(
        format!("twin plan: {}", best.candidate.label()),
        format!(
            "{} ({}), {}; {}; objective {}",
            h.scenario,
            h.model,
            sizing_text(h.sizing),
            slo_text(h),
            h.objective.key()
        ),
    );
    let c = &o.counts;
    page.fact("evaluated", format!("{} screened: {} rejected by the screen, {} ranked out, {} simulated ({} feasible, {} rejected)", c.screened, c.rejected_by_screen, c.ranked_out, c.simulated, c.feasible, c.rejected_after_simulation));
    page.fact("best", best.candidate.label());
    page.fact("best figures", format!("{} GPUs; {:.0} tok/s per GPU; TTFT P90 {:.0} ms; TPOT P90 {:.2} ms; P90 {:.1} tok/s per user; ${:.5} per M tokens", bm.gpus, bm.tok_s_per_gpu, bm.ttft_p90_ms, bm.tpot_p90_ms, bm.user_tok_s_p90, bm.usd_per_m_tokens));
    page.fact(
        "grid",
        format!(
            "{} (seed {}, {} s per run, TCO {})",
            h.grid, h.seed, h.duration_s, h.tco
        ),
    );
    // The frontier.
    let mut s = Section::new("frontier", "Throughput per GPU against speed per user", "Every simulated configuration: feasible ones as dots, infeasible ones as crosses; the line joins the Pareto frontier; the dashed line is the SLO on speed per user (a TPOT SLO is shown as its speed, 1000 / TPOT).");
    let sim_idx: Vec<usize> = (0..o.records.len())
        .filter(|&i| o.records[i].status == Status::Simulated && o.records[i].metrics.is_some())
        .collect();
    let pt = |i: usize| {
        let m = o.records[i].metrics.expect("simulated");
        (m.user_tok_s_p90, m.tok_s_per_gpu)
    };
    let feasible: Vec<(f64, f64)> = sim_idx
        .iter()
        .filter(|&&i| o.feasible(i))
        .map(|&i| pt(i))
        .collect();
    let infeasible: Vec<(f64, f64)> = sim_idx
        .iter()
        .filter(|&&i| !o.feasible(i))
        .map(|&i| pt(i))
        .collect();
    let mut frontier: Vec<(f64, f64)> = o.frontier.iter().map(|&i| pt(i)).collect();
    frontier.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rules = Vec::new();
    if let Some(u) = h.slo.user_tok_s_p90 {
        rules.push(Rule::X(u, format!("SLO: P90 >= {u} tok/s per user")));
    } else if let Some(t) = h.slo.tpot_p90_ms {
        rules.push(Rule::X(
            1000.0 / t,
            format!("SLO: TPOT <= {t} ms (~{:.0} tok/s per user)", 1000.0 / t),
        ));
    }
    let n_pts = feasible.len() + infeasible.len();
    let chart = Chart {
        title: "Pareto frontier of the simulated configurations".into(),
        x_label: "P90 output tokens/s per user".into(),
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
                points: vec![(bm.user_tok_s_p90, bm.tok_s_per_gpu)],
                mark: Mark::Points,
                color: 1,
            },
        ],
        rules,
        log: false,
    };
    s.figures.push(Figure::new(
        "pareto",
        "Tokens/s per GPU against P90 tokens/s per user.",
        xy(&chart)?,
        n_pts,
    ));
    let mut t = Table::new(
        "simulated",
        "Simulated configurations (screen estimates beside the simulated values)",
        &[
            "configuration",
            "GPUs",
            "tok/s per GPU",
            "estimated",
            "P90 tok/s per user",
            "TTFT P90 ms",
            "estimated",
            "TPOT P90 ms",
            "estimated",
            "$/M tokens",
            "Pareto",
            "verdict",
        ],
    );
    for &i in &sim_idx {
        let r = &o.records[i];
        let m = r.metrics.expect("simulated");
        let e = &r.estimate;
        t.row(vec![
            r.candidate.label(),
            m.gpus.to_string(),
            f(m.tok_s_per_gpu, 0),
            f(e.tok_s_per_gpu, 0),
            f(m.user_tok_s_p90, 1),
            f(m.ttft_p90_ms, 0),
            f(e.ttft_p90_ms, 0),
            f(m.tpot_p90_ms, 2),
            f(e.tpot_ms, 2),
            f(m.usd_per_m_tokens, 5),
            if o.frontier.contains(&i) {
                "yes".into()
            } else {
                String::new()
            },
            verdict(o, i),
        ]);
    }
    s.tables.push(t);
    page.sections.push(s);
    // Predicted (screen) against measured (simulation).
    let mut s = Section::new("screen", "The screen's estimates against the simulation", "Each simulated configuration's steady-state estimate (the analytic screen) against what the discrete-event simulation measured; the dashed line is equality.");
    for (id, title, unit, get) in [
        (
            "screen-throughput",
            "Tokens/s per GPU",
            "tokens/s per GPU",
            &(|i: usize| {
                (
                    o.records[i].metrics.expect("simulated").tok_s_per_gpu,
                    o.records[i].estimate.tok_s_per_gpu,
                )
            }) as &dyn Fn(usize) -> (f64, f64),
        ),
        ("screen-tpot", "TPOT", "ms", &|i: usize| {
            (
                o.records[i].metrics.expect("simulated").tpot_p90_ms,
                o.records[i].estimate.tpot_ms,
            )
        }),
    ] {
        let pts: Vec<(f64, f64)> = sim_idx.iter().map(|&i| get(i)).collect();
        let chart = Chart {
            title: format!("{title}: screen estimate against simulation"),
            x_label: format!("simulated ({unit})"),
            y_label: format!("screen estimate ({unit})"),
            series: vec![Series {
                name: "configuration".into(),
                points: pts.clone(),
                mark: Mark::Points,
                color: 0,
            }],
            rules: vec![Rule::Diagonal("estimate = simulation".into())],
            log: false,
        };
        s.figures.push(Figure::new(
            id,
            format!("{title}: the screen's estimate against the simulated value."),
            xy(&chart)?,
            pts.len(),
        ));
    }
    page.sections.push(s);
    // The best configuration's run.
    if let Some(rep) = &best.report {
        let mut l = latency(rep, "best-")?;
        l.title = format!("Best configuration: {}", l.title.to_lowercase());
        page.sections.push(l);
        let mut p = pools(rep, "best-")?;
        p.title = format!("Best configuration: {}", p.title.to_lowercase());
        page.sections.push(p);
    }
    let fins: Vec<(String, &Finance)> = sim_idx
        .iter()
        .filter_map(|&i| {
            o.records[i]
                .finance
                .as_ref()
                .map(|x| (o.records[i].candidate.label(), x))
        })
        .collect();
    page.sections.push(money(&fins, "")?);
    if let Some(day) = crate::cmd::plan::print::curve_of(o) {
        let mut s = Section::new("curve", "Over the day's rate curve", format!("The deployment is planned for the curve's peak (x{:.2}); below it, tokens and busy time scale with the load. Mean load {:.0}% of the peak: revenue ${:.2}/GPU-h, cost ${:.2}/GPU-h, ${:.5} per M tokens over the day.", h.curve_peak, 100.0 * day.mean_load_fraction, day.revenue_usd_per_gpu_hour, day.cost_usd_per_gpu_hour, day.cost_usd_per_m_tokens));
        let names: Vec<String> = best
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
        for (k, n) in names.iter().enumerate() {
            series.push(Series {
                name: format!("{n} busy"),
                points: day
                    .hours
                    .iter()
                    .map(|x| {
                        (
                            x.hour as f64 + 0.5,
                            x.busy_fraction.get(k).copied().unwrap_or(0.0),
                        )
                    })
                    .collect(),
                mark: Mark::Line,
                color: k + 1,
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
        s.figures.push(Figure::new(
            "curve",
            "Load and estimated busy fraction per pool by hour.",
            xy(&chart)?,
            24,
        ));
        let mut t = Table::new(
            "curve",
            "By hour",
            &["hour", "multiplier", "load % of peak", "revenue $/GPU-h"],
        );
        for x in &day.hours {
            t.row(vec![
                x.hour.to_string(),
                f(x.multiplier, 2),
                f(100.0 * x.load_fraction, 0),
                f(x.revenue_usd_per_gpu_hour, 2),
            ]);
        }
        s.tables.push(t);
        page.sections.push(s);
    }
    // Rejections.
    let mut s = Section::new("rejected", "Rejected and not simulated", "Why each configuration was rejected by the screen, and the screen's estimates of those that passed but ranked below the simulated ones.");
    let mut t = Table::new(
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
        t.row(vec![
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
    s.tables.push(t);
    let mut t = Table::new(
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
        t.row(vec![
            r.candidate.label(),
            f(e.tok_s_per_gpu, 0),
            f(e.tpot_ms, 2),
            f(e.ttft_p90_ms, 0),
            f(100.0 * e.prefill_utilisation, 0),
        ]);
    }
    s.tables.push(t);
    page.sections.push(s);
    let mut s = Section::new("vllm", "A starting point for deployment", "vLLM command lines for the best configuration (MODEL: the model's Hugging Face id or path). They carry the planned sizes; check the flags against the vLLM version you deploy, then tune.");
    for p in crate::cmd::plan::vllm::commands(&best.candidate) {
        s.pre.push(format!(
            "# {}: {} instance(s) of {} GPUs\n{}",
            p.role, p.instances, p.gpus_per_instance, p.command
        ));
    }
    page.sections.push(s);
    page.summary = json!(sim_idx
        .iter()
        .filter_map(|&i| {
            let r = &o.records[i];
            r.report.as_ref().map(|rep| {
                let mut v = vllm_summary(&r.candidate.label(), rep);
                v["best"] = json!(Some(i) == o.best);
                v["pareto"] = json!(o.frontier.contains(&i));
                v["feasible"] = json!(o.feasible(i));
                v
            })
        })
        .collect::<Vec<_>>());
    page.write(dir, force)
}

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
}

/// `twin sweep --report DIR`.
pub fn sweep(
    title: &str,
    points: &[SweepPoint],
    usd_per_gpu_hour: f64,
    dir: &str,
    force: bool,
) -> Result<String> {
    let mut page = Page::new(
        format!("twin sweep: {title}"),
        format!("forward over layout x batch; GPUs at ${usd_per_gpu_hour:.2}/GPU-hour"),
    );
    page.fact("points", points.len().to_string());
    let mut s = Section::new("frontier", "Throughput per GPU against speed per user", "Each point is one exact step of a DEP group or TP replica (twin forward); the line joins the Pareto-optimal points.");
    let mut by_dep: std::collections::BTreeMap<(u32, String), Vec<(f64, f64)>> = Default::default();
    for p in points {
        by_dep
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
    for (k, ((_, layout), pts)) in by_dep.into_iter().enumerate() {
        series.push(Series {
            name: layout,
            points: pts,
            mark: Mark::Points,
            color: k % 7,
        });
    }
    let chart = Chart {
        title: "Tokens/s per GPU against tokens/s per user".into(),
        x_label: "tokens/s per user".into(),
        y_label: "tokens/s per GPU".into(),
        series,
        rules: Vec::new(),
        log: false,
    };
    s.figures.push(Figure::new(
        "pareto",
        "Each DEP size's batches from small (right) to large (left).",
        xy(&chart)?,
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
    s.figures.push(Figure::new(
        "usd-per-m-tokens",
        "USD per million tokens at the hardware's price.",
        stacked_bars(&bars)?,
        points.len(),
    ));
    let mut t = Table::new(
        "points",
        "Points",
        &[
            "layout",
            "batch per rank",
            "step ms",
            "tok/s per GPU",
            "tok/s per user",
            "$/M tokens",
            "Pareto",
        ],
    );
    for p in points {
        t.row(vec![
            p.layout.clone(),
            p.batch.to_string(),
            f(p.step_ms, 3),
            f(p.tok_s_gpu, 0),
            f(p.tok_s_user, 1),
            f(p.usd_per_m, 4),
            if p.pareto {
                "yes".into()
            } else {
                String::new()
            },
        ]);
    }
    s.tables.push(t);
    page.sections.push(s);
    page.summary = json!(points
        .iter()
        .map(|p| json!({
            "label": p.label, "backend": "twin-forward", "num_gpus": p.gpus,
            "max_concurrency": p.ranks * p.batch,
            "output_throughput": p.tok_s_gpu * p.gpus as f64,
            "mean_tpot_ms": if p.tok_s_user > 0.0 { 1000.0 / p.tok_s_user } else { 0.0 },
            "tokens_per_s_per_gpu": p.tok_s_gpu, "tokens_per_s_per_user": p.tok_s_user,
            "pareto": p.pareto,
        }))
        .collect::<Vec<_>>());
    page.write(dir, force)
}

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
        let mut s = Section::new(&format!("table-{name}"), name, format!("{origin}: each row's published value against twin's prediction (log-log; the line is equality)."));
        let pts = |role: &str| -> Vec<(f64, f64)> {
            rows.iter()
                .filter(|r| r.role == role)
                .filter_map(|r| r.predicted.map(|p| (r.published, p)))
                .filter(|(a, b)| *a > 0.0 && *b > 0.0)
                .collect()
        };
        let (fit, check) = (pts("fit"), pts("check"));
        let n = fit.len() + check.len();
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
        s.figures.push(Figure::new(
            &format!("{name}-predicted"),
            "Predicted against published, log-log.",
            xy(&chart)?,
            n,
        ));
        let mut t = Table::new(
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
            t.row(vec![
                r.id.clone(),
                r.figure.clone(),
                r.unit.clone(),
                r.role.clone(),
                format!("{}", r.published),
                r.predicted
                    .map(|p| format!("{p:.4}"))
                    .unwrap_or_else(|| "not run".into()),
                r.error.map(|e| f(100.0 * e, 1)).unwrap_or_default(),
            ]);
            summary.push(json!({"table": name, "id": r.id, "published": r.published, "predicted": r.predicted, "error": r.error, "role": r.role, "unit": r.unit}));
        }
        s.tables.push(t);
        page.sections.push(s);
    }
    page.summary = json!(summary);
    page.write(dir, force)
}
