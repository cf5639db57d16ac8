//! Token mixers that keep a fixed-size state per request instead of a KV cache:
//! gated DeltaNet linear attention (Qwen3-Next, Qwen3.5) and Mamba-2 (Nemotron-H).
//! Their projections, their state's size, and the arithmetic of their kernels.
//!
//! The kernels: a decode step reads a request's state and writes it back, and does a
//! few products with it per head (flash-linear-attention's `fused_recurrent_*`,
//! mamba_ssm's `selective_state_update`); a prefill runs the chunked algorithm
//! (flash-linear-attention's `chunk_gated_delta_rule`, the Mamba-2 paper's SSD): within
//! a chunk of `chunk` tokens an attention-like product, across chunks one state passed
//! on. The flop counts below are the products of those algorithms (Yang et al., "Gated
//! Delta Networks", ICLR 2025, section 3; Dao and Gu, "Transformers are SSMs", ICML
//! 2024, section 6), counted per token.

use crate::dtype::Dtype;
use serde::{Deserialize, Serialize};

/// Bytes of the convolution window a layer keeps per request: `kernel - 1` past inputs
/// of `channels` channels, in BF16 (the activations' dtype).
fn conv_state_bytes(channels: f64, kernel: u32) -> f64 {
    channels * kernel.saturating_sub(1) as f64 * 2.0
}

/// Gated DeltaNet linear attention (`linear` layers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinearAttention {
    /// Query/key heads and their width.
    pub key_heads: u32,
    pub key_dim: u32,
    /// Value heads (each keeps a `key_dim x value_dim` state) and their width.
    pub value_heads: u32,
    pub value_dim: u32,
    /// Causal convolution over q, k and v before the recurrence, taps.
    pub conv_kernel: u32,
    /// Tokens per chunk of the chunked prefill kernel.
    pub chunk: u32,
    /// Dtype of the projections' weights.
    pub weight_dtype: Dtype,
    /// Dtype of the recurrent state.
    pub state_dtype: Dtype,
}

impl LinearAttention {
    /// Query and key widths together, and the value width.
    fn widths(&self) -> (f64, f64) {
        (
            2.0 * self.key_heads as f64 * self.key_dim as f64,
            self.value_heads as f64 * self.value_dim as f64,
        )
    }

    /// Projection parameters of one layer: q, k and v; the output gate z; the decay
    /// and the delta rule's step (one each per value head); the output projection;
    /// and the convolution's taps.
    pub fn params(&self, hidden: u32) -> f64 {
        let h = hidden as f64;
        let (qk, v) = self.widths();
        h * (qk + 2.0 * v + 2.0 * self.value_heads as f64)
            + v * h
            + (qk + v) * self.conv_kernel as f64
    }

    /// Projection widths: the input projection's outputs and the output projection's
    /// inputs (its output is `hidden`).
    pub fn projection_widths(&self) -> (f64, f64) {
        let (qk, v) = self.widths();
        (qk + 2.0 * v + 2.0 * self.value_heads as f64, v)
    }

    /// The recurrent state of one layer per request, bytes: one `key_dim x value_dim`
    /// matrix per value head, and the convolution window.
    pub fn state_bytes(&self) -> f64 {
        let (qk, v) = self.widths();
        self.value_heads as f64
            * self.key_dim as f64
            * self.value_dim as f64
            * self.state_dtype.bytes()
            + conv_state_bytes(qk + v, self.conv_kernel)
    }

    /// Bytes of one chunk's state as the chunked prefill kernel writes it and reads it
    /// back: flash-linear-attention's `chunk_gated_delta_rule_fwd_h` allocates the
    /// per-chunk states `h` as `k.new_empty(...)`, in the inputs' dtype (BF16).
    pub fn chunk_state_bytes(&self) -> f64 {
        self.value_heads as f64 * self.key_dim as f64 * self.value_dim as f64 * 2.0
    }

    /// Flops of one decode token per layer: per value head, the delta rule's
    /// `S k` (2 dk dv), its rank-one update (2 dk dv), the decay (dk dv) and the output
    /// `S q` (2 dk dv).
    pub fn decode_flops_per_token(&self) -> f64 {
        7.0 * self.value_heads as f64 * self.key_dim as f64 * self.value_dim as f64
    }

    /// Flops of one prefill token per layer with the chunked algorithm (chunk `C`),
    /// per value head: within the chunk, `Q K^T` and `K K^T` (2 C dk each) and their
    /// products with `V` and the WY transform's `U`, `W` (2 C dv each, 2 C dk), and
    /// across chunks `Q S`, `W S` and the state update `K^T U` (2 dk dv each).
    pub fn prefill_flops_per_token(&self) -> f64 {
        let (c, dk, dv) = (
            self.chunk.max(1) as f64,
            self.key_dim as f64,
            self.value_dim as f64,
        );
        self.value_heads as f64 * (2.0 * c * (3.0 * dk + 2.0 * dv) + 6.0 * dk * dv)
    }
}

/// A Mamba-2 mixer (`mamba` layers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mamba {
    /// SSM heads and their width (`mamba_num_heads`, `mamba_head_dim`).
    pub heads: u32,
    pub head_dim: u32,
    /// State size per head channel (`ssm_state_size`, N).
    pub state_size: u32,
    /// B and C groups (`n_groups`).
    pub groups: u32,
    /// Causal convolution taps.
    pub conv_kernel: u32,
    /// Tokens per chunk of the SSD prefill kernel (`chunk_size`).
    pub chunk: u32,
    pub weight_dtype: Dtype,
    /// Dtype of the SSM state.
    pub state_dtype: Dtype,
}

impl Mamba {
    /// The inner width (heads x head_dim) and the B and C widths together.
    fn widths(&self) -> (f64, f64) {
        (
            self.heads as f64 * self.head_dim as f64,
            2.0 * self.groups as f64 * self.state_size as f64,
        )
    }

    /// Projection parameters of one layer: the input projection (x, the gate z, B, C
    /// and one step size per head), the output projection and the convolution over
    /// x, B and C.
    pub fn params(&self, hidden: u32) -> f64 {
        let h = hidden as f64;
        let (inner, bc) = self.widths();
        h * (2.0 * inner + bc + self.heads as f64)
            + inner * h
            + (inner + bc) * self.conv_kernel as f64
    }

    /// The input projection's outputs and the output projection's inputs.
    pub fn projection_widths(&self) -> (f64, f64) {
        let (inner, bc) = self.widths();
        (2.0 * inner + bc + self.heads as f64, inner)
    }

    /// The state of one layer per request, bytes: `head_dim x state_size` per head,
    /// and the convolution window.
    pub fn state_bytes(&self) -> f64 {
        let (inner, bc) = self.widths();
        inner * self.state_size as f64 * self.state_dtype.bytes()
            + conv_state_bytes(inner + bc, self.conv_kernel)
    }

    /// Bytes of one chunk's state as the SSD prefill kernels write it and read it back:
    /// mamba_ssm's `_chunk_state_fwd` keeps the per-chunk states in FP32
    /// (`states_in_fp32`).
    pub fn chunk_state_bytes(&self) -> f64 {
        let (inner, _) = self.widths();
        inner * self.state_size as f64 * 4.0
    }

    /// Flops of one decode token per layer: per head channel, the state's decay and
    /// update (3 N) and the output `C h` (2 N).
    pub fn decode_flops_per_token(&self) -> f64 {
        5.0 * self.heads as f64 * self.head_dim as f64 * self.state_size as f64
    }

    /// Flops of one prefill token per layer with SSD (chunk `Q`): within the chunk,
    /// `C B^T` per group (2 Q N) and its product with x per head (2 Q P); across
    /// chunks the chunk's state `B^T x` and the output from the passed state `C h`
    /// (2 N P each, per head).
    pub fn prefill_flops_per_token(&self) -> f64 {
        let (q, n, p) = (
            self.chunk.max(1) as f64,
            self.state_size as f64,
            self.head_dim as f64,
        );
        self.groups as f64 * 2.0 * q * n + self.heads as f64 * (2.0 * q * p + 4.0 * n * p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen35_gated_deltanet_state_by_hand() {
        // Qwen3.5-397B-A17B: 16 key heads and 64 value heads of 128, kernel 4, FP32
        // state: 64 x 128 x 128 x 4 B = 4,194,304 B of state, and the convolution over
        // q, k (2 x 16 x 128 = 4096) and v (64 x 128 = 8192): 12,288 x 3 x 2 B = 73,728 B.
        let l = LinearAttention {
            key_heads: 16,
            key_dim: 128,
            value_heads: 64,
            value_dim: 128,
            conv_kernel: 4,
            chunk: 64,
            weight_dtype: Dtype::Bf16,
            state_dtype: Dtype::Fp32,
        };
        assert_eq!(l.state_bytes(), 4_194_304.0 + 73_728.0);
        // Params at hidden 4096: 4096 x (4096 + 2 x 8192 + 128) + 8192 x 4096 +
        // 12,288 x 4 = 84,410,368 + 33,554,432 + 49,152.
        assert_eq!(l.params(4096), 84_410_368.0 + 33_554_432.0 + 49_152.0);
    }

    #[test]
    fn nemotron_mamba_state_by_hand() {
        // Nemotron-3 Super: 128 heads of 64, N 128, 8 groups, kernel 4, FP32 state:
        // 8192 x 128 x 4 B = 4,194,304 B, and the convolution over x (8192) and B, C
        // (2 x 8 x 128 = 2048): 10,240 x 3 x 2 B = 61,440 B.
        let m = Mamba {
            heads: 128,
            head_dim: 64,
            state_size: 128,
            groups: 8,
            conv_kernel: 4,
            chunk: 128,
            weight_dtype: Dtype::Bf16,
            state_dtype: Dtype::Fp32,
        };
        assert_eq!(m.state_bytes(), 4_194_304.0 + 61_440.0);
        // Params at hidden 4096: 4096 x (16,384 + 2048 + 128) + 8192 x 4096 +
        // 10,240 x 4.
        assert_eq!(
            m.params(4096),
            4096.0 * 18_560.0 + 8192.0 * 4096.0 + 40_960.0
        );
    }
}
