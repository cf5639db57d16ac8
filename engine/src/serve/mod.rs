//! Serving a model for real: the device abstraction the executor runs on.

pub mod cuda;
pub mod device;
