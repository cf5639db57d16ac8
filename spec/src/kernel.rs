//! Kernel choices a serving engine can be told to make, where its tables time several
//! kernels for one op and format.

use serde::{Deserialize, Serialize};

/// The routed-expert kernel a deployment runs instead of its engine's usual one for
/// the experts' format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MoeKernel {
    /// Marlin's weight-only grouped GEMMs (4-bit weights dequantised to BF16 in
    /// registers; vLLM's `VLLM_MXFP4_USE_MARLIN=1` for MXFP4 experts).
    Marlin,
    /// OpenAI's `triton_kernels` (`matmul_ogs` with its routing), the usual kernel of
    /// MXFP4 experts on Hopper in vLLM (without `VLLM_MXFP4_USE_MARLIN`), TensorRT-LLM
    /// (its TRITON MoE backend) and SGLang: prepared and launched from Python, so it
    /// costs the host time per MoE layer in a step launched outside CUDA graphs.
    Triton,
}

impl MoeKernel {
    pub const ALL: [MoeKernel; 2] = [MoeKernel::Marlin, MoeKernel::Triton];

    /// The name a scenario gives (`moe_kernel = "marlin"`), which the kernel tables'
    /// keys contain.
    pub fn name(self) -> &'static str {
        match self {
            MoeKernel::Marlin => "marlin",
            MoeKernel::Triton => "triton",
        }
    }
}

impl std::str::FromStr for MoeKernel {
    type Err = String;

    fn from_str(s: &str) -> Result<MoeKernel, String> {
        MoeKernel::ALL
            .into_iter()
            .find(|k| k.name() == s.trim().to_lowercase())
            .ok_or_else(|| {
                let names: Vec<&str> = MoeKernel::ALL.iter().map(|k| k.name()).collect();
                format!("unknown MoE kernel `{s}`: one of {}", names.join(", "))
            })
    }
}
