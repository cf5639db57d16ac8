//! `twin cost [SCENARIO | --from RUN.json]`: what a GPU-hour costs all-in under each
//! TCO preset (or one), and what the run's tokens earn against it: revenue at the
//! price sheet by token kind, margin, USD per million tokens by cost component, and
//! the break-even utilisation. `simulate --tco` and `plan` price through the same
//! `sim::tco::finance`.

use crate::simulation::execute;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use report::text::break_even_text;
use scenario::resolve_tco;
use scenario::{embedded_names, load_hardware, Kind, Overrides, RunRequest};
use serde_json::{json, Value};
use sim::serving::{PriceConfig, Throughput, TokenPrices};
use sim::tco::{Finance, Tco};
use spec::hardware::Hardware;
use std::fmt::Write;

#[derive(Debug, Clone, Args)]
pub struct CostArgs {
    /// Scenario to simulate and price [default: gb300-nvl72-v4.1-flash-agentx].
    pub scenario: Option<String>,
    /// Price a finished run instead: the JSON of `twin simulate --json` or `twin plan
    /// --json` (its best configuration).
    #[arg(long, value_name = "RUN.json", conflicts_with = "scenario")]
    pub from: Option<String>,
    /// One TCO preset or file (default: every preset in scenarios/tco).
    #[arg(long, value_name = "PRESET")]
    pub tco: Option<String>,
    /// Seed of the simulation (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Simulated seconds (default: the scenario's `duration_s`).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Overrides as for `twin simulate`; `tco.FIELD=VALUE` changes the --tco preset.
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    pub json: bool,
}

/// What is priced: the deployment's pools (GPUs, hardware), its throughput and prices.
struct Priced {
    source: String,
    pools: Vec<(u64, Hardware)>,
    throughput: Throughput,
    prices: TokenPrices,
    sheet: String,
}

fn from_json(path: &str) -> Result<Priced> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("{path}: not JSON"))?;
    let field = |v: &Value, p: &str| -> Result<Value> {
        v.pointer(p)
            .cloned()
            .ok_or_else(|| anyhow!("{path}: no `{p}` (expected the JSON of `twin simulate --json` or `twin plan --json`)"))
    };
    if v.get("best").is_some() {
        // twin plan --json: the best configuration's pools by hardware name.
        let cfg: sim::plan::Candidate = serde_json::from_value(field(&v, "/best/config")?)?;
        let mut pools = Vec::new();
        for p in cfg.prefill.iter().chain(std::iter::once(&cfg.decode)) {
            pools.push((p.gpus(), load_hardware(&p.hardware, &[])?));
        }
        let t: Throughput = serde_json::from_value(field(&v, "/best/throughput_tok_s_per_gpu")?)?;
        let prices: TokenPrices = serde_json::from_value(field(&v, "/token_prices")?)?;
        return Ok(Priced {
            source: format!("{path} (twin plan, best: {})", cfg.label()),
            pools,
            throughput: t,
            prices,
            sheet: field(&v, "/price_sheet")?
                .as_str()
                .unwrap_or("")
                .to_string(),
        });
    }
    let hw: Hardware = serde_json::from_value(field(&v, "/resolved/hardware")?)
        .with_context(|| format!("{path}: resolved.hardware"))?;
    let price: PriceConfig = serde_json::from_value(field(&v, "/resolved/scenario/price")?)?;
    let gpus = field(&v, "/gpus")?
        .as_u64()
        .ok_or_else(|| anyhow!("{path}: gpus is not a number"))?;
    Ok(Priced {
        source: format!("{path} (twin simulate)"),
        pools: vec![(gpus, hw)],
        throughput: serde_json::from_value(field(&v, "/throughput_tok_s_per_gpu")?)?,
        prices: price.token_prices().unwrap_or(TokenPrices::ZERO),
        sheet: price.sheet.key().to_string(),
    })
}

pub fn run(args: &CostArgs) -> Result<()> {
    let sets = Overrides::parse(&args.set)?;
    let tcos = tcos_of(args, &sets.tco)?;
    let priced = priced_of(args, sets)?;
    // Every preset by default: one that cannot price this hardware (no capex for it)
    // is skipped with a note; one named by --tco must price it.
    let mut rows = Vec::new();
    let mut priced_tcos = Vec::new();
    let mut skipped = Vec::new();
    for t in &tcos {
        match sim::tco::finance_of(t, &priced.pools, &priced.prices, &priced.throughput) {
            Ok(f) => {
                rows.push(f);
                priced_tcos.push(t.clone());
            }
            Err(e) if args.tco.is_none() => skipped.push(format!("{e:#}; preset skipped")),
            Err(e) => return Err(anyhow!("{e}")),
        }
    }
    if rows.is_empty() {
        bail!(
            "no TCO preset prices this deployment:\n  {}",
            skipped.join("\n  ")
        );
    }
    let tcos = priced_tcos;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "version": env!("CARGO_PKG_VERSION"),
                "source": priced.source,
                "gpus": priced.pools.iter().map(|p| p.0).sum::<u64>(),
                "hardware": priced.pools.iter().map(|p| p.1.name.clone()).collect::<Vec<_>>(),
                "throughput_tok_s_per_gpu": priced.throughput,
                "price_sheet": priced.sheet,
                "token_prices": priced.prices,
                "tco": tcos,
                "finance": rows,
                "skipped": skipped,
            }))?
        );
        return Ok(());
    }
    print!("{}", text(&priced, &rows));
    for n in &skipped {
        println!("note: {n}");
    }
    Ok(())
}

/// The TCO presets to price with: the one --tco names, else every embedded preset.
fn tcos_of(args: &CostArgs, tco_sets: &[scenario::Set]) -> Result<Vec<Tco>> {
    Ok(match &args.tco {
        Some(name) => vec![resolve_tco(Some(name), tco_sets, Default::default())?],
        None => {
            if !tco_sets.is_empty() {
                bail!("--set tco.*: name the preset it changes with --tco");
            }
            embedded_names(Kind::Tco)
                .iter()
                .map(|n| resolve_tco(Some(n), &[], Default::default()))
                .collect::<Result<_>>()?
        }
    })
}

/// What to price: the finished run of --from, else a simulation of the scenario.
fn priced_of(args: &CostArgs, sets: Overrides) -> Result<Priced> {
    Ok(match &args.from {
        Some(path) => {
            if args.duration.is_some() || args.seed.is_some() {
                bail!("--from prices a finished run: --duration and --seed do not apply");
            }
            from_json(path)?
        }
        None => {
            let req = RunRequest {
                scenario: args.scenario.clone(),
                seed: args.seed,
                duration: args.duration,
                sets,
                ..RunRequest::default()
            };
            let (r, report, _) = execute(&req)?;
            Priced {
                source: format!(
                    "{} (simulated, seed {}, {} s)",
                    r.scenario_origin,
                    r.seed,
                    r.scenario().duration_s
                ),
                pools: vec![(r.scenario().gpus(), r.hardware.clone())],
                throughput: report.throughput_tok_s_per_gpu,
                prices: r
                    .scenario()
                    .price
                    .token_prices()
                    .unwrap_or(TokenPrices::ZERO),
                sheet: r.scenario().price.sheet.key().to_string(),
            }
        }
    })
}

fn text(p: &Priced, rows: &[Finance]) -> String {
    let priced = p.sheet != "none";
    let money = |x: f64, d: usize| match priced {
        true => format!("{x:.d$}"),
        false => "-".to_string(),
    };
    let mut s = String::new();
    write_header(&mut s, p, priced);
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<22} {:>7} {:>7} {:>7} {:>8} {:>8} {:>10} {:>7}",
        "USD per GPU-hour", "rental", "capex", "power", "hosting", "network", "operations", "total"
    );
    for f in rows {
        let c = &f.cost_usd_per_gpu_hour;
        let _ = writeln!(
            s,
            "{:<22} {:>7.3} {:>7.3} {:>7.3} {:>8.3} {:>8.3} {:>10.3} {:>7.3}",
            f.tco, c.rental, c.capex, c.power, c.hosting, c.network, c.operations, c.total
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<22} {:>9} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10}",
        "per GPU-hour", "revenue", "cost", "margin", "margin%", "$/M tok", "$/M out", "break-even"
    );
    for f in rows {
        let _ = writeln!(
            s,
            "{:<22} {:>9} {:>8.3} {:>8} {:>8} {:>10.5} {:>10.4} {:>10}",
            f.tco,
            money(f.revenue_usd_per_gpu_hour, 2),
            f.cost_usd_per_gpu_hour.total,
            money(f.margin_usd_per_gpu_hour, 2),
            money(100.0 * f.margin_fraction, 1) + if priced { "%" } else { "" },
            f.usd_per_m_tokens.cost_all_tokens,
            f.usd_per_m_tokens.cost_output_tokens,
            match priced {
                true => break_even_text(f.break_even_utilisation),
                false => "-".into(),
            }
        );
    }
    if let Some(f) = rows.first().filter(|_| priced) {
        let r = &f.revenue_by_kind_usd_per_gpu_hour;
        let _ = writeln!(
            s,
            "\nrevenue by token kind: cached ${:.2}, uncached ${:.2}, output ${:.2} per GPU-hour; break-even = cost / revenue (the share of hours the GPUs must serve at this rate)",
            r.cached_input, r.uncached_input, r.output
        );
    }
    let _ = writeln!(
        s,
        "presets: scenarios/tco/*.toml; every number's source is in its [provenance]"
    );
    s
}

/// Writes the report's first lines: the source, the GPUs, the throughput and the prices.
fn write_header(s: &mut String, p: &Priced, priced: bool) {
    let t = &p.throughput;
    let hw: Vec<String> = p
        .pools
        .iter()
        .map(|(n, h)| format!("{n} x {}", h.name))
        .collect();
    let _ = writeln!(s, "twin {} cost: {}", env!("CARGO_PKG_VERSION"), p.source);
    let _ = writeln!(
        s,
        "GPUs {}; tok/s per GPU {:.0} (cached {:.0}, uncached {:.0}, output {:.0}); {}",
        hw.join(" + "),
        t.total,
        t.cached_input,
        t.uncached_input,
        t.output,
        match priced {
            true => format!(
                "prices {} (${} / ${} / ${} per M cached / uncached / output)",
                p.sheet,
                p.prices.cached_input_usd_per_m,
                p.prices.uncached_input_usd_per_m,
                p.prices.output_usd_per_m
            ),
            false => "no price sheet: revenue, margin and break-even are not computed".into(),
        }
    );
}
