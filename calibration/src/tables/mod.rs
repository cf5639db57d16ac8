//! Measured kernel tables (AIConfigurator's open per-op data, or any table in its
//! layout) as calibration: [`read`] the rows, [`fit`] a profile
//! ([`sim::cost::tables::KernelTables`]), [`smooth`] the correction grid's solver.

pub mod fit;
pub mod read;
pub mod smooth;

pub use fit::{fit, Options};
pub use read::{read, Measured, Read, Selection};
