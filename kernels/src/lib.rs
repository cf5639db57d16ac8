//! kernels crate (in progress).
