//! Words and numbers twin prints in more than one place: a command's text and the
//! report of the same result say them the same way.

pub mod forward;
pub mod in_situ;
pub mod plan;
pub mod vllm;

use sim::tco::Finance;
use std::fmt::Write as _;

/// `x` with `decimals` digits after the point: `fixed(2.345, 1)` is `2.3`.
pub fn fixed(x: f64, decimals: usize) -> String {
    format!("{x:.decimals$}")
}

/// A figure in a few characters: `1.14M`, `951.3K`, `9388.4` (the simulator's text
/// report writes its figures so).
pub use sim::serving::report::k as short_figure;

/// The break-even utilisation in words: `6.8%`, or `never` when even serving every
/// hour at this rate does not pay for the GPUs.
pub fn break_even_text(u: f64) -> String {
    if u <= 1.0 {
        format!("{:.1}%", 100.0 * u)
    } else {
        "never".into()
    }
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
