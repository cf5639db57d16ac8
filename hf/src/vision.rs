//! The parameters of a vision-language wrapper's vision tower, counted from its
//! `vision_config` for `twin model show` (the tower is not priced: its tokens reach
//! the language model as input tokens).

use super::*;

/// How the count is made, as provenance says it.
pub(super) const HOW: &str = "are counted from vision_config as its transformer blocks (depth x (4 h^2 + 2 h x intermediate), with the attention's own width where the config gives one), its patch embedding, position table and the patch merger(s) into the language model's width (an estimate: norms, biases and any other projector are left out)";

/// A number of the vision config under the first of `keys`.
fn num(v: &Value, keys: &[&str]) -> Option<f64> {
    keys.iter().find_map(|k| v.get(*k).and_then(|x| x.as_f64()))
}

/// The vision tower's parameters (0 without a `vision_config` twin can read); `text`
/// is the language model's width.
pub(super) fn params(cfg: &Cfg, text: u32) -> f64 {
    let Some(v) = cfg.root.get("vision_config").filter(|v| v.is_object()) else {
        return 0.0;
    };
    let layers = num(v, &["depth", "num_hidden_layers", "vt_num_hidden_layers"]);
    let h = num(v, &["hidden_size", "vt_hidden_size", "embed_dim"]);
    let (Some(layers), Some(h)) = (layers, h) else {
        return 0.0;
    };
    let i = num(v, &["intermediate_size", "vt_intermediate_size"]).unwrap_or(4.0 * h);
    let a = num(v, &["qkv_hidden_size"]).unwrap_or(h);
    let blocks = layers * (3.0 * h * a + a * h + 2.0 * h * i);
    let patch = num(v, &["patch_size"]).unwrap_or(14.0);
    let channels = num(v, &["in_channels", "num_channels"]).unwrap_or(3.0);
    let temporal = num(v, &["temporal_patch_size"]).unwrap_or(1.0);
    let embed = channels * patch * patch * temporal * h;
    let positions =
        num(v, &["num_position_embeddings", "position_embedding_size"]).unwrap_or(0.0) * h;
    // Patches merged 2 x 2 (Qwen's spatial_merge_size, Kimi's merge_kernel_size)
    // before the merger's two layers into the text width.
    let merge = num(v, &["spatial_merge_size"])
        .map(|m| m * m)
        .or_else(|| {
            v.get("merge_kernel_size")
                .and_then(|k| k.as_array())
                .map(|k| k.iter().filter_map(|x| x.as_f64()).product())
        })
        .unwrap_or(1.0);
    let out = num(
        v,
        &["out_hidden_size", "projection_dim", "text_hidden_size"],
    )
    .unwrap_or(text as f64);
    let hm = h * merge;
    let mergers = 1.0
        + v.get("deepstack_visual_indexes")
            .and_then(|d| d.as_array())
            .map_or(0.0, |d| d.len() as f64);
    blocks + embed + positions + mergers * (hm * hm + hm * out)
}
