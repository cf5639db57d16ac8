//! Kernel-level pricing: one function per kernel class, each grounded in public kernel
//! benchmarks (DeepGEMM, DeepEP, TensorRT-LLM's all-to-all, FlashMLA, cuDNN). The
//! analytic step model composes these; `twin kernel` prices one kernel with exactly the
//! same functions, which is how `scenarios/published/kernels-public.csv` checks them.

pub mod a2a;
pub mod allreduce;
pub mod as_benchmarked;
pub mod attention;
pub mod gemm;
pub mod overlap;
pub mod pipeline;
pub mod skew;

pub use gemm::{Gemm, GemmKind, KernelDevice, KernelTime};
