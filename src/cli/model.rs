//! `trustlens model ...`: inspect and generate.
use clap::Subcommand;

#[derive(Subcommand)]
pub enum ModelCommand {}

pub fn run(cmd: ModelCommand) -> anyhow::Result<()> {
    match cmd {}
}
