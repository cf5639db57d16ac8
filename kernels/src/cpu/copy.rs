use rayon::prelude::*;

const CHUNK: usize = 1 << 20;

/// Parallel copy (the one-device stand-in for dispatch/combine). Lengths must match.
pub fn copy(src: &[u8], dst: &mut [u8]) -> crate::Result<()> {
    if src.len() != dst.len() {
        return crate::shape_err(
            "copy",
            format!("src {} bytes, dst {} bytes", src.len(), dst.len()),
        );
    }
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| d.copy_from_slice(s));
    Ok(())
}

/// XOR of all little-endian u64 words (zero-padded tail): a streaming read whose result
/// depends on every byte.
pub fn stream_read(data: &[u8]) -> u64 {
    data.par_chunks(CHUNK)
        .map(|c| {
            let blocks = c.chunks_exact(32);
            let rest = blocks.remainder();
            let mut acc = [0u64; 4];
            for b in blocks {
                for (i, a) in acc.iter_mut().enumerate() {
                    *a ^= u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
                }
            }
            let words = rest.chunks_exact(8);
            let tail = words.remainder();
            for w in words {
                acc[0] ^= u64::from_le_bytes(w.try_into().unwrap());
            }
            let mut t = [0u8; 8];
            t[..tail.len()].copy_from_slice(tail);
            acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ u64::from_le_bytes(t)
        })
        .reduce(|| 0, |a, b| a ^ b)
}

/// `c = a * b` (row-major, `a` m x k, `b` k x n): the CPU's reference GEMM rate.
/// Parallel over blocks of 4 rows; a 4 x 16 register tile of `c` accumulates over all
/// of `k` (one 16-wide strip of `b` per step, reused by the 4 rows). Edge rows and
/// columns take a plain loop.
pub fn gemm(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> crate::Result<Vec<f32>> {
    if a.len() != m * k || b.len() != k * n {
        return crate::shape_err("gemm", "a or b size does not match m, n, k");
    }
    const MR: usize = 4;
    const NR: usize = 16;
    let n_full = n / NR * NR;
    // B packed into 16-column strips, each `k x 16` contiguous.
    let mut packed = vec![0f32; n_full * k];
    packed
        .par_chunks_mut(k * NR)
        .enumerate()
        .for_each(|(s, strip)| {
            for (l, dst) in strip.chunks_exact_mut(NR).enumerate() {
                dst.copy_from_slice(&b[l * n + s * NR..l * n + s * NR + NR]);
            }
        });
    let mut c = vec![0f32; m * n];
    c.par_chunks_mut(n * MR).enumerate().for_each(|(ib, cb)| {
        let i0 = ib * MR;
        let rows = cb.len() / n;
        let n_full = if rows == MR { n_full } else { 0 };
        for (s, strip) in packed.chunks_exact(k * NR).enumerate().take(n_full / NR) {
            let j0 = s * NR;
            let a_rows: [&[f32]; MR] = std::array::from_fn(|r| &a[(i0 + r) * k..(i0 + r + 1) * k]);
            let mut acc = [[0f32; NR]; MR];
            for (l, bv) in strip.chunks_exact(NR).enumerate() {
                for r in 0..MR {
                    let av = a_rows[r][l];
                    for x in 0..NR {
                        acc[r][x] += av * bv[x];
                    }
                }
            }
            for (r, accr) in acc.iter().enumerate() {
                cb[r * n + j0..r * n + j0 + NR].copy_from_slice(accr);
            }
        }
        // Remaining columns (and every column of a short final row block).
        for r in 0..rows {
            let crow = &mut cb[r * n..(r + 1) * n];
            for l in 0..k {
                let av = a[(i0 + r) * k + l];
                for (cv, &bv) in crow[n_full..]
                    .iter_mut()
                    .zip(&b[l * n + n_full..(l + 1) * n])
                {
                    *cv += av * bv;
                }
            }
        }
    });
    Ok(c)
}
