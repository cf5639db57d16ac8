//! The money of a run: the TCO it is priced under, its finance (cost by component,
//! revenue, margin, break-even) and that finance in words. `twin cost`, `simulate
//! --tco` and `plan` price through here, and through the same `sim::tco::finance`.

use anyhow::{anyhow, bail, Result};
use report::text::break_even_text;
use scenario::{load_tco, Resolved, Set};
use sim::serving::{Report, Throughput, TokenPrices};
use sim::tco::{blended, finance, Finance, GpuHourCost, Tco};
use spec::hardware::Hardware;
use std::fmt::Write;

/// The TCO: a preset or file with `--set tco.*`, or rental at the scenario's basis.
pub fn resolve_tco(
    name: Option<&str>,
    sets: &[Set],
    basis: spec::hardware::PriceBasis,
) -> Result<sim::tco::Tco> {
    match name {
        Some(n) => load_tco(n, sets),
        None if sets.is_empty() => Ok(sim::tco::Tco::rental_at(basis)),
        None => bail!("--set tco.*: name a TCO preset with --tco (e.g. owned-nvl72)"),
    }
}

/// The finance of a run under `tco`.
pub fn finance_of(
    tco: &Tco,
    pools: &[(u64, Hardware)],
    prices: &TokenPrices,
    t: &Throughput,
) -> Result<Finance> {
    let costs: Vec<(u64, GpuHourCost)> = pools
        .iter()
        .map(|(n, hw)| tco.gpu_hour(hw).map(|c| (*n, c)))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("{e}"))?;
    Ok(finance(&tco.name, blended(&costs), prices, t))
}

/// `twin simulate --tco NAME`: the run's finance (with the `tco.*` overrides
/// `tco_sets`), or None without `--tco`.
pub fn simulate_finance(
    tco: Option<&str>,
    tco_sets: &[Set],
    r: &Resolved,
    report: &Report,
) -> Result<Option<Finance>> {
    let Some(name) = tco else {
        return Ok(None);
    };
    let tco = resolve_tco(Some(name), tco_sets, r.scenario().price.basis)?;
    let prices = r
        .scenario()
        .price
        .token_prices()
        .unwrap_or(TokenPrices::ZERO);
    let pools = vec![(r.scenario().gpus(), r.hardware.clone())];
    finance_of(&tco, &pools, &prices, &report.throughput_tok_s_per_gpu).map(Some)
}

/// The finance as the text report's section; `priced`: the tokens have prices (a
/// sheet), else revenue, margin and break-even are not computed.
pub fn finance_text(f: &Finance, priced: bool) -> String {
    let mut s = String::new();
    let c = &f.cost_usd_per_gpu_hour;
    let parts: Vec<String> = c
        .components()
        .iter()
        .filter(|x| x.1 > 0.0)
        .map(|(k, v)| format!("{k} ${v:.3}"))
        .collect();
    let _ = writeln!(
        s,
        "TCO ({}): ${:.3}/GPU-h = {}",
        f.tco,
        c.total,
        parts.join(" + ")
    );
    if !priced {
        let _ = writeln!(
            s,
            "revenue, margin and break-even not computed (no price sheet); per M tokens: cost ${:.5} (all), ${:.4} (output)",
            f.usd_per_m_tokens.cost_all_tokens, f.usd_per_m_tokens.cost_output_tokens
        );
        return s;
    }
    let r = &f.revenue_by_kind_usd_per_gpu_hour;
    let _ = writeln!(
        s,
        "revenue ${:.2}/GPU-h (cached ${:.2}, uncached ${:.2}, output ${:.2}); margin ${:.2}/GPU-h ({:.1}%)",
        f.revenue_usd_per_gpu_hour,
        r.cached_input,
        r.uncached_input,
        r.output,
        f.margin_usd_per_gpu_hour,
        100.0 * f.margin_fraction
    );
    let _ = writeln!(
        s,
        "per M tokens: cost ${:.5} (all), ${:.4} (output); price ${:.5}; break-even utilisation {}",
        f.usd_per_m_tokens.cost_all_tokens,
        f.usd_per_m_tokens.cost_output_tokens,
        f.usd_per_m_tokens.price_all_tokens,
        break_even_text(f.break_even_utilisation)
    );
    s
}

/// A finance as JSON; without a price sheet (`priced` false) what revenue decides
/// (revenue, margin, break-even, the tokens' mean price) is null, not 0.
pub fn finance_json(f: &Finance, priced: bool) -> serde_json::Value {
    let mut v = serde_json::to_value(f).unwrap_or(serde_json::Value::Null);
    if !priced {
        if let Some(o) = v.as_object_mut() {
            for k in [
                "revenue_usd_per_gpu_hour",
                "revenue_by_kind_usd_per_gpu_hour",
                "margin_usd_per_gpu_hour",
                "margin_fraction",
                "break_even_utilisation",
            ] {
                o.insert(k.into(), serde_json::Value::Null);
            }
            if let Some(u) = o
                .get_mut("usd_per_m_tokens")
                .and_then(|u| u.as_object_mut())
            {
                u.insert("price_all_tokens".into(), serde_json::Value::Null);
            }
        }
    }
    v
}
