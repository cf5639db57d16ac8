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

/// Appends a part of `params` parameters (`active` per token) of `dtype`, with one
/// scale per `block` weights, to `parts`; a part without parameters is left out.
fn push_part(
    parts: &mut Vec<Part>,
    name: &'static str,
    dtype: Dtype,
    params: f64,
    active: f64,
    block: u32,
) {
    if params > 0.0 {
        parts.push(Part {
            name,
            dtype,
            params,
            active,
            bytes: params * bytes_per_weight(dtype, block),
        });
    }
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
        self.active() - self.active_of("embedding")
    }
    /// Parameters one token uses in the parts named `name` (`lm_head`, `embedding`, ...).
    pub fn active_of(&self, name: &str) -> f64 {
        self.parts
            .iter()
            .filter(|p| p.name == name)
            .map(|p| p.active)
            .sum()
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
        let moe_layers = layers.iter().filter(|l| l.ffn == FfnKind::Moe).count() as f64;
        let indexer_layers = layers.iter().filter(|l| l.has_indexer).count() as f64;
        let mut parts = Vec::new();
        let table = self.vocab as f64 * h;
        push_part(
            &mut parts,
            "embedding",
            self.embedding_dtype,
            table,
            table,
            0,
        );
        if !self.tied_embeddings {
            push_part(&mut parts, "lm_head", self.embedding_dtype, table, table, 0);
        }
        self.mixer_parts(&mut parts, indexer_layers);
        self.ffn_parts(&mut parts, moe_layers);
        Weights {
            parts,
            mtp_params: self.mtp_params(&layers),
        }
    }

    /// Appends the token mixers' parts (attention, linear attention, Mamba, the
    /// indexer of `indexer_layers` layers) to `parts`.
    fn mixer_parts(&self, parts: &mut Vec<Part>, indexer_layers: f64) {
        let h = self.hidden as f64;
        let a = &self.attention;
        let attn = self.mixer_params_where(|k| k.is_softmax());
        push_part(
            parts,
            "attention",
            a.weight_dtype,
            attn,
            attn,
            self.dense_scale_block_of(a.weight_dtype),
        );
        if let Some(l) = &self.linear_attention {
            let p = self.mixer_params_where(|k| k == AttentionKind::Linear);
            let block = self.dense_scale_block_of(l.weight_dtype);
            push_part(parts, "linear_attention", l.weight_dtype, p, p, block);
        }
        if let Some(m) = &self.mamba {
            let p = self.mixer_params_where(|k| k == AttentionKind::Mamba);
            push_part(
                parts,
                "mamba",
                m.weight_dtype,
                p,
                p,
                self.dense_scale_block_of(m.weight_dtype),
            );
        }
        if let Some(i) = &a.indexer {
            // Query from the q latent (or the hidden state), one key, head weights.
            let q_in = if a.q_lora > 0 { a.q_lora as f64 } else { h };
            let p = indexer_layers
                * (q_in * i.heads as f64 * i.head_dim as f64
                    + h * i.head_dim as f64
                    + h * i.heads as f64);
            push_part(
                parts,
                "indexer",
                a.weight_dtype,
                p,
                p,
                self.dense_scale_block_of(a.weight_dtype),
            );
        }
    }

    /// Appends the FFNs' parts (routed and shared experts, latent projections and
    /// router of `moe_layers` MoE layers; the dense FFNs) to `parts`.
    fn ffn_parts(&self, parts: &mut Vec<Part>, moe_layers: f64) {
        let h = self.hidden as f64;
        if let Some(m) = &self.moe {
            let e = self.expert_params();
            push_part(
                parts,
                "routed_experts",
                m.weight_dtype,
                moe_layers * m.routed_experts as f64 * e,
                moe_layers * m.top_k as f64 * e,
                m.scale_block,
            );
            let s = moe_layers * self.shared_params_per_layer();
            let sb = self.dense_scale_block_of(m.shared_weight_dtype);
            push_part(parts, "shared_experts", m.shared_weight_dtype, s, s, sb);
            if let Some(latent) = m.latent {
                let p = moe_layers * 2.0 * h * latent as f64;
                push_part(parts, "latent_proj", m.shared_weight_dtype, p, p, sb);
            }
            let r = moe_layers * h * m.routed_experts as f64;
            push_part(parts, "router", Dtype::Bf16, r, r, 0);
        }
        if let Some(d) = &self.dense_ffn {
            let p = self.dense_ffn_params();
            push_part(
                parts,
                "dense_ffn",
                d.weight_dtype,
                p,
                p,
                self.dense_scale_block_of(d.weight_dtype),
            );
        }
    }

    /// Token-mixer parameters of the layers whose kind `keep` accepts.
    fn mixer_params_where(&self, keep: impl Fn(AttentionKind) -> bool) -> f64 {
        self.layers
            .iter()
            .filter(|g| keep(g.attention))
            .map(|g| g.count as f64 * self.mixer_params(g))
            .sum()
    }

    /// Parameters of one MoE layer's shared experts.
    pub fn shared_params_per_layer(&self) -> f64 {
        match &self.moe {
            // Written as the shared experts' count times one expert's parameters (at
            // the hidden width) where that is what they are.
            Some(m) if m.shared_ffn.is_none() && m.latent.is_none() => {
                m.shared_experts as f64 * self.expert_params()
            }
            Some(m) => m.matrices() * self.hidden as f64 * m.shared_width() as f64,
            None => 0.0,
        }
    }

    /// Parameters of the dense FFNs, all dense layers together.
    fn dense_ffn_params(&self) -> f64 {
        let Some(d) = &self.dense_ffn else {
            return 0.0;
        };
        let h = self.hidden as f64;
        let dense = self.layers.iter().filter(|g| g.ffn == FfnKind::Dense);
        if dense.clone().all(|g| g.ffn_width.is_none()) {
            let n = dense.map(|g| g.count as f64).sum::<f64>();
            return n * d.matrices() * h * d.ffn as f64;
        }
        dense
            .map(|g| g.count as f64 * d.matrices() * h * self.ffn_width_of(g) as f64)
            .sum()
    }

    /// The MTP modules' parameters: each one more decoder layer (attention and the
    /// FFN of the last layer's kind, MoE where the last layer has none) and a
    /// projection of the two hidden states it joins.
    fn mtp_params(&self, layers: &[crate::model::Layer]) -> f64 {
        let (Some(mtp), Some(last)) = (&self.mtp, layers.last()) else {
            return 0.0;
        };
        let h = self.hidden as f64;
        let kind = match (last.ffn, &self.moe) {
            (FfnKind::None, Some(_)) => FfnKind::Moe,
            (FfnKind::None, None) => FfnKind::Dense,
            (k, _) => k,
        };
        let ffn = match (kind, &self.moe, &self.dense_ffn) {
            (FfnKind::Moe, Some(m), _) => {
                m.routed_experts as f64 * self.expert_params()
                    + self.shared_params_per_layer()
                    + h * m.routed_experts as f64
            }
            (FfnKind::Dense, _, Some(d)) => d.matrices() * h * d.ffn as f64,
            _ => 0.0,
        };
        mtp.modules.max(1) as f64 * (self.attention_params_per_layer() + ffn + 2.0 * h * h)
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

    /// KV bytes one token adds to the cache at `entry_bytes` per layer entry of the
    /// model's `[attention]` (a group with its own shape scaled alike): the layers that
    /// cache every token (sliding-window and chunked layers keep only their span,
    /// linear-attention and Mamba layers a fixed state: `local_kv_bytes`,
    /// `state_bytes_per_request`).
    pub fn kv_bytes_per_token_at(&self, entry_bytes: f64) -> f64 {
        let main = self.attention.kv_entry_bytes;
        let kept = self
            .expand_layers()
            .iter()
            .filter(|l| l.attention.caches_every_token())
            .map(|l| {
                let shape = self.layers[l.group as usize].attention_shape.as_ref();
                match shape {
                    Some(s) if main > 0.0 => {
                        s.kv_entry_bytes / main / l.compress_ratio.max(1) as f64
                    }
                    _ => 1.0 / l.compress_ratio.max(1) as f64,
                }
            })
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
