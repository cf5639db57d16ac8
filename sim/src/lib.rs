//! twin's simulation core: hardware and model descriptions, the cost-model trait with
//! its analytic implementation, and the discrete-event simulator of a serving system.
//!
//! Invariant: this crate knows nothing about GPUs, files or the command line. It takes
//! values, returns values, and every random stream comes from an explicit seed.

pub mod cost;
pub mod forward;
pub mod plan;
mod serde_defaults;
pub mod serving;
pub mod tco;
pub mod validate;
