//! `trustlens sweep EXPERIMENT.toml`: capture -> probes -> patching -> figures, each stage cached by content hash.
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Instant;

use trustlens::experiment::{Experiment, STAGES};
use trustlens::model::{self, ModelSource};
use trustlens::sweep::{self, Freshness, Manifest, ManifestStage, RunDirs, StagePlan, SweepInputs};

/// Run an experiment end to end: capture the residual stream, fit probes per layer (in-channel and across channels),
/// patch adversarial <-> benign per layer, and draw the figures, into `figures/<run>/`.
///
/// Each stage is cached by a SHA-256 of its inputs (model and case hashes, the experiment sections it reads, the
/// keys of the stages it consumes) and of its outputs: re-running skips finished stages, and editing a section
/// re-runs only the stages that read it (e.g. `[patch] layers` -> patch and figures). `figures/<run>/manifest.json`
/// records versions, seeds, hashes, the exact configuration and each stage's time. A killed sweep resumes: finished
/// stages stay cached and capture resumes from its journal.
///
/// Stages: capture, probe, patch, behave, sas, figures (`[sweep] stages` selects them; behave and sas, the
/// behavioural evaluation, are off by default). The sections `[probe]`, `[patch]`, `[behave]` and `[sweep]` are
/// documented in `trustlens::experiment` and in experiments/channel-trust.toml.
///
/// Examples:
///   trustlens sweep experiments/channel-trust.toml
///   trustlens sweep experiments/channel-trust.toml --dry-run          # what would run, and why
///   trustlens sweep experiments/channel-trust.toml --force patch      # re-run patching (and what depends on it)
#[derive(Args)]
pub struct SweepArgs {
    /// Experiment file (TOML).
    pub experiment: PathBuf,
    /// Only these stages (comma-separated), instead of `[sweep] stages`.
    #[arg(long, value_delimiter = ',')]
    pub stages: Vec<String>,
    /// Re-run these stages even if cached (comma-separated; `all` for every stage).
    #[arg(long, value_delimiter = ',')]
    pub force: Vec<String>,
    /// Print the plan (each stage, cached or why it would run, its command) and exit.
    #[arg(long)]
    pub dry_run: bool,
}

fn model_name(path: &Path) -> String {
    let stem = if path.is_dir() { path.file_name() } else { path.file_stem() };
    let s = stem.map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    // `SmolLM2-135M-Instruct.Q4_1` -> `SmolLM2-135M-Instruct (Q4_1)`
    match s.rsplit_once('.') {
        Some((a, b)) if !b.is_empty() && b.chars().any(|c| c.is_ascii_digit()) => format!("{a} ({b})"),
        _ => s,
    }
}

fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git").args(["rev-parse", "HEAD"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn now_unix() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

pub fn run(a: SweepArgs) -> Result<()> {
    let t0 = Instant::now();
    let path = &a.experiment;
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut exp = Experiment::parse(&text, path)?;
    if !a.stages.is_empty() {
        exp.sweep.stages = a.stages.clone();
        exp.check().map_err(|m| anyhow::anyhow!("--stages: {m}"))?;
    }
    for f in &a.force {
        if f != "all" && !STAGES.contains(&f.as_str()) {
            bail!("--force: unknown stage `{f}` ({}, all)", STAGES.join(", "));
        }
    }

    // Everything that can be wrong with the inputs is checked before any work: the model, the cases, layer ranges.
    let src = ModelSource::resolve(&exp.model.path).with_context(|| "[model] path".to_string())?;
    let summary = model::inspect(src.path()).with_context(|| format!("{}", exp.model.path.display()))?;
    if !exp.cases.file.is_file() {
        bail!("[cases] file: {} does not exist", exp.cases.file.display());
    }
    let dirs = RunDirs::of(&exp, path);
    let cases_sha256 = sweep::sha256_file(&exp.cases.file)?;
    let model_sha256 = sweep::model_fingerprint(src.path(), &PathBuf::from(".trustlens-cache/sha256"))?;
    let inputs = SweepInputs {
        experiment_path: path.clone(),
        model_sha256: model_sha256.clone(),
        cases_sha256: cases_sha256.clone(),
        n_layers: summary.layers,
        model_name: model_name(src.path()),
    };
    let plans = sweep::plan(&exp, &inputs).with_context(|| format!("{}", path.display()))?;
    let chosen = sweep::selected(&exp, &plans);

    // Decide what runs: a stage runs when it is stale, forced, or downstream of a stage that runs.
    let mut decisions: Vec<(&StagePlan, Freshness, bool)> = Vec::new();
    let mut running: Vec<&str> = Vec::new();
    for p in &chosen {
        let fresh = sweep::freshness(&dirs, p);
        let forced = a.force.iter().any(|f| f == "all" || f == &p.name);
        let upstream_runs = sweep::consumes(&p.name).iter().any(|d| running.contains(d));
        let runs = forced || !matches!(fresh, Freshness::Fresh(_)) || upstream_runs;
        if runs {
            running.push(&p.name);
        }
        decisions.push((p, fresh, runs));
    }
    // A selected stage whose input stage is neither selected nor cached cannot run.
    let selected = |s: &str| chosen.iter().any(|p| p.name == s);
    if selected("probe") && !selected("capture") {
        let capture = plans.iter().find(|p| p.name == "capture").expect("planned");
        if !matches!(sweep::freshness(&dirs, capture), Freshness::Fresh(_)) {
            bail!("stage probe needs the capture stage, which is neither selected nor cached for this configuration");
        }
    }

    eprintln!(
        "sweep {} -> {}  (model {}, {} layers; stages: {})",
        path.display(),
        dirs.figures.display(),
        inputs.model_name,
        summary.layers,
        chosen.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
    );
    for (p, fresh, runs) in &decisions {
        let why = if *runs && matches!(fresh, Freshness::Fresh(_)) {
            "forced or upstream re-ran".into()
        } else {
            fresh.describe()
        };
        eprintln!("  {:<8} {:<4} ({why})", p.name, if *runs { "run" } else { "skip" });
        if a.dry_run {
            eprintln!("           trustlens {}", shell_words(&p.args));
        }
    }
    if a.dry_run {
        return Ok(());
    }

    let exe = std::env::current_exe().context("locating the trustlens binary")?;
    let mut stages = Vec::new();
    for (p, fresh, runs) in decisions {
        let (status, seconds, state) = if runs {
            sweep::forget(&dirs, &p.name)?;
            let mut args = p.args.clone();
            // Behaviour outputs of another configuration are replaced; a killed run of this one resumes.
            let forced = a.force.iter().any(|f| f == "all" || f == &p.name);
            if p.name == "behave" && (forced || matches!(fresh, Freshness::InputsChanged)) {
                args.push("--overwrite".into());
            }
            eprintln!("[{}] trustlens {}", p.name, shell_words(&args));
            let ts = Instant::now();
            let st = std::process::Command::new(&exe)
                .args(&args)
                .status()
                .with_context(|| format!("starting stage {}", p.name))?;
            if !st.success() {
                bail!(
                    "stage {} failed ({st}); earlier stages stay cached: fix the cause and re-run `trustlens sweep {}`",
                    p.name,
                    path.display()
                );
            }
            let secs = ts.elapsed().as_secs_f64();
            let extra = if p.name == "figures" { figure_files(&dirs.figures)? } else { Vec::new() };
            let state = sweep::record(&dirs, p, &extra, secs)?;
            eprintln!("[{}] done in {secs:.1} s", p.name);
            ("ran", secs, state)
        } else {
            let Freshness::Fresh(state) = fresh else { unreachable!("a stage that does not run is fresh") };
            ("cached", 0.0, state)
        };
        stages.push(ManifestStage {
            stage: p.name.clone(),
            key: p.key.clone(),
            status: status.into(),
            seconds,
            original_seconds: state.seconds,
            command: std::iter::once("trustlens".to_string()).chain(p.args.iter().cloned()).collect(),
            inputs: p.inputs.clone(),
            outputs: state.outputs,
        });
    }

    let manifest = Manifest {
        format: "trustlens-sweep-manifest/1",
        trustlens_version: env!("CARGO_PKG_VERSION"),
        git_commit: git_commit(),
        libtorch: "torch 2.11.0 (tch 0.24)".into(),
        created_unix: now_unix(),
        experiment_file: path.clone(),
        experiment_sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes())),
        experiment_text: text,
        effective_config: exp.to_toml(),
        model_path: exp.model.path.clone(),
        model_sha256,
        cases_file: exp.cases.file.clone(),
        cases_sha256,
        seeds: serde_json::json!({"probe": exp.probe.seed, "patch": exp.patch.seed, "cases": "fixed by the case file"}),
        total_seconds: t0.elapsed().as_secs_f64(),
        stages,
    };
    let mpath = dirs.figures.join("manifest.json");
    sweep::write_atomic(&mpath, serde_json::to_string_pretty(&manifest)?.as_bytes())?;
    let ran: Vec<&str> =
        manifest.stages.iter().filter(|s| s.status == "ran").map(|s| s.stage.as_str()).collect::<Vec<_>>();
    println!(
        "sweep finished in {:.1} s ({}); results and figures in {}/ (manifest.json lists every file)",
        manifest.total_seconds,
        if ran.is_empty() { "all stages cached".to_string() } else { format!("ran: {}", ran.join(", ")) },
        dirs.figures.display()
    );
    Ok(())
}

/// The figure files (PNG, SVG and the CSV tables beside them) in a run folder, excluding the stage tables.
fn figure_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let p = e?.path();
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let ext = p.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
        let stage_table = ["probes.csv", "patching.csv", "sas.csv"].contains(&name.as_str());
        if p.is_file() && ["png", "svg", "csv"].contains(&ext.as_str()) && !stage_table {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Arguments joined for display, quoting those a shell would split.
fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"()$;&|<>".contains(c)) {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
