//! Trace import: a profiler trace of a real deployment (PyTorch profiler / Kineto
//! Chrome trace-event JSON, plain or gzip, as vLLM's and SGLang's profiling write it,
//! or twin's own) turned into an in-situ layer breakdown.
//!
//! * [`read`]: the streaming reader (what is kept of each event).
//! * [`rules`]: kernel names to [`Category`], and the names that mark layers.
//! * [`structure`]: where the layers are.
//! * this module: per layer, time per category per stream, bubbles, launch gaps and
//!   exposed communication; the whole-trace figures; the kernels no rule maps.
//!
//! Per layer window `[start, end)` (every GPU op clipped to it):
//! * an op's time goes to its stream's role ([`Stream::Compute`] or [`Stream::Comm`])
//!   and its category (`args.category` when the trace gives one, else the first rule
//!   matching its name); an op no rule maps counts as `unmapped_s` (and in the busy
//!   time below) and is listed in [`TraceReport::unmapped`];
//! * `bubble` on a role: its idle time while the other role works (only when the trace
//!   has both roles);
//! * `launch` (on compute): time no stream runs anything;
//! * exposed communication: communication-category time not overlapped by any
//!   non-communication op on a compute stream.
//!
//! So with one stream per role, compute's categories + unmapped + bubble + launch =
//! the window, and the same holds for comm with compute's launch added.
//!
//! A stream's role: its `thread_name` when that says `comm` or `compute`; otherwise a
//! trace with one stream is all compute, and in a trace with several a stream is comm
//! when more than half of its op time is communication categories.

pub mod error;
pub mod read;
pub mod rules;
pub mod structure;
pub mod timeline;

pub use error::{Result, TraceError};
pub use rules::Rules;
use spec::insitu::{Category, Entry, LayerBreakdown, Stream};
pub use structure::LayerSource;

use read::{GpuOp, RawTrace};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One GPU stream of the trace.
#[derive(Debug, Clone, Serialize)]
pub struct StreamReport {
    pub pid: i64,
    pub stream: i64,
    pub name: Option<String>,
    pub role: Stream,
    pub ops: usize,
    pub busy_s: f64,
    /// Share of the stream's op time in communication categories.
    pub communication_share: f64,
}

/// One layer, with `--layers-detail`.
#[derive(Debug, Clone, Serialize)]
pub struct LayerDetail {
    pub index: usize,
    /// Window start, from the first GPU op of the trace.
    pub start_s: f64,
    pub ops: usize,
    /// The layer's own breakdown (`layers` = 1).
    pub breakdown: LayerBreakdown,
    pub exposed_comm_s: f64,
    pub unmapped_s: f64,
}

/// A kernel name no rule maps.
#[derive(Debug, Clone, Serialize)]
pub struct Unmapped {
    pub name: String,
    pub count: usize,
    pub total_s: f64,
    /// Of the trace's GPU op time.
    pub share: f64,
}

/// Everything `twin calibrate --from-trace` reports.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    pub file: String,
    pub producer: Option<String>,
    pub events: usize,
    pub gpu_ops: usize,
    /// First GPU op start to last GPU op end.
    pub span_s: f64,
    /// Time any GPU op runs.
    pub gpu_busy_s: f64,
    /// Sum of GPU op durations (kernels, memcpy, memset).
    pub kernel_s: f64,
    /// GPU op time in no layer (embedding, LM head, sampling, other steps).
    pub outside_layers_s: f64,
    pub streams: Vec<StreamReport>,
    pub layers_found: usize,
    pub layer_source: LayerSource,
    pub micro_batches: usize,
    pub micro_batch_source: String,
    /// The mean layer.
    pub layer: LayerBreakdown,
    /// Mean layer's exposed communication.
    pub exposed_comm_s: f64,
    /// Mean layer's unmapped op time.
    pub unmapped_in_layer_s: f64,
    pub per_layer: Vec<LayerDetail>,
    /// Sorted by total time, longest first.
    pub unmapped: Vec<Unmapped>,
    pub unmapped_s: f64,
    pub unmapped_share: f64,
}

/// Reads and analyses the trace at `path`.
pub fn import(path: &Path, rules: &Rules) -> Result<TraceReport> {
    let raw = read::read(path, rules)?;
    Ok(analyse(raw, rules))
}

/// Reads and analyses a trace held in memory (tests); `name` stands for its path.
pub fn import_bytes(bytes: &[u8], name: &str, rules: &Rules) -> Result<TraceReport> {
    let gzip = bytes.starts_with(&[0x1f, 0x8b]);
    let path = Path::new(name);
    let raw = if gzip {
        read::from_reader(flate2::read::MultiGzDecoder::new(bytes), path, rules, true)?
    } else {
        read::from_reader(bytes, path, rules, false)?
    };
    Ok(analyse(raw, rules))
}

fn secs(ns: i64) -> f64 {
    ns as f64 * 1e-9
}

/// The analysis of a read trace.
pub fn analyse(mut raw: RawTrace, rules: &Rules) -> TraceReport {
    let mut ops = std::mem::take(&mut raw.gpu_ops);
    ops.sort_by_key(|o| (o.start_ns, o.end_ns(), o.stream));
    let by_name: Vec<Option<Category>> = raw.names.iter().map(|n| rules.classify(n)).collect();
    let category: Vec<Option<Category>> =
        ops.iter().map(|o| o.category.or(by_name[o.name])).collect();
    let (streams, role_of) = stream_roles(&raw, &ops, &category);
    let both_roles = streams.iter().any(|s| s.role == Stream::Comm)
        && streams.iter().any(|s| s.role == Stream::Compute);
    let (layer_source, windows) =
        structure::find_layers(&raw, &ops, &category, &rules.layer_ranges, &rules.layer_ops);

    let t0 = ops.first().map_or(0, |o| o.start_ns);
    let t_end = ops.iter().map(GpuOp::end_ns).max().unwrap_or(t0);
    let all: Vec<(i64, i64)> = ops.iter().map(|o| (o.start_ns, o.end_ns())).collect();
    let kernel_ns: i64 = ops.iter().map(|o| o.dur_ns).sum();
    let mut in_layer = vec![false; ops.len()];
    let mut per_layer = Vec::with_capacity(windows.len());
    for (index, w) in windows.iter().enumerate() {
        for &i in &w.ops {
            in_layer[i] = true;
        }
        let roles: Vec<Stream> = w.ops.iter().map(|&i| role_of(&ops[i])).collect();
        let cats: Vec<Option<Category>> = w.ops.iter().map(|&i| category[i]).collect();
        let layer_ops: Vec<&GpuOp> = w.ops.iter().map(|&i| &ops[i]).collect();
        let mut d = layer_detail(w.start_ns, w.end_ns, &layer_ops, &roles, &cats, both_roles);
        d.index = index;
        d.start_s = secs(w.start_ns - t0);
        per_layer.push(d);
    }
    let outside_ns: i64 = ops
        .iter()
        .zip(&in_layer)
        .filter(|(_, &l)| !l)
        .map(|(o, _)| o.dur_ns)
        .sum();

    let share = |ns: i64| {
        if kernel_ns > 0 {
            ns as f64 / kernel_ns as f64
        } else {
            0.0
        }
    };
    let (unmapped, unmapped_ns) = unmapped_list(&raw.names, &ops, &category, kernel_ns);
    let (micro_batches, micro_batch_source) = micro_batches(&ops);
    let (layer, exposed_comm_s, unmapped_in_layer_s) = mean_layer(&per_layer);
    TraceReport {
        file: raw.path.display().to_string(),
        producer: raw.producer.clone(),
        events: raw.events,
        gpu_ops: ops.len(),
        span_s: secs(t_end - t0),
        gpu_busy_s: secs(timeline::length(&timeline::union(all))),
        kernel_s: secs(kernel_ns),
        outside_layers_s: secs(outside_ns),
        streams,
        layers_found: per_layer.len(),
        layer_source,
        micro_batches,
        micro_batch_source,
        layer,
        exposed_comm_s,
        unmapped_in_layer_s,
        per_layer,
        unmapped_share: share(unmapped_ns),
        unmapped,
        unmapped_s: secs(unmapped_ns),
    }
}

/// The number of micro-batches the ops mark (`args.micro_batch`; one when none is
/// marked) and where that number comes from.
fn micro_batches(ops: &[GpuOp]) -> (usize, String) {
    let micro: BTreeSet<i64> = ops.iter().filter_map(|o| o.micro_batch).collect();
    if micro.is_empty() {
        (
            1,
            "not marked in the trace (args.micro_batch): counted as one".to_string(),
        )
    } else {
        (micro.len(), "args.micro_batch".to_string())
    }
}

/// The kernels no rule maps, by name, longest total first; and their total time.
fn unmapped_list(
    names: &[String],
    ops: &[GpuOp],
    category: &[Option<Category>],
    kernel_ns: i64,
) -> (Vec<Unmapped>, i64) {
    let mut by_name: BTreeMap<usize, (usize, i64)> = BTreeMap::new();
    for (o, c) in ops.iter().zip(category) {
        if c.is_none() {
            let e = by_name.entry(o.name).or_default();
            e.0 += 1;
            e.1 += o.dur_ns;
        }
    }
    let total: i64 = by_name.values().map(|&(_, ns)| ns).sum();
    let mut list: Vec<Unmapped> = by_name
        .into_iter()
        .map(|(name, (count, ns))| Unmapped {
            name: names[name].clone(),
            count,
            total_s: secs(ns),
            share: if kernel_ns > 0 {
                ns as f64 / kernel_ns as f64
            } else {
                0.0
            },
        })
        .collect();
    list.sort_by(|a, b| {
        b.total_s
            .total_cmp(&a.total_s)
            .then_with(|| a.name.cmp(&b.name))
    });
    (list, total)
}

/// The streams and a function giving each op's role.
fn stream_roles(
    raw: &RawTrace,
    ops: &[GpuOp],
    category: &[Option<Category>],
) -> (Vec<StreamReport>, impl Fn(&GpuOp) -> Stream) {
    /// Per stream: ops, op time, communication op time, busy intervals.
    #[derive(Default)]
    struct Tally {
        ops: usize,
        total: i64,
        comm: i64,
        intervals: Vec<(i64, i64)>,
    }
    let mut per: BTreeMap<(i64, i64), Tally> = BTreeMap::new();
    for (o, c) in ops.iter().zip(category) {
        let e = per.entry((o.pid, o.stream)).or_default();
        e.ops += 1;
        e.total += o.dur_ns;
        if c.is_some_and(Category::is_communication) {
            e.comm += o.dur_ns;
        }
        e.intervals.push((o.start_ns, o.end_ns()));
    }
    let single = per.len() == 1;
    let streams: Vec<StreamReport> = per
        .into_iter()
        .map(|((pid, stream), t)| {
            let Tally {
                ops: n,
                total,
                comm,
                intervals: iv,
            } = t;
            let name = raw.thread_names.get(&(pid, stream)).cloned();
            let hint = name.as_deref().map(str::to_ascii_lowercase);
            let comm_share = if total > 0 {
                comm as f64 / total as f64
            } else {
                0.0
            };
            let role = match hint.as_deref() {
                Some(h) if h.contains("comm") => Stream::Comm,
                Some(h) if h.contains("compute") => Stream::Compute,
                _ if single => Stream::Compute,
                _ if comm_share > 0.5 => Stream::Comm,
                _ => Stream::Compute,
            };
            StreamReport {
                pid,
                stream,
                name,
                role,
                ops: n,
                busy_s: secs(timeline::length(&timeline::union(iv))),
                communication_share: comm_share,
            }
        })
        .collect();
    let roles: BTreeMap<(i64, i64), Stream> = streams
        .iter()
        .map(|s| ((s.pid, s.stream), s.role))
        .collect();
    (streams, move |o: &GpuOp| {
        roles
            .get(&(o.pid, o.stream))
            .copied()
            .unwrap_or(Stream::Compute)
    })
}

/// One layer's breakdown over `[start, end)`.
fn layer_detail(
    start: i64,
    end: i64,
    ops: &[&GpuOp],
    roles: &[Stream],
    cats: &[Option<Category>],
    both_roles: bool,
) -> LayerDetail {
    let mut ns: BTreeMap<(Stream, Category), i64> = BTreeMap::new();
    let mut unmapped = 0;
    let mut busy: BTreeMap<Stream, Vec<(i64, i64)>> = BTreeMap::new();
    let (mut comm_iv, mut compute_work, mut all) = (Vec::new(), Vec::new(), Vec::new());
    for ((o, &role), &cat) in ops.iter().zip(roles).zip(cats) {
        let (a, b) = (o.start_ns.max(start), o.end_ns().min(end));
        if b <= a {
            continue;
        }
        match cat {
            Some(c) => *ns.entry((role, c)).or_default() += b - a,
            None => unmapped += b - a,
        }
        busy.entry(role).or_default().push((a, b));
        all.push((a, b));
        if cat.is_some_and(Category::is_communication) {
            comm_iv.push((a, b));
        } else if role == Stream::Compute {
            compute_work.push((a, b));
        }
    }
    let compute = timeline::union(busy.remove(&Stream::Compute).unwrap_or_default());
    let comm = timeline::union(busy.remove(&Stream::Comm).unwrap_or_default());
    if both_roles {
        let idle_compute = timeline::minus(&comm, &compute);
        let idle_comm = timeline::minus(&compute, &comm);
        *ns.entry((Stream::Compute, Category::Bubble)).or_default() += idle_compute;
        *ns.entry((Stream::Comm, Category::Bubble)).or_default() += idle_comm;
    }
    let window = (end - start).max(0);
    let gaps = window - timeline::length(&timeline::union(all));
    *ns.entry((Stream::Compute, Category::Launch)).or_default() += gaps;
    let exposed = timeline::minus(&timeline::union(comm_iv), &timeline::union(compute_work));
    LayerDetail {
        index: 0,
        start_s: 0.0,
        ops: ops.len(),
        breakdown: breakdown_from(&ns, 1.0, secs(window), 1.0),
        exposed_comm_s: secs(exposed),
        unmapped_s: secs(unmapped),
    }
}

/// A breakdown from nanoseconds per (stream, category), divided by `per`, in canonical
/// order (streams, then categories, as `spec::insitu` lists them), zeros left out.
fn breakdown_from(
    ns: &BTreeMap<(Stream, Category), i64>,
    layers: f64,
    layer_s: f64,
    per: f64,
) -> LayerBreakdown {
    let mut entries = Vec::new();
    for s in Stream::ALL {
        for c in Category::ALL {
            if let Some(&v) = ns.get(&(s, c)) {
                if v != 0 {
                    entries.push(Entry {
                        stream: s,
                        category: c,
                        seconds: secs(v) / per,
                    });
                }
            }
        }
    }
    LayerBreakdown {
        layers,
        layer_s,
        entries,
    }
}

/// The mean of the layers: breakdown, exposed communication, unmapped time.
fn mean_layer(layers: &[LayerDetail]) -> (LayerBreakdown, f64, f64) {
    if layers.is_empty() {
        return (LayerBreakdown::default(), 0.0, 0.0);
    }
    let n = layers.len() as f64;
    let mut ns: BTreeMap<(Stream, Category), i64> = BTreeMap::new();
    for l in layers {
        for e in &l.breakdown.entries {
            *ns.entry((e.stream, e.category)).or_default() += (e.seconds * 1e9).round() as i64;
        }
    }
    let layer_s = layers.iter().map(|l| l.breakdown.layer_s).sum::<f64>() / n;
    let exposed = layers.iter().map(|l| l.exposed_comm_s).sum::<f64>() / n;
    let unmapped = layers.iter().map(|l| l.unmapped_s).sum::<f64>() / n;
    (breakdown_from(&ns, n, layer_s, n), exposed, unmapped)
}
