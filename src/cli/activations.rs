//! `trustlens activations ...`: inspect and merge activation files.
use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;
use trustlens::activations::{self, ActivationFile};

#[derive(Subcommand)]
pub enum ActivationsCommand {
    /// Summarise an activation file: model, layers, counts per family/channel/condition, norms per layer.
    Inspect {
        /// The .h5 file (e.g. activations/channel-trust/activations.h5).
        file: PathBuf,
    },
    /// Join shard files (`trustlens capture --shard K/N`) into one file, rows in prompt order. Refuses shards from
    /// different models, configurations or layer sets, unfinished shards and missing shards.
    ///
    /// Example: trustlens activations merge activations/run/activations.h5 activations/run/shard-*/activations.h5
    Merge {
        /// Output file.
        out: PathBuf,
        /// Shard files.
        #[arg(required = true)]
        shards: Vec<PathBuf>,
        /// Replace OUT if it exists.
        #[arg(long)]
        overwrite: bool,
    },
}

pub fn run(cmd: ActivationsCommand) -> Result<()> {
    match cmd {
        ActivationsCommand::Inspect { file } => {
            let f = ActivationFile::open(&file)?;
            print!("{}", f.summary()?);
        }
        ActivationsCommand::Merge { out, shards, overwrite } => {
            let n = activations::merge(&out, &shards, overwrite)?;
            println!("{}: {n} rows from {} shards", out.display(), shards.len());
        }
    }
    Ok(())
}
