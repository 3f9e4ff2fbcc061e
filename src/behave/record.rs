//! Raw generations: `behaviour.jsonl`, one [`BehaviourRow`] per prompt, appended and synced after every batch.
//!
//! A crash can leave at most a partial last line; [`read_behaviour`] drops it (and reports it) so a resume recomputes
//! that row. A row that appears twice (an errored row recomputed by a resume) counts once: the later line wins.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{io_err, BehaveError};
use crate::cases::render::{Channel, Condition};
use crate::cases::schema::{Family, TpSubtype};

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// An end-of-turn token (not included in `output`).
    Eos,
    /// The token budget ran out.
    MaxTokens,
    /// Generation failed (see `error`).
    Error,
}

/// How tokens were chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Decoding {
    /// Argmax at every step.
    Greedy,
    /// Temperature + nucleus sampling with a per-row seed.
    Sample { temperature: f64, top_p: f64, seed: u64 },
}

/// One generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BehaviourRow {
    /// Index in the full prompt list (cases in file order x channels x conditions).
    pub index: usize,
    /// Model name (as written into the outcome rows).
    pub model: String,
    pub case_id: String,
    pub family: Family,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtype: Option<TpSubtype>,
    pub channel: Channel,
    pub condition: Condition,
    /// The generated text, special tokens kept, the final end-of-turn token removed.
    pub output: String,
    pub n_prompt_tokens: usize,
    pub n_new_tokens: usize,
    /// The token budget of this row.
    pub max_new_tokens: usize,
    pub stop: StopReason,
    pub decoding: Decoding,
    /// Generation error (the row scores ERRORED and a resume recomputes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What [`read_behaviour`] found.
#[derive(Debug, Clone, Default)]
pub struct BehaviourFile {
    /// Rows by prompt index (the last line of an index wins).
    pub rows: BTreeMap<usize, BehaviourRow>,
    /// Whether an unterminated, unreadable last line (a crash mid-write) was dropped.
    pub dropped_partial_tail: bool,
    /// Bytes of the file up to the end of its last complete line.
    pub good_len: u64,
}

/// Reads `behaviour.jsonl`. A bad line in the middle is an error naming the line; an unterminated bad last line is
/// dropped (see [`BehaviourFile::dropped_partial_tail`]).
pub fn read_behaviour(path: &Path) -> Result<BehaviourFile, BehaveError> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let mut out = BehaviourFile::default();
    let mut offset = 0usize;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let terminated = line.ends_with('\n');
        let body = line.trim();
        if body.is_empty() {
            offset += line.len();
            continue;
        }
        match (serde_json::from_str::<BehaviourRow>(body), terminated) {
            (Ok(row), true) => {
                out.rows.insert(row.index, row);
                offset += line.len();
            }
            // Only the last line can lack its newline: a write cut short by a crash.
            (_, false) => out.dropped_partial_tail = true,
            (Err(e), true) => {
                return Err(BehaveError::Line {
                    path: path.to_path_buf(),
                    line: i + 1,
                    message: format!("not a behaviour row: {e}"),
                })
            }
        }
    }
    out.good_len = offset as u64;
    Ok(out)
}

/// Appends rows (one JSON line each) and syncs the file to disk.
pub fn append_rows(path: &Path, rows: &[BehaviourRow]) -> Result<(), BehaveError> {
    let mut buf = String::new();
    for r in rows {
        buf.push_str(&serde_json::to_string(r).map_err(|e| BehaveError::Invalid(format!("serialising a row: {e}")))?);
        buf.push('\n');
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(io_err(path))?;
    f.write_all(buf.as_bytes()).map_err(io_err(path))?;
    f.flush().map_err(io_err(path))?;
    f.sync_data().map_err(io_err(path))?;
    Ok(())
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory, fsync, rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BehaveError> {
    let tmp = path.with_extension(format!("{}.tmp", path.extension().and_then(|e| e.to_str()).unwrap_or("out")));
    {
        let mut f = std::fs::File::create(&tmp).map_err(io_err(&tmp))?;
        f.write_all(bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))?;
    Ok(())
}
