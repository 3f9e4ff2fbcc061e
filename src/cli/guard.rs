//! `trustlens guard`. Work in progress.
use anyhow::Result;
use clap::Args;

/// Work in progress.
#[derive(Args)]
pub struct GuardArgs {}

pub fn run(_args: GuardArgs) -> Result<()> {
    anyhow::bail!("`trustlens guard` is not implemented yet")
}
