//! `trustlens plot`. Work in progress.
use anyhow::Result;
use clap::Args;

/// Work in progress.
#[derive(Args)]
pub struct PlotArgs {}

pub fn run(_args: PlotArgs) -> Result<()> {
    anyhow::bail!("`trustlens plot` is not implemented yet")
}
