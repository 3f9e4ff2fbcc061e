//! Errors of the case library.
use std::path::PathBuf;

/// Everything that can go wrong when loading, rendering, importing or generating cases.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// One or more lines of a case file did not parse; every problem is listed.
    #[error("{} line(s) of {path} could not be read: {}", problems.len(), problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Parse {
        /// The file (or `<input>`).
        path: String,
        /// One entry per bad line.
        problems: Vec<LineProblem>,
    },
    /// The model's chat template cannot render tools natively and no fallback was chosen.
    #[error(
        "case {case}: the chat template has no native tool support and no fallback was chosen \
         (set ToolRendering::Hermes, or pass --tool-rendering hermes)"
    )]
    NoToolSupport {
        /// The case being rendered.
        case: String,
    },
    /// The model has no chat template at all.
    #[error("the model has no chat template; cases are rendered through the model's own template")]
    NoTemplate,
    /// The template or tokenizer failed.
    #[error("case {case}: {stage}: {message}")]
    Prompt {
        /// The case being rendered.
        case: String,
        /// `template`, `tokenizer`, ...
        stage: &'static str,
        /// The underlying message.
        message: String,
    },
    /// The payload is not where it must be in a rendering (not exactly once, not byte-identical, changed by
    /// tokenisation, ...).
    #[error("case {case} [{channel}/{condition}]: {reason}")]
    Placement {
        /// The case.
        case: String,
        /// Channel label.
        channel: String,
        /// Condition label.
        condition: String,
        /// What is wrong.
        reason: String,
    },
    /// The case is structurally invalid (missing family block, undefined tool, ...).
    #[error("case {case}: {reason}")]
    Invalid {
        /// The case.
        case: String,
        /// What is wrong.
        reason: String,
    },
    /// An input row of an importer is unusable.
    #[error("{source_name} line {row}: {reason}")]
    ImportRow {
        /// File being imported.
        source_name: String,
        /// 1-based line on which the row starts.
        row: usize,
        /// What is wrong.
        reason: String,
    },
    /// Anything else about inputs or options.
    #[error("{0}")]
    Other(String),
}

/// A problem with one line of a case file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineProblem {
    /// 1-based line number.
    pub line: usize,
    /// The case id, when it could be recovered from the line.
    pub id: Option<String>,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for LineProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.id {
            Some(id) => write!(f, "line {} (case {}): {}", self.line, id, self.reason),
            None => write!(f, "line {}: {}", self.line, self.reason),
        }
    }
}

/// Result alias of the case library.
pub type Result<T, E = CaseError> = std::result::Result<T, E>;
