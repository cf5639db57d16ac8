//! The report of each command: `simulate`, `plan`, `sweep` and `validate published`.
//! Which plots each has: simulate: TTFT/TPOT/per-user CDFs, time by op per pool, use,
//! queue and batch over time, $/M tokens by component. plan: the Pareto frontier with
//! the SLO line, screen estimates against simulated values, the best configuration's
//! plots as for simulate, $/M tokens of every simulated configuration, the rate
//! curve's day. sweep: the Pareto frontier, $/M tokens per point. validate: predicted
//! against published values per table; validate runs: predicted against measured per
//! metric (log-log), their ratio against concurrency, worst records, records not priced.

mod plan;
mod runs;
mod simulate;
mod sweep;
mod validate;

pub use plan::plan;
pub use runs::{runs, RunRow};
pub use simulate::{simulate, SimulatedRun};
pub use sweep::{sweep, SweepPoint};
pub use validate::{validate, ValidationRow};
