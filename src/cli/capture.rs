//! `trustlens capture EXPERIMENT.toml`: capture activations for every prompt of an experiment into HDF5.
use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use trustlens::capture::{self, CaptureRequest};
use trustlens::experiment::{Experiment, LayerSpec};
use trustlens::prompt::PromptAssets;

/// Capture the residual stream (or another block hook) at the last prompt token, and optionally at other named
/// positions, for every case x channel x condition of an experiment. Output: `<out_dir>/<run>/activations.h5`.
///
/// Killed runs resume: run the same command again and only the missing batches are computed.
///
/// Example: trustlens capture experiments/channel-trust.toml --layers frac:0.25,0.5 --batch-size 16
#[derive(Args)]
pub struct CaptureArgs {
    /// Experiment file (TOML).
    pub experiment: PathBuf,
    /// Capture only the K-th of N deterministic shards (prompt index mod N == K-1), into `<run>/shard-K-of-N/`.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,
    /// Delete whatever the run directory holds (a finished run, an unfinished one, another configuration) and start afresh.
    #[arg(long)]
    pub overwrite: bool,
    /// Replace an existing run only if it was made with another model or configuration (resume or keep it
    /// otherwise).
    #[arg(long, conflicts_with = "overwrite")]
    pub replace_stale: bool,
    /// Override [model] path.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Override [model] dtype (f32, f16, bf16).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Override [model] device (cpu, cuda, cuda:N, auto). Clears any [model] devices list.
    #[arg(long, conflicts_with = "devices")]
    pub device: Option<String>,
    /// Split the model's blocks over several devices by memory, in order: embedding on the first, final norm and
    /// unembedding on the last; `cpu` last takes the blocks that do not fit on the GPUs. `auto` = every visible GPU.
    /// Overrides [model] devices / device. Example: --devices cuda:0,cuda:1   or   --devices auto,cpu
    #[arg(long, value_name = "LIST")]
    pub devices: Option<String>,
    /// Weight budget per device for --devices instead of the measured free memory (90% of free GPU memory minus
    /// 1 GiB; 90% of available RAM). Example: --device-memory cuda:0=70GiB,cuda:1=70GiB,cpu=200GB
    #[arg(long, value_name = "DEV=SIZE,...")]
    pub device_memory: Option<String>,
    /// Override [cases] file.
    #[arg(long)]
    pub cases: Option<PathBuf>,
    /// Override [capture] layers: `6,12,18` or `frac:0.2,0.4`.
    #[arg(long)]
    pub layers: Option<String>,
    /// Override [capture] positions, comma-separated: last, payload_last, user_end.
    #[arg(long)]
    pub positions: Option<String>,
    /// Override [capture] hook (e.g. hook_resid_post).
    #[arg(long)]
    pub hook: Option<String>,
    /// Override [capture] batch_size.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Override [capture] run name.
    #[arg(long)]
    pub run: Option<String>,
    /// Override [capture] out_dir.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Intra-op threads (0 = libtorch's default).
    #[arg(long, default_value_t = 0)]
    pub threads: i32,
    /// Seconds between checkpoints of the .h5 file (0 = after every batch). The journal is synced after every batch
    /// regardless.
    #[arg(long, default_value_t = 30.0)]
    pub checkpoint_secs: f64,
    /// Write the rendered prompts (token ids), their batches and the pad id as JSON to FILE and exit without
    /// capturing (used by bench/capture.py to feed the reference the same inputs).
    #[arg(long, value_name = "FILE")]
    pub dump_prompts: Option<PathBuf>,
    /// Also write the run's report (rows, timings, peak RSS) as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Testing aid: sleep this many milliseconds after every batch.
    #[arg(long, default_value_t = 0, hide = true)]
    pub pause_ms: u64,
}

fn apply_overrides(exp: &mut Experiment, a: &CaptureArgs) -> Result<()> {
    if let Some(v) = &a.model {
        exp.model.path = v.clone();
    }
    if let Some(v) = &a.dtype {
        exp.model.dtype = v.clone();
    }
    if let Some(v) = &a.device {
        exp.model.device = v.clone();
        exp.model.devices = None;
        exp.model.device_memory = None;
    }
    if let Some(v) = &a.devices {
        exp.model.devices = Some(v.split(',').map(|s| s.trim().to_string()).collect());
    }
    if let Some(v) = &a.device_memory {
        exp.model.device_memory = Some(v.clone());
    }
    if let Some(v) = &a.cases {
        exp.cases.file = v.clone();
    }
    if let Some(v) = &a.layers {
        exp.capture.layers = LayerSpec::parse_arg(v)?;
    }
    if let Some(v) = &a.positions {
        exp.capture.positions = v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    }
    if let Some(v) = &a.hook {
        exp.capture.hook = v.clone();
    }
    if let Some(v) = a.batch_size {
        exp.capture.batch_size = v;
    }
    if let Some(v) = &a.run {
        exp.capture.run = Some(v.clone());
    }
    if let Some(v) = &a.out_dir {
        exp.capture.out_dir = v.clone();
    }
    exp.check().map_err(|m| anyhow::anyhow!("{m}"))?;
    Ok(())
}

pub fn run(a: CaptureArgs) -> Result<()> {
    let mut exp = Experiment::load(&a.experiment)?;
    apply_overrides(&mut exp, &a).with_context(|| format!("{}", a.experiment.display()))?;
    let shard = match &a.shard {
        None => None,
        Some(s) => Some(
            trustlens::activations::parse_shard(s)
                .ok_or_else(|| anyhow::anyhow!("--shard `{s}`: expected K/N with 1 <= K <= N"))?,
        ),
    };
    if let Some(path) = &a.dump_prompts {
        let assets = PromptAssets::load(&exp.model.path)?;
        let plan = capture::prepare(&exp, &assets, shard)?;
        let json = serde_json::json!({
            "pad_id": plan.pad_id,
            "batch_size": exp.capture.batch_size,
            "prompts": plan.prompts.iter().map(|p| &p.ids).collect::<Vec<_>>(),
            "prompt_index": plan.prompts.iter().map(|p| p.index).collect::<Vec<_>>(),
            "positions": plan.prompts.iter().map(|p| &p.positions).collect::<Vec<_>>(),
            "batches": plan.batches,
        });
        std::fs::write(path, serde_json::to_string(&json)?).with_context(|| format!("{}", path.display()))?;
        eprintln!("wrote {} prompts in {} batches to {}", plan.prompts.len(), plan.batches.len(), path.display());
        return Ok(());
    }
    let req = CaptureRequest {
        experiment: exp,
        origin: a.experiment.clone(),
        shard,
        overwrite: a.overwrite,
        replace_stale: a.replace_stale,
        threads: Some(a.threads),
        checkpoint_secs: a.checkpoint_secs,
        pause_ms: a.pause_ms,
        progress: !a.quiet,
    };
    let rep = capture::run(&req)?;
    if rep.already_complete {
        println!("{}: already complete ({} rows); nothing to do", rep.path.display(), rep.rows);
    } else {
        let rate = if rep.forward_seconds > 0.0 { rep.computed_rows as f64 / rep.forward_seconds } else { 0.0 };
        println!(
            "{}: {} rows ({} resumed, {} computed in {} batches) on {}; forward {:.1} s ({rate:.1} prompts/s), total {:.1} s, peak RSS {:.0} MiB",
            rep.path.display(),
            rep.rows,
            rep.resumed_rows,
            rep.computed_rows,
            rep.batches,
            rep.device,
            rep.forward_seconds,
            rep.total_seconds,
            rep.peak_rss_bytes as f64 / (1 << 20) as f64
        );
    }
    if let Some(p) = &a.summary_json {
        std::fs::write(p, serde_json::to_string_pretty(&rep)?).with_context(|| format!("{}", p.display()))?;
    }
    Ok(())
}
