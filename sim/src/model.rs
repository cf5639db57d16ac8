//! A model as the cost model sees it, loaded from a scenario's `models/*.toml`.
//! Defined in `spec::model`; this path is kept for the crates that name it here.

pub use spec::model::*;
pub use spec::state::*;
pub use spec::weights::{Part, Weights};
