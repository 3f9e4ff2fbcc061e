//! The `trustlens` command line: a thin clap layer over the library. Each command group lives in `src/cli/<group>.rs`
//! with its own arguments and `run` function; errors get context here and print as one line.
mod cli;

use clap::{Parser, Subcommand};

/// trustlens: does a model treat the same malicious instruction differently when it arrives in the user's chat
/// message, in a tool's description or in a tool's output? Load Llama-class models (HF safetensors or GGUF) on CPU or
/// CUDA, render matched-payload prompts, capture and patch the residual stream, and score behaviour.
#[derive(Parser)]
#[command(name = "trustlens", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect a checkpoint or generate text with it (sanity checks).
    #[command(subcommand)]
    Model(cli::model::ModelCommand),
    /// Write, import, validate, render and count matched-payload case sets.
    #[command(subcommand)]
    Cases(cli::cases::CasesCommand),
    /// Capture activations for every prompt of an experiment into HDF5 (resumable, shardable).
    Capture(cli::capture::CaptureArgs),
    /// Inspect and merge activation files.
    #[command(subcommand)]
    Activations(cli::activations::ActivationsCommand),
    /// Probes per layer: logistic, difference-of-means and RBF probes with grouped CV over cases, transfer across
    /// channels, bootstrap CIs and permutation p-values; writes probes.csv and probes.json.
    Probe(cli::probe::ProbeArgs),
    /// Activation patching between each case's adversarial prompt and its benign control, forward and reverse,
    /// single- and multi-layer, scored by cosine shift with bootstrap CIs; writes patching.csv and patching.json.
    Patch(cli::patch::PatchArgs),
    /// Run an experiment end to end: capture -> probes -> transfer -> patching -> figures (-> behaviour/SAS), each
    /// stage cached by a content hash of its inputs.
    Sweep(cli::sweep::SweepArgs),
    /// Render per-layer figures (PNG + SVG) and their CSV tables from a run's results folder.
    Plot(cli::plot::PlotArgs),
    /// Generate on every case x channel x condition and score six-class outcomes.
    Behave(cli::behave::BehaveArgs),
    /// Safety Asymmetry Score (ASR_tool - ASR_chat) from outcome files, with paired bootstrap CIs.
    Sas(cli::sas::SasArgs),
    /// Final-action risk scoring under untrusted tool feedback: episodes, scorers, GuardedJoint.
    Guard(cli::guard::GuardArgs),
}

fn main() {
    trustlens::tune_allocator();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Model(cmd) => cli::model::run(cmd),
        Command::Cases(cmd) => cli::cases::run(cmd),
        Command::Capture(args) => cli::capture::run(args),
        Command::Activations(cmd) => cli::activations::run(cmd),
        Command::Probe(args) => cli::probe::run(args),
        Command::Patch(args) => cli::patch::run(args),
        Command::Sweep(args) => cli::sweep::run(args),
        Command::Plot(args) => cli::plot::run(args),
        Command::Behave(args) => cli::behave::run(args),
        Command::Sas(args) => cli::sas::run(args),
        Command::Guard(args) => cli::guard::run(args),
    };
    if let Err(err) = result {
        // One line: the chain of contexts joined, no backtrace.
        eprintln!("error: {err:#}");
        std::process::exit(1);
    }
}
