//! calibration crate (in progress).
