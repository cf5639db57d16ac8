use super::fp8_lut;
use crate::problem::{AttnArgs, AttnModeRef, AttnProblem};
use crate::Result;
use rayon::prelude::*;

/// Heads processed together: each cached entry is decoded once per group.
const HEAD_GROUP: usize = 8;

/// Attention decode over the paged latent cache (see `mla_decode.cu` for the maths).
pub fn attention(p: &AttnProblem) -> Result<Vec<f32>> {
    let args = p.args();
    let mut out = vec![0f32; args.output_len()];
    attention_into(&args, &mut out)?;
    Ok(out)
}

/// [`attention`] over a borrowed cache into `out` (`[batch][heads][dim]`), parallel
/// over (row, group of heads); online softmax per head.
pub fn attention_into(p: &AttnArgs<'_>, out: &mut [f32]) -> Result<()> {
    p.validate()?;
    if out.len() != p.output_len() {
        return crate::shape_err(
            "mla_decode",
            "output size does not match batch * heads * dim",
        );
    }
    let d = p.dim;
    let groups = p.heads.div_ceil(HEAD_GROUP);
    let lut = fp8_lut();
    let rows: Vec<(usize, usize, &mut [f32])> = out
        .chunks_mut(p.heads * d)
        .enumerate()
        .flat_map(|(b, row)| {
            row.chunks_mut(HEAD_GROUP * d)
                .enumerate()
                .map(move |(g, o)| (b, g, o))
        })
        .collect();
    debug_assert_eq!(rows.len(), p.batch * groups);
    let per_task = p.positions_read() / p.batch.max(1) * d * HEAD_GROUP.min(p.heads);
    rows.into_par_iter()
        .with_min_len(super::live::min_len(per_task))
        .for_each_init(
            || vec![0f32; d],
            |v, (b, g, o)| {
                let h0 = g * HEAD_GROUP;
                let nh = HEAD_GROUP.min(p.heads - h0);
                let q = &p.q[(b * p.heads + h0) * d..][..nh * d];
                let mut m = [f32::NEG_INFINITY; HEAD_GROUP];
                let mut l = [0f32; HEAD_GROUP];
                o.fill(0.0);
                let mut visit = |pos: usize| {
                    let s = p.slot(b, pos);
                    let ks = p.kv_scale[s];
                    for (x, &byte) in v.iter_mut().zip(&p.kv[s * d..(s + 1) * d]) {
                        *x = lut[byte as usize] * ks;
                    }
                    for h in 0..nh {
                        let score = super::dot(&q[h * d..(h + 1) * d], v) * p.softmax_scale;
                        let m_new = m[h].max(score);
                        let corr = (m[h] - m_new).exp();
                        let pe = (score - m_new).exp();
                        l[h] = l[h] * corr + pe;
                        for (a, &x) in o[h * d..(h + 1) * d].iter_mut().zip(v.iter()) {
                            *a = *a * corr + pe * x;
                        }
                        m[h] = m_new;
                    }
                };
                let len = p.seq_lens[b].max(0) as usize;
                match p.mode {
                    AttnModeRef::Dense => (0..len).for_each(&mut visit),
                    AttnModeRef::Window { window } => {
                        (len.saturating_sub(window)..len).for_each(&mut visit)
                    }
                    AttnModeRef::Sparse { topk, indices } => indices[b * topk..(b + 1) * topk]
                        .iter()
                        .filter(|&&i| i >= 0 && (i as usize) < len)
                        .for_each(|&i| visit(i as usize)),
                }
                for h in 0..nh {
                    let inv = if l[h] > 0.0 { 1.0 / l[h] } else { 0.0 };
                    o[h * d..(h + 1) * d].iter_mut().for_each(|a| *a *= inv);
                }
            },
        );
    Ok(())
}
