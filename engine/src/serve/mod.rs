//! Serving a model for real: the device abstraction (`device`, `cuda`), the model and
//! its seeded weights (`model`), and the executor of forward passes over a paged KV
//! cache (`exec`). The scheduler that decides what each step runs lives in the `live`
//! crate.

pub mod cuda;
pub mod device;
pub mod exec;
pub mod model;
pub mod situ;

pub use device::{CpuDevice, ServeDevice};
pub use exec::{Exchange, Executor, Seq, SeqOut, Shard, Solo, ThreadExchange};
pub use model::{
    AttnKind, IndexerConfig, LayerConfig, LinearDtype, LiveModel, ModelConfig, MoeConfig,
};
