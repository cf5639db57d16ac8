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

/// How a layer attends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnKind {
    Dense,
    /// Top-k positions chosen by the indexer (of this layer, or the layer before when
    /// it has none).
    Sparse,
    Window,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerConfig {
    pub attention: AttnKind,
    /// An extra sliding-window attention over the last `window` positions.
    pub window_branch: bool,
    /// Runs its own indexer (sparse layers that do not share the previous selection).
    pub has_indexer: bool,
    /// Routed-expert FFN (else dense).
    pub moe: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexerConfig {
    pub heads: usize,
    pub dim: usize,
    pub topk: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeConfig {
    pub experts: usize,
    pub top_k: usize,
    pub expert_ffn: usize,
    /// Total FFN width of the shared experts (0 = none).
    pub shared_ffn: usize,
}

/// Everything the executor needs to know about the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub name: String,
    pub hidden: usize,
    pub vocab: usize,
    pub heads: usize,
    /// Width of the cached latent entry (score and value width).
    pub latent: usize,
    /// Sliding window, tokens (0 = none).
    pub window: usize,
    pub indexer: Option<IndexerConfig>,
    pub layers: Vec<LayerConfig>,
    pub moe: Option<MoeConfig>,
    /// FFN width of dense layers (0 when every layer is MoE).
    pub dense_ffn: usize,
    /// FFN width of the MTP block (0 = no draft head).
    pub mtp_ffn: usize,
    pub weight_dtype: WeightDtype,
    /// KV cache page, tokens.
    pub page_size: usize,
}

pub const NORM_EPS: f32 = 1e-6;

impl ModelConfig {
    /// Every reason the executor cannot run this configuration on `ranks` ranks.
    pub fn problems(&self, ranks: usize) -> Vec<String> {
        let mut p = Vec::new();
        let mut need = |ok: bool, msg: String| {
            if !ok {
                p.push(msg)
            }
        };
        let k256 = |x: usize| x > 0 && x % 256 == 0;
        need(
            k256(self.hidden),
            format!(
                "hidden = {} must be a positive multiple of 256 (linear-kernel input width)",
                self.hidden
            ),
        );
        need(self.vocab > 0, "vocab must be positive".into());
        need(
            self.latent > 0 && self.latent % 32 == 0 && self.latent <= 512,
            format!(
                "attention.kv_dim = {} must be a multiple of 32 up to 512",
                self.latent
            ),
        );
        need(self.heads > 0 && k256(self.heads * self.latent), format!(
            "attention.heads x kv_dim = {} must be a positive multiple of 256 (output-projection input)",
            self.heads * self.latent
        ));
        need(self.page_size > 0, "page size must be positive".into());
        need(!self.layers.is_empty(), "the model has no layers".into());
        let mut selection = false;
        for (i, l) in self.layers.iter().enumerate() {
            if l.attention == AttnKind::Sparse {
                need(l.has_indexer || selection, format!(
                    "layer {i}: sparse attention sharing the selection of the layer before, but no earlier layer has an indexer"
                ));
                need(
                    self.indexer.is_some(),
                    format!("layer {i}: sparse attention needs attention.indexer"),
                );
                selection = true;
            }
            if l.window_branch || l.attention == AttnKind::Window {
                need(
                    self.window > 0,
                    format!("layer {i}: a window needs attention.window > 0"),
                );
            }
            if l.moe {
                need(
                    self.moe.is_some(),
                    format!("layer {i}: MoE FFN needs a [moe] table"),
                );
            } else {
                need(
                    k256(self.dense_ffn),
                    format!(
                        "layer {i}: dense FFN width {} must be a positive multiple of 256",
                        self.dense_ffn
                    ),
                );
            }
        }
        if let Some(ix) = self.indexer {
            need(
                ix.dim > 0 && ix.dim % 32 == 0 && ix.dim <= 512 && ix.heads > 0 && ix.heads * ix.dim * 4 <= 48 * 1024,
                "attention.indexer: head_dim a multiple of 32 up to 512, heads x head_dim x 4 <= 48 KiB".into(),
            );
            need(
                ix.topk > 0,
                "attention.indexer.top_k must be positive".into(),
            );
        }
        if let Some(m) = self.moe {
            need(
                m.top_k >= 1 && m.top_k <= m.experts.min(32) && m.experts <= 256,
                format!(
                    "moe: top_k = {} must be in 1..=min(32, experts) and experts <= 256",
                    m.top_k
                ),
            );
            need(
                k256(m.expert_ffn),
                format!(
                    "moe.expert_ffn = {} must be a positive multiple of 256",
                    m.expert_ffn
                ),
            );
            need(
                m.shared_ffn == 0 || k256(m.shared_ffn),
                "shared experts' FFN width must be a multiple of 256".into(),
            );
            need(
                ranks >= 1 && m.experts % ranks == 0,
                format!(
                    "{} routed experts do not divide over {ranks} ranks",
                    m.experts
                ),
            );
        }
        need(
            self.mtp_ffn == 0 || k256(self.mtp_ffn),
            format!("MTP FFN width {} must be a multiple of 256", self.mtp_ffn),
        );
        p
    }

    /// Bytes of KV cache one token takes on one rank, all layers (latent entry and its
    /// scale, indexer key and its scale).
    pub fn kv_bytes_per_token(&self) -> usize {
        self.layers
            .iter()
            .map(|l| {
                self.latent
                    + 4
                    + if l.has_indexer {
                        self.indexer.map_or(0, |i| i.dim + 4)
                    } else {
                        0
                    }
            })
            .sum()
    }

    /// Routed experts per rank.
    pub fn local_experts(&self, ranks: usize) -> usize {
        self.moe.map_or(0, |m| m.experts / ranks.max(1))
    }
}

/// A stable 64-bit mix of a seed and a weight's name (SplitMix64 over FNV-1a).
pub fn weight_seed(seed: u64, name: &str, layer: usize, expert: usize) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    let mut z =
        seed ^ h ^ ((layer as u64) << 32) ^ (expert as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Weights of one linear layer with `experts` matrices `[experts][n][k]`, each expert
/// seeded on its own (so a rank's shard holds the same experts whatever the DEP).
pub fn linear_weights(
    cfg: &ModelConfig,
    seed: u64,
    name: &str,
    layer: usize,
    experts: std::ops::Range<usize>,
    n: usize,
    k: usize,
) -> Weights {
    let std = 1.0 / (k as f32).sqrt();
    let mut all: Option<Weights> = None;
    for e in experts {
        let w = Weights::random(
            cfg.weight_dtype,
            1,
            n,
            k,
            std,
            weight_seed(seed, name, layer, e),
        );
        match &mut all {
            None => all = Some(w),
            Some(a) => {
                a.experts += 1;
                a.weights.extend_from_slice(&w.weights);
                a.scales.extend_from_slice(&w.scales);
            }
        }
    }
    all.expect("at least one expert")
}

/// Linear weights on the device.
#[allow(clippy::too_many_arguments)]
pub fn upload_linear(
    dev: &mut dyn ServeDevice,
    cfg: &ModelConfig,
    seed: u64,
    name: &str,
    layer: usize,
    experts: std::ops::Range<usize>,
    n: usize,
    k: usize,
) -> Result<DevWeights> {
    dev.upload_weights(&linear_weights(cfg, seed, name, layer, experts, n, k))
}

/// A norm weight vector: ones (the normalisation alone keeps activations bounded).
pub fn upload_ones(dev: &mut dyn ServeDevice, n: usize) -> Result<Buf> {
    dev.upload_f32(&vec![1.0; n])
}

/// The embedding table, uniform in [-1, 1).
pub fn upload_embedding(dev: &mut dyn ServeDevice, cfg: &ModelConfig, seed: u64) -> Result<Buf> {
    let mut rng = ChaCha8Rng::seed_from_u64(weight_seed(seed, "embed", 0, 0));
    let v: Vec<f32> = (0..cfg.vocab * cfg.hidden)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    dev.upload_f32(&v)
}
