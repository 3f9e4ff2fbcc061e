//! `trustlens sweep`: one experiment file -> capture -> probes (in-channel and cross-channel transfer) -> patching ->
//! figures, each stage cached by a content hash of its inputs.
//!
//! # Stages and their keys
//! Every stage has a key: the SHA-256 of everything that determines its outputs.
//!
//! | stage     | command run                            | key covers                                                    |
//! |-----------|----------------------------------------|---------------------------------------------------------------|
//! | `capture` | `trustlens capture EXP`                | model SHA-256, case file SHA-256, `[model]`, `[cases]`, `[capture]` |
//! | `probe`   | `trustlens probe --run ...`            | the capture key, `[probe]`                                    |
//! | `patch`   | `trustlens patch EXP --layers ...`     | model and case SHA-256, `[model]`, `[cases]`, patch layers, `[patch]` |
//! | `behave`  | `trustlens behave run EXP ...`         | model and case SHA-256, `[model]`, `[cases]`, `[behave]`      |
//! | `sas`     | `trustlens sas figures/<run>/outcomes.jsonl` | the behave key, `[behave] n_boot`                       |
//! | `figures` | `trustlens plot figures/<run>`         | the keys of the stages whose tables it draws                  |
//!
//! (plus the trustlens version in every key). A stage is *fresh* when its state file
//! `figures/<run>/.sweep/<stage>.json` holds the same key and every output it recorded still has the recorded
//! SHA-256; fresh stages are skipped. So editing `[patch] layers` re-runs patching and figures only; editing
//! `[capture] layers` re-runs capture, probes and figures. A stage killed half-way leaves no state file and runs
//! again (capture resumes from its own journal).
//!
//! `figures/<run>/manifest.json` records, after every sweep, the exact experiment text and effective configuration,
//! versions, seeds, model and case hashes, and per stage its key, whether it ran or was cached, its wall time and its
//! outputs with their SHA-256.
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

use crate::experiment::{Experiment, LayerSpec, STAGES};

/// Errors of the sweep's bookkeeping (stage failures are reported by the CLI).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> SweepError + '_ {
    move |source| SweepError::Io { path: path.to_path_buf(), source }
}

/// SHA-256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String, SweepError> {
    crate::sha256_file(path).map_err(io_err(path))
}

/// The files whose contents identify a model: one GGUF or safetensors file, or every `*.safetensors` and `*.json` of
/// an HF directory, sorted.
fn model_files(path: &Path) -> Result<Vec<PathBuf>, SweepError> {
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io_err(path))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "safetensors" || e == "json"))
            .collect();
        files.sort();
        Ok(files)
    } else {
        Ok(vec![path.to_path_buf()])
    }
}

/// A model's content hash, memoised in `cache_dir` by (path, size, modification time) so that a 140 GB checkpoint
/// is hashed once, not on every sweep. `name:sha256;...` over the model's files.
pub fn model_fingerprint(path: &Path, cache_dir: &Path) -> Result<String, SweepError> {
    let mut parts = Vec::new();
    std::fs::create_dir_all(cache_dir).map_err(io_err(cache_dir))?;
    for f in model_files(path)? {
        let meta = std::fs::metadata(&f).map_err(io_err(&f))?;
        let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        let stamp = format!(
            "{}|{}|{}",
            std::fs::canonicalize(&f).unwrap_or_else(|_| f.clone()).display(),
            meta.len(),
            mtime.map(|d| d.as_nanos()).unwrap_or(0)
        );
        let memo = cache_dir.join(format!("{}.sha256", &hex::encode(Sha256::digest(stamp.as_bytes()))[..32]));
        let sha = match std::fs::read_to_string(&memo) {
            Ok(s) if s.trim().len() == 64 => s.trim().to_string(),
            _ => {
                let s = sha256_file(&f)?;
                // A memo that fails to write only costs a re-hash next time.
                let _ = std::fs::write(&memo, &s);
                s
            }
        };
        parts.push(format!("{}:{sha}", f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()));
    }
    Ok(parts.join(";"))
}

/// What one stage will do.
#[derive(Debug, Clone, Serialize)]
pub struct StagePlan {
    /// `capture`, `probe`, `patch` or `figures`.
    pub name: String,
    /// SHA-256 (hex) of [`StagePlan::inputs`].
    pub key: String,
    /// Everything the key covers, for the manifest.
    pub inputs: serde_json::Value,
    /// Arguments of the `trustlens` command that runs the stage.
    pub args: Vec<String>,
    /// Files the stage must leave behind (more may be recorded after it runs).
    pub outputs: Vec<PathBuf>,
}

/// Inputs the planner needs that require touching files or the model config.
#[derive(Debug, Clone)]
pub struct SweepInputs {
    /// The experiment file (passed to `capture` and `patch`).
    pub experiment_path: PathBuf,
    /// From [`model_fingerprint`].
    pub model_sha256: String,
    /// SHA-256 of the case file.
    pub cases_sha256: String,
    /// The model's block count (to resolve layer specs).
    pub n_layers: usize,
    /// A short model name for figure titles.
    pub model_name: String,
}

/// The run name and its folders.
#[derive(Debug, Clone)]
pub struct RunDirs {
    pub run: String,
    /// `<capture.out_dir>/<run>` (activations).
    pub activations: PathBuf,
    /// `<sweep.figures_dir>/<run>` (tables, figures, manifest, stage states).
    pub figures: PathBuf,
}

impl RunDirs {
    pub fn of(exp: &Experiment, experiment_path: &Path) -> RunDirs {
        let run = exp.run_name(experiment_path);
        RunDirs { activations: exp.capture.out_dir.join(&run), figures: exp.sweep.figures_dir.join(&run), run }
    }

    /// `figures/<run>/.sweep/<stage>.json`
    pub fn state_path(&self, stage: &str) -> PathBuf {
        self.figures.join(".sweep").join(format!("{stage}.json"))
    }
}

fn key_of(inputs: &serde_json::Value) -> String {
    hex::encode(Sha256::digest(inputs.to_string().as_bytes()))
}

fn section<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// Plan every stage of the pipeline (whether or not `[sweep] stages` selects it: downstream keys need upstream keys).
/// Layer specs are resolved here, so a layer past the model's depth fails before any work starts.
pub fn plan(exp: &Experiment, inp: &SweepInputs) -> Result<Vec<StagePlan>, SweepError> {
    let dirs = RunDirs::of(exp, &inp.experiment_path);
    let version = env!("CARGO_PKG_VERSION");
    let exp_arg = inp.experiment_path.display().to_string();
    let figs = dirs.figures.display().to_string();
    let invalid = |what: &str, e: crate::experiment::ExperimentError| SweepError::Invalid(format!("{what}: {e}"));

    let capture_layers = exp.capture.layers.resolve(inp.n_layers).map_err(|e| invalid("capture.layers", e))?;
    let capture_inputs = serde_json::json!({
        "stage": "capture", "trustlens": version, "model_sha256": inp.model_sha256, "cases_sha256": inp.cases_sha256,
        "model": section(&exp.model), "cases": section(&exp.cases), "capture": section(&exp.capture),
        "layers": capture_layers,
    });
    let capture_key = key_of(&capture_inputs);
    let capture = StagePlan {
        name: "capture".into(),
        key: capture_key.clone(),
        inputs: capture_inputs,
        args: vec!["capture".into(), exp_arg.clone(), "--replace-stale".into()],
        outputs: vec![dirs.activations.join("activations.h5")],
    };

    let p = &exp.probe;
    let probe_inputs = serde_json::json!({
        "stage": "probe", "trustlens": version, "capture_key": capture_key, "probe": section(p),
    });
    let mut probe_args = vec![
        "probe".to_string(),
        "--run".into(),
        dirs.activations.display().to_string(),
        "--methods".into(),
        p.methods.join(","),
        "--folds".into(),
        p.folds.to_string(),
        "--bootstrap".into(),
        p.bootstrap.to_string(),
        "--permutations".into(),
        p.permutations.to_string(),
        "--seed".into(),
        p.seed.to_string(),
        "--out".into(),
        figs.clone(),
        "--quiet".into(),
    ];
    if !p.positions.is_empty() {
        probe_args.push("--positions".into());
        probe_args.push(p.positions.join(","));
    }
    let probe = StagePlan {
        name: "probe".into(),
        key: key_of(&probe_inputs),
        inputs: probe_inputs,
        args: probe_args,
        outputs: vec![dirs.figures.join("probes.csv"), dirs.figures.join("probes.json")],
    };

    let q = &exp.patch;
    let patch_spec: LayerSpec = q.layers.clone().unwrap_or_else(|| exp.capture.layers.clone());
    let patch_layers = patch_spec.resolve(inp.n_layers).map_err(|e| invalid("patch.layers", e))?;
    for s in &q.sets {
        let set = crate::patch::parse_layer_set(s).map_err(|e| SweepError::Invalid(format!("patch.sets: {e}")))?;
        if let Some(&l) = set.iter().find(|&&l| l >= inp.n_layers) {
            return Err(SweepError::Invalid(format!(
                "patch.sets: layer {l} in `{s}` is past the model's depth ({} layers: 0..={})",
                inp.n_layers,
                inp.n_layers - 1
            )));
        }
    }
    let patch_inputs = serde_json::json!({
        "stage": "patch", "trustlens": version, "model_sha256": inp.model_sha256, "cases_sha256": inp.cases_sha256,
        "model": section(&exp.model), "cases": section(&exp.cases), "hook": exp.capture.hook,
        "layers": patch_layers, "patch": section(q),
    });
    let mut patch_args = vec![
        "patch".to_string(),
        exp_arg,
        "--layers".into(),
        patch_layers.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(","),
        "--readout".into(),
        q.readout.clone(),
        "--n-boot".into(),
        q.n_boot.to_string(),
        "--seed".into(),
        q.seed.to_string(),
        "--out".into(),
        figs.clone(),
    ];
    for s in &q.sets {
        patch_args.push("--sets".into());
        patch_args.push(s.clone());
    }
    if let Some(n) = q.max_cases {
        patch_args.push("--max-cases".into());
        patch_args.push(n.to_string());
    }
    if q.random_control {
        patch_args.push("--random-control".into());
    }
    let patch = StagePlan {
        name: "patch".into(),
        key: key_of(&patch_inputs),
        inputs: patch_inputs,
        args: patch_args,
        outputs: vec![dirs.figures.join("patching.csv"), dirs.figures.join("patching.json")],
    };

    let b = &exp.behave;
    let behave_inputs = serde_json::json!({
        "stage": "behave", "trustlens": version, "model_sha256": inp.model_sha256, "cases_sha256": inp.cases_sha256,
        "model": section(&exp.model), "cases": section(&exp.cases), "behave": section(b),
    });
    let mut behave_args = vec![
        "behave".to_string(),
        "run".into(),
        inp.experiment_path.display().to_string(),
        "--run".into(),
        dirs.run.clone(),
        "--out-dir".into(),
        exp.sweep.figures_dir.display().to_string(),
        "--max-new-tokens".into(),
        b.max_new_tokens.to_string(),
        "--batch-size".into(),
        b.batch_size.to_string(),
        "--model-name".into(),
        inp.model_name.clone(),
    ];
    for j in &b.judges {
        behave_args.push("--judge".into());
        behave_args.push(j.clone());
    }
    if let Some(seed) = b.sample_seed {
        behave_args.push("--sample".into());
        behave_args.push(seed.to_string());
    }
    let behave = StagePlan {
        name: "behave".into(),
        key: key_of(&behave_inputs),
        inputs: behave_inputs,
        args: behave_args,
        outputs: vec![dirs.figures.join("behaviour.jsonl"), dirs.figures.join("outcomes.jsonl")],
    };
    let sas_inputs = serde_json::json!({
        "stage": "sas", "trustlens": version, "behave_key": behave.key, "n_boot": b.n_boot,
    });
    let sas = StagePlan {
        name: "sas".into(),
        key: key_of(&sas_inputs),
        inputs: sas_inputs,
        args: vec![
            "sas".into(),
            dirs.figures.join("outcomes.jsonl").display().to_string(),
            "--out".into(),
            figs.clone(),
            "--n-boot".into(),
            b.n_boot.to_string(),
            "--drop-unmatched".into(),
        ],
        outputs: vec![dirs.figures.join("sas.csv"), dirs.figures.join("sas.json")],
    };

    let selected = |s: &str| exp.sweep.stages.iter().any(|x| x == s);
    let figures_inputs = serde_json::json!({
        "stage": "figures", "trustlens": version, "model_name": inp.model_name,
        "probe_key": selected("probe").then(|| probe.key.clone()),
        "patch_key": selected("patch").then(|| patch.key.clone()),
        "sas_key": selected("sas").then(|| sas.key.clone()),
    });
    let figures = StagePlan {
        name: "figures".into(),
        key: key_of(&figures_inputs),
        inputs: figures_inputs,
        args: vec!["plot".into(), figs, "--model".into(), inp.model_name.clone()],
        outputs: Vec::new(),
    };
    Ok(vec![capture, probe, patch, behave, sas, figures])
}

/// The stages whose outputs a stage reads.
pub fn consumes(stage: &str) -> &'static [&'static str] {
    match stage {
        "probe" => &["capture"],
        "sas" => &["behave"],
        "figures" => &["probe", "patch", "sas"],
        _ => &[],
    }
}

/// Stages `[sweep] stages` selects, in pipeline order.
pub fn selected<'a>(exp: &Experiment, plans: &'a [StagePlan]) -> Vec<&'a StagePlan> {
    STAGES
        .iter()
        .filter(|s| exp.sweep.stages.iter().any(|x| x == *s))
        .filter_map(|s| plans.iter().find(|p| p.name == *s))
        .collect()
}

/// An output file and its SHA-256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputFile {
    pub path: PathBuf,
    pub sha256: String,
}

/// What a finished stage leaves in `figures/<run>/.sweep/<stage>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageState {
    pub stage: String,
    pub key: String,
    pub seconds: f64,
    pub finished_unix: u64,
    pub outputs: Vec<OutputFile>,
}

/// Why a stage must run (or `Fresh`).
#[derive(Debug, Clone, PartialEq)]
pub enum Freshness {
    Fresh(StageState),
    NeverRun,
    InputsChanged,
    OutputChanged(PathBuf),
}

impl Freshness {
    pub fn describe(&self) -> String {
        match self {
            Freshness::Fresh(_) => "cached".into(),
            Freshness::NeverRun => "not run yet".into(),
            Freshness::InputsChanged => "inputs changed".into(),
            Freshness::OutputChanged(p) => format!("{} changed or is missing", p.display()),
        }
    }
}

/// Compare a stage's recorded state with its plan.
pub fn freshness(dirs: &RunDirs, plan: &StagePlan) -> Freshness {
    let state: StageState =
        match std::fs::read_to_string(dirs.state_path(&plan.name)).ok().and_then(|t| serde_json::from_str(&t).ok()) {
            Some(s) => s,
            None => return Freshness::NeverRun,
        };
    if state.key != plan.key {
        return Freshness::InputsChanged;
    }
    for o in &state.outputs {
        match sha256_file(&o.path) {
            Ok(s) if s == o.sha256 => {}
            _ => return Freshness::OutputChanged(o.path.clone()),
        }
    }
    Freshness::Fresh(state)
}

/// Record a finished stage: hash its outputs (the plan's, plus `extra`) and write the state file atomically.
pub fn record(dirs: &RunDirs, plan: &StagePlan, extra: &[PathBuf], seconds: f64) -> Result<StageState, SweepError> {
    let mut outputs = Vec::new();
    for p in plan.outputs.iter().chain(extra) {
        if !p.exists() {
            return Err(SweepError::Invalid(format!("stage {} finished but did not write {}", plan.name, p.display())));
        }
        outputs.push(OutputFile { path: p.clone(), sha256: sha256_file(p)? });
    }
    let state = StageState {
        stage: plan.name.clone(),
        key: plan.key.clone(),
        seconds,
        finished_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        outputs,
    };
    let path = dirs.state_path(&plan.name);
    write_atomic(&path, serde_json::to_string_pretty(&state).unwrap_or_default().as_bytes())?;
    Ok(state)
}

/// Forget a stage's state (forces it to run).
pub fn forget(dirs: &RunDirs, stage: &str) -> Result<(), SweepError> {
    let p = dirs.state_path(stage);
    match std::fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SweepError::Io { path: p, source: e }),
    }
}

/// Write `bytes` to `path` through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SweepError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// One stage in the manifest.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestStage {
    pub stage: String,
    pub key: String,
    /// `ran` or `cached`.
    pub status: String,
    /// Wall time of this sweep's run of the stage (0 when cached).
    pub seconds: f64,
    /// Wall time when the cached result was made.
    pub original_seconds: f64,
    pub command: Vec<String>,
    pub inputs: serde_json::Value,
    pub outputs: Vec<OutputFile>,
}

/// `figures/<run>/manifest.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    pub format: &'static str,
    pub trustlens_version: &'static str,
    pub git_commit: Option<String>,
    pub libtorch: String,
    pub created_unix: u64,
    pub experiment_file: PathBuf,
    pub experiment_sha256: String,
    /// The experiment file as written.
    pub experiment_text: String,
    /// The effective configuration (defaults filled in) as TOML.
    pub effective_config: String,
    pub model_path: PathBuf,
    pub model_sha256: String,
    pub cases_file: PathBuf,
    pub cases_sha256: String,
    pub seeds: serde_json::Value,
    pub total_seconds: f64,
    pub stages: Vec<ManifestStage>,
}
