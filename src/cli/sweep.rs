//! `trustlens sweep`. Work in progress.
use anyhow::Result;
use clap::Args;

/// Work in progress.
#[derive(Args)]
pub struct SweepArgs {}

pub fn run(_args: SweepArgs) -> Result<()> {
    anyhow::bail!("`trustlens sweep` is not implemented yet")
}
