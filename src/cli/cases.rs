//! `trustlens cases ...`: validate, render, stats, generate, import.
use clap::Subcommand;

#[derive(Subcommand)]
pub enum CasesCommand {}

pub fn run(cmd: CasesCommand) -> anyhow::Result<()> {
    match cmd {}
}
