//! Runs and times the calibration kernels, and serves a model for real.
//!
//! One device trait, [`Backend`] (`device`), implemented once for the CPU and once for
//! CUDA, holds buffers and runs the live model's ops over them (for `serve`), runs every
//! kernel of the `kernels` crate on host inputs (for correctness tests) and measures an
//! [`OpSpec`] (for calibration):
//! * [`CpuDevice`]: the CPU twins (rayon), timed with `std::time::Instant`.
//! * [`CudaDevice`]: the CUDA kernels compiled with NVRTC (once per kernel and
//!   architecture), timed with CUDA events. Opened only after a runtime check that the
//!   driver library loads and a context can be created; otherwise [`Device::open`]
//!   returns a clear error, never a panic.
//!
//! Timings are the median (and p10/p90) of repeated runs after warm-up, with inputs
//! rotated over several copies whose total is several times the last-level cache (L2 on
//! a GPU), so that caches do not flatter bandwidth-bound ops.

pub mod device;
mod error;
pub mod hugepage;
pub mod library;
pub mod op;
pub mod serve;
pub mod stats;

pub use device::{Backend, CpuDevice, CudaDevice, Device, DeviceInfo};
pub use error::{EngineError, Result};
pub use op::{
    AttnShape, CopyShape, GatherPlacement, GatherShape, GemmShape, IndexerShape, Measurement,
    MoeShape, OpInfo, OpRole, OpShape, OpSpec, Point, StreamShape, OPS,
};
pub use stats::{Stats, TimingConfig};

/// Input copies span at least this many times the cache size.
pub const ROTATE_CACHE_FACTOR: u64 = 4;
/// At most this many input copies.
pub const MAX_COPIES: u64 = 64;

/// The CPU device under its calibration name (`engine::cpu::CpuBackend`).
pub mod cpu {
    pub use crate::device::cpu::last_level_cache_bytes;
    pub use crate::device::CpuDevice as CpuBackend;
}

/// The CUDA device under its calibration name (`engine::cuda::CudaBackend`).
pub mod cuda {
    pub use crate::device::cuda::arch_for;
    pub use crate::device::CudaDevice as CudaBackend;
}

/// Number of input copies to rotate over: enough that the copies together exceed
/// `ROTATE_CACHE_FACTOR` times the cache, at most `MAX_COPIES`, and within `mem_cap`.
pub fn rotation_copies(footprint: u64, cache_bytes: u64, mem_cap: u64) -> usize {
    let f = footprint.max(1);
    let want = (ROTATE_CACHE_FACTOR * cache_bytes)
        .div_ceil(f)
        .clamp(1, MAX_COPIES);
    let cap = (mem_cap / f).max(1);
    want.min(cap) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation() {
        assert_eq!(rotation_copies(1 << 30, 32 << 20, 1 << 34), 1);
        assert_eq!(rotation_copies(16 << 20, 32 << 20, 1 << 34), 8);
        assert_eq!(rotation_copies(1, 32 << 20, 1 << 34), MAX_COPIES as usize);
        assert_eq!(rotation_copies(16 << 20, 32 << 20, 40 << 20), 2);
    }
}
