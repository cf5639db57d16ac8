//! Reading one result object's fields with every problem collected, never a panic:
//! a missing required key, a value of the wrong type, a negative or non-finite
//! figure is named with its key and the reading goes on, so that one error lists
//! every problem of a file at once.

use crate::record::{Lengths, Load, Measured, Metric, Stat};
use serde_json::{Map, Value};

/// The shape of gamma gaps that stands for constant inter-arrival times (perf_analyzer's
/// and inference-perf's default, aiperf's `constant` mode, vLLM's `--burstiness inf`):
/// a record's load holds gamma gaps of a finite shape, and at shape 10^6 the gaps'
/// coefficient of variation is 1/sqrt(10^6) = 0.1%.
pub const CONSTANT_ARRIVALS: f64 = 1.0e6;

/// A request rate as a client writes it: a rate, or all requests at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Rate {
    /// `inf` (or `Infinity`): every request sent at once.
    AllAtOnce,
    PerSecond(f64),
}

/// One JSON object and where it is in the file (`"input_config.loadgen."`), for
/// messages.
#[derive(Clone, Copy)]
pub(crate) struct Obj<'a> {
    pub map: &'a Map<String, Value>,
    pub at: &'a str,
}

impl<'a> Obj<'a> {
    /// `v` as an object, or a problem.
    pub fn of(v: &'a Value, at: &'a str, p: &mut Vec<String>) -> Option<Obj<'a>> {
        match v.as_object() {
            Some(map) => Some(Obj { map, at }),
            None => {
                p.push(format!("{at}: not a JSON object"));
                None
            }
        }
    }

    /// The value of `key`; absent, `null` and `""` alike give `None` (genai-perf
    /// writes an unset option as `""`).
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map
            .get(key)
            .filter(|v| !v.is_null() && v.as_str() != Some(""))
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The object under `key` (absent: `None`; not an object: a problem).
    pub fn child(&self, key: &str, at: &'a str, p: &mut Vec<String>) -> Option<Obj<'a>> {
        Obj::of(self.get(key)?, at, p)
    }

    fn bad(&self, p: &mut Vec<String>, key: &str, what: &str) {
        p.push(format!("{}{key}: {what}", self.at));
    }

    /// A finite number >= 0 under `key`.
    pub fn number(&self, key: &str, p: &mut Vec<String>) -> Option<f64> {
        let v = self.get(key)?;
        match number_of(v) {
            Ok(x) if x >= 0.0 => Some(x),
            Ok(x) => {
                self.bad(p, key, &format!("{x}: must not be negative"));
                None
            }
            Err(what) => {
                self.bad(p, key, &what);
                None
            }
        }
    }

    /// A whole number >= 0 under `key`.
    pub fn count(&self, key: &str, p: &mut Vec<String>) -> Option<u64> {
        let x = self.number(key, p)?;
        if x.fract() != 0.0 || x > u32::MAX as f64 * 1e6 {
            self.bad(p, key, &format!("{x}: not a whole count"));
            return None;
        }
        Some(x as u64)
    }

    /// `number` or `count`, and a problem when the key is absent.
    pub fn required<T>(
        &self,
        key: &str,
        p: &mut Vec<String>,
        f: impl Fn(&Self, &str, &mut Vec<String>) -> Option<T>,
    ) -> Option<T> {
        if !self.has(key) {
            self.bad(p, key, "missing");
            return None;
        }
        f(self, key, p)
    }

    /// A string under `key` (another type: a problem).
    pub fn text(&self, key: &str, p: &mut Vec<String>) -> Option<&'a str> {
        let v = self.get(key)?;
        match v.as_str() {
            Some(s) => Some(s),
            None => {
                self.bad(p, key, &format!("{v}: expected a string"));
                None
            }
        }
    }

    /// A request rate under `key`: `inf` / `Infinity` (a string, or Python's bare
    /// token) is all at once; otherwise a finite rate > 0.
    pub fn rate(&self, key: &str, p: &mut Vec<String>) -> Option<Rate> {
        let v = self.get(key)?;
        if let Some(s) = v.as_str() {
            if matches!(s.trim().to_ascii_lowercase().as_str(), "inf" | "infinity") {
                return Some(Rate::AllAtOnce);
            }
        }
        match number_of(v) {
            Ok(x) if x > 0.0 => Some(Rate::PerSecond(x)),
            Ok(x) => {
                self.bad(p, key, &format!("{x}: a rate must be > 0"));
                None
            }
            Err(what) => {
                self.bad(p, key, &what);
                None
            }
        }
    }

    /// A list of whole numbers >= 0 under `key`.
    pub fn counts(&self, key: &str, p: &mut Vec<String>) -> Option<Vec<u64>> {
        let v = self.get(key)?;
        let Some(items) = v.as_array() else {
            self.bad(p, key, "expected a list of counts");
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, x) in items.iter().enumerate() {
            match number_of(x) {
                Ok(n) if n >= 0.0 && n.fract() == 0.0 => out.push(n as u64),
                Ok(n) => {
                    self.bad(p, &format!("{key}[{i}]"), &format!("{n}: not a count"));
                    return None;
                }
                Err(what) => {
                    self.bad(p, &format!("{key}[{i}]"), &what);
                    return None;
                }
            }
        }
        Some(out)
    }
}

/// A JSON number, or what is wrong with the value.
pub(crate) fn number_of(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| format!("{n}: not a number")),
        Value::String(s) if super::json::NON_FINITE.contains(&s.as_str()) => {
            Err(format!("{s}: not a finite number"))
        }
        other => Err(format!("{other}: expected a number")),
    }
}

/// The measured figures of a run, with what was left out and why.
#[derive(Debug, Default)]
pub(crate) struct Figures {
    pub measured: Measured,
    /// Keys of figures the record has no statistic for (`p95_itl_ms`).
    pub not_kept: Vec<String>,
    /// Keys whose figure is 0: the tool's stand-in for "no data" (vLLM writes the
    /// mean of an empty list as 0).
    pub zero: Vec<String>,
}

impl Figures {
    /// The figure of `key` (in twin's unit) as `metric` at `stat`; a 0 is set aside
    /// and the first figure of a statistic kept (`median` and `p50` are one).
    pub fn put(&mut self, metric: Metric, stat: Stat, value: f64, key: &str) {
        if value == 0.0 {
            self.zero.push(key.to_string());
            return;
        }
        self.measured
            .entry(metric)
            .or_default()
            .entry(stat)
            .or_insert(value);
    }

    /// The statistic a percentile is, if the record holds it (50, 90, 99).
    pub fn stat_of_percentile(p: &str) -> Option<Stat> {
        match p {
            "50" => Some(Stat::P50),
            "90" => Some(Stat::P90),
            "99" => Some(Stat::P99),
            _ => None,
        }
    }

    /// The notes on what was left out.
    pub fn notes(&self) -> Vec<String> {
        let mut n = Vec::new();
        if !self.not_kept.is_empty() {
            n.push(format!(
                "not kept (a record holds mean, p50, p90, p99): {}",
                self.not_kept.join(", ")
            ));
        }
        if !self.zero.is_empty() {
            n.push(format!(
                "left out as 0 (the tool's figure when it has no data): {}",
                self.zero.join(", ")
            ));
        }
        n
    }
}

/// The latency figures of `o` named `{stat}_{metric}_ms` (vLLM, SGLang), for the
/// metric words given (`("ttft", Metric::TtftMs)`): `mean` is the mean, `median` the
/// p50, `p{x}` the x-th percentile (p50, p90, p99 kept, the others named in a note);
/// `std` is not a statistic a record holds and is passed over.
pub(crate) fn latency_figures(
    o: &Obj,
    words: &[(&str, Metric)],
    f: &mut Figures,
    p: &mut Vec<String>,
) {
    for key in o.map.keys() {
        let Some(stem) = key.strip_suffix("_ms") else {
            continue;
        };
        let Some((stat, metric)) = words.iter().find_map(|(w, m)| {
            let s = stem.strip_suffix(w)?.strip_suffix('_')?;
            Some((s, *m))
        }) else {
            continue;
        };
        let stat = match stat {
            "mean" => Some(Stat::Mean),
            "median" => Some(Stat::P50),
            "std" => continue,
            s => match s.strip_prefix('p') {
                Some(pct) if pct.parse::<f64>().is_ok() => Figures::stat_of_percentile(pct),
                _ => continue,
            },
        };
        let Some(value) = o.number(key, p) else {
            continue;
        };
        match stat {
            Some(s) => f.put(metric, s, value, key),
            None => f.not_kept.push(key.clone()),
        }
    }
}

/// Every request of the same length, the mean of `total` over `n`.
pub(crate) fn mean_length(total: u64, n: u64) -> Lengths {
    let mean = (total as f64 / n.max(1) as f64).round().max(1.0);
    Lengths::Fixed {
        tokens: mean.min(u32::MAX as f64) as u32,
    }
}

/// Lengths as a count (a mean) and a spread: fixed when the spread is 0.
pub(crate) fn mean_and_spread(mean: f64, stddev: f64) -> Lengths {
    let m = mean.round().clamp(1.0, u32::MAX as f64) as u32;
    if stddev > 0.0 {
        Lengths::Normal {
            mean: m,
            stddev: stddev.max(0.0),
        }
    } else {
        Lengths::Fixed { tokens: m }
    }
}

/// A closed loop, a rate, or every request at once, from a client's rate and its
/// cap on requests in flight; `None` when all are sent at once with no cap and the
/// count is unknown.
pub(crate) fn load_of(
    rate: Rate,
    burstiness: f64,
    concurrency: Option<u32>,
    requests: Option<u64>,
    notes: &mut Vec<String>,
) -> Option<Load> {
    match (rate, concurrency) {
        (Rate::AllAtOnce, Some(c)) => Some(Load::ClosedLoop { concurrency: c }),
        (Rate::AllAtOnce, None) => {
            let n = u32::try_from(requests?).ok()?;
            notes.push(format!(
                "load: every request sent at once (rate inf, no cap on requests in flight): a closed loop of {n}"
            ));
            Some(Load::ClosedLoop { concurrency: n })
        }
        (Rate::PerSecond(r), c) => Some(Load::Rate {
            req_s: r,
            burstiness,
            concurrency: c,
        }),
    }
}

/// The date of `20260413-093028` (vLLM) or an ISO time (`2025-10-07T12:00:00`).
pub(crate) fn date_of(s: &str) -> Option<String> {
    let s = s.trim();
    let b = s.as_bytes();
    if b.len() >= 8 && b[..8].iter().all(u8::is_ascii_digit) && b.get(8).is_none_or(|&c| c == b'-')
    {
        return Some(format!("{}-{}-{}", &s[..4], &s[4..6], &s[6..8]));
    }
    let d = s.get(..10)?;
    let ok = d.bytes().enumerate().all(|(i, c)| {
        if i == 4 || i == 7 {
            c == b'-'
        } else {
            c.is_ascii_digit()
        }
    });
    ok.then(|| d.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_name_every_problem() {
        let v = json!({"a": -1, "b": "NaN", "c": "x", "r": "inf", "s": 0, "l": [1, 2.5], "n": 3});
        let mut p = Vec::new();
        let o = Obj::of(&v, "top.", &mut p).unwrap();
        assert_eq!(o.number("a", &mut p), None);
        assert_eq!(o.number("b", &mut p), None);
        assert_eq!(o.text("n", &mut p), None);
        assert_eq!(o.rate("r", &mut p), Some(Rate::AllAtOnce));
        assert_eq!(o.rate("s", &mut p), None);
        assert_eq!(o.counts("l", &mut p), None);
        assert_eq!(o.required("zz", &mut p, Obj::number), None);
        assert_eq!(o.count("n", &mut p), Some(3));
        assert_eq!(p.len(), 6, "{p:?}");
        assert_eq!(p[0], "top.a: -1: must not be negative");
        assert_eq!(p[1], "top.b: NaN: not a finite number");
        assert_eq!(p[5], "top.zz: missing");
    }

    #[test]
    fn dates_and_loads() {
        assert_eq!(date_of("20260413-093028").as_deref(), Some("2026-04-13"));
        assert_eq!(
            date_of("2025-10-07T12:01:02.5").as_deref(),
            Some("2025-10-07")
        );
        assert_eq!(date_of("yesterday"), None);
        let mut notes = Vec::new();
        assert_eq!(
            load_of(Rate::AllAtOnce, 1.0, None, Some(8), &mut notes),
            Some(Load::ClosedLoop { concurrency: 8 })
        );
        assert_eq!(notes.len(), 1);
        assert_eq!(
            load_of(Rate::PerSecond(2.0), 0.5, Some(4), None, &mut notes),
            Some(Load::Rate {
                req_s: 2.0,
                burstiness: 0.5,
                concurrency: Some(4)
            })
        );
        assert_eq!(mean_length(2029, 8), Lengths::Fixed { tokens: 254 });
    }
}
