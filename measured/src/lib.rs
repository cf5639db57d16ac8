//! Measured runs (the `corpus` crate's records) as twin's simulations of them: a
//! corpus loaded by name or path ([`load`]), each record turned into the run it was
//! (hardware, model as served, the engine's scheduler, host terms and kernel tables,
//! the layout, the client as the workload: [`setup`]), simulated and read back as the
//! record's statistics ([`predict`]). `twin validate runs` and `twin calibrate
//! --from-runs` share it, and [`validate`] compares the predictions with what was
//! measured (`twin validate runs`); `twin runs import` makes a corpus of measured runs'
//! files ([`import`]).

pub mod calibrate;
pub mod error;
pub mod fit;
pub mod import;
pub mod linearised;
pub mod load;
pub mod model_bands;
pub mod plausible;
pub mod predict;
pub mod setup;
pub mod validate;

pub use error::MeasuredError;
pub use load::{load, Loaded};
pub use predict::predict_all;
pub use setup::Cache;
