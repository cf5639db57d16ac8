//! The served model: its configuration (from a model file, converted by the caller) and
//! its weights, random from a seed.
//!
//! Architecture (a small DeepSeek-style MoE, simplified and stated):
//! * embedding (f32 table), then per layer: RMSNorm; absorbed MLA-style attention — one
//!   projection to `heads` queries in the latent space, one to the `latent`-wide KV
//!   entry that is cached (fp8, paged) and serves as key and value; dense, sparse
//!   (indexer top-k, or the selection of the layer before) or window attention, plus a
//!   window branch where the layer declares one (added to the main output); an output
//!   projection; RMSNorm with the residual add; an FFN: routed experts (softmax gate,
//!   top-k, SwiGLU experts, weighted combine) plus shared experts, or a dense SwiGLU.
//! * a final RMSNorm and the LM head; greedy sampling (argmax).
//! * the MTP draft head: RMSNorm of the last hidden state plus RMSNorm of the embedding
//!   of the last token, a projection, one dense SwiGLU block and the shared LM head.
//! * no positional encoding (attention sees positions only through the causal mask and
//!   the cached entries); every linear layer in `weight_dtype`.

use crate::serve::device::{Buf, DevWeights, ServeDevice};
use crate::Result;
use kernels::live::Weights;
use kernels::WeightDtype;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use spec::live_model::{AttnKind, IndexerConfig, LayerConfig, LinearDtype, MoeConfig};
/// Everything the executor needs to know about the model: the live model's shape
/// (`spec::live_model`), under the executor's old name.
pub use spec::live_model::{LiveModel, LiveModel as ModelConfig};

pub const NORM_EPS: f32 = 1e-6;

/// The kernels' format of the model's linear weights.
pub fn kernel_dtype(d: LinearDtype) -> WeightDtype {
    match d {
        LinearDtype::Bf16 => WeightDtype::Bf16,
        LinearDtype::Fp8 => WeightDtype::Fp8,
    }
}

/// A stable 64-bit mix of a seed and a weight's name (SplitMix64 over FNV-1a).
pub fn weight_seed(seed: u64, name: &str, layer: usize, expert: usize) -> u64 {
    let h = spec::stats::fnv1a64(name.as_bytes());
    let mut z =
        seed ^ h ^ ((layer as u64) << 32) ^ (expert as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One linear layer's weights: its name and layer (which seed them), the experts of
/// its table and each matrix's `n x k`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinearSpec<'a> {
    pub name: &'a str,
    pub layer: usize,
    pub experts: std::ops::Range<usize>,
    pub n: usize,
    pub k: usize,
}

impl<'a> LinearSpec<'a> {
    /// A dense layer (one matrix, expert 0).
    pub fn dense(name: &'a str, layer: usize, n: usize, k: usize) -> Self {
        LinearSpec {
            name,
            layer,
            experts: 0..1,
            n,
            k,
        }
    }
}

/// Weights of one linear layer with `experts` matrices `[experts][n][k]`, each expert
/// seeded on its own (so a rank's shard holds the same experts whatever the DEP).
pub fn linear_weights(cfg: &LiveModel, seed: u64, w: &LinearSpec) -> Weights {
    let std = 1.0 / (w.k as f32).sqrt();
    let mut all: Option<Weights> = None;
    for e in w.experts.clone() {
        let m = Weights::random(
            kernel_dtype(cfg.weight_dtype),
            1,
            w.n,
            w.k,
            std,
            weight_seed(seed, w.name, w.layer, e),
        );
        match &mut all {
            None => all = Some(m),
            Some(a) => {
                a.experts += 1;
                a.weights.extend_from_slice(&m.weights);
                a.scales.extend_from_slice(&m.scales);
            }
        }
    }
    all.expect("at least one expert")
}

/// Linear weights on the device.
pub fn upload_linear(
    dev: &mut dyn ServeDevice,
    cfg: &LiveModel,
    seed: u64,
    w: &LinearSpec,
) -> Result<DevWeights> {
    dev.upload_weights(&linear_weights(cfg, seed, w))
}

/// A norm weight vector: ones (the normalisation alone keeps activations bounded).
pub fn upload_ones(dev: &mut dyn ServeDevice, n: usize) -> Result<Buf> {
    dev.upload_f32(&vec![1.0; n])
}

/// The embedding table, uniform in [-1, 1).
pub fn upload_embedding(dev: &mut dyn ServeDevice, cfg: &LiveModel, seed: u64) -> Result<Buf> {
    let mut rng = ChaCha8Rng::seed_from_u64(weight_seed(seed, "embed", 0, 0));
    let v: Vec<f32> = (0..cfg.vocab * cfg.hidden)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    dev.upload_f32(&v)
}
