//! The recurrent token mixers of hybrid models: gated DeltaNet linear attention
//! (Qwen3-Next, Qwen3.5: `linear_*` keys) and Mamba-2 (Nemotron-H: `mamba_*`,
//! `ssm_state_size`, `n_groups`).

use super::*;
use spec::state::{LinearAttention, Mamba};

/// The recurrent state's dtype: the config's `mamba_ssm_dtype` or
/// `mamba_ssm_cache_dtype` where it names one, else the activations' BF16.
fn state_dtype(cfg: &Cfg, field: &str, prov: &mut Prov) -> Result<Dtype> {
    for k in ["mamba_ssm_cache_dtype", "mamba_ssm_dtype"] {
        if let Some(s) = cfg.str(k) {
            let d = match s {
                "float32" | "fp32" => Dtype::Fp32,
                "bfloat16" | "float16" | "bf16" | "auto" => Dtype::Bf16,
                other => bail!(
                    "{}: `{k}` = {other} (twin reads float32, bfloat16, float16)",
                    cfg.origin
                ),
            };
            prov.set(
                field,
                cfg.derived(&format!(
                    "{k} {s} (the dtype the engine keeps the state in)"
                )),
            );
            return Ok(d);
        }
    }
    prov.set(
        field,
        "assumed: the state in BF16, the model's dtype (vLLM's mamba_ssm_cache_dtype auto)",
    );
    Ok(Dtype::Bf16)
}

/// Gated DeltaNet linear attention.
pub(super) fn linear(cfg: &Cfg, q: &Quant, prov: &mut Prov) -> Result<LinearAttention> {
    let key_heads = cfg.u32("linear_num_key_heads")?;
    let key_dim = cfg.u32("linear_key_head_dim")?;
    let value_heads = cfg.u32("linear_num_value_heads")?;
    let value_dim = cfg.u32("linear_value_head_dim")?;
    let conv_kernel = cfg.u32("linear_conv_kernel_dim")?;
    for (f, k) in [
        ("key_heads", "linear_num_key_heads"),
        ("key_dim", "linear_key_head_dim"),
        ("value_heads", "linear_num_value_heads"),
        ("value_dim", "linear_value_head_dim"),
        ("conv_kernel", "linear_conv_kernel_dim"),
    ] {
        prov.set(&format!("linear_attention.{f}"), cfg.derived(k));
    }
    prov.set(
        "linear_attention.chunk",
        "assumed: 64-token chunks, the chunk size of flash-linear-attention's chunk_gated_delta_rule (the kernel vLLM and SGLang run for gated DeltaNet)",
    );
    prov.set("linear_attention.weight_dtype", q.mixer.why.clone());
    let state_dtype = state_dtype(cfg, "linear_attention.state_dtype", prov)?;
    Ok(LinearAttention {
        key_heads,
        key_dim,
        value_heads,
        value_dim,
        conv_kernel,
        chunk: 64,
        weight_dtype: q.mixer.dtype,
        state_dtype,
    })
}

/// A Mamba-2 mixer.
pub(super) fn mamba(cfg: &Cfg, q: &Quant, prov: &mut Prov) -> Result<Mamba> {
    let heads = cfg.u32("mamba_num_heads")?;
    let head_dim = cfg.u32("mamba_head_dim")?;
    let state_size = cfg.u32("ssm_state_size")?;
    let groups = cfg.u32("n_groups")?;
    let conv_kernel = cfg.u32("conv_kernel")?;
    for (f, k) in [
        ("heads", "mamba_num_heads"),
        ("head_dim", "mamba_head_dim"),
        ("state_size", "ssm_state_size"),
        ("groups", "n_groups"),
        ("conv_kernel", "conv_kernel"),
    ] {
        prov.set(&format!("mamba.{f}"), cfg.derived(k));
    }
    let chunk = match cfg.u32_opt("chunk_size")? {
        Some(c) => {
            prov.set("mamba.chunk", cfg.derived("chunk_size"));
            c
        }
        None => {
            prov.set(
                "mamba.chunk",
                "assumed: 256-token chunks, mamba_ssm's default chunk_size for the SSD kernels",
            );
            256
        }
    };
    prov.set("mamba.weight_dtype", q.mixer.why.clone());
    let state_dtype = state_dtype(cfg, "mamba.state_dtype", prov)?;
    Ok(Mamba {
        heads,
        head_dim,
        state_size,
        groups,
        conv_kernel,
        chunk,
        weight_dtype: q.mixer.dtype,
        state_dtype,
    })
}
