//! `trustlens plot RUN_DIR`: render the figures of a run folder (PNG + SVG + the CSV behind each).
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use trustlens::plot::{render_run, FigureMeta};

/// Arguments of `trustlens plot`.
///
/// Example: `trustlens plot figures/channel-trust --model SmolLM2-135M-Instruct` reads `probes.csv`,
/// `patching.csv` and `sas.csv` (whichever exist) and writes `probe_accuracy`, `probe_auroc`, `transfer`,
/// `patching_shift`, `sas_by_family` and `summary` as `.png`, `.svg` and `.csv` into the same folder.
#[derive(Args)]
pub struct PlotArgs {
    /// Run folder holding the result tables, e.g. `figures/channel-trust` (as `trustlens probe`/`patch`/`sas`
    /// write them). Figures are written into the same folder.
    run_dir: PathBuf,
    /// Model name for the figure titles, e.g. `--model SmolLM2-135M-Instruct` (default: the model path in the
    /// folder's `patching.json`, else "unknown model").
    #[arg(long)]
    model: Option<String>,
    /// Number of cases for the titles (default: read from the tables).
    #[arg(long)]
    n_cases: Option<usize>,
    /// Token positions for the probe figures, in panel order, e.g. `--positions last,payload_last`
    /// (default: every position in probes.csv, `last` first).
    #[arg(long, value_delimiter = ',')]
    positions: Vec<String>,
    /// Token position of the probe panels of the summary figure (default: `last`).
    #[arg(long)]
    summary_position: Option<String>,
    /// Probe method shown in the transfer figure: logistic, rbf or diffmeans.
    #[arg(long, default_value = "logistic")]
    transfer_method: String,
    /// Attack family of the patching figure: `all` or a family in patching.csv (TP, IPI, CTS).
    #[arg(long, default_value = "all")]
    family: String,
    /// PNG resolution in pixels per SVG pixel (2 gives about 190 dpi at the SVG's physical size).
    #[arg(long, default_value_t = 2.0)]
    png_scale: f64,
}

pub fn run(args: PlotArgs) -> Result<()> {
    if !args.run_dir.is_dir() {
        bail!("{}: not a folder (expected a run folder such as figures/channel-trust)", args.run_dir.display());
    }
    if !(args.png_scale.is_finite() && (0.25..=8.0).contains(&args.png_scale)) {
        bail!("--png-scale {}: must be between 0.25 and 8", args.png_scale);
    }
    let meta = FigureMeta {
        model: args.model.unwrap_or_default(),
        n_cases: args.n_cases,
        positions: args.positions,
        summary_position: args.summary_position,
        transfer_method: args.transfer_method,
        patch_family: args.family,
        png_scale: args.png_scale,
    };
    let started = std::time::Instant::now();
    let written = render_run(&args.run_dir, &meta).with_context(|| format!("plotting {}", args.run_dir.display()))?;
    for p in &written {
        println!("{}", p.display());
    }
    eprintln!("{} files in {:.1} s", written.len(), started.elapsed().as_secs_f64());
    Ok(())
}
