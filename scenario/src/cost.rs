//! The cost parameters a run prices with, layered from its hardware file, a
//! calibration profile and `--set cost.*`.

use super::Set;
use anyhow::{anyhow, bail, Result};
use sim::cost::CostParams;
use spec::hardware::Hardware;

/// A profile's efficiencies carry between devices of one kind (GPU to GPU by datasheet
/// ratios); a CPU's measured on a GPU scenario, or a GPU's on the CPU host, is refused
/// with both names.
fn same_kind(path: &str, device: &str, hardware: &str) -> Result<()> {
    let kind = |cpu: bool| if cpu { "a CPU" } else { "a GPU" };
    let (cpu_profile, cpu_hw) = (device.starts_with("cpu"), hardware.starts_with("cpu"));
    if cpu_profile != cpu_hw {
        bail!(
            "--profile {path}: measured on `{device}`, {}, but the hardware is `{hardware}`, {}: a profile's efficiencies carry only between devices of one kind (calibrate on the {hardware}, or run without --profile)",
            kind(cpu_profile),
            kind(cpu_hw)
        );
    }
    Ok(())
}

/// The `--set cost.*` overrides, in order; an unknown key names its close match first
/// (the list of every key is long).
fn apply_cost_sets(cost_sets: &[Set], params: &mut CostParams) -> Result<()> {
    for s in cost_sets {
        let key = s.path.join(".");
        let v = match &s.value {
            toml::Value::Float(f) => *f,
            toml::Value::Integer(i) => *i as f64,
            _ => bail!("--set {}: a cost parameter takes a number", s.text),
        };
        params.pin(&key, v).map_err(|e| {
            match super::fields::closest(&key, CostParams::KEYS.iter().copied()) {
                Some(c) if params.get(&key).is_none() => {
                    anyhow!("--set {}: did you mean cost.{c}? {e}", s.text)
                }
                _ => anyhow!("--set {}: {e}", s.text),
            }
        })?;
    }
    Ok(())
}

/// The cost parameters a command prices with, in layers: the analytic defaults; then
/// the hardware file's `[cost]` (fitted to published figures); then a calibration
/// profile's measured efficiencies and fixed costs (`--profile`), for the operations it
/// has fits for; then `--set cost.KEY=VALUE` overrides; and `engine`'s measured kernel
/// tables (`--engine`, [`super::tables`]) over the ops they time.
pub fn cost_params(
    hardware: &Hardware,
    profile: Option<&str>,
    cost_sets: &[Set],
    engine: Option<&str>,
    physics_only: bool,
) -> Result<CostParams> {
    let mut params = CostParams::default();
    let mut source = apply_hardware_cost(hardware, &mut params)?;
    let given_runs = match profile {
        Some(path) => crate::runs_profile::read(std::path::Path::new(path))?.is_some(),
        None => false,
    };
    let runs = crate::runs_profile::choose(profile, physics_only)?;
    let section = match profile {
        Some(_) if given_runs => None,
        Some(path) => calibration::insitu::section_of(std::path::Path::new(path))
            .map_err(|e| anyhow!("--profile {path}: {e}"))?,
        None => None,
    };
    if given_runs {
        // Applied below, over the engine's host terms.
    } else if let (Some(path), Some(a)) = (profile, section) {
        source = format!("{source} + {}", apply_section(path, a, &mut params)?);
    } else if let Some(path) = profile {
        let prof = calibration::Profile::load(std::path::Path::new(path))
            .map_err(|e| anyhow!("--profile {path}: {e}"))?;
        same_kind(path, &prof.provenance.device, &hardware.name)?;
        let before = params.clone();
        params = prof.cost_params(&params);
        if params == before {
            source = format!(
                "{source} (the profile changes nothing: it fits none of the operations priced here)"
            );
        }
        // The spread describes the kernel fits, not a profile's measurements.
        params.spread = sim::cost::Spread::default();
        source = format!("{source} + {}", prof.source());
    }
    // The engine's host work per step (before --set, which wins). A profile path
    // names no engine: twin's defaults stand.
    if let Some(h) = engine.and_then(sim::cost::host::Host::of_engine) {
        params.host = h;
    }
    // The engine's KV pool arithmetic (its memory knob, `serving.gpu_memory_utilization`,
    // is the scenario's).
    if let Some(m) = engine.and_then(sim::cost::memory::KvMemory::of_engine) {
        params.memory = m;
    }
    if let Some((rp, from)) = &runs {
        if let Some(words) = runs_terms(rp, from, hardware, engine, &mut params, given_runs)? {
            source = format!("{source} + {words}");
        }
    }
    apply_cost_sets(cost_sets, &mut params)?;
    if !cost_sets.is_empty() {
        source = format!("{source} + {} --set overrides", cost_sets.len());
    }
    let source = engine_tables_source(source, hardware, engine, &mut params)?;
    params.source = source;
    Ok(params)
}

/// The deployment's routed-expert kernel put into `params`, said in the cost model's
/// line: its own (a scenario's `moe_kernel`), where the engine's tables time it, its
/// arithmetic rate bounds the experts' price from below; without one, the engine's
/// usual kernel where twin prices something of it ([`usual_moe_kernel`]). Also the
/// engine's largest CUDA graph of prefill and mixed steps ([`graph_tokens_of`]), and
/// the line's word on a linear-attention model's host time (`launch.linear_attn_s`).
pub fn apply_moe_kernel(
    params: &mut CostParams,
    hardware: &Hardware,
    model: &spec::model::Model,
    engine: Option<&str>,
    kernel: Option<spec::kernel::MoeKernel>,
) {
    params.launch.graph_tokens = graph_tokens_of(engine);
    let linear = model.linear_attention_layers();
    if linear > 0 && params.launch.linear_attn_s > 0.0 {
        params.source = format!(
            "{}; linear attention: the host's time, {:.2} ms a layer ({linear} layers), adds to steps launched from the host (launch.linear_attn_s)",
            params.source,
            1e3 * params.launch.linear_attn_s
        );
    }
    let usual = usual_moe_kernel(engine, hardware, model);
    let Some(k) = kernel.or(usual) else { return };
    params.moe_kernel = Some(k);
    let line = if k == spec::kernel::MoeKernel::Triton {
        format!(
            "moe_kernel triton{}: the experts' host time, {:.2} ms a MoE layer, binds in steps launched from the host",
            if kernel.is_none() { " (the engine's usual for MXFP4 experts on Hopper)" } else { "" },
            1e3 * params.launch.triton_moe_s
        )
    } else {
        match &params.tables {
            Some(t) => t.moe_kernel_line(model, hardware, k),
            None => format!(
                "moe_kernel {}: twin's own kernel model prices the experts (an engine's tables time the kernels)",
                k.name()
            ),
        }
    };
    params.source = format!("{}; {line}", params.source);
}

/// The routed-expert kernel a serving engine runs by default where twin prices
/// something of it: OpenAI's `triton_kernels` for MXFP4 experts (BF16 activations) on
/// Hopper, the default of vLLM (`VLLM_MXFP4_USE_MARLIN` unset), TensorRT-LLM (its MoE
/// support matrix: TRITON on Hopper) and SGLang (its `triton_kernel` runner, chosen at EP 1;
/// not told apart here). `None` elsewhere (the tables' usual
/// kernel, no host term).
pub fn usual_moe_kernel(
    engine: Option<&str>,
    hardware: &Hardware,
    model: &spec::model::Model,
) -> Option<spec::kernel::MoeKernel> {
    use sim::cost::tables::format::Format;
    let engine = sim::cost::host::engine_key(engine?);
    let moe = model.moe.as_ref()?;
    let mxfp4 = Format::of_experts(moe.weight_dtype, moe.scale_block, moe.activation_dtype)
        == Some(Format::W4a16Mxfp4);
    let hopper = calibration::runs::family(&hardware.name) == "hopper";
    (mxfp4 && hopper && matches!(engine.as_str(), "vllm" | "trtllm" | "sglang"))
        .then_some(spec::kernel::MoeKernel::Triton)
}

/// The most tokens a rank's step may hold and replay a CUDA graph, prefill and mixed
/// steps too: vLLM's piecewise graphs up to its largest capture size (512 by default:
/// `max_cudagraph_capture_size`, min(2 x max_num_seqs, 512)); 0 for the other engines
/// (decode steps replay graphs, prefill steps are launched from the host).
pub fn graph_tokens_of(engine: Option<&str>) -> f64 {
    match engine.map(sim::cost::host::engine_key).as_deref() {
        Some("vllm") => VLLM_GRAPH_TOKENS,
        _ => 0.0,
    }
}

/// vLLM's largest CUDA-graph capture size by default (tokens a rank).
pub const VLLM_GRAPH_TOKENS: f64 = 512.0;

/// A deployment that launches its kernels with programmatic dependent launch (a
/// scenario's `pdl = true`, `--pdl`; TensorRT-LLM's `TRTLLM_ENABLE_PDL=1`) put into
/// `params`, said in the cost model's line: each kernel starts while the one before it
/// finishes, so a CUDA graph's replay leaves no gap between them (`launch.graph_node_s`
/// 0; the graph's own launch stays). Nothing changes when `on` is false.
pub fn apply_pdl(params: &mut CostParams, on: bool) {
    if !on {
        return;
    }
    params.launch.graph_node_s = 0.0;
    params.source = format!(
        "{}; kernels launched with PDL: no gap between them in a graph",
        params.source
    );
}

/// Puts the hardware file's `[cost]` (its values, in-situ terms' source and spread)
/// into `params`; returns the cost model's line so far.
fn apply_hardware_cost(hardware: &Hardware, params: &mut CostParams) -> Result<String> {
    for (k, v) in &hardware.cost {
        params
            .set(k, *v)
            .map_err(|e| anyhow!("hardware {}: cost.{k}: {e}", hardware.name))?;
    }
    // Where the in-situ terms come from: their provenance in the hardware file.
    if let Some(k) = hardware.cost.keys().find(|k| k.starts_with("in_situ.")) {
        let why = hardware
            .provenance
            .get(&format!("cost.{k}"))
            .map(|p| p.split(" rows ").next().unwrap_or(p))
            .unwrap_or("no provenance given");
        params.in_situ.source = format!("{}'s terms, {why}", hardware.name);
    }
    if let Some(t) = &hardware.cost.spread {
        params.spread = sim::cost::Spread::from_table(t)
            .map_err(|e| anyhow!("hardware {}: cost.spread: {e}", hardware.name))?;
    }
    let source = if hardware.cost.is_empty() {
        params.source.clone()
    } else if let Some(from) = &hardware.kernels_from {
        carried_source(hardware, from)
    } else {
        format!(
            "analytic defaults + {} fitted cost parameters of {}",
            hardware.cost.len(),
            hardware.name
        )
    };
    Ok(source)
}

/// The engine's kernel tables on `hardware` put into `params`, and the cost model's
/// line with what priced the kernels (the nearest tables or twin's own model when the
/// engine has none here: its scheduler and host terms still follow its name).
fn engine_tables_source(
    mut source: String,
    hardware: &Hardware,
    engine: Option<&str>,
    params: &mut CostParams,
) -> Result<String> {
    let (tables, note) = match engine {
        Some(e) => super::tables::engine_tables(hardware, e)?,
        None => (None, None),
    };
    if let Some(t) = tables {
        let by: String = t
            .gemm_substitutes()
            .iter()
            .map(|&(f, by)| match t.gemm_own_bound(f, by) {
                Some(_) => format!(
                    "; {} GEMMs by the lesser of its {} and {} fits",
                    f.name(),
                    by.name(),
                    f.name()
                ),
                None => format!("; {} GEMMs by its {} fit", f.name(), by.name()),
            })
            .chain(
                t.borrowed
                    .iter()
                    .map(|b| format!("; {} GEMMs by {}'s fit: {}", b.format.name(), b.from, b.why)),
            )
            .collect();
        source = format!("{source} + {} ({}{by})", t.describe(), t.covers());
        params.tables = Some(t);
    }
    if let (Some(n), Some(e)) = (note, engine) {
        // The engine's scheduler and host terms follow its name; its kernels did not.
        source = format!("{source}; engine {e}: its scheduler and host terms, {n}");
    }
    Ok(source)
}

/// Applies a trace's in-situ factors (the section `calibrate --from-trace --deployment
/// --out` writes) on top of the hardware's fits, their spreads beside the kernel
/// classes'; returns where they came from.
fn apply_section(
    path: &str,
    a: calibration::insitu::Applied,
    params: &mut CostParams,
) -> Result<String> {
    for (k, v) in &a.sets {
        params
            .set(k, *v)
            .map_err(|e| anyhow!("--profile {path}: cost.{k}: {e}"))?;
    }
    for (c, sd) in &a.spreads {
        params.spread.in_situ.insert(*c, *sd);
    }
    params.in_situ.source = a.source.clone();
    Ok(a.source)
}

/// The cost source of a hardware that carries kernel fits: how many parameters came
/// from `from` (their provenance says `carried:`), and how many the file sets itself.
fn carried_source(hardware: &Hardware, from: &str) -> String {
    let carried = hardware
        .cost
        .keys()
        .filter(|k| {
            hardware
                .provenance
                .get(&format!("cost.{k}"))
                .is_some_and(|p| p.starts_with("carried:"))
        })
        .count();
    let own = hardware.cost.len() - carried;
    let mut s = format!(
        "analytic defaults + {carried} cost parameters carried from {from} by datasheet ratio{}",
        hardware
            .provenance
            .get(crate::carry::RATIO)
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    if own > 0 {
        s.push_str(&format!(" + {own} set in {}", hardware.name));
    }
    s
}

/// A runs profile's group for `engine` on `hardware`, applied to `params`; the words
/// that say what priced the step (`from`: where the profile came from). A profile the
/// user gave that fits nothing here says so; the shipped one says nothing then.
fn runs_terms(
    rp: &calibration::runs::RunsProfile,
    from: &str,
    hardware: &Hardware,
    engine: Option<&str>,
    params: &mut CostParams,
    given: bool,
) -> Result<Option<String>> {
    let engine = engine.unwrap_or("twin");
    let family = calibration::runs::family(&hardware.name);
    match rp.group(engine, &hardware.name) {
        Some(g) => {
            crate::runs_profile::apply_terms(params, g).map_err(|e| anyhow!("{from}: {e}"))?;
            Ok(Some(crate::runs_profile::describe(g, from)))
        }
        None if given => Ok(Some(format!(
            "no terms of {from} apply (it fits {}; not {engine} on {family}): physics alone",
            rp.group_names(false).join(", ")
        ))),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spec::kernel::MoeKernel;

    #[test]
    fn engines_run_mxfp4_experts_through_triton_kernels_on_hopper_only() {
        let h100 = crate::load_hardware("h100", &[]).unwrap();
        let b200 = crate::load_hardware("b200", &[]).unwrap();
        let gpt_oss = crate::load_model("gpt-oss-120b", &[]).unwrap();
        let llama = crate::load_model("llama-3.1-70b", &[]).unwrap();
        for engine in ["vllm", "vllm@0.15.0", "trtllm", "SGLang"] {
            let k = usual_moe_kernel(Some(engine), &h100, &gpt_oss);
            assert_eq!(k, Some(MoeKernel::Triton), "{engine}");
        }
        // Blackwell's FP4 tensor cores run other kernels; a dense model has no experts;
        // twin's own kernel model names no engine.
        assert_eq!(usual_moe_kernel(Some("vllm"), &b200, &gpt_oss), None);
        assert_eq!(usual_moe_kernel(Some("vllm"), &h100, &llama), None);
        assert_eq!(usual_moe_kernel(None, &h100, &gpt_oss), None);
        assert_eq!(usual_moe_kernel(Some("twin"), &h100, &gpt_oss), None);
    }

    #[test]
    fn a_deployments_own_expert_kernel_wins_over_the_usual_one() {
        let h100 = crate::load_hardware("h100", &[]).unwrap();
        let gpt_oss = crate::load_model("gpt-oss-120b", &[]).unwrap();
        let mut p = CostParams::default();
        apply_moe_kernel(&mut p, &h100, &gpt_oss, Some("vllm"), None);
        assert_eq!(p.moe_kernel, Some(MoeKernel::Triton));
        assert!(
            p.source.contains("moe_kernel triton (the engine's usual"),
            "{}",
            p.source
        );
        assert_eq!(p.launch.graph_tokens, VLLM_GRAPH_TOKENS);
        let mut p = CostParams::default();
        apply_moe_kernel(
            &mut p,
            &h100,
            &gpt_oss,
            Some("trtllm"),
            Some(MoeKernel::Marlin),
        );
        assert_eq!(p.moe_kernel, Some(MoeKernel::Marlin));
        assert_eq!(p.launch.graph_tokens, 0.0);
    }
}
