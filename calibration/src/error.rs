use std::path::PathBuf;

/// Everything calibration can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The OS error is part of the message, not a `source`: a chain printer
    /// (`anyhow`'s `{:#}`) would show it twice.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{dir}: another `twin calibrate` ({}) is writing there; wait for it to end or stop it, or use another --out", match .pid { Some(p) => format!("pid {p}"), None => "pid unknown".to_string() })]
    Locked { dir: PathBuf, pid: Option<u32> },
    #[error("{path}: larger than {max} bytes: not a file twin wrote")]
    TooLarge { path: PathBuf, max: u64 },
    #[error("{path}: malformed measurements CSV: {msg}")]
    Csv { path: PathBuf, msg: String },
    #[error("{path}: holds measurements from device {found:?}, not {expected:?}; use another output directory")]
    DeviceMismatch {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("unknown op {name:?}; expected one of {ops} or a group ({groups})")]
    UnknownOp {
        name: String,
        ops: String,
        groups: String,
    },
    #[error("fit {op}: too few points ({got}; need at least {need})")]
    TooFewPoints { op: String, need: usize, got: usize },
    #[error("fit {op}: non-finite or non-positive {what}")]
    NonFinite { op: String, what: String },
    #[error("fit {op}: constant data: {what} takes a single value, so the model's terms cannot be separated")]
    ConstantData { op: String, what: String },
    #[error("fit {op}: {what}")]
    Degenerate { op: String, what: String },
    #[error("fit {op}: shape {shape:?} lacks {key:?}")]
    MissingShape {
        op: String,
        shape: String,
        key: String,
    },
    #[error("no op could be fitted: {0}")]
    NothingFitted(String),
    #[error("{path}: invalid profile: {msg}")]
    Profile { path: PathBuf, msg: String },
    /// A runs profile (`twin calibrate --from-runs --out`) that does not read.
    #[error("{0}")]
    RunsProfile(String),
    /// Measured kernel tables (`twin calibrate --tables-out`) that do not write, read
    /// back or fit; the message says which and where.
    #[error("{0}")]
    MeasuredTables(String),
}

pub type Result<T> = std::result::Result<T, CalibrationError>;

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CalibrationError {
    let path = path.into();
    move |error| CalibrationError::Io { path, error }
}
