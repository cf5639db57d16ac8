use crate::problem::{validate_gather, GatherProblem};
use crate::Result;
use rayon::prelude::*;

/// Gathers rows into `out` (`indices.len() * row_bytes` bytes), parallel over rows.
pub fn gather_into(table: &[u8], row_bytes: usize, indices: &[u64], out: &mut [u8]) -> Result<()> {
    validate_gather(table.len(), row_bytes, indices)?;
    if out.len() != indices.len() * row_bytes {
        return crate::shape_err("gather", "output size does not match indices * row_bytes");
    }
    out.par_chunks_mut(row_bytes * 64)
        .zip(indices.par_chunks(64))
        .for_each(|(o, ix)| {
            for (dst, &i) in o.chunks_exact_mut(row_bytes).zip(ix) {
                let s = i as usize * row_bytes;
                dst.copy_from_slice(&table[s..s + row_bytes]);
            }
        });
    Ok(())
}

pub fn gather(p: &GatherProblem) -> Result<Vec<u8>> {
    let mut out = vec![0u8; p.indices.len() * p.row_bytes];
    gather_into(&p.table, p.row_bytes, &p.indices, &mut out)?;
    Ok(out)
}
