//! Finding the layers of a trace.
//!
//! In order of preference:
//! 1. GPU ranges (`gpu_user_annotation`) whose names the rules' `layer_ranges` match
//!    (twin's own `layer N`, NVTX `model.layers.N`): a layer is the range, holding the
//!    GPU ops that start inside it on the same process.
//! 2. CPU ranges with such names: a layer holds the GPU ops its launches reach through
//!    `correlation`.
//! 3. CPU ops the rules' `layer_ops` name (one attention op per layer, e.g. vLLM's
//!    `vllm::unified_attention_with_output`): each marks a layer at the first GPU op its
//!    launches reach; the layer starts where the kernel sequence before the marks stops
//!    repeating (so the layer's norm and projections before attention are its own) and
//!    ends where the next one starts; the last one is as long as the one before it.
//! 4. Attention kernels themselves (by the rules), runs of them as one mark, cut the
//!    same way.
//!
//! GPU ops are taken in start order (all streams together); a layer from 3 or 4 is a
//! run of consecutive ops.

use super::read::{GpuOp, RawTrace};
use spec::insitu::Category;
use std::collections::HashMap;

/// How the layers were found, for the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum LayerSource {
    /// GPU ranges with layer names; the pattern's first matching name.
    GpuRanges(String),
    /// CPU ranges with layer names.
    CpuRanges(String),
    /// One CPU op per layer (its name), cut where the kernel sequence repeats.
    LayerOps(String),
    /// One run of attention kernels per layer.
    AttentionKernels,
    /// Nothing marks layers.
    None,
}

impl LayerSource {
    pub fn describe(&self) -> String {
        match self {
            LayerSource::GpuRanges(n) => format!("GPU annotation ranges ({n:?}, ...)"),
            LayerSource::CpuRanges(n) => format!("CPU ranges ({n:?}, ...) through launch correlation"),
            LayerSource::LayerOps(n) => format!("one {n:?} per layer, through launch correlation, cut where the kernel sequence repeats"),
            LayerSource::AttentionKernels => "one run of attention kernels per layer, cut where the kernel sequence repeats".to_string(),
            LayerSource::None => "none (no layer ranges, layer ops or attention kernels)".to_string(),
        }
    }
}

/// One layer: its window on the GPU timeline and the GPU ops (indices into the
/// start-ordered op list) it holds.
#[derive(Debug, Clone)]
pub struct LayerWindow {
    pub start_ns: i64,
    pub end_ns: i64,
    pub ops: Vec<usize>,
}

/// Finds the layers. `ops` are the trace's GPU ops sorted by start; `category` is each
/// op's category (None: unmapped); `layer_ranges` and `layer_ops` are the rules'
/// structure patterns.
pub fn find_layers(
    trace: &RawTrace,
    ops: &[GpuOp],
    category: &[Option<Category>],
    layer_ranges: &[regex::Regex],
    layer_ops: &[regex::Regex],
) -> (LayerSource, Vec<LayerWindow>) {
    let named = |gpu: bool| -> Vec<&super::read::Range> {
        let mut v: Vec<_> = trace
            .ranges
            .iter()
            .filter(|r| {
                r.gpu == gpu
                    && layer_ranges
                        .iter()
                        .any(|p| p.is_match(&trace.names[r.name]))
            })
            .collect();
        v.sort_by_key(|r| (r.start_ns, r.end_ns));
        v
    };
    let gpu = named(true);
    if !gpu.is_empty() {
        let layers = gpu_range_layers(ops, &gpu);
        return (
            LayerSource::GpuRanges(trace.names[gpu[0].name].clone()),
            layers,
        );
    }
    let links = Links::new(trace, ops);
    let cpu = named(false);
    if !cpu.is_empty() {
        let mut layers: Vec<LayerWindow> = cpu
            .iter()
            .filter_map(|r| {
                let held = links.reached(r);
                let start = held.iter().map(|&i| ops[i].start_ns).min()?;
                let end = held.iter().map(|&i| ops[i].end_ns()).max()?;
                Some(LayerWindow {
                    start_ns: start,
                    end_ns: end,
                    ops: held,
                })
            })
            .collect();
        layers.sort_by_key(|l| l.start_ns);
        if !layers.is_empty() {
            return (
                LayerSource::CpuRanges(trace.names[cpu[0].name].clone()),
                layers,
            );
        }
    }
    for pattern in layer_ops {
        let mut marks: Vec<usize> = trace
            .ranges
            .iter()
            .filter(|r| !r.gpu && pattern.is_match(&trace.names[r.name]))
            .filter_map(|r| links.reached(r).into_iter().min())
            .collect();
        marks.sort_unstable();
        marks.dedup();
        if !marks.is_empty() {
            let name = trace
                .ranges
                .iter()
                .find(|r| !r.gpu && pattern.is_match(&trace.names[r.name]))
                .map(|r| trace.names[r.name].clone())
                .unwrap_or_default();
            return (LayerSource::LayerOps(name), cut(ops, &marks));
        }
    }
    let marks = attention_marks(category);
    if marks.is_empty() {
        return (LayerSource::None, Vec::new());
    }
    (LayerSource::AttentionKernels, cut(ops, &marks))
}

/// The layers of GPU ranges: each range's window, holding the ops of its process that
/// start inside it.
fn gpu_range_layers(ops: &[GpuOp], gpu: &[&super::read::Range]) -> Vec<LayerWindow> {
    // Ops are in start order: each range's ops are found by binary search, so
    // many ranges over many ops stay n log n.
    gpu.iter()
        .map(|r| {
            let from = ops.partition_point(|o| o.start_ns < r.start_ns);
            let to = ops.partition_point(|o| o.start_ns < r.end_ns);
            LayerWindow {
                start_ns: r.start_ns,
                end_ns: r.end_ns,
                ops: (from..to.max(from))
                    .filter(|&i| ops[i].pid == r.pid)
                    .collect(),
            }
        })
        .collect()
}

/// The first op of each run of attention kernels (indices into the op list).
fn attention_marks(category: &[Option<Category>]) -> Vec<usize> {
    let mut marks = Vec::new();
    for (i, c) in category.iter().enumerate() {
        let prev_attention = i > 0 && category[i - 1] == Some(Category::Attention);
        if *c == Some(Category::Attention) && !prev_attention {
            marks.push(i);
        }
    }
    marks
}

/// Cuts the op sequence into layers at `marks` (sorted op indices, one per layer): each
/// layer starts `k` ops before its mark, `k` the longest run before every mark whose
/// names agree across marks (and stays clear of the previous mark).
pub fn cut(ops: &[GpuOp], marks: &[usize]) -> Vec<LayerWindow> {
    let gap = marks
        .windows(2)
        .map(|w| w[1] - w[0])
        .min()
        .unwrap_or(usize::MAX);
    let mut k = 0;
    'grow: while k + 1 < gap && marks[0] > k {
        let name = ops[marks[0] - k - 1].name;
        for &m in &marks[1..] {
            if ops[m - k - 1].name != name {
                break 'grow;
            }
        }
        k += 1;
    }
    let starts: Vec<usize> = marks.iter().map(|m| m - k).collect();
    let mut layers = Vec::with_capacity(starts.len());
    for (j, &s) in starts.iter().enumerate() {
        let e = match starts.get(j + 1) {
            Some(&next) => next,
            None if j > 0 => (s + (s - starts[j - 1])).min(ops.len()),
            None => ops.len(),
        };
        let end_ns = match starts.get(j + 1) {
            Some(&next) => ops[next].start_ns,
            None => ops[s..e]
                .iter()
                .map(GpuOp::end_ns)
                .max()
                .unwrap_or(ops[s].start_ns),
        };
        layers.push(LayerWindow {
            start_ns: ops[s].start_ns,
            end_ns,
            ops: (s..e).collect(),
        });
    }
    layers
}

/// From CPU launches to the GPU ops they started, through `correlation`.
struct Links {
    /// Launches per (pid, tid), sorted by time: (ts, op index).
    by_thread: HashMap<(i64, i64), Vec<(i64, usize)>>,
}

impl Links {
    fn new(trace: &RawTrace, ops: &[GpuOp]) -> Links {
        let op_of: HashMap<i64, usize> = ops
            .iter()
            .enumerate()
            .filter_map(|(i, o)| o.correlation.map(|c| (c, i)))
            .collect();
        let mut by_thread: HashMap<(i64, i64), Vec<(i64, usize)>> = HashMap::new();
        for l in &trace.launches {
            if let Some(&i) = op_of.get(&l.correlation) {
                by_thread
                    .entry((l.pid, l.tid))
                    .or_default()
                    .push((l.ts_ns, i));
            }
        }
        for v in by_thread.values_mut() {
            v.sort_unstable();
        }
        Links { by_thread }
    }

    /// The GPU ops launched from inside CPU range `r` (on its thread), sorted.
    fn reached(&self, r: &super::read::Range) -> Vec<usize> {
        let Some(v) = self.by_thread.get(&(r.pid, r.tid)) else {
            return Vec::new();
        };
        let from = v.partition_point(|&(t, _)| t < r.start_ns);
        let to = v.partition_point(|&(t, _)| t <= r.end_ns);
        let mut out: Vec<usize> = v[from..to].iter().map(|&(_, i)| i).collect();
        out.sort_unstable();
        out
    }
}
