//! Words and numbers twin prints in more than one place: a command's text and the
//! report of the same result say them the same way.

pub mod in_situ;
pub mod plan;
pub mod vllm;

/// `x` with `decimals` digits after the point: `fixed(2.345, 1)` is `2.3`.
pub fn fixed(x: f64, decimals: usize) -> String {
    format!("{x:.decimals$}")
}

/// A figure in a few characters: `1.14M`, `951.3K`, `9388.4` (the simulator's text
/// report writes its figures so).
pub use sim::serving::report::k as short_figure;

/// The break-even utilisation in words: `6.8%`, or `never` when even serving every
/// hour at this rate does not pay for the GPUs.
pub fn break_even_text(u: f64) -> String {
    if u <= 1.0 {
        format!("{:.1}%", 100.0 * u)
    } else {
        "never".into()
    }
}
