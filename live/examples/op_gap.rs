//! Diagnostic: a steady decode pass's traced op times (consecutive passes, varied
//! tokens) against a profile's fitted prediction of the same calls, per static key.
use engine::serve::{CpuDevice, Executor, ModelConfig, Seq, Shard, Solo};
use sim::cost::fitted::LiveModelExt;
use spec::call::{Call, CallKey};
use std::collections::{BTreeMap, HashMap};

fn main() {
    let profile = std::env::args().nth(1).expect("PROFILE");
    let batch: usize = std::env::args().nth(2).map_or(1, |s| s.parse().unwrap());
    let p = calibration::Profile::load(std::path::Path::new(&profile)).unwrap();
    let coefs = calibration::live::coefficients(&p.live);
    let cfg = live_moe_config();
    let mut exec = Executor::new(
        Box::new(CpuDevice::new()),
        cfg.clone(),
        Shard {
            seed: 7,
            rank: 0,
            ranks: 1,
            pages: 160,
        },
    )
    .unwrap();
    let vocab = cfg.vocab as u32;
    let ctx = 320usize;
    let pages_per = (ctx + 2).div_ceil(cfg.page_size);
    prefill(&mut exec, batch, ctx, pages_per, vocab);
    let mut meas: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut pred: BTreeMap<String, f64> = BTreeMap::new();
    exec.set_trace(true);
    let reps = 40;
    for k in 0..reps + 5 {
        let d: Vec<Seq> = (0..batch)
            .map(|b| Seq {
                tokens: vec![
                    (k as u32 * 13 + b as u32 * 7) % vocab,
                    (k as u32 * 17 + 5) % vocab,
                ],
                start: ctx,
                pages: ((b * pages_per) as u32..((b + 1) * pages_per) as u32).collect(),
                accept: Some(0),
            })
            .collect();
        exec.forward(&d, 1, &mut Solo).unwrap();
        let tr = exec.take_timed_trace();
        if k < 5 {
            continue;
        }
        accumulate(tr, &coefs, &mut meas, &mut pred);
    }
    print_gap(&meas, &pred, reps);
}

/// The engine configuration of the shipped `cpu-live-moe` model.
fn live_moe_config() -> ModelConfig {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scenarios/models/cpu-live-moe.toml"
    );
    let m: spec::model::Model = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let lm = spec::live_model::LiveModel::from_model(&m, live::model::PAGE_TOKENS).unwrap();
    live::model::engine_config(&lm)
}

/// Prefills `batch` requests of `ctx` tokens, each on its own `pages_per` pages.
fn prefill(exec: &mut Executor, batch: usize, ctx: usize, pages_per: usize, vocab: u32) {
    for b in 0..batch {
        let s = [Seq {
            tokens: (0..ctx as u32)
                .map(|i| (i * 7919 + b as u32) % vocab)
                .collect(),
            start: 0,
            pages: ((b * pages_per) as u32..((b + 1) * pages_per) as u32).collect(),
            accept: None,
        }];
        exec.forward(&s, 0, &mut Solo).unwrap();
    }
}

/// Adds one pass's traced times to `meas` and the profile's predictions to `pred`, per
/// static key.
fn accumulate(
    tr: Vec<(Call, f64)>,
    coefs: &HashMap<CallKey, Vec<f64>>,
    meas: &mut BTreeMap<String, Vec<f64>>,
    pred: &mut BTreeMap<String, f64>,
) {
    for (c, t) in tr {
        let sc = spec::call::Call {
            op: c.op,
            dtype: c.dtype,
            key: c.key.clone(),
            vars: c.vars.clone(),
        };
        let key = sc.static_key().to_string();
        meas.entry(key.clone()).or_default().push(t);
        let coef = coefs.get(&sc.static_key()).cloned().unwrap_or_default();
        let f: f64 = coef.iter().zip(sc.features()).map(|(a, x)| a * x).sum();
        *pred.entry(key).or_default() += f;
    }
}

/// Prints the measured and predicted microseconds per pass of each key, and their totals.
fn print_gap(meas: &BTreeMap<String, Vec<f64>>, pred: &BTreeMap<String, f64>, reps: usize) {
    let (mut tm, mut tp) = (0.0, 0.0);
    println!("{:<48} {:>10} {:>10}", "key", "meas us", "pred us");
    for (k, v) in meas {
        let s: f64 = v.iter().sum::<f64>() / reps as f64 * 1e6;
        let q = pred[k] / reps as f64 * 1e6;
        tm += s;
        tp += q;
        println!("{k:<48} {s:>10.1} {q:>10.1}");
    }
    println!("{:<48} {tm:>10.1} {tp:>10.1}", "total per pass");
}
