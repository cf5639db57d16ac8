//! CPU twins of the live model's kernels (see `crate::live` and `cuda/live.cu`).

use super::dot;
use super::fp8_lut;
use super::moe::decode_row;
use crate::live::{
    fp8_row_scale, quantize_fp8, validate_linear, validate_rows, Group, IndexerPagedArgs,
    WeightsRef,
};
use crate::{shape_err, Result};
use rayon::prelude::*;

/// Output columns one task decodes and applies together. A task applies them to every
/// row of its group, so each weight row is decoded once per call and group: the cost
/// of a call is affine in its groups and rows (what the fitted cost model assumes).
const COLS: usize = 8;
/// Least work (values touched, or multiply-adds) worth a task of its own: smaller
/// calls run on the calling thread, so a tiny op costs no thread wake-ups.
pub const MIN_TASK_WORK: usize = 32 * 1024;

/// Items per task so that each carries at least `MIN_TASK_WORK` of `per_item` work.
#[inline]
pub(crate) fn min_len(per_item: usize) -> usize {
    (MIN_TASK_WORK / per_item.max(1)).max(1)
}

/// A raw pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct SyncPtr(*mut f32);
// SAFETY: only used to write disjoint elements from parallel tasks (see `linear`).
unsafe impl Send for SyncPtr {}
unsafe impl Sync for SyncPtr {}

impl SyncPtr {
    fn get(&self) -> *mut f32 {
        self.0
    }
}

/// Grouped linear layer: for each group, `y[r] = W[expert] x[r]` for its rows
/// (`x[rows][k_in]`, `y[rows][n_out]`). Rows outside every group are left untouched.
/// Parallel over (group, block of `COLS` output columns): a task decodes its weight
/// rows once and applies them to every row of its group.
pub fn linear(w: &WeightsRef<'_>, groups: &[Group], x: &[f32], y: &mut [f32]) -> Result<()> {
    validate_linear(w, groups, x.len(), y.len())?;
    let (n, k) = (w.n_out, w.k_in);
    let mut tasks = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        if g.rows > 0 {
            tasks.extend((0..n).step_by(COLS).map(|c0| (gi, c0)));
        }
    }
    let yp = SyncPtr(y.as_mut_ptr());
    let rows_total: usize = groups.iter().map(|g| g.rows as usize).sum();
    // Each task decodes COLS weight rows and applies them to its group's rows.
    let avg_rows = rows_total * n.div_ceil(COLS) / tasks.len().max(1);
    let per_task = COLS * k * (1 + avg_rows);
    tasks
        .into_par_iter()
        .with_min_len(min_len(per_task))
        .for_each_init(
            || vec![0f32; COLS * k],
            |wbuf, (gi, c0)| {
                let g = groups[gi];
                let nc = COLS.min(n - c0);
                for c in 0..nc {
                    let r = g.expert as usize * n + c0 + c;
                    decode_row(
                        w.dtype,
                        w.weights,
                        w.scales,
                        k,
                        r,
                        &mut wbuf[c * k..(c + 1) * k],
                    );
                }
                for t in 0..g.rows as usize {
                    let row = g.start as usize + t;
                    let xr = &x[row * k..(row + 1) * k];
                    for c in 0..nc {
                        let v = dot(&wbuf[c * k..(c + 1) * k], xr);
                        // SAFETY: (row, c0 + c) is written by this task only: groups cover
                        // disjoint rows (validated), and tasks split each group's columns
                        // without overlap. In bounds: row < rows, c0 + c < n.
                        unsafe { *yp.get().add(row * n + c0 + c) = v };
                    }
                }
            },
        );
    Ok(())
}

/// RMSNorm with a fused residual add: per row, `x += delta` (when given), then
/// `out = x / sqrt(mean(x^2) + eps) * weight`.
pub fn rmsnorm(
    x: &mut [f32],
    delta: Option<&[f32]>,
    weight: &[f32],
    out: &mut [f32],
    eps: f32,
) -> Result<()> {
    let dim = weight.len();
    let rows = validate_rows("rmsnorm", x.len(), dim)?;
    if out.len() != x.len() || delta.is_some_and(|d| d.len() != x.len()) {
        return shape_err(
            "rmsnorm",
            format!("{rows} rows: x, delta and out must match"),
        );
    }
    x.par_chunks_mut(dim)
        .zip(out.par_chunks_mut(dim))
        .enumerate()
        .with_min_len(min_len(2 * dim))
        .for_each(|(r, (xr, or))| {
            if let Some(d) = delta {
                for (a, b) in xr.iter_mut().zip(&d[r * dim..(r + 1) * dim]) {
                    *a += b;
                }
            }
            let ss = dot(xr, xr) / dim as f32;
            let inv = 1.0 / (ss + eps).sqrt();
            for ((o, a), g) in or.iter_mut().zip(xr.iter()).zip(weight) {
                *o = a * inv * g;
            }
        });
    Ok(())
}

/// SwiGLU: `gu[rows][2 * ffn]` holds the gate then the up projection of each row;
/// `out[rows][ffn] = silu(gate) * up`, `silu(g) = g / (1 + e^-g)`.
pub fn swiglu(gu: &[f32], out: &mut [f32], ffn: usize) -> Result<()> {
    let rows = validate_rows("swiglu", gu.len(), 2 * ffn)?;
    if out.len() != rows * ffn {
        return shape_err("swiglu", "out size does not match rows * ffn");
    }
    out.par_chunks_mut(ffn)
        .zip(gu.par_chunks(2 * ffn))
        .with_min_len(min_len(4 * ffn))
        .for_each(|(o, r)| {
            let (g, u) = r.split_at(ffn);
            for ((o, &g), &u) in o.iter_mut().zip(g).zip(u) {
                *o = g / (1.0 + (-g).exp()) * u;
            }
        });
    Ok(())
}

/// Softmax gating with top-k: per row of `logits[rows][experts]`, the `k` experts of
/// highest probability (ties to the lower index), in descending order, and their
/// probabilities renormalised to sum to 1.
pub fn gate_topk(
    logits: &[f32],
    experts: usize,
    k: usize,
    ids: &mut [i32],
    weights: &mut [f32],
) -> Result<()> {
    let rows = validate_rows("gate_topk", logits.len(), experts)?;
    if k == 0 || k > experts || k > 32 || ids.len() != rows * k || weights.len() != rows * k {
        return shape_err(
            "gate_topk",
            format!("k = {k} must be in 1..=min(32, experts); ids and weights [rows][k]"),
        );
    }
    logits
        .par_chunks(experts)
        .zip(ids.par_chunks_mut(k))
        .zip(weights.par_chunks_mut(k))
        .with_min_len(min_len(experts * k))
        .for_each(|((l, id), w)| {
            let m = l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let mut taken = [usize::MAX; 32];
            let mut sum = 0f32;
            for j in 0..k {
                let mut best = usize::MAX;
                for (e, &v) in l.iter().enumerate() {
                    if taken[..j].contains(&e) {
                        continue;
                    }
                    if best == usize::MAX || v > l[best] {
                        best = e;
                    }
                }
                taken[j] = best;
                id[j] = best as i32;
                w[j] = (l[best] - m).exp();
                sum += w[j];
            }
            // The softmax denominator cancels in the renormalisation.
            w.iter_mut().for_each(|v| *v /= sum);
        });
    Ok(())
}

/// `out[i] = src[idx[i]]` over rows of `dim` values.
pub fn gather_rows(src: &[f32], dim: usize, idx: &[i32], out: &mut [f32]) -> Result<()> {
    let n_src = validate_rows("gather_rows", src.len(), dim)?;
    if out.len() != idx.len() * dim {
        return shape_err("gather_rows", "out size does not match indices * dim");
    }
    if let Some(i) = idx.iter().find(|&&i| i < 0 || i as usize >= n_src) {
        return shape_err("gather_rows", format!("index {i} outside 0..{n_src}"));
    }
    out.par_chunks_mut(dim)
        .zip(idx.par_iter())
        .for_each(|(o, &i)| {
            o.copy_from_slice(&src[i as usize * dim..(i as usize + 1) * dim]);
        });
    Ok(())
}

/// MoE combine: `out[r] += sum_j weights[r][j] * y[slots[r][j]]` (slots < 0 skipped).
pub fn moe_combine(
    y: &[f32],
    dim: usize,
    slots: &[i32],
    weights: &[f32],
    k: usize,
    out: &mut [f32],
) -> Result<()> {
    let n_y = validate_rows("moe_combine", y.len(), dim)?;
    let rows = validate_rows("moe_combine", out.len(), dim)?;
    if k == 0 || slots.len() != rows * k || weights.len() != rows * k {
        return shape_err("moe_combine", "slots and weights must be [rows][k]");
    }
    if let Some(s) = slots.iter().find(|&&s| s >= n_y as i32) {
        return shape_err("moe_combine", format!("slot {s} outside 0..{n_y}"));
    }
    out.par_chunks_mut(dim)
        .enumerate()
        .with_min_len(min_len(dim * k))
        .for_each(|(r, o)| {
            for j in 0..k {
                let s = slots[r * k + j];
                if s < 0 {
                    continue;
                }
                let wv = weights[r * k + j];
                for (a, &b) in o
                    .iter_mut()
                    .zip(&y[s as usize * dim..(s as usize + 1) * dim])
                {
                    *a += wv * b;
                }
            }
        });
    Ok(())
}

/// `x += y` element-wise.
pub fn add(x: &mut [f32], y: &[f32]) -> Result<()> {
    if x.len() != y.len() {
        return shape_err("add", format!("{} vs {} values", x.len(), y.len()));
    }
    x.par_chunks_mut(4096)
        .zip(y.par_chunks(4096))
        .with_min_len(min_len(4096))
        .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, b)| *a += b));
    Ok(())
}

/// Writes rows of `src[rows][dim]` into cache slots: each row is quantised to fp8 e4m3
/// with one scale (`max |v| / 448`); `cache[slot][dim]`, `scales[slot]`.
pub fn kv_write(
    src: &[f32],
    dim: usize,
    slots: &[i32],
    cache: &mut [u8],
    scales: &mut [f32],
) -> Result<()> {
    let rows = validate_rows("kv_write", src.len(), dim)?;
    let n_slots = scales.len();
    if slots.len() != rows || cache.len() != n_slots * dim {
        return shape_err(
            "kv_write",
            "slots must be [rows]; cache [slots][dim], scales [slots]",
        );
    }
    let mut seen = std::collections::HashSet::with_capacity(rows);
    for &s in slots {
        if s < 0 || s as usize >= n_slots || !seen.insert(s) {
            return shape_err(
                "kv_write",
                format!("slot {s} outside 0..{n_slots} or repeated"),
            );
        }
    }
    // Rows go to distinct slots: collect (slot, bytes, scale) in parallel, then store.
    let packed: Vec<(usize, Vec<u8>, f32)> = src
        .par_chunks(dim)
        .zip(slots.par_iter())
        .with_min_len(min_len(4 * dim))
        .map(|(row, &s)| {
            let sc = fp8_row_scale(row);
            let inv = 1.0 / sc;
            (
                s as usize,
                row.iter().map(|&v| quantize_fp8(v * inv)).collect(),
                sc,
            )
        })
        .collect();
    for (s, bytes, sc) in packed {
        cache[s * dim..(s + 1) * dim].copy_from_slice(&bytes);
        scales[s] = sc;
    }
    Ok(())
}

/// Index of the largest value of each row of `logits[rows][n]` (ties to the lower index).
pub fn argmax(logits: &[f32], n: usize, out: &mut [i32]) -> Result<()> {
    let rows = validate_rows("argmax", logits.len(), n)?;
    if out.len() != rows {
        return shape_err("argmax", "out must have one entry per row");
    }
    out.par_iter_mut()
        .zip(logits.par_chunks(n))
        .with_min_len(min_len(n))
        .for_each(|(o, row)| {
            let mut best = 0usize;
            for (i, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = i;
                }
            }
            *o = best as i32;
        });
    Ok(())
}

/// Paged indexer scores into `scores[rows][n_pos]` (see [`IndexerPagedArgs`]).
pub fn indexer_paged_scores(p: &IndexerPagedArgs<'_>, scores: &mut [f32]) -> Result<()> {
    p.validate()?;
    if scores.len() != p.rows * p.n_pos {
        return shape_err("indexer_paged", "scores size does not match rows * n_pos");
    }
    let d = p.dim;
    let lut = fp8_lut();
    scores.par_chunks_mut(p.n_pos).enumerate().for_each_init(
        || vec![0f32; d],
        |key, (r, row)| {
            let len = p.seq_lens[r].max(0) as usize;
            let q = &p.q[r * p.heads * d..(r + 1) * p.heads * d];
            let w = &p.w[r * p.heads..(r + 1) * p.heads];
            for (pos, o) in row.iter_mut().enumerate() {
                if pos >= len {
                    *o = f32::NEG_INFINITY;
                    continue;
                }
                let s = p.slot(r, pos);
                for (x, &b) in key.iter_mut().zip(&p.keys[s * d..(s + 1) * d]) {
                    *x = lut[b as usize];
                }
                let ks = p.key_scale[s];
                let mut total = 0f32;
                for h in 0..p.heads {
                    total += w[h] * (dot(&q[h * d..(h + 1) * d], key) * ks).max(0.0);
                }
                *o = total;
            }
        },
    );
    Ok(())
}
