//! Serving a model for real: the model and its seeded weights (`model`), the executor of
//! forward passes over a paged KV cache (`exec`), written once against the device trait
//! (`crate::device::Backend`, named `ServeDevice` here), and synthetic passes with their
//! op calls timed for in-situ calibration (`calibration_passes`). The scheduler that
//! decides what each step runs lives in the `live` crate.

pub mod calibration_passes;
pub mod exec;
pub mod model;

/// The device trait and its buffer types under their serving names.
pub mod device {
    pub use crate::device::Backend as ServeDevice;
    pub use crate::device::{AttnCall, AttnSel, Buf, CpuDevice, DevWeights, Dt, IndexerCall};
}

/// The CUDA device under its serving path (`engine::serve::cuda::CudaDevice`).
pub mod cuda {
    pub use crate::device::CudaDevice;
}

/// The in-situ calibration passes under their first name.
pub use calibration_passes as situ;
pub use device::{CpuDevice, ServeDevice};
pub use exec::{
    trace_epoch, Exchange, Executor, HostSide, Seq, SeqOut, Shard, Solo, ThreadExchange, TracedCall,
};
pub use model::{
    AttnKind, IndexerConfig, LayerConfig, LinearDtype, LiveModel, ModelConfig, MoeConfig,
};
