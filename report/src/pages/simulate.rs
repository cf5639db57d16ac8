//! `twin simulate --report DIR`: one run's latency, pools and money.

use crate::figures::{latency_section, money_section, pools_section, vllm_summary};
use crate::text::fixed;
use crate::Page;
use anyhow::Result;
use serde_json::json;
use sim::serving::{PriceConfig, Report, TokenPrices};
use sim::tco::{finance, Finance, Tco};
use spec::hardware::Hardware;

/// What the simulate report shows: the simulator's report of the run and what of the
/// resolved scenario it names.
pub struct SimulatedRun<'a> {
    pub report: &'a Report,
    /// Where the scenario came from: its path, or its name and `(embedded)`.
    pub scenario_origin: &'a str,
    pub model_name: &'a str,
    pub hardware: &'a Hardware,
    /// The scenario's price sheet: the rental basis and the token prices that price
    /// the run when no `--tco` finance is given.
    pub price: &'a PriceConfig,
    /// What priced the steps (the cost parameters' source).
    pub cost_model: &'a str,
}

/// `twin simulate --report DIR`.
pub fn simulate(
    run: &SimulatedRun,
    fin: Option<&Finance>,
    dir: &str,
    force: bool,
) -> Result<String> {
    let rep = run.report;
    let mut page = Page::new(
        format!("twin simulate: {}", rep.scenario),
        format!(
            "{} on {}, workload {}, seed {}; {} GPUs; {:.0} s measured after {:.0} s warm-up",
            run.model_name,
            run.hardware.name,
            rep.workload,
            rep.seed,
            rep.gpus,
            rep.measured_s,
            rep.warmup_s
        ),
    );
    let t = &rep.throughput_tok_s_per_gpu;
    page.fact("scenario file", run.scenario_origin);
    page.fact(
        "tokens/s per GPU",
        format!(
            "{:.0} (cached {:.0}, uncached {:.0}, output {:.0})",
            t.total, t.cached_input, t.uncached_input, t.output
        ),
    );
    page.fact(
        "tokens/s per user, 90% of users at least (p10)",
        fixed(rep.per_user_tok_s.p10, 1),
    );
    page.fact(
        "tokens/s per user, fastest 10% at least (p90)",
        fixed(rep.per_user_tok_s.p90, 1),
    );
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
    page.fact("cost model", run.cost_model);
    page.sections.push(latency_section(rep, "")?);
    page.sections.push(pools_section(rep, "")?);
    let rental;
    let fin = match fin {
        Some(x) => x,
        None => {
            rental = rental_finance(run)?;
            &rental
        }
    };
    page.sections.push(money_section(
        &[(rep.scenario.clone(), fin)],
        "",
        run.price.sheet.values_tokens(),
    )?);
    page.summary = json!([vllm_summary(&rep.scenario, rep)]);
    page.write(dir, force)
}

/// The report's own money when no `--tco` is given: rental at the scenario's basis,
/// through the same code.
fn rental_finance(run: &SimulatedRun) -> Result<Finance> {
    let tco = Tco::rental_at(run.price.basis);
    let cost = tco
        .gpu_hour(run.hardware)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let prices = run.price.token_prices().unwrap_or(TokenPrices::ZERO);
    Ok(finance(
        &tco.name,
        cost,
        &prices,
        &run.report.throughput_tok_s_per_gpu,
    ))
}
