//! `twin validate published`: predicted vs published figures.
use anyhow::Result;
use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {}

pub fn run(_args: &ValidateArgs) -> Result<()> {
    anyhow::bail!("not yet")
}
