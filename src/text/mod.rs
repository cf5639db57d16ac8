//! Words and numbers the binary prints in more than one place: a command's text and
//! the report of the same result say them the same way.

pub mod in_situ;
pub mod kernel_source;
pub mod plan;
pub mod vllm;

/// `x` with `decimals` digits after the point: `fixed(2.345, 1)` is `2.3`.
pub fn fixed(x: f64, decimals: usize) -> String {
    format!("{x:.decimals$}")
}

/// A figure in a few characters: `1.14M`, `951.3K`, `9388.4` (the simulator's text
/// report writes its figures so).
pub use sim::serving::report::k as short_figure;

pub use crate::finance::break_even_text;
