//! What the serving tests share: a small model with every kind of layer.

use engine::serve::{AttnKind, IndexerConfig, LayerConfig, LinearDtype, ModelConfig, MoeConfig};

/// Four layers (sparse with the indexer and the window branch, sparse, dense without
/// MoE, window), 8 experts top-2, a shared expert and an MTP head.
pub fn tiny() -> ModelConfig {
    let layer = |attention, window_branch, has_indexer, moe| LayerConfig {
        attention,
        window_branch,
        has_indexer,
        moe,
    };
    ModelConfig {
        name: "test-tiny".into(),
        hidden: 256,
        vocab: 512,
        heads: 2,
        latent: 128,
        window: 16,
        indexer: Some(IndexerConfig {
            heads: 2,
            dim: 32,
            topk: 8,
        }),
        layers: vec![
            layer(AttnKind::Sparse, true, true, true),
            layer(AttnKind::Sparse, false, false, true),
            layer(AttnKind::Dense, false, false, false),
            layer(AttnKind::Window, false, false, true),
        ],
        moe: Some(MoeConfig {
            experts: 8,
            top_k: 2,
            expert_ffn: 256,
            shared_ffn: 256,
        }),
        dense_ffn: 256,
        mtp_ffn: 256,
        weight_dtype: LinearDtype::Bf16,
        page_size: 16,
    }
}
