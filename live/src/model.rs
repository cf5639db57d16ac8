//! The model a live run serves: a model file as the live engine runs it
//! (`spec::live_model::LiveModel`, shared with the fitted cost model, so the run and
//! its prediction see the same widths), which is the executor's configuration.

use engine::serve::ModelConfig;
use spec::live_model::LiveModel;

/// KV cache page of live runs, tokens (a prefix-cache block is 512 / 64 = 8 pages).
pub const PAGE_TOKENS: usize = 64;

/// The executor's configuration of a live model: the live model itself (one type,
/// `spec::live_model::LiveModel`, for the run and its prediction).
pub fn engine_config(m: &LiveModel) -> ModelConfig {
    m.clone()
}
