//! Runs and times the calibration kernels.
//!
//! A [`Backend`] runs every kernel of the `kernels` crate on host inputs (for
//! correctness tests) and measures an [`OpSpec`] (for calibration):
//! * `cpu`: the CPU twins (rayon), timed with `std::time::Instant`.
//! * `cuda`: the CUDA kernels compiled with NVRTC (once per kernel and architecture),
//!   timed with CUDA events. Opened only after a runtime check that the driver library
//!   loads and a context can be created; otherwise [`Device::open`] returns a clear
//!   error, never a panic.
//!
//! Timings are the median (and p10/p90) of repeated runs after warm-up, with inputs
//! rotated over several copies whose total is several times the last-level cache (L2 on
//! a GPU), so that caches do not flatter bandwidth-bound ops.

// MSRV 1.85: `usize::is_multiple_of` needs 1.87.
#![allow(clippy::manual_is_multiple_of)]

pub mod cpu;
pub mod cuda;
mod error;
pub mod hugepage;
pub mod op;
pub mod serve;
pub mod stats;

pub use error::{EngineError, Result};
pub use op::{
    AttnShape, CopyShape, GatherPlacement, GatherShape, GemmShape, IndexerShape, Measurement,
    MoeShape, OpInfo, OpRole, OpShape, OpSpec, Point, StreamShape, OPS,
};
pub use stats::{Stats, TimingConfig};

use kernels::{AttnProblem, GatherProblem, IndexerOutput, IndexerProblem, MoeProblem};

/// Input copies span at least this many times the cache size.
pub const ROTATE_CACHE_FACTOR: u64 = 4;
/// At most this many input copies.
pub const MAX_COPIES: u64 = 64;

/// A compute device named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl Device {
    /// `cpu` or `cuda:N` (`cuda` alone means `cuda:0`).
    pub fn parse(s: &str) -> Result<Device> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("cpu") {
            return Ok(Device::Cpu);
        }
        if t.eq_ignore_ascii_case("cuda") {
            return Ok(Device::Cuda(0));
        }
        match t.split_once(':') {
            Some((k, n)) if k.eq_ignore_ascii_case("cuda") => n
                .parse()
                .map(Device::Cuda)
                .map_err(|_| EngineError::BadDevice(s.to_string())),
            _ => Err(EngineError::BadDevice(s.to_string())),
        }
    }

    /// Opens a backend. For CUDA this checks that the driver library loads, a context
    /// can be created and NVRTC loads; each failure is an error naming the cause.
    pub fn open(&self) -> Result<Box<dyn Backend>> {
        match *self {
            Device::Cpu => Ok(Box::new(cpu::CpuBackend::new())),
            Device::Cuda(n) => Ok(Box::new(cuda::CudaBackend::new(n)?)),
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// What a backend runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Human-readable device (CPU model and threads, or GPU name and compute capability).
    pub device: String,
    /// Driver / runtime description (CUDA driver version, or OS kernel for the CPU).
    pub driver: String,
    /// Last-level cache bytes (L3 on a CPU, L2 on a GPU) used to size input rotation.
    pub cache_bytes: u64,
}

/// Runs the kernels and measures ops on one device.
pub trait Backend {
    fn info(&self) -> &DeviceInfo;
    /// `y` of the MoE expert FFN (`[touched][tokens][n_out]`).
    fn moe(&mut self, p: &MoeProblem) -> Result<Vec<f32>>;
    /// Attention decode output (`[batch][heads][dim]`).
    fn attention(&mut self, p: &AttnProblem) -> Result<Vec<f32>>;
    /// Indexer scores and top-k.
    fn indexer(&mut self, p: &IndexerProblem) -> Result<IndexerOutput>;
    /// Gathered rows.
    fn gather(&mut self, p: &GatherProblem) -> Result<Vec<u8>>;
    /// Device-local copy of `src` (through device memory on a GPU).
    fn copy(&mut self, src: &[u8]) -> Result<Vec<u8>>;
    /// Times `op` and reports its statistics and achieved rates.
    fn measure(&mut self, op: &OpSpec, cfg: &TimingConfig) -> Result<Measurement>;
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
    fn parse_devices() {
        assert_eq!(Device::parse("cpu").unwrap(), Device::Cpu);
        assert_eq!(Device::parse("cuda:1").unwrap(), Device::Cuda(1));
        assert_eq!(Device::parse("CUDA").unwrap(), Device::Cuda(0));
        for bad in ["gpu", "cuda:x", "cuda:-1", ""] {
            let e = Device::parse(bad).unwrap_err();
            assert!(e.to_string().contains("expected `cpu` or `cuda:N`"), "{e}");
        }
        assert_eq!(Device::Cuda(3).to_string(), "cuda:3");
    }

    #[test]
    fn rotation() {
        assert_eq!(rotation_copies(1 << 30, 32 << 20, 1 << 34), 1);
        assert_eq!(rotation_copies(16 << 20, 32 << 20, 1 << 34), 8);
        assert_eq!(rotation_copies(1, 32 << 20, 1 << 34), MAX_COPIES as usize);
        assert_eq!(rotation_copies(16 << 20, 32 << 20, 40 << 20), 2);
    }
}
