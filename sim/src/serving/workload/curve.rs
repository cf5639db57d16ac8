//! A load that varies over the day: multipliers of a workload's nominal load (its
//! `rate_per_s`, `sessions` or `concurrency`), piecewise linear in the hour and
//! periodic. `twin plan` sizes a deployment for the curve's peak and reports use and
//! money over the whole curve; `twin simulate` applies it to open-loop arrivals (by
//! thinning a Poisson or gamma process at the peak rate) with one curve period lasting
//! `period_s` simulated seconds.

use super::super::config::check;
use serde::{Deserialize, Serialize};
use spec::problem::Problem;

/// Named curve shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CurvePreset {
    /// A working-day shape (assumed, not measured): a night trough at 30% of the peak
    /// around 03:00-05:00, a morning ramp, the peak 10:00-16:00, an evening decline.
    Diurnal,
    /// The nominal load all day (multiplier 1).
    Flat,
}

impl CurvePreset {
    /// The preset's (hour, multiplier) points.
    pub fn points(self) -> Vec<(f64, f64)> {
        match self {
            CurvePreset::Diurnal => vec![
                (0.0, 0.45),
                (3.0, 0.30),
                (5.0, 0.30),
                (7.0, 0.50),
                (9.0, 0.85),
                (10.0, 1.00),
                (16.0, 1.00),
                (18.0, 0.85),
                (21.0, 0.65),
            ],
            CurvePreset::Flat => vec![(0.0, 1.0)],
        }
    }
}

/// The `[rate_curve]` table of a workload: a preset or explicit points (not both).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RateCurve {
    #[serde(default)]
    pub preset: Option<CurvePreset>,
    /// `[hour, multiplier]` pairs, hours in [0, 24) ascending, multipliers >= 0;
    /// linear in between, wrapping from the last point to the first one at 24:00.
    #[serde(default)]
    pub points: Vec<(f64, f64)>,
    /// Simulated seconds one period (24 h of the curve) lasts in `twin simulate`.
    #[serde(default = "d_period")]
    pub period_s: f64,
}

fn d_period() -> f64 {
    86_400.0
}

impl RateCurve {
    /// A curve of `preset`'s shape over a real day.
    pub fn preset(preset: CurvePreset) -> Self {
        RateCurve {
            preset: Some(preset),
            points: Vec::new(),
            period_s: d_period(),
        }
    }

    /// The (hour, multiplier) points in force.
    pub fn resolved(&self) -> Vec<(f64, f64)> {
        match self.preset {
            Some(p) if self.points.is_empty() => p.points(),
            _ => self.points.clone(),
        }
    }

    /// The multiplier at `hour` (any real; taken modulo 24).
    pub fn at_hour(&self, hour: f64) -> f64 {
        multiplier(&self.resolved(), hour)
    }

    /// The largest multiplier (the load a deployment must carry).
    pub fn peak(&self) -> f64 {
        self.resolved().iter().map(|p| p.1).fold(0.0, f64::max)
    }

    /// The multiplier at each of the 24 hours' midpoints, 00:30 to 23:30.
    pub fn hourly(&self) -> Vec<f64> {
        let pts = self.resolved();
        (0..24).map(|h| multiplier(&pts, h as f64 + 0.5)).collect()
    }

    /// Mean multiplier over the day (the hourly midpoints' mean).
    pub fn mean(&self) -> f64 {
        self.hourly().iter().sum::<f64>() / 24.0
    }

    /// The multiplier `t_s` simulated seconds into the run.
    pub fn at_sim_s(&self, t_s: f64) -> f64 {
        self.at_hour(24.0 * t_s / self.period_s)
    }

    /// Every problem with the table at `path`, appended to `p`.
    pub fn problems<P: From<Problem>>(&self, path: &str, p: &mut Vec<P>) {
        check(
            p,
            self.preset.is_some() == self.points.is_empty(),
            path,
            "set exactly one of `preset` and `points`",
        );
        let hours_ok = self
            .points
            .iter()
            .all(|&(h, _)| h.is_finite() && (0.0..24.0).contains(&h))
            && self.points.windows(2).all(|w| w[0].0 < w[1].0);
        check(
            p,
            hours_ok,
            &format!("{path}.points"),
            "hours must be ascending and in [0, 24)",
        );
        check(
            p,
            self.points.iter().all(|&(_, m)| m.is_finite() && m >= 0.0),
            &format!("{path}.points"),
            "multipliers must be >= 0",
        );
        check(
            p,
            self.preset.is_none() && self.points.is_empty() || self.peak() > 0.0,
            &format!("{path}.points"),
            "the peak multiplier must be > 0",
        );
        check(
            p,
            self.period_s.is_finite() && self.period_s > 0.0,
            &format!("{path}.period_s"),
            "must be > 0",
        );
    }
}

/// Piecewise-linear, 24-hour periodic interpolation of `pts` at `hour`.
fn multiplier(pts: &[(f64, f64)], hour: f64) -> f64 {
    match pts {
        [] => 1.0,
        [(_, m)] => *m,
        _ => {
            let h = hour.rem_euclid(24.0);
            let n = pts.len();
            // The segment [a, b) holding h, the last one wrapping to the first + 24.
            for i in 0..n {
                let (h0, m0) = pts[i];
                let (h1, m1) = if i + 1 < n {
                    pts[i + 1]
                } else {
                    (pts[0].0 + 24.0, pts[0].1)
                };
                let hh = if h < pts[0].0 { h + 24.0 } else { h };
                if hh >= h0 && hh < h1 {
                    return m0 + (m1 - m0) * (hh - h0) / (h1 - h0);
                }
            }
            pts[n - 1].1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_linearly_and_wraps_at_midnight() {
        let c = RateCurve {
            preset: None,
            points: vec![(6.0, 0.2), (12.0, 1.0), (18.0, 0.6)],
            period_s: 86_400.0,
        };
        // Halfway from 06:00 (0.2) to 12:00 (1.0): 0.6.
        assert!((c.at_hour(9.0) - 0.6).abs() < 1e-12);
        assert_eq!(c.at_hour(12.0), 1.0);
        // From 18:00 (0.6) to 06:00 next day (0.2) over 12 h: midnight is 0.4, 03:00 0.3.
        assert!((c.at_hour(0.0) - 0.4).abs() < 1e-12);
        assert!((c.at_hour(3.0) - 0.3).abs() < 1e-12);
        assert!((c.at_hour(27.0) - 0.3).abs() < 1e-12);
        assert_eq!(c.peak(), 1.0);
        // Simulated time: a 240 s period puts 09:00 at 90 s.
        let fast = RateCurve {
            period_s: 240.0,
            ..c.clone()
        };
        assert!((fast.at_sim_s(90.0) - 0.6).abs() < 1e-12);
        assert!(c.problems_of().is_empty());
    }

    #[test]
    fn diurnal_preset_peaks_at_one_and_flat_is_one() {
        let d = RateCurve::preset(CurvePreset::Diurnal);
        assert_eq!(d.peak(), 1.0);
        assert_eq!(d.at_hour(13.0), 1.0);
        assert_eq!(d.at_hour(4.0), 0.3);
        assert!(d.mean() > 0.3 && d.mean() < 1.0);
        assert!(d.problems_of().is_empty());
        let f = RateCurve::preset(CurvePreset::Flat);
        assert_eq!((f.peak(), f.mean()), (1.0, 1.0));
    }

    #[test]
    fn bad_curves_are_reported() {
        let bad = RateCurve {
            preset: Some(CurvePreset::Diurnal),
            points: vec![(12.0, 1.0), (3.0, -1.0)],
            period_s: 0.0,
        };
        let p = bad.problems_of();
        assert_eq!(p.len(), 4, "{p:?}");
    }

    /// Open-loop arrivals at 200/s follow a curve from 0.25 at 00:00 to 1 at 12:00 and
    /// back (mean 0.625) over a 100 s day: about 200 x 0.625 x 100 = 12,500 arrivals
    /// (Poisson, standard deviation ~112). The 20 s around noon are hours 9.6 to 14.4,
    /// where the multiplier runs 0.85 -> 1 -> 0.85 (mean 0.925): 200 x 20 x 0.925 = 3,700
    /// arrivals; the 20 s around midnight, 0.40 -> 0.25 -> 0.40 (mean 0.325): 1,300.
    #[test]
    fn open_loop_arrivals_follow_the_curve() {
        use crate::serving::workload::{Driver, WorkloadConfig};
        let wl: WorkloadConfig = serde_json::from_str(
            r#"{"name": "curve", "open_loop": {"rate_per_s": 200,
                "input_tokens": {"dist": "fixed", "value": 10},
                "output_tokens": {"dist": "fixed", "value": 1}},
                "rate_curve": {"points": [[0, 0.25], [12, 1.0]], "period_s": 100}}"#,
        )
        .unwrap();
        assert!(wl.problems().is_empty() && wl.curve_is_simulated());
        let mut d = Driver::new(&wl, &[], crate::serving::streams::stream(3, "workload")).unwrap();
        let mut q = Vec::new();
        d.start(&mut q);
        let (mut all, mut noon, mut midnight) = (0u32, 0u32, 0u32);
        while let Some((t, ev)) = q.pop() {
            if t > 100_000_000_000 {
                break;
            }
            if d.on_event(t, ev, &mut q).is_some() {
                all += 1;
                let s = t as f64 / 1e9;
                noon += u32::from((40.0..60.0).contains(&s));
                midnight += u32::from(!(10.0..90.0).contains(&s));
            }
        }
        assert!((all as f64 / 12_500.0 - 1.0).abs() < 0.03, "{all}");
        assert!((noon as f64 / 3_700.0 - 1.0).abs() < 0.06, "{noon}");
        assert!((midnight as f64 / 1_300.0 - 1.0).abs() < 0.1, "{midnight}");
    }

    impl RateCurve {
        fn problems_of(&self) -> Vec<String> {
            let mut p = Vec::new();
            self.problems("rate_curve", &mut p);
            p
        }
    }
}
