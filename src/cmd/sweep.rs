//! `twin sweep`: `forward` over a grid of layouts (DEP and TP sizes) and batch sizes, with the trade-off
//! planners choose from: throughput per GPU against speed per user, and what a million
//! output tokens cost.

use crate::args::ReportArgs;
use anyhow::{bail, Result};
use clap::Args;
use scenario::flags::forward::{ForwardArgs, PhaseArg};
use scenario::step::{evaluate, runs_band, step_band, Forward};
use serde_json::json;
use sim::cost::Op;
use sim::forward::pareto_max;
use sim::serving::money::usd_per_m_tokens;
use sim::serving::runs_band::{RunsBand, StepBand};
use spec::problem::Field;

#[derive(Debug, Clone, Args)]
pub struct SweepArgs {
    /// DEP sizes to try, comma-separated (default, when neither --deps nor --tps is
    /// given: 4,8,16,32,64 for a mixture-of-experts model; a dense model's replicas
    /// are TP layouts, and it tries --tps 1,2,4,8 instead).
    #[arg(long, value_delimiter = ',')]
    pub deps: Vec<u32>,
    /// Tensor-parallel sizes to try as well, comma-separated (one TP replica each;
    /// with --expert-parallel, experts whole per GPU).
    #[arg(long, value_delimiter = ',')]
    pub tps: Vec<u32>,
    /// Requests per rank to try, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,16,32,64,128,256")]
    pub batches: Vec<u32>,
    /// Everything else as for `twin forward` (hardware, model, phase, context, MTP,
    /// --set, --profile); its --dep, --tp and --batch-per-rank are replaced by the grid,
    /// and its one-step outputs (--trace-out, --in-situ-layer, --no-band) are refused.
    #[command(flatten)]
    pub base: ForwardArgs,
    #[command(flatten)]
    pub html: ReportArgs,
}

/// The DEP sizes a sweep tries for a mixture-of-experts model when given neither
/// `--deps` nor `--tps`.
const DEFAULT_DEPS: [u32; 5] = [4, 8, 16, 32, 64];

struct Point {
    dep: u32,
    tp: u32,
    batch: u32,
    step_ms: f64,
    tok_s_gpu: f64,
    tok_s_user: f64,
    usd_per_m: f64,
    top_op: &'static str,
    top_share: f64,
    /// The measured-runs band around the point (decode steps of an engine with one).
    runs: Option<StepBand>,
}

/// A grid point that could not be priced: DEP, TP, batch and why.
type Skipped = (u32, u32, u32, String);

/// The sweep's results: the points priced, each with whether it is Pareto-optimal,
/// and the points skipped.
struct Swept {
    hardware: String,
    usd_per_gpu_hour: f64,
    points: Vec<Point>,
    frontier: Vec<bool>,
    skipped: Vec<Skipped>,
    /// The measured-runs band the points carry (the same group for every point).
    runs_band: Option<RunsBand>,
}

pub fn run(args: &SweepArgs) -> Result<()> {
    if args.batches.is_empty() {
        bail!("--batches needs at least one value");
    }
    if args.base.tp.is_some() || args.base.dep.is_some() {
        bail!("--dep and --tp are replaced by the grid: use --deps and --tps");
    }
    if args.base.requests.is_some() {
        bail!("--requests does not combine with a sweep over --batches");
    }
    if args.base.batch_per_rank.is_some() {
        bail!("--batch-per-rank is replaced by the grid: use --batches");
    }
    for (set, flag) in [
        (args.base.trace_out.is_some(), "--trace-out"),
        (args.base.in_situ_layer, "--in-situ-layer"),
        (args.base.no_band, "--no-band"),
    ] {
        if set {
            bail!("{flag} describes one step of `twin forward`; a sweep prices many and draws no kernel-fit band: run `twin forward` for it");
        }
    }
    let hardware = scenario::load_hardware(&args.base.hardware, &[])?;
    let usd_per_gpu_hour = hardware.price.hyperscaler_usd_per_gpu_hour;
    if args.base.expert_parallel && args.tps.is_empty() {
        bail!("--expert-parallel applies to the TP layouts of --tps");
    }
    let (points, skipped, runs_band) = grid(args, usd_per_gpu_hour)?;
    let frontier = pareto_max(
        &points
            .iter()
            .map(|p| (p.tok_s_gpu, p.tok_s_user))
            .collect::<Vec<_>>(),
    );
    let swept = Swept {
        hardware: hardware.name,
        usd_per_gpu_hour,
        points,
        frontier,
        skipped,
        runs_band,
    };
    if let Some(dir) = &args.html.report {
        write_report(args, &swept, dir)?;
    }
    if args.base.json {
        return print_json(args, &swept);
    }
    print_text(args, &swept);
    Ok(())
}

/// Every layout and batch of the grid, priced, in order; the ones that fail; and the
/// measured-runs band of the sweep's engine on its GPU, which each point carries.
fn grid(
    args: &SweepArgs,
    usd_per_gpu_hour: f64,
) -> Result<(Vec<Point>, Vec<Skipped>, Option<RunsBand>)> {
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    // The band is the same for every point (one engine, GPU and model): read once.
    let mut band: Option<Option<RunsBand>> = None;
    let layouts = layouts(args);
    for &(dep, tp) in &layouts {
        for &batch in &args.batches {
            let mut a = args.base.clone();
            a.dep = Some(dep);
            a.tp = Some(tp);
            a.expert_parallel = args.base.expert_parallel && tp > 1;
            a.batch_per_rank = Some(batch);
            let req = match a.request() {
                Ok(r) => r,
                Err(e) => {
                    skipped.push((dep, tp, batch, why_skipped(&e)));
                    continue;
                }
            };
            match evaluate(&req) {
                Ok(f) => {
                    if band.is_none() {
                        band = Some(runs_band(&req, &f)?);
                    }
                    let mut p = point(&f, args.base.phase, usd_per_gpu_hour, (dep, tp, batch));
                    p.runs = band
                        .as_ref()
                        .and_then(Option::as_ref)
                        .and_then(|b| step_band(b, &f));
                    points.push(p);
                }
                Err(e) => skipped.push((dep, tp, batch, why_skipped(&e))),
            }
        }
    }
    Ok((points, skipped, band.flatten()))
}

/// The grid's layouts as (DEP, TP): `--deps` and `--tps`, or, given neither, the DEP
/// sizes for a mixture-of-experts model and the TP sizes for a dense one (a model
/// that does not load keeps the DEP sizes: its points say why they fail).
fn layouts(args: &SweepArgs) -> Vec<(u32, u32)> {
    let (deps, tps) = if args.deps.is_empty() && args.tps.is_empty() {
        let dense = scenario::load_model(&args.base.model, &[]).is_ok_and(|m| m.moe.is_none());
        if dense {
            (&[][..], &sim::plan::DENSE_TPS[..])
        } else {
            (&DEFAULT_DEPS[..], &[][..])
        }
    } else {
        (&args.deps[..], &args.tps[..])
    };
    deps.iter()
        .map(|&d| (d, 1))
        .chain(tps.iter().map(|&t| (1, t)))
        .collect()
}

/// Why a point of the grid was not priced, on one line: a refused layout in the
/// sweep's own flags (`--tps 3`, not `--tp 3`).
fn why_skipped(e: &anyhow::Error) -> String {
    let text = match e.downcast_ref::<scenario::step::Impossible>() {
        Some(i) => i.render(&|f| match f {
            Field::Dep => "--deps".to_string(),
            Field::Tp => "--tps".to_string(),
            Field::BatchPerRank => "--batches".to_string(),
            other => scenario::step::flag(other),
        }),
        None => format!("{e:#}"),
    };
    // One line: the heading, then the problems (a line each) without their indent.
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let head = lines.next().unwrap_or_default().to_string();
    let rest: Vec<&str> = lines.collect();
    if rest.is_empty() {
        head
    } else {
        format!("{head} {}", rest.join("; "))
    }
}

/// A priced step as a point of the grid at `(dep, tp, batch)`.
fn point(f: &Forward, phase: PhaseArg, usd_per_gpu_hour: f64, at: (u32, u32, u32)) -> Point {
    let (dep, tp, batch) = at;
    let r = &f.result;
    let step = r.step_s();
    // Per-user speed: decode emits tokens_per_step per step; a prefill
    // "user" gets its prompt done in one step.
    let tok_s_user = match phase {
        PhaseArg::Decode => f.spec.tokens_per_step / step,
        PhaseArg::Prefill => f.spec.new_tokens as f64 / step,
    };
    let (top, share) = Op::ALL
        .iter()
        .map(|o| (o.key(), r.share(*o)))
        .fold(("-", 0.0), |b, x| if x.1 > b.1 { x } else { b });
    Point {
        dep,
        tp,
        batch,
        step_ms: step * 1e3,
        tok_s_gpu: r.tokens_per_s_per_gpu,
        tok_s_user,
        usd_per_m: usd_per_m_tokens(usd_per_gpu_hour, r.tokens_per_s_per_gpu),
        top_op: top,
        top_share: share,
        runs: None,
    }
}

/// `--report DIR`: the sweep's HTML report.
fn write_report(args: &SweepArgs, s: &Swept, dir: &str) -> Result<()> {
    let ep = args.base.expert_parallel;
    let pts: Vec<report::SweepPoint> = s
        .points
        .iter()
        .zip(&s.frontier)
        .map(|(p, &pareto)| report::SweepPoint {
            label: format!("{} b{}", name(p.dep, p.tp, ep), p.batch),
            layout: name(p.dep, p.tp, ep),
            gpus: p.dep * p.tp.max(1),
            ranks: p.dep,
            batch: p.batch,
            step_ms: p.step_ms,
            tok_s_gpu: p.tok_s_gpu,
            tok_s_user: p.tok_s_user,
            usd_per_m: p.usd_per_m,
            pareto,
            step_ms_band: p.runs.map(|r| r.step_ms),
        })
        .collect();
    let title = format!("{} on {}", args.base.model, s.hardware);
    let band = s.runs_band.as_ref().and_then(RunsBand::steps_text);
    let written = report::sweep(
        &title,
        &pts,
        s.usd_per_gpu_hour,
        band.as_deref(),
        dir,
        args.html.force,
    )?;
    eprintln!("report: {written}");
    Ok(())
}

/// `--json`: one object with every point and every skipped point.
fn print_json(args: &SweepArgs, s: &Swept) -> Result<()> {
    let rows: Vec<serde_json::Value> = s
        .points
        .iter()
        .zip(&s.frontier)
        .map(|(p, &f)| {
            let mut v = json!({
                "dep": p.dep, "tp": p.tp, "batch_per_rank": p.batch, "step_ms": p.step_ms,
                "tokens_per_s_per_gpu": p.tok_s_gpu, "tokens_per_s_per_user": p.tok_s_user,
                "usd_per_m_tokens": p.usd_per_m, "largest_op": p.top_op,
                "largest_op_share": p.top_share, "pareto": f,
            });
            if let Some(r) = &p.runs {
                v["step_ms_runs_band"] = json!(r.step_ms);
                v["tokens_per_s_per_gpu_runs_band"] = json!(r.tok_s_gpu);
                v["tokens_per_s_per_user_runs_band"] = json!(r.tok_s_user);
            }
            v
        })
        .collect();
    let skipped: Vec<serde_json::Value> = s
        .skipped
        .iter()
        .map(|(d, t, b, why)| json!({"dep": d, "tp": t, "batch_per_rank": b, "why": why}))
        .collect();
    let mut v = json!({
        "hardware": s.hardware, "model": args.base.model,
        "usd_per_gpu_hour": s.usd_per_gpu_hour, "points": rows, "skipped": skipped,
        "version": env!("CARGO_PKG_VERSION"),
    });
    if let Some(b) = &s.runs_band {
        let mut band = b.head_json();
        band["tpot_factors"] = json!(b.band.get("tpot_ms"));
        v["runs_band"] = band;
    }
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// The sweep as a table, Pareto-optimal points starred, then the skipped points.
fn print_text(args: &SweepArgs, s: &Swept) {
    let ep = args.base.expert_parallel;
    let what = match args.base.phase {
        PhaseArg::Decode => "output",
        PhaseArg::Prefill => "prefill",
    };
    println!(
        "{} on {}, context {}, ${:.2}/GPU-hour (hyperscaler); * = Pareto-optimal ({what} tok/s per GPU vs per user)",
        args.base.model, s.hardware, args.base.context, s.usd_per_gpu_hour
    );
    println!(
        "{:>6} {:>6} {:>10} {:>12} {:>12} {:>10}  largest op",
        "layout", "batch", "step ms", "tok/s/GPU", "tok/s/user", "$/M tok"
    );
    for (p, f) in s.points.iter().zip(&s.frontier) {
        println!(
            "{:>6} {:>6} {:>10.3} {:>12.0} {:>12.1} {:>10.4}  {} {:.0}%{}",
            name(p.dep, p.tp, ep),
            p.batch,
            p.step_ms,
            p.tok_s_gpu,
            p.tok_s_user,
            p.usd_per_m,
            p.top_op,
            p.top_share * 100.0,
            if *f { "  *" } else { "" }
        );
    }
    if let Some(line) = s.runs_band.as_ref().and_then(RunsBand::steps_text) {
        println!("{line}");
    }
    for line in skipped_lines(&s.skipped, ep) {
        println!("{line}");
    }
}

/// The skipped points, a line each layout and reason: the batches a layout was skipped
/// at for the same reason (weights that do not fit skip every batch) share one line.
fn skipped_lines(skipped: &[Skipped], ep: bool) -> Vec<String> {
    let mut lines: Vec<(u32, u32, Vec<u32>, &str)> = Vec::new();
    for (d, t, b, why) in skipped {
        match lines.last_mut() {
            Some((ld, lt, bs, lw)) if (*ld, *lt, *lw) == (*d, *t, why.as_str()) => bs.push(*b),
            _ => lines.push((*d, *t, vec![*b], why)),
        }
    }
    lines
        .into_iter()
        .map(|(d, t, bs, why)| {
            let batches = bs.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
            let word = if bs.len() == 1 { "batch" } else { "batches" };
            format!("skipped {} {word} {batches}: {why}", name(d, t, ep))
        })
        .collect()
}

/// A grid layout's name: `DEP8`, `TP8`, `TP8 EP`; one GPU reads `TP1` (a TP size the
/// grid tries, and a DEP of one is the same GPU).
fn name(dep: u32, tp: u32, expert_parallel: bool) -> String {
    if dep == 1 && tp == 1 {
        return "TP1".into();
    }
    sim::cost::Layout {
        tp,
        expert_parallel: expert_parallel && tp > 1,
        ..sim::cost::Layout::new(dep)
    }
    .name()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: a layout skipped at every batch for one reason reads as one line; a
    /// different reason, or another layout, starts its own; one batch reads "batch".
    #[test]
    fn skipped_points_share_a_line_by_layout_and_reason() {
        let fit = "weights do not fit".to_string();
        let kv = "KV does not fit".to_string();
        let skipped: Vec<Skipped> = vec![
            (1, 1, 8, fit.clone()),
            (1, 1, 16, fit.clone()),
            (1, 2, 8, fit),
            (1, 2, 16, kv.clone()),
            (1, 2, 32, kv),
        ];
        assert_eq!(
            skipped_lines(&skipped, false),
            [
                "skipped TP1 batches 8, 16: weights do not fit",
                "skipped TP2 batch 8: weights do not fit",
                "skipped TP2 batches 16, 32: KV does not fit",
            ]
        );
    }
}
