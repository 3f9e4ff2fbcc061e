//! `trustlens sas`. Work in progress.
use anyhow::Result;
use clap::Args;

/// Work in progress.
#[derive(Args)]
pub struct SasArgs {}

pub fn run(_args: SasArgs) -> Result<()> {
    anyhow::bail!("`trustlens sas` is not implemented yet")
}
