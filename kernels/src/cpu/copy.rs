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

/// `c = a * b` (row-major, `a` m x k, `b` k x n), blocked over k, parallel over rows:
/// the CPU's reference GEMM rate.
pub fn gemm(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> crate::Result<Vec<f32>> {
    if a.len() != m * k || b.len() != k * n {
        return crate::shape_err("gemm", "a or b size does not match m, n, k");
    }
    const KB: usize = 256;
    let mut c = vec![0f32; m * n];
    c.par_chunks_mut(n * 4).enumerate().for_each(|(ib, cb)| {
        for k0 in (0..k).step_by(KB) {
            let k1 = (k0 + KB).min(k);
            for (r, crow) in cb.chunks_exact_mut(n).enumerate() {
                let i = ib * 4 + r;
                for l in k0..k1 {
                    let av = a[i * k + l];
                    for (cv, &bv) in crow.iter_mut().zip(&b[l * n..(l + 1) * n]) {
                        *cv += av * bv;
                    }
                }
            }
        }
    });
    Ok(c)
}
