//! `twin list`: the embedded hardware, models, workloads, scenarios and TCO presets.

use anyhow::Result;
use scenario::{embedded_names, Kind};

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
    let tables: Vec<String> = scenario::tables::shipped()
        .into_iter()
        .map(|(h, e, v)| format!("{h} {e}@{v}"))
        .collect();
    println!("kernel tables (--engine): {}", tables.join(", "));
    Ok(())
}
