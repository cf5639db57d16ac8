//! The checkpoint's number formats, part by part (attention, linear-attention/Mamba
//! mixers, routed experts, shared experts, dense FFN): `--weights`; else the config's
//! own `quantization_config` (fp8 per-tensor or block, mxfp4, modelopt,
//! compressed-tensors, awq, gptq) and then a ModelOpt `hf_quant_config.json` beside it
//! (or given by `--quant`), whose exclude list keeps parts at the checkpoint's dtype;
//! else `torch_dtype`. And the KV cache's format.

use super::arch::LayerSpec;
use super::exclude::{self, Named, Part, PARTS};
use super::*;

/// One part's format: dtype, weights per one-byte scale, and how the statement reads
/// in provenance.
#[derive(Debug, Clone)]
pub(super) struct Format {
    pub(super) dtype: Dtype,
    pub(super) scale_block: u32,
    pub(super) why: String,
    /// Weight-only: the GEMMs take BF16 activations (ModelOpt's `W4A16_*`).
    pub(super) weight_only: bool,
}

/// The checkpoint's formats by part, the experts' activations, the KV cache.
#[derive(Debug, Clone)]
pub(super) struct Quant {
    pub(super) attention: Format,
    pub(super) mixer: Format,
    pub(super) experts: Format,
    pub(super) shared: Format,
    pub(super) dense: Format,
    pub(super) activation: Format,
    pub(super) kv: Format,
}

impl Quant {
    fn part_mut(&mut self, p: Part) -> &mut Format {
        match p {
            Part::Attention => &mut self.attention,
            Part::Mixer => &mut self.mixer,
            Part::Experts => &mut self.experts,
            Part::Shared => &mut self.shared,
            Part::Dense => &mut self.dense,
        }
    }

    /// The non-expert part whose block scale the model's `dense_scale_block` takes:
    /// the first of attention, dense FFN, shared experts, mixers narrower than two
    /// bytes (the model file has one block size for them).
    fn scaled_part(&self) -> Option<&Format> {
        [&self.attention, &self.dense, &self.shared, &self.mixer]
            .into_iter()
            .find(|f| f.dtype.bytes() < 2.0)
    }

    pub(super) fn dense_scale_block(&self) -> u32 {
        self.scaled_part().map_or(0, |f| f.scale_block)
    }

    pub(super) fn scale_block_why(&self) -> String {
        self.scaled_part().unwrap_or(&self.dense).why.clone()
    }
}

fn f(dtype: Dtype, scale_block: u32, why: impl Into<String>) -> Format {
    Format {
        dtype,
        scale_block,
        why: why.into(),
        weight_only: false,
    }
}

/// The checkpoint's formats: `--weights`, else the config's `quantization_config`
/// overlaid by a ModelOpt quantization config, else `torch_dtype`; the KV cache's
/// from `--kv-dtype`, the quantization configs, or BF16.
pub(super) fn quant(cfg: &Cfg, opts: &ImportOptions, layers: &[LayerSpec]) -> Result<Quant> {
    let base = base_format(cfg)?;
    let mut q = Quant {
        attention: base.clone(),
        mixer: base.clone(),
        experts: base.clone(),
        shared: base.clone(),
        dense: base.clone(),
        activation: base.clone(),
        kv: f(
            Dtype::Bf16,
            0,
            "assumed: BF16 KV cache (vLLM's --kv-cache-dtype auto: the model's dtype)",
        ),
    };
    if let Some(w) = opts.weights {
        weight_choice(&mut q, w);
    } else {
        if let Some(qc) = cfg.get("quantization_config") {
            quantization_config(&mut q, cfg, qc, layers)?;
        }
        if let Some((qorigin, qtext)) = &opts.quant {
            modelopt_file(&mut q, qorigin, qtext, layers)?;
        }
    }
    q.activation = activation(&q.experts);
    if let Some(kv) = opts.kv_dtype {
        q.kv = f(kv, 0, format!("given: --kv-dtype {kv}"));
    }
    Ok(q)
}

/// The checkpoint's dtype before quantization (`torch_dtype` or `dtype`).
fn base_format(cfg: &Cfg) -> Result<Format> {
    let torch = cfg
        .str("torch_dtype")
        .or_else(|| cfg.str("dtype"))
        .unwrap_or("bfloat16");
    Ok(match torch {
        "float32" => bail!(
            "{}: torch_dtype float32: serve it in BF16 (`--weights bf16`) or give its quantization",
            cfg.origin
        ),
        "float16" => f(
            Dtype::Bf16,
            0,
            format!(
                "derived: {} torch_dtype float16 (priced as BF16: the same bytes and tensor rate)",
                cfg.file
            ),
        ),
        _ => f(Dtype::Bf16, 0, cfg.derived(&format!("torch_dtype {torch}"))),
    })
}

/// The experts' activations for their weights' format.
fn activation(experts: &Format) -> Format {
    if experts.weight_only && experts.dtype.bytes() < 2.0 {
        return f(
            Dtype::Bf16,
            0,
            "derived: weight-only routed experts (W4A16) take BF16 activations",
        );
    }
    match (experts.dtype, experts.scale_block) {
        (Dtype::Fp4, 16) => f(
            Dtype::Fp4,
            0,
            "assumed: NVFP4 activations (W4A4, modelopt's NVFP4 recipe)",
        ),
        (Dtype::Fp4, _) => f(
            Dtype::Bf16,
            0,
            "assumed: BF16 activations with MXFP4 weights (W4A16 kernels, as vLLM on Hopper)",
        ),
        (Dtype::Int4, _) => f(
            Dtype::Bf16,
            0,
            "assumed: BF16 activations with INT4 weights (weight-only W4A16 kernels: Marlin, Machete)",
        ),
        (Dtype::Fp8, _) => f(
            Dtype::Fp8,
            0,
            "assumed: FP8 activations quantized on the fly (activation_scheme dynamic)",
        ),
        (d, _) => f(d, 0, experts.why.clone()),
    }
}

fn weight_choice(q: &mut Quant, w: WeightChoice) {
    let why = |s: &str| format!("given: --weights {s}");
    let every = |q: &mut Quant, fm: Format| {
        for p in PARTS {
            *q.part_mut(p) = fm.clone();
        }
    };
    match w {
        WeightChoice::Bf16 => every(q, f(Dtype::Bf16, 0, why("bf16"))),
        WeightChoice::Fp8 => every(
            q,
            f(
                Dtype::Fp8,
                4096,
                why("fp8 (128x128 blocks, an FP32 scale each)"),
            ),
        ),
        WeightChoice::Fp8Tensor => every(
            q,
            f(Dtype::Fp8, 0, why("fp8-tensor (one scale per tensor)")),
        ),
        WeightChoice::Fp4 => every(
            q,
            f(
                Dtype::Fp4,
                16,
                why("fp4 (NVFP4: an FP8 scale per 16 weights)"),
            ),
        ),
        WeightChoice::Mxfp4 => {
            q.experts = f(
                Dtype::Fp4,
                32,
                why("mxfp4 (routed experts: an E8M0 scale per 32 weights)"),
            )
        }
        WeightChoice::Int4 => every(
            q,
            int4(
                128,
                true,
                why("int4 (W4A16, groups of 128: a BF16 scale and a 4-bit zero each)"),
            ),
        ),
    }
}

/// INT4 weight-only in groups of `group` weights: a BF16 scale each, and a packed
/// 4-bit zero point when asymmetric; as one-byte scales per `scale_block` weights.
fn int4(group: u32, zero: bool, why: String) -> Format {
    let bytes = 2.0 + if zero { 0.5 } else { 0.0 };
    f(
        Dtype::Int4,
        (group as f64 / bytes).round().max(1.0) as u32,
        why,
    )
}

/// A ModelOpt algorithm's format (`quant_algo`), with the group size it names.
fn algo_format(algo: &str, group: Option<u32>, why: &str) -> Option<Format> {
    let why = why.to_string();
    Some(match algo {
        "FP8" => f(Dtype::Fp8, 0, format!("{why} FP8 (per-tensor scales)")),
        "FP8_PB_WO" | "FP8_BLOCK" => f(
            Dtype::Fp8,
            4096,
            format!("{why} {algo} (128x128 blocks, an FP32 scale each)"),
        ),
        "NVFP4" | "NVFP4_AWQ" => {
            let g = group.unwrap_or(16);
            f(
                Dtype::Fp4,
                g,
                format!("{why} {algo}, group_size {g} (one FP8 scale per group)"),
            )
        }
        "W4A16_NVFP4" => {
            let g = group.unwrap_or(16);
            Format {
                weight_only: true,
                ..f(
                    Dtype::Fp4,
                    g,
                    format!("{why} {algo}, group_size {g} (NVFP4 weights, BF16 activations)"),
                )
            }
        }
        "MXFP4" => f(
            Dtype::Fp4,
            32,
            format!("{why} MXFP4 (an E8M0 scale per 32 weights)"),
        ),
        "MXFP8" => f(
            Dtype::Fp8,
            32,
            format!("{why} MXFP8 (an E8M0 scale per 32 weights)"),
        ),
        "W4A16_AWQ" | "W4A8_AWQ" | "INT4_AWQ" => int4(
            group.unwrap_or(128),
            false,
            format!(
                "{why} {algo} (INT4, groups of {}, a BF16 scale each)",
                group.unwrap_or(128)
            ),
        ),
        _ => return None,
    })
}

/// Names of a ModelOpt table's exclude list (`exclude_modules` or `ignore`).
fn names_of(table: &Value, keys: &[&str]) -> Vec<Named> {
    keys.iter()
        .filter_map(|k| table.get(*k))
        .filter_map(|v| v.as_array())
        .flatten()
        .filter_map(|x| x.as_str())
        .map(exclude::read)
        .collect()
}

/// `fm` on every part the exclude `names` leave (on fewer than half the layers that
/// have it); the others keep their format, said so.
fn apply_except(
    q: &mut Quant,
    fm: &Format,
    names: &[Named],
    layers: &[LayerSpec],
    file: &str,
    key: &str,
) {
    for p in PARTS {
        let (have, covered) = exclude::coverage(names, layers, p);
        if have > 0 && covered * 2 >= have {
            let keep = q.part_mut(p);
            keep.why = format!(
                "derived: {file} {key} keeps the {} in {} on {covered} of {have} layers (a part takes the format of most of its layers)",
                p.name(),
                keep.dtype,
            );
        } else {
            *q.part_mut(p) = fm.clone();
        }
    }
}

/// A ModelOpt `hf_quant_config.json` beside the config.
fn modelopt_file(q: &mut Quant, origin: &str, text: &str, layers: &[LayerSpec]) -> Result<()> {
    let v: Value = serde_json::from_str(text).map_err(|e| err!("{origin}: not valid JSON: {e}"))?;
    let qz = v.get("quantization").ok_or_else(|| {
        err!("{origin}: no `quantization` table (a ModelOpt hf_quant_config.json has one)")
    })?;
    let file = std::path::Path::new(origin)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| origin.to_string());
    modelopt(q, origin, &file, qz, layers)
}

/// A ModelOpt quantization table (from a file or a config's `quantization_config`).
fn modelopt(
    q: &mut Quant,
    origin: &str,
    file: &str,
    qz: &Value,
    layers: &[LayerSpec],
) -> Result<()> {
    let algo = qz.get("quant_algo").and_then(|a| a.as_str()).unwrap_or("");
    let group = qz
        .get("group_size")
        .and_then(|g| g.as_u64())
        .map(|g| g as u32);
    if algo == "MIXED_PRECISION" {
        mixed(q, origin, file, qz, layers)?;
    } else {
        let fm = algo_format(algo, group, &format!("derived: {file} quant_algo"))
            .ok_or_else(|| {
                err!(
                    "{origin}: quant_algo `{algo}` is not one twin reads (FP8, NVFP4, W4A16_NVFP4, MXFP4, MXFP8, W4A16_AWQ, MIXED_PRECISION); give --weights instead"
                )
            })?;
        let names = names_of(qz, &["exclude_modules", "ignore"]);
        apply_except(q, &fm, &names, layers, file, "exclude_modules");
    }
    let kv_fp8 = qz.get("kv_cache_quant_algo").and_then(|k| k.as_str()) == Some("FP8")
        || qz.get("kv_cache_scheme").is_some_and(|s| {
            s.get("num_bits").and_then(|b| b.as_u64()) == Some(8) || s.as_str() == Some("FP8")
        });
    if kv_fp8 {
        q.kv = f(
            Dtype::Fp8,
            0,
            format!("derived: {file} kv_cache_quant_algo FP8"),
        );
    }
    Ok(())
}

/// ModelOpt's `MIXED_PRECISION`: `quantized_layers` gives each module's algorithm; a
/// part takes the algorithm most of its named modules have where they name it on at
/// least half the layers that have it, and keeps its format otherwise.
fn mixed(q: &mut Quant, origin: &str, file: &str, qz: &Value, layers: &[LayerSpec]) -> Result<()> {
    let entries: Vec<(Named, String, Option<u32>)> = match qz.get("quantized_layers") {
        Some(Value::Object(m)) => m
            .iter()
            .map(|(name, spec)| {
                let algo = spec
                    .get("quant_algo")
                    .and_then(|a| a.as_str())
                    .unwrap_or("")
                    .to_string();
                let g = spec
                    .get("group_size")
                    .and_then(|g| g.as_u64())
                    .map(|g| g as u32);
                (exclude::read(name), algo, g)
            })
            .collect(),
        _ => bail!("{origin}: quant_algo MIXED_PRECISION without a `quantized_layers` table"),
    };
    for p in PARTS {
        let of_part: Vec<&(Named, String, Option<u32>)> = entries
            .iter()
            .filter(|(n, _, _)| n.parts.contains(&p))
            .collect();
        let names: Vec<Named> = of_part.iter().map(|(n, _, _)| n.clone()).collect();
        let (have, covered) = exclude::coverage(&names, layers, p);
        if have == 0 || covered * 2 < have {
            continue;
        }
        // The most common algorithm among the part's modules.
        let mut counts: Vec<(&str, Option<u32>, usize)> = Vec::new();
        for (_, a, g) in &of_part {
            match counts.iter_mut().find(|(x, y, _)| x == a && y == g) {
                Some(c) => c.2 += 1,
                None => counts.push((a, *g, 1)),
            }
        }
        counts.sort_by_key(|c| std::cmp::Reverse(c.2));
        let (algo, g, _) = counts[0];
        let why = format!(
            "derived: {file} quantized_layers ({} on {covered} of {have} layers):",
            p.name()
        );
        *q.part_mut(p) = algo_format(
            algo,
            g.or(qz
                .get("group_size")
                .and_then(|x| x.as_u64())
                .map(|x| x as u32)),
            &why,
        )
        .ok_or_else(|| {
            err!("{origin}: quantized_layers names quant_algo `{algo}`, not one twin reads")
        })?;
    }
    Ok(())
}

/// The modules a `modules_to_not_convert` list names.
fn not_converted(qc: &Value) -> Vec<Named> {
    match qc.get("modules_to_not_convert") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_str())
            .map(exclude::read)
            .collect(),
        _ => Vec::new(),
    }
}

/// The config's own `quantization_config`.
fn quantization_config(q: &mut Quant, cfg: &Cfg, qc: &Value, layers: &[LayerSpec]) -> Result<()> {
    let method = qc
        .get("quant_method")
        .and_then(|m| m.as_str())
        .unwrap_or("");
    match method {
        "fp8" => fp8_config(q, cfg, qc, layers),
        "mxfp4" => {
            q.experts = f(
                Dtype::Fp4,
                32,
                cfg.derived("quantization_config mxfp4 (routed experts; an E8M0 scale per 32 weights)"),
            );
            let (have, covered) = exclude::coverage(&not_converted(qc), layers, Part::Attention);
            if have > 0 && covered * 2 >= have {
                q.attention.why = cfg.derived("quantization_config modules_to_not_convert self_attn");
            }
            Ok(())
        }
        // A mixed-precision ModelOpt config that names its modules by group (the
        // compressed-tensors layout) rather than in `quantized_layers`.
        "modelopt"
            if qc.get("quant_algo").and_then(|a| a.as_str()) == Some("MIXED_PRECISION")
                && qc.get("quantized_layers").is_none()
                && qc.get("config_groups").is_some() =>
        {
            compressed_tensors(q, cfg, qc, layers)
        }
        // ModelOpt's own table, named by its method or by its producer.
        "modelopt" => modelopt(q, cfg.origin, &format!("{} quantization_config", cfg.file), qc, layers),
        "" if qc.get("quant_algo").is_some() => {
            modelopt(q, cfg.origin, &format!("{} quantization_config", cfg.file), qc, layers)
        }
        "compressed-tensors" => compressed_tensors(q, cfg, qc, layers),
        "awq" | "gptq" => {
            let bits = qc.get("bits").or_else(|| qc.get("w_bit")).and_then(|b| b.as_u64());
            if bits != Some(4) {
                bail!(
                    "{}: quantization_config {method} with bits {} (twin reads 4-bit weights)",
                    cfg.origin,
                    bits.map_or("absent".to_string(), |b| b.to_string())
                );
            }
            let g = qc.get("group_size").or_else(|| qc.get("q_group_size")).and_then(|g| g.as_u64()).unwrap_or(128) as u32;
            let zero = match method {
                "awq" => qc.get("zero_point").and_then(|z| z.as_bool()).unwrap_or(true),
                _ => !qc.get("sym").and_then(|s| s.as_bool()).unwrap_or(true),
            };
            let fm = int4(g, zero, cfg.derived(&format!(
                "quantization_config {method} (INT4, groups of {g}: a BF16 scale{} each)",
                if zero { " and a 4-bit zero point" } else { "" }
            )));
            apply_except(q, &fm, &not_converted(qc), layers, &cfg.file, "quantization_config modules_to_not_convert");
            Ok(())
        }
        other => bail!(
            "{}: quantization_config quant_method `{other}` is not one twin reads (fp8, mxfp4, modelopt, compressed-tensors, awq, gptq); \
             give --weights bf16|fp8|fp4|mxfp4|int4, or --quant hf_quant_config.json",
            cfg.origin
        ),
    }
}

/// FP8 per-tensor or in blocks (`weight_block_size`; FP32 scales, or one byte each
/// with `scale_fmt ue8m0`), on every part `modules_to_not_convert` leaves; DeepSeek-V4's
/// routed experts in `expert_dtype` (fp4: an E8M0 scale per 32 weights) or, in
/// NVIDIA's NVFP4 release, in `moe_quant_algo`.
fn fp8_config(q: &mut Quant, cfg: &Cfg, qc: &Value, layers: &[LayerSpec]) -> Result<()> {
    let block = qc
        .get("weight_block_size")
        .and_then(|b| b.as_array())
        .map(|b| b.iter().filter_map(|x| x.as_u64()).product::<u64>());
    let ue8m0 = qc.get("scale_fmt").and_then(|s| s.as_str()) == Some("ue8m0");
    let (scale_block, how) = match block {
        Some(b) if b > 0 && ue8m0 => (
            b as u32,
            format!("weight_block_size {b} weights, a one-byte UE8M0 scale each"),
        ),
        // One FP32 scale (4 bytes) per block.
        Some(b) if b > 0 => (
            (b / 4).max(1) as u32,
            format!("weight_block_size {b} weights, an FP32 scale each"),
        ),
        _ => (0, "per-tensor scales".to_string()),
    };
    let fm = f(
        Dtype::Fp8,
        scale_block,
        cfg.derived(&format!("quantization_config fp8 ({how})")),
    );
    apply_except(
        q,
        &fm,
        &not_converted(qc),
        layers,
        &cfg.file,
        "quantization_config modules_to_not_convert",
    );
    if let Some("NVFP4") = qc.get("moe_quant_algo").and_then(|m| m.as_str()) {
        let g = qc.get("group_size").and_then(|g| g.as_u64()).unwrap_or(16) as u32;
        q.experts = f(
            Dtype::Fp4,
            g,
            cfg.derived(&format!(
                "quantization_config moe_quant_algo NVFP4, group_size {g}"
            )),
        );
    } else if cfg.str("expert_dtype") == Some("fp4") {
        q.experts = f(
            Dtype::Fp4,
            32,
            cfg.derived(
                "expert_dtype fp4 (routed experts in FP4 E2M1, a UE8M0 scale per 32 weights)",
            ),
        );
    }
    Ok(())
}

/// compressed-tensors: each `config_groups` group's weights (4-bit integers in groups,
/// MXFP4, 8-bit floats) on its `targets` (`Linear`: every linear layer the `ignore`
/// list leaves; or modules by name).
fn compressed_tensors(q: &mut Quant, cfg: &Cfg, qc: &Value, layers: &[LayerSpec]) -> Result<()> {
    let groups = qc
        .get("config_groups")
        .and_then(|g| g.as_object())
        .ok_or_else(|| {
            err!(
                "{}: compressed-tensors quantization_config without config_groups",
                cfg.origin
            )
        })?;
    let ignore = names_of(qc, &["ignore"]);
    let global_format = qc.get("format").and_then(|x| x.as_str()).unwrap_or("");
    for (name, g) in groups {
        let w = g.get("weights").cloned().unwrap_or(Value::Null);
        let bits = w.get("num_bits").and_then(|b| b.as_u64());
        let kind = w.get("type").and_then(|t| t.as_str()).unwrap_or("int");
        let group = w
            .get("group_size")
            .and_then(|x| x.as_u64())
            .map(|x| x as u32);
        let format = g
            .get("format")
            .and_then(|x| x.as_str())
            .unwrap_or(global_format);
        let why = cfg.derived(&format!("quantization_config compressed-tensors {name}:"));
        let fm = match (bits, kind) {
            (Some(4), "int") => int4(
                group.unwrap_or(128),
                !w.get("symmetric").and_then(|s| s.as_bool()).unwrap_or(true),
                format!("{why} INT4 weight-only, groups of {} (a BF16 scale each)", group.unwrap_or(128)),
            ),
            (Some(4), "float") if format.contains("mxfp4") || group == Some(32) => {
                f(Dtype::Fp4, 32, format!("{why} MXFP4 (an E8M0 scale per 32 weights)"))
            }
            (Some(4), "float") => f(Dtype::Fp4, group.unwrap_or(16), format!("{why} NVFP4")),
            (Some(8), "float") => f(Dtype::Fp8, 0, format!("{why} FP8")),
            _ => bail!(
                "{}: compressed-tensors group {name}: {}-bit {kind} weights are not a format twin reads (4-bit int or float, 8-bit float)",
                cfg.origin,
                bits.map_or("?".to_string(), |b| b.to_string())
            ),
        };
        let targets: Vec<&str> = g
            .get("targets")
            .and_then(|t| t.as_array())
            .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
            .unwrap_or_default();
        if targets.contains(&"Linear") {
            apply_except(
                q,
                &fm,
                &ignore,
                layers,
                &cfg.file,
                "quantization_config ignore",
            );
        } else {
            let named: Vec<Named> = targets.iter().map(|t| exclude::read(t)).collect();
            for p in PARTS {
                let (have, covered) = exclude::coverage(&named, layers, p);
                if have > 0 && covered * 2 >= have {
                    *q.part_mut(p) = fm.clone();
                }
            }
        }
    }
    Ok(())
}
