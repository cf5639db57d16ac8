//! `twin forward`: one exact step of a DEP group, priced by the cost model.

pub mod kernel_source;
pub mod trace_out;

use anyhow::Result;
use report::text::forward::{render, to_json};
use scenario::flags::forward::ForwardArgs;
use scenario::step::{evaluate, prepare, runs_band, step_band};
use serde_json::json;

pub fn run(args: &ForwardArgs) -> Result<()> {
    let req = args.request()?;
    let f = evaluate(&req)?;
    if let Some(path) = &args.trace_out {
        let about = json!({
            "producer": "twin forward",
            "hardware": f.hardware,
            "model": f.model,
            "layout": f.layout.name(),
            "spec": f.spec,
            "cost_model": f.cost_model,
            "in_situ": f.in_situ,
            "version": env!("CARGO_PKG_VERSION"),
        });
        crate::cmd::forward::trace_out::write(path, &f.traces, about)?;
    }
    // The p10-p90 band from the hardware's kernel-fit spreads (crate::band).
    let band = match args.no_band {
        true => None,
        false => Some(crate::band::forward(&prepare(&req)?)?),
    };
    // How far measured runs of the engine say the step may be (decode steps only).
    let runs = runs_band(&req, &f)?.and_then(|b| step_band(&b, &f).map(|s| (b, s)));
    if args.json {
        let mut v = to_json(&f);
        if let Some(b) = &band {
            crate::band::forward_json(&mut v, b);
        }
        if let Some((rb, s)) = &runs {
            v["runs_band"] = rb.step_json(s);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let mut text = render(&f);
        crate::cmd::forward::kernel_source::push_line(&mut text, &args.hardware, &args.set)?;
        if args.in_situ_layer {
            let two_batch = f.result.total.timeline.is_some();
            report::text::in_situ::render_layer(&mut text, &f.result.total.in_situ, two_batch);
        }
        let mut lines = Vec::new();
        if let Some(b) = &band {
            lines.push(crate::band::forward_line(b, &f.hardware));
        }
        if let Some((rb, s)) = &runs {
            lines.push(rb.step_text(s));
        }
        match lines.is_empty() {
            true => print!("{text}"),
            false => print!("{}", crate::band::under_step_line(&text, &lines.join("\n"))),
        }
    }
    Ok(())
}
