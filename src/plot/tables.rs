//! The input tables of the figures (`probes.csv`, `patching.csv`, `sas.csv`) and the CSV plumbing: reading with
//! errors that name the file, line and column; writing atomically.
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::stats::Estimate;

use super::PlotError;

/// One row of `probes.csv` (as `trustlens probe` writes it): a probe fitted on `train` and scored on `test`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeRow {
    pub layer: usize,
    /// Token position, e.g. `last`, `payload_last`, `user_end`.
    pub position: String,
    /// `logistic`, `rbf`, `diffmeans`, ...
    pub method: String,
    /// Training channel (or `pooled`).
    pub train: String,
    /// Test channel.
    pub test: String,
    pub n_test_cases: usize,
    pub accuracy: Estimate,
    pub auroc: Estimate,
}

/// One row of `patching.csv` (as `trustlens patch` writes it).
#[derive(Debug, Clone, PartialEq)]
pub struct PatchRow {
    /// The layer set as written: `12`, `12+20`, `18..29`.
    pub layers: String,
    /// `forward` (adversarial -> benign) or `reverse`.
    pub direction: String,
    pub channel: String,
    /// Attack family or `all`.
    pub family: String,
    pub n: usize,
    pub shift: Estimate,
    pub recovery: Option<Estimate>,
}

impl PatchRow {
    /// The layer when the set is a single layer.
    pub fn single_layer(&self) -> Option<usize> {
        self.layers.trim().parse().ok()
    }
}

/// One row of `sas.csv` (agreed in `/docs/outcomes.md`): percentages, SAS = ASR_tool - ASR_chat.
#[derive(Debug, Clone, PartialEq)]
pub struct SasRow {
    pub model: String,
    pub family: String,
    pub n: usize,
    pub asr_chat: Estimate,
    pub asr_tool: Estimate,
    pub sas: Estimate,
}

/// A parsed CSV file: header and rows of fields, with the file name for errors.
pub(crate) struct Csv {
    path: PathBuf,
    header: Vec<String>,
    /// (1-based line number, fields).
    rows: Vec<(usize, Vec<String>)>,
}

/// Splits one CSV record (RFC 4180 quoting: `"a,b"`, `""` inside quotes).
fn split_record(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    field.push('"');
                    chars.next();
                } else {
                    quoted = false;
                }
            } else {
                field.push(c);
            }
        } else if c == '"' && field.is_empty() && !was_quoted {
            quoted = true;
            was_quoted = true;
        } else if c == ',' {
            fields.push(std::mem::take(&mut field));
            was_quoted = false;
        } else {
            field.push(c);
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    fields.push(field);
    Ok(fields)
}

impl Csv {
    pub(crate) fn read(path: &Path) -> Result<Csv, PlotError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| PlotError::Io { path: path.to_path_buf(), source })?;
        Csv::parse(path, &text)
    }

    pub(crate) fn parse(path: &Path, text: &str) -> Result<Csv, PlotError> {
        let bad = |line: usize, message: String| PlotError::Csv { path: path.to_path_buf(), line, message };
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim_end_matches('\r')));
        let header = loop {
            match lines.next() {
                Some((_, l)) if l.trim().is_empty() => continue,
                Some((n, l)) => {
                    break split_record(l).map_err(|e| bad(n, e))?.into_iter().map(|h| h.trim().to_string()).collect()
                }
                None => return Err(bad(1, "the file is empty (no header)".into())),
            }
        };
        let header: Vec<String> = header;
        let mut rows = Vec::new();
        for (n, l) in lines {
            if l.trim().is_empty() {
                continue;
            }
            let fields = split_record(l).map_err(|e| bad(n, e))?;
            if fields.len() != header.len() {
                return Err(bad(n, format!("{} fields, the header has {}", fields.len(), header.len())));
            }
            rows.push((n, fields));
        }
        Ok(Csv { path: path.to_path_buf(), header, rows })
    }

    /// Index of a required column.
    pub(crate) fn col(&self, name: &str) -> Result<usize, PlotError> {
        self.header.iter().position(|h| h == name).ok_or_else(|| PlotError::MissingColumn {
            path: self.path.clone(),
            column: name.to_string(),
            available: self.header.join(","),
        })
    }

    /// Index of an optional column.
    pub(crate) fn opt_col(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    fn bad_value(&self, line: usize, col: usize, value: &str, expected: &str) -> PlotError {
        PlotError::BadValue {
            path: self.path.clone(),
            line,
            column: self.header[col].clone(),
            value: value.to_string(),
            expected: expected.to_string(),
        }
    }

    fn usize_at(&self, line: usize, fields: &[String], col: usize) -> Result<usize, PlotError> {
        let v = fields[col].trim();
        v.parse().map_err(|_| self.bad_value(line, col, v, "a non-negative integer"))
    }

    /// A float; `NaN`/`nan` and an empty field read as NaN (a bound that was not computed).
    fn f64_at(&self, line: usize, fields: &[String], col: usize) -> Result<f64, PlotError> {
        let v = fields[col].trim();
        if v.is_empty() || v.eq_ignore_ascii_case("nan") {
            return Ok(f64::NAN);
        }
        v.parse().map_err(|_| self.bad_value(line, col, v, "a number"))
    }

    fn estimate_at(&self, line: usize, fields: &[String], cols: [usize; 3]) -> Result<Estimate, PlotError> {
        Ok(Estimate {
            value: self.f64_at(line, fields, cols[0])?,
            lo: self.f64_at(line, fields, cols[1])?,
            hi: self.f64_at(line, fields, cols[2])?,
        })
    }

    fn estimate_cols(&self, base: &str) -> Result<[usize; 3], PlotError> {
        Ok([self.col(base)?, self.col(&format!("{base}_lo"))?, self.col(&format!("{base}_hi"))?])
    }
}

/// Reads `probes.csv`. Every column the figures use is required; extra columns are ignored.
pub fn read_probes(path: &Path) -> Result<Vec<ProbeRow>, PlotError> {
    parse_probes(&Csv::read(path)?)
}

pub(crate) fn parse_probes(csv: &Csv) -> Result<Vec<ProbeRow>, PlotError> {
    let [layer, position, method, train, test, n_cases] =
        ["layer", "position", "method", "train", "test", "n_test_cases"].map(|c| csv.col(c));
    let (layer, position, method, train, test, n_cases) = (layer?, position?, method?, train?, test?, n_cases?);
    let accuracy = csv.estimate_cols("accuracy")?;
    let auroc = csv.estimate_cols("auroc")?;
    let mut out = Vec::with_capacity(csv.rows.len());
    for (line, f) in &csv.rows {
        let line = *line;
        out.push(ProbeRow {
            layer: csv.usize_at(line, f, layer)?,
            position: f[position].trim().to_string(),
            method: f[method].trim().to_string(),
            train: f[train].trim().to_string(),
            test: f[test].trim().to_string(),
            n_test_cases: csv.usize_at(line, f, n_cases)?,
            accuracy: csv.estimate_at(line, f, accuracy)?,
            auroc: csv.estimate_at(line, f, auroc)?,
        });
    }
    if out.is_empty() {
        return Err(PlotError::NoRows { path: csv.path.clone(), what: "probe results".into() });
    }
    Ok(out)
}

/// Reads `patching.csv`. `recovery` columns are optional.
pub fn read_patching(path: &Path) -> Result<Vec<PatchRow>, PlotError> {
    parse_patching(&Csv::read(path)?)
}

pub(crate) fn parse_patching(csv: &Csv) -> Result<Vec<PatchRow>, PlotError> {
    let (layers, direction, channel, family, n) =
        (csv.col("layers")?, csv.col("direction")?, csv.col("channel")?, csv.col("family")?, csv.col("n")?);
    let shift = csv.estimate_cols("shift")?;
    let recovery = match csv.opt_col("recovery") {
        Some(_) => Some(csv.estimate_cols("recovery")?),
        None => None,
    };
    let mut out = Vec::with_capacity(csv.rows.len());
    for (line, f) in &csv.rows {
        let line = *line;
        out.push(PatchRow {
            layers: f[layers].trim().to_string(),
            direction: f[direction].trim().to_string(),
            channel: f[channel].trim().to_string(),
            family: f[family].trim().to_string(),
            n: csv.usize_at(line, f, n)?,
            shift: csv.estimate_at(line, f, shift)?,
            recovery: recovery.map(|c| csv.estimate_at(line, f, c)).transpose()?,
        });
    }
    if out.is_empty() {
        return Err(PlotError::NoRows { path: csv.path.clone(), what: "patching results".into() });
    }
    Ok(out)
}

/// Reads `sas.csv`.
pub fn read_sas(path: &Path) -> Result<Vec<SasRow>, PlotError> {
    parse_sas(&Csv::read(path)?)
}

pub(crate) fn parse_sas(csv: &Csv) -> Result<Vec<SasRow>, PlotError> {
    let (model, family, n) = (csv.col("model")?, csv.col("family")?, csv.col("n")?);
    let (chat, tool, sas) = (csv.estimate_cols("asr_chat")?, csv.estimate_cols("asr_tool")?, csv.estimate_cols("sas")?);
    let mut out = Vec::with_capacity(csv.rows.len());
    for (line, f) in &csv.rows {
        let line = *line;
        out.push(SasRow {
            model: f[model].trim().to_string(),
            family: f[family].trim().to_string(),
            n: csv.usize_at(line, f, n)?,
            asr_chat: csv.estimate_at(line, f, chat)?,
            asr_tool: csv.estimate_at(line, f, tool)?,
            sas: csv.estimate_at(line, f, sas)?,
        });
    }
    if out.is_empty() {
        return Err(PlotError::NoRows { path: csv.path.clone(), what: "SAS rows".into() });
    }
    Ok(out)
}

/// A CSV field, quoted when it needs to be.
pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A number for a CSV: six decimals, `NaN` for missing.
pub(crate) fn csv_num(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else {
        format!("{v:.6}")
    }
}

/// Writes `bytes` to `path` via `path.tmp` + fsync + rename, so a crash never leaves a half-written file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PlotError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| PlotError::Io { path: p, source }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let result = (|| {
        let mut f = File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io(path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_with_quotes() {
        assert_eq!(split_record("a,\"b,c\",\"d\"\"e\",").unwrap(), vec!["a", "b,c", "d\"e", ""]);
        assert!(split_record("\"open").is_err());
    }

    #[test]
    fn missing_column_and_bad_value_name_file_line_column() {
        let p = Path::new("run/probes.csv");
        let csv = Csv::parse(p, "layer,position\n6,last\n").unwrap();
        let err = parse_probes(&csv).unwrap_err().to_string();
        assert!(err.contains("run/probes.csv") && err.contains("`method`"), "{err}");

        let text = "layers,direction,channel,family,n,shift,shift_lo,shift_hi\n12,forward,chat,all,x,0.1,0,0.2\n";
        let err = parse_patching(&Csv::parse(Path::new("p.csv"), text).unwrap()).unwrap_err().to_string();
        assert!(
            err.contains("p.csv") && err.contains("line 2") && err.contains("`n`") && err.contains("\"x\""),
            "{err}"
        );

        let err = Csv::parse(p, "a,b\n1\n").err().unwrap().to_string();
        assert!(err.contains("line 2") && err.contains("1 fields"), "{err}");
    }

    #[test]
    fn csv_numbers() {
        assert_eq!(csv_num(f64::NAN), "NaN");
        assert_eq!(csv_num(0.5), "0.500000");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
    }
}
