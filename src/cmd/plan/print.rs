//! The plan's answer as text, JSON and a report: the best configuration, the
//! frontier, every rejection with its reason, the rate curve's day, and the vLLM
//! command lines.

use super::OutputArgs;
use anyhow::Result;
use report::text::plan::{curve_of, sizing_text, slo_text, verdict, within_noise};
use report::text::{break_even_text, short_figure, vllm};
use serde_json::{json, Value};
use sim::plan::select::completed_any;
use sim::plan::select::{diagnose, outcome};
use sim::plan::{Header, Outcome, Record, Slo, Status};
use sim::tco::CurveFinance;
use std::fmt::Write;

/// Selects from the records and shows the answer as `out` asks. When nothing is
/// feasible the answer is an error saying why; `--json` then prints the same object
/// with `best` null, the reason in `error`, and every candidate's verdict.
pub fn answer(header: Header, records: Vec<Record>, out: &OutputArgs) -> Result<()> {
    let o = outcome(header, records);
    if o.best.is_none() {
        let why = diagnose(&o);
        if out.json {
            let mut v = to_json(&o);
            v["error"] = json!(why);
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        return Err(sim::plan::PlanError::Infeasible(why).into());
    }
    if let Some(dir) = &out.html.report {
        let written = report::plan(&o, dir, out.html.force)?;
        eprintln!("report: {written}");
    }
    if out.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&o))?);
    } else {
        print!("{}", text(&o));
    }
    Ok(())
}

fn point(r: &Record, feasible: bool, slo: &Slo) -> Value {
    let m = r.metrics.unwrap_or_default();
    // A candidate that completed nothing has no latency or speed (null, not 0).
    let v = |x: f64| completed_any(&m).then_some(x);
    json!({
        "index": r.index, "key": r.key, "label": r.candidate.label(), "config": r.candidate,
        "gpus": m.gpus, "tok_s_per_gpu": m.tok_s_per_gpu,
        "user_tok_s_p10": v(m.user_tok_s_p10), "user_tok_s_p90": v(m.user_tok_s_p90),
        "ttft_p90_ms": v(m.ttft_p90_ms), "tpot_p90_ms": v(m.tpot_p90_ms),
        "usd_per_m_tokens": m.usd_per_m_tokens, "requests_per_s": m.requests_per_s,
        "feasible": feasible, "reasons": r.reasons, "ci95": r.spread,
        "slos_within_noise": within_noise(r, slo).iter().map(|f| f.0).collect::<Vec<_>>(),
    })
}

/// The JSON answer (`best` null when nothing is feasible).
pub fn to_json(o: &Outcome) -> Value {
    let by_status = |s: Status| -> Vec<Value> {
        o.records
            .iter()
            .filter(|r| r.status == s)
            .map(|r| {
                json!({"index": r.index, "label": r.candidate.label(), "config": r.candidate,
                       "estimate": r.estimate, "reasons": r.reasons})
            })
            .collect()
    };
    let simulated: Vec<Value> = o
        .records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.status == Status::Simulated)
        .map(|(i, r)| {
            let mut p = point(r, o.feasible(i), &o.header.slo);
            p["pareto"] = json!(o.frontier.contains(&i));
            p["estimate"] = json!(r.estimate);
            p
        })
        .collect();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "grid": o.header.grid,
        "scenario": o.header.scenario,
        "seed": o.header.seed,
        "seeds": o.header.seeds,
        "sizing": o.header.sizing,
        "slo": o.header.slo,
        "objective": o.header.objective.key(),
        "tco": o.header.tco,
        "price_sheet": o.header.price_sheet,
        "token_prices": o.header.token_prices,
        "evaluated": o.counts,
        "best": o.best.map(|i| best_json(o, &o.records[i])),
        "frontier": o.frontier.iter().map(|&i| point(&o.records[i], o.feasible(i), &o.header.slo)).collect::<Vec<_>>(),
        "simulated": simulated,
        "rejected_by_screen": by_status(Status::RejectedByScreen),
        "ranked_out": by_status(Status::RankedOut),
        "simulation_failed": by_status(Status::SimulationFailed),
        "curve": curve_of(o),
        "space": o.header.space,
    })
}

/// The measured-runs band of the scenario's engine on the best's (decode) GPU, with
/// the simulated means it lies around (over its seeds; its first seed's run in an
/// answer that did not keep them).
fn best_band<'a>(
    o: &'a Outcome,
    best: &Record,
) -> Option<(&'a sim::serving::runs_band::RunsBand, f64, f64)> {
    let band = o.header.runs_bands.get(&best.candidate.decode.hardware)?;
    match best.metrics {
        Some(m) if m.ttft_mean_ms > 0.0 && m.tpot_mean_ms > 0.0 => {
            Some((band, m.ttft_mean_ms, m.tpot_mean_ms))
        }
        _ => {
            let r = best.report.as_ref()?;
            Some((band, r.ttft_ms.mean, r.tpot_ms.mean))
        }
    }
}

/// The best configuration as JSON.
fn best_json(o: &Outcome, b: &Record) -> Value {
    let m = b.metrics.unwrap_or_default();
    let mut v = json!({
            "label": b.candidate.label(),
            "config": b.candidate,
            "gpus": m.gpus,
            "tok_s_per_gpu": m.tok_s_per_gpu,
            "ttft_p90_ms": m.ttft_p90_ms,
            "tpot_p90_ms": m.tpot_p90_ms,
            "user_tok_s_p10": m.user_tok_s_p10,
            "user_tok_s_p90": m.user_tok_s_p90,
            "requests_per_s": m.requests_per_s,
            "usd_per_m_tokens": m.usd_per_m_tokens,
            "ci95": b.spread,
            "throughput_tok_s_per_gpu": b.report.as_ref().map(|r| r.throughput_tok_s_per_gpu),
            "finance": b.finance.as_ref().map(|f| report::text::finance_json(f, o.header.price_sheet != "none")),
            "estimate": b.estimate,
            "vllm": vllm::commands(&b.candidate, o.header.moe),
    });
    // Only where there is one, so answers without an engine read as before.
    if let Some((band, ttft, tpot)) = best_band(o, b) {
        v["runs_band"] = band.json(ttft, tpot);
    }
    v
}

/// The text answer.
pub fn text(o: &Outcome) -> String {
    let mut s = String::new();
    write_heading(&mut s, o);
    let best = &o.records[o.best.expect("a best")];
    write_best(&mut s, best, o.header.price_sheet != "none");
    if let Some((band, ttft, tpot)) = best_band(o, best) {
        let _ = writeln!(s, "  {}", band.text(ttft, tpot));
    }
    write_simulated(&mut s, o);
    write_not_simulated(&mut s, o);
    if let Some(day) = curve_of(o) {
        write_day(
            &mut s,
            o.header.curve_peak,
            &day,
            o.header.price_sheet != "none",
        );
    }
    write_vllm(&mut s, &o.header.model, o.header.moe, best);
    s
}

/// The plan's first lines: what was planned under which SLOs, and what was screened.
fn write_heading(s: &mut String, o: &Outcome) {
    let h = &o.header;
    let c = &o.counts;
    let _ = writeln!(
        s,
        "twin {} plan: {}, {}; {}; objective {}; TCO {}; {}, {} s per run ({} s warm-up)",
        h.version,
        h.scenario,
        sizing_text(h.sizing),
        slo_text(h),
        h.objective.key(),
        h.tco,
        if h.seeds > 1 {
            format!(
                "seeds {}..={} (figures are means)",
                h.seed,
                h.seed.wrapping_add(h.seeds as u64 - 1)
            )
        } else {
            format!("seed {}", h.seed)
        },
        h.duration_s,
        h.warmup_s
    );
    if let Some(why) = sim::plan::Ranking::of(h).tie_break() {
        let _ = writeln!(s, "ranking: {why}");
    }
    let _ = writeln!(
        s,
        "screened {} configurations: {} rejected by the screen, {} passed but ranked below the {} simulated; {} simulated: {} feasible, {} rejected{}",
        c.screened,
        c.rejected_by_screen,
        c.ranked_out,
        h.space.max_simulations,
        c.simulated,
        c.feasible,
        c.rejected_after_simulation,
        if c.simulation_failed > 0 {
            format!(", {} failed to run", c.simulation_failed)
        } else {
            String::new()
        }
    );
    if !c.by_rule.is_empty() {
        let rules: Vec<String> = c.by_rule.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "rejections by rule: {}", rules.join(", "));
    }
}

/// The best configuration: its figures, their spread over the seeds, its money.
fn write_best(s: &mut String, best: &Record, priced: bool) {
    let m = best.metrics.unwrap_or_default();
    let _ = writeln!(s);
    let _ = writeln!(s, "best: {}", best.candidate.label());
    let _ = writeln!(
        s,
        "  {} GPUs; {} tok/s per GPU; TTFT p90 {:.0} ms; TPOT p90 {:.2} ms; per user {:.1} tok/s for 90% of users (p10; p90 {:.1}); {:.2} req/s",
        m.gpus,
        short_figure(m.tok_s_per_gpu),
        m.ttft_p90_ms,
        m.tpot_p90_ms,
        m.user_tok_s_p10,
        m.user_tok_s_p90,
        m.requests_per_s
    );
    if let Some(x) = &best.spread {
        let _ = writeln!(
            s,
            "  ±95% over {} seeds: tok/s per GPU ±{}; TTFT p90 ±{:.0} ms; TPOT p90 ±{:.2} ms; per user (p10) ±{:.1} tok/s; ±{:.2} req/s",
            x.seeds,
            short_figure(x.tok_s_per_gpu),
            x.ttft_p90_ms,
            x.tpot_p90_ms,
            x.user_tok_s_p10,
            x.requests_per_s
        );
    }
    match &best.finance {
        Some(f) if !priced => {
            let _ = writeln!(
                s,
                "  money ({}): cost ${:.2}/GPU-h; ${:.4} per M tokens; revenue, margin and break-even not computed (no price sheet)",
                f.tco,
                f.cost_usd_per_gpu_hour.total,
                f.usd_per_m_tokens.cost_all_tokens
            );
        }
        Some(f) => {
            let _ = writeln!(
            s,
            "  money ({}): revenue ${:.2}/GPU-h, cost ${:.2}/GPU-h, margin ${:.2}/GPU-h; ${:.4} per M tokens; break-even utilisation {}",
            f.tco,
            f.revenue_usd_per_gpu_hour,
            f.cost_usd_per_gpu_hour.total,
            f.margin_usd_per_gpu_hour,
            f.usd_per_m_tokens.cost_all_tokens,
            break_even_text(f.break_even_utilisation)
        );
        }
        None => {}
    }
}

/// Every simulated configuration, its screen estimates on the line below.
fn write_simulated(s: &mut String, o: &Outcome) {
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "simulated (* = Pareto-optimal, tok/s per GPU vs tok/s per user that 90% of users reach (user p10); screen estimates in brackets, the user speed's as its mean):"
    );
    let _ = writeln!(
        s,
        "  {:<44} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9}  verdict",
        "configuration", "GPUs", "tok/s/GPU", "user p10", "TTFT p90", "TPOT p90", "$/M tok"
    );
    for (i, r) in o.records.iter().enumerate() {
        if r.status != Status::Simulated {
            continue;
        }
        let m = r.metrics.unwrap_or_default();
        // Of a candidate that completed nothing, latencies and speeds are absent.
        let fig = |x: f64, decimals: usize| match completed_any(&m) {
            true => format!("{x:.decimals$}"),
            false => "-".to_string(),
        };
        let usd = match m.tok_s_per_gpu > 0.0 {
            true => format!("{:.4}", m.usd_per_m_tokens),
            false => "-".to_string(),
        };
        let _ = writeln!(
            s,
            "  {:<44} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9}  {}{}",
            r.candidate.label(),
            m.gpus,
            short_figure(m.tok_s_per_gpu),
            fig(m.user_tok_s_p10, 1),
            fig(m.ttft_p90_ms, 0),
            fig(m.tpot_p90_ms, 2),
            usd,
            if o.frontier.contains(&i) { "* " } else { "  " },
            verdict(o, i)
        );
        let e = &r.estimate;
        let _ = writeln!(
            s,
            "  {:<44} {:>5} {:>10} {:>9.1} {:>9.0} {:>9.2} {:>9.4}",
            "",
            "",
            format!("[{}]", short_figure(e.tok_s_per_gpu)),
            e.user_tok_s,
            e.ttft_p90_ms,
            e.tpot_ms,
            e.usd_per_m_tokens
        );
    }
}

/// The configurations that failed to run or were rejected by the screen, with why,
/// and those that passed it but ranked below the simulated ones.
fn write_not_simulated(s: &mut String, o: &Outcome) {
    for (title, status) in [
        ("simulation failed", Status::SimulationFailed),
        ("rejected by the screen", Status::RejectedByScreen),
    ] {
        let list: Vec<&Record> = o.records.iter().filter(|r| r.status == status).collect();
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(s);
        let _ = writeln!(s, "{title} ({}):", list.len());
        for r in list {
            let why: Vec<String> = r.reasons.iter().map(|x| x.message.clone()).collect();
            let _ = writeln!(s, "  {:<44} {}", r.candidate.label(), why.join("; "));
        }
    }
    let ranked: Vec<&Record> = o
        .records
        .iter()
        .filter(|r| r.status == Status::RankedOut)
        .collect();
    if !ranked.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "passed the screen, not simulated ({}; estimated tok/s per GPU, TPOT ms):",
            ranked.len()
        );
        for r in ranked {
            let _ = writeln!(
                s,
                "  {:<44} {:>10} {:>9.2}",
                r.candidate.label(),
                short_figure(r.estimate.tok_s_per_gpu),
                r.estimate.tpot_ms
            );
        }
    }
}

/// The best configuration over the day's rate curve, planned for its peak.
fn write_day(s: &mut String, curve_peak: f64, day: &CurveFinance, priced: bool) {
    let _ = writeln!(s);
    let money = match priced {
        true => format!(
            "revenue ${:.2}/GPU-h, cost ${:.2}/GPU-h, margin ${:.2}/GPU-h",
            day.revenue_usd_per_gpu_hour, day.cost_usd_per_gpu_hour, day.margin_usd_per_gpu_hour
        ),
        false => format!(
            "cost ${:.2}/GPU-h (revenue not computed: no price sheet)",
            day.cost_usd_per_gpu_hour
        ),
    };
    let _ = writeln!(
        s,
        "over the day's rate curve (planned for its peak, x{:.2}): mean load {:.0}% of the peak; {money}; ${:.4} per M tokens",
        curve_peak,
        100.0 * day.mean_load_fraction,
        day.cost_usd_per_m_tokens
    );
    let hours: Vec<String> = day
        .hours
        .iter()
        .map(|x| format!("{:02}h {:.0}%", x.hour, 100.0 * x.load_fraction))
        .collect();
    let _ = writeln!(s, "  load by hour: {}", hours.join(", "));
}

/// The best configuration's `vllm serve` command lines.
fn write_vllm(s: &mut String, model: &str, moe: bool, best: &Record) {
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "vLLM starting point (MODEL = the Hugging Face id or path of {}; flags as vLLM documents them, check against your version):",
        model
    );
    for p in vllm::commands(&best.candidate, moe) {
        let _ = writeln!(
            s,
            "  # {}: {} instance{} of {} GPUs",
            p.role,
            p.instances,
            if p.instances == 1 { "" } else { "s" },
            p.gpus_per_instance
        );
        let _ = writeln!(s, "  {}", p.command);
    }
}
