//! One GPU and the fabric around it, as a scenario's `hardware` file describes it.
//! Defined in `spec::hardware`; this path is kept for the crates that name it here.

pub use spec::hardware::*;
