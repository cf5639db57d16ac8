use super::fp8_lut;
use crate::problem::AttnProblem;
use crate::Result;
use rayon::prelude::*;

/// Heads processed together: each cached entry is decoded once per group.
const HEAD_GROUP: usize = 8;

/// Attention decode over the paged latent cache (see `mla_decode.cu` for the maths).
/// Parallel over (row, group of heads); online softmax per head.
pub fn attention(p: &AttnProblem) -> Result<Vec<f32>> {
    p.validate()?;
    let d = p.dim;
    let groups = p.heads.div_ceil(HEAD_GROUP);
    let lut = fp8_lut();
    let mut out = vec![0f32; p.output_len()];
    let results: Vec<(usize, usize, Vec<f32>)> = (0..p.batch * groups)
        .into_par_iter()
        .map(|bg| {
            let (b, g) = (bg / groups, bg % groups);
            let h0 = g * HEAD_GROUP;
            let nh = HEAD_GROUP.min(p.heads - h0);
            let q = &p.q[(b * p.heads + h0) * d..][..nh * d];
            let mut m = vec![f32::NEG_INFINITY; nh];
            let mut l = vec![0f32; nh];
            let mut acc = vec![0f32; nh * d];
            let mut v = vec![0f32; d];
            for pos in p.positions(b) {
                let s = p.slot(b, pos);
                let ks = p.kv_scale[s];
                for (o, &byte) in v.iter_mut().zip(&p.kv[s * d..(s + 1) * d]) {
                    *o = lut[byte as usize] * ks;
                }
                for h in 0..nh {
                    let score = super::dot(&q[h * d..(h + 1) * d], &v) * p.softmax_scale;
                    let m_new = m[h].max(score);
                    let corr = (m[h] - m_new).exp();
                    let pe = (score - m_new).exp();
                    l[h] = l[h] * corr + pe;
                    for (a, &x) in acc[h * d..(h + 1) * d].iter_mut().zip(&v) {
                        *a = *a * corr + pe * x;
                    }
                    m[h] = m_new;
                }
            }
            for h in 0..nh {
                let inv = if l[h] > 0.0 { 1.0 / l[h] } else { 0.0 };
                acc[h * d..(h + 1) * d].iter_mut().for_each(|a| *a *= inv);
            }
            (b, h0, acc)
        })
        .collect();
    for (b, h0, acc) in results {
        out[(b * p.heads + h0) * d..][..acc.len()].copy_from_slice(&acc);
    }
    Ok(out)
}
