//! A model's parameters and weight bytes, counted part by part as model cards count
//! them: what `twin model show` prints, and what a planner holds against the card.
//!
//! Norm weights and biases are left out (under 0.1% of any shipped or imported model).

use crate::dtype::Dtype;
use crate::model::{AttentionKind, FfnKind, Model};

/// One part of the weights: its parameters, whether every token uses all of them, and
/// its bytes in memory (block scales included).
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub name: &'static str,
    pub dtype: Dtype,
    /// Parameters of the part, all layers together.
    pub params: f64,
    /// Parameters one token multiplies by (routed experts: its top-k and the shared).
    pub active: f64,
    pub bytes: f64,
}

/// Parameters and bytes of a model, part by part.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    pub parts: Vec<Part>,
    /// The MTP module's parameters (a draft layer, shipped beside the main model and
    /// counted apart by model cards).
    pub mtp_params: f64,
}

/// Bytes per weight of `dtype` with one one-byte scale per `block` weights (0: none).
pub fn bytes_per_weight(dtype: Dtype, block: u32) -> f64 {
    dtype.bytes() + if block > 0 { 1.0 / block as f64 } else { 0.0 }
}

impl Weights {
    /// Parameters in all (the main model, without the MTP module).
    pub fn total(&self) -> f64 {
        self.parts.iter().map(|p| p.params).sum()
    }
    /// Parameters one token uses, the input embedding table included (its row is read,
    /// not multiplied; Mistral and Qwen count it, OpenAI does not).
    pub fn active(&self) -> f64 {
        self.parts.iter().map(|p| p.active).sum()
    }
    /// Parameters one token uses, without the input embedding table.
    pub fn active_without_embedding(&self) -> f64 {
        self.active()
            - self
                .parts
                .iter()
                .filter(|p| p.name == "embedding")
                .map(|p| p.active)
                .sum::<f64>()
    }
    /// Bytes of all weights (main model), scales included.
    pub fn bytes(&self) -> f64 {
        self.parts.iter().map(|p| p.bytes).sum()
    }
    /// Bytes by dtype, in the order dtypes first appear.
    pub fn bytes_by_dtype(&self) -> Vec<(Dtype, f64)> {
        let mut out: Vec<(Dtype, f64)> = Vec::new();
        for p in &self.parts {
            match out.iter_mut().find(|(d, _)| *d == p.dtype) {
                Some((_, b)) => *b += p.bytes,
                None => out.push((p.dtype, p.bytes)),
            }
        }
        out
    }
}

impl Model {
    /// The model's parameters and weight bytes, part by part.
    pub fn weights(&self) -> Weights {
        let h = self.hidden as f64;
        let layers = self.expand_layers();
        let n = layers.len() as f64;
        let moe_layers = layers.iter().filter(|l| l.ffn == FfnKind::Moe).count() as f64;
        let dense_layers = n - moe_layers;
        let indexer_layers = layers.iter().filter(|l| l.has_indexer).count() as f64;
        let a = &self.attention;
        let mut parts = Vec::new();
        let mut push = |name, dtype, params: f64, active: f64, block| {
            if params > 0.0 {
                parts.push(Part {
                    name,
                    dtype,
                    params,
                    active,
                    bytes: params * bytes_per_weight(dtype, block),
                });
            }
        };
        let table = self.vocab as f64 * h;
        push("embedding", self.embedding_dtype, table, table, 0);
        if !self.tied_embeddings {
            push("lm_head", self.embedding_dtype, table, table, 0);
        }
        let attn = self.attention_params_per_layer() * n;
        push(
            "attention",
            a.weight_dtype,
            attn,
            attn,
            self.dense_scale_block_of(a.weight_dtype),
        );
        if let Some(i) = &a.indexer {
            // Query from the q latent (or the hidden state), one key, head weights.
            let q_in = if a.q_lora > 0 { a.q_lora as f64 } else { h };
            let p = indexer_layers
                * (q_in * i.heads as f64 * i.head_dim as f64
                    + h * i.head_dim as f64
                    + h * i.heads as f64);
            push(
                "indexer",
                a.weight_dtype,
                p,
                p,
                self.dense_scale_block_of(a.weight_dtype),
            );
        }
        if let Some(m) = &self.moe {
            let e = self.expert_params();
            push(
                "routed_experts",
                m.weight_dtype,
                moe_layers * m.routed_experts as f64 * e,
                moe_layers * m.top_k as f64 * e,
                m.scale_block,
            );
            let s = moe_layers * m.shared_experts as f64 * e;
            push(
                "shared_experts",
                m.shared_weight_dtype,
                s,
                s,
                self.dense_scale_block_of(m.shared_weight_dtype),
            );
            let r = moe_layers * h * m.routed_experts as f64;
            push("router", Dtype::Bf16, r, r, 0);
        }
        if let Some(d) = &self.dense_ffn {
            let p = dense_layers * 3.0 * h * d.ffn as f64;
            push(
                "dense_ffn",
                d.weight_dtype,
                p,
                p,
                self.dense_scale_block_of(d.weight_dtype),
            );
        }
        // One more decoder layer (attention and the FFN of the last layer's kind) and
        // a projection of the two hidden states it joins.
        let mtp_params = match (&self.mtp, layers.last()) {
            (Some(_), Some(last)) => {
                let ffn = match (last.ffn, &self.moe, &self.dense_ffn) {
                    (FfnKind::Moe, Some(m), _) => {
                        (m.routed_experts + m.shared_experts) as f64 * self.expert_params()
                            + h * m.routed_experts as f64
                    }
                    (FfnKind::Dense, _, Some(d)) => 3.0 * h * d.ffn as f64,
                    _ => 0.0,
                };
                self.attention_params_per_layer() + ffn + 2.0 * h * h
            }
            _ => 0.0,
        };
        Weights { parts, mtp_params }
    }

    /// The block scale of a non-expert GEMM's weights: none at two bytes or wider.
    fn dense_scale_block_of(&self, dtype: Dtype) -> u32 {
        if dtype.bytes() >= 2.0 {
            0
        } else {
            self.dense_scale_block
        }
    }

    /// Layers by kind: (attention kind, FFN kind, count), in order of first appearance.
    pub fn layers_by_kind(&self) -> Vec<(AttentionKind, FfnKind, u32)> {
        let mut out: Vec<(AttentionKind, FfnKind, u32)> = Vec::new();
        for l in self.expand_layers() {
            match out
                .iter_mut()
                .find(|(a, f, _)| *a == l.attention && *f == l.ffn)
            {
                Some((_, _, c)) => *c += 1,
                None => out.push((l.attention, l.ffn, 1)),
            }
        }
        out
    }

    /// KV bytes one token adds to the cache at `entry_bytes` per layer entry (the
    /// sliding-window layers keep only their window and are left out).
    pub fn kv_bytes_per_token_at(&self, entry_bytes: f64) -> f64 {
        let kept = self
            .expand_layers()
            .iter()
            .filter(|l| l.attention != AttentionKind::Window)
            .map(|l| 1.0 / l.compress_ratio.max(1) as f64)
            .sum::<f64>();
        let index = self
            .attention
            .indexer
            .as_ref()
            .map(|i| i.key_bytes)
            .unwrap_or(0.0);
        let idx_layers = self
            .expand_layers()
            .iter()
            .filter(|l| l.has_indexer)
            .map(|l| 1.0 / l.compress_ratio.max(1) as f64)
            .sum::<f64>();
        kept * entry_bytes + idx_layers * index
    }
}
