//! Safety Asymmetry Score: ASR per channel, SAS per model and family with paired bootstrap CIs, group dSAS, channel
//! trust hierarchy and rank agreement. See `docs/outcomes.md` for the outcome schema and the counting rules.
use std::path::PathBuf;

pub mod outcome;

pub use outcome::{
    class_counts, cohen_kappa, parse_outcomes, read_outcomes, read_outcomes_located, write_outcomes, LocatedRow,
    Outcome, OutcomeRow, RowLocation, RowProblem,
};

/// Everything that can go wrong reading outcomes and computing the SAS statistics.
#[derive(Debug, thiserror::Error)]
pub enum SasError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// One or more lines of an outcome file are bad; every problem is listed.
    #[error("{} bad line(s) in {path}: {}", problems.len(), problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Parse {
        /// The file.
        path: PathBuf,
        /// One entry per bad line.
        problems: Vec<RowProblem>,
    },
}
