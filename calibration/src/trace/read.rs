//! Reading a Chrome trace-event file (plain or gzip JSON) in one streaming pass.
//!
//! The file is either `{"traceEvents": [...], ...}` or a bare array of events. Events
//! are deserialized one at a time from the stream and only what import needs is kept
//! (GPU ops, GPU ranges, launches with their correlation, CPU ranges whose names the
//! rules' structure patterns name, stream names), so memory grows with the kept events,
//! not with the file.

use super::error::{Result, TraceError};
use super::rules::Rules;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use spec::insitu::Category;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// What kind of GPU activity an op is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuKind {
    Kernel,
    Memcpy,
    Memset,
}

/// One GPU op (kernel, memcpy, memset); times in integer nanoseconds.
#[derive(Debug, Clone)]
pub struct GpuOp {
    /// Index into [`RawTrace::names`].
    pub name: usize,
    pub kind: GpuKind,
    pub start_ns: i64,
    pub dur_ns: i64,
    pub pid: i64,
    /// `args.stream`, else the event's `tid`.
    pub stream: i64,
    pub correlation: Option<i64>,
    /// `args.category` (twin-written traces): wins over the rules.
    pub category: Option<Category>,
    pub layer: Option<i64>,
    pub micro_batch: Option<i64>,
}

impl GpuOp {
    pub fn end_ns(&self) -> i64 {
        self.start_ns + self.dur_ns
    }
}

/// A named time range: a GPU annotation, or a CPU op the structure patterns name.
#[derive(Debug, Clone)]
pub struct Range {
    pub name: usize,
    pub gpu: bool,
    pub start_ns: i64,
    pub end_ns: i64,
    pub pid: i64,
    pub tid: i64,
}

/// A CPU-side launch (`cuda_runtime` / `cuda_driver`) and the correlation id that
/// links it to its GPU op.
#[derive(Debug, Clone, Copy)]
pub struct Launch {
    pub ts_ns: i64,
    pub pid: i64,
    pub tid: i64,
    pub correlation: i64,
}

/// The kept content of a trace file.
#[derive(Debug, Default)]
pub struct RawTrace {
    pub path: PathBuf,
    /// Every event in the file.
    pub events: usize,
    pub names: Vec<String>,
    pub gpu_ops: Vec<GpuOp>,
    pub ranges: Vec<Range>,
    pub launches: Vec<Launch>,
    /// `thread_name` metadata: (pid, tid) -> name.
    pub thread_names: BTreeMap<(i64, i64), String>,
    /// `otherData.producer` when present ("twin forward", "twin live").
    pub producer: Option<String>,
    index: HashMap<String, usize>,
}

impl RawTrace {
    fn intern(&mut self, name: String) -> usize {
        if let Some(&i) = self.index.get(&name) {
            return i;
        }
        self.names.push(name.clone());
        self.index.insert(name, self.names.len() - 1);
        self.names.len() - 1
    }
}

/// Reads `path`: gzip when it starts with the gzip header, plain JSON otherwise.
pub fn read(path: &Path, rules: &Rules) -> Result<RawTrace> {
    let file = std::fs::File::open(path).map_err(|error| TraceError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let mut buf = BufReader::with_capacity(1 << 16, file);
    let head = buf.fill_buf().map_err(|error| TraceError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    if !gzip && path.extension().is_some_and(|e| e == "gz") {
        return Err(TraceError::NotGzip {
            path: path.to_path_buf(),
        });
    }
    let reader: Box<dyn Read> = if gzip {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::bufread::MultiGzDecoder::new(buf),
        ))
    } else {
        Box::new(buf)
    };
    from_reader(reader, path, rules, gzip)
}

/// Reads a trace from any reader; `path` names it in errors.
pub fn from_reader(reader: impl Read, path: &Path, rules: &Rules, gzip: bool) -> Result<RawTrace> {
    let mut state = State {
        trace: RawTrace {
            path: path.to_path_buf(),
            ..RawTrace::default()
        },
        rules,
        in_events: false,
        saw_events: false,
        failure: None,
    };
    let mut de = serde_json::Deserializer::from_reader(reader);
    let outcome = (&mut state).deserialize(&mut de).and_then(|()| de.end());
    if let Some(e) = state.failure.take() {
        return Err(e);
    }
    if let Err(e) = outcome {
        let event = state.in_events.then_some(state.trace.events);
        return Err(if e.is_io() && gzip {
            TraceError::Gzip {
                path: path.to_path_buf(),
                error: std::io::Error::other(e.to_string()),
            }
        } else {
            TraceError::Json {
                path: path.to_path_buf(),
                event,
                msg: e.to_string(),
            }
        });
    }
    if !state.saw_events {
        return Err(TraceError::NoEvents {
            path: path.to_path_buf(),
        });
    }
    if state.trace.gpu_ops.is_empty() {
        return Err(TraceError::NoGpuOps {
            path: path.to_path_buf(),
        });
    }
    Ok(state.trace)
}

struct State<'r> {
    trace: RawTrace,
    rules: &'r Rules,
    in_events: bool,
    saw_events: bool,
    /// A semantic error (an event without `ts`), reported instead of serde's.
    failure: Option<TraceError>,
}

impl<'de> DeserializeSeed<'de> for &mut State<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(TopVisitor(self))
    }
}

struct TopVisitor<'a, 'r>(&'a mut State<'r>);

impl<'de> Visitor<'de> for TopVisitor<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a trace object with `traceEvents`, or an array of events")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "traceEvents" => map.next_value_seed(Events(&mut *self.0))?,
                "otherData" => {
                    let other: OtherData = map.next_value()?;
                    self.0.trace.producer = other.producer;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<(), A::Error> {
        Events(self.0).visit(seq)
    }
}

#[derive(Deserialize, Default)]
struct OtherData {
    #[serde(default)]
    producer: Option<String>,
}

struct Events<'a, 'r>(&'a mut State<'r>);

impl Events<'_, '_> {
    fn visit<'de, A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        let state = self.0;
        state.saw_events = true;
        state.in_events = true;
        while let Some(ev) = seq.next_element::<RawEvent>()? {
            if let Err(e) = keep(state, ev) {
                state.failure = Some(e);
                return Err(de::Error::custom("bad event"));
            }
            state.trace.events += 1;
        }
        state.in_events = false;
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Events<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Events<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<(), A::Error> {
        self.visit(seq)
    }
}

/// The fields of an event import reads; the rest are skipped unread.
#[derive(Deserialize)]
struct RawEvent {
    #[serde(default)]
    ph: Option<String>,
    #[serde(default)]
    cat: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    ts: Option<f64>,
    #[serde(default)]
    dur: Option<f64>,
    #[serde(default)]
    pid: Option<serde_json::Value>,
    #[serde(default)]
    tid: Option<serde_json::Value>,
    #[serde(default)]
    args: Option<RawArgs>,
}

#[derive(Deserialize, Default)]
struct RawArgs {
    #[serde(default)]
    stream: Option<i64>,
    #[serde(default)]
    correlation: Option<i64>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    layer: Option<i64>,
    #[serde(default)]
    micro_batch: Option<i64>,
    /// `thread_name` metadata.
    #[serde(default)]
    name: Option<serde_json::Value>,
}

/// A pid or tid: a number, or a string holding one; other strings (Kineto's "Spans")
/// are -1.
fn id(v: &Option<serde_json::Value>) -> i64 {
    match v {
        Some(serde_json::Value::Number(n)) => n.as_i64().unwrap_or(-1),
        Some(serde_json::Value::String(s)) => s.trim().parse().unwrap_or(-1),
        _ => -1,
    }
}

/// Microseconds (possibly fractional) to integer nanoseconds.
fn ns(us: f64) -> i64 {
    (us * 1000.0).round() as i64
}

/// Keeps what import needs of event number `state.trace.events`.
fn keep(state: &mut State, ev: RawEvent) -> Result<()> {
    let index = state.trace.events;
    let ph = ev.ph.as_deref().unwrap_or("");
    let name = ev.name.clone().unwrap_or_default();
    if ph == "M" {
        if name == "thread_name" {
            if let Some(serde_json::Value::String(s)) =
                ev.args.as_ref().and_then(|a| a.name.clone())
            {
                let key = (id(&ev.pid), id(&ev.tid));
                state.trace.thread_names.insert(key, s);
            }
        }
        return Ok(());
    }
    if ph != "X" {
        return Ok(());
    }
    keep_complete(state, ev, name.clone()).map_err(|msg| TraceError::Event {
        path: state.trace.path.clone(),
        event: index,
        name,
        msg,
    })
}

/// The start and duration of a complete event, in nanoseconds.
fn times(ev: &RawEvent, cat: &str) -> std::result::Result<(i64, i64), String> {
    let (ts, dur) = match (ev.ts, ev.dur) {
        (Some(t), Some(d)) => (t, d),
        (None, _) => return Err(format!("a complete (ph \"X\") `{cat}` event without `ts`")),
        (_, None) => return Err(format!("a complete (ph \"X\") `{cat}` event without `dur`")),
    };
    if !ts.is_finite() || !dur.is_finite() || dur < 0.0 {
        return Err(format!(
            "ts {ts} / dur {dur}: not a time and a nonnegative duration"
        ));
    }
    Ok((ns(ts), ns(dur)))
}

/// Keeps a complete (`ph: "X"`) event; `Err` is the message of a bad one.
fn keep_complete(state: &mut State, ev: RawEvent, name: String) -> std::result::Result<(), String> {
    let cat = ev.cat.clone().unwrap_or_default();
    let (start_ns, dur_ns) = times(&ev, &cat)?;
    let pid = id(&ev.pid);
    let tid = id(&ev.tid);
    let args = ev.args.unwrap_or_default();
    let kind = match cat.as_str() {
        "kernel" => Some(GpuKind::Kernel),
        "gpu_memcpy" => Some(GpuKind::Memcpy),
        "gpu_memset" => Some(GpuKind::Memset),
        _ => None,
    };
    if let Some(kind) = kind {
        let category = match args.category.as_deref() {
            None => None,
            Some(key) => match Category::from_key(key) {
                Some(c) if !c.is_derived() => Some(c),
                _ => return Err(format!("args.category {key:?} is not an op category")),
            },
        };
        let name = state.trace.intern(name);
        state.trace.gpu_ops.push(GpuOp {
            name,
            kind,
            start_ns,
            dur_ns,
            pid,
            stream: args.stream.unwrap_or(tid),
            correlation: args.correlation,
            category,
            layer: args.layer,
            micro_batch: args.micro_batch,
        });
        return Ok(());
    }
    match cat.as_str() {
        "cuda_runtime" | "cuda_driver" => {
            if let Some(correlation) = args.correlation {
                state.trace.launches.push(Launch {
                    ts_ns: start_ns,
                    pid,
                    tid,
                    correlation,
                });
            }
        }
        "gpu_user_annotation" | "user_annotation" | "cpu_op" | "python_function" => {
            let gpu = cat == "gpu_user_annotation";
            let wanted = gpu
                || state.rules.layer_ranges.iter().any(|r| r.is_match(&name))
                || state.rules.layer_ops.iter().any(|r| r.is_match(&name));
            if wanted {
                let name = state.trace.intern(name);
                state.trace.ranges.push(Range {
                    name,
                    gpu,
                    start_ns,
                    end_ns: start_ns + dur_ns,
                    pid,
                    tid,
                });
            }
        }
        _ => {}
    }
    Ok(())
}
