//! Calibration: measuring the engine's ops, fitting cost models to the measurements and
//! turning the fits into the cost model's parameters.
//!
//! * [`log`]: `measurements.csv`, appended and fsynced row by row, resumable.
//! * [`fit`]: nonnegative relative-error least squares, R², MAPE, leave-one-out MAPE.
//! * [`families`]: one documented model per op.
//! * [`profile`]: `profile.toml` (fits, reference peaks, provenance) and
//!   [`Profile::cost_params`].
//! * [`plan`]: which points `twin calibrate` measures.
//! * [`live`]: the live engine's ops at a model's shapes, fitted per static key;
//!   [`live_trace`]: the same fits from a live run's own op trace.
//! * [`trace`]: a profiler trace imported into an in-situ layer breakdown.
//! * [`insitu`]: in-situ factors, measured over predicted, per category.
//! * [`runs`]: terms fitted to measured serving runs, cross-validated by group, and
//!   bands from the cross-validated residuals.
//! * [`spread_fit`]: each kernel class's price spread, from the kernel table's
//!   out-of-sample errors (`twin validate published --fit`).

mod error;
pub mod families;
pub mod fit;
pub mod insitu;
pub mod live;
pub mod live_trace;
pub mod log;
pub mod plan;
pub mod profile;
pub mod runs;
pub mod spread_fit;
pub mod tables;
pub mod trace;

pub use error::{CalibrationError, Result};
pub use families::OpFit;
pub use log::{DirLock, MeasurementLog, MeasurementRecord};
pub use profile::{Profile, Provenance, Reference};
