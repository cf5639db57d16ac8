//! Dynamic per-tensor FP8 quantization of BF16 activations (`fp8_quant.cu`): what a
//! production FP8 linear layer runs before its GEMM, so that a measured FP8 GEMM
//! (`lt.rs`) is timed with it, as the shipped tables' FP8 rows are.

use super::context::{kerr, CudaDevice};
use crate::Result;
use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Threads a block, and most blocks a grid (grid-stride loops cover the rest).
const THREADS: u32 = 256;
const MAX_BLOCKS: u64 = 1024;

/// The two kernels and their operands (device pointers): `n` bf16 values at `x`,
/// `amax` (one u32, zeroed at each launch) and `scale` (one f32).
pub(crate) struct Fp8Quant {
    amax_fn: CudaFunction,
    quant_fn: CudaFunction,
    pub n: i64,
    pub x: u64,
    pub amax: u64,
    pub scale: u64,
}

impl CudaDevice {
    pub(crate) fn fp8_quant_fns(&mut self) -> Result<(CudaFunction, CudaFunction)> {
        Ok((
            self.func(&kernels::FP8_QUANT, "fp8_amax")?,
            self.func(&kernels::FP8_QUANT, "fp8_quant")?,
        ))
    }
}

impl Fp8Quant {
    pub(crate) fn new(
        fns: (CudaFunction, CudaFunction),
        n: usize,
        x: u64,
        amax: u64,
        scale: u64,
    ) -> Fp8Quant {
        Fp8Quant {
            amax_fn: fns.0,
            quant_fn: fns.1,
            n: n as i64,
            x,
            amax,
            scale,
        }
    }

    /// Zeroes amax, then launches the reduction and the conversion into `q` (n bytes)
    /// on `s` (capturable).
    pub(crate) fn launch(&self, s: &Arc<CudaStream>, q: u64) -> Result<()> {
        let groups = (self.n as u64 / 8).max(1);
        let blocks = groups.div_ceil(THREADS as u64).clamp(1, MAX_BLOCKS) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `amax` points at one u32 on this context.
        unsafe { cudarc::driver::result::memset_d8_async(self.amax, 0, 4, s.cu_stream()) }
            .map_err(|e| kerr("fp8_amax", e))?;
        let mut a = s.launch_builder(&self.amax_fn);
        a.arg(&self.x).arg(&self.n).arg(&self.amax);
        // SAFETY: the argument list of `fp8_amax` in fp8_quant.cu; n % 8 == 0 and x holds
        // n bf16 values (checked by the callers).
        unsafe { a.launch(cfg) }.map_err(|e| kerr("fp8_amax", e))?;
        let mut b = s.launch_builder(&self.quant_fn);
        b.arg(&self.x)
            .arg(&self.n)
            .arg(&self.amax)
            .arg(&q)
            .arg(&self.scale);
        // SAFETY: the argument list of `fp8_quant`; q holds n bytes, scale one f32.
        unsafe { b.launch(cfg) }.map_err(|e| kerr("fp8_quant", e))?;
        Ok(())
    }
}
