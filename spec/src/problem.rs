//! (to be filled: see lib.rs)
