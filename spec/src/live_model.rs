//! The live model: a model file as the live engine runs it, every width its ops run at.
//!
//! One type for both sides: the executor (`engine::serve`) runs it, the fitted cost
//! model (`sim::cost::fitted`) prices its op calls (`crate::call::forward_pass`).
//! The conversion from a scenario's model file stays with the simulator, which reads
//! those files; [`LiveModel::problems`] says what the live kernels cannot run.
//!
//! Architecture (a small DeepSeek-style MoE, simplified and stated): an embedding, then
//! per layer RMSNorm, absorbed MLA-style attention over a cached `latent`-wide entry
//! (dense, sparse top-k or window, plus an optional window branch), an output
//! projection, RMSNorm with the residual and an FFN (routed plus shared experts, or a
//! dense SwiGLU); a final RMSNorm, the LM head and greedy sampling; an optional MTP
//! draft head (see `engine::serve::model`).

use crate::problem::Problem;

/// How a layer attends (the live engine's three modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnKind {
    Dense,
    /// Top-k positions chosen by the indexer (of this layer, or the layer before when
    /// it has none).
    Sparse,
    Window,
}

/// One layer of the live model.
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

/// The sparse-attention indexer: heads, head width and positions selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexerConfig {
    pub heads: usize,
    pub dim: usize,
    pub topk: usize,
}

/// The routed experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeConfig {
    pub experts: usize,
    pub top_k: usize,
    pub expert_ffn: usize,
    /// Total FFN width of the shared experts (0 = none).
    pub shared_ffn: usize,
}

/// Weight format of the live model's linear layers (the live kernels take these two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinearDtype {
    Bf16,
    Fp8,
}

impl LinearDtype {
    /// The number format, of the one vocabulary.
    pub fn dtype(self) -> crate::dtype::Dtype {
        match self {
            LinearDtype::Bf16 => crate::dtype::Dtype::Bf16,
            LinearDtype::Fp8 => crate::dtype::Dtype::Fp8,
        }
    }

    /// The name calls and profiles use (`linear[bf16]`): the format's.
    pub fn name(self) -> &'static str {
        self.dtype().name()
    }

    /// Bytes of one weight (block scales excluded).
    pub fn bytes(self) -> usize {
        match self {
            LinearDtype::Bf16 => 2,
            LinearDtype::Fp8 => 1,
        }
    }
}

/// The live engine's view of a model file: every width its ops run at.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveModel {
    pub name: String,
    pub hidden: usize,
    pub vocab: usize,
    pub heads: usize,
    /// Width of the cached latent entry (`attention.kv_dim`; score and value width).
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
    /// Weight format of every linear layer.
    pub weight_dtype: LinearDtype,
    /// KV cache page, tokens.
    pub page_size: usize,
}

/// A positive multiple of 256: the input widths the live linear kernels take.
fn k256(x: usize) -> bool {
    x > 0 && x.is_multiple_of(256)
}

/// Collects every failed check: a sentence that names its field (`path`).
struct Problems(Vec<Problem>);

impl Problems {
    fn need(&mut self, ok: bool, path: impl Into<String>, msg: impl FnOnce() -> String) {
        if !ok {
            self.0.push(Problem::sentence(path, msg()))
        }
    }
}

impl LiveModel {
    /// Every reason the live executor cannot run this model on `ranks` ranks (the
    /// widths its kernels take, the tables its layers need).
    pub fn problems(&self, ranks: usize) -> Vec<Problem> {
        let mut p = Problems(Vec::new());
        self.width_problems(&mut p);
        self.layer_problems(&mut p);
        self.indexer_problems(&mut p);
        self.moe_problems(ranks, &mut p);
        p.need(self.mtp_ffn == 0 || k256(self.mtp_ffn), "mtp", || {
            format!("MTP FFN width {} must be a multiple of 256", self.mtp_ffn)
        });
        p.0
    }

    fn width_problems(&self, p: &mut Problems) {
        p.need(k256(self.hidden), "hidden", || {
            format!(
                "hidden = {} must be a positive multiple of 256 (linear-kernel input width)",
                self.hidden
            )
        });
        p.need(self.vocab > 0, "vocab", || "vocab must be positive".into());
        p.need(
            self.latent > 0 && self.latent.is_multiple_of(32) && self.latent <= 512,
            "attention.kv_dim",
            || {
                format!(
                    "attention.kv_dim = {} must be a multiple of 32 up to 512",
                    self.latent
                )
            },
        );
        p.need(self.heads > 0 && k256(self.heads * self.latent), "attention.heads", || {
            format!(
                "attention.heads x kv_dim = {} must be a positive multiple of 256 (output-projection input)",
                self.heads * self.latent
            )
        });
        p.need(self.page_size > 0, "page_size", || {
            "page size must be positive".into()
        });
        p.need(!self.layers.is_empty(), "layers", || {
            "the model has no layers".into()
        });
    }

    fn layer_problems(&self, p: &mut Problems) {
        let mut selection = false;
        for (i, l) in self.layers.iter().enumerate() {
            if l.attention == AttnKind::Sparse {
                p.need(l.has_indexer || selection, format!("layers[{i}]"), || format!(
                    "layer {i}: sparse attention sharing the selection of the layer before, but no earlier layer has an indexer"
                ));
                p.need(self.indexer.is_some(), format!("layers[{i}]"), || {
                    format!("layer {i}: sparse attention needs attention.indexer")
                });
                selection = true;
            }
            if l.window_branch || l.attention == AttnKind::Window {
                p.need(self.window > 0, format!("layers[{i}]"), || {
                    format!("layer {i}: a window needs attention.window > 0")
                });
            }
            if l.moe {
                p.need(self.moe.is_some(), format!("layers[{i}]"), || {
                    format!("layer {i}: MoE FFN needs a [moe] table")
                });
            } else {
                p.need(k256(self.dense_ffn), format!("layers[{i}]"), || {
                    format!(
                        "layer {i}: dense FFN width {} must be a positive multiple of 256",
                        self.dense_ffn
                    )
                });
            }
        }
    }

    fn indexer_problems(&self, p: &mut Problems) {
        let Some(ix) = self.indexer else { return };
        p.need(
            ix.dim > 0
                && ix.dim.is_multiple_of(32)
                && ix.dim <= 512
                && ix.heads > 0
                && ix.heads * ix.dim * 4 <= 48 * 1024, "attention.indexer",
            || "attention.indexer: head_dim a multiple of 32 up to 512, heads x head_dim x 4 <= 48 KiB".into(),
        );
        p.need(ix.topk > 0, "attention.indexer.top_k", || {
            "attention.indexer.top_k must be positive".into()
        });
    }

    fn moe_problems(&self, ranks: usize, p: &mut Problems) {
        let Some(m) = self.moe else { return };
        p.need(
            m.top_k >= 1 && m.top_k <= m.experts.min(32) && m.experts <= 256,
            "moe.top_k",
            || {
                format!(
                    "moe: top_k = {} must be in 1..=min(32, experts) and experts <= 256",
                    m.top_k
                )
            },
        );
        p.need(k256(m.expert_ffn), "moe.expert_ffn", || {
            format!(
                "moe.expert_ffn = {} must be a positive multiple of 256",
                m.expert_ffn
            )
        });
        p.need(
            m.shared_ffn == 0 || k256(m.shared_ffn),
            "moe.shared_ffn",
            || "shared experts' FFN width must be a multiple of 256".into(),
        );
        p.need(ranks >= 1 && m.experts % ranks == 0, "moe.experts", || {
            format!(
                "{} routed experts do not divide over {ranks} ranks",
                m.experts
            )
        });
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

    /// Bytes of every linear layer's weights a decode step reads on one rank of `dep`
    /// (projections, gate, routed and shared experts, LM head, MTP head): how far apart
    /// two uses of one weight matrix are.
    pub fn linear_weight_bytes(&self, dep: usize) -> usize {
        let b = |n: usize, k: usize| n * k * self.weight_dtype.bytes();
        let (h, hl) = (self.hidden, self.heads * self.latent);
        let mut total = b(self.vocab, h);
        for l in &self.layers {
            total += b(hl, h) + b(self.latent, h) + b(h, hl);
            if let (true, Some(ix)) = (l.has_indexer, self.indexer) {
                total += b(ix.heads * ix.dim + ix.heads + ix.dim, h);
            }
            total += match (l.moe, self.moe) {
                (true, Some(m)) => {
                    let (e, f, s) = (m.experts, m.expert_ffn, m.shared_ffn);
                    b(e, h)
                        + e.div_ceil(dep.max(1)) * (b(2 * f, h) + b(h, f))
                        + b(2 * s, h)
                        + b(h, s)
                }
                _ => b(2 * self.dense_ffn, h) + b(h, self.dense_ffn),
            };
        }
        if self.mtp_ffn > 0 {
            total += b(h, h) + b(2 * self.mtp_ffn, h) + b(h, self.mtp_ffn);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> LiveModel {
        let layer = |attention, has_indexer, moe| LayerConfig {
            attention,
            window_branch: false,
            has_indexer,
            moe,
        };
        LiveModel {
            name: "t".into(),
            hidden: 256,
            vocab: 100,
            heads: 2,
            latent: 128,
            window: 0,
            indexer: Some(IndexerConfig {
                heads: 2,
                dim: 32,
                topk: 8,
            }),
            layers: vec![
                layer(AttnKind::Sparse, true, true),
                layer(AttnKind::Dense, false, false),
            ],
            moe: Some(MoeConfig {
                experts: 8,
                top_k: 2,
                expert_ffn: 256,
                shared_ffn: 0,
            }),
            dense_ffn: 256,
            mtp_ffn: 0,
            weight_dtype: LinearDtype::Fp8,
            page_size: 16,
        }
    }

    #[test]
    fn problems_name_each_width_the_kernels_refuse() {
        let m = tiny();
        assert!(m.problems(2).is_empty(), "{:?}", m.problems(2));
        assert_eq!(
            m.problems(3),
            ["8 routed experts do not divide over 3 ranks"]
        );
        let mut bad = m.clone();
        bad.hidden = 100;
        bad.layers[0].has_indexer = false;
        bad.layers[1].attention = AttnKind::Window;
        let p = bad.problems(1);
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[0].to_string().starts_with("hidden = 100"));
        assert_eq!(p[0].field, crate::problem::Field::Path("hidden".into()));
        assert!(p[1]
            .to_string()
            .starts_with("layer 0: sparse attention sharing"));
        assert_eq!(p[2], "layer 1: a window needs attention.window > 0");
        assert_eq!(p[2].field, crate::problem::Field::Path("layers[1]".into()));
    }

    #[test]
    fn sizes_by_hand() {
        let m = tiny();
        // Layer 0: latent 128 + 4, indexer key 32 + 4; layer 1: 128 + 4.
        assert_eq!(m.kv_bytes_per_token(), 132 + 36 + 132);
        assert_eq!(m.local_experts(4), 2);
        // fp8, one byte a weight. LM head 100 x 256; per layer wq 256x256, wkv
        // 128x256, wo 256x256; layer 0 indexer (64 + 2 + 32) x 256, gate 8 x 256, 8
        // experts of (512 + 256) x 256 on one rank; layer 1 dense (512 + 256) x 256.
        let per_layer = 256 * 256 + 128 * 256 + 256 * 256;
        let want = 100 * 256 + 2 * per_layer + 98 * 256 + 8 * 256 + 8 * 768 * 256 + 768 * 256;
        assert_eq!(m.linear_weight_bytes(1), want);
    }
}
