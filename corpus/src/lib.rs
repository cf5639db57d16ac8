//! Measured serving runs as data twin learns from and is checked against.
//!
//! - [`record`]: the versioned record of one run (`twin.run.v1`): provenance, engine
//!   and version, model and quantization, GPU, layout, the client's semantics, and
//!   every measured statistic the source gives.
//! - [`aic`]: AIConfigurator's silicon CSV read into records, with what its rows mean
//!   established from the public code that produced them (docs/runs-corpus.md).
//! - [`clients`]: benchmark clients' result files (vLLM, SGLang, aiperf, genai-perf,
//!   inference-perf) read into runs, made records with the deployment the user gives.
//! - [`io`]: a corpus as JSON Lines (plain or gzip), read with every bad line
//!   reported at once, written atomically.
//! - [`filter`]: `--filter key=value` over records.
//! - [`summary`]: predicted against measured, per record and per group.
//!
//! No simulator and no GPU: the binary turns a record into a simulation.

pub mod aic;
pub mod clients;
pub mod filter;
pub mod io;
pub mod record;
pub mod summary;

pub use record::*;

/// What can go wrong reading or importing runs.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("{origin}: {message}")]
    Read { origin: String, message: String },
    /// Every bad line of a file, each with its line number.
    #[error("{origin}: {} bad record(s):\n  {}", .lines.len(), .lines.join("\n  "))]
    Lines { origin: String, lines: Vec<String> },
    /// Every problem found in one result file of a benchmark client.
    #[error("{origin}: {} problem(s):\n  {}", .problems.len(), .problems.join("\n  "))]
    File {
        origin: String,
        problems: Vec<String>,
    },
    #[error("{0}")]
    Invalid(String),
    /// A `--filter` that is not `KEY=VALUE`, `KEY~TEXT` or `concurrency<=N` / `>=N`.
    #[error("--filter `{0}`: write KEY=VALUE, KEY~TEXT or concurrency<=N / >=N, KEY one of {keys}", keys = filter::KEYS.join(", "))]
    Filter(String),
}
