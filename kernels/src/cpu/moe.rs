use super::{dot, fp8_lut};
use crate::dtype::{bf16_to_f32, int4_pair, INT4_GROUP};
use crate::problem::{MoeProblem, WeightDtype};
use crate::Result;
use rayon::prelude::*;

/// MoE expert FFN: `y[e, t] = W[expert_ids[e]] x[e, t]`, output `[touched][tokens][n_out]`.
/// Parallel over (touched expert, output row); each weight row is decoded once and
/// applied to every token.
pub fn moe(p: &MoeProblem) -> Result<Vec<f32>> {
    p.validate()?;
    let (n, k, t) = (p.n_out, p.k_in, p.tokens);
    // yt[e][row][token], transposed into y afterwards.
    let mut yt = vec![0f32; p.output_len()];
    yt.par_chunks_mut(t).enumerate().for_each_init(
        || vec![0f32; k],
        |w, (er, out)| {
            let (e, row) = (er / n, er % n);
            let r = p.expert_ids[e] as usize * n + row;
            decode_row(p.dtype, &p.weights, &p.scales, k, r, w);
            for (ti, o) in out.iter_mut().enumerate() {
                *o = dot(w, &p.x[(e * t + ti) * k..][..k]);
            }
        },
    );
    let mut y = vec![0f32; p.output_len()];
    y.par_chunks_mut(t * n).enumerate().for_each(|(e, ye)| {
        for row in 0..n {
            for ti in 0..t {
                ye[ti * n + row] = yt[(e * n + row) * t + ti];
            }
        }
    });
    Ok(y)
}

/// Decodes weight row `r` (over all experts) of a `[rows][k]` matrix in `dtype` to f32.
pub(crate) fn decode_row(
    dtype: WeightDtype,
    weights: &[u8],
    scales: &[f32],
    k: usize,
    r: usize,
    w: &mut [f32],
) {
    match dtype {
        WeightDtype::Bf16 => {
            let src = &weights[2 * r * k..2 * (r + 1) * k];
            for (o, b) in w.iter_mut().zip(src.chunks_exact(2)) {
                *o = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        WeightDtype::Fp8 => {
            let lut = fp8_lut();
            let s = scales[r];
            for (o, &b) in w.iter_mut().zip(&weights[r * k..(r + 1) * k]) {
                *o = lut[b as usize] * s;
            }
        }
        WeightDtype::Int4 => {
            let src = &weights[r * k / 2..(r + 1) * k / 2];
            let scales = &scales[r * (k / INT4_GROUP)..(r + 1) * (k / INT4_GROUP)];
            for (g, (wg, bg)) in w
                .chunks_exact_mut(INT4_GROUP)
                .zip(src.chunks_exact(INT4_GROUP / 2))
                .enumerate()
            {
                let s = scales[g];
                for (pair, &b) in wg.chunks_exact_mut(2).zip(bg) {
                    let (lo, hi) = int4_pair(b);
                    pair[0] = lo * s;
                    pair[1] = hi * s;
                }
            }
        }
    }
}
