//! Dynamic per-tensor FP8 quantization of BF16 activations (`fp8_quant.cu`): what a
//! production FP8 linear layer runs before its GEMM, so that a measured FP8 GEMM
//! (`lt.rs`) is timed with it, as the shipped tables' FP8 rows are.

use super::context::{kerr, CudaDevice};
use super::dptr;
use crate::Result;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Threads a block, and most blocks a grid (grid-stride loops cover the rest).
const THREADS: u32 = 256;
const MAX_BLOCKS: u64 = 1024;

/// The two kernels and their operands: `n` bf16 values at `x` (device pointer), and
/// `amax` (one u32, zeroed at each launch) and `scale` (one f32), held here.
pub(crate) struct Fp8Quant {
    amax_fn: CudaFunction,
    quant_fn: CudaFunction,
    n: i64,
    x: u64,
    /// Held for `amax_ptr`.
    _amax: CudaSlice<u32>,
    amax_ptr: u64,
    pub scale: CudaSlice<f32>,
    /// `scale`'s device pointer (the GEMM's scale operand).
    pub scale_ptr: u64,
}

impl CudaDevice {
    /// The quantization of the `n` bf16 values at `x`, with its own amax and scale.
    pub(crate) fn fp8_quant(&mut self, x: u64, n: usize) -> Result<Fp8Quant> {
        let amax = self.zeros::<u32>("fp8_quant", 1)?;
        let scale = self.zeros::<f32>("fp8_quant", 1)?;
        Ok(Fp8Quant {
            amax_fn: self.func(&kernels::FP8_QUANT, "fp8_amax")?,
            quant_fn: self.func(&kernels::FP8_QUANT, "fp8_quant")?,
            n: n as i64,
            x,
            amax_ptr: dptr(&self.stream, &amax),
            scale_ptr: dptr(&self.stream, &scale),
            _amax: amax,
            scale,
        })
    }
}

impl Fp8Quant {
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
        unsafe { cudarc::driver::result::memset_d8_async(self.amax_ptr, 0, 4, s.cu_stream()) }
            .map_err(|e| kerr("fp8_amax", e))?;
        let mut a = s.launch_builder(&self.amax_fn);
        a.arg(&self.x).arg(&self.n).arg(&self.amax_ptr);
        // SAFETY: the argument list of `fp8_amax` in fp8_quant.cu; n % 8 == 0 and x holds
        // n bf16 values (checked by the callers).
        unsafe { a.launch(cfg) }.map_err(|e| kerr("fp8_amax", e))?;
        let mut b = s.launch_builder(&self.quant_fn);
        b.arg(&self.x)
            .arg(&self.n)
            .arg(&self.amax_ptr)
            .arg(&q)
            .arg(&self.scale_ptr);
        // SAFETY: the argument list of `fp8_quant`; q holds n bytes, scale one f32.
        unsafe { b.launch(cfg) }.map_err(|e| kerr("fp8_quant", e))?;
        Ok(())
    }
}
