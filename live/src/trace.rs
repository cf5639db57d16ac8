//! A live run's op trace: every device op call of the traced steps with its real time,
//! written as a Chrome trace (`trace.json.gz` in the run directory), from which
//! `calibration::live_trace` fits a profile in situ (`twin calibrate fit-trace`).
//!
//! The file: `{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}` with
//! - one `kernel` slice per op call, `name = "live::<op>"`, `ts`/`dur` in microseconds
//!   from the run's start (the call's op and the host work since the call before it, as
//!   the executor times it), `pid` the rank, and `args` `{stream, layer, step, op,
//!   dtype, key, vars}` (`step`: the step's index in `steps.jsonl`); on a GPU (times
//!   from CUDA events on its timeline) also `host_gap_us` and `mark_us`, the host's
//!   side of the call (`engine::serve::HostSide`: issuing it, and recording the event
//!   before it), kept so that what tracing adds can be told from what the call costs;
//! - one `gpu_user_annotation` range `layer <i>` per run of a pass's calls in layer `i`;
//! - one `user_annotation` range `step <index> <kind> <n> req` per step and rank;
//! - `process_name` and `thread_name` metadata per rank;
//! - `otherData`: producer `twin live`, scenario, device, seed, cores, how the calls
//!   were timed (`clock`: the host's wall clock, or CUDA events), and the sampling
//!   rule ([`Sampling`]).
//!
//! Bounded: every step of the first [`FIRST_STEPS`] dispatched is traced; after them,
//! steps whose dispatch number is a multiple of `every`, which starts at 1 and doubles
//! (dropping the kept steps it no longer selects) whenever more than [`BUDGET_SLICES`]
//! op calls are kept. A step the rule does not select when it is dispatched is not
//! traced at all (its ranks read no clock per call).

use crate::LiveError;
use engine::serve::{HostSide, TracedCall};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// The trace file in a run directory.
pub const TRACE_FILE: &str = "trace.json.gz";
/// `otherData.clock` of a trace timed on the host (a CPU run).
pub const HOST_CLOCK: &str = "the host's wall clock";
/// `otherData.clock` of a trace timed on a GPU.
pub const GPU_EVENTS: &str = "CUDA events on the GPU's timeline";
/// `otherData.producer` of a live run's trace.
pub const PRODUCER: &str = "twin live";
/// Steps traced in full from the run's start.
pub const FIRST_STEPS: u64 = 256;
/// Op calls kept at most (about 60 MB in memory, a few MB of gzip).
pub const BUDGET_SLICES: usize = 300_000;

/// One rank's part of a traced step: its times (microseconds from the run's start)
/// and its op calls.
#[derive(Debug, Clone)]
pub struct RankTrace {
    pub rank: usize,
    pub start_us: f64,
    pub end_us: f64,
    pub calls: Vec<TracedCall>,
}

/// A traced step.
#[derive(Debug, Clone)]
pub struct StepTrace {
    /// Dispatch number (the order steps were sent to the ranks).
    pub dispatch: u64,
    /// Index in `steps.jsonl`.
    pub index: u64,
    pub kind: String,
    pub requests: usize,
    pub ranks: Vec<RankTrace>,
}

/// The rule the trace was thinned by, as recorded in `otherData.sampling`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Sampling {
    pub rule: String,
    pub first_steps: u64,
    pub every: u64,
    pub budget_slices: usize,
    pub steps_dispatched: u64,
    pub steps_kept: usize,
    pub slices: usize,
}

/// The traced steps of a run, bounded by the sampling rule.
#[derive(Debug)]
pub struct TraceBook {
    first: u64,
    budget: usize,
    every: u64,
    steps: Vec<StepTrace>,
    slices: usize,
    dispatched: u64,
}

impl Default for TraceBook {
    fn default() -> Self {
        TraceBook::new(FIRST_STEPS, BUDGET_SLICES)
    }
}

impl TraceBook {
    pub fn new(first: u64, budget: usize) -> TraceBook {
        TraceBook {
            first,
            budget,
            every: 1,
            steps: Vec::new(),
            slices: 0,
            dispatched: 0,
        }
    }

    fn selects(&self, dispatch: u64) -> bool {
        dispatch < self.first || dispatch.is_multiple_of(self.every)
    }

    /// Whether the step dispatched as number `dispatch` is traced (counted as
    /// dispatched either way). A step not selected now never is later: `every` only
    /// doubles.
    pub fn wants(&mut self, dispatch: u64) -> bool {
        self.dispatched = self.dispatched.max(dispatch + 1);
        self.selects(dispatch)
    }

    /// Keeps a traced step, then thins the kept steps while over the budget.
    pub fn add(&mut self, step: StepTrace) {
        if !self.selects(step.dispatch) {
            return;
        }
        self.slices += step.ranks.iter().map(|r| r.calls.len()).sum::<usize>();
        self.steps.push(step);
        while self.slices > self.budget && self.steps.iter().any(|s| s.dispatch >= self.first) {
            self.every *= 2;
            let (first, every) = (self.first, self.every);
            self.steps
                .retain(|s| s.dispatch < first || s.dispatch.is_multiple_of(every));
            self.slices = self.count();
        }
    }

    fn count(&self) -> usize {
        self.steps
            .iter()
            .flat_map(|s| &s.ranks)
            .map(|r| r.calls.len())
            .sum()
    }

    pub fn steps(&self) -> &[StepTrace] {
        &self.steps
    }

    pub fn sampling(&self) -> Sampling {
        Sampling {
            rule: format!(
                "every op call of the first {} steps dispatched; after them, the steps whose dispatch number is a multiple of `every` (1 at the start, doubled whenever more than {} op calls were kept)",
                self.first, self.budget
            ),
            first_steps: self.first,
            every: self.every,
            budget_slices: self.budget,
            steps_dispatched: self.dispatched,
            steps_kept: self.steps.len(),
            slices: self.slices,
        }
    }
}

/// What `otherData` says of the run.
#[derive(Debug, Clone, Serialize)]
pub struct TraceMeta {
    pub producer: &'static str,
    pub scenario: String,
    /// The device as calibration names it (a profile fitted from the trace names it).
    pub device: String,
    pub seed: u64,
    /// Cores of the run (all ranks).
    pub cores: usize,
    pub idle: String,
    /// How the calls were timed: [`HOST_CLOCK`] or [`GPU_EVENTS`].
    pub clock: &'static str,
    pub twin_version: String,
    /// When the trace was written (UTC, RFC 3339).
    pub written_utc: String,
    /// Rank names by global index.
    pub ranks: Vec<String>,
    pub sampling: Sampling,
}

/// Writes `book` as a gzip Chrome trace at `path`.
pub fn write_trace(path: &Path, meta: &TraceMeta, book: &TraceBook) -> Result<(), LiveError> {
    let io = |e: std::io::Error| LiveError::io(path, e);
    let f = std::fs::File::create(path).map_err(io)?;
    let gz = flate2::write::GzEncoder::new(std::io::BufWriter::new(f), flate2::Compression::fast());
    let mut w = std::io::BufWriter::with_capacity(1 << 16, gz);
    write_events(&mut w, meta, book).map_err(io)?;
    let gz = w.into_inner().map_err(|e| io(e.into_error()))?;
    let mut inner = gz.finish().map_err(io)?;
    inner.flush().map_err(io)
}

fn write_events(w: &mut impl Write, meta: &TraceMeta, book: &TraceBook) -> std::io::Result<()> {
    w.write_all(b"{\"traceEvents\": [\n")?;
    let mut first = true;
    let mut sep = |w: &mut dyn Write| -> std::io::Result<()> {
        if !first {
            w.write_all(b",\n")?;
        }
        first = false;
        Ok(())
    };
    for (rank, name) in meta.ranks.iter().enumerate() {
        let name = serde_json::to_string(name)?;
        for kind in ["process_name", "thread_name"] {
            sep(w)?;
            write!(
                w,
                "{{\"ph\":\"M\",\"name\":\"{kind}\",\"pid\":{rank},\"tid\":0,\"args\":{{\"name\":{name}}}}}"
            )?;
        }
    }
    for s in book.steps() {
        for r in &s.ranks {
            sep(w)?;
            write!(
                w,
                "{{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"step {} {} {} req\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{},\"tid\":0,\"args\":{{\"step\":{},\"dispatch\":{}}}}}",
                s.index,
                s.kind,
                s.requests,
                r.start_us,
                (r.end_us - r.start_us).max(0.0),
                r.rank,
                s.index,
                s.dispatch
            )?;
            for (layer, a, b) in layer_runs(&r.calls) {
                sep(w)?;
                write!(
                    w,
                    "{{\"ph\":\"X\",\"cat\":\"gpu_user_annotation\",\"name\":\"layer {layer}\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{},\"tid\":0,\"args\":{{\"step\":{},\"layer\":{layer}}}}}",
                    a,
                    (b - a).max(0.0),
                    r.rank,
                    s.index
                )?;
            }
            for c in &r.calls {
                sep(w)?;
                write_call(w, c, r.rank, s.index)?;
            }
        }
    }
    let other = serde_json::to_string(meta)?;
    write!(
        w,
        "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {other}}}\n"
    )
}

/// A call's slice: `ts` is its start (its end less its duration).
fn write_call(w: &mut impl Write, c: &TracedCall, rank: usize, step: u64) -> std::io::Result<()> {
    let pairs = |v: &[(&str, u64)]| {
        v.iter()
            .map(|(k, x)| format!("\"{k}\":{x}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let host = match c.host {
        Some(h) => format!(
            ",\"host_gap_us\":{:.3},\"mark_us\":{:.3}",
            h.gap_s, h.mark_s
        ),
        None => String::new(),
    };
    write!(
        w,
        "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"live::{op}\",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{rank},\"tid\":0,\"args\":{{\"stream\":0,\"layer\":{},\"step\":{step},\"op\":\"{op}\",\"dtype\":\"{}\",\"key\":{{{}}},\"vars\":{{{}}}{host}}}}}",
        c.end_s - c.dur_s,
        c.dur_s,
        c.layer,
        c.call.dtype.map_or("", |d| d.name()),
        pairs(&c.call.key),
        pairs(&c.call.vars),
        op = c.call.op.name(),
    )
}

/// Runs of consecutive calls in one layer: (layer, first start, last end), in the
/// calls' times (microseconds). Calls outside the layers (-1) end a run.
fn layer_runs(calls: &[TracedCall]) -> Vec<(i32, f64, f64)> {
    let mut runs: Vec<(i32, f64, f64)> = Vec::new();
    let mut prev = -1;
    for c in calls {
        if c.layer >= 0 {
            let (a, b) = (c.end_s - c.dur_s, c.end_s);
            match runs.last_mut() {
                Some(r) if prev == c.layer => r.2 = b,
                _ => runs.push((c.layer, a, b)),
            }
        }
        prev = c.layer;
    }
    runs
}

/// A rank's calls with times moved to microseconds from the run's start (`off_s`: the
/// run's start on the executor's trace clock).
pub fn to_run_us(calls: Vec<TracedCall>, off_s: f64) -> Vec<TracedCall> {
    calls
        .into_iter()
        .map(|c| TracedCall {
            end_s: (c.end_s - off_s) * 1e6,
            dur_s: c.dur_s * 1e6,
            host: c.host.map(|h| HostSide {
                gap_s: h.gap_s * 1e6,
                mark_s: h.mark_s * 1e6,
            }),
            ..c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use spec::call::Call;

    /// A call traced on a GPU carries its host side in `args` (microseconds, as its
    /// times); a CPU call has none.
    #[test]
    fn a_gpu_call_writes_its_host_side() {
        let call = |host| TracedCall {
            call: Call::add(8, 1),
            end_s: 2e-6,
            dur_s: 1.5e-6,
            layer: 0,
            host,
        };
        let side = HostSide {
            gap_s: 2.5e-6,
            mark_s: 0.75e-6,
        };
        let text = |c: TracedCall| {
            let mut w = Vec::new();
            write_call(&mut w, &to_run_us(vec![c], 0.0)[0], 0, 3).unwrap();
            String::from_utf8(w).unwrap()
        };
        let gpu = text(call(Some(side)));
        assert!(gpu.contains("\"dur\":1.500,"), "{gpu}");
        assert!(
            gpu.contains("\"host_gap_us\":2.500,\"mark_us\":0.750}}"),
            "{gpu}"
        );
        let v: serde_json::Value = serde_json::from_str(&gpu).unwrap();
        assert_eq!(v["args"]["mark_us"], 0.75);
        let cpu = text(call(None));
        assert!(!cpu.contains("host_gap_us"), "{cpu}");
        serde_json::from_str::<serde_json::Value>(&cpu).unwrap();
    }

    fn step(dispatch: u64, calls: usize) -> StepTrace {
        StepTrace {
            dispatch,
            index: dispatch,
            kind: "decode".into(),
            requests: 1,
            ranks: vec![RankTrace {
                rank: 0,
                start_us: 0.0,
                end_us: 1.0,
                calls: (0..calls)
                    .map(|i| TracedCall {
                        call: Call::add(8, 1),
                        end_s: i as f64 + 1.0,
                        dur_s: 1.0,
                        layer: (i / 2) as i32,
                        host: None,
                    })
                    .collect(),
            }],
        }
    }

    /// 4 steps in full, then a budget of 40 calls of 10-call steps: after step 7 the
    /// kept calls pass 40 (8 steps = 80), so `every` doubles until the steps after the
    /// first 4 that remain fit: every = 4 keeps 4 (0..3) and 4 (multiple of 4) -> 5
    /// steps, 50 > 40; every = 8 keeps 0..3 alone = 40. Later steps are only traced at
    /// multiples of 8.
    #[test]
    fn the_book_keeps_the_first_steps_and_thins_the_rest_within_budget() {
        let mut b = TraceBook::new(4, 40);
        for d in 0..8 {
            if b.wants(d) {
                b.add(step(d, 10));
            }
        }
        assert_eq!(b.sampling().every, 8);
        let kept: Vec<u64> = b.steps().iter().map(|s| s.dispatch).collect();
        assert_eq!(kept, vec![0, 1, 2, 3]);
        assert!(!b.wants(9) && !b.wants(12) && b.wants(16));
        let s = b.sampling();
        assert_eq!((s.steps_dispatched, s.steps_kept, s.slices), (17, 4, 40));
    }

    #[test]
    fn layer_runs_span_consecutive_calls_of_a_layer() {
        let s = step(0, 5);
        // Layers 0, 0, 1, 1, 2: calls end at 1..=5, each 1 long.
        let runs = layer_runs(&s.ranks[0].calls);
        assert_eq!(runs, vec![(0, 0.0, 2.0), (1, 2.0, 4.0), (2, 4.0, 5.0)]);
    }
}
