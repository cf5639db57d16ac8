use super::fp8_lut;
use crate::problem::{IndexerOutput, IndexerProblem};
use crate::Result;
use rayon::prelude::*;

/// Indexer scores `[batch][n_pos]` (see `indexer.cu`), parallel over positions.
pub fn indexer_scores(p: &IndexerProblem) -> Result<Vec<f32>> {
    p.validate()?;
    let d = p.dim;
    let lut = fp8_lut();
    let mut s = vec![0f32; p.batch * p.n_pos];
    s.par_chunks_mut(256).enumerate().for_each_init(
        || vec![0f32; d],
        |k, (c, out)| {
            for (i, o) in out.iter_mut().enumerate() {
                let slot = c * 256 + i;
                let b = slot / p.n_pos;
                for (x, &byte) in k.iter_mut().zip(&p.keys[slot * d..(slot + 1) * d]) {
                    *x = lut[byte as usize];
                }
                let ks = p.key_scale[slot];
                let mut total = 0f32;
                for h in 0..p.heads {
                    let dot = super::dot(&p.q[(b * p.heads + h) * d..][..d], k) * ks;
                    total += p.w[b * p.heads + h] * dot.max(0.0);
                }
                *o = total;
            }
        },
    );
    Ok(s)
}

/// Per-row indices of the `k` largest scores (unordered; -1 pads short rows).
pub fn topk(scores: &[f32], batch: usize, n_pos: usize, k: usize) -> Vec<i32> {
    let mut out = vec![-1i32; batch * k];
    out.par_chunks_mut(k).enumerate().for_each(|(b, o)| {
        let row = &scores[b * n_pos..(b + 1) * n_pos];
        let mut idx: Vec<u32> = (0..n_pos as u32).collect();
        if n_pos > k {
            idx.select_nth_unstable_by(k - 1, |&i, &j| row[j as usize].total_cmp(&row[i as usize]));
            idx.truncate(k);
        }
        for (x, &i) in o.iter_mut().zip(&idx) {
            *x = i as i32;
        }
    });
    out
}

/// Per-row top-k over each row's own first `lens[b]` scores (the rest of the row is
/// padding): the same selection as [`topk`] on rows whose padding scores `-inf`, at a
/// cost proportional to the positions scored rather than to the longest row.
pub fn topk_prefix(scores: &[f32], n_pos: usize, lens: &[i32], k: usize) -> Vec<i32> {
    let mut out = vec![-1i32; lens.len() * k];
    out.par_chunks_mut(k)
        .zip(lens.par_iter())
        .enumerate()
        .for_each(|(b, (o, &len))| {
            let len = (len.max(0) as usize).min(n_pos);
            let sel = topk(&scores[b * n_pos..b * n_pos + len], 1, len, k);
            o.copy_from_slice(&sel);
        });
    out
}

/// Scores then top-k.
pub fn indexer(p: &IndexerProblem) -> Result<IndexerOutput> {
    let scores = indexer_scores(p)?;
    let topk = topk(&scores, p.batch, p.n_pos, p.topk);
    Ok(IndexerOutput { scores, topk })
}
