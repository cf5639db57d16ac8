//! Serde helpers for fields that default to one or yes: defined in `spec::serde_defaults`.

pub(crate) use spec::serde_defaults::{is_one, one, yes};
