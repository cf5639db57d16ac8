//! Calibration of the live engine's own ops at a model's shapes (`twin calibrate --plan
//! live --model M`), and their fits: one cost function per op and static key (the
//! widths the model fixes), linear in the call's variables with nonnegative
//! coefficients, `t = c0 + c1 * var1 + ...` (variables as `engine::op::live::Call`
//! names them: rows, expert groups, positions read, bytes). The simulator's fitted
//! cost model (`sim::cost::fitted`) prices a step's calls with these coefficients.
//!
//! Plan: for every static key a run of the model needs (`LiveModel::required_keys`),
//! points over the variables' range in a run: rows from 1 to past a prefill chunk's
//! routed rows, expert groups from 1 to every expert, attention and indexer rows of
//! decode batches and prefill chunks over contexts of a few thousand tokens. Inputs
//! rotate over one copy per layer, as the run's weights and KV do.

use crate::fit::fit_linear;
use crate::log::Row;
use crate::plan::PlanSize;
use engine::op::{
    AddShape, ArgmaxShape, CombineShape, GateShape, GatherRowsShape, IndexerPagedShape,
    KvWriteShape, LinearShape, NormShape, SwigluShape,
};
use engine::{AttnShape, CopyShape, OpSpec, Point};
use kernels::{AttnModeKind, WeightDtype};
use serde::{Deserialize, Serialize};
use sim::cost::fitted::{CallKey, LiveCall, LiveModel};
use std::collections::{BTreeMap, HashMap};

/// The fitted cost function of one static key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveFit {
    /// `t = coefficients_s[0] + sum_i coefficients_s[i] * vars[i - 1]`.
    pub vars: Vec<String>,
    pub coefficients_s: Vec<f64>,
    pub points: usize,
    pub mape: f64,
    pub loo_mape: f64,
}

/// The simulator's view of a measured point: its static key and regressors.
pub fn point_call(p: &Point) -> Option<LiveCall> {
    let c = OpSpec::from_point(p)?.call()?;
    Some(LiveCall {
        op: c.op,
        dtype: c.dtype,
        key: c.key,
        vars: c.vars,
    })
}

fn grid(size: PlanSize, smoke: &[usize], quick: &[usize], full: &[usize]) -> Vec<usize> {
    match size {
        PlanSize::Smoke => smoke.to_vec(),
        PlanSize::Quick => quick.to_vec(),
        PlanSize::Full => full.to_vec(),
    }
}

/// The points measuring every op a run of `model` on `dep` ranks with `drafts` MTP
/// drafts prices.
pub fn plan_live(model: &LiveModel, dep: usize, drafts: u32, size: PlanSize) -> Vec<OpSpec> {
    let layers = model.layers.len().max(1);
    let dtype = WeightDtype::parse(model.dtype).unwrap_or(WeightDtype::Bf16);
    let experts = model.moe.map_or(1, |m| m.0 / dep.max(1)).max(1);
    // A linear measurement cycles through a table as large as a step's weights (capped
    // at 256 MiB), so each matrix comes back as rarely as in a run.
    let step_bytes = model.linear_weight_bytes(dep).min(256 << 20);
    // Rows as a run has them: decode batches (a few to ~64 rows), prefill chunks (up to
    // the chunk budget, twice that routed to experts); dense in the decode range.
    let rows = grid(
        size,
        &[1, 4, 16],
        &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
        &[
            1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
        ],
    );
    let row_ops = grid(
        size,
        &[1, 8, 32],
        &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
        &[
            1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512,
        ],
    );
    let groups = grid(
        size,
        &[1, 2],
        &[1, 2, 4, 8, 16],
        &[1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64],
    );
    // (requests, new tokens, context): decode batches, then prefill chunks.
    let new = 1 + drafts as usize;
    let attn_pts: Vec<(usize, usize, usize)> = match size {
        PlanSize::Smoke => vec![(1, new, 16), (2, new, 40), (1, 8, 0), (1, 8, 24)],
        PlanSize::Quick => vec![
            (1, new, 128),
            (1, new, 1024),
            (4, new, 256),
            (8, new, 1024),
            (16, new, 512),
            (32, new, 2048),
            (1, 64, 0),
            (1, 256, 0),
            (1, 256, 1024),
            (1, 256, 2048),
        ],
        PlanSize::Full => vec![
            (1, new, 128),
            (1, new, 2048),
            (4, new, 512),
            (8, new, 1024),
            (16, new, 256),
            (32, new, 3072),
            (1, 32, 0),
            (1, 64, 0),
            (1, 256, 0),
            (1, 256, 1024),
            (1, 256, 2048),
            (1, 128, 3072),
        ],
    };
    let mut v = Vec::new();
    for key in model.required_keys(dep, drafts) {
        let k = |name: &str| {
            key.key
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, x)| *x as usize)
                .unwrap_or(0)
        };
        match key.op.as_str() {
            "linear" => {
                let (n, kin) = (k("n"), k("k"));
                let table = step_bytes
                    .div_ceil(dtype.weight_bytes(n, kin).max(1))
                    .max(experts);
                for &r in &rows {
                    for &g in &groups {
                        let g = g.min(experts);
                        if g > r || (g > 1 && r < 4) {
                            continue;
                        }
                        let spec = OpSpec::Linear(LinearShape {
                            dtype,
                            n,
                            k: kin,
                            groups: g,
                            rows: r,
                            experts: table,
                            copies: table.div_ceil(g).min(256),
                        });
                        if !v.contains(&spec) {
                            v.push(spec);
                        }
                    }
                }
            }
            "attn_dense" | "attn_sparse" | "attn_window" | "indexer_paged" => {
                for &(requests, new_tokens, context) in &attn_pts {
                    v.push(match key.op.as_str() {
                        "indexer_paged" => OpSpec::IndexerPaged(IndexerPagedShape {
                            requests,
                            new_tokens,
                            context,
                            heads: k("heads"),
                            dim: k("dim"),
                            topk: k("topk"),
                            page: k("page"),
                            copies: layers,
                        }),
                        op => OpSpec::Attention(AttnShape {
                            mode: match op {
                                "attn_dense" => AttnModeKind::Dense,
                                "attn_sparse" => AttnModeKind::Sparse(k("topk")),
                                _ => AttnModeKind::Window(k("window")),
                            },
                            batch: requests,
                            heads: k("heads"),
                            dim: k("dim"),
                            context,
                            page: k("page"),
                            new_tokens,
                            copies: Some(layers),
                        }),
                    });
                }
            }
            "copy" => {
                for b in grid(
                    size,
                    &[4096, 65536],
                    &[16 << 10, 256 << 10, 1 << 20, 4 << 20],
                    &[
                        4 << 10,
                        16 << 10,
                        64 << 10,
                        256 << 10,
                        1 << 20,
                        4 << 20,
                        16 << 20,
                    ],
                ) {
                    v.push(OpSpec::AllToAll(CopyShape {
                        bytes: b as u64,
                        peers: 1,
                    }));
                }
            }
            op => {
                for &r in &row_ops {
                    v.push(match op {
                        "rmsnorm" => OpSpec::Rmsnorm(NormShape {
                            rows: r,
                            dim: k("dim"),
                            residual: k("residual"),
                        }),
                        "swiglu" => OpSpec::Swiglu(SwigluShape {
                            rows: r,
                            ffn: k("ffn"),
                        }),
                        "gate_topk" => OpSpec::GateTopk(GateShape {
                            rows: r,
                            experts: k("experts"),
                            topk: k("topk"),
                        }),
                        "gather_rows" => OpSpec::GatherRows(GatherRowsShape {
                            rows: r,
                            dim: k("dim"),
                            table_rows: model.vocab,
                        }),
                        "moe_combine" => OpSpec::MoeCombine(CombineShape {
                            rows: r,
                            topk: k("topk"),
                            dim: k("dim"),
                        }),
                        "add" => OpSpec::Add(AddShape {
                            rows: r,
                            dim: k("dim"),
                        }),
                        "kv_write" => OpSpec::KvWrite(KvWriteShape {
                            rows: r,
                            dim: k("dim"),
                            slots: 65536,
                        }),
                        "argmax" => OpSpec::Argmax(ArgmaxShape { rows: r, n: k("n") }),
                        other => unreachable!("the fitted cost model names no op {other}"),
                    });
                }
            }
        }
    }
    v
}

/// Fits every static key with enough points among `rows` (live points only); keys
/// that cannot be fitted are listed with why.
pub fn fit_live(rows: &[Row]) -> (BTreeMap<String, LiveFit>, BTreeMap<String, String>) {
    // Per key: variable names, regressors and times of its points.
    type Points = (Vec<String>, Vec<Vec<f64>>, Vec<f64>);
    let mut by_key: BTreeMap<String, Points> = BTreeMap::new();
    for r in rows {
        let Some(c) = point_call(&r.point()) else {
            continue;
        };
        let e = by_key.entry(c.static_key().to_string()).or_insert_with(|| {
            (
                c.vars.iter().map(|(n, _)| n.to_string()).collect(),
                Vec::new(),
                Vec::new(),
            )
        });
        e.1.push(c.features());
        e.2.push(r.median_s);
    }
    let mut fits = BTreeMap::new();
    let mut skipped = BTreeMap::new();
    for (key, (vars, x, t)) in by_key {
        if x.len() < vars.len() + 2 {
            skipped.insert(
                key,
                format!("{} points for {} coefficients", x.len(), vars.len() + 1),
            );
            continue;
        }
        if t.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
            skipped.insert(key, "non-finite or non-positive times".into());
            continue;
        }
        match fit_linear(&x, &t) {
            Some(f) => {
                fits.insert(
                    key,
                    LiveFit {
                        vars,
                        coefficients_s: f.beta,
                        points: x.len(),
                        mape: f.mape,
                        loo_mape: f.loo_mape,
                    },
                );
            }
            None => {
                skipped.insert(key, "no nonnegative least-squares solution".into());
            }
        }
    }
    (fits, skipped)
}

/// A profile's live fits as the simulator's fitted cost model takes them; keys that do
/// not parse are left out (the model then reports them missing).
pub fn coefficients(fits: &BTreeMap<String, LiveFit>) -> HashMap<CallKey, Vec<f64>> {
    fits.iter()
        .filter_map(|(k, f)| Some((k.parse::<CallKey>().ok()?, f.coefficients_s.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_recover_a_known_linear_cost() {
        let spec = |r: usize, g: usize| {
            OpSpec::Linear(LinearShape {
                dtype: WeightDtype::Bf16,
                n: 64,
                k: 256,
                groups: g,
                rows: r,
                experts: 8,
                copies: 1,
            })
        };
        let mut rows = Vec::new();
        for r in [1, 4, 16, 64] {
            for g in [1, 2, 4] {
                let t = 2e-6 + 3e-6 * g as f64 + 5e-7 * r as f64;
                let p = spec(r, g).point();
                rows.push(Row {
                    op: p.op,
                    shape: p.shape,
                    dtype: p.dtype,
                    median_s: t,
                    p10_s: t,
                    p90_s: t,
                    bytes: 1,
                    flops: 1,
                    achieved_bytes_per_s: 1.0,
                    achieved_flops_per_s: 1.0,
                    device: "d".into(),
                    driver: "x".into(),
                    timestamp: "t".into(),
                    note: String::new(),
                });
            }
        }
        let (fits, skipped) = fit_live(&rows);
        assert!(skipped.is_empty(), "{skipped:?}");
        let f = &fits["linear[bf16] n=64 k=256"];
        assert_eq!(f.vars, vec!["groups", "rows"]);
        for (got, want) in f.coefficients_s.iter().zip([2e-6, 3e-6, 5e-7]) {
            assert!(
                (got - want).abs() < 1e-9 * want.max(1e-9) + 1e-12,
                "{:?}",
                f.coefficients_s
            );
        }
        let c = coefficients(&fits);
        assert_eq!(c.len(), 1);
    }
}
