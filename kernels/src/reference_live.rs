//! Naive references of the live model's kernels (`crate::live`): plain loops, f64
//! accumulation.

use crate::dtype::{bf16_to_f32, fp8_e4m3_to_f32, int4_pair, INT4_GROUP};
use crate::live::{Group, IndexerPagedArgs, WeightsRef};
use crate::problem::WeightDtype;

/// Row `r` (over all experts) of the weights, decoded.
pub fn weight_row(w: &WeightsRef<'_>, r: usize) -> Vec<f64> {
    let k = w.k_in;
    (0..k)
        .map(|i| match w.dtype {
            WeightDtype::Bf16 => {
                let o = 2 * (r * k + i);
                bf16_to_f32(u16::from_le_bytes([w.weights[o], w.weights[o + 1]])) as f64
            }
            WeightDtype::Fp8 => (fp8_e4m3_to_f32(w.weights[r * k + i]) * w.scales[r]) as f64,
            WeightDtype::Int4 => {
                let (lo, hi) = int4_pair(w.weights[(r * k + i) / 2]);
                let v = if i % 2 == 0 { lo } else { hi };
                (v * w.scales[r * (k / INT4_GROUP) + i / INT4_GROUP]) as f64
            }
        })
        .collect()
}

/// `y` of a grouped linear layer; rows outside the groups stay `init`.
pub fn linear(w: &WeightsRef<'_>, groups: &[Group], x: &[f32], init: &[f32]) -> Vec<f32> {
    let (n, k) = (w.n_out, w.k_in);
    let mut y = init.to_vec();
    for g in groups {
        for j in 0..n {
            let wr = weight_row(w, g.expert as usize * n + j);
            for t in g.start as usize..(g.start + g.rows) as usize {
                let acc: f64 = (0..k).map(|i| wr[i] * x[t * k + i] as f64).sum();
                y[t * n + j] = acc as f32;
            }
        }
    }
    y
}

/// (x after the residual add, normalised output).
pub fn rmsnorm(x: &[f32], delta: Option<&[f32]>, weight: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>) {
    let dim = weight.len();
    let mut xs = x.to_vec();
    if let Some(d) = delta {
        xs.iter_mut().zip(d).for_each(|(a, b)| *a += b);
    }
    let mut out = vec![0f32; xs.len()];
    for (xr, or) in xs.chunks(dim).zip(out.chunks_mut(dim)) {
        let ss: f64 = xr.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / dim as f64;
        let inv = 1.0 / (ss + eps as f64).sqrt();
        for j in 0..dim {
            or[j] = (xr[j] as f64 * inv * weight[j] as f64) as f32;
        }
    }
    (xs, out)
}

pub fn swiglu(gu: &[f32], ffn: usize) -> Vec<f32> {
    gu.chunks(2 * ffn)
        .flat_map(|r| {
            (0..ffn).map(move |j| {
                let g = r[j] as f64;
                (g / (1.0 + (-g).exp()) * r[ffn + j] as f64) as f32
            })
        })
        .collect()
}

/// (ids, weights) of softmax top-k by a full sort (ties to the lower index).
pub fn gate_topk(logits: &[f32], experts: usize, k: usize) -> (Vec<i32>, Vec<f32>) {
    let mut ids = Vec::new();
    let mut ws = Vec::new();
    for l in logits.chunks(experts) {
        let m = l
            .iter()
            .map(|&v| v as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = l.iter().map(|&v| (v as f64 - m).exp()).collect();
        let mut idx: Vec<usize> = (0..experts).collect();
        idx.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
        let sum: f64 = idx[..k].iter().map(|&i| p[i]).sum();
        for &i in &idx[..k] {
            ids.push(i as i32);
            ws.push((p[i] / sum) as f32);
        }
    }
    (ids, ws)
}

pub fn moe_combine(
    y: &[f32],
    dim: usize,
    slots: &[i32],
    weights: &[f32],
    k: usize,
    init: &[f32],
) -> Vec<f32> {
    let mut out = init.to_vec();
    for (r, o) in out.chunks_mut(dim).enumerate() {
        for j in 0..dim {
            let mut acc = o[j] as f64;
            for s in 0..k {
                let slot = slots[r * k + s];
                if slot >= 0 {
                    acc += weights[r * k + s] as f64 * y[slot as usize * dim + j] as f64;
                }
            }
            o[j] = acc as f32;
        }
    }
    out
}

/// The finite fp8 e4m3 value nearest to `v` (ties to the even code), by search over
/// every code: the definition `quantize_fp8` implements with bit operations.
pub fn nearest_fp8(v: f32) -> u8 {
    let a = v.abs().min(448.0) as f64;
    let mut best = 0u8;
    for c in 0u8..=0x7e {
        let d = (fp8_e4m3_to_f32(c) as f64 - a).abs();
        let bd = (fp8_e4m3_to_f32(best) as f64 - a).abs();
        if d < bd || (d == bd && c % 2 == 0 && best % 2 == 1) {
            best = c;
        }
    }
    if v.is_sign_negative() {
        best | 0x80
    } else {
        best
    }
}

pub fn argmax(logits: &[f32], n: usize) -> Vec<i32> {
    logits
        .chunks(n)
        .map(|r| {
            let mut best = 0;
            for i in 1..n {
                if r[i] > r[best] {
                    best = i;
                }
            }
            best as i32
        })
        .collect()
}

pub fn indexer_paged_scores(p: &IndexerPagedArgs<'_>) -> Vec<f32> {
    let d = p.dim;
    let mut out = vec![f32::NEG_INFINITY; p.rows * p.n_pos];
    for r in 0..p.rows {
        for pos in 0..p.seq_lens[r].max(0) as usize {
            let s = p.slot(r, pos);
            let mut total = 0f64;
            for h in 0..p.heads {
                let dot: f64 = (0..d)
                    .map(|j| {
                        p.q[(r * p.heads + h) * d + j] as f64
                            * fp8_e4m3_to_f32(p.keys[s * d + j]) as f64
                    })
                    .sum();
                total += p.w[r * p.heads + h] as f64 * (dot * p.key_scale[s] as f64).max(0.0);
            }
            out[r * p.n_pos + pos] = total as f32;
        }
    }
    out
}
