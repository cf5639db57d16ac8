//! The terms `twin calibrate --from-runs` fits, how they apply to a set-up record,
//! and each record linearised in them by whole simulations (the fit itself is
//! `calibration::runs`).

use super::load::Base;
use super::predict::{simulate_setup, Center};
use super::setup::{setup, Cache, Setup};
use super::MeasuredError;
use calibration::runs::{Curve, Obs, Term};
use corpus::{Metric, RunRecord, Stat};
use rayon::prelude::*;

/// The metrics a fit uses, in the order of an observation's `metric` index.
pub const METRICS: [Metric; 2] = [Metric::TtftMs, Metric::TpotMs];

/// Weights of the metrics in a fit: TPOT's log errors count four times TTFT's (a
/// queueing figure: its mean over a closed loop's first wave jumps as step times
/// cross each other).
pub const WEIGHTS: [f64; 2] = [0.25, 1.0];

/// The fitted terms: in-situ factors per phase and op family (element-wise kernels
/// apart from the GEMMs: how many an engine fuses is its own, not a model's), the
/// host's exposed time per step and the front end's per request. Priors:
/// isolated-kernel prices (factor 1) and the engines' own host terms
/// (`sim::cost::host`, `sim::serving::scheduler`); a factor's prior sd is ln 2, a
/// second's 20 ms (front end) and 2 ms (per step).
pub const TERMS: [Term; 11] = [
    factor("in_situ.decode.gemm"),
    factor("in_situ.decode.attention"),
    factor("in_situ.decode.moe"),
    factor("in_situ.decode.elementwise"),
    factor("in_situ.prefill.gemm"),
    factor("in_situ.prefill.attention"),
    factor("in_situ.prefill.moe"),
    factor("in_situ.prefill.elementwise"),
    Term {
        key: "host.gap_s",
        log: false,
        prior: sim::cost::host::ASYNC_GAP_S,
        sd: 2e-3,
        step: 1e-3,
    },
    Term {
        key: "frontend_s",
        log: false,
        prior: sim::serving::scheduler::VLLM_FRONTEND_S,
        sd: 20e-3,
        step: 10e-3,
    },
    Term {
        key: "frontend_chunk_s",
        log: false,
        prior: sim::serving::scheduler::ENGINE_FRONTEND_CHUNK_S,
        sd: 50e-6,
        step: 50e-6,
    },
];

/// The front end's values (seconds) each record is simulated at when `frontend_s` is
/// fitted (a [`Curve`]: a closed loop's TTFT is not linear in it), the prior among
/// them: from none to the 130 ms of a slow host's API server, denser where a wave's
/// prefills cross a decode step.
pub const FRONTEND_GRID_S: [f64; 11] = [
    0.0,
    0.006,
    sim::serving::scheduler::VLLM_FRONTEND_S,
    0.02,
    0.03,
    0.04,
    0.05,
    0.065,
    0.08,
    0.1,
    0.13,
];

/// The index of `frontend_s` in `TERMS`.
pub fn frontend_term() -> usize {
    TERMS
        .iter()
        .position(|t| t.key == "frontend_s")
        .unwrap_or(TERMS.len() - 1)
}

const fn factor(key: &'static str) -> Term {
    Term {
        key,
        log: true,
        prior: 1.0,
        sd: std::f64::consts::LN_2,
        step: 0.2,
    }
}

/// Sets the terms (`values[k]` of `TERMS[k]`) on a set-up record, as a profile's
/// group applies them (`scenario::runs_profile::apply_terms`).
pub fn apply(s: &mut Setup, values: &[f64]) -> Result<(), MeasuredError> {
    let g = calibration::runs::GroupFit {
        terms: TERMS
            .iter()
            .zip(values)
            .map(|(t, v)| (t.key.to_string(), *v))
            .collect(),
        ..empty_group()
    };
    apply_group(s, &g)
}

/// Sets a profile group's terms on a set-up record.
pub fn apply_group(s: &mut Setup, g: &calibration::runs::GroupFit) -> Result<(), MeasuredError> {
    let term = |e: String| MeasuredError::Term(e);
    let serving = scenario::runs_profile::apply_terms(&mut s.resolved.params, g)
        .map_err(|e| term(e.to_string()))?;
    if serving != Default::default() {
        s.resolved
            .change(|sc, _| serving.set_on(&mut sc.serving, false))
            .map_err(|e| term(format!("{e:#}")))?;
    }
    Ok(())
}

fn empty_group() -> calibration::runs::GroupFit {
    calibration::runs::GroupFit {
        engine: String::new(),
        family: String::new(),
        gpus: Vec::new(),
        models: Vec::new(),
        records: 0,
        terms: Default::default(),
        fitted: Vec::new(),
        band: Default::default(),
        physics_alone: false,
        term_spread: Default::default(),
        model_bands: Default::default(),
        cv: Default::default(),
    }
}

/// The log-figures a record's observations compare: (metric index, log measured).
fn targets(rec: &RunRecord, center: Center) -> Vec<(usize, f64)> {
    METRICS
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let v = rec
                .figure(*m, Stat::Center)
                .or_else(|| rec.figure(*m, center_stat(center)))?;
            Some((i, v.ln()))
        })
        .collect()
}

/// The predicted statistic a record's central figure is compared with.
pub fn center_stat(center: Center) -> Stat {
    match center {
        Center::P50 => Stat::P50,
        Center::Mean => Stat::Mean,
    }
}

/// The predictions of `METRICS` of a set-up record under `values`.
fn predictions(base: &Setup, values: &[f64], center: Center) -> Result<Vec<f64>, MeasuredError> {
    let mut s = base.clone();
    apply(&mut s, values)?;
    let (p, _) = simulate_setup(&s)?;
    METRICS
        .iter()
        .map(|m| {
            p.get(*m, center_stat(center))
                .filter(|v| *v > 0.0)
                .ok_or_else(|| {
                    MeasuredError::Simulation(format!("simulation: no {} predicted", m.key()))
                })
        })
        .collect()
}

/// One record linearised at the priors: its observations, or why it has none; with
/// `frontend_curve`, each also simulated along the front end's grid
/// ([`FRONTEND_GRID_S`]).
pub fn linearise(
    rec: &RunRecord,
    base: &Base,
    cache: &Cache,
    (seed, center): (u64, Center),
    frontend_curve: bool,
) -> Result<Vec<Obs>, MeasuredError> {
    let targets = targets(rec, center);
    if targets.is_empty() {
        return Err(MeasuredError::Invalid("no TTFT or TPOT measured".into()));
    }
    let s = setup(rec, base, cache, seed)?;
    let prior: Vec<f64> = TERMS.iter().map(|t| t.prior).collect();
    let y0 = predictions(&s, &prior, center)?;
    let mut grad = vec![vec![0.0; TERMS.len()]; METRICS.len()];
    for (k, t) in TERMS.iter().enumerate() {
        let mut v = prior.clone();
        v[k] = t.value(t.param(t.prior) + t.step);
        let y = predictions(&s, &v, center)?;
        // Every term adds time: a step that comes out negative is the discrete
        // schedule's jitter (a wave of prefills landing on another step boundary),
        // not a sensitivity, and is read as none.
        for (m, row) in grad.iter_mut().enumerate() {
            row[k] = ((y[m] - y0[m]) / (v[k] - prior[k])).max(0.0);
        }
    }
    let fe = frontend_term();
    let mut curves: Vec<Option<Curve>> = vec![None; METRICS.len()];
    if frontend_curve {
        let mut points = vec![Vec::new(); METRICS.len()];
        for x in FRONTEND_GRID_S {
            let y = if x == prior[fe] {
                y0.clone()
            } else {
                let mut v = prior.clone();
                v[fe] = x;
                predictions(&s, &v, center)?
            };
            for (m, pts) in points.iter_mut().enumerate() {
                pts.push((x, y[m]));
            }
        }
        for (c, points) in curves.iter_mut().zip(points) {
            *c = Some(Curve { term: fe, points });
        }
    }
    Ok(targets
        .into_iter()
        .map(|(m, target)| Obs {
            metric: m,
            y0: y0[m],
            grad: grad[m].clone(),
            target,
            curve: curves[m].clone(),
        })
        .collect())
}

/// Every record linearised, in order (in parallel).
pub fn linearise_all(
    records: &[&RunRecord],
    base: &Base,
    cache: &Cache,
    (seed, center): (u64, Center),
    frontend_curve: bool,
) -> Vec<Result<Vec<Obs>, MeasuredError>> {
    records
        .par_iter()
        .map(|r| linearise(r, base, cache, (seed, center), frontend_curve))
        .collect()
}

/// The log-predictions of a record simulated under `values` (the fit's check by
/// simulation).
pub fn simulate_with(
    rec: &RunRecord,
    base: &Base,
    cache: &Cache,
    seed: u64,
    center: Center,
    values: &[f64],
) -> Result<Vec<f64>, MeasuredError> {
    let s = setup(rec, base, cache, seed)?;
    Ok(predictions(&s, values, center)?
        .into_iter()
        .map(f64::ln)
        .collect())
}

/// The fit group of a record: its engine and its GPU's family.
pub fn group_of(rec: &RunRecord) -> (String, String) {
    (
        rec.engine.name.key().to_string(),
        calibration::runs::family(&rec.gpu.hardware).to_string(),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::load::Base;
    use corpus::*;

    /// Every term of the shipped runs profile is a term of this fit (a key the fit
    /// does not know would be applied by `CostParams::set` without its meaning).
    #[test]
    fn the_shipped_terms_are_the_fits() {
        let p = scenario::runs_profile::shipped().expect("scenarios/runs/fitted.toml reads");
        assert!(!p.groups.is_empty());
        for g in &p.groups {
            for k in g.terms.keys() {
                assert!(
                    TERMS.iter().any(|t| t.key == k),
                    "{} on {}: {k} is no term",
                    g.engine,
                    g.family
                );
            }
        }
    }

    /// A Llama-3.1 run (8B on one H100, or 70B in FP8 on `tp` of them) under vLLM:
    /// `conc` users, fixed lengths.
    pub(crate) fn record(id: &str, tp: u32, conc: u32, input: u32, output: u32) -> RunRecord {
        let big = tp > 1;
        RunRecord {
            schema: SCHEMA.into(),
            id: id.into(),
            provenance: Provenance {
                source: "synthetic: twin's own prediction under known terms".into(),
                ..Default::default()
            },
            engine: Engine {
                name: EngineName::Vllm,
                version: None,
                image: None,
                settings: Default::default(),
            },
            model: ModelRef {
                id: if big {
                    "meta-llama/Llama-3.1-70B"
                } else {
                    "meta-llama/Llama-3.1-8B"
                }
                .into(),
                config: if big {
                    "models/Llama-3.1-70B/config.json"
                } else {
                    "models/Llama-3.1-8B/config.json"
                }
                .into(),
                gemm: if big { Format::Fp8Tensor } else { Format::Bf16 },
                moe: None,
                kv: None,
            },
            gpu: Gpu {
                system: "h100_sxm".into(),
                hardware: "h100".into(),
            },
            layout: Layout::Aggregated {
                workers: Workers {
                    count: Some(1),
                    tp,
                    pp: 1,
                    attention_dp: 1,
                    moe_tp: tp,
                    moe_ep: 1,
                    max_batch: None,
                },
            },
            client: Client {
                tool: "synthetic".into(),
                load: Load::ClosedLoop { concurrency: conc },
                num_prompts: Some(3 * conc as u64),
                warmup_requests: 0,
                input: Lengths::Fixed { tokens: input },
                output: Lengths::Fixed { tokens: output },
                shared_prefix: 0,
                ignore_eos: true,
                held: Vec::new(),
            },
            measured: Default::default(),
        }
    }

    /// A profile group priced by physics alone applies none of its terms (here a
    /// decode GEMM factor of 3 that would triple the step) but gives its band; the same
    /// group with its terms applying prices the record slower.
    #[test]
    fn a_physics_alone_group_gives_its_band_and_no_terms() {
        let base = Base::Embedded("runs/");
        let cache = Cache::default();
        let rec = record("p", 1, 4, 512, 64);
        let mut g = calibration::runs::GroupFit {
            engine: "vllm".into(),
            family: "hopper".into(),
            terms: [("in_situ.decode.gemm".to_string(), 3.0)].into(),
            band: [("tpot_ms".to_string(), [0.8, 1.3])].into(),
            physics_alone: true,
            ..empty_group()
        };
        let profile = |g: &calibration::runs::GroupFit| calibration::runs::RunsProfile {
            kind: "runs".into(),
            version: 1,
            created_by: String::new(),
            created_utc: String::new(),
            corpus: String::new(),
            filters: Vec::new(),
            center: "mean".into(),
            seed: 1,
            groups: vec![g.clone()],
        };
        let tpot = |p: Option<&calibration::runs::RunsProfile>| {
            let out = crate::predict::predict_all(&[&rec], &base, &cache, 1, p, false)
                .pop()
                .unwrap();
            let y = out.result.unwrap().get(Metric::TpotMs, Stat::Mean).unwrap();
            (y, out.band)
        };
        let (physics, no_band) = tpot(None);
        assert!(no_band.is_empty());
        let (alone, band) = tpot(Some(&profile(&g)));
        assert_eq!(alone, physics);
        assert_eq!(band["tpot_ms"], [0.8, 1.3]);
        g.physics_alone = false;
        let (fitted, band) = tpot(Some(&profile(&g)));
        assert!(fitted > 1.5 * physics, "{fitted} against {physics}");
        assert_eq!(band["tpot_ms"], [0.8, 1.3]);
    }

    /// The API server's time per streamed chunk (`frontend_chunk_s`) moves TTFT where
    /// many requests stream, and barely where one does: at one user the stream is one
    /// chunk a step; at 64, sixty-four. The outputs' lengths vary (128-384 tokens): with
    /// equal ones the requests end and return in waves, and the mean TTFT at 64 users
    /// moves with which step boundary a wave lands on (8.6 ms down at 50 us a chunk since
    /// requests sent together pass the tokenizer in turn), not with the delay itself.
    #[test]
    fn the_streaming_cost_moves_ttft_where_many_requests_stream() {
        let base = Base::Embedded("runs/");
        let cache = Cache::default();
        let k = TERMS
            .iter()
            .position(|t| t.key == "frontend_chunk_s")
            .expect("a term");
        let ttft_grad = |users| {
            let mut r = record("r", 1, users, 512, 256);
            r.client.output = Lengths::Uniform {
                low: 128,
                high: 384,
            };
            let measured = [(Stat::Center, 100.0)].into_iter().collect();
            r.measured.insert(Metric::TtftMs, measured);
            let obs = linearise(&r, &base, &cache, (1, Center::Mean), false).unwrap();
            obs.iter().find(|o| o.metric == 0).expect("TTFT").grad[k]
        };
        let (one, many) = (ttft_grad(1), ttft_grad(64));
        assert!(many > 20.0 * one && many > 0.0, "{one} {many}");
    }

    /// Runs twin generates with known terms set (decode GEMMs x1.3, prefill GEMMs x0.8,
    /// a 30 ms front end, the rest at their priors), taken as measured: the fit of the
    /// linearised records, under priors a hundred times weaker than the shipped ones
    /// (so the data decide), recovers the three terms. Not exactly: the linear model is
    /// one step from the priors, so the tolerances are a few percent; the front end is
    /// searched along its simulated curve.
    #[test]
    fn the_fit_recovers_terms_set_in_synthetic_runs() {
        let base = Base::Embedded("runs/");
        let cache = Cache::default();
        let mut truth: Vec<f64> = TERMS.iter().map(|t| t.prior).collect();
        truth[0] = 1.3; // in_situ.decode.gemm
        truth[4] = 0.8; // in_situ.prefill.gemm
        truth[9] = 0.030; // frontend_s
        let shapes = [
            (1, 1, 1024, 128),
            (1, 4, 2048, 256),
            (1, 16, 512, 512),
            (1, 8, 4096, 64),
            (1, 32, 256, 256),
            (1, 64, 128, 128),
            (4, 1, 16384, 16),
            (4, 24, 1024, 1024),
            (8, 3, 256, 2048),
            (8, 16, 2048, 128),
            (2, 8, 8192, 64),
            (2, 32, 512, 256),
        ];
        let records: Vec<RunRecord> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(tp, c, inp, out))| {
                let mut r = record(&format!("r{i}"), tp, c, inp, out);
                let y = simulate_with(&r, &base, &cache, 1, Center::Mean, &truth).unwrap();
                for (m, metric) in METRICS.iter().enumerate() {
                    r.measured
                        .insert(*metric, [(Stat::Center, y[m].exp())].into_iter().collect());
                }
                r
            })
            .collect();
        let refs: Vec<&RunRecord> = records.iter().collect();
        let weak: Vec<Term> = TERMS
            .iter()
            .map(|t| Term {
                sd: 100.0 * t.sd,
                ..*t
            })
            .collect();
        // Linear in every term, then with the front end's curve (as `calibrate
        // --from-runs` linearises when the front end is fitted): the curve is simulated
        // with the other terms at their priors, so their interplay with it (a slower
        // step meets the front end's delay elsewhere) moves the prefill factor more.
        for (curve, prefill_tol) in [(false, 0.10), (true, 0.15)] {
            let lins = linearise_all(&refs, &base, &cache, (1, Center::Mean), curve);
            let obs: Vec<Obs> = lins.into_iter().flat_map(|l| l.unwrap()).collect();
            let all: Vec<&Obs> = obs.iter().collect();
            let p = calibration::runs::fit(&all, &weak, &WEIGHTS);
            let v: Vec<f64> = TERMS.iter().zip(&p).map(|(t, x)| t.value(*x)).collect();
            assert!((v[0] / 1.3 - 1.0).abs() < 0.05, "decode gemm {curve} {v:?}");
            assert!(
                (v[4] / 0.8 - 1.0).abs() < prefill_tol,
                "prefill gemm {curve} {v:?}"
            );
            assert!((v[9] - 0.030).abs() < 0.005, "front end {curve} {v:?}");
            // None set, none found (a linear term steps below zero at most by a hair).
            assert!(v[10].abs() < 5e-6, "streaming {curve} {v:?}");
        }
    }
}
