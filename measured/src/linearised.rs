//! The linearised records of a fit (`--linearised FILE`): computed by simulation, or
//! read back from the file when it holds the same corpus, filters, seed and statistic.

use crate::calibrate::FitOptions;
use crate::fit::{linearise_all, FRONTEND_GRID_S, TERMS};
use crate::{Cache, MeasuredError};
use anyhow::Result;
use calibration::runs::{Curve, Obs};
use corpus::RunRecord;

/// The linearised records: read from `--linearised` when it holds this corpus, filters,
/// seed and statistic, else computed (and written there).
pub(crate) fn read_or_compute(
    o: &FitOptions,
    records: &[&RunRecord],
    loaded: &crate::Loaded,
    cache: &Cache,
    frontend_curve: bool,
    say: &dyn Fn(&str),
) -> Result<Vec<Result<Vec<Obs>, MeasuredError>>> {
    let key = serde_json::json!({
        "corpus": loaded.origin, "filters": o.filter, "seed": o.seed,
        "center": format!("{:?}", o.center), "records": records.len(),
        "terms": TERMS.iter().map(|t| t.key).collect::<Vec<_>>(),
        "frontend_curve": frontend_curve.then_some(FRONTEND_GRID_S),
        "twin": env!("CARGO_PKG_VERSION"),
    });
    if let Some(path) = &o.linearised {
        if let Ok(text) = std::fs::read_to_string(path) {
            let v: serde_json::Value = serde_json::from_str(&text)?;
            if v["key"] == key {
                say(&format!("linearised records read from {}", path.display()));
                return Ok(v["records"]
                    .as_array()
                    .map(|rs| rs.iter().map(obs_of_json).collect())
                    .unwrap_or_default());
            }
            say(&format!(
                "{}: linearised for another corpus, filters or seed: computed again",
                path.display()
            ));
        }
    }
    let sims = TERMS.len()
        + 1
        + if frontend_curve {
            FRONTEND_GRID_S.len() - 1
        } else {
            0
        };
    say(&format!(
        "linearising {} records ({sims} simulations each) ...",
        records.len(),
    ));
    let lins = linearise_all(
        records,
        &loaded.base,
        cache,
        (o.seed, o.center),
        frontend_curve,
    );
    if let Some(path) = &o.linearised {
        let rs: Vec<serde_json::Value> = lins.iter().map(obs_to_json).collect();
        let text = serde_json::to_string(&serde_json::json!({"key": key, "records": rs}))?;
        let tmp = path.with_extension("partial");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)?;
    }
    Ok(lins)
}

fn obs_to_json(l: &Result<Vec<Obs>, MeasuredError>) -> serde_json::Value {
    match l {
        Ok(obs) => {
            let obs: Vec<serde_json::Value> = obs
                .iter()
                .map(|o| {
                    let curve = o.curve.as_ref().map(|c| (c.term, &c.points));
                    serde_json::json!([o.metric, o.y0, o.grad, o.target, curve])
                })
                .collect();
            serde_json::json!({ "obs": obs })
        }
        Err(e) => serde_json::json!({"err": e.to_string(), "kind": e.kind()}),
    }
}

fn obs_of_json(v: &serde_json::Value) -> Result<Vec<Obs>, MeasuredError> {
    if let Some(e) = v["err"].as_str() {
        let kind = v["kind"].as_str().unwrap_or_default();
        return Err(MeasuredError::of_kind(kind, e.to_string()));
    }
    let bad = || MeasuredError::Load("a linearised record that does not read".to_string());
    v["obs"]
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|o| {
            Ok(Obs {
                metric: o[0].as_u64().ok_or_else(bad)? as usize,
                y0: o[1].as_f64().ok_or_else(bad)?,
                grad: o[2]
                    .as_array()
                    .ok_or_else(bad)?
                    .iter()
                    .map(|g| g.as_f64().ok_or_else(bad))
                    .collect::<Result<_, _>>()?,
                target: o[3].as_f64().ok_or_else(bad)?,
                curve: curve_of_json(&o[4]).ok_or_else(bad)?,
            })
        })
        .collect()
}

/// A linearised observation's curve: `null`, or `[term, [[value, prediction], ...]]`
/// (`None`: it does not read).
fn curve_of_json(v: &serde_json::Value) -> Option<Option<Curve>> {
    if v.is_null() {
        return Some(None);
    }
    let term = v[0].as_u64()? as usize;
    let points = v[1]
        .as_array()?
        .iter()
        .map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
        .collect::<Option<Vec<_>>>()?;
    (term < TERMS.len() && !points.is_empty()).then_some(Some(Curve { term, points }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::frontend_term;

    /// A linearised record written to `--linearised` reads back whole, its front-end
    /// curve included; a curve that names no term does not read.
    #[test]
    fn linearised_records_round_trip_with_their_curves() {
        let o = |curve| Obs {
            metric: 1,
            y0: 12.5,
            grad: vec![0.5; TERMS.len()],
            target: 2.5f64.ln(),
            curve,
        };
        let curve = Curve {
            term: frontend_term(),
            points: vec![(0.0, 10.0), (0.012, 12.5), (0.13, 30.0)],
        };
        let recs: Vec<Result<Vec<Obs>, MeasuredError>> = vec![
            Ok(vec![o(Some(curve)), o(None)]),
            Err(MeasuredError::Invalid("no TTFT or TPOT measured".into())),
            Err(MeasuredError::NotModelled("pipeline parallelism".into())),
        ];
        for r in &recs {
            assert_eq!(&obs_of_json(&obs_to_json(r)), r);
        }
        let bad = serde_json::json!({"obs": [[1, 12.5, [0.5], 0.9, [99, [[0.0, 1.0]]]]]});
        assert!(obs_of_json(&bad).is_err());
    }
}
