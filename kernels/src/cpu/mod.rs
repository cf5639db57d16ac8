//! CPU twins of the CUDA kernels: same inputs, same results (up to floating-point
//! summation order), parallel with rayon. Used by the engine's `cpu` backend.

mod attention;
mod copy;
mod gather;
mod indexer;
pub mod live;
mod moe;
mod quant;

pub use attention::{attention, attention_into};
pub use copy::{copy, gemm, stream_read};
pub use gather::{gather, gather_into};
pub use indexer::{indexer, indexer_scores, topk, topk_prefix};
pub use moe::moe;
pub use quant::fp8_quant;

use crate::dtype::fp8_e4m3_to_f32;
use std::sync::OnceLock;

/// Decode table for fp8 e4m3 (the GPU decodes in registers; a table is the CPU's
/// equivalent and gives bit-identical values).
pub(crate) fn fp8_lut() -> &'static [f32; 256] {
    static LUT: OnceLock<[f32; 256]> = OnceLock::new();
    LUT.get_or_init(|| std::array::from_fn(|b| fp8_e4m3_to_f32(b as u8)))
}

/// Dot product with eight independent accumulators (vectorises).
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}
