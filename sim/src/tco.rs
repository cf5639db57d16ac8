//! Total cost of ownership per GPU-hour, and the finance of a run: what its tokens
//! earn at a price sheet, what its GPUs cost, the margin, the cost of a million tokens
//! by component, and the utilisation at which revenue pays for the GPUs.
//!
//! A TCO file (`scenarios/tco/*.toml`) either rents GPUs (a price per GPU-hour, given
//! or taken from the hardware file's `[price]` table on a basis) or owns them (capex
//! paid as an annuity over the amortisation years at the cost of capital, power at
//! PUE and tariff, colocation per kW, network and operations per GPU-hour). `twin
//! cost`, `twin simulate --tco` and `twin plan` all price through [`finance`].

use crate::serving::report::Throughput;
use crate::serving::TokenPrices;
use serde::{Deserialize, Serialize};
use spec::hardware::{Hardware, PriceBasis};
use spec::problem::Problem;
use std::collections::BTreeMap;

/// Hours in a (non-leap) year: the amortisation clock.
pub const HOURS_PER_YEAR: f64 = 8760.0;

/// A TCO model: a rental price, or owned GPUs' cost items. Every field defaults to 0
/// (no such cost) except the amortisation years (4) and PUE (1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tco {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Rented GPUs: a price per GPU-hour, all-in.
    #[serde(default)]
    pub rental_usd_per_gpu_hour: Option<f64>,
    /// Rented GPUs: a price per GPU-hour by hardware name (`h100 = 4.25`), all-in: a
    /// list price that differs by GPU; a GPU it does not name is an error.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rental_usd_per_gpu_hour_by_hardware: BTreeMap<String, f64>,
    /// Rented GPUs at the hardware file's `[price]` of this basis (`hyperscaler`,
    /// `neocloud`, `rental3yr`), when `rental_usd_per_gpu_hour` is not set.
    #[serde(default)]
    pub rental_basis: Option<PriceBasis>,
    /// Owned: the system price per GPU (rack with CPUs, switches, chassis, cabling,
    /// divided by its GPUs), by hardware name (`gb300 = 48611`).
    #[serde(default)]
    pub capex_usd_per_gpu: BTreeMap<String, f64>,
    #[serde(default = "d_years")]
    pub amortisation_years: f64,
    /// Annual cost of capital (0.10 = 10%): capex is paid as an annuity at this rate.
    #[serde(default)]
    pub cost_of_capital: f64,
    /// All-in IT power per GPU (its share of CPUs, NICs, switches), kW; default: the
    /// hardware file's `power_w`.
    #[serde(default)]
    pub power_kw_per_gpu: Option<f64>,
    /// Facility power over IT power.
    #[serde(default = "d_pue")]
    pub pue: f64,
    #[serde(default)]
    pub usd_per_kwh: f64,
    /// Colocation space and cooling, USD per kW of IT power per month.
    #[serde(default)]
    pub hosting_usd_per_kw_month: f64,
    /// Scale-out and front-end network, USD per GPU-hour.
    #[serde(default)]
    pub network_usd_per_gpu_hour: f64,
    /// Staff, support contracts, spares, software, USD per GPU-hour.
    #[serde(default)]
    pub operations_usd_per_gpu_hour: f64,
    #[serde(default)]
    pub provenance: BTreeMap<String, String>,
}

fn d_years() -> f64 {
    4.0
}
fn d_pue() -> f64 {
    1.0
}

/// USD per GPU-hour by component; `total` is their sum.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct GpuHourCost {
    pub rental: f64,
    pub capex: f64,
    pub power: f64,
    pub hosting: f64,
    pub network: f64,
    pub operations: f64,
    pub total: f64,
}

impl GpuHourCost {
    /// The components with their names, in display order.
    pub fn components(&self) -> [(&'static str, f64); 6] {
        [
            ("rental", self.rental),
            ("capex", self.capex),
            ("power", self.power),
            ("hosting", self.hosting),
            ("network", self.network),
            ("operations", self.operations),
        ]
    }

    fn scaled(&self, k: f64) -> GpuHourCost {
        GpuHourCost {
            rental: self.rental * k,
            capex: self.capex * k,
            power: self.power * k,
            hosting: self.hosting * k,
            network: self.network * k,
            operations: self.operations * k,
            total: self.total * k,
        }
    }

    fn add(&mut self, o: &GpuHourCost) {
        self.rental += o.rental;
        self.capex += o.capex;
        self.power += o.power;
        self.hosting += o.hosting;
        self.network += o.network;
        self.operations += o.operations;
        self.total += o.total;
    }
}

/// The capital recovery factor: the yearly payment that repays 1 over `years` at
/// annual rate `r` (1 / years at r = 0).
pub fn annuity_factor(r: f64, years: f64) -> f64 {
    if r.abs() < 1e-12 {
        1.0 / years
    } else {
        r / (1.0 - (1.0 + r).powf(-years))
    }
}

impl Tco {
    /// The TCO the scenario's price basis implies: rent at the hardware's price.
    pub fn rental_at(basis: PriceBasis) -> Tco {
        Tco {
            name: basis_words(basis).to_string(),
            description: String::new(),
            rental_usd_per_gpu_hour: None,
            rental_usd_per_gpu_hour_by_hardware: BTreeMap::new(),
            rental_basis: Some(basis),
            capex_usd_per_gpu: BTreeMap::new(),
            amortisation_years: d_years(),
            cost_of_capital: 0.0,
            power_kw_per_gpu: None,
            pue: d_pue(),
            usd_per_kwh: 0.0,
            hosting_usd_per_kw_month: 0.0,
            network_usd_per_gpu_hour: 0.0,
            operations_usd_per_gpu_hour: 0.0,
            provenance: BTreeMap::new(),
        }
    }

    /// Every problem with the file, each with its field.
    pub fn problems(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        let nonneg = |x: f64| x.is_finite() && x >= 0.0;
        let mut need = |ok: bool, field: &str, msg: &str| {
            if !ok {
                p.push(Problem::new(field, msg));
            }
        };
        if let Some(r) = self.rental_usd_per_gpu_hour {
            need(nonneg(r), "rental_usd_per_gpu_hour", "must be >= 0");
        }
        for (hw, r) in &self.rental_usd_per_gpu_hour_by_hardware {
            need(
                nonneg(*r),
                &format!("rental_usd_per_gpu_hour_by_hardware.{hw}"),
                "must be >= 0",
            );
        }
        for (hw, c) in &self.capex_usd_per_gpu {
            need(
                nonneg(*c),
                &format!("capex_usd_per_gpu.{hw}"),
                "must be >= 0",
            );
        }
        need(
            self.amortisation_years.is_finite() && self.amortisation_years > 0.0,
            "amortisation_years",
            "must be > 0",
        );
        need(
            self.cost_of_capital.is_finite() && self.cost_of_capital > -1.0,
            "cost_of_capital",
            "must be > -1 (a rate per year, 0.1 = 10%)",
        );
        if let Some(k) = self.power_kw_per_gpu {
            need(nonneg(k), "power_kw_per_gpu", "must be >= 0");
        }
        need(
            self.pue.is_finite() && self.pue >= 1.0,
            "pue",
            "must be >= 1",
        );
        for (f, v) in [
            ("usd_per_kwh", self.usd_per_kwh),
            ("hosting_usd_per_kw_month", self.hosting_usd_per_kw_month),
            ("network_usd_per_gpu_hour", self.network_usd_per_gpu_hour),
            (
                "operations_usd_per_gpu_hour",
                self.operations_usd_per_gpu_hour,
            ),
        ] {
            need(nonneg(v), f, "must be >= 0");
        }
        let rents = self.rental_usd_per_gpu_hour.is_some()
            || self.rental_basis.is_some()
            || !self.rental_usd_per_gpu_hour_by_hardware.is_empty();
        need(
            !rents || self.capex_usd_per_gpu.is_empty(),
            "capex_usd_per_gpu",
            "a rental (rental_usd_per_gpu_hour or rental_basis) has no capex",
        );
        need(
            rents || !self.capex_usd_per_gpu.is_empty(),
            "rental_usd_per_gpu_hour",
            "set a rental price, a rental_basis, or capex_usd_per_gpu for owned GPUs",
        );
        p
    }

    /// What one GPU of `hw` costs per hour; an error names what is missing.
    pub fn gpu_hour(&self, hw: &Hardware) -> Result<GpuHourCost, TcoError> {
        let by_hw = &self.rental_usd_per_gpu_hour_by_hardware;
        let rental = match (self.rental_usd_per_gpu_hour, self.rental_basis) {
            (Some(r), _) => r,
            (None, Some(b)) => hw.price.usd_per_gpu_hour(b),
            (None, None) if !by_hw.is_empty() => {
                *by_hw.get(&hw.name).ok_or_else(|| TcoError::NoRental {
                    tco: self.name.clone(),
                    hardware: hw.name.clone(),
                    priced: by_hw.keys().cloned().collect::<Vec<_>>().join(", "),
                })?
            }
            (None, None) => 0.0,
        };
        let capex = if rental > 0.0 || self.rental_basis.is_some() || !by_hw.is_empty() {
            0.0
        } else {
            let per_gpu =
                self.capex_usd_per_gpu
                    .get(&hw.name)
                    .ok_or_else(|| TcoError::NoCapex {
                        tco: self.name.clone(),
                        hardware: hw.name.clone(),
                        has: self
                            .capex_usd_per_gpu
                            .keys()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", "),
                    })?;
            per_gpu * annuity_factor(self.cost_of_capital, self.amortisation_years) / HOURS_PER_YEAR
        };
        let kw = self.power_kw_per_gpu.unwrap_or(hw.power_w / 1e3);
        let power = kw * self.pue * self.usd_per_kwh;
        let hosting = self.hosting_usd_per_kw_month * kw * 12.0 / HOURS_PER_YEAR;
        let mut c = GpuHourCost {
            rental,
            capex,
            power,
            hosting,
            network: self.network_usd_per_gpu_hour,
            operations: self.operations_usd_per_gpu_hour,
            total: 0.0,
        };
        c.total = c.components().iter().map(|x| x.1).sum();
        Ok(c)
    }
}

/// What a TCO model lacks to price one GPU-hour of a hardware.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TcoError {
    #[error("TCO `{tco}` has no rental price for hardware `{hardware}` (it prices {priced}: no dated public list price of the others was found)")]
    NoRental {
        tco: String,
        hardware: String,
        priced: String,
    },
    #[error("TCO `{tco}` has no capex for hardware `{hardware}` (set capex_usd_per_gpu.{hardware}; it has {has})")]
    NoCapex {
        tco: String,
        hardware: String,
        has: String,
    },
}

/// What a price basis of a hardware file's `[price]` is, in words: SemiAnalysis's AI
/// Cloud TCO columns are what an owning hyperscaler or neocloud's GPU-hour costs it,
/// and what a renter pays on a 3-year contract.
pub fn basis_words(b: PriceBasis) -> &'static str {
    match b {
        PriceBasis::Hyperscaler => {
            "an owning hyperscaler's cost (the hardware's price.hyperscaler)"
        }
        PriceBasis::Neocloud => "an owning neocloud's cost (the hardware's price.neocloud)",
        PriceBasis::Rental3yr => "a 3-year rental (the hardware's price.rental_3yr)",
    }
}

/// The GPU-hour cost of a deployment: each pool's GPUs at their hardware's cost,
/// averaged per GPU.
pub fn blended(pools: &[(u64, GpuHourCost)]) -> GpuHourCost {
    let gpus: u64 = pools.iter().map(|p| p.0).sum();
    let mut out = GpuHourCost::default();
    for (n, c) in pools {
        out.add(&c.scaled(*n as f64 / gpus.max(1) as f64));
    }
    out
}

/// Revenue per GPU-hour by token kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct RevenueByKind {
    pub cached_input: f64,
    pub uncached_input: f64,
    pub output: f64,
}

/// USD per million tokens (all kinds) by cost component, and in all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PerMTokens {
    /// GPU cost per million tokens of all kinds.
    pub cost_all_tokens: f64,
    /// GPU cost per million output tokens.
    pub cost_output_tokens: f64,
    /// Mean price per million tokens of the mix (revenue).
    pub price_all_tokens: f64,
    /// `cost_all_tokens` split by component (rental, capex, power, ...).
    pub cost_by_component: BTreeMap<String, f64>,
}

/// The finance of a throughput on a deployment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Finance {
    pub tco: String,
    pub cost_usd_per_gpu_hour: GpuHourCost,
    pub revenue_usd_per_gpu_hour: f64,
    pub revenue_by_kind_usd_per_gpu_hour: RevenueByKind,
    pub margin_usd_per_gpu_hour: f64,
    /// Margin over revenue (negative: a loss).
    pub margin_fraction: f64,
    pub usd_per_m_tokens: PerMTokens,
    /// The fraction of hours the GPUs must serve at this throughput for revenue to
    /// pay their cost (idle hours earn nothing and cost the same); above 1, never.
    pub break_even_utilisation: f64,
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// The finance of a run under `tco` on `pools` (GPUs of each hardware), its throughput
/// `t` valued at `prices`; an error names a GPU the TCO has no price for.
pub fn finance_of(
    tco: &Tco,
    pools: &[(u64, Hardware)],
    prices: &TokenPrices,
    t: &Throughput,
) -> Result<Finance, TcoError> {
    let costs: Vec<(u64, GpuHourCost)> = pools
        .iter()
        .map(|(n, hw)| tco.gpu_hour(hw).map(|c| (*n, c)))
        .collect::<Result<_, _>>()?;
    Ok(finance(&tco.name, blended(&costs), prices, t))
}

/// The finance of throughput `t` (tokens per second per GPU) valued at `prices`, on
/// GPUs costing `cost` per GPU-hour.
pub fn finance(tco: &str, cost: GpuHourCost, prices: &TokenPrices, t: &Throughput) -> Finance {
    let m_tok_per_h = |tok_s: f64| tok_s * 3600.0 / 1e6;
    let by_kind = RevenueByKind {
        cached_input: m_tok_per_h(t.cached_input) * prices.cached_input_usd_per_m,
        uncached_input: m_tok_per_h(t.uncached_input) * prices.uncached_input_usd_per_m,
        output: m_tok_per_h(t.output) * prices.output_usd_per_m,
    };
    let revenue = by_kind.cached_input + by_kind.uncached_input + by_kind.output;
    let all = m_tok_per_h(t.total);
    let margin = revenue - cost.total;
    Finance {
        tco: tco.to_string(),
        cost_usd_per_gpu_hour: cost,
        revenue_usd_per_gpu_hour: revenue,
        revenue_by_kind_usd_per_gpu_hour: by_kind,
        margin_usd_per_gpu_hour: margin,
        margin_fraction: ratio(margin, revenue),
        usd_per_m_tokens: PerMTokens {
            cost_all_tokens: ratio(cost.total, all),
            cost_output_tokens: ratio(cost.total, m_tok_per_h(t.output)),
            price_all_tokens: ratio(revenue, all),
            cost_by_component: cost
                .components()
                .iter()
                .filter(|c| c.1 > 0.0)
                .map(|&(k, v)| (k.to_string(), ratio(v, all)))
                .collect(),
        },
        break_even_utilisation: if revenue > 0.0 {
            cost.total / revenue
        } else {
            f64::MAX
        },
    }
}

/// One hour of a rate curve applied to a deployment sized for its peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveHour {
    pub hour: u32,
    pub multiplier: f64,
    /// Load as a fraction of the peak the deployment was planned and simulated for.
    pub load_fraction: f64,
    /// Busy fraction of each pool, scaled from the peak run by the load fraction.
    pub busy_fraction: Vec<f64>,
    pub revenue_usd_per_gpu_hour: f64,
}

/// Money and use over a day of a rate curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveFinance {
    pub hours: Vec<CurveHour>,
    /// Mean load over the day as a fraction of the peak.
    pub mean_load_fraction: f64,
    pub revenue_usd_per_gpu_hour: f64,
    pub cost_usd_per_gpu_hour: f64,
    pub margin_usd_per_gpu_hour: f64,
    /// GPU cost per million tokens over the day (the GPUs are paid at every hour).
    pub cost_usd_per_m_tokens: f64,
}

/// The day of `hourly` multipliers (24 values) on a deployment planned for `peak`,
/// whose peak run gave `at_peak` and pool busy fractions `busy_at_peak`. Below the
/// peak, tokens and busy time scale with the load (the deployment is not saturated
/// there; latency at a lower load is taken to be no worse than at the peak).
pub fn over_curve(
    hourly: &[f64],
    peak: f64,
    at_peak: &Finance,
    tok_s_per_gpu_at_peak: f64,
    busy_at_peak: &[f64],
) -> CurveFinance {
    let hours: Vec<CurveHour> = hourly
        .iter()
        .enumerate()
        .map(|(h, &m)| {
            let f = ratio(m, peak);
            CurveHour {
                hour: h as u32,
                multiplier: m,
                load_fraction: f,
                busy_fraction: busy_at_peak.iter().map(|b| b * f).collect(),
                revenue_usd_per_gpu_hour: at_peak.revenue_usd_per_gpu_hour * f,
            }
        })
        .collect();
    let n = hours.len().max(1) as f64;
    let mean = hours.iter().map(|h| h.load_fraction).sum::<f64>() / n;
    let revenue = at_peak.revenue_usd_per_gpu_hour * mean;
    let cost = at_peak.cost_usd_per_gpu_hour.total;
    CurveFinance {
        hours,
        mean_load_fraction: mean,
        revenue_usd_per_gpu_hour: revenue,
        cost_usd_per_gpu_hour: cost,
        margin_usd_per_gpu_hour: revenue - cost,
        cost_usd_per_m_tokens: ratio(cost, tok_s_per_gpu_at_peak * mean * 3600.0 / 1e6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned() -> Tco {
        let mut t = Tco::rental_at(PriceBasis::Hyperscaler);
        t.rental_basis = None;
        t.name = "owned".into();
        t.capex_usd_per_gpu.insert("gb300".into(), 48_000.0);
        t.amortisation_years = 4.0;
        t.cost_of_capital = 0.10;
        t.power_kw_per_gpu = Some(2.0);
        t.pue = 1.25;
        t.usd_per_kwh = 0.08;
        t.hosting_usd_per_kw_month = 146.0;
        t.network_usd_per_gpu_hour = 0.10;
        t.operations_usd_per_gpu_hour = 0.20;
        t
    }

    fn gb300() -> Hardware {
        toml::from_str(include_str!("../../scenarios/hardware/gb300.toml")).expect("gb300")
    }

    /// By hand: annuity 0.1 / (1 - 1.1^-4) = 0.1 / 0.316987 = 0.315471 per year, so
    /// capex 48000 * 0.315471 / 8760 = $1.72861/h; power 2 kW * 1.25 * 0.08 = $0.20/h;
    /// hosting 146 * 2 * 12 / 8760 = $0.40/h; + network 0.10 + operations 0.20:
    /// total $2.62861/h.
    #[test]
    fn owned_gpu_hour_by_hand() {
        let c = owned().gpu_hour(&gb300()).unwrap();
        assert!((annuity_factor(0.1, 4.0) - 0.315_470_8).abs() < 1e-6);
        assert!((c.capex - 1.728_607).abs() < 1e-5, "{c:?}");
        assert!((c.power - 0.20).abs() < 1e-12);
        assert!((c.hosting - 0.40).abs() < 1e-12);
        assert!((c.total - 2.628_607).abs() < 1e-5);
        assert_eq!(c.rental, 0.0);
        assert!(owned().problems().is_empty());
        let mut h200 = gb300();
        h200.name = "h200".into();
        let e = owned().gpu_hour(&h200).unwrap_err();
        assert!(e.to_string().contains("capex_usd_per_gpu.h200"), "{e}");
    }

    /// 1M tok/s per GPU, 97% cached, 2% uncached, 1% output at 0.003 / 0.15 / 0.60:
    /// 3600 M tokens/h: cached 3492 M * 0.003 = 10.476, uncached 72 M * 0.15 = 10.8,
    /// output 36 M * 0.6 = 21.6: revenue $42.876/h. Rental $2.65/h: margin 40.226,
    /// $0.000736/M tokens, break-even at 2.65 / 42.876 = 6.18% of the hours.
    #[test]
    fn finance_by_hand() {
        let hw = gb300();
        let c = Tco::rental_at(PriceBasis::Hyperscaler)
            .gpu_hour(&hw)
            .unwrap();
        assert_eq!(c.total, hw.price.hyperscaler_usd_per_gpu_hour);
        let t = Throughput {
            total: 1e6,
            cached_input: 0.97e6,
            uncached_input: 0.02e6,
            output: 0.01e6,
        };
        let p = TokenPrices {
            cached_input_usd_per_m: 0.003,
            uncached_input_usd_per_m: 0.15,
            output_usd_per_m: 0.60,
        };
        let cost = GpuHourCost {
            rental: 2.65,
            total: 2.65,
            ..Default::default()
        };
        let f = finance("t", cost, &p, &t);
        assert!((f.revenue_usd_per_gpu_hour - 42.876).abs() < 1e-9);
        assert!((f.margin_usd_per_gpu_hour - 40.226).abs() < 1e-9);
        assert!((f.usd_per_m_tokens.cost_all_tokens - 2.65 / 3600.0).abs() < 1e-12);
        assert!((f.break_even_utilisation - 2.65 / 42.876).abs() < 1e-12);
        assert_eq!(f.usd_per_m_tokens.cost_by_component.len(), 1);
        // Two pools: 48 GPUs at $2/h and 24 at $5/h average $3/h.
        let two = blended(&[
            (
                48,
                GpuHourCost {
                    rental: 2.0,
                    total: 2.0,
                    ..Default::default()
                },
            ),
            (
                24,
                GpuHourCost {
                    rental: 5.0,
                    total: 5.0,
                    ..Default::default()
                },
            ),
        ]);
        assert!((two.total - 3.0).abs() < 1e-12);
        // A day at half the peak on average earns half; the cost stays.
        let day = over_curve(&[1.0, 0.0], 1.0, &f, 1e6, &[0.8]);
        assert!((day.mean_load_fraction - 0.5).abs() < 1e-12);
        assert!((day.revenue_usd_per_gpu_hour - 21.438).abs() < 1e-9);
        assert_eq!(day.hours[0].busy_fraction, vec![0.8]);
        assert!((day.cost_usd_per_m_tokens - 2.65 / 1800.0).abs() < 1e-12);
    }

    #[test]
    fn a_tco_must_rent_or_own() {
        let mut t = owned();
        t.capex_usd_per_gpu.clear();
        assert_eq!(t.problems().len(), 1);
        t.rental_basis = Some(PriceBasis::Neocloud);
        assert!(t.problems().is_empty());
        t.pue = 0.5;
        t.capex_usd_per_gpu.insert("x".into(), 1.0);
        assert_eq!(t.problems().len(), 2, "{:?}", t.problems());
    }
}
