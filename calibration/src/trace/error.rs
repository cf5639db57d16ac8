//! What reading a trace or a rules file can fail with.

use std::path::PathBuf;

/// Everything trace import can fail with; each names the file and, where it can, the
/// event or the rule.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: not a valid gzip stream: {error}")]
    Gzip {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: named .gz but does not start with the gzip header (1f 8b)")]
    NotGzip { path: PathBuf },
    /// JSON that does not parse; `event` is the index of the event being read, when the
    /// error fell inside `traceEvents`.
    #[error("{path}: invalid trace JSON{}: {msg}", match .event { Some(i) => format!(" in event {i}"), None => String::new() })]
    Json {
        path: PathBuf,
        event: Option<usize>,
        msg: String,
    },
    #[error("{path}: event {event} ({name:?}): {msg}")]
    Event {
        path: PathBuf,
        event: usize,
        name: String,
        msg: String,
    },
    #[error("{path}: no `traceEvents` array: not a Chrome trace-event file")]
    NoEvents { path: PathBuf },
    #[error("{path}: no GPU activity (no `kernel`, `gpu_memcpy` or `gpu_memset` events)")]
    NoGpuOps { path: PathBuf },
    #[error("{file}: {rule}: {msg}")]
    Rules {
        file: String,
        rule: String,
        msg: String,
    },
}

pub type Result<T> = std::result::Result<T, TraceError>;
