//! Measured kernel tables (AIConfigurator's open per-op data, or any table in its
//! layout) as calibration: [`read`] the rows, [`fit`] a profile
//! ([`sim::cost::tables::KernelTables`]), [`smooth`] the correction grid's solver,
//! [`write`] measured rows in the same layout, and [`measure`] GEMMs through production
//! libraries on this machine's GPU (`twin calibrate --tables-out`).

pub mod fit;
pub mod measure;
pub mod read;
pub mod smooth;
pub mod write;

pub use fit::{fit, Options};
pub use read::{read, Measured, Read, Selection};
pub use write::write;
