//! A plan's outcome in words, as its text answer and its report say it: the sizing,
//! the SLOs, each record's verdict; and the best candidate's day over the rate curve
//! both show.

use sim::plan::{Header, Outcome, Record, Sizing, Slo};
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

/// The sizing in words: `a budget of 72 GPUs`, `a target of 700 req/s`.
pub fn sizing_text(s: Sizing) -> String {
    match s {
        Sizing::Gpus(n) => format!("a budget of {n} GPUs"),
        Sizing::RequestsPerS(r) => format!("a target of {r} req/s"),
        Sizing::TokensPerS(t) => format!("a target of {t} tok/s"),
    }
}

/// The SLOs as `tpot_p90_ms <= 20, user_tok_s_p10 >= 150`, or `no SLO`.
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
pub fn within_noise(r: &Record, slo: &Slo) -> Vec<(&'static str, f64, f64, f64)> {
    match (&r.spread, &r.metrics) {
        (Some(s), Some(m)) => s.slos_within_noise(slo, m),
        _ => Vec::new(),
    }
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
