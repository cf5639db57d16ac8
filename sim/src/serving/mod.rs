//! Discrete-event simulator of an LLM serving system: a prefill pool and a wide-EP
//! decode pool (or one aggregated pool), routers, a prefix cache, KV transfer, MTP
//! speculative decoding, and workloads from closed-loop users to AgentX-like agent
//! sessions and Mooncake trace replay.
//!
//! Invariants:
//! - Time is integer nanoseconds; events pop in (time, class, sequence) order
//!   (`clock::EventQueue`).
//! - Every random draw comes from a stream derived from the run's one seed and the
//!   stream's name (`streams::stream`); same inputs and seed give a byte-identical report.
//! - Memory does not grow with simulated time: percentiles come from fixed-size
//!   log histograms (`stats`), queues and live requests are bounded (`Limits`,
//!   `max_queued_requests`), and the event loop stops at `limits.max_events`.
//! - No file IO: traces come in as text or records; scenario files are parsed by the
//!   caller.

pub mod cache;
pub mod checked;
pub mod clock;
pub mod config;
mod decode;
mod frontend;
pub mod limits;
mod metrics;
pub mod money;
pub mod mtp;
mod pool;
pub mod prompt;
mod rack;
pub mod replicas;
pub mod report;
mod request;
pub mod router;
pub mod runs_band;
pub mod scheduler;
pub mod stats;
mod step;
pub mod streams;
mod transfer;
pub mod workload;

pub use checked::{Checked, Refused};
pub use config::{
    pool_copies, DecodeRouter, Fidelity, IdleMode, KvTransferConfig, LiveSection, Mode, MtpConfig,
    PoolConfig, PrefillRank, PrefillRouter, RouterConfig, ServingConfig, ServingScenario,
    SloConfig,
};
pub use limits::Limits;
pub use money::{Money, PriceConfig, PriceSheet, TokenPrices, UsdPerMTokens};
pub use mtp::resolve_mtp;
pub use prompt::Prompt;
pub use rack::{kv_extra_tokens, SimInput, SimRequest, SimStep};
pub use replicas::{Replicas, Spread};
pub use report::{Accounting, Distributions, PoolReport, Report, Throughput, TokenMix};
pub use stats::{LogHistogram, Series, SeriesPoint, Summary};
pub use workload::{
    parse_mooncake, parse_mooncake_str, read_mooncake, trace_span, AgentX, Arrival, BadLines,
    ClosedLoop, CurvePreset, Dist, Driver, NewRequest, OpenLoop, Origin, RateCurve, Tally,
    TraceRead, TraceRecord, TraceReplay, TraceSpan, WlEvent, WorkloadConfig, MAX_TOKENS,
    TRACE_BLOCK_TOKENS,
};

use crate::cost::{CostModel, KvCapacity};
use std::sync::atomic::AtomicBool;

/// A cost model that also knows the KV capacity of its layout: what a pool needs.
pub trait PoolCost: CostModel + KvCapacity {}
impl<T: CostModel + KvCapacity> PoolCost for T {}

/// Everything that can go wrong in `sim::serving`.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid scenario:\n  {}", .0.join("\n  "))]
    InvalidScenario(Vec<String>),
    #[error("trace line {line}: {message}")]
    Trace { line: usize, message: String },
    /// Several bad lines, each with its number (at most `BAD_LINES_SHOWN` of `bad`).
    #[error("trace: {bad} bad lines{}:\n  {}", if *.bad as usize > .lines.len() { format!(" (the first {} shown)", .lines.len()) } else { String::new() }, .lines.iter().map(|(l, m)| format!("line {l}: {m}")).collect::<Vec<_>>().join("\n  "))]
    TraceLines {
        bad: u64,
        lines: Vec<(usize, String)>,
    },
    #[error("the workload replays a trace but no trace records were given (pass --trace PATH)")]
    MissingTrace,
    #[error("event limit of {limit} reached at t = {at_s:.3} s (raise limits.max_events or shorten duration_s)")]
    EventLimit { limit: u64, at_s: f64 },
    #[error("the {pool} cost model returned a step time of {step_s} s: {why}")]
    BadCost {
        pool: &'static str,
        step_s: f64,
        /// The operation at fault and the inputs that set it
        /// (`validate::non_finite_step`).
        why: String,
    },
    #[error("simulator invariant broken (a bug): {0}")]
    Invariant(String),
}

/// Runs the scenario with `seed` (normally `scenario.seed`) and reports the measured
/// window. Fails on invalid configuration, a trace workload without records, a
/// non-finite step cost or the event limit; never panics on user input.
pub fn simulate(input: &SimInput<'_>, seed: u64) -> Result<Report, SimError> {
    simulate_with(input, seed, &Control::default(), Record::default()).map(|o| o.report)
}

/// What a run records beside its report (memory grows with the run).
#[derive(Default, Clone, Copy, Debug)]
pub struct Record {
    /// Every step the groups started: for short runs compared step by step, as `twin
    /// validate live` and `validate runs` do.
    pub steps: bool,
    /// Every request completed: `simulate --requests-out` writes them beside a measured
    /// run's own.
    pub requests: bool,
}

impl Record {
    /// Every step started.
    pub const STEPS: Record = Record {
        steps: true,
        requests: false,
    };
    /// Every request completed.
    pub const REQUESTS: Record = Record {
        steps: false,
        requests: true,
    };
}

/// A run's report and what it recorded ([`Record`]; empty where not asked).
#[derive(Debug)]
pub struct Outcome {
    pub report: Report,
    pub steps: Vec<SimStep>,
    pub requests: Vec<SimRequest>,
}

/// [`simulate`], stoppable, with progress (see [`Control`]), recording what `record`
/// asks.
pub fn simulate_with(
    input: &SimInput<'_>,
    seed: u64,
    control: &Control<'_>,
    record: Record,
) -> Result<Outcome, SimError> {
    rack::run(input, seed, control, record)
}

/// Events between two looks at a run's [`Control`] (a power of two).
pub const CONTROL_EVENTS: u64 = 1 << 16;

/// What the caller of [`simulate_with`] may do while the run goes. The run
/// looks every `CONTROL_EVENTS` events; looking changes nothing in the run, so a run
/// that is not stopped reports exactly what [`simulate`] does.
#[derive(Default, Clone, Copy)]
pub struct Control<'a> {
    /// When set (by a signal handler or another thread), the run stops at its next
    /// look and reports the window up to that instant ([`Report::interrupted_at_s`]).
    pub stop: Option<&'a AtomicBool>,
    /// Told the simulated time, seconds, at every look.
    pub progress: Option<&'a dyn Fn(f64)>,
}
