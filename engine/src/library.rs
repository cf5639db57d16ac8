//! Ops timed through production libraries (`twin calibrate --tables-out`): what a
//! serving engine's kernels reach on the device, measured for kernel tables, beside
//! the calibration of twin's own kernels ([`crate::Backend`]).
//!
//! On CUDA, dense GEMMs run through cuBLASLt (BF16; FP8 E4M3 with per-tensor scales).
//! Not measured here yet, and said so by [`NOT_MEASURED`]: block-scaled FP8 and FP4
//! GEMMs (cuBLASLt's block-scale modes), prefill attention through cuDNN's fused
//! attention (cudarc's `cudnn` feature exposes only the backend descriptor API, in
//! which an SDPA graph is several hundred lines of unchecked descriptor code; it is
//! left for a session with a GPU to check it on), routed experts (no library grouped
//! GEMM through cudarc) and collectives (NCCL needs two or more GPUs and a process per
//! GPU or a group launch; with one GPU nothing is communicated).
//!
//! On the CPU the same shapes are timed with the engine's reference f32 GEMM: not a
//! production library, but the same pipeline (shapes, timing, tables, fit) end to end,
//! which is what tests run without a GPU.

use crate::device::Device;
use crate::op::{GemmShape, OpSpec};
use crate::stats::{Stats, TimingConfig};
use crate::{CpuDevice, CudaDevice, EngineError, Result};

/// What `--tables-out` does not measure yet, in words, one line each.
pub const NOT_MEASURED: &[&str] = &[
    "block-scaled FP8 (1x128 / 128x128) and FP4 GEMMs: cuBLASLt's block-scale modes are not wired yet; twin prices them by the nearest measured format (FP8 per-tensor)",
    "attention: no production attention library is reachable through the workspace's cudarc features (cuDNN SDPA needs its backend graph API); twin's own attention kernels are far from production speed (1.2% of HBM at decode on the H100, 0.9% on the H200), so no attention table is written and attention is priced by twin's kernel model",
    "routed experts (grouped GEMMs): no library grouped GEMM through cudarc; priced by twin's kernel model",
];

/// The operand format of a library GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LibraryFormat {
    Bf16,
    /// FP8 E4M3 with per-tensor scales, the activations' computed (and the
    /// activations quantized) before each GEMM.
    Fp8,
}

impl LibraryFormat {
    pub const ALL: [LibraryFormat; 2] = [LibraryFormat::Bf16, LibraryFormat::Fp8];

    /// Bytes per operand element.
    pub fn bytes(self) -> usize {
        match self {
            LibraryFormat::Bf16 => 2,
            LibraryFormat::Fp8 => 1,
        }
    }

    /// The kernel tables' name of the format (`sim::cost::tables::Format::parse`).
    pub fn table_name(self) -> &'static str {
        match self {
            LibraryFormat::Bf16 => "bfloat16",
            LibraryFormat::Fp8 => "fp8",
        }
    }
}

/// A dense GEMM as a linear layer runs it: `m` tokens, `n` output features, `k`
/// input features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LibraryGemm {
    pub format: LibraryFormat,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl LibraryGemm {
    /// Most elements of one operand (activations, weights or output): 2^31, so every
    /// size and leading dimension fits the libraries' 32-bit fields.
    pub const MAX_ELEMENTS: usize = 1 << 31;

    pub fn check(&self) -> Result<()> {
        let (m, n, k) = (self.m, self.n, self.k);
        let big = |a: usize, b: usize| a.checked_mul(b).is_none_or(|x| x > Self::MAX_ELEMENTS);
        if m == 0 || n == 0 || k == 0 || big(m, k) || big(n, k) || big(m, n) {
            return Err(EngineError::BadOp {
                op: "library gemm".into(),
                reason: format!(
                    "M={m} N={n} K={k}: every size at least 1, every operand at most 2^31 elements"
                ),
            });
        }
        if self.format == LibraryFormat::Fp8 && (k % 16 != 0 || n % 16 != 0) {
            return Err(EngineError::BadOp {
                op: "library gemm".into(),
                reason: format!(
                    "FP8 M={m} N={n} K={k}: cuBLASLt's FP8 GEMMs take N and K in multiples of 16"
                ),
            });
        }
        Ok(())
    }
}

/// A device that times ops through its libraries.
pub enum LibraryTimer {
    /// The engine's reference f32 GEMM on the CPU (the pipeline, not a library).
    Cpu(CpuDevice),
    /// cuBLASLt on a GPU.
    Cuda(Box<CudaDevice>),
}

impl LibraryTimer {
    /// Opens `device`; for CUDA, after the driver check [`CudaDevice::open`] makes (no
    /// driver: [`EngineError::NoDriver`], never a panic).
    pub fn open(device: Device) -> Result<LibraryTimer> {
        Ok(match device {
            Device::Cpu => LibraryTimer::Cpu(CpuDevice::new()),
            Device::Cuda(n) => LibraryTimer::Cuda(Box::new(CudaDevice::open(n)?)),
        })
    }

    pub fn info(&self) -> &crate::DeviceInfo {
        use crate::Backend;
        match self {
            LibraryTimer::Cpu(d) => d.info(),
            LibraryTimer::Cuda(d) => d.info(),
        }
    }

    /// The library a GEMM of `format` runs through here (the tables' `kernel_source`).
    pub fn gemm_library(&self, format: LibraryFormat) -> String {
        match self {
            LibraryTimer::Cpu(_) => "twin cpu f32 reference (not a production library)".into(),
            LibraryTimer::Cuda(_) => match format {
                LibraryFormat::Bf16 => "cublaslt bfloat16".into(),
                LibraryFormat::Fp8 => {
                    "cublaslt fp8 + twin's dynamic per-tensor activation quantization".into()
                }
            },
        }
    }

    /// Times `g`. On the CPU every format runs the f32 reference GEMM.
    pub fn time_gemm(&mut self, g: &LibraryGemm, cfg: &TimingConfig) -> Result<Stats> {
        g.check()?;
        match self {
            LibraryTimer::Cpu(d) => {
                let op = OpSpec::Gemm(GemmShape {
                    m: g.m,
                    n: g.n,
                    k: g.k,
                });
                let b: &mut dyn crate::Backend = d;
                Ok(b.measure(&op, cfg)?.stats)
            }
            LibraryTimer::Cuda(d) => d.time_library_gemm(g, cfg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_out_of_the_libraries_range_are_refused() {
        let g = |format, m, n, k| LibraryGemm { format, m, n, k };
        assert!(g(LibraryFormat::Bf16, 1, 4096, 4096).check().is_ok());
        assert!(g(LibraryFormat::Bf16, 0, 4096, 4096).check().is_err());
        assert!(g(LibraryFormat::Bf16, 1 << 20, 1 << 12, 1 << 12)
            .check()
            .is_err());
        assert!(g(LibraryFormat::Fp8, 3, 4096, 4112).check().is_ok());
        assert!(g(LibraryFormat::Fp8, 3, 4096, 4100).check().is_err());
    }

    #[test]
    fn no_driver_is_a_clear_error() {
        // Where no driver loads (CI, this machine), opening CUDA for library timing is
        // the engine's NoDriver (or Device) error naming the cause, never a panic.
        match LibraryTimer::open(Device::Cuda(0)) {
            Ok(_) => eprintln!("a CUDA device opened: nothing to check here"),
            Err(e) => {
                let s = e.to_string();
                assert!(
                    s.contains("no CUDA driver found") || s.contains("CUDA device 0"),
                    "{s}"
                );
            }
        }
    }

    #[test]
    fn the_cpu_times_the_same_shapes() {
        let mut t = LibraryTimer::open(Device::Cpu).unwrap();
        let g = LibraryGemm {
            format: LibraryFormat::Fp8,
            m: 4,
            n: 32,
            k: 64,
        };
        let s = t.time_gemm(&g, &TimingConfig::SMOKE).unwrap();
        assert!(s.median_s > 0.0 && s.median_s.is_finite());
        assert!(t
            .gemm_library(LibraryFormat::Fp8)
            .contains("not a production library"));
    }
}
