//! Safety Asymmetry Score: ASR per channel, SAS per model and family with paired bootstrap CIs, group means and dSAS,
//! the per-model channel trust hierarchy and rank agreement with an external benchmark. See `docs/outcomes.md` for
//! the outcome schema and the counting and resampling rules.
//!
//! - [`outcome`]: the six-class [`Outcome`], [`OutcomeRow`] (one JSONL line), reading/writing, Cohen's kappa.
//! - [`compute`]: matched cases, ASR/SAS cells with the paired bootstrap, hierarchy, groups and dSAS.
//! - [`rank`]: Spearman's rho with average ranks and the `model,asr` reference reader.
//! - [`report`]: the whole result, `sas.csv`, `sas.json` and the text table.
use std::path::PathBuf;

pub mod compute;
pub mod outcome;
pub mod rank;
pub mod report;

pub use compute::{
    compute, groups, paired_bootstrap, parse_group, Cell, DeltaSas, FamilySlice, GroupReport, GroupSpec, MatchedCase,
    ModelReport, SasConfig,
};
pub use outcome::{
    class_counts, cohen_kappa, parse_outcomes, read_outcomes, read_outcomes_located, write_outcomes, LocatedRow,
    Outcome, OutcomeRow, RowLocation, RowProblem,
};
pub use rank::{average_ranks, rank_agreement, read_reference, spearman, RankAgreement};
pub use report::{build_report, ReportOptions, SasReport, CSV_HEADER};

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
    /// The same (model, case, channel, condition) appears twice.
    #[error("duplicate outcome row for {what}: {first} and {second}")]
    Duplicate {
        /// The repeated key.
        what: String,
        /// First occurrence.
        first: RowLocation,
        /// Second occurrence.
        second: RowLocation,
    },
    /// Two rows of one case disagree on family or subtype.
    #[error("model {model:?} case {case_id:?}: {field} is {} at {} but {} at {}", first.0, first.1, second.0, second.1)]
    Inconsistent {
        /// Model.
        model: String,
        /// Case.
        case_id: String,
        /// `family` or `subtype`.
        field: &'static str,
        /// Value and location of the first row.
        first: Box<(String, RowLocation)>,
        /// Value and location of the conflicting row.
        second: Box<(String, RowLocation)>,
    },
    /// Cases without both a chat and a tool row.
    #[error(
        "{} case(s) are not matched between channels (SAS needs an adversarial row in both chat and tool; \
         pass --drop-unmatched to drop them with a warning): {}",
        problems.len(), problems.join("; ")
    )]
    Unmatched {
        /// One entry per unmatched case, naming model, case id and the rows present.
        problems: Vec<String>,
    },
    /// Nothing to compute.
    #[error("{0}")]
    NoData(String),
    /// A bad setting.
    #[error("{0}")]
    Config(String),
    /// A malformed or inconsistent group definition.
    #[error("{0}")]
    Group(String),
    /// A group without models.
    #[error("group {name:?} has no models (--group {spec:?}); write --group {name}=MODEL,MODEL,...")]
    EmptyGroup {
        /// Group name.
        name: String,
        /// The spec as given.
        spec: String,
    },
    /// A group names a model without outcomes.
    #[error("group {group:?} names model {model:?}, which has no matched outcomes; models present: {}", available.join(", "))]
    UnknownModel {
        /// Group name.
        group: String,
        /// The unknown model.
        model: String,
        /// Models with results.
        available: Vec<String>,
    },
    /// A bad reference table (line 0 = the file as a whole).
    #[error("{}{}: {message}", path.display(), if *line > 0 { format!(":{line}") } else { String::new() })]
    Reference {
        /// The reference file.
        path: PathBuf,
        /// 1-based line, 0 for the whole file.
        line: usize,
        /// What is wrong.
        message: String,
    },
}
