//! Money: API price sheets (USD per million tokens), the value of simulated tokens,
//! and what a GPU-hour's tokens cost (`simulate`'s report and `sweep` share these).
//! Figures from `/work/shared/reference/models-hardware-prices.md`, DeepSeek's API
//! price pages [P] except V3.2, which is not offered here.

use super::report::Throughput;
use serde::{Deserialize, Serialize};
use spec::hardware::{self, PriceBasis};
use spec::problem::Problem;

/// USD per million tokens by token kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TokenPrices {
    pub cached_input_usd_per_m: f64,
    pub uncached_input_usd_per_m: f64,
    pub output_usd_per_m: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PriceSheet {
    /// DeepSeek-V3 (2025): 0.07 / 0.27 / 1.10 [P].
    DeepseekV3,
    /// DeepSeek-R1 (2025): 0.14 / 0.55 / 2.19 [P].
    DeepseekR1,
    /// V3 and R1 off-peak from Feb 2025, 16:30-00:30 UTC: 0.035 / 0.135 / 0.55 [P].
    DeepseekV3R1OffPeak,
    /// V4.1-Flash peak (weekdays 01:00-04:00 and 06:00-10:00 UTC): 0.006 / 0.30 / 1.20 [P].
    DeepseekV41FlashPeak,
    /// V4.1-Flash off-peak (from Sep 2026): 0.003 / 0.15 / 0.60 [P]; the reference
    /// report's $38.96 per GPU-hour uses these.
    #[default]
    DeepseekV41FlashOffPeak,
    /// The `custom` prices of the `[price]` table.
    Custom,
    /// No sheet: no public API price sheet of the model is known, so revenue is not
    /// computed (what the tokens cost still is).
    None,
}

impl PriceSheet {
    pub const ALL: [PriceSheet; 5] = [
        PriceSheet::DeepseekV3,
        PriceSheet::DeepseekR1,
        PriceSheet::DeepseekV3R1OffPeak,
        PriceSheet::DeepseekV41FlashPeak,
        PriceSheet::DeepseekV41FlashOffPeak,
    ];

    /// The sheet's prices; `None` for `Custom`.
    pub fn prices(self) -> Option<TokenPrices> {
        let p = |c, u, o| TokenPrices {
            cached_input_usd_per_m: c,
            uncached_input_usd_per_m: u,
            output_usd_per_m: o,
        };
        match self {
            PriceSheet::DeepseekV3 => Some(p(0.07, 0.27, 1.10)),
            PriceSheet::DeepseekR1 => Some(p(0.14, 0.55, 2.19)),
            PriceSheet::DeepseekV3R1OffPeak => Some(p(0.035, 0.135, 0.55)),
            PriceSheet::DeepseekV41FlashPeak => Some(p(0.006, 0.30, 1.20)),
            PriceSheet::DeepseekV41FlashOffPeak => Some(p(0.003, 0.15, 0.60)),
            PriceSheet::Custom | PriceSheet::None => None,
        }
    }

    /// The public sheet of a model's own API by twin's model name, if there is one:
    /// DeepSeek-V3's list prices, V4.1-Flash's off-peak (the reference report's).
    pub fn of_model(model: &str) -> Option<PriceSheet> {
        match model {
            "deepseek-v3" => Some(PriceSheet::DeepseekV3),
            "deepseek-v4.1-flash" => Some(PriceSheet::DeepseekV41FlashOffPeak),
            _ => None,
        }
    }

    /// Whether it values tokens (a sheet or custom prices), else revenue is not
    /// computed.
    pub fn values_tokens(self) -> bool {
        self != PriceSheet::None
    }

    pub fn key(self) -> &'static str {
        match self {
            PriceSheet::DeepseekV3 => "deepseek-v3",
            PriceSheet::DeepseekR1 => "deepseek-r1",
            PriceSheet::DeepseekV3R1OffPeak => "deepseek-v3-r1-off-peak",
            PriceSheet::DeepseekV41FlashPeak => "deepseek-v41-flash-peak",
            PriceSheet::DeepseekV41FlashOffPeak => "deepseek-v41-flash-off-peak",
            PriceSheet::Custom => "custom",
            PriceSheet::None => "none",
        }
    }
}

/// The `[price]` table: which sheet values the tokens, which TCO basis prices a GPU-hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PriceConfig {
    #[serde(default)]
    pub sheet: PriceSheet,
    /// Required when `sheet = "custom"`.
    #[serde(default)]
    pub custom: Option<TokenPrices>,
    #[serde(default)]
    pub basis: PriceBasis,
}

impl PriceConfig {
    pub fn token_prices(&self) -> Option<TokenPrices> {
        match self.sheet {
            PriceSheet::Custom => self.custom,
            s => s.prices(),
        }
    }

    pub fn problems(&self) -> Vec<Problem> {
        let mut p = Vec::new();
        match self.token_prices() {
            None if self.sheet == PriceSheet::None => {}
            None => p.push(Problem::new(
                "price.custom",
                "required when price.sheet = \"custom\"",
            )),
            Some(t) => {
                for (name, v) in [
                    ("cached_input_usd_per_m", t.cached_input_usd_per_m),
                    ("uncached_input_usd_per_m", t.uncached_input_usd_per_m),
                    ("output_usd_per_m", t.output_usd_per_m),
                ] {
                    if !(v.is_finite() && v >= 0.0) {
                        p.push(Problem::new(format!("price.custom.{name}"), "must be >= 0"));
                    }
                }
            }
        }
        p
    }
}

impl TokenPrices {
    /// Tokens worth nothing (a sheet without prices).
    pub const ZERO: TokenPrices = TokenPrices {
        cached_input_usd_per_m: 0.0,
        uncached_input_usd_per_m: 0.0,
        output_usd_per_m: 0.0,
    };
}

/// USD per million tokens when a GPU-hour costs (or earns) `usd_per_gpu_hour` and a GPU
/// moves `tok_s_per_gpu` tokens per second; 0 when no tokens move.
pub fn usd_per_m_tokens(usd_per_gpu_hour: f64, tok_s_per_gpu: f64) -> f64 {
    if tok_s_per_gpu > 0.0 {
        usd_per_gpu_hour / (tok_s_per_gpu * 3600.0 / 1e6)
    } else {
        0.0
    }
}

/// Money per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct UsdPerMTokens {
    /// GPU cost per million tokens of all kinds.
    pub cost_all_tokens: f64,
    /// GPU cost per million output tokens.
    pub cost_output_tokens: f64,
    /// Mean API price per million tokens of the simulated mix.
    pub revenue_all_tokens: f64,
}

/// What a rack's tokens earn and its GPUs cost.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Money {
    pub revenue_usd_per_gpu_hour: f64,
    pub cost_usd_per_gpu_hour: f64,
    pub usd_per_m_tokens: UsdPerMTokens,
}

impl Money {
    /// The money of throughput `t` (tokens per second per GPU) valued at `price`'s
    /// sheet, its GPUs costed at `gpu`'s price on `price`'s basis.
    pub fn of(price: &PriceConfig, gpu: &hardware::Price, t: &Throughput) -> Money {
        let prices = price.token_prices().unwrap_or(TokenPrices::ZERO);
        let revenue = revenue_usd_per_gpu_hour(&prices, t.cached_input, t.uncached_input, t.output);
        let cost = gpu.usd_per_gpu_hour(price.basis);
        Money {
            revenue_usd_per_gpu_hour: revenue,
            cost_usd_per_gpu_hour: cost,
            usd_per_m_tokens: UsdPerMTokens {
                cost_all_tokens: usd_per_m_tokens(cost, t.total),
                cost_output_tokens: usd_per_m_tokens(cost, t.output),
                revenue_all_tokens: usd_per_m_tokens(revenue, t.total),
            },
        }
    }
}

/// USD earned per GPU-hour by a throughput of tokens per second per GPU.
pub fn revenue_usd_per_gpu_hour(
    prices: &TokenPrices,
    cached_tok_s: f64,
    uncached_tok_s: f64,
    output_tok_s: f64,
) -> f64 {
    3600.0 / 1e6
        * (cached_tok_s * prices.cached_input_usd_per_m
            + uncached_tok_s * prices.uncached_input_usd_per_m
            + output_tok_s * prices.output_usd_per_m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference report: 954K tokens/s per GPU worth $38.96 per GPU-hour at V4.1-Flash
    /// off-peak prices. With the derived mix c = 97.4%, u = 1.6%, o = 1.0%:
    /// 954e3 * 3600 / 1e6 = 3434.4 M tokens/h; x (0.003*0.974 + 0.15*0.016 + 0.60*0.01)
    /// = 3434.4 * 0.011322 = $38.88, within 0.3% of $38.96.
    #[test]
    fn reference_mix_reproduces_the_published_value() {
        let p = PriceSheet::DeepseekV41FlashOffPeak.prices().unwrap();
        let r = revenue_usd_per_gpu_hour(&p, 954e3 * 0.974, 954e3 * 0.016, 954e3 * 0.01);
        assert!((r - 38.88).abs() < 0.01, "{r}");
        assert!((r / 38.96 - 1.0).abs() < 0.003);
    }

    #[test]
    fn custom_sheet_needs_prices() {
        let mut c = PriceConfig {
            sheet: PriceSheet::Custom,
            ..Default::default()
        };
        assert_eq!(c.problems().len(), 1);
        c.custom = Some(TokenPrices {
            cached_input_usd_per_m: 0.1,
            uncached_input_usd_per_m: 1.0,
            output_usd_per_m: 2.0,
        });
        assert!(c.problems().is_empty());
        assert_eq!(PriceConfig::default().problems(), Vec::<String>::new());
    }
}
