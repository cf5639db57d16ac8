//! Live runs: the engine (`engine::serve`) serves a model for real, driven by the
//! simulator's workloads in wall-clock time, and every request and step is recorded so
//! that twin's prediction of the same run can be checked against it.
//!
//! * [`sched`]: the scheduler (routing, continuous batching, chunked prefill, prefix
//!   cache, admission, preemption, MTP acceptance), following `sim::serving`'s rules.
//! * [`workers`]: rank threads (executors on disjoint cores) and KV links.
//! * [`run`]: the wall-clock loop and the run directory.
//! * [`records`], [`metrics`]: the run's records and figures; [`trace`]: its op trace
//!   (`trace.json.gz`).
//! * [`compare`]: a run against a simulation of it; [`noise`]: a run against another
//!   run of it (the noise floor); [`bench`]: a vLLM `bench serve`
//!   result against a simulation.

pub mod bench;
pub mod blocks;
pub mod compare;
pub mod metrics;
pub mod model;
pub mod noise;
pub mod records;
pub mod run;
pub mod sched;
mod serving_loop;
pub mod trace;
pub mod workers;

pub use run::{run, LiveConfig, Progress, Summary};
pub use sched::KvPolicy;

use std::path::{Path, PathBuf};

/// Everything a live run or its validation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("{0}")]
    Config(String),
    /// The OS error is shown in the message, not chained as a source (so it prints once).
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: missing or unreadable: {why}")]
    MissingRecords { path: PathBuf, why: String },
    #[error("{path}: line {line}: corrupt record: {why}")]
    CorruptRecords {
        path: PathBuf,
        line: usize,
        why: String,
    },
    #[error("records: {0}")]
    Records(String),
    #[error("worker: {0}")]
    Worker(String),
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    #[error(transparent)]
    Sim(#[from] sim::serving::SimError),
    #[error("{0}")]
    Bench(String),
}

impl LiveError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> LiveError {
        LiveError::Io {
            path: path.to_path_buf(),
            error: source,
        }
    }
}
