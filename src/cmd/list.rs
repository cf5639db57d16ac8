//! `twin list`: the embedded hardware, models, workloads, scenarios and TCO presets.

use crate::scenario::{embedded_names, Kind};
use anyhow::Result;

pub fn run() -> Result<()> {
    for (title, kind) in [
        ("hardware", Kind::Hardware),
        ("models", Kind::Model),
        ("workloads", Kind::Workload),
        ("scenarios", Kind::Scenario),
        ("tco presets", Kind::Tco),
    ] {
        println!("{title}: {}", embedded_names(kind).join(", "));
    }
    let tables: Vec<String> = crate::scenario::tables::shipped()
        .into_iter()
        .map(|(h, e, v)| format!("{h} {e}@{v}"))
        .collect();
    println!("kernel tables (--engine): {}", tables.join(", "));
    Ok(())
}
