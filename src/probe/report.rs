//! Probe results and their files: `probes.csv` (one row per layer x position x method x train set x test channel) and
//! `probes.json` (the same plus per-fold details, the folds' cases and the config).
use std::io::Write;
use std::path::Path;

use super::sweep::ProbeConfig;
use super::ProbeError;
use crate::stats::Estimate;

/// Metrics of one fold of one cell.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FoldResult {
    /// Fold index.
    pub fold: usize,
    /// C used (logistic, rbf).
    pub c: Option<f64>,
    /// Newton iterations (logistic, rbf).
    pub iterations: Option<usize>,
    /// Training rows of the fit.
    pub n_train_rows: usize,
    /// Held-out rows of the test channel in this fold.
    pub n_test_rows: usize,
    /// Accuracy on them.
    pub accuracy: f64,
    /// AUROC on them (None if the fold held one class).
    pub auroc: Option<f64>,
}

/// One (layer, position, method, train set, test channel) result over all folds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CellResult {
    /// Layer index.
    pub layer: usize,
    /// Token position name.
    pub position: String,
    /// `logistic`, `diffmeans` or `rbf`.
    pub method: String,
    /// Training channel, or `pooled`.
    pub train: String,
    /// Test channel.
    pub test: String,
    /// Out-of-fold rows scored.
    pub n_test_rows: usize,
    /// Distinct cases among them.
    pub n_test_cases: usize,
    /// Accuracy of the pooled out-of-fold predictions, with a bootstrap CI over cases.
    pub accuracy: Estimate,
    /// AUROC of the pooled out-of-fold decision values, with a bootstrap CI over cases.
    pub auroc: Estimate,
    /// Mean of the per-fold accuracies.
    pub accuracy_fold_mean: f64,
    /// Mean of the per-fold AUROCs.
    pub auroc_fold_mean: f64,
    /// Label-permutation p-value of the AUROC (None where not run).
    pub p_value: Option<f64>,
    /// Permutations behind the p-value.
    pub n_permutations: usize,
    /// Per-fold details.
    pub folds: Vec<FoldResult>,
}

/// Held-out cases of one outer fold.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FoldInfo {
    /// Fold index.
    pub fold: usize,
    /// Case ids held out.
    pub test_cases: Vec<String>,
    /// Row indices held out (all channels).
    pub test_rows: Vec<usize>,
}

/// Logistic weights of one fit (standardised feature space), kept with `keep_weights`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WeightRecord {
    /// Layer index.
    pub layer: usize,
    /// Position name.
    pub position: String,
    /// Train set.
    pub train: String,
    /// Fold index.
    pub fold: usize,
    /// C of the fit.
    pub c: f64,
    /// Intercept.
    pub intercept: f64,
    /// `[d_model]` weights.
    pub weights: Vec<f64>,
}

/// Everything a sweep produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeReport {
    /// The settings.
    pub config: ProbeConfig,
    /// Rows (prompts) in the input.
    pub n_rows: usize,
    /// Distinct cases.
    pub n_cases: usize,
    /// Activation width.
    pub d_model: usize,
    /// Layers probed.
    pub layers: Vec<usize>,
    /// Positions probed.
    pub positions: Vec<String>,
    /// Channels in the input.
    pub channels: Vec<String>,
    /// Train sets (channels, then `pooled`).
    pub train_sets: Vec<String>,
    /// The outer folds (shared by every layer, position, method and train set).
    pub folds: Vec<FoldInfo>,
    /// All results.
    pub cells: Vec<CellResult>,
    /// Logistic weights per fit (empty unless `keep_weights`).
    pub weights: Vec<WeightRecord>,
    /// Description of the input (path, attributes), filled in by the caller.
    pub input: serde_json::Value,
}

const CSV_HEADER: &str = "layer,position,method,train,test,n_test_rows,n_test_cases,accuracy,accuracy_lo,accuracy_hi,\
auroc,auroc_lo,auroc_hi,accuracy_fold_mean,auroc_fold_mean,p_value,n_permutations,c_values";

fn num(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.6}")
    }
}

impl ProbeReport {
    /// Find a cell.
    pub fn cell(&self, layer: usize, position: &str, method: &str, train: &str, test: &str) -> Option<&CellResult> {
        self.cells.iter().find(|c| {
            c.layer == layer && c.position == position && c.method == method && c.train == train && c.test == test
        })
    }

    /// The CSV text (header + one line per cell; empty fields for undefined values; `c_values` lists the per-fold
    /// C separated by `;`).
    pub fn to_csv(&self) -> String {
        let mut s = String::from(CSV_HEADER);
        s.push('\n');
        for c in &self.cells {
            let cs: Vec<String> = c.folds.iter().filter_map(|f| f.c.map(|v| format!("{v}"))).collect();
            s.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                c.layer,
                csv_field(&c.position),
                c.method,
                csv_field(&c.train),
                csv_field(&c.test),
                c.n_test_rows,
                c.n_test_cases,
                num(c.accuracy.value),
                num(c.accuracy.lo),
                num(c.accuracy.hi),
                num(c.auroc.value),
                num(c.auroc.lo),
                num(c.auroc.hi),
                num(c.accuracy_fold_mean),
                num(c.auroc_fold_mean),
                c.p_value.map(num).unwrap_or_default(),
                c.n_permutations,
                cs.join(";"),
            ));
        }
        s
    }

    /// Write `probes.csv` and `probes.json` into `dir` (created if needed).
    pub fn write(&self, dir: &Path) -> Result<(), ProbeError> {
        let io = |path: &Path, source| ProbeError::Io { path: path.to_path_buf(), source };
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let csv = dir.join("probes.csv");
        std::fs::write(&csv, self.to_csv()).map_err(|e| io(&csv, e))?;
        let json = dir.join("probes.json");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&json).map_err(|e| io(&json, e))?);
        serde_json::to_writer(&mut f, self).map_err(|e| io(&json, std::io::Error::other(e)))?;
        f.flush().map_err(|e| io(&json, e))?;
        Ok(())
    }

    /// A plain-text summary: per layer and position, in-channel accuracy/AUROC with CIs per method, the transfer
    /// matrix of the logistic probe, and the non-linear minus linear AUROC gap.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let methods: Vec<String> = {
            let mut m: Vec<String> = self.cells.iter().map(|c| c.method.clone()).collect();
            m.dedup();
            let mut out: Vec<String> = Vec::new();
            for x in m {
                if !out.contains(&x) {
                    out.push(x);
                }
            }
            out
        };
        let f = |e: &Estimate| {
            if e.lo.is_nan() {
                format!("{:.3}", e.value)
            } else {
                format!("{:.3} [{:.3}, {:.3}]", e.value, e.lo, e.hi)
            }
        };
        s.push_str("In-channel (train = test channel), out-of-fold over held-out cases:\n");
        s.push_str(&format!(
            "{:>5} {:<12} {:<10} {:<10} {:<24} {:<24} {:>8}\n",
            "layer", "position", "channel", "method", "accuracy [95% CI]", "AUROC [95% CI]", "p"
        ));
        for pos in &self.positions {
            for &layer in &self.layers {
                for ch in &self.channels {
                    for m in &methods {
                        if let Some(c) = self.cell(layer, pos, m, ch, ch) {
                            s.push_str(&format!(
                                "{:>5} {:<12} {:<10} {:<10} {:<24} {:<24} {:>8}\n",
                                layer,
                                pos,
                                ch,
                                m,
                                f(&c.accuracy),
                                f(&c.auroc),
                                c.p_value.map(|p| format!("{p:.4}")).unwrap_or_else(|| "-".into())
                            ));
                        }
                    }
                }
            }
        }
        for m in &methods {
            s.push_str(&format!("\nTransfer AUROC [95% CI], {m} (rows: train set, columns: test channel):\n"));
            for pos in &self.positions {
                for &layer in &self.layers {
                    s.push_str(&format!("layer {layer} {pos}\n"));
                    s.push_str(&format!("  {:<10}", "train\\test"));
                    for ch in &self.channels {
                        s.push_str(&format!(" {:<24}", ch));
                    }
                    s.push('\n');
                    for tr in &self.train_sets {
                        s.push_str(&format!("  {:<10}", tr));
                        for ch in &self.channels {
                            let v = self.cell(layer, pos, m, tr, ch).map(|c| f(&c.auroc)).unwrap_or_default();
                            s.push_str(&format!(" {:<24}", v));
                        }
                        s.push('\n');
                    }
                }
            }
        }
        if methods.iter().any(|m| m == "rbf") && methods.iter().any(|m| m == "logistic") {
            s.push_str("\nNon-linear minus linear AUROC (rbf - logistic), per train set -> test channel:\n");
            for pos in &self.positions {
                for &layer in &self.layers {
                    let mut parts = Vec::new();
                    for tr in &self.train_sets {
                        for ch in &self.channels {
                            if let (Some(a), Some(b)) =
                                (self.cell(layer, pos, "rbf", tr, ch), self.cell(layer, pos, "logistic", tr, ch))
                            {
                                parts.push(format!("{tr}->{ch} {:+.3}", a.auroc.value - b.auroc.value));
                            }
                        }
                    }
                    s.push_str(&format!("layer {layer:>3} {pos}: {}\n", parts.join("  ")));
                }
            }
        }
        s
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
