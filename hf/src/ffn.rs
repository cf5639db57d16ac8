//! The FFNs of an imported model: the MoE table (routed, shared, latent, gated or
//! not), the dense FFN, MTP and mHC.

use super::arch::LayerSpec;
use super::*;
use spec::model::{DenseFfn, Mhc, Moe, Mtp};

/// The shared experts' count and total width (None: `count x expert width`), from the
/// key the architecture names them with, and the provenance of each.
fn shared(cfg: &Cfg, arch: &str, prov: &mut Prov) -> Result<(u32, Option<u32>)> {
    let count_key = cfg.first(&["n_shared_experts", "num_shared_experts"])?;
    let width_key = cfg.first(&[
        "shared_expert_intermediate_size",
        "moe_shared_expert_intermediate_size",
        "share_expert_dim",
        "shared_intermediate_size",
    ])?;
    let (count, width) = match (count_key, width_key, arch) {
        (_, Some((0, k)), _) => {
            prov.set(
                "moe.shared_experts",
                cfg.derived(&format!("{k} 0 (no shared expert)")),
            );
            return Ok((0, None));
        }
        (Some((n, ck)), Some((w, wk)), _) => {
            prov.set("moe.shared_experts", cfg.derived(ck));
            prov.set("moe.shared_ffn", cfg.derived(wk));
            (n, Some(w))
        }
        (None, Some((w, wk)), _) => {
            prov.set(
                "moe.shared_experts",
                cfg.derived(&format!("{wk} (one shared expert of that width)")),
            );
            prov.set("moe.shared_ffn", cfg.derived(wk));
            (1, Some(w))
        }
        (Some((n, ck)), None, _) => {
            prov.set("moe.shared_experts", cfg.derived(ck));
            (n, None)
        }
        (None, None, "Llama4ForConditionalGeneration") => {
            prov.set(
                "moe.shared_experts",
                "derived: Llama4ForConditionalGeneration has one shared expert of intermediate_size beside its routed ones (transformers' Llama4TextMoe)",
            );
            (1, None)
        }
        (None, None, "Gemma4ForConditionalGeneration") => {
            let w = cfg.u32("intermediate_size")?;
            prov.set(
                "moe.shared_experts",
                cfg.derived("enable_moe_block: a dense MLP runs beside the experts on every token, priced as a shared expert"),
            );
            prov.set(
                "moe.shared_ffn",
                cfg.derived("intermediate_size (the dense MLP)"),
            );
            (1, Some(w))
        }
        (None, None, _) => {
            prov.set(
                "moe.shared_experts",
                format!("derived: {arch} has no shared expert"),
            );
            (0, None)
        }
    };
    Ok((count, width))
}

/// Whether the FFNs are gated (SwiGLU-style: gate, up, down): all but squared-ReLU
/// ones (`mlp_hidden_act relu2`, Nemotron-H).
fn gated(cfg: &Cfg) -> bool {
    !matches!(cfg.str("mlp_hidden_act"), Some("relu2"))
}

pub(super) fn moe(cfg: &Cfg, arch: &str, hidden: u32, q: &Quant, prov: &mut Prov) -> Result<Moe> {
    let (experts, ek) = cfg
        .first(&["n_routed_experts", "num_experts", "num_local_experts"])?
        .ok_or_else(|| err!("{}: MoE layers but no expert count (n_routed_experts, num_experts or num_local_experts)", cfg.origin))?;
    let (top_k, tk) = cfg
        .first(&[
            "num_experts_per_tok",
            "experts_per_token",
            "top_k_experts",
            "num_experts_per_token",
        ])?
        .ok_or_else(|| err!("{}: MoE layers but no `num_experts_per_tok`", cfg.origin))?;
    let (ffn, fk) = cfg
        .first(&["moe_intermediate_size", "intermediate_size"])?
        .ok_or_else(|| {
            err!(
                "{}: MoE layers but no expert width (moe_intermediate_size)",
                cfg.origin
            )
        })?;
    if experts == 0 || top_k == 0 || top_k > experts {
        bail!(
            "{}: {tk} {top_k} must lie in 1..={experts} ({ek})",
            cfg.origin
        );
    }
    prov.set("moe.routed_experts", cfg.derived(ek));
    prov.set("moe.top_k", cfg.derived(tk));
    prov.set("moe.expert_ffn", cfg.derived(fk));
    let (shared_experts, shared_ffn) = shared(cfg, arch, prov)?;
    let gated = gated(cfg);
    if !gated {
        prov.set(
            "moe.gated",
            cfg.derived("mlp_hidden_act relu2 (up and down projections, no gate)"),
        );
    }
    let latent = cfg
        .u32_opt("moe_latent_size")?
        .filter(|l| *l > 0 && *l != hidden);
    if latent.is_some() {
        prov.set("moe.latent", cfg.derived("moe_latent_size"));
    }
    let (groups, topk_groups) = moe_groups(cfg, arch, prov)?;
    moe_assumptions(q, prov);
    Ok(Moe {
        routed_experts: experts,
        shared_experts,
        top_k,
        expert_ffn: ffn,
        weight_dtype: q.experts.dtype,
        scale_block: q.experts.scale_block,
        shared_weight_dtype: q.shared.dtype,
        activation_dtype: q.activation.dtype,
        groups,
        topk_groups,
        expert_load_cv: 0.4,
        balanced: false,
        fused: false,
        shared_ffn,
        gated,
        latent,
    })
}

/// The expert groups and the groups each token may route to (1 and 1 without
/// `n_group`), with their provenance.
fn moe_groups(cfg: &Cfg, arch: &str, prov: &mut Prov) -> Result<(u32, u32)> {
    let groups = cfg.u32_opt("n_group")?.unwrap_or(1).max(1);
    let topk_groups = cfg.u32_opt("topk_group")?.unwrap_or(1).max(1);
    if cfg.get("n_group").is_some() {
        prov.set("moe.groups", cfg.derived("n_group"));
        prov.set("moe.topk_groups", cfg.derived("topk_group"));
    } else {
        let why = format!("derived: {arch} routes without group limits (no n_group)");
        prov.set("moe.groups", why.clone());
        prov.set("moe.topk_groups", why);
    }
    Ok((groups, topk_groups))
}

/// Provenance of the MoE fields taken from the quantization or assumed (kernels
/// unfused, expert load CV 0.4).
fn moe_assumptions(q: &Quant, prov: &mut Prov) {
    prov.set(
        "moe.fused",
        "assumed: separate dispatch, expert GEMM and combine kernels (no fused MoE kernel)",
    );
    prov.set("moe.weight_dtype", q.experts.why.clone());
    prov.set("moe.scale_block", q.experts.why.clone());
    prov.set("moe.shared_weight_dtype", q.shared.why.clone());
    prov.set("moe.activation_dtype", q.activation.why.clone());
    prov.set(
        "moe.expert_load_cv",
        "assumed: popularity CV 0.4, as DeepSeek-V3's file (no statistic published for this model)",
    );
}

/// The dense FFN: its width from the key the architecture names it with (a DeciLM
/// model's first dense layer's; its groups carry their own).
pub(super) fn dense(
    cfg: &Cfg,
    arch: &str,
    layers: &[LayerSpec],
    q: &Quant,
    prov: &mut Prov,
) -> Result<DenseFfn> {
    let (ffn, why) = match arch {
        "DeciLMForCausalLM" => {
            let w = layers
                .iter()
                .find_map(|l| l.ffn_width)
                .ok_or_else(|| err!("{}: no dense FFN block in block_configs", cfg.origin))?;
            (
                w,
                cfg.derived("block_configs[].ffn.ffn_mult: 2 x ffn_mult x hidden_size / 3, rounded up to a multiple of 256 (the first dense layer's; layers.ffn_width the others')"),
            )
        }
        _ => {
            let (w, k) = cfg
                .first(&[
                    "intermediate_size_mlp",
                    "dense_intermediate_size",
                    "intermediate_size",
                ])?
                .ok_or_else(|| {
                    err!(
                        "{}: dense FFN layers but no `intermediate_size`",
                        cfg.origin
                    )
                })?;
            (w, cfg.derived(k))
        }
    };
    prov.set("dense_ffn.ffn", why);
    prov.set("dense_ffn.weight_dtype", q.dense.why.clone());
    let gated = gated(cfg);
    if !gated {
        prov.set(
            "dense_ffn.gated",
            cfg.derived("mlp_hidden_act relu2 (up and down projections, no gate)"),
        );
    }
    Ok(DenseFfn {
        ffn,
        weight_dtype: q.dense.dtype,
        gated,
    })
}

/// Multi-token prediction: the modules shipped and the drafts they make per step.
pub(super) fn mtp(cfg: &Cfg, prov: &mut Prov) -> Result<Option<Mtp>> {
    // MiniMax: `num_mtp_modules` modules when `use_mtp` (M3 names it without it).
    let minimax = cfg
        .u32_opt("num_mtp_modules")?
        .filter(|_| cfg.get("use_mtp").is_none_or(|v| v.as_bool() == Some(true)));
    let (n, key) = match (
        minimax,
        cfg.u32_opt("num_nextn_predict_layers")?,
        cfg.u32_opt("mtp_num_hidden_layers")?,
    ) {
        (Some(m), _, _) if m > 0 => (m, "num_mtp_modules"),
        (_, Some(n), _) if n > 0 => (n, "num_nextn_predict_layers"),
        (_, _, Some(n)) if n > 0 => (n, "mtp_num_hidden_layers"),
        _ => return Ok(None),
    };
    prov.set("mtp.draft_tokens", cfg.derived(key));
    if n > 1 {
        prov.set("mtp.modules", cfg.derived(key));
    }
    prov.set(
        "mtp.acceptance",
        "assumed: 0.8 per draft (DeepSeek reports 85-90% for V3's second token; measure your own)",
    );
    Ok(Some(Mtp {
        draft_tokens: n,
        acceptance: vec![0.8; n as usize],
        modules: n,
    }))
}

/// Manifold-constrained hyper-connections (DeepSeek-V4's `hc_mult` residual streams).
pub(super) fn mhc(cfg: &Cfg, prov: &mut Prov) -> Result<Option<Mhc>> {
    match cfg.u32_opt("hc_mult")? {
        Some(n) if n > 1 => {
            prov.set("mhc.streams", cfg.derived("hc_mult"));
            prov.set("mhc.fused", "assumed: unfused reference kernels");
            Ok(Some(Mhc {
                streams: n,
                fused: false,
            }))
        }
        _ => Ok(None),
    }
}
