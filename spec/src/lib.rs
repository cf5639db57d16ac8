//! twin's vocabulary: the concepts every crate shares, defined once.
//!
//! No IO, no GPU, no simulator: serde and thiserror only, so `engine` (which must not
//! know the simulator) and `sim` speak the same words. `tests/architecture.rs` checks
//! its dependencies.

pub mod call;
pub mod dtype;
pub mod hardware;
pub mod insitu;
pub mod kernel;
pub mod live_model;
pub mod model;
pub mod note;
pub mod problem;
pub mod serde_defaults;
pub mod state;
pub mod stats;
pub mod version;
pub mod weights;
