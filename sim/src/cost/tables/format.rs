//! The tables' operand formats and collective operations, and what they cost per
//! element.

use serde::{Deserialize, Serialize};
use spec::dtype::Dtype;
use spec::hardware::Hardware;

/// Operand formats of the tables' GEMMs and MoE layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Bf16,
    /// FP8 with per-tensor scales.
    Fp8,
    /// FP8 with 1x128 activation and 128x128 weight block scales.
    Fp8Block,
    /// NVFP4: FP4 values, an FP8 scale per 16.
    Nvfp4,
    /// MXFP4 weights (an 8-bit scale per 32) with BF16 activations.
    W4a16Mxfp4,
    /// MXFP4 weights with FP8 activations.
    W4a8Mxfp4,
    /// INT4 weights (a BF16 scale per 128) with BF16 activations.
    Int4Wo,
}

impl Format {
    /// The format of a dense GEMM of `act` activations and `weight` weights with a
    /// block scale per `scale_block` weights (0: none), as the step model builds it:
    /// 16-bit (or wider) floats run as BF16, FP8 with block scales as `Fp8Block` and
    /// without as `Fp8`, FP4 by FP4 as NVFP4; `None` for mixed formats the tables'
    /// dense GEMMs do not time (FP4 or INT4 weights under wider activations).
    pub fn of_gemm(act: Dtype, weight: Dtype, scale_block: u32) -> Option<Format> {
        use Dtype::{Bf16, Fp32, Fp4, Fp8};
        Some(match (act, weight) {
            (Bf16 | Fp32, Bf16 | Fp32) => Format::Bf16,
            (Fp8, Fp8) if scale_block > 0 => Format::Fp8Block,
            (Fp8, Fp8) => Format::Fp8,
            (Fp4, Fp4) => Format::Nvfp4,
            _ => return None,
        })
    }

    /// The format of a model's routed experts: weights of `weight` with a block scale
    /// per `scale_block` weights (0 = none), activations of `act`; `None` for formats
    /// the tables' MoE layers do not time (FP4 weights with FP4 activations at a scale
    /// per 32, FP32).
    pub fn of_experts(weight: Dtype, scale_block: u32, act: Dtype) -> Option<Format> {
        Some(match (weight, act) {
            (Dtype::Bf16, _) => Format::Bf16,
            (Dtype::Fp8, _) if scale_block > 0 => Format::Fp8Block,
            (Dtype::Fp8, _) => Format::Fp8,
            (Dtype::Fp4, Dtype::Bf16) if scale_block == 32 => Format::W4a16Mxfp4,
            (Dtype::Fp4, Dtype::Fp8) if scale_block == 32 => Format::W4a8Mxfp4,
            (Dtype::Fp4, Dtype::Fp4) if scale_block == 16 => Format::Nvfp4,
            _ => return None,
        })
    }

    /// The tables' name of the format.
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "bfloat16" | "bf16" | "float16" => Format::Bf16,
            "fp8" => Format::Fp8,
            "fp8_block" => Format::Fp8Block,
            "nvfp4" => Format::Nvfp4,
            "w4a16_mxfp4" => Format::W4a16Mxfp4,
            "w4a8_mxfp4_fp8" | "w4a8_mxfp4_mxfp8" | "w4a8_mxfp4" => Format::W4a8Mxfp4,
            "int4_wo" => Format::Int4Wo,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Bf16 => "bfloat16",
            Format::Fp8 => "fp8",
            Format::Fp8Block => "fp8_block",
            Format::Nvfp4 => "nvfp4",
            Format::W4a16Mxfp4 => "w4a16_mxfp4",
            Format::W4a8Mxfp4 => "w4a8_mxfp4",
            Format::Int4Wo => "int4_wo",
        }
    }

    /// Bytes per activation element entering the GEMM (scales in).
    pub fn act_bytes(self) -> f64 {
        match self {
            Format::Bf16 | Format::W4a16Mxfp4 | Format::Int4Wo => 2.0,
            Format::Fp8 => 1.0,
            Format::Fp8Block => 1.0 + 4.0 / 128.0,
            Format::Nvfp4 => 0.5 + 1.0 / 16.0,
            Format::W4a8Mxfp4 => 1.0,
        }
    }

    /// Bytes per weight element (scales in).
    pub fn weight_bytes(self) -> f64 {
        match self {
            Format::Bf16 => 2.0,
            Format::Fp8 => 1.0,
            Format::Fp8Block => 1.0 + 4.0 / (128.0 * 128.0),
            Format::Nvfp4 => 0.5 + 1.0 / 16.0,
            Format::W4a16Mxfp4 | Format::W4a8Mxfp4 => 0.5 + 1.0 / 32.0,
            Format::Int4Wo => 0.5 + 2.0 / 128.0,
        }
    }

    /// The tensor rate it runs at.
    pub fn rate(self, hw: &Hardware) -> f64 {
        let d = match self {
            Format::Bf16 | Format::W4a16Mxfp4 | Format::Int4Wo => Dtype::Bf16,
            Format::Fp8 | Format::Fp8Block | Format::W4a8Mxfp4 => Dtype::Fp8,
            Format::Nvfp4 => Dtype::Fp4,
        };
        hw.tensor.flops_per_s(d)
    }

    /// The format whose measured GEMMs price this one's where a profile has none of
    /// its own: FP8 with per-tensor and with block scales read the same bytes (the
    /// scales aside) at the same tensor rate, so either stands for the other (a vLLM
    /// profile has no block-FP8 GEMMs: their rows were timed without CUDA graphs,
    /// `calibration::tables::read`); `None` for the others.
    pub fn nearest_gemm(self) -> Option<Format> {
        match self {
            Format::Fp8Block => Some(Format::Fp8),
            Format::Fp8 => Some(Format::Fp8Block),
            _ => None,
        }
    }

    /// Whether the engine quantises BF16 activations before the GEMM.
    pub fn quantises(self) -> bool {
        !matches!(self, Format::Bf16 | Format::W4a16Mxfp4 | Format::Int4Wo)
    }
}

/// A collective's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveOp {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
}

impl CollectiveOp {
    pub fn parse(s: &str) -> Option<CollectiveOp> {
        Some(match s {
            "all_reduce" => CollectiveOp::AllReduce,
            "all_gather" => CollectiveOp::AllGather,
            "reduce_scatter" => CollectiveOp::ReduceScatter,
            "alltoall" | "all_to_all" => CollectiveOp::AllToAll,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::AllReduce => "all_reduce",
            CollectiveOp::AllGather => "all_gather",
            CollectiveOp::ReduceScatter => "reduce_scatter",
            CollectiveOp::AllToAll => "alltoall",
        }
    }

    /// Bytes one GPU sends for a buffer of `bytes` over `n` GPUs (NCCL's bus bytes).
    pub fn bus_bytes(self, bytes: f64, n: f64) -> f64 {
        let share = (n - 1.0) / n;
        match self {
            CollectiveOp::AllReduce => 2.0 * share * bytes,
            _ => share * bytes,
        }
    }
}
