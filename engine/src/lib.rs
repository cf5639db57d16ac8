//! engine crate (in progress).
