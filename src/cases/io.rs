//! Reading and writing JSONL case files. Parsing never stops at the first bad line: every problem is collected.
use std::path::Path;

use serde_json::Value;

use super::error::{CaseError, LineProblem, Result};
use super::schema::{Case, Family, TpSubtype};

/// A case together with the line it was read from.
#[derive(Debug, Clone)]
pub struct LoadedCase {
    /// 1-based line number in the file (0 for cases that were not read from a file).
    pub line: usize,
    /// The case.
    pub case: Case,
}

/// Parses JSONL text. Blank lines and lines starting with `//` are skipped. Returns the cases that parsed and one
/// problem per line that did not (malformed JSON, unknown family, missing fields, ...).
pub fn parse_jsonl(text: &str) -> (Vec<LoadedCase>, Vec<LineProblem>) {
    let mut cases = Vec::new();
    let mut problems = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let line = idx + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        match parse_line(trimmed) {
            Ok(case) => cases.push(LoadedCase { line, case }),
            Err((id, reason)) => problems.push(LineProblem { line, id, reason }),
        }
    }
    (cases, problems)
}

fn parse_line(line: &str) -> std::result::Result<Case, (Option<String>, String)> {
    let value: Value = serde_json::from_str(line).map_err(|e| (sniff_id(line), format!("malformed JSON: {e}")))?;
    let obj = value.as_object().ok_or_else(|| (None, "expected a JSON object".to_string()))?;
    let id = obj.get("id").and_then(Value::as_str).map(str::to_string);
    let fail = |reason: String| (id.clone(), reason);
    // Friendlier messages than serde's for the most common mistakes.
    match obj.get("family") {
        None => return Err(fail("missing field `family` (expected TP, IPI or CTS)".into())),
        Some(Value::String(f)) if Family::parse(f).is_some() && f != Family::parse(f).unwrap().as_str() => {
            return Err(fail(format!("family `{f}` must be written in upper case (`{}`)", Family::parse(f).unwrap())))
        }
        Some(Value::String(f)) if Family::parse(f).is_none() => {
            return Err(fail(format!("unknown family `{f}` (expected TP, IPI or CTS)")))
        }
        Some(Value::String(_)) => {}
        Some(other) => return Err(fail(format!("family must be a string, got {other}"))),
    }
    if let Some(Value::String(s)) = obj.get("subtype") {
        if TpSubtype::parse(s).is_none() || s != &s.to_ascii_uppercase() {
            return Err(fail(format!("unknown TP subtype `{s}` (expected P1, P2 or P3)")));
        }
    }
    for field in ["payload", "benign"] {
        match obj.get(field) {
            None | Some(Value::Null) => {
                let what = if field == "payload" { "payload" } else { "benign control payload" };
                return Err(fail(format!("missing {what} (field `{field}`)")));
            }
            Some(Value::Object(p)) if !p.contains_key("action") => {
                return Err(fail(format!("`{field}` has no `action`")))
            }
            _ => {}
        }
    }
    serde_json::from_value::<Case>(value.clone()).map_err(|e| fail(e.to_string()))
}

/// Best-effort recovery of `"id": "..."` from a line that is not valid JSON, so that problems name their case.
fn sniff_id(line: &str) -> Option<String> {
    let at = line.find("\"id\"")?;
    let rest = line[at + 4..].trim_start().strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(rest[..end].to_string())
}

/// Reads a case file, failing with [`CaseError::Parse`] (all bad lines listed) if any line does not parse.
pub fn load_cases(path: &Path) -> Result<Vec<LoadedCase>> {
    let (cases, problems) = load_cases_lenient(path)?;
    if problems.is_empty() {
        Ok(cases)
    } else {
        Err(CaseError::Parse { path: path.display().to_string(), problems })
    }
}

/// Reads a case file, returning the cases that parsed and the problems of the lines that did not.
pub fn load_cases_lenient(path: &Path) -> Result<(Vec<LoadedCase>, Vec<LineProblem>)> {
    let text = std::fs::read(path).map_err(|source| CaseError::Io { path: path.to_path_buf(), source })?;
    match String::from_utf8(text) {
        Ok(t) => Ok(parse_jsonl(&t)),
        Err(e) => {
            // Keep going: parse the valid lines, flag the others.
            let bytes = e.into_bytes();
            let mut cases = Vec::new();
            let mut problems = Vec::new();
            for (idx, raw) in bytes.split(|b| *b == b'\n').enumerate() {
                match std::str::from_utf8(raw) {
                    Ok(s) => {
                        let (c, p) = parse_jsonl(s);
                        cases.extend(c.into_iter().map(|mut lc| {
                            lc.line = idx + 1;
                            lc
                        }));
                        problems.extend(p.into_iter().map(|mut lp| {
                            lp.line = idx + 1;
                            lp
                        }));
                    }
                    Err(_) => problems.push(LineProblem {
                        line: idx + 1,
                        id: sniff_id(&String::from_utf8_lossy(raw)),
                        reason: "line is not valid UTF-8".into(),
                    }),
                }
            }
            Ok((cases, problems))
        }
    }
}

/// Serialises cases as JSONL (one compact object a line, trailing newline).
pub fn to_jsonl<'a>(cases: impl IntoIterator<Item = &'a Case>) -> String {
    let mut out = String::new();
    for c in cases {
        out.push_str(&serde_json::to_string(c).expect("cases serialise"));
        out.push('\n');
    }
    out
}

/// Writes cases as JSONL to `path` (creating parent directories).
pub fn write_cases<'a>(path: &Path, cases: impl IntoIterator<Item = &'a Case>) -> Result<()> {
    if let Some(parent) = path.parent() {
        if !parent.as_os_str().is_empty() {
            std::fs::create_dir_all(parent).map_err(|source| CaseError::Io { path: parent.to_path_buf(), source })?;
        }
    }
    std::fs::write(path, to_jsonl(cases)).map_err(|source| CaseError::Io { path: path.to_path_buf(), source })
}
