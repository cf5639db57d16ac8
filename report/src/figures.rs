//! Figures and tables of one simulation run, and its summary under vLLM's bench keys.

use super::plots::{stacked_bars, xy, Bars, Chart, Mark, Rule, Series};
use super::{Figure, Section, Table};
use crate::text::{break_even_text, fixed};
use anyhow::Result;
use serde_json::{json, Value};
use sim::serving::{PoolReport, SeriesPoint};
use sim::serving::{Report, Summary};
use sim::tco::Finance;

/// A run under the key names of vLLM's `bench serve --save-result` JSON
/// (`completed`, `duration`, `request_throughput`, `output_throughput`,
/// `total_token_throughput`, `total_input_tokens`, `total_output_tokens`,
/// `{mean,median,p90,p99}_{ttft,tpot,itl,e2el}_ms`), plus twin's per-GPU figures.
pub fn vllm_summary(label: &str, r: &Report) -> Value {
    let gpus = r.gpus.max(1) as f64;
    let t = &r.throughput_tok_s_per_gpu;
    let mut v = json!({
        "label": label,
        "backend": "twin-simulate",
        "num_gpus": r.gpus,
        "seed": r.seed,
        "duration": r.measured_s,
        "completed": r.requests_completed,
        "request_throughput": r.requests_per_s,
        "output_throughput": t.output * gpus,
        "total_token_throughput": t.total * gpus,
        "total_input_tokens": ((t.cached_input + t.uncached_input) * gpus * r.measured_s).round(),
        "total_output_tokens": (t.output * gpus * r.measured_s).round(),
        "tokens_per_s_per_gpu": t.total,
        "output_tokens_per_s_per_gpu": t.output,
        "median_tokens_per_s_per_user": r.per_user_tok_s.p50,
        "p90_tokens_per_s_per_user": r.per_user_tok_s.p90,
    });
    for (key, s) in [
        ("ttft", &r.ttft_ms),
        ("tpot", &r.tpot_ms),
        ("itl", &r.itl_ms),
        ("e2el", &r.e2e_ms),
    ] {
        let put = |v: &mut Value, k: String, x: f64| v[k] = json!(x);
        let Summary {
            mean,
            p50,
            p90,
            p99,
            ..
        } = *s;
        put(&mut v, format!("mean_{key}_ms"), mean);
        put(&mut v, format!("median_{key}_ms"), p50);
        put(&mut v, format!("p90_{key}_ms"), p90);
        put(&mut v, format!("p99_{key}_ms"), p99);
    }
    v
}

/// TTFT and TPOT CDFs (and per-user speed).
pub fn latency_section(r: &Report, prefix: &str) -> Result<Section> {
    let mut s = Section::new(
        &format!("{prefix}latency"),
        "Latency distributions",
        "Cumulative distributions over the measured window (requests that arrived after the warm-up and finished in it).",
    );
    for (id, title, xl, d) in [
        (
            "ttft-cdf",
            "Time to first token",
            "TTFT (ms)",
            &r.distributions.ttft_ms,
        ),
        (
            "tpot-cdf",
            "Time per output token",
            "TPOT (ms)",
            &r.distributions.tpot_ms,
        ),
        (
            "user-cdf",
            "Output speed per user",
            "tokens/s per user",
            &r.distributions.per_user_tok_s,
        ),
    ] {
        let pts: Vec<(f64, f64)> = d.iter().map(|&(q, v)| (v, q)).collect();
        let chart = Chart {
            title: title.into(),
            x_label: xl.into(),
            y_label: "fraction of requests".into(),
            series: vec![Series {
                name: "CDF".into(),
                points: pts.clone(),
                mark: Mark::Line,
                color: 0,
            }],
            rules: vec![Rule::Y(0.9, "P90".into())],
            log: false,
        };
        s.figures.push(Figure::new(
            &format!("{prefix}{id}"),
            format!("{title}: cumulative fraction of requests."),
            xy(&chart)?,
            pts.len(),
        ));
    }
    let mut t = Table::new(
        &format!("{prefix}latency"),
        "Latency percentiles",
        &["metric", "mean", "p50", "p90", "p99", "max"],
    );
    for (name, x) in [
        ("TTFT (ms)", &r.ttft_ms),
        ("TPOT (ms)", &r.tpot_ms),
        ("ITL (ms)", &r.itl_ms),
        ("end-to-end (ms)", &r.e2e_ms),
        ("per-user (tok/s)", &r.per_user_tok_s),
    ] {
        t.row(vec![
            name.into(),
            fixed(x.mean, 2),
            fixed(x.p50, 2),
            fixed(x.p90, 2),
            fixed(x.p99, 2),
            fixed(x.max, 2),
        ]);
    }
    s.tables.push(t);
    Ok(s)
}

/// Time by operation per pool, and use and queues over time.
pub fn pools_section(r: &Report, prefix: &str) -> Result<Section> {
    let mut section = Section::new(
        &format!("{prefix}pools"),
        "Where the time goes, and how busy each pool is",
        "Shares of each pool's step time by operation; busy fraction (steps started in each sample interval) and waiting requests over simulated time.",
    );
    let shares = op_shares(&r.pools);
    let n_bars = shares
        .iter()
        .map(|c| c.1.iter().filter(|v| **v > 0.0).count())
        .sum();
    let bars = Bars {
        title: "Time by operation per pool".into(),
        value_label: "share of step time (%)".into(),
        categories: r
            .pools
            .iter()
            .map(|p| format!("{} ({} x {})", p.name, p.instances, pool_layout(p)))
            .collect(),
        components: shares.clone(),
    };
    section.figures.push(Figure::new(
        &format!("{prefix}time-by-op"),
        "Share of each pool's step time by operation.",
        stacked_bars(&bars)?,
        n_bars,
    ));
    for (id, title, y_label, get) in [
        (
            "busy",
            "Pool utilisation over time",
            "busy fraction",
            &(|x: &SeriesPoint| x.busy_fraction) as &dyn Fn(&SeriesPoint) -> f64,
        ),
        (
            "queue",
            "Waiting requests over time",
            "requests waiting",
            &|x: &SeriesPoint| x.queue_requests,
        ),
        (
            "batch",
            "Requests per rank over time",
            "requests per rank",
            &|x: &SeriesPoint| x.batch_per_rank,
        ),
    ] {
        let series = pool_series(&r.pools, get);
        let n_points = series.iter().map(|s| s.points.len()).sum();
        let chart = Chart {
            title: title.into(),
            x_label: "simulated time (s)".into(),
            y_label: y_label.into(),
            series,
            rules: Vec::new(),
            log: false,
        };
        section.figures.push(Figure::new(
            &format!("{prefix}{id}"),
            format!("{title}, per pool."),
            xy(&chart)?,
            n_points,
        ));
    }
    section.tables.push(pools_table(&r.pools, prefix));
    section
        .tables
        .push(op_shares_table(&r.pools, &shares, prefix));
    Ok(section)
}

/// Each operation that takes time in some pool, with its share of each pool's step
/// time in percent.
fn op_shares(pools: &[PoolReport]) -> Vec<(String, Vec<f64>)> {
    let share = |p: &PoolReport, op: &str| p.time_share_by_op.get(op).copied().unwrap_or(0.0);
    sim::cost::Op::ALL
        .iter()
        .map(|o| o.key().to_string())
        .filter(|op| pools.iter().any(|p| share(p, op) > 0.0))
        .map(|op| {
            let per_pool = pools.iter().map(|p| 100.0 * share(p, &op)).collect();
            (op, per_pool)
        })
        .collect()
}

/// One line per pool of `get` over simulated time.
fn pool_series(pools: &[PoolReport], get: &dyn Fn(&SeriesPoint) -> f64) -> Vec<Series> {
    pools
        .iter()
        .enumerate()
        .map(|(i, p)| Series {
            name: p.name.clone(),
            points: p.series.iter().map(|x| (x.t_s, get(x))).collect(),
            mark: Mark::Line,
            color: i,
        })
        .collect()
}

fn pools_table(pools: &[PoolReport], prefix: &str) -> Table {
    let mut table = Table::new(
        &format!("{prefix}pools"),
        "Pools",
        &[
            "pool",
            "instances",
            "layout",
            "GPUs",
            "tok/s per GPU",
            "steps",
            "step ms",
            "busy %",
            "DP imbalance %",
            "batch/rank",
            "queue mean",
            "KV used %",
        ],
    );
    for p in pools {
        table.row(vec![
            p.name.clone(),
            p.instances.to_string(),
            pool_layout(p),
            p.gpus.to_string(),
            fixed(p.throughput_tok_s_per_gpu.total, 0),
            p.steps.to_string(),
            fixed(p.step_ms_mean, 2),
            fixed(100.0 * p.busy_fraction, 1),
            fixed(100.0 * p.dp_imbalance_loss, 1),
            fixed(p.batch_per_rank.mean, 1),
            fixed(p.queue_requests.mean, 1),
            fixed(100.0 * p.kv_used_fraction.mean, 1),
        ]);
    }
    table
}

fn op_shares_table(pools: &[PoolReport], shares: &[(String, Vec<f64>)], prefix: &str) -> Table {
    let mut table = Table::new(
        &format!("{prefix}time-by-op"),
        "Share of step time by operation (%)",
        &["operation"],
    );
    table.header.extend(pools.iter().map(|p| p.name.clone()));
    for (op, shares_by_pool) in shares {
        let mut row = vec![op.clone()];
        row.extend(shares_by_pool.iter().map(|v| fixed(*v, 1)));
        table.row(row);
    }
    table
}

/// USD per million tokens by cost component, for one or more labelled finances.
/// `priced`: whether a price sheet values the tokens; without one, revenue, margin,
/// price and break-even are shown as `-` (not computed), never 0.
pub fn money_section(items: &[(String, &Finance)], prefix: &str, priced: bool) -> Result<Section> {
    let mut s = Section::new(
        &format!("{prefix}money"),
        "Cost per million tokens",
        "GPU cost per million tokens (all kinds) by TCO component, next to the mean price of the tokens at the price sheet.",
    );
    let components = cost_components(items);
    let n = components
        .iter()
        .map(|c| c.1.iter().filter(|v| **v > 0.0).count())
        .sum();
    let bars = Bars {
        title: "GPU cost per million tokens by component".into(),
        value_label: "USD per million tokens".into(),
        categories: items.iter().map(|(l, _)| l.clone()).collect(),
        components,
    };
    s.figures.push(Figure::new(
        &format!("{prefix}usd-per-m-tokens"),
        "USD per million tokens by TCO component.",
        stacked_bars(&bars)?,
        n,
    ));
    s.tables.push(money_table(items, prefix, priced));
    Ok(s)
}

/// Each TCO component's USD per million tokens, one value per item; components
/// that are zero for every item are left out.
fn cost_components(items: &[(String, &Finance)]) -> Vec<(String, Vec<f64>)> {
    let comps = [
        "rental",
        "capex",
        "power",
        "hosting",
        "network",
        "operations",
    ];
    comps
        .iter()
        .map(|c| {
            (
                c.to_string(),
                items
                    .iter()
                    .map(|(_, fi)| {
                        fi.usd_per_m_tokens
                            .cost_by_component
                            .get(*c)
                            .copied()
                            .unwrap_or(0.0)
                    })
                    .collect::<Vec<f64>>(),
            )
        })
        .filter(|(_, v)| v.iter().any(|x| *x > 0.0))
        .collect()
}

/// The finance table: per GPU-hour and per million tokens, one row per item (`-`
/// where no price sheet values the tokens).
fn money_table(items: &[(String, &Finance)], prefix: &str, priced: bool) -> Table {
    let mut t = Table::new(
        &format!("{prefix}money"),
        "Finance per GPU-hour and per million tokens",
        &[
            "configuration",
            "TCO",
            "cost $/GPU-h",
            "revenue $/GPU-h",
            "margin $/GPU-h",
            "cost $/M tok",
            "price $/M tok",
            "break-even utilisation",
        ],
    );
    for (l, fi) in items {
        t.row(vec![
            l.clone(),
            fi.tco.clone(),
            fixed(fi.cost_usd_per_gpu_hour.total, 3),
            if priced {
                fixed(fi.revenue_usd_per_gpu_hour, 2)
            } else {
                "-".into()
            },
            if priced {
                fixed(fi.margin_usd_per_gpu_hour, 2)
            } else {
                "-".into()
            },
            fixed(fi.usd_per_m_tokens.cost_all_tokens, 5),
            if priced {
                fixed(fi.usd_per_m_tokens.price_all_tokens, 5)
            } else {
                "-".into()
            },
            if priced {
                break_even_text(fi.break_even_utilisation)
            } else {
                "-".into()
            },
        ]);
    }
    t
}

/// A pool's layout as engines print it: `DEP8`, `TP8`, `TP8 EP`.
fn pool_layout(p: &PoolReport) -> String {
    sim::cost::Layout {
        tp: p.tp,
        expert_parallel: p.expert_parallel,
        ..sim::cost::Layout::new(p.dep)
    }
    .name()
}
