//! Rank agreement between two per-model ASR tables (the paper's MCPTox check): Spearman's rho with average ranks for
//! ties, and the reader of the reference table (`model,asr` CSV).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::compute::{FamilySlice, ModelReport};
use super::SasError;

/// 1-based ranks of `x`, ascending, tied values sharing the mean of the ranks they span (`[1, 2, 2, 3]` ->
/// `[1, 2.5, 2.5, 4]`). Shapes: `[n]` in, `[n]` out. NaNs sort last (callers should not pass any).
pub fn average_ranks(x: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..x.len()).collect();
    idx.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut ranks = vec![0.0; x.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i + 1;
        while j < idx.len() && x[idx[j]] == x[idx[i]] {
            j += 1;
        }
        let mid = (i + 1 + j) as f64 / 2.0;
        for &k in &idx[i..j] {
            ranks[k] = mid;
        }
        i = j;
    }
    ranks
}

/// Spearman's rank correlation: the Pearson correlation of the average ranks (exact with ties, like
/// `scipy.stats.spearmanr`). Shapes: `x`, `y` are `[n]`. `NaN` when the lengths differ, `n < 2`, or one side is
/// constant (all tied).
pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    if x.len() != y.len() || x.len() < 2 {
        return f64::NAN;
    }
    let (rx, ry) = (average_ranks(x), average_ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in rx.iter().zip(&ry) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        return f64::NAN;
    }
    sxy / (sxx * syy).sqrt()
}

/// Splits one CSV line into fields (RFC 4180 double quotes; `""` inside quotes is a quote).
pub fn split_csv_line(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            ('"', false) if cur.is_empty() => quoted = true,
            (',', false) => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Reads a reference table: CSV with a header naming at least the columns `model` and `asr` (any order, other columns
/// ignored), one row per model. ASR may be a fraction or percentage points (only ranks matter). Errors name the file,
/// the line and the bad value; a model listed twice is an error.
pub fn read_reference(path: &Path) -> Result<BTreeMap<String, f64>, SasError> {
    let text = std::fs::read_to_string(path).map_err(|source| SasError::Io { path: path.to_path_buf(), source })?;
    let bad = |line: usize, message: String| SasError::Reference { path: path.to_path_buf(), line, message };
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let Some((h_i, header)) = lines.next() else { return Err(bad(1, "the file is empty".into())) };
    let cols: Vec<String> = split_csv_line(header).iter().map(|c| c.trim().to_ascii_lowercase()).collect();
    let find = |name: &str| cols.iter().position(|c| c == name);
    let (Some(mi), Some(ai)) = (find("model"), find("asr")) else {
        return Err(bad(h_i + 1, format!("header {header:?} must name the columns `model` and `asr`")));
    };
    let mut out = BTreeMap::new();
    for (i, line) in lines {
        let f = split_csv_line(line);
        let (Some(model), Some(asr)) = (f.get(mi), f.get(ai)) else {
            return Err(bad(i + 1, format!("expected {} columns, got {}: {line:?}", cols.len(), f.len())));
        };
        let model = model.trim();
        if model.is_empty() {
            return Err(bad(i + 1, "empty model name".into()));
        }
        let v: f64 = asr.trim().parse().map_err(|_| bad(i + 1, format!("asr {asr:?} is not a number")))?;
        if !v.is_finite() {
            return Err(bad(i + 1, format!("asr {asr:?} is not finite")));
        }
        if out.insert(model.to_string(), v).is_some() {
            return Err(bad(i + 1, format!("model {model:?} is listed twice")));
        }
    }
    Ok(out)
}

/// Rank agreement of our per-model tool-channel ASR on one slice with a reference table.
#[derive(Debug, Clone, Serialize)]
pub struct RankAgreement {
    /// The reference file.
    pub reference: PathBuf,
    /// The slice whose tool-channel ASR is compared (the paper: TP).
    pub family: FamilySlice,
    /// Models in both tables.
    pub n: usize,
    /// Spearman's rho (average ranks for ties); NaN (null in JSON) when undefined.
    pub rho: f64,
    /// (model, our ASR in pp, reference ASR) for the common models, by model name.
    pub models: Vec<(String, f64, f64)>,
    /// Models with results here but not in the reference.
    pub only_ours: Vec<String>,
    /// Models in the reference without results here (or without cases in the slice).
    pub only_reference: Vec<String>,
}

/// Spearman's rho between our tool-channel ASR on `family` and the reference table. Error when fewer than two models
/// are in both (naming both model lists).
pub fn rank_agreement(
    models: &[ModelReport],
    reference: &BTreeMap<String, f64>,
    reference_path: &Path,
    family: FamilySlice,
) -> Result<RankAgreement, SasError> {
    let ours: BTreeMap<&str, f64> =
        models.iter().filter_map(|m| m.cell(family).map(|c| (m.model.as_str(), c.asr_tool.value))).collect();
    let common: Vec<(String, f64, f64)> =
        ours.iter().filter_map(|(m, &a)| reference.get(*m).map(|&r| (m.to_string(), a, r))).collect();
    let only_ours: Vec<String> = ours.keys().filter(|m| !reference.contains_key(**m)).map(|m| m.to_string()).collect();
    let only_reference: Vec<String> = reference.keys().filter(|m| !ours.contains_key(m.as_str())).cloned().collect();
    if common.len() < 2 {
        return Err(SasError::Reference {
            path: reference_path.to_path_buf(),
            line: 0,
            message: format!(
                "only {} model(s) in common with the outcomes (need 2 or more; names must match exactly). \
                 Outcomes with {family} cases: {:?}; reference: {:?}",
                common.len(),
                ours.keys().collect::<Vec<_>>(),
                reference.keys().collect::<Vec<_>>()
            ),
        });
    }
    let x: Vec<f64> = common.iter().map(|c| c.1).collect();
    let y: Vec<f64> = common.iter().map(|c| c.2).collect();
    Ok(RankAgreement {
        reference: reference_path.to_path_buf(),
        family,
        n: common.len(),
        rho: spearman(&x, &y),
        models: common,
        only_ours,
        only_reference,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes() {
        assert_eq!(split_csv_line(r#"a,"b,c","d""e",f"#), vec!["a", "b,c", "d\"e", "f"]);
    }
}
