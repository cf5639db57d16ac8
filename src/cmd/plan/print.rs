//! The plan's answer as text, JSON and a report: the best configuration, the
//! frontier, every rejection with its reason, the rate curve's day, and the vLLM
//! command lines.

use super::vllm;
use super::OutputArgs;
use anyhow::Result;
use serde_json::{json, Value};
use sim::plan::{select, Header, Outcome, Record, Sizing, Slo, Status};
use sim::serving::report::k;
use sim::tco::{over_curve, CurveFinance};

/// The day of the rate curve for the best candidate, if the workload has a curve.
pub fn curve_of(o: &Outcome) -> Option<CurveFinance> {
    let hourly = o.header.curve_hourly.as_ref()?;
    let best = &o.records[o.best?];
    let (fin, rep) = (best.finance.as_ref()?, best.report.as_ref()?);
    let busy: Vec<f64> = rep.pools.iter().map(|p| p.busy_fraction).collect();
    Some(over_curve(
        hourly,
        o.header.curve_peak,
        fin,
        rep.throughput_tok_s_per_gpu.total,
        &busy,
    ))
}

/// Selects from the records and shows the answer as `out` asks.
pub fn answer(header: Header, records: Vec<Record>, out: &OutputArgs) -> Result<()> {
    let o = select(header, records)?;
    if let Some(dir) = &out.html.report {
        let written = crate::report::plan(&o, dir, out.html.force)?;
        eprintln!("report: {written}");
    }
    if out.json {
        println!("{}", serde_json::to_string_pretty(&to_json(&o))?);
    } else {
        print!("{}", text(&o));
    }
    Ok(())
}

/// The sizing in words: `a budget of 72 GPUs`, `a target of 700 req/s`.
pub fn sizing_text(s: Sizing) -> String {
    match s {
        Sizing::Gpus(n) => format!("a budget of {n} GPUs"),
        Sizing::RequestsPerS(r) => format!("a target of {r} req/s"),
        Sizing::TokensPerS(t) => format!("a target of {t} tok/s"),
    }
}

/// The SLOs as `tpot_p90_ms <= 20, user_tok_s_p90 >= 150`, or `no SLO`.
pub fn slo_text(h: &Header) -> String {
    let v: Vec<String> = h
        .slo
        .constraints()
        .iter()
        .map(|(n, l, larger)| format!("{n} {} {l}", if *larger { ">=" } else { "<=" }))
        .collect();
    if v.is_empty() {
        "no SLO".into()
    } else {
        v.join(", ")
    }
}

/// The SLOs whose limit lies inside the 95% interval of record `r`'s mean (several
/// seeds): its verdict on them is not settled.
fn within_noise(r: &Record, slo: &Slo) -> Vec<(&'static str, f64, f64, f64)> {
    match (&r.spread, &r.metrics) {
        (Some(s), Some(m)) => s.slos_within_noise(slo, m),
        _ => Vec::new(),
    }
}

fn point(r: &Record, feasible: bool, slo: &Slo) -> Value {
    let m = r.metrics.unwrap_or_default();
    json!({
        "index": r.index, "key": r.key, "label": r.candidate.label(), "config": r.candidate,
        "gpus": m.gpus, "tok_s_per_gpu": m.tok_s_per_gpu, "user_tok_s_p90": m.user_tok_s_p90,
        "ttft_p90_ms": m.ttft_p90_ms, "tpot_p90_ms": m.tpot_p90_ms,
        "usd_per_m_tokens": m.usd_per_m_tokens, "requests_per_s": m.requests_per_s,
        "feasible": feasible, "reasons": r.reasons, "ci95": r.spread,
        "slos_within_noise": within_noise(r, slo).iter().map(|f| f.0).collect::<Vec<_>>(),
    })
}

/// The JSON answer.
pub fn to_json(o: &Outcome) -> Value {
    let best_i = o.best.expect("select returns a best");
    let b = &o.records[best_i];
    let m = b.metrics.unwrap_or_default();
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
        "best": {
            "label": b.candidate.label(),
            "config": b.candidate,
            "gpus": m.gpus,
            "tok_s_per_gpu": m.tok_s_per_gpu,
            "ttft_p90_ms": m.ttft_p90_ms,
            "tpot_p90_ms": m.tpot_p90_ms,
            "user_tok_s_p90": m.user_tok_s_p90,
            "requests_per_s": m.requests_per_s,
            "usd_per_m_tokens": m.usd_per_m_tokens,
            "ci95": b.spread,
            "throughput_tok_s_per_gpu": b.report.as_ref().map(|r| r.throughput_tok_s_per_gpu),
            "finance": b.finance,
            "estimate": b.estimate,
            "vllm": vllm::commands(&b.candidate),
        },
        "frontier": o.frontier.iter().map(|&i| point(&o.records[i], o.feasible(i), &o.header.slo)).collect::<Vec<_>>(),
        "simulated": simulated,
        "rejected_by_screen": by_status(Status::RejectedByScreen),
        "ranked_out": by_status(Status::RankedOut),
        "simulation_failed": by_status(Status::SimulationFailed),
        "curve": curve_of(o),
        "space": o.header.space,
    })
}

/// Record `i`'s verdict: `best`, `ok`, or why it is infeasible; then the SLOs its
/// seeds leave unsettled.
pub fn verdict(o: &Outcome, i: usize) -> String {
    let base = if Some(i) == o.best {
        "best".into()
    } else if o.feasible(i) {
        "ok".into()
    } else {
        o.records[i]
            .reasons
            .iter()
            .map(|x| x.message.clone())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let noise: Vec<String> = within_noise(&o.records[i], &o.header.slo)
        .iter()
        .map(|(name, v, ci, limit)| format!("{name} {v:.2} ±{ci:.2} straddles the SLO {limit}"))
        .collect();
    if noise.is_empty() {
        base
    } else {
        format!("{base} (unsettled by the seeds: {})", noise.join(", "))
    }
}

/// The text answer.
pub fn text(o: &Outcome) -> String {
    use std::fmt::Write;
    let h = &o.header;
    let c = &o.counts;
    let mut s = String::new();
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
    let b = &o.records[o.best.expect("a best")];
    let m = b.metrics.unwrap_or_default();
    let _ = writeln!(s);
    let _ = writeln!(s, "best: {}", b.candidate.label());
    let _ = writeln!(
        s,
        "  {} GPUs; {} tok/s per GPU; TTFT p90 {:.0} ms; TPOT p90 {:.2} ms; P90 {:.1} tok/s per user; {:.2} req/s",
        m.gpus,
        k(m.tok_s_per_gpu),
        m.ttft_p90_ms,
        m.tpot_p90_ms,
        m.user_tok_s_p90,
        m.requests_per_s
    );
    if let Some(x) = &b.spread {
        let _ = writeln!(
            s,
            "  ±95% over {} seeds: tok/s per GPU ±{}; TTFT p90 ±{:.0} ms; TPOT p90 ±{:.2} ms; P90 per user ±{:.1} tok/s; ±{:.2} req/s",
            x.seeds,
            k(x.tok_s_per_gpu),
            x.ttft_p90_ms,
            x.tpot_p90_ms,
            x.user_tok_s_p90,
            x.requests_per_s
        );
    }
    if let Some(f) = &b.finance {
        let _ = writeln!(
            s,
            "  money ({}): revenue ${:.2}/GPU-h, cost ${:.2}/GPU-h, margin ${:.2}/GPU-h; ${:.4} per M tokens; break-even utilisation {}",
            f.tco,
            f.revenue_usd_per_gpu_hour,
            f.cost_usd_per_gpu_hour.total,
            f.margin_usd_per_gpu_hour,
            f.usd_per_m_tokens.cost_all_tokens,
            crate::finance::break_even_text(f.break_even_utilisation)
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "simulated (* = Pareto-optimal, tok/s per GPU vs P90 tok/s per user; screen estimates in brackets):"
    );
    let _ = writeln!(
        s,
        "  {:<44} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9}  verdict",
        "configuration", "GPUs", "tok/s/GPU", "user p90", "TTFT p90", "TPOT p90", "$/M tok"
    );
    for (i, r) in o.records.iter().enumerate() {
        if r.status != Status::Simulated {
            continue;
        }
        let m = r.metrics.unwrap_or_default();
        let verdict = verdict(o, i);
        let _ = writeln!(
            s,
            "  {:<44} {:>5} {:>10} {:>9.1} {:>9.0} {:>9.2} {:>9.4}  {}{}",
            r.candidate.label(),
            m.gpus,
            k(m.tok_s_per_gpu),
            m.user_tok_s_p90,
            m.ttft_p90_ms,
            m.tpot_p90_ms,
            m.usd_per_m_tokens,
            if o.frontier.contains(&i) { "* " } else { "  " },
            verdict
        );
        let e = &r.estimate;
        let _ = writeln!(
            s,
            "  {:<44} {:>5} {:>10} {:>9.1} {:>9.0} {:>9.2} {:>9.4}",
            "",
            "",
            format!("[{}]", k(e.tok_s_per_gpu)),
            e.user_tok_s,
            e.ttft_p90_ms,
            e.tpot_ms,
            e.usd_per_m_tokens
        );
    }
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
                k(r.estimate.tok_s_per_gpu),
                r.estimate.tpot_ms
            );
        }
    }
    if let Some(day) = curve_of(o) {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "over the day's rate curve (planned for its peak, x{:.2}): mean load {:.0}% of the peak; revenue ${:.2}/GPU-h, cost ${:.2}/GPU-h, margin ${:.2}/GPU-h; ${:.4} per M tokens",
            h.curve_peak,
            100.0 * day.mean_load_fraction,
            day.revenue_usd_per_gpu_hour,
            day.cost_usd_per_gpu_hour,
            day.margin_usd_per_gpu_hour,
            day.cost_usd_per_m_tokens
        );
        let hours: Vec<String> = day
            .hours
            .iter()
            .map(|x| format!("{:02}h {:.0}%", x.hour, 100.0 * x.load_fraction))
            .collect();
        let _ = writeln!(s, "  load by hour: {}", hours.join(", "));
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "vLLM starting point (MODEL = the Hugging Face id or path of {}; flags as vLLM documents them, check against your version):",
        h.model
    );
    for p in vllm::commands(&b.candidate) {
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
    s
}
