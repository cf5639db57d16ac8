use kernels::KernelError;

/// Everything the engine can fail with. Driver errors always name their kernel.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid device {0:?}: expected `cpu` or `cuda:N` (N = GPU ordinal)")]
    BadDevice(String),
    #[error("no CUDA driver found (libcuda.so): {0}; use --device cpu")]
    NoDriver(String),
    #[error("CUDA device {ordinal}: {msg}; use --device cpu")]
    Device { ordinal: usize, msg: String },
    #[error("kernel {kernel}: CUDA error: {msg}")]
    Kernel { kernel: String, msg: String },
    #[error("invalid op {op}: {reason}")]
    BadOp { op: String, reason: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("memory mapping for {what} failed: {msg}")]
    Mmap { what: String, msg: String },
    /// Invalid shapes, NVRTC missing or failing, kernel cache errors.
    #[error(transparent)]
    Kernels(#[from] KernelError),
}

pub type Result<T> = std::result::Result<T, EngineError>;
