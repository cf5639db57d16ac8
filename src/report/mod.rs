//! `--report DIR`: a shareable HTML report.
use anyhow::{bail, Result};

pub fn plan(_o: &sim::plan::Outcome, _dir: &str, _force: bool) -> Result<String> {
    bail!("not yet")
}
pub fn simulate(
    _r: &crate::cmd::simulate::Resolved,
    _rep: &sim::serving::Report,
    _f: Option<&sim::tco::Finance>,
    _dir: &str,
    _force: bool,
) -> Result<String> {
    bail!("not yet")
}
