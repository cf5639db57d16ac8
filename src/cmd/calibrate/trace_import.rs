//! `twin calibrate --from-trace FILE`: the text and JSON of an imported profiler trace
//! (`calibration::trace` computes; this file prints).

use anyhow::Result;
use calibration::trace::{self, LayerDetail, Rules, TraceReport};
use spec::insitu::{Category, LayerBreakdown, Stream};
use std::path::Path;

/// What to print.
#[derive(Debug, Clone, Copy)]
pub struct Show {
    pub json: bool,
    pub layers_detail: bool,
}

/// Unmapped kernels listed in the text (the JSON lists all).
const UNMAPPED_SHOWN: usize = 20;
/// Characters of a kernel name shown in the text.
const NAME_CHARS: usize = 110;

pub fn run(
    path: &Path,
    rules: Option<&Path>,
    show: Show,
    deployment: Option<&str>,
    out: Option<&Path>,
) -> Result<()> {
    let rules = match rules {
        Some(p) => Rules::with_user_file(p)?,
        None => Rules::shipped()?,
    };
    let report = trace::import(path, &rules)?;
    let fit = match deployment {
        Some(d) => Some(crate::cmd::calibrate::trace_fit::fit(&report, d)?),
        None if out.is_some() => {
            anyhow::bail!("--out goes with --deployment when reading a trace (it writes the fitted in-situ factors)")
        }
        None => None,
    };
    if show.json {
        let mut v: serde_json::Value = serde_json::from_str(&json(&report, show.layers_detail)?)?;
        if let Some(f) = &fit {
            v["in_situ_fit"] = crate::cmd::calibrate::trace_fit::json(f);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", text(&report, show.layers_detail));
        if let Some(f) = &fit {
            print!("{}", crate::cmd::calibrate::trace_fit::text(f));
        }
    }
    if let (Some(f), Some(out)) = (&fit, out) {
        crate::cmd::calibrate::trace_fit::write(f, path, out)?;
        if !show.json {
            println!("in-situ section: {}", out.display());
        }
    }
    Ok(())
}

/// One JSON object: the report, `layer_source_text` beside `layer_source`, and
/// `per_layer` only with `--layers-detail`.
pub fn json(report: &TraceReport, layers_detail: bool) -> Result<String> {
    let mut v = serde_json::to_value(report)?;
    if let Some(o) = v.as_object_mut() {
        if !layers_detail {
            o.remove("per_layer");
        }
        o.insert(
            "layer_source_text".to_string(),
            serde_json::Value::String(report.layer_source.describe()),
        );
    }
    Ok(serde_json::to_string_pretty(&v)?)
}

fn ms(s: f64) -> String {
    format!("{:.3}", s * 1e3)
}

fn pct(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.1}%", 100.0 * part / whole)
    } else {
        "-".to_string()
    }
}

/// The text report: header, the mean layer's table, per-layer lines, unmapped kernels.
pub fn text(r: &TraceReport, layers_detail: bool) -> String {
    let mut out = String::new();
    header(&mut out, r);
    if r.layers_found > 0 {
        mean_table(&mut out, r);
        if layers_detail {
            per_layer(&mut out, &r.per_layer);
        }
    }
    unmapped(&mut out, r);
    out
}

fn header(out: &mut String, r: &TraceReport) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "trace: {}", r.file);
    if let Some(p) = &r.producer {
        let _ = writeln!(out, "producer: {p}");
    }
    let _ = writeln!(
        out,
        "events: {}, GPU ops {} (kernels, memcpy, memset)",
        r.events, r.gpu_ops
    );
    let _ = writeln!(
        out,
        "span {} ms, GPU busy {} ms, kernel time {} ms, outside layers {} ms ({} of kernel time)",
        ms(r.span_s),
        ms(r.gpu_busy_s),
        ms(r.kernel_s),
        ms(r.outside_layers_s),
        pct(r.outside_layers_s, r.kernel_s)
    );
    for s in &r.streams {
        // Kineto names a stream "stream 7": said once.
        let name = s.name.as_deref().map(str::trim).unwrap_or("");
        let name = if name == format!("stream {}", s.stream) {
            ""
        } else {
            name
        };
        let _ = writeln!(
            out,
            "stream {} (pid {}{}{}): {}, {} ops, busy {} ms, {} communication",
            s.stream,
            s.pid,
            if name.is_empty() { "" } else { ", " },
            name,
            s.role.key(),
            s.ops,
            ms(s.busy_s),
            pct(s.communication_share, 1.0)
        );
    }
    let _ = writeln!(
        out,
        "layers: {}, from {}",
        r.layers_found,
        r.layer_source.describe()
    );
    let _ = writeln!(
        out,
        "micro-batches: {} ({})",
        r.micro_batches, r.micro_batch_source
    );
}

/// The (stream, category) pairs of `b`, op categories first, then bubble and launch.
fn columns(b: &LayerBreakdown) -> Vec<Category> {
    let mut cats: Vec<Category> = Category::ALL
        .into_iter()
        .filter(|&c| b.category(c) != 0.0)
        .collect();
    cats.sort_by_key(|c| c.is_derived());
    cats
}

fn mean_table(out: &mut String, r: &TraceReport) {
    use std::fmt::Write as _;
    let b = &r.layer;
    let wall = b.layer_s;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "mean layer (of {}): {} ms wall",
        r.layers_found,
        ms(wall)
    );
    let _ = writeln!(
        out,
        "{:<18} {:>11} {:>7} {:>11} {:>7}",
        "category", "compute ms", "share", "comm ms", "share"
    );
    let cell = |s: Stream, c: Category| {
        let v = b.get(s, c);
        if v == 0.0 {
            (String::from("-"), String::from("-"))
        } else {
            (ms(v), pct(v, wall))
        }
    };
    for c in columns(b) {
        let (a, ash) = cell(Stream::Compute, c);
        let (m, msh) = cell(Stream::Comm, c);
        let _ = writeln!(out, "{:<18} {a:>11} {ash:>7} {m:>11} {msh:>7}", c.key());
    }
    if r.unmapped_in_layer_s > 0.0 {
        let _ = writeln!(
            out,
            "{:<18} {:>11} {:>7}   (both streams)",
            "unmapped",
            ms(r.unmapped_in_layer_s),
            pct(r.unmapped_in_layer_s, wall)
        );
    }
    let _ = writeln!(
        out,
        "exposed communication: {} ms ({} of the layer)",
        ms(r.exposed_comm_s),
        pct(r.exposed_comm_s, wall)
    );
}

fn per_layer(out: &mut String, layers: &[LayerDetail]) {
    use std::fmt::Write as _;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:>5} {:>10} {:>9} {:>5}  ms by stream:category",
        "layer", "start ms", "wall ms", "ops"
    );
    for l in layers {
        let b = &l.breakdown;
        let mut cells: Vec<String> = b
            .entries
            .iter()
            .map(|e| format!("{}:{} {}", e.stream.key(), e.category.key(), ms(e.seconds)))
            .collect();
        if l.exposed_comm_s > 0.0 {
            cells.push(format!("exposed {}", ms(l.exposed_comm_s)));
        }
        if l.unmapped_s > 0.0 {
            cells.push(format!("unmapped {}", ms(l.unmapped_s)));
        }
        let _ = writeln!(
            out,
            "{:>5} {:>10} {:>9} {:>5}  {}",
            l.index,
            ms(l.start_s),
            ms(b.layer_s),
            l.ops,
            cells.join(", ")
        );
    }
}

fn unmapped(out: &mut String, r: &TraceReport) {
    use std::fmt::Write as _;
    let _ = writeln!(out);
    if r.unmapped.is_empty() {
        let _ = writeln!(out, "unmapped kernels: none");
        return;
    }
    let _ = writeln!(
        out,
        "unmapped kernels: {} {}, {} ms, {} of kernel time (add rules with --rules FILE)",
        r.unmapped.len(),
        if r.unmapped.len() == 1 {
            "name"
        } else {
            "names"
        },
        ms(r.unmapped_s),
        pct(r.unmapped_share, 1.0)
    );
    let _ = writeln!(
        out,
        "{:>7} {:>10} {:>6}  name",
        "share", "total ms", "count"
    );
    for u in r.unmapped.iter().take(UNMAPPED_SHOWN) {
        let name: String = if u.name.chars().count() > NAME_CHARS {
            let cut: String = u.name.chars().take(NAME_CHARS).collect();
            format!("{cut}...")
        } else {
            u.name.clone()
        };
        let _ = writeln!(
            out,
            "{:>7} {:>10} {:>6}  {name}",
            pct(u.share, 1.0),
            ms(u.total_s),
            u.count
        );
    }
    if r.unmapped.len() > UNMAPPED_SHOWN {
        let _ = writeln!(
            out,
            "... and {} more names (--json lists them all)",
            r.unmapped.len() - UNMAPPED_SHOWN
        );
    }
}
