//! The capture journal: an append-only file of finished batches, the source of truth of a run in progress.
//!
//! HDF5 files are not crash-safe while being written, so a capture never writes into its `.h5` in place. Each finished
//! batch is appended here as one record and `fdatasync`ed before the next batch starts; the `.h5` is rebuilt from the
//! journal into a temporary file and renamed over the old one at checkpoints. A process killed at any moment leaves
//! (a) the last checkpoint's `.h5`, complete and readable, and (b) a journal whose records up to the last sync are
//! intact. A record cut short by the kill (or damaged) fails its length or checksum test; [`Journal::open`] drops it
//! and everything after it, and the batch is recomputed.
//!
//! Layout (little-endian):
//! - header: `TLJRNL01`, u32 `n`, `n` bytes of JSON ([`JournalHeader`]), 32-byte SHA-256 of the JSON;
//! - record: `TLREC001`, u64 `n`, `n` bytes of payload, 32-byte SHA-256 of the payload. Payload: u32 batch number,
//!   u32 rows, then per row u32 prompt (shard-local index), u32 token count, u32 per position its token index, then
//!   `values_per_row` f32 values (layer-major, then position, then `d_model`).
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::ActivationsError;

const HEADER_MAGIC: &[u8; 8] = b"TLJRNL01";
const RECORD_MAGIC: &[u8; 8] = b"TLREC001";

/// What a journal belongs to. A journal whose header differs from the run being started is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalHeader {
    /// Identifies the run: model, config, shard, batch size, device kind.
    pub run_fingerprint: String,
    /// Prompts in this run (shard-local).
    pub n_prompts: usize,
    /// Number of position indices per row.
    pub n_positions: usize,
    /// f32 values per row (`layers * positions * d_model`).
    pub values_per_row: usize,
}

/// One captured prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalRow {
    /// Shard-local prompt index.
    pub prompt: u32,
    /// Token count of the prompt.
    pub n_tokens: u32,
    /// Token index of each captured position (own coordinates).
    pub positions: Vec<u32>,
    /// `[layers, positions, d_model]`, flattened.
    pub values: Vec<f32>,
}

/// A finished batch.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalRecord {
    pub batch: u32,
    pub rows: Vec<JournalRow>,
}

/// An open journal, positioned for appending.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    header: JournalHeader,
    /// Bytes known good (header + whole records).
    good_len: u64,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ActivationsError + '_ {
    move |source| ActivationsError::Io { path: path.to_path_buf(), source }
}

impl Journal {
    /// Create (truncating) a journal with `header`, synced to disk.
    pub fn create(path: &Path, header: JournalHeader) -> Result<Journal, ActivationsError> {
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).map_err(io(path))?;
        let json = serde_json::to_vec(&header).expect("header serialises");
        let mut buf = Vec::with_capacity(json.len() + 44);
        buf.extend_from_slice(HEADER_MAGIC);
        buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
        buf.extend_from_slice(&json);
        buf.extend_from_slice(&Sha256::digest(&json));
        file.write_all(&buf).map_err(io(path))?;
        file.sync_all().map_err(io(path))?;
        sync_dir(path);
        Ok(Journal { path: path.to_path_buf(), file, header, good_len: buf.len() as u64 })
    }

    /// Open an existing journal: read its header and every intact record. A torn or damaged tail is cut off (the file
    /// is truncated to the last intact record). Returns `Ok(None)` when the header itself is unreadable (the journal
    /// never got past creation; start again).
    pub fn open(path: &Path) -> Result<Option<(Journal, Vec<JournalRecord>)>, ActivationsError> {
        let mut file = OpenOptions::new().read(true).write(true).open(path).map_err(io(path))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io(path))?;
        let Some((header, mut pos)) = parse_header(&bytes) else { return Ok(None) };
        let mut records = Vec::new();
        while let Some((rec, next)) = parse_record(&bytes, pos, &header) {
            records.push(rec);
            pos = next;
        }
        if (pos as u64) < bytes.len() as u64 {
            file.set_len(pos as u64).map_err(io(path))?;
            file.sync_all().map_err(io(path))?;
        }
        file.seek(SeekFrom::Start(pos as u64)).map_err(io(path))?;
        Ok(Some((Journal { path: path.to_path_buf(), file, header, good_len: pos as u64 }, records)))
    }

    pub fn header(&self) -> &JournalHeader {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one finished batch and sync it to disk. On a write error (disk full) the partial record is cut off
    /// again, so the journal stays valid and every earlier record is kept.
    pub fn append(&mut self, rec: &JournalRecord) -> Result<(), ActivationsError> {
        let mut payload = Vec::new();
        payload.extend_from_slice(&rec.batch.to_le_bytes());
        payload.extend_from_slice(&(rec.rows.len() as u32).to_le_bytes());
        for row in &rec.rows {
            assert_eq!(row.positions.len(), self.header.n_positions, "positions per row");
            assert_eq!(row.values.len(), self.header.values_per_row, "values per row");
            payload.extend_from_slice(&row.prompt.to_le_bytes());
            payload.extend_from_slice(&row.n_tokens.to_le_bytes());
            for p in &row.positions {
                payload.extend_from_slice(&p.to_le_bytes());
            }
            for v in &row.values {
                payload.extend_from_slice(&v.to_le_bytes());
            }
        }
        let mut buf = Vec::with_capacity(payload.len() + 48);
        buf.extend_from_slice(RECORD_MAGIC);
        buf.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        buf.extend_from_slice(&payload);
        buf.extend_from_slice(&Sha256::digest(&payload));
        let res = self.file.write_all(&buf).and_then(|_| self.file.sync_data());
        if let Err(e) = res {
            let _ = self.file.set_len(self.good_len);
            let _ = self.file.seek(SeekFrom::Start(self.good_len));
            return Err(ActivationsError::Io { path: self.path.clone(), source: e });
        }
        self.good_len += buf.len() as u64;
        Ok(())
    }
}

fn parse_header(b: &[u8]) -> Option<(JournalHeader, usize)> {
    if b.len() < 12 || &b[..8] != HEADER_MAGIC {
        return None;
    }
    let n = u32::from_le_bytes(b[8..12].try_into().ok()?) as usize;
    let end = 12usize.checked_add(n)?.checked_add(32)?;
    if b.len() < end {
        return None;
    }
    let json = &b[12..12 + n];
    if Sha256::digest(json).as_slice() != &b[12 + n..end] {
        return None;
    }
    let h: JournalHeader = serde_json::from_slice(json).ok()?;
    Some((h, end))
}

fn parse_record(b: &[u8], pos: usize, h: &JournalHeader) -> Option<(JournalRecord, usize)> {
    let b = &b[pos..];
    if b.len() < 16 || &b[..8] != RECORD_MAGIC {
        return None;
    }
    let n = usize::try_from(u64::from_le_bytes(b[8..16].try_into().ok()?)).ok()?;
    let end = 16usize.checked_add(n)?.checked_add(32)?;
    if b.len() < end {
        return None;
    }
    let payload = &b[16..16 + n];
    if Sha256::digest(payload).as_slice() != &b[16 + n..end] {
        return None;
    }
    let u32_at = |o: usize| u32::from_le_bytes(payload[o..o + 4].try_into().unwrap());
    if payload.len() < 8 {
        return None;
    }
    let batch = u32_at(0);
    let n_rows = u32_at(4) as usize;
    let row_bytes = 4 * (2 + h.n_positions + h.values_per_row);
    if payload.len() != 8 + n_rows * row_bytes {
        return None;
    }
    let mut rows = Vec::with_capacity(n_rows);
    for r in 0..n_rows {
        let o = 8 + r * row_bytes;
        let positions = (0..h.n_positions).map(|i| u32_at(o + 8 + 4 * i)).collect();
        let vo = o + 8 + 4 * h.n_positions;
        let values = payload[vo..vo + 4 * h.values_per_row]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        rows.push(JournalRow { prompt: u32_at(o), n_tokens: u32_at(o + 4), positions, values });
    }
    Some((JournalRecord { batch, rows }, pos + end))
}

/// fsync the directory holding `path` (makes a create or rename durable). Best effort.
pub fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}
