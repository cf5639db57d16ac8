//! Naive reference implementations: plain loops, f64 accumulation, no parallelism.
//! Tests check the CPU twins (and, on a GPU, the CUDA kernels) against these.

use crate::dtype::{bf16_to_f32, fp8_e4m3_to_f32, int4_pair, INT4_GROUP};
use crate::problem::*;

/// Decodes row `row` (over all experts) of the MoE weights to f32.
pub fn moe_weight_row(p: &MoeProblem, row: usize) -> Vec<f32> {
    let k = p.k_in;
    match p.dtype {
        WeightDtype::Bf16 => (0..k)
            .map(|i| {
                let o = 2 * (row * k + i);
                bf16_to_f32(u16::from_le_bytes([p.weights[o], p.weights[o + 1]]))
            })
            .collect(),
        WeightDtype::Fp8 => (0..k)
            .map(|i| fp8_e4m3_to_f32(p.weights[row * k + i]) * p.scales[row])
            .collect(),
        WeightDtype::Int4 => (0..k)
            .map(|i| {
                let b = p.weights[(row * k + i) / 2];
                let (lo, hi) = int4_pair(b);
                let v = if i % 2 == 0 { lo } else { hi };
                v * p.scales[row * (k / INT4_GROUP) + i / INT4_GROUP]
            })
            .collect(),
    }
}

pub fn moe(p: &MoeProblem) -> Vec<f32> {
    let mut y = vec![0f32; p.output_len()];
    for (e, &id) in p.expert_ids.iter().enumerate() {
        for n in 0..p.n_out {
            let w = moe_weight_row(p, id as usize * p.n_out + n);
            for t in 0..p.tokens {
                let x = &p.x[(e * p.tokens + t) * p.k_in..][..p.k_in];
                let acc: f64 = w.iter().zip(x).map(|(&a, &b)| a as f64 * b as f64).sum();
                y[(e * p.tokens + t) * p.n_out + n] = acc as f32;
            }
        }
    }
    y
}

pub fn attention(p: &AttnProblem) -> Vec<f32> {
    let d = p.dim;
    let mut out = vec![0f32; p.output_len()];
    for b in 0..p.batch {
        let pos = p.positions(b);
        for h in 0..p.heads {
            let q = &p.q[(b * p.heads + h) * d..][..d];
            let vals: Vec<Vec<f64>> = pos
                .iter()
                .map(|&ps| {
                    let s = p.slot(b, ps);
                    (0..d)
                        .map(|j| fp8_e4m3_to_f32(p.kv[s * d + j]) as f64 * p.kv_scale[s] as f64)
                        .collect()
                })
                .collect();
            let scores: Vec<f64> = vals
                .iter()
                .map(|v| {
                    v.iter().zip(q).map(|(&a, &b)| a * b as f64).sum::<f64>()
                        * p.softmax_scale as f64
                })
                .collect();
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = e.iter().sum();
            let o = &mut out[(b * p.heads + h) * d..][..d];
            for (wi, v) in e.iter().zip(&vals) {
                for j in 0..d {
                    o[j] += (wi / z * v[j]) as f32;
                }
            }
        }
    }
    out
}

pub fn indexer_scores(p: &IndexerProblem) -> Vec<f32> {
    let d = p.dim;
    let mut s = vec![0f32; p.batch * p.n_pos];
    for b in 0..p.batch {
        for ps in 0..p.n_pos {
            let slot = b * p.n_pos + ps;
            let mut total = 0f64;
            for h in 0..p.heads {
                let q = &p.q[(b * p.heads + h) * d..][..d];
                let dot: f64 = (0..d)
                    .map(|j| q[j] as f64 * fp8_e4m3_to_f32(p.keys[slot * d + j]) as f64)
                    .sum();
                total += p.w[b * p.heads + h] as f64 * (dot * p.key_scale[slot] as f64).max(0.0);
            }
            s[slot] = total as f32;
        }
    }
    s
}

/// Top-k by a full descending sort (ties broken by position).
pub fn topk(scores: &[f32], batch: usize, n_pos: usize, k: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(batch * k);
    for b in 0..batch {
        let row = &scores[b * n_pos..(b + 1) * n_pos];
        let mut idx: Vec<usize> = (0..n_pos).collect();
        idx.sort_by(|&i, &j| row[j].total_cmp(&row[i]).then(i.cmp(&j)));
        out.extend((0..k).map(|i| idx.get(i).map_or(-1, |&v| v as i32)));
    }
    out
}

pub fn gather(table: &[u8], row_bytes: usize, indices: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(indices.len() * row_bytes);
    for &i in indices {
        let start = i as usize * row_bytes;
        out.extend_from_slice(&table[start..start + row_bytes]);
    }
    out
}

/// XOR of all little-endian u64 words (a zero-padded tail word included).
pub fn stream_read(data: &[u8]) -> u64 {
    let mut acc = 0u64;
    for chunk in data.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        acc ^= u64::from_le_bytes(w);
    }
    acc
}

/// `c[m][n] = a[m][k] * b[k][n]`, row-major.
pub fn gemm(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let acc: f64 = (0..k)
                .map(|l| a[i * k + l] as f64 * b[l * n + j] as f64)
                .sum();
            c[i * n + j] = acc as f32;
        }
    }
    c
}

/// Naive references of the live model's kernels.
#[path = "reference_live.rs"]
pub mod live;
