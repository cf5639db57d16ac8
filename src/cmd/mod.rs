//! One module per subcommand.

pub mod calibrate;
pub mod forward;
pub mod simulate;
pub mod validate;

use crate::scenario::{embedded_names, Kind};

pub fn list() -> anyhow::Result<()> {
    for (title, kind) in [
        ("hardware", Kind::Hardware),
        ("models", Kind::Model),
        ("workloads", Kind::Workload),
        ("scenarios", Kind::Scenario),
    ] {
        println!("{title}: {}", embedded_names(kind).join(", "));
    }
    Ok(())
}
