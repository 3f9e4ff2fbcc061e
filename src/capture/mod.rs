//! The capture driver behind `trustlens capture`: render every case x channel x condition, run length-bucketed
//! left-padded batches with early exit after the deepest requested layer, and store the hook's value at the
//! requested token positions into `activations/<run>/activations.h5`.
//!
//! # Crash safety and resume
//! Finished batches go to an fsync'd journal ([`crate::activations::journal`]); the `.h5` is rebuilt from it into a
//! temporary file and renamed into place at start, every `checkpoint_secs` and at the end (then the journal is
//! deleted). A run killed at any moment leaves a readable `.h5` (the last checkpoint, `complete = false`) and a
//! journal; running the same command again keeps every intact journal record and computes only the missing batches.
//!
//! Batches are fixed by the prompt set and the batch size alone: local prompts are sorted by (token count, index)
//! and cut into chunks of `batch_size`; batch `b` always holds the same prompts, and a resumed run recomputes exactly
//! the batches that are missing. Every row is therefore computed in the same batch as in an uninterrupted run, and
//! the final file is bitwise identical (f32 on CPU). Rows are stored in prompt order whatever the batch order.
//! (On CUDA out-of-memory a batch is split in halves; that changes padding and so values by float noise only.)
use indicatif::{ProgressBar, ProgressStyle};
use ndarray::Array2;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tch::{Device, Kind, Tensor};

use crate::activations::journal::{Journal, JournalHeader, JournalRecord, JournalRow};
use crate::activations::{self, ActivationFile, ActivationsError, Contents, RowMeta, RunAttrs};
use crate::cases::io::load_cases_lenient;
use crate::cases::render::{render_case, Channel, Condition, RenderOptions, ToolRendering};
use crate::cases::validate::{validate_set, RenderCheck};
use crate::experiment::{Experiment, ExperimentError};
use crate::model::{Batch, DType, HookPoint, HookSpec, Llama, ModelError, ModelSource, Positions};
use crate::prompt::PromptAssets;

/// Everything that can stop a capture. One line each.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Activations(#[from] ActivationsError),
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Cases(String),
    #[error("{0}")]
    Refused(String),
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> CaptureError + '_ {
    move |source| CaptureError::Io { path: path.to_path_buf(), source }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct CaptureRequest {
    /// The experiment (command-line overrides already applied).
    pub experiment: Experiment,
    /// The experiment file (its stem names the run when `capture.run` is not set).
    pub origin: PathBuf,
    /// `(K, N)`: capture the prompts whose index is `K-1` modulo `N`.
    pub shard: Option<(usize, usize)>,
    /// Delete whatever the run directory holds and start afresh (otherwise a run of another configuration is refused).
    pub overwrite: bool,
    /// Replace a run made with another model or configuration instead of refusing it (a run of this configuration
    /// is still resumed or kept). `trustlens sweep` uses this: its cache already knows the inputs changed.
    pub replace_stale: bool,
    /// Intra-op threads (None: libtorch's default).
    pub threads: Option<i32>,
    /// Seconds between `.h5` checkpoints (0: after every batch).
    pub checkpoint_secs: f64,
    /// Sleep after each batch (testing aid for kill/resume).
    pub pause_ms: u64,
    /// Draw a progress bar on stderr (hidden when stderr is not a terminal).
    pub progress: bool,
}

/// What a capture did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaptureReport {
    pub path: PathBuf,
    /// Rows in the file.
    pub rows: usize,
    /// Rows recovered from the journal of an earlier, interrupted run.
    pub resumed_rows: usize,
    /// Rows computed by this process.
    pub computed_rows: usize,
    /// True when the run was already complete and nothing was done.
    pub already_complete: bool,
    /// Seconds in forward passes (including the copy to CPU and the journal write).
    pub forward_seconds: f64,
    pub total_seconds: f64,
    /// Peak resident memory of this process (VmHWM).
    pub peak_rss_bytes: u64,
    /// Bytes of the model's weights in the compute dtype.
    pub weight_bytes: u64,
    pub device: String,
    pub batches: usize,
}

/// One rendered prompt.
#[derive(Debug, Clone)]
pub struct Prompt {
    /// Index in the full prompt list (cases x channels x conditions).
    pub index: usize,
    pub meta: RowMeta,
    pub ids: Vec<u32>,
    /// Token index of each requested position, in the experiment's position order.
    pub positions: Vec<u32>,
}

/// The prompts of a run and their batches.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Prompts of this shard, in prompt order.
    pub prompts: Vec<Prompt>,
    /// Prompts in the whole (unsharded) run.
    pub n_total: usize,
    /// Local prompt indices per batch (fixed by the prompt lengths and the batch size).
    pub batches: Vec<Vec<usize>>,
    pub tool_rendering: String,
    pub cases_sha256: String,
    pub chat_template_sha256: String,
    pub pad_id: u32,
}

/// Cut prompts into batches: sort by (length, index), chunks of `batch_size`. Deterministic.
///
/// `lengths[i]` is prompt i's token count; returns local indices per batch.
pub fn plan_batches(lengths: &[usize], batch_size: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| (lengths[i], i));
    order.chunks(batch_size.max(1)).map(|c| c.to_vec()).collect()
}

fn sha256_file(path: &Path) -> Result<String, CaptureError> {
    crate::sha256_file(path).map_err(io_err(path))
}

/// SHA-256 of a model's weight file(s): `hex` for one file, `name:hex;...` for several.
pub fn model_sha256(src: &ModelSource) -> Result<String, CaptureError> {
    match src {
        ModelSource::Gguf(p) => sha256_file(p),
        ModelSource::HfDir(dir) => {
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(io_err(dir))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
                .collect();
            files.sort();
            if files.len() == 1 {
                return sha256_file(&files[0]);
            }
            use rayon::prelude::*;
            let parts: Result<Vec<String>, CaptureError> = files
                .par_iter()
                .map(|p| Ok(format!("{}:{}", p.file_name().unwrap().to_string_lossy(), sha256_file(p)?)))
                .collect();
            Ok(parts?.join(";"))
        }
    }
}

/// Render every prompt of the experiment (validating the case file first) and plan the batches for `shard`.
pub fn prepare(exp: &Experiment, assets: &PromptAssets, shard: Option<(usize, usize)>) -> Result<Plan, CaptureError> {
    let file = &exp.cases.file;
    let (cases, problems) = load_cases_lenient(file).map_err(|e| CaptureError::Cases(e.to_string()))?;
    if !problems.is_empty() {
        return Err(CaptureError::Cases(format!(
            "{}: {} line(s) could not be read; first: {}",
            file.display(),
            problems.len(),
            problems[0]
        )));
    }
    if cases.is_empty() {
        return Err(CaptureError::Cases(format!("{}: no cases", file.display())));
    }
    // `[cases] max_per_family`: the first N cases of each family, in file order.
    let cases = match exp.cases.max_per_family {
        Some(n) => {
            let mut seen: std::collections::BTreeMap<crate::cases::Family, usize> = Default::default();
            cases
                .into_iter()
                .filter(|c| {
                    let k = seen.entry(c.case.family).or_default();
                    *k += 1;
                    *k <= n
                })
                .collect()
        }
        None => cases,
    };
    let template = assets.template.as_ref().ok_or_else(|| {
        CaptureError::Cases(
            "the model has no chat template; cases are rendered through the model's own template".into(),
        )
    })?;
    let tool_rendering = match exp.cases.tool_rendering.as_str() {
        "native" => ToolRendering::Native,
        "hermes" => ToolRendering::Hermes,
        _ if template.supports_tools() => ToolRendering::Native,
        _ => ToolRendering::Hermes,
    };
    let opts = RenderOptions::with_tool_rendering(tool_rendering);
    let report = validate_set(&cases, RenderCheck::from_assets(assets, &opts));
    if !report.is_ok() {
        return Err(CaptureError::Cases(format!(
            "{}: fails validation ({} problem(s) in {} case(s); first: {}); see `trustlens cases validate`",
            file.display(),
            report.problems.len(),
            report.failing_cases().len(),
            report.problems[0]
        )));
    }
    let channels: Vec<Channel> = exp.cases.channels.iter().map(|c| Channel::parse(c).expect("checked")).collect();
    let conditions: Vec<Condition> =
        exp.cases.conditions.iter().map(|c| Condition::parse(c).expect("checked")).collect();
    let mut prompts = Vec::new();
    let mut index = 0usize;
    for lc in &cases {
        let case = &lc.case;
        for &ch in &channels {
            for &cond in &conditions {
                let i = index;
                index += 1;
                if let Some((k, n)) = shard {
                    if i % n != k - 1 {
                        continue;
                    }
                }
                let r = render_case(case, ch, cond, assets, &opts).map_err(|e| CaptureError::Cases(e.to_string()))?;
                let n_tokens = r.token_ids.len();
                let last = n_tokens - 1;
                let mut positions = Vec::new();
                for p in &exp.capture.positions {
                    let idx = match p.as_str() {
                        "last" => last,
                        "payload_last" => r.payload_token_span.end - 1,
                        "user_end" => {
                            let end_byte = match ch {
                                Channel::Chat | Channel::ChatTools => r.payload_byte_span.end,
                                Channel::Tool => {
                                    r.text.find(case.user_task.as_str()).map(|s| s + case.user_task.len()).ok_or_else(
                                        || {
                                            CaptureError::Cases(format!(
                                                "case {}: cannot find the user message in the {ch} prompt",
                                                case.id
                                            ))
                                        },
                                    )?
                                }
                            };
                            r.token_offsets.iter().rposition(|&(s, _)| s < end_byte).unwrap_or(0)
                        }
                        other => return Err(CaptureError::Cases(format!("unknown position `{other}`"))),
                    };
                    positions.push(idx as u32);
                }
                prompts.push(Prompt {
                    index: i,
                    meta: RowMeta {
                        case_id: case.id.clone(),
                        family: case.family.as_str().to_string(),
                        subtype: case.subtype.map(|s| s.as_str().to_string()),
                        channel: ch.as_str().to_string(),
                        condition: cond.as_str().to_string(),
                        n_tokens,
                        last_index: last,
                    },
                    ids: r.token_ids,
                    positions,
                });
            }
        }
    }
    if prompts.is_empty() {
        return Err(CaptureError::Refused("this shard holds no prompts".into()));
    }
    let lengths: Vec<usize> = prompts.iter().map(|p| p.ids.len()).collect();
    let batches = plan_batches(&lengths, exp.capture.batch_size);
    let cases_sha256 = sha256_file(file)?;
    let tok = &assets.tokenizer;
    let pad_id = tok.pad_id().or_else(|| tok.eos_ids().first().copied()).unwrap_or(0);
    Ok(Plan {
        prompts,
        n_total: index,
        batches,
        tool_rendering: tool_rendering.as_str().to_string(),
        cases_sha256,
        chat_template_sha256: template.sha256(),
        pad_id,
    })
}

/// Where a run's files go: `<out_dir>/<run>/` (plus `shard-K-of-N/` for a shard).
pub fn run_dir(exp: &Experiment, origin: &Path, shard: Option<(usize, usize)>) -> PathBuf {
    let mut d = exp.capture.out_dir.join(exp.run_name(origin));
    if let Some((k, n)) = shard {
        d = d.join(format!("shard-{k}-of-{n}"));
    }
    d
}

fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).map(|kb| kb * 1024))
        })
        .unwrap_or(0)
}

struct Lock {
    _file: std::fs::File,
}

fn lock_dir(dir: &Path) -> Result<Lock, CaptureError> {
    let path = dir.join(".lock");
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).map_err(io_err(&path))?;
    // SAFETY: flock on a file descriptor we own.
    let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(CaptureError::Refused(format!(
            "{}: another capture is running in this run directory",
            dir.display()
        )));
    }
    Ok(Lock { _file: f })
}

/// Run (or resume) a capture. See the module docs for the guarantees.
pub fn run(req: &CaptureRequest) -> Result<CaptureReport, CaptureError> {
    let t0 = Instant::now();
    let exp = &req.experiment;
    exp.check().map_err(|m| ExperimentError::Invalid(format!("{}: {m}", req.origin.display())))?;
    let dtype: DType = exp.model.dtype.parse().map_err(ExperimentError::Invalid)?;
    if let Some((k, n)) = req.shard {
        if k == 0 || k > n {
            return Err(CaptureError::Refused(format!("--shard {k}/{n}: K must be in 1..=N")));
        }
    }
    // Output directory first: fail fast on an unwritable path, before any heavy work.
    let dir = run_dir(exp, &req.origin, req.shard);
    std::fs::create_dir_all(&dir).map_err(|source| CaptureError::Io { path: dir.clone(), source })?;
    let _lock = lock_dir(&dir)?;
    let h5_path = dir.join("activations.h5");
    let journal_path = dir.join("capture.journal");

    // Model config (cheap) for the layer check, then prompts.
    let src = ModelSource::resolve(&exp.model.path)?;
    let (cfg, store) = src.open()?;
    let n_layers = cfg.num_hidden_layers;
    let d_model = cfg.hidden_size;
    let layers = exp.capture.layers.resolve(n_layers)?;
    let hooks: Vec<HookPoint> = layers
        .iter()
        .map(|l| format!("blocks.{l}.{}", exp.capture.hook).parse::<HookPoint>())
        .collect::<Result<_, _>>()
        .map_err(ExperimentError::Invalid)?;
    let assets = PromptAssets::load(&exp.model.path).map_err(|e| CaptureError::Cases(e.to_string()))?;
    let plan = prepare(exp, &assets, req.shard)?;
    let model_sha = model_sha256(&src)?;

    // Fingerprints: config (what determines the numbers) and run (plus what determines the batches).
    let positions = exp.capture.positions.clone();
    let config_json = serde_json::json!({
        "model_sha256": model_sha, "dtype": dtype.name(), "cases_sha256": plan.cases_sha256,
        "channels": exp.cases.channels, "conditions": exp.cases.conditions, "tool_rendering": plan.tool_rendering,
        "chat_template_sha256": plan.chat_template_sha256, "layers": layers, "hook": exp.capture.hook,
        "positions": positions, "store": exp.capture.store, "n_prompts_total": plan.n_total,
    });
    let config_sha = hex::encode(Sha256::digest(config_json.to_string().as_bytes()));
    let shard_str = req.shard.map(|(k, n)| format!("{k}/{n}")).unwrap_or_else(|| "all".into());
    // One device (`device`), or the blocks split over `devices` by memory.
    let placement = exp.model.device_choice().plan(&cfg, dtype)?;
    let device_name = placement.short();
    let device_kind = if placement.uses_cuda() { "cuda" } else { "cpu" };
    let run_fp = format!("{config_sha}:{shard_str}:batch{}:{device_kind}", exp.capture.batch_size);

    let attrs = RunAttrs {
        model_path: exp.model.path.display().to_string(),
        model_sha256: model_sha.clone(),
        dtype: dtype.name().into(),
        device: device_name.clone(),
        chat_template_sha256: plan.chat_template_sha256.clone(),
        hook_point: exp.capture.hook.clone(),
        trustlens_version: env!("CARGO_PKG_VERSION").into(),
        experiment_config: exp.to_toml(),
        config_sha256: config_sha.clone(),
        cases_file: exp.cases.file.display().to_string(),
        cases_sha256: plan.cases_sha256.clone(),
        tool_rendering: if exp.cases.channels.iter().any(|c| c != "chat") {
            plan.tool_rendering.clone()
        } else {
            "none".into()
        },
        store_dtype: exp.capture.store.clone(),
        shard: shard_str.clone(),
        n_prompts_total: plan.n_total,
        complete: false,
        d_model,
        n_layers_model: n_layers,
    };

    let mut report = CaptureReport {
        path: h5_path.clone(),
        rows: 0,
        resumed_rows: 0,
        computed_rows: 0,
        already_complete: false,
        forward_seconds: 0.0,
        total_seconds: 0.0,
        peak_rss_bytes: 0,
        weight_bytes: 0,
        device: device_name.clone(),
        batches: plan.batches.len(),
    };

    // An existing run: finished, resumable, or made differently.
    let overwrite_hint = "pass --overwrite to replace it, or choose another run name (--run)";
    let stale = |h5_path: &Path, journal_path: &Path| -> Result<bool, CaptureError> {
        if let Ok(f) = ActivationFile::open(h5_path) {
            if f.attrs.config_sha256 != config_sha || f.attrs.shard != shard_str {
                return Ok(true);
            }
        }
        if let Ok(Some((j, _))) = Journal::open(journal_path) {
            return Ok(!j.header().run_fingerprint.eq(&run_fp));
        }
        Ok(false)
    };
    if req.overwrite || (req.replace_stale && stale(&h5_path, &journal_path)?) {
        // Start afresh, whatever is there.
        for p in [&h5_path, &journal_path] {
            if p.exists() {
                std::fs::remove_file(p).map_err(io_err(p))?;
            }
        }
    }
    if h5_path.exists() {
        match ActivationFile::open(&h5_path) {
            Ok(f) if f.attrs.config_sha256 == config_sha && f.attrs.shard == shard_str => {
                if f.attrs.complete {
                    let _ = std::fs::remove_file(&journal_path);
                    report.rows = f.rows.len();
                    report.already_complete = true;
                    report.total_seconds = t0.elapsed().as_secs_f64();
                    return Ok(report);
                }
            }
            Ok(f) => {
                return Err(CaptureError::Refused(format!(
                    "{}: an existing run made with a different model or configuration (model {} vs {}, config {} vs {}, shard {} vs {}); {overwrite_hint}",
                    h5_path.display(),
                    &f.attrs.model_sha256[..f.attrs.model_sha256.len().min(12)],
                    &model_sha[..model_sha.len().min(12)],
                    &f.attrs.config_sha256[..f.attrs.config_sha256.len().min(12)],
                    &config_sha[..12],
                    f.attrs.shard,
                    shard_str
                )))
            }
            Err(e) => {
                return Err(CaptureError::Refused(format!("existing run file is unreadable ({e}); {overwrite_hint}")))
            }
        }
    }
    let n_pos = positions.len();
    let per_row = layers.len() * n_pos * d_model;
    let header = JournalHeader {
        run_fingerprint: run_fp.clone(),
        n_prompts: plan.prompts.len(),
        n_positions: n_pos,
        values_per_row: per_row,
    };
    let mut done_batches: BTreeSet<u32> = BTreeSet::new();
    let mut rows: Vec<Option<JournalRow>> = vec![None; plan.prompts.len()];
    let mut journal = None;
    if journal_path.exists() {
        if let Some((j, records)) = Journal::open(&journal_path)? {
            if j.header() != &header {
                return Err(CaptureError::Refused(format!(
                    "{}: an unfinished run made with a different model, configuration, shard, batch size or device; {overwrite_hint}",
                    journal_path.display()
                )));
            } else {
                for rec in records {
                    let ok = (rec.batch as usize) < plan.batches.len()
                        && rec.rows.len() == plan.batches[rec.batch as usize].len()
                        && rec.rows.iter().zip(&plan.batches[rec.batch as usize]).all(|(r, &i)| r.prompt as usize == i);
                    if !ok {
                        return Err(CaptureError::Refused(format!(
                            "{}: journal does not match this run's batches; {overwrite_hint}",
                            journal_path.display()
                        )));
                    }
                    done_batches.insert(rec.batch);
                    for r in rec.rows {
                        let i = r.prompt as usize;
                        rows[i] = Some(r);
                    }
                }
                journal = Some(j);
            }
        }
    }
    let mut journal = match journal {
        Some(j) => j,
        None => Journal::create(&journal_path, header)?,
    };
    report.resumed_rows = rows.iter().filter(|r| r.is_some()).count();

    let layers_c = layers.clone();
    let positions_c = positions.clone();
    let contents = |rows: &[Option<JournalRow>], complete: bool| -> Contents {
        let done: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].is_some()).collect();
        let mut data = vec![Array2::<f32>::zeros((done.len(), d_model)); layers_c.len() * n_pos];
        for (out_i, &i) in done.iter().enumerate() {
            let vals = &rows[i].as_ref().unwrap().values;
            for (a, arr) in data.iter_mut().enumerate() {
                let src = &vals[a * d_model..(a + 1) * d_model];
                arr.row_mut(out_i).assign(&ndarray::ArrayView1::from(src));
            }
        }
        let mut attrs = attrs.clone();
        attrs.complete = complete;
        Contents {
            attrs,
            layers: layers_c.clone(),
            positions: positions_c.clone(),
            rows: done.iter().map(|&i| plan.prompts[i].meta.clone()).collect(),
            prompt_index: done.iter().map(|&i| plan.prompts[i].index as u64).collect(),
            position_index: (0..n_pos)
                .map(|p| done.iter().map(|&i| rows[i].as_ref().unwrap().positions[p]).collect())
                .collect(),
            data,
        }
    };
    // First checkpoint before any computation: from here on there is always a readable file.
    activations::write_atomic(&h5_path, &contents(&rows, false))?;

    // Load the model (reusing the opened weight store).
    if let Some(t) = req.threads.filter(|&t| t > 0) {
        tch::set_num_threads(t);
    }
    let llama = Llama::load_placed(cfg, &store, dtype.kind(), &placement.block_devices, placement.head_device)?;
    drop(store);
    report.weight_bytes = (llama.n_params() * dtype_bytes(dtype)) as u64;

    let todo: Vec<usize> = (0..plan.batches.len()).filter(|b| !done_batches.contains(&(*b as u32))).collect();
    let total = plan.prompts.len() as u64;
    let pb = if req.progress { ProgressBar::new(total) } else { ProgressBar::hidden() };
    pb.set_style(
        ProgressStyle::with_template(
            "{spinner} {elapsed_precise} [{bar:32}] {pos}/{len} prompts  {per_sec}  ETA {eta}  {msg}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    pb.set_position(report.resumed_rows as u64);
    pb.reset_eta();
    let mut last_ckpt = Instant::now();
    let mut max_batch = exp.capture.batch_size;
    for (n_done, &b) in todo.iter().enumerate() {
        let tf = Instant::now();
        let members = &plan.batches[b];
        let mut values: Vec<Vec<f32>> = Vec::with_capacity(members.len());
        let mut start = 0;
        while start < members.len() {
            let end = (start + max_batch).min(members.len());
            let chunk: Vec<&Prompt> = members[start..end].iter().map(|&i| &plan.prompts[i]).collect();
            match forward_chunk(&llama, &chunk, &hooks, plan.pad_id, d_model) {
                Ok(v) => {
                    values.extend(v);
                    start = end;
                }
                Err(ChunkError::Oom(msg)) => {
                    if chunk.len() == 1 {
                        return Err(CaptureError::Refused(format!(
                            "out of memory with a single prompt of {} tokens ({msg}); finished work is kept, re-run on a bigger device",
                            chunk[0].ids.len()
                        )));
                    }
                    max_batch = (chunk.len() / 2).max(1);
                    pb.set_message(format!("out of memory: batch size now {max_batch}"));
                }
                Err(ChunkError::Model(e)) => return Err(e.into()),
            }
        }
        let rec = JournalRecord {
            batch: b as u32,
            rows: members
                .iter()
                .zip(values)
                .map(|(&i, v)| JournalRow {
                    prompt: i as u32,
                    n_tokens: plan.prompts[i].ids.len() as u32,
                    positions: plan.prompts[i].positions.clone(),
                    values: v,
                })
                .collect(),
        };
        journal.append(&rec)?;
        for r in rec.rows {
            let i = r.prompt as usize;
            rows[i] = Some(r);
        }
        report.computed_rows += members.len();
        report.forward_seconds += tf.elapsed().as_secs_f64();
        pb.inc(members.len() as u64);
        let last = n_done + 1 == todo.len();
        if !last && last_ckpt.elapsed().as_secs_f64() >= req.checkpoint_secs {
            activations::write_atomic(&h5_path, &contents(&rows, false))?;
            last_ckpt = Instant::now();
        }
        if req.pause_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(req.pause_ms));
        }
    }
    pb.finish_and_clear();
    debug_assert!(rows.iter().all(|r| r.is_some()));
    activations::write_atomic(&h5_path, &contents(&rows, true))?;
    drop(journal);
    std::fs::remove_file(&journal_path).map_err(io_err(&journal_path))?;
    activations::journal::sync_dir(&journal_path);
    report.rows = rows.len();
    report.total_seconds = t0.elapsed().as_secs_f64();
    report.peak_rss_bytes = peak_rss_bytes();
    Ok(report)
}

fn dtype_bytes(d: DType) -> usize {
    match d {
        DType::F32 => 4,
        DType::F16 | DType::BF16 => 2,
    }
}

enum ChunkError {
    Oom(String),
    Model(ModelError),
}

/// One forward pass over `chunk`; returns per prompt `[layers, positions, d_model]` f32 values, flattened.
fn forward_chunk(
    llama: &Llama,
    chunk: &[&Prompt],
    hooks: &[HookPoint],
    pad_id: u32,
    d_model: usize,
) -> Result<Vec<Vec<f32>>, ChunkError> {
    // Test seam: `TRUSTLENS_FAULT_OOM_ABOVE=N` makes every chunk of more than N prompts fail as CUDA out-of-memory
    // would, so the batch-halving path is exercised on machines without a GPU (tests/capture_e2e.rs).
    if let Some(limit) = std::env::var("TRUSTLENS_FAULT_OOM_ABOVE").ok().and_then(|v| v.parse::<usize>().ok()) {
        if chunk.len() > limit {
            return Err(ChunkError::Oom(format!("CUDA out of memory (simulated above {limit} prompts)")));
        }
    }
    let seqs: Vec<Vec<u32>> = chunk.iter().map(|p| p.ids.clone()).collect();
    let batch = Batch::left_padded(&seqs, pad_id).map_err(ChunkError::Model)?;
    let many: Vec<Vec<i64>> = chunk.iter().map(|p| p.positions.iter().map(|&x| x as i64).collect()).collect();
    let mut spec = HookSpec::new();
    for &h in hooks {
        spec = spec.capture(h, Positions::Many(many.clone()));
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<Vec<Tensor>, ModelError> {
        let mut out = llama.forward(&batch, &spec)?;
        // [batch, k, d] per hook, f32 on the CPU.
        Ok(hooks
            .iter()
            .map(|&h| out.cache.take(h).expect("captured").to_kind(Kind::Float).to_device(Device::Cpu).contiguous())
            .collect())
    }));
    let tensors = match result {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            let msg = e.to_string();
            if is_oom(&msg) {
                return Err(ChunkError::Oom(msg));
            }
            return Err(ChunkError::Model(e));
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            if is_oom(&msg) {
                return Err(ChunkError::Oom(msg.lines().next().unwrap_or("").to_string()));
            }
            std::panic::resume_unwind(panic);
        }
    };
    let k = chunk[0].positions.len();
    let flat: Vec<Vec<f32>> =
        tensors.iter().map(|t| Vec::<f32>::try_from(t.flatten(0, -1)).expect("f32 tensor")).collect();
    let per = k * d_model;
    Ok((0..chunk.len())
        .map(|r| {
            let mut v = Vec::with_capacity(hooks.len() * per);
            for f in &flat {
                v.extend_from_slice(&f[r * per..(r + 1) * per]);
            }
            v
        })
        .collect())
}

fn is_oom(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("out of memory") || m.contains("cuda_error_out_of_memory")
}
