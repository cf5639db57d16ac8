//! `twin calibrate --from-trace FILE --deployment "FORWARD ARGS"`: in-situ factors of a
//! trace's layers against twin's own price of the same deployment.
//!
//! The deployment is given in `twin forward`'s words. twin prices it with the
//! hardware's physical in-situ terms (SMs held, barriers, the kernel floor, the
//! low-latency kernels' compute-stream time) but every residual factor at 1, so that a
//! category's measured time over that price is the residual factor itself: the value
//! of its `cost.in_situ.*` key. The trace's MoE layers are compared with twin's middle
//! layer (the dense layers of a mostly-MoE model are left out, as the profile's
//! per-layer tables do).

use anyhow::{anyhow, Context, Result};
use calibration::insitu::{fit_factors, to_toml, Host, InSituFit, HOST_KEY};
use calibration::trace::TraceReport;
use clap::Parser;
use scenario::flags::forward::ForwardArgs;
use scenario::step::evaluate;
use scenario::Set;
use serde_json::json;
use sim::cost::Phase;
use spec::insitu::{Category, LayerBreakdown, Stream};
use std::path::Path;

#[derive(Parser)]
#[command(name = "--deployment")]
struct DeploymentCli {
    #[command(flatten)]
    args: ForwardArgs,
}

/// The `cost.in_situ` key a category's factor is the value of, in `phase`.
fn key(c: Category, phase: Phase, comm_stream: bool) -> Option<String> {
    let p = match phase {
        Phase::Prefill => "prefill",
        Phase::Decode => "decode",
    };
    Some(match c {
        Category::Moe | Category::Attention | Category::Gemm | Category::Elementwise => {
            format!("in_situ.{p}.{}", c.key())
        }
        Category::Dispatch | Category::Combine if comm_stream => format!("in_situ.{}", c.key()),
        _ => return None,
    })
}

/// The fit, what it was fitted against, and the keys it sets.
pub struct TraceFit {
    pub fit: InSituFit,
    pub predicted: LayerBreakdown,
    pub measured: LayerBreakdown,
    pub keys: Vec<(Category, Option<String>)>,
    pub deployment: String,
    /// The deployment runs no all-to-all (tensor parallel, one GPU): applying its
    /// factors also sets `in_situ.tp_residuals` to 1.
    pub no_all_to_all: bool,
    /// The host's time per launched kernel, where the host bound the traced layers
    /// (an eager trace): what `launch.eager_s` takes.
    pub host: Option<Host>,
}

/// Fits `report`'s layers against the price of `deployment`.
pub fn fit(report: &TraceReport, deployment: &str) -> Result<TraceFit> {
    let mut argv = vec!["--deployment".to_string()];
    argv.extend(deployment.split_whitespace().map(str::to_string));
    let args = DeploymentCli::try_parse_from(&argv)
        .map_err(|e| anyhow!("--deployment `{deployment}`: {e}"))?
        .args;
    let mut req = args.request()?;
    req.trace = false;
    // The residual factors at 1: the fit measures them against this price.
    for k in sim::cost::insitu::InSitu::residual_keys() {
        let path = format!("in_situ.{k}");
        req.sets
            .cost
            .push(Set::typed(&path, 1.into(), "--deployment"));
    }
    let f = evaluate(&req).with_context(|| format!("--deployment `{deployment}`"))?;
    let layer = f.result.total.in_situ;
    let mut predicted = layer.breakdown();
    if !layer.comm_stream {
        // On one stream a profile sees the compute stream's waits (for a low-latency
        // transfer, say) as gaps between kernels, which it counts as launch time.
        let idle = predicted.get(Stream::Compute, Category::Bubble);
        predicted
            .entries
            .retain(|e| !(e.stream == Stream::Compute && e.category == Category::Bubble));
        // Less than a nanosecond is the rounding of a schedule that never waits.
        if idle > 1e-9 {
            predicted.add(Stream::Compute, Category::Launch, idle);
        }
    }
    let moe = predicted.category(Category::Moe) > 0.0;
    let measured: Vec<LayerBreakdown> = report
        .per_layer
        .iter()
        .map(|l| l.breakdown.clone())
        .filter(|b| !moe || b.category(Category::Moe) > 0.0)
        .collect();
    if measured.is_empty() {
        return Err(anyhow!(
            "{}: no layer of the trace has MoE kernels, but the deployment's model is an MoE model",
            report.file
        ));
    }
    let fit = fit_factors(&measured, &predicted);
    // twin's kernels a layer: the step's over the trace's layers.
    let kernels_per_layer = f.result.total.kernels / report.per_layer.len().max(1) as f64;
    let host = Host::of(&measured, kernels_per_layer);
    let mut mean = LayerBreakdown::default();
    for m in &measured {
        for e in &m.entries {
            mean.add(e.stream, e.category, e.seconds / measured.len() as f64);
        }
        mean.layer_s += m.layer_s / measured.len() as f64;
    }
    mean.layers = measured.len() as f64;
    let phase = f.spec.phase;
    let keys = fit
        .factors
        .iter()
        .map(|x| (x.category, key(x.category, phase, layer.comm_stream)))
        .collect();
    Ok(TraceFit {
        fit,
        predicted,
        measured: mean,
        keys,
        deployment: deployment.to_string(),
        no_all_to_all: !(f.layout.tp <= 1 && f.layout.dep > 1),
        host,
    })
}

/// The fit as text: a row per category, then the `--set` flags that apply it.
pub fn text(t: &TraceFit) -> String {
    let mut out = format!(
        "\nin-situ factors against twin's price of `twin forward {}` (residual factors at 1; {} MoE layers of the trace):\n",
        t.deployment, t.fit.layers
    );
    out.push_str(&format!(
        "{:<17} {:>11} {:>9} {:>7} {:>7} {:>7}  key\n",
        "category", "measured ms", "twin ms", "factor", "p10", "p90"
    ));
    let mut sets = Vec::new();
    for (f, (_, key)) in t.fit.factors.iter().zip(&t.keys) {
        let c = f.category;
        out.push_str(&format!(
            "{:<17} {:>11.3} {:>9.3} {:>7.3} {:>7.3} {:>7.3}  {}\n",
            c.key(),
            t.measured.category(c) * 1e3,
            t.predicted.category(c) * 1e3,
            f.factor,
            f.p10,
            f.p90,
            key.as_deref().unwrap_or("-")
        ));
        if let Some(k) = key {
            sets.push(format!("--set cost.{k}={:.4}", f.factor));
        }
    }
    out.push_str(&format!(
        "layer             {:>11.3} {:>9.3}\n",
        t.measured.layer_s * 1e3,
        t.predicted.layer_s * 1e3
    ));
    for f in t.fit.factors.iter().filter(|f| f.mean_outside_p10_p90()) {
        out.push_str(&format!(
            "{}: the factor {:.3} is the mean over the layers, outside their p10-p90 ({:.3}-{:.3}): a few layers lie far from the rest (per-layer range {:.3}-{:.3})\n",
            f.category.key(),
            f.factor,
            f.p10,
            f.p90,
            f.min,
            f.max
        ));
    }
    if !sets.is_empty() && t.no_all_to_all {
        sets.push("--set cost.in_situ.tp_residuals=1".to_string());
    }
    if let Some(h) = &t.host {
        out.push_str(&host_line(h));
        sets.push(format!("--set cost.{HOST_KEY}={:.4e}", h.eager_s));
    }
    if !sets.is_empty() {
        out.push_str(&format!("price with them: {}\n", sets.join(" ")));
    }
    let spreads: Vec<String> = t
        .fit
        .factors
        .iter()
        .zip(&t.keys)
        .filter(|(_, (_, key))| key.is_some())
        // Those that print as 0 are left out.
        .map(|(f, _)| (f.category, f.log_spread()))
        .filter(|(_, sd)| *sd >= 5e-5)
        .map(|(c, sd)| format!("\"in_situ.{}\" = {sd:.4}", c.key()))
        .collect();
    if !spreads.is_empty() {
        out.push_str(&format!(
            "their spread over the trace's layers, for the hardware file's [cost.spread] (forward's band draws them): {}\n",
            spreads.join(", ")
        ));
    }
    out
}

/// The host's time a kernel, as `calibrate` prints it.
fn host_line(h: &Host) -> String {
    format!(
        "host: launching kernels held {:.0}% of the traced layer; over twin's {:.1} kernels a layer, {:.1} us a kernel (p10-p90 {:.1}-{:.1}), what `{HOST_KEY}` prices where the host launches them (steps outside CUDA graphs)\n",
        100.0 * h.launch_share,
        h.kernels_per_layer,
        h.eager_s * 1e6,
        h.p10_s * 1e6,
        h.p90_s * 1e6
    )
}

/// The fit as JSON.
pub fn json(t: &TraceFit) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = t
        .fit
        .factors
        .iter()
        .zip(&t.keys)
        .map(|(f, (_, key))| {
            json!({
                "category": f.category.key(), "factor": f.factor, "p10": f.p10, "p90": f.p90,
                "min": f.min, "max": f.max,
                "cv": f.cv, "layers": f.layers, "key": key,
                "measured_ms": t.measured.category(f.category) * 1e3,
                "twin_ms": t.predicted.category(f.category) * 1e3,
            })
        })
        .collect();
    json!({
        "deployment": t.deployment,
        "layers": t.fit.layers,
        "measured_layer_ms": t.measured.layer_s * 1e3,
        "twin_layer_ms": t.predicted.layer_s * 1e3,
        "factors": rows,
        "host": t.host.as_ref().map(|h| json!({
            "key": HOST_KEY, "eager_s": h.eager_s, "p10_s": h.p10_s, "p90_s": h.p90_s,
            "kernels_per_layer": h.kernels_per_layer, "launch_share": h.launch_share,
        })),
    })
}

/// Writes the `[in_situ]` section of the fit to `out`.
pub fn write(t: &TraceFit, trace: &Path, out: &Path) -> Result<()> {
    let section = to_toml(
        &t.fit,
        &t.keys,
        t.no_all_to_all,
        trace,
        &format!("twin forward {}", t.deployment),
        &calibration::profile::utc_now(),
        t.host.as_ref(),
    )?;
    let tmp = out.with_extension("toml.tmp");
    std::fs::write(&tmp, section).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, out).with_context(|| format!("cannot write {}", out.display()))?;
    Ok(())
}
