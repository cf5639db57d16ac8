//! Which parts of a model a quantization config's module names cover: the exclude
//! lists of ModelOpt (`exclude_modules`, `ignore`), transformers (`modules_to_not_
//! convert`) and compressed-tensors (`ignore`, with `re:` patterns), and ModelOpt's
//! per-module `quantized_layers`. A name is read for its layer number and the part it
//! names; a part counts as covered when the names cover it on at least half of the
//! layers that have it (a model file has one format per part).

use super::arch::LayerSpec;
use spec::model::{AttentionKind, FfnKind};

/// The parts of a model that have a format of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    /// Softmax attention's projections (and an indexer's).
    Attention,
    /// A linear-attention or Mamba mixer's projections.
    Mixer,
    Experts,
    Shared,
    Dense,
}

pub(super) const PARTS: [Part; 5] = [
    Part::Attention,
    Part::Mixer,
    Part::Experts,
    Part::Shared,
    Part::Dense,
];

impl Part {
    pub(super) fn name(self) -> &'static str {
        match self {
            Part::Attention => "attention",
            Part::Mixer => "linear-attention/Mamba mixers",
            Part::Experts => "routed experts",
            Part::Shared => "shared experts",
            Part::Dense => "dense FFN",
        }
    }

    /// Whether layer `l` has this part.
    fn in_layer(self, l: &LayerSpec) -> bool {
        match self {
            Part::Attention => l.attention.is_softmax(),
            Part::Mixer => matches!(l.attention, AttentionKind::Linear | AttentionKind::Mamba),
            Part::Experts | Part::Shared => l.ffn == FfnKind::Moe,
            Part::Dense => l.ffn == FfnKind::Dense,
        }
    }
}

/// A module name or pattern: its layer (None: every layer) and the parts it names
/// (every part of the layer when it names the layer alone).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Named {
    pub layer: Option<u32>,
    pub parts: Vec<Part>,
}

/// Reads a module name or pattern (`model.layers.3.self_attn*`, `*.mlp.shared_expert.*`,
/// `re:.*self_attn.*`, `backbone.layers.5.mixer.q_proj`, `model.layers.0*`).
pub(super) fn read(pattern: &str) -> Named {
    let p = pattern
        .trim_start_matches("re:")
        .replace("\\.", ".")
        .replace(".*", "*")
        .to_lowercase();
    let layer = layer_of(&p);
    // What follows the layer number, if any.
    let rest = match layer {
        Some(n) => {
            let key = format!("layers.{n}");
            let at = p.find(&key).map(|i| i + key.len()).unwrap_or(0);
            p[at..].trim_start_matches('.').to_string()
        }
        None => p.clone(),
    };
    let parts = if layer.is_some() && rest.trim_matches('*').is_empty() {
        PARTS.to_vec()
    } else {
        parts_named(&rest)
    };
    Named { layer, parts }
}

/// The layer number after `layers.`, if the name has one.
fn layer_of(p: &str) -> Option<u32> {
    let i = p.find("layers.")? + "layers.".len();
    let digits: String = p[i..].chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// The parts a name's tail names.
fn parts_named(rest: &str) -> Vec<Part> {
    let has = |s: &str| rest.contains(s);
    // Norms, biases and gating weights are not a part's GEMM weights.
    let last = rest.trim_end_matches('*').rsplit('.').next().unwrap_or("");
    if last.contains("norm") || last.ends_with("bias") || last == "indexers_proj" {
        return Vec::new();
    }
    let mixer_proj = ["q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj"];
    if has("shared_expert") {
        vec![Part::Shared]
    } else if has("experts") {
        vec![Part::Experts]
    } else if has("linear_attn") || has("in_proj") || has("out_proj") || has("conv1d") {
        vec![Part::Mixer]
    } else if has("self_attn")
        || has("attn.")
        || has("attn*")
        || rest.starts_with("attn")
        || has("indexer")
        || (has("mixer.") && mixer_proj.iter().any(|m| has(m)))
    {
        vec![Part::Attention]
    } else if has("mlp.gate_proj")
        || has("mlp.up_proj")
        || has("mlp.down_proj")
        || has("mlp.gate_up")
        || has("mlp(")
        || has("mlp.(")
        || has("feed_forward")
        || has("mixer.up_proj")
        || has("mixer.down_proj")
    {
        vec![Part::Dense]
    } else if rest == "mlp*" || rest == "mlp" {
        // A layer's whole MLP: its dense FFN, or the dense MLP beside its experts
        // (Gemma-4 keeps its experts apart, under `experts`).
        vec![Part::Dense, Part::Shared]
    } else {
        // Routers, norms, embeddings, the LM head, vision towers, MTP: not a part
        // with a format of its own here.
        Vec::new()
    }
}

/// The layers among `layers` that have `part`, and how many of them `names` cover.
pub(super) fn coverage(names: &[Named], layers: &[LayerSpec], part: Part) -> (usize, usize) {
    let mut have = 0;
    let mut covered = 0;
    for (i, l) in layers.iter().enumerate() {
        if !part.in_layer(l) {
            continue;
        }
        have += 1;
        if names
            .iter()
            .any(|n| n.parts.contains(&part) && n.layer.is_none_or(|x| x as usize == i))
        {
            covered += 1;
        }
    }
    (have, covered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_parts_and_layers() {
        let r = read("model.layers.12.self_attn*");
        assert_eq!((r.layer, r.parts), (Some(12), vec![Part::Attention]));
        let r = read("model.language_model.layers.0.mlp.shared_expert_gate");
        assert_eq!((r.layer, r.parts), (Some(0), vec![Part::Shared]));
        let r = read("model.layers.0*");
        assert_eq!((r.layer, r.parts.len()), (Some(0), 5));
        let r = read("model.layers.1.*");
        assert_eq!((r.layer, r.parts.len()), (Some(1), 5));
        let r = read("re:.*self_attn.*");
        assert_eq!((r.layer, r.parts), (None, vec![Part::Attention]));
        let r = read("re:.*mlp\\.(gate|up|gate_up|down)_proj.*");
        assert_eq!(r.parts, vec![Part::Dense]);
        let r = read("*.attn.*");
        assert_eq!(r.parts, vec![Part::Attention]);
        let r = read("backbone.layers.5.mixer.q_proj");
        assert_eq!((r.layer, r.parts), (Some(5), vec![Part::Attention]));
        let r = read("backbone.layers.4.mixer.in_proj");
        assert_eq!(r.parts, vec![Part::Mixer]);
        let r = read("model.language_model.layers.3.linear_attn*");
        assert_eq!(r.parts, vec![Part::Mixer]);
        let r = read("backbone.layers.1.mixer.experts.0.down_proj");
        assert_eq!(r.parts, vec![Part::Experts]);
        assert!(read("lm_head").parts.is_empty());
        assert!(read("model.layers.3.self_attn.kv_a_layernorm")
            .parts
            .is_empty());
        assert!(read("model.layers.3.mlp.gate.e_score_correction_bias")
            .parts
            .is_empty());
        let r = read("model.language_model.layers.0.mlp*");
        assert_eq!(r.parts, vec![Part::Dense, Part::Shared]);
        assert!(read("model.layers.3.block_sparse_moe.gate")
            .parts
            .is_empty());
    }
}
