//! Probes per layer: does the residual stream separate adversarial from benign prompts, within a channel and across
//! channels, linearly and non-linearly?
//!
//! For every layer and position of an activation run, and for every training set (each channel alone, and all
//! channels pooled), grouped k-fold cross-validation over cases (a case's channels and conditions never straddle train
//! and test) fits three probes on the training fold and scores the held-out cases in every channel:
//!
//! * `logistic`: l2 logistic regression on features standardised with training-fold statistics only; exact Newton
//!   solve in the dual ([`solver::fit_dual_logistic`]), the objective of `linfa-logistic` and of scikit-learn with
//!   `C = 1/alpha`. C is fixed or chosen per outer fold by inner grouped CV (held-out log-loss) over a grid.
//! * `diffmeans`: the difference-of-means direction, thresholded halfway between the projected class means.
//! * `rbf`: kernel logistic regression with an RBF kernel (`gamma = 1/d` on standardised features, scikit-learn's
//!   `"scale"`), the non-linear probe, on the same folds and with C chosen the same way.
//!
//! Metrics per (layer, position, method, train set, test channel): accuracy and AUROC on the out-of-fold predictions
//! of all held-out cases, with bootstrap percentile CIs over cases, per-fold values, and (for `logistic` and
//! `diffmeans` trained on a single channel) a label-permutation p-value of the AUROC: labels are permuted within cases
//! and the whole CV rerun with each fold's selected C. Jobs run in parallel over layers x positions x train sets x folds (rayon); every random choice is
//! seeded, so results do not depend on the thread count.
pub mod data;
pub mod linalg;
pub mod report;
pub mod solver;
pub mod sweep;

pub use data::{ProbeData, RowInfo};
pub use report::{CellResult, FoldResult, ProbeReport};
pub use sweep::{run_probes, CChoice, Method, ProbeConfig};

/// Errors of the probe library. Messages name the layer, position, fold or case involved.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Bad configuration (fold count, C grid, layer selection, ...).
    #[error("{0}")]
    Config(String),
    /// A requested layer or position is not in the run.
    #[error("layer {layer} position '{position}' is not in the activation run (it has layers {available:?})")]
    MissingLayer { layer: usize, position: String, available: Vec<usize> },
    /// NaN or infinite activation.
    #[error(
        "non-finite activation ({value}) at layer {layer} position '{position}', row {row} (case '{case_id}', channel \
         '{channel}', {condition}), dimension {dim}"
    )]
    NonFinite {
        layer: usize,
        position: String,
        row: usize,
        case_id: String,
        channel: String,
        condition: &'static str,
        dim: usize,
        value: f32,
    },
    /// A training or test set holds only one class.
    #[error("{what} hold only one class")]
    OneClass { what: String },
    /// Shape disagreement between matrices and row metadata.
    #[error("{0}")]
    Shape(String),
    /// Fold construction failed.
    #[error(transparent)]
    Stats(#[from] crate::stats::StatsError),
    /// The solver failed.
    #[error("solver: {0}")]
    Numerical(String),
    /// Writing outputs failed.
    #[error("{path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
}
