//! Final-action risk scoring under untrusted tool feedback, after "Trust No Tool" (`../shared/papers/`).
//!
//! A tool behaves well while an agent explores it and turns harmful only when the final call meets a hidden trigger.
//! This module loads TRUST-BENCH episodes (`trustbench_clean_episode_v1`, [`schema`]), generates synthetic ones with
//! the paper's construction ([`generate`]), abstracts each into the paper's triplet (trajectory state, final-action
//! parameters, label; [`triplet`]), scores the final action with baselines, a language model's label suffix and
//! residual-stream probes ([`scorers`], [`lm`]), and judges every scorer with GuardedJoint under grouped 5-fold
//! cross-validation with train-fold-only threshold calibration ([`metrics`], [`eval`]).
//!
//! `docs/guard.md` documents the schema, every formula and the protocol.
pub mod eval;
pub mod generate;
pub mod lm;
pub mod metrics;
pub mod schema;
pub mod scorers;
pub mod triplet;

pub use schema::{load_episodes, Episode};
pub use triplet::Triplet;

/// Errors of the guard library. Messages name the file, record, field, pair, fold or scorer involved.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io { path: std::path::PathBuf, source: std::io::Error },
    /// A record is not valid JSON.
    #[error("{file}: {record}: not valid JSON: {message}")]
    Json { file: String, record: String, message: String },
    /// A record lacks a field or has one of the wrong type.
    #[error("{file}: {record}: field `{field}` {problem}")]
    Field { file: String, record: String, field: String, problem: String },
    /// The episode set as a whole is unusable (duplicate ids, a pair with one side, empty file, ...).
    #[error("{0}")]
    Dataset(String),
    /// A cross-validation fold cannot be evaluated.
    #[error("{0}")]
    Fold(String),
    /// Bad settings.
    #[error("{0}")]
    Config(String),
    /// A scorer failed.
    #[error("scorer {scorer}: {message}")]
    Scorer { scorer: String, message: String },
    /// The model failed.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// Tokenizer or chat template failed.
    #[error(transparent)]
    Prompt(#[from] crate::prompt::PromptError),
    /// Fold construction failed.
    #[error(transparent)]
    Stats(#[from] crate::stats::StatsError),
}

/// Write `bytes` to `path` atomically (temporary file in the same folder, then rename).
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<(), GuardError> {
    let io = |source| GuardError::Io { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "out".into());
    let tmp = path.with_file_name(format!(".{name}.tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}
