//! The model a live run serves: a model file as the live engine runs it
//! (`sim::cost::fitted::LiveModel`, shared with the fitted cost model, so the run and
//! its prediction see the same widths) turned into the executor's configuration.

use engine::serve::{AttnKind, IndexerConfig, LayerConfig, ModelConfig, MoeConfig};
use kernels::WeightDtype;
use sim::cost::fitted::{LiveAttn, LiveModel};

/// KV cache page of live runs, tokens (a prefix-cache block is 512 / 64 = 8 pages).
pub const PAGE_TOKENS: usize = 64;

/// The executor's configuration of a live model.
pub fn engine_config(m: &LiveModel) -> ModelConfig {
    ModelConfig {
        name: m.name.clone(),
        hidden: m.hidden,
        vocab: m.vocab,
        heads: m.heads,
        latent: m.latent,
        window: m.window,
        indexer: m
            .indexer
            .map(|(heads, dim, topk)| IndexerConfig { heads, dim, topk }),
        layers: m
            .layers
            .iter()
            .map(|l| LayerConfig {
                attention: match l.attention {
                    LiveAttn::Dense => AttnKind::Dense,
                    LiveAttn::Sparse => AttnKind::Sparse,
                    LiveAttn::Window => AttnKind::Window,
                },
                window_branch: l.window_branch,
                has_indexer: l.has_indexer,
                moe: l.moe,
            })
            .collect(),
        moe: m
            .moe
            .map(|(experts, top_k, expert_ffn, shared_ffn)| MoeConfig {
                experts,
                top_k,
                expert_ffn,
                shared_ffn,
            }),
        dense_ffn: m.dense_ffn,
        mtp_ffn: m.mtp_ffn,
        weight_dtype: WeightDtype::parse(m.dtype).unwrap_or(WeightDtype::Bf16),
        page_size: m.page,
    }
}
