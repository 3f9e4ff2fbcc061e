//! Final-action risk scorers. Every scorer maps episodes to a risk score (higher = reject); learned scorers fit on a
//! fold's training part only.
//!
//! - `keyword`: prompt-centric heuristic, the number of overtly suspicious words in the serialised input;
//! - `param-risk` / `state-risk`: the deterministic summaries of Eq. 4 / Eq. 2 used as scores;
//! - `scalar-logreg`: l2 logistic regression on the ten scalarised trajectory and parameter features;
//! - `tfidf-logreg`: TF-IDF (unigrams + bigrams, training-part vocabulary with min df 2, smooth idf, l2 rows) and
//!   logistic regression with `linfa-logistic` on the serialised input, orientation checked after fitting;
//! - `lm-zeroshot`: the label-suffix score `r(x)` of a language model ([`super::lm`]);
//! - `probe-L{l}`: l2 logistic probe on the standardised last-token residual stream at block `l` (exact dual Newton
//!   solver of `crate::probe`).
use ndarray::{Array2, ArrayView2};
use std::collections::HashMap;

use super::GuardError;
use crate::probe::linalg::{cross_gram, Standardizer};
use crate::probe::solver::{dual_decision, fit_dual_logistic, fit_linfa, SolverOptions};

/// Overtly suspicious words of the keyword heuristic (matched as whole words of the lower-cased input).
pub const KEYWORDS: &[&str] = &[
    "ignore",
    "bypass",
    "override",
    "disable",
    "disabled",
    "exfiltrate",
    "malicious",
    "attack",
    "inject",
    "injection",
    "delete",
    "sudo",
    "root",
    "password",
    "secret",
    "credentials",
    "leak",
    "unsafe",
    "skip",
    "off",
    "false",
    "admin",
    "external",
    "untrusted",
    "suspicious",
    "exploit",
];

/// A risk scorer.
pub trait Scorer: Sync {
    /// Row label of the results table.
    fn name(&self) -> String;
    /// Whether it fits on training data (fixed scorers ignore `train`).
    fn learned(&self) -> bool;
    /// Fit on `train` (when learned) and score `test`. Shapes: returns `[test.len()]`.
    fn fit_predict(&self, train: &[usize], test: &[usize]) -> Result<Vec<f64>, GuardError>;
}

/// A scorer with one fixed score per episode.
pub struct Fixed {
    pub name: String,
    pub scores: Vec<f64>,
}

impl Scorer for Fixed {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn learned(&self) -> bool {
        false
    }
    fn fit_predict(&self, _train: &[usize], test: &[usize]) -> Result<Vec<f64>, GuardError> {
        Ok(test.iter().map(|&i| self.scores[i]).collect())
    }
}

/// Lower-cased alphanumeric words of a text.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()).map(|w| w.to_ascii_lowercase())
}

/// The keyword heuristic's score: count of [`KEYWORDS`] among the words of `text`.
pub fn keyword_score(text: &str) -> f64 {
    words(text).filter(|w| KEYWORDS.contains(&w.as_str())).count() as f64
}

/// Terms of the TF-IDF model: lower-cased tokens split on whitespace and `,;{}[]"()|` (so `cross_check=off` stays
/// one token), plus bigrams of consecutive tokens.
pub fn tfidf_terms(text: &str) -> Vec<String> {
    let toks: Vec<String> = text
        .split(|c: char| c.is_whitespace() || ",;{}[]\"()|".contains(c))
        .filter(|t| !t.is_empty() && *t != ":")
        .map(|t| t.trim_end_matches(':').to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let mut out = toks.clone();
    for w in toks.windows(2) {
        out.push(format!("{} {}", w[0], w[1]));
    }
    out
}

/// Row-major dense features and l2 logistic regression (dual Newton) with standardisation on the training part.
fn dual_logreg(x: ArrayView2<f32>, y: &[bool], train: &[usize], test: &[usize], c: f64) -> Result<Vec<f64>, String> {
    let st = Standardizer::fit(x, train);
    let xtr = st.apply(x, train);
    let xte = st.apply(x, test);
    let ytr: Vec<bool> = train.iter().map(|&i| y[i]).collect();
    let k = cross_gram(&xtr, &xtr);
    let fit = fit_dual_logistic(&k, &ytr, 1.0 / c, &SolverOptions::default()).map_err(|e| e.to_string())?;
    let cross = cross_gram(&xte, &xtr);
    Ok(dual_decision(&fit, &cross))
}

/// Logistic regression on the ten scalar features.
pub struct ScalarLogReg {
    /// `[n, 10]`
    pub x: Array2<f32>,
    pub y: Vec<bool>,
    pub c: f64,
}

impl Scorer for ScalarLogReg {
    fn name(&self) -> String {
        "scalar-logreg".into()
    }
    fn learned(&self) -> bool {
        true
    }
    fn fit_predict(&self, train: &[usize], test: &[usize]) -> Result<Vec<f64>, GuardError> {
        dual_logreg(self.x.view(), &self.y, train, test, self.c)
            .map_err(|message| GuardError::Scorer { scorer: self.name(), message })
    }
}

/// TF-IDF + logistic regression (linfa-logistic) on the serialised input.
pub struct TfidfLogReg {
    /// Term ids per document (into `vocab`), precomputed once.
    docs: Vec<Vec<usize>>,
    n_terms: usize,
    pub y: Vec<bool>,
    pub c: f64,
    pub min_df: usize,
}

impl TfidfLogReg {
    pub fn new(texts: &[String], y: Vec<bool>, c: f64) -> Self {
        let mut vocab: HashMap<String, usize> = HashMap::new();
        let docs = texts
            .iter()
            .map(|t| {
                tfidf_terms(t)
                    .into_iter()
                    .map(|w| {
                        let n = vocab.len();
                        *vocab.entry(w).or_insert(n)
                    })
                    .collect()
            })
            .collect();
        TfidfLogReg { docs, n_terms: vocab.len(), y, c, min_df: 2 }
    }

    /// TF-IDF matrices of `train` and `test` with the training part's vocabulary and idf.
    ///
    /// # Shapes
    /// returns (`[train.len(), v]`, `[test.len(), v]`)
    pub fn matrices(&self, train: &[usize], test: &[usize]) -> (Array2<f64>, Array2<f64>) {
        let mut df = vec![0usize; self.n_terms];
        for &i in train {
            let mut seen: Vec<usize> = self.docs[i].clone();
            seen.sort_unstable();
            seen.dedup();
            for t in seen {
                df[t] += 1;
            }
        }
        let mut col = vec![usize::MAX; self.n_terms];
        let mut idf = Vec::new();
        let n = train.len() as f64;
        for (t, &d) in df.iter().enumerate() {
            if d >= self.min_df {
                col[t] = idf.len();
                idf.push(((1.0 + n) / (1.0 + d as f64)).ln() + 1.0);
            }
        }
        let v = idf.len();
        let build = |rows: &[usize]| {
            let mut m = Array2::<f64>::zeros((rows.len(), v));
            for (r, &i) in rows.iter().enumerate() {
                for &t in &self.docs[i] {
                    if col[t] != usize::MAX {
                        m[(r, col[t])] += 1.0;
                    }
                }
                let mut norm = 0.0;
                for j in 0..v {
                    m[(r, j)] *= idf[j];
                    norm += m[(r, j)] * m[(r, j)];
                }
                if norm > 0.0 {
                    let s = norm.sqrt();
                    m.row_mut(r).mapv_inplace(|x| x / s);
                }
            }
            m
        };
        (build(train), build(test))
    }
}

impl Scorer for TfidfLogReg {
    fn name(&self) -> String {
        "tfidf-logreg".into()
    }
    fn learned(&self) -> bool {
        true
    }
    fn fit_predict(&self, train: &[usize], test: &[usize]) -> Result<Vec<f64>, GuardError> {
        let err = |message: String| GuardError::Scorer { scorer: "tfidf-logreg".into(), message };
        let (xtr, xte) = self.matrices(train, test);
        let ytr: Vec<bool> = train.iter().map(|&i| self.y[i]).collect();
        if ytr.iter().all(|&b| b) || ytr.iter().all(|&b| !b) {
            return Err(err("the training part holds only one class".into()));
        }
        let (w, b) = fit_linfa(&xtr, &ytr, 1.0 / self.c, 200, 1e-6).map_err(|e| err(e.to_string()))?;
        // linfa-logistic takes the majority class as its positive one; fit_linfa re-orients. Check it did: on the
        // training part the malicious rows must score higher on average.
        let ftr = xtr.dot(&w) + b;
        let (mut sp, mut np, mut sn, mut nn) = (0.0, 0usize, 0.0, 0usize);
        for (f, &yv) in ftr.iter().zip(&ytr) {
            if yv {
                sp += f;
                np += 1;
            } else {
                sn += f;
                nn += 1;
            }
        }
        if sp / np as f64 <= sn / nn as f64 {
            return Err(err(format!(
                "orientation check failed: mean training decision of malicious rows ({:.4}) is not above that of \
                 normal rows ({:.4})",
                sp / np as f64,
                sn / nn as f64
            )));
        }
        Ok((xte.dot(&w) + b).to_vec())
    }
}

/// A logistic probe on one layer's last-token residual stream.
pub struct Probe {
    pub layer: usize,
    /// `[n, d_model]`
    pub x: Array2<f32>,
    pub y: Vec<bool>,
    pub c: f64,
}

impl Scorer for Probe {
    fn name(&self) -> String {
        format!("probe-L{}", self.layer)
    }
    fn learned(&self) -> bool {
        true
    }
    fn fit_predict(&self, train: &[usize], test: &[usize]) -> Result<Vec<f64>, GuardError> {
        dual_logreg(self.x.view(), &self.y, train, test, self.c)
            .map_err(|message| GuardError::Scorer { scorer: self.name(), message })
    }
}
