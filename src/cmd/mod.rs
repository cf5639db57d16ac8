//! One module per subcommand; none imports another. What several commands share
//! lives outside `cmd/`: `args` (argument groups), `scenario` (resolution),
//! `simulation` (running a resolved scenario), `step` (a priced forward step),
//! `finance` (TCO and margin), `interrupt` (Ctrl-C).

pub mod calibrate;
pub mod cost;
pub mod forward;
pub mod kernel;
pub mod list;
pub mod live;
pub mod model;
pub mod plan;
pub mod runs;
pub mod simulate;
pub mod sweep;
pub mod validate;
