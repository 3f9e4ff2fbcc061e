//! `trustlens behave`. Work in progress.
use anyhow::Result;
use clap::Args;

/// Work in progress.
#[derive(Args)]
pub struct BehaveArgs {}

pub fn run(_args: BehaveArgs) -> Result<()> {
    anyhow::bail!("`trustlens behave` is not implemented yet")
}
