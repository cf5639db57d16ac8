//! The FFNs of an imported model: which layers are dense or MoE, the MoE table, MTP.

use super::*;

/// Each layer's FFN: dense or MoE, by the architecture's rule.
pub(super) fn ffn_kinds(cfg: &Cfg, arch: &str, n: u32) -> Result<Vec<FfnKind>> {
    let all = |k| vec![k; n as usize];
    Ok(match arch {
        "LlamaForCausalLM" | "MistralForCausalLM" | "Qwen2ForCausalLM" | "Qwen3ForCausalLM" => {
            all(FfnKind::Dense)
        }
        "MixtralForCausalLM" | "GptOssForCausalLM" => all(FfnKind::Moe),
        "Qwen3MoeForCausalLM" => {
            let step = cfg.u32_opt("decoder_sparse_step")?.unwrap_or(1).max(1);
            let dense: Vec<u64> = match cfg.get("mlp_only_layers") {
                Some(Value::Array(a)) => a.iter().filter_map(|x| x.as_u64()).collect(),
                _ => Vec::new(),
            };
            (0..n)
                .map(|i| {
                    if !dense.contains(&(i as u64)) && (i + 1) % step == 0 {
                        FfnKind::Moe
                    } else {
                        FfnKind::Dense
                    }
                })
                .collect()
        }
        // DeepSeek and GLM-4.5: the first k layers dense, then MoE every `freq`.
        _ => {
            let k = cfg.u32_opt("first_k_dense_replace")?.unwrap_or(0);
            let freq = cfg.u32_opt("moe_layer_freq")?.unwrap_or(1).max(1);
            (0..n)
                .map(|i| {
                    if i >= k && i % freq == 0 {
                        FfnKind::Moe
                    } else {
                        FfnKind::Dense
                    }
                })
                .collect()
        }
    })
}

pub(super) fn moe(cfg: &Cfg, arch: &str, q: &Quant, prov: &mut Prov) -> Result<Moe> {
    let (experts, ek) = cfg
        .first(&["n_routed_experts", "num_experts", "num_local_experts"])?
        .ok_or_else(|| anyhow!("{}: MoE layers but no expert count (n_routed_experts, num_experts or num_local_experts)", cfg.origin))?;
    let (top_k, tk) = cfg
        .first(&["num_experts_per_tok", "experts_per_token"])?
        .ok_or_else(|| anyhow!("{}: MoE layers but no `num_experts_per_tok`", cfg.origin))?;
    let (ffn, fk) = cfg
        .first(&["moe_intermediate_size", "intermediate_size"])?
        .ok_or_else(|| {
            anyhow!(
                "{}: MoE layers but no expert width (moe_intermediate_size)",
                cfg.origin
            )
        })?;
    let shared = cfg.u32_opt("n_shared_experts")?.unwrap_or(0);
    if experts == 0 || top_k == 0 || top_k > experts {
        bail!(
            "{}: {tk} {top_k} must lie in 1..={experts} ({ek})",
            cfg.origin
        );
    }
    prov.set("moe.routed_experts", cfg.derived(ek));
    prov.set("moe.top_k", cfg.derived(tk));
    prov.set("moe.expert_ffn", cfg.derived(fk));
    prov.set(
        "moe.shared_experts",
        if cfg.get("n_shared_experts").is_some() {
            cfg.derived("n_shared_experts")
        } else {
            format!("derived: {arch} has no shared expert")
        },
    );
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
    prov.set(
        "moe.fused",
        "assumed: separate dispatch, expert GEMM and combine kernels (no fused MoE kernel)",
    );
    prov.set("moe.weight_dtype", q.experts.why.clone());
    prov.set("moe.scale_block", q.experts.why.clone());
    prov.set("moe.shared_weight_dtype", q.other.why.clone());
    prov.set("moe.activation_dtype", q.activation.why.clone());
    prov.set(
        "moe.expert_load_cv",
        "assumed: popularity CV 0.4, as DeepSeek-V3's file (no statistic published for this model)",
    );
    Ok(Moe {
        routed_experts: experts,
        shared_experts: shared,
        top_k,
        expert_ffn: ffn,
        weight_dtype: q.experts.dtype,
        scale_block: q.experts.scale_block,
        shared_weight_dtype: q.other.dtype,
        activation_dtype: q.activation.dtype,
        groups,
        topk_groups,
        expert_load_cv: 0.4,
        balanced: false,
        fused: false,
        shared_ffn: None,
        gated: true,
        latent: None,
    })
}

pub(super) fn mtp(cfg: &Cfg, prov: &mut Prov) -> Result<Option<Mtp>> {
    let n = cfg.u32_opt("num_nextn_predict_layers")?.unwrap_or(0);
    if n == 0 {
        return Ok(None);
    }
    prov.set("mtp.draft_tokens", cfg.derived("num_nextn_predict_layers"));
    prov.set(
        "mtp.acceptance",
        "assumed: 0.8 per draft (DeepSeek reports 85-90% for V3's second token; measure your own)",
    );
    Ok(Some(Mtp {
        draft_tokens: n,
        acceptance: vec![0.8; n as usize],
        modules: 1,
    }))
}
