//! Published-figure tables and the solvers that fit twin's unknown parameters to them.
//!
//! A table (`scenarios/published/*.csv`) holds one published figure per row with the
//! twin command that computes it and its role: `fit` rows may set parameters, `check`
//! rows never do. This crate reads tables and solves the fits; the binary evaluates
//! rows (by running their commands) and stores the results. Nothing here does IO.
//!
//! - [`table`]: rows, parsing, validation.
//! - [`solve1d`]: one parameter against one row (bisection on a monotone error, or
//!   the best point of an integer grid).
//! - [`gauss_seidel`]: one parameter per row, solved in turn until they settle
//!   (Gauss-Seidel), integer pairs that share rows solved together.
//! - [`lsq`]: several parameters against more rows: bounded Levenberg-Marquardt on
//!   log-ratio residuals, with leave-one-out refits.

pub mod gauss_seidel;
pub mod lsq;
pub mod solve1d;
pub mod table;

pub use gauss_seidel::{gauss_seidel, Param, RoundsError};
pub use lsq::{least_squares, leave_one_out, Bounds, LsqError};
pub use solve1d::{round5, solve, Solve};
pub use table::{read_table, rel_error, PublishedFigure, Role, TableError};
