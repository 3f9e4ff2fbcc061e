//! Behavioural evaluation (issue 8): generation on every case x channel x condition ([`generate`]), tool-call parsing
//! for the common formats ([`parse`]), six-class outcome scoring with a deterministic checker and refusal detector
//! ([`score`]), judges for what the rules leave open (a rule-based indicator judge, a loaded model, or verdicts
//! imported from any external judge) and their agreement ([`judge`]). Raw outputs: [`record`].
//!
//! Files of a run `figures/<run>/`: `behaviour.jsonl` (raw outputs, appended per batch), `behaviour.meta.json` (the
//! generation settings a resume must match), `outcomes.jsonl` (scored rows, [`crate::sas::OutcomeRow`]) and
//! `judges.json` (per-judge class counts and Cohen's kappa between judges). Every decision rule is listed in
//! `docs/behaviour.md`.
use std::path::PathBuf;

pub mod generate;
pub mod judge;
pub mod parse;
pub mod record;
pub mod score;

pub use generate::{run_generation, GenerateReport, GenerateRequest};
pub use judge::{score_rows, JudgeSpec, ScoreOutput};
pub use parse::{parse_tool_calls, CallFormat, MalformedCall, ParsedCall, ParsedOutput};
pub use record::{read_behaviour, BehaviourRow, Decoding, StopReason};
pub use score::{indicator_judge, rule_stage, RuleDecision};

/// Everything that can stop a behavioural run or its scoring. One line each, naming the file, line or row.
#[derive(Debug, thiserror::Error)]
pub enum BehaveError {
    #[error(transparent)]
    Capture(Box<crate::capture::CaptureError>),
    #[error(transparent)]
    Model(Box<crate::model::ModelError>),
    #[error(transparent)]
    Experiment(Box<crate::experiment::ExperimentError>),
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}", path = .path.display())]
    Line { path: PathBuf, line: usize, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl From<crate::capture::CaptureError> for BehaveError {
    fn from(e: crate::capture::CaptureError) -> Self {
        BehaveError::Capture(Box::new(e))
    }
}

impl From<crate::model::ModelError> for BehaveError {
    fn from(e: crate::model::ModelError) -> Self {
        BehaveError::Model(Box::new(e))
    }
}

impl From<crate::experiment::ExperimentError> for BehaveError {
    fn from(e: crate::experiment::ExperimentError) -> Self {
        BehaveError::Experiment(Box::new(e))
    }
}

pub(crate) fn io_err(path: &std::path::Path) -> impl Fn(std::io::Error) -> BehaveError + '_ {
    move |source| BehaveError::Io { path: path.to_path_buf(), source }
}

/// A plain-text table of class counts per channel and family (plus TP subtypes and a total per channel) for the rows
/// of one condition.
pub fn class_table(rows: &[crate::sas::OutcomeRow], condition: crate::cases::Condition) -> String {
    use crate::sas::Outcome;
    let mut keys: Vec<(crate::cases::Channel, String)> = Vec::new();
    let mut counts: std::collections::BTreeMap<(crate::cases::Channel, String), [usize; 6]> = Default::default();
    for r in rows.iter().filter(|r| r.condition == condition) {
        let mut groups = vec!["ALL".to_string(), r.family.to_string()];
        if let Some(s) = r.subtype {
            groups.push(format!("{}-{}", r.family, s));
        }
        for g in groups {
            let k = (r.channel, g);
            if !keys.contains(&k) {
                keys.push(k.clone());
            }
            counts.entry(k).or_default()[r.outcome.index()] += 1;
        }
    }
    let order =
        |g: &str| ["ALL", "TP", "TP-P1", "TP-P2", "TP-P3", "IPI", "CTS"].iter().position(|x| *x == g).unwrap_or(99);
    keys.sort_by(|a, b| a.0.cmp(&b.0).then(order(&a.1).cmp(&order(&b.1))).then(a.1.cmp(&b.1)));
    let mut out = format!("{:<11} {:<6} {:>4}", "channel", "family", "n");
    for o in Outcome::ALL {
        out.push_str(&format!(" {:>16}", o.as_str()));
    }
    out.push('\n');
    for k in &keys {
        let c = counts[k];
        out.push_str(&format!("{:<11} {:<6} {:>4}", k.0.as_str(), k.1, c.iter().sum::<usize>()));
        for v in c {
            out.push_str(&format!(" {v:>16}"));
        }
        out.push('\n');
    }
    out
}
