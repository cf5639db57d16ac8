//! Uncertainty bands: the p10-p90 of a figure over parameter sets drawn from the
//! hardware's kernel-fit spreads (`sim::cost::spread`, a hardware file's
//! `[cost.spread]`). `twin forward` prints one under its step line, `twin simulate
//! --band N` runs an ensemble of simulations, and `twin validate published` counts
//! the check rows inside their bands.

use crate::simulation::run;
use anyhow::{bail, Context, Result};
use scenario::run::RunHow;
use scenario::step::{Forward, Prepared};
use serde_json::json;
use sim::cost::band::{Band, DEFAULT_DRAWS, DEFAULT_SEED};
use sim::cost::spread::Class;
use sim::cost::CostParams;
use spec::insitu::Category;

/// Most draws `simulate --band` takes (each is a whole simulation).
pub const MAX_SIM_DRAWS: u32 = 64;

/// The parameter sets a band draws from `params` (none when no spread is known).
pub fn draws(params: &CostParams, n: usize) -> Vec<CostParams> {
    if params.spread.is_unknown() {
        return Vec::new();
    }
    params.spread.draw(params, n, DEFAULT_SEED)
}

/// A forward step's band.
pub struct ForwardBand {
    pub step_ms: Band,
    pub tokens_per_s_per_gpu: Band,
    pub hardware: String,
    pub unknown: Vec<Class>,
    /// In-situ categories whose terms the draws move (`in_situ.CATEGORY` spreads).
    pub in_situ: Vec<Category>,
    /// Measured kernel tables price some kernels: those move by their own fits' spread
    /// on their training rows.
    pub tables: bool,
}

/// The band of a prepared `twin forward` step over the default draws; `None` when its
/// hardware knows no spread.
pub fn forward(prep: &Prepared) -> Result<Option<ForwardBand>> {
    let d = draws(&prep.params, DEFAULT_DRAWS);
    if d.is_empty() {
        return Ok(None);
    }
    let priced: Vec<Forward> = d
        .into_iter()
        .map(|p| prep.price_with(p))
        .collect::<Result<_>>()
        .context("a draw of the band")?;
    let step: Vec<f64> = priced.iter().map(|f| f.result.step_s() * 1e3).collect();
    let tps: Vec<f64> = priced
        .iter()
        .map(|f| f.result.tokens_per_s_per_gpu)
        .collect();
    Ok(Some(ForwardBand {
        step_ms: Band::of(&step),
        tokens_per_s_per_gpu: Band::of(&tps),
        hardware: spread_source(&prep.hardware),
        unknown: unknown_classes(&prep.params),
        in_situ: prep.params.spread.in_situ_drawn(),
        tables: prep.params.tables.is_some(),
    }))
}

/// Whose kernel-fit spreads a band draws from: the hardware's own, or those it carries
/// (`kernels_from`).
fn spread_source(hw: &spec::hardware::Hardware) -> String {
    match &hw.kernels_from {
        Some(from) => format!("{from}, carried to {}", hw.name),
        None => hw.name.clone(),
    }
}

/// The classes a band cannot move: no spread in the hardware file, and (the all-reduce)
/// no measured kernel tables that price it either.
fn unknown_classes(params: &CostParams) -> Vec<Class> {
    let tabled_allreduce = params.tables.as_ref().is_some_and(|t| {
        t.training_spread(&[sim::cost::tables::family::Family::Collective])
            .is_some()
    });
    params
        .spread
        .unknown_classes()
        .into_iter()
        .filter(|c| !(tabled_allreduce && *c == Class::Allreduce))
        .collect()
}

/// What a band's draws leave still and what else they move: the classes with no
/// spread known, and the in-situ categories drawn.
fn unknown_note(unknown: &[Class], in_situ: &[Category]) -> String {
    let list = |keys: Vec<&str>| keys.join(", ");
    let mut out = String::new();
    if !unknown.is_empty() {
        out += &format!(
            "; no spread known for {}",
            list(unknown.iter().map(|c| c.key()).collect())
        );
    }
    if !in_situ.is_empty() {
        out += &format!(
            "; in-situ spreads of {}",
            list(in_situ.iter().map(|c| c.key()).collect())
        );
    }
    out
}

/// The band line `twin forward` prints under its step line.
pub fn forward_line(band: &Option<ForwardBand>, hardware: &str) -> String {
    match band {
        Some(b) => format!(
            "band p10-p90: {:.3}-{:.3} ms (from kernel-fit spreads of {}{}{})",
            b.step_ms.p10,
            b.step_ms.p90,
            b.hardware,
            unknown_note(&b.unknown, &b.in_situ),
            if b.tables {
                "; the kernel tables' prices by their fits' training errors"
            } else {
                ""
            }
        ),
        None => format!(
            "band: no spread is known for {hardware} (no [cost.spread] in its hardware file, or --profile prices with measured values)"
        ),
    }
}

/// `text` with `line` inserted under its first line that starts with `step `.
pub fn under_step_line(text: &str, line: &str) -> String {
    let mut out = String::with_capacity(text.len() + line.len() + 1);
    let mut done = false;
    for l in text.split_inclusive('\n') {
        out.push_str(l);
        if !done && l.starts_with("step ") {
            out.push_str(line);
            out.push('\n');
            done = true;
        }
    }
    if !done {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The band keys of `twin forward --json` (null when no spread is known).
pub fn forward_json(v: &mut serde_json::Value, band: &Option<ForwardBand>) {
    let (step, tps) = match band {
        Some(b) => (
            json!([b.step_ms.p10, b.step_ms.p90]),
            json!([b.tokens_per_s_per_gpu.p10, b.tokens_per_s_per_gpu.p90]),
        ),
        None => (json!(null), json!(null)),
    };
    v["step_ms_band"] = step;
    v["tokens_per_s_per_gpu_band"] = tps;
}

/// The headline figures of one simulation a band reports.
#[derive(Debug, Clone, Copy)]
pub struct SimFigures {
    pub throughput_tok_s_per_gpu: f64,
    pub ttft_ms_p90: f64,
    pub tpot_ms_p90: f64,
}

impl SimFigures {
    pub fn of(r: &sim::serving::Report) -> SimFigures {
        SimFigures {
            throughput_tok_s_per_gpu: r.throughput_tok_s_per_gpu.total,
            ttft_ms_p90: r.ttft_ms.p90,
            tpot_ms_p90: r.tpot_ms.p90,
        }
    }
}

/// A simulation ensemble's bands.
pub struct SimBand {
    pub draws: u32,
    pub throughput_tok_s_per_gpu: Band,
    pub ttft_ms_p90: Band,
    pub tpot_ms_p90: Band,
    pub unknown: Vec<Class>,
    pub in_situ: Vec<Category>,
}

/// `n` simulations of `r` (its own seed), each with one draw of its cost parameters;
/// `None` when its hardware knows no spread.
pub fn simulate(
    r: &scenario::Resolved,
    trace: &[sim::serving::TraceRecord],
    n: u32,
) -> Result<Option<SimBand>> {
    use rayon::prelude::*;
    if !(1..=MAX_SIM_DRAWS).contains(&n) {
        bail!("--band {n}: give 1 to {MAX_SIM_DRAWS} draws (each is a whole simulation)");
    }
    let d = draws(&r.params, n as usize);
    if d.is_empty() {
        return Ok(None);
    }
    let figs: Vec<SimFigures> = d
        .into_par_iter()
        .enumerate()
        .map(|(i, p)| {
            let how = RunHow {
                params: Some(&p),
                ..RunHow::default()
            };
            run(r, trace, how, false)
                .map(|(rep, _)| SimFigures::of(&rep))
                .with_context(|| format!("band draw {i}"))
        })
        .collect::<Result<_>>()?;
    let b = |f: fn(&SimFigures) -> f64| Band::of(&figs.iter().map(f).collect::<Vec<_>>());
    Ok(Some(SimBand {
        draws: n,
        throughput_tok_s_per_gpu: b(|f| f.throughput_tok_s_per_gpu),
        ttft_ms_p90: b(|f| f.ttft_ms_p90),
        tpot_ms_p90: b(|f| f.tpot_ms_p90),
        unknown: r.params.spread.unknown_classes(),
        in_situ: r.params.spread.in_situ_drawn(),
    }))
}

/// `simulate` of a resolved run, said on stderr; also returns its hardware's spread
/// source.
pub fn simulate_said(
    r: &scenario::Resolved,
    trace: &[sim::serving::TraceRecord],
    n: u32,
) -> Result<(Option<SimBand>, String)> {
    eprintln!("band: {n} simulations, one per draw of the cost parameters");
    Ok((simulate(r, trace, n)?, spread_source(&r.hardware)))
}

/// The text of a simulation band (or the line saying none is known).
pub fn simulate_text(band: &Option<SimBand>, hardware: &str) -> String {
    match band {
        None => format!("\nband: no spread is known for {hardware} (no [cost.spread] in its hardware file, or --profile prices with measured values)\n"),
        Some(b) => format!(
            "\nband over {} draws of the cost parameters (kernel-fit spreads of {hardware}{}), p10-p90:\n  throughput {:.0}-{:.0} tok/s per GPU\n  TTFT p90 {:.1}-{:.1} ms\n  TPOT p90 {:.2}-{:.2} ms\n",
            b.draws,
            unknown_note(&b.unknown, &b.in_situ),
            b.throughput_tok_s_per_gpu.p10,
            b.throughput_tok_s_per_gpu.p90,
            b.ttft_ms_p90.p10,
            b.ttft_ms_p90.p90,
            b.tpot_ms_p90.p10,
            b.tpot_ms_p90.p90,
        ),
    }
}

/// The `*_band` keys of a simulation's JSON (null when no spread is known).
pub fn simulate_json(v: &mut serde_json::Value, band: &Option<SimBand>) {
    let pair = |b: &Band| json!([b.p10, b.p90]);
    match band {
        Some(b) => {
            v["throughput_tok_s_per_gpu_band"] = pair(&b.throughput_tok_s_per_gpu);
            v["ttft_ms_p90_band"] = pair(&b.ttft_ms_p90);
            v["tpot_ms_p90_band"] = pair(&b.tpot_ms_p90);
            v["band_draws"] = json!(b.draws);
        }
        None => {
            for k in [
                "throughput_tok_s_per_gpu_band",
                "ttft_ms_p90_band",
                "tpot_ms_p90_band",
            ] {
                v[k] = json!(null);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_band_line_goes_under_the_first_step_line() {
        let t = "decode on x\nstep 1.000 ms\nsteps: 3\nstep again\n";
        assert_eq!(
            under_step_line(t, "band"),
            "decode on x\nstep 1.000 ms\nband\nsteps: 3\nstep again\n"
        );
        assert_eq!(under_step_line("a\n", "band"), "a\nband\n");
    }
}
