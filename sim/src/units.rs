//! Units shared by every crate: data types with their byte widths, and byte sizes that
//! read as `4KiB`, `2MiB`, `288GB` or plain integers in scenario files. Defined in
//! `spec::dtype`; this path is kept for the crates that name them here.

pub use spec::dtype::{ByteSize, Dtype};
