//! The evaluation protocol: grouped k-fold cross-validation by pair group, a threshold per fold calibrated on that
//! fold's training part only (maximising `G_rho`), pooled rates over all held-out episodes, and `G_rho` per fold
//! (mean +- sample std), as in the paper's Table 3; plus a rho sweep with the thresholds frozen (Table 7).
//!
//! Calibration scores on the training part are either the fitted model's own scores on it (`fit`, the paper's
//! wording) or out-of-fold scores from an inner grouped split of the training part (`inner`, the default for learned
//! scorers: a model scores its own training rows over-confidently). Fixed scorers need no fit; both modes coincide.
use rayon::prelude::*;
use serde::Serialize;

use super::metrics::{calibrate, guarded_joint, mean_std, Counts, Rates};
use super::scorers::Scorer;
use super::GuardError;
use crate::stats::{auroc, grouped_kfold, Fold};

/// How each fold's threshold is calibrated on its training part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Calibration {
    /// Score the training part with the model fitted on it.
    Fit,
    /// Out-of-fold scores from `k` inner grouped folds of the training part.
    Inner(usize),
}

/// Protocol settings.
#[derive(Debug, Clone, Serialize)]
pub struct EvalConfig {
    pub folds: usize,
    pub seed: u64,
    /// The penalty weight the thresholds are calibrated for.
    pub rho: f64,
    /// Rho values of the sweep (thresholds frozen).
    pub rho_sweep: Vec<f64>,
    pub calibration: Calibration,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            folds: 5,
            seed: 0,
            rho: 1.5,
            rho_sweep: vec![0.5, 1.0, 1.5, 2.0, 3.0],
            calibration: Calibration::Inner(4),
        }
    }
}

/// One fold of one scorer.
#[derive(Debug, Clone, Serialize)]
pub struct FoldOutcome {
    pub fold: usize,
    pub threshold: f64,
    pub counts: Counts,
    pub rates: Rates,
    pub g: f64,
    pub auroc: Option<f64>,
}

/// One scorer's result.
#[derive(Debug, Clone, Serialize)]
pub struct ScorerResult {
    pub scorer: String,
    /// Pooled over all held-out episodes.
    pub counts: Counts,
    pub rates: Rates,
    /// `G_rho` of the pooled rates.
    pub g_pooled: f64,
    /// `G_rho` per fold: mean and sample std.
    pub g_mean: f64,
    pub g_std: f64,
    /// Mean per-fold AUROC of the held-out scores (threshold-free).
    pub auroc_mean: f64,
    pub folds: Vec<FoldOutcome>,
    /// `(rho, fold mean, fold std, pooled)` with thresholds frozen at the calibration rho.
    pub sweep: Vec<(f64, f64, f64, f64)>,
    /// Held-out score, fold and decision per episode.
    pub test_scores: Vec<f64>,
    pub test_fold: Vec<usize>,
    pub rejected: Vec<bool>,
}

/// Grouped folds over pair groups, checked: every fold's training and test parts hold both classes.
pub fn make_folds(groups: &[String], malicious: &[bool], k: usize, seed: u64) -> Result<Vec<Fold>, GuardError> {
    let folds = grouped_kfold(groups, malicious, None, k, seed)?;
    for (f, fold) in folds.iter().enumerate() {
        for (part, rows) in [("test", &fold.test), ("training", &fold.train)] {
            let nm = rows.iter().filter(|&&i| malicious[i]).count();
            let nn = rows.len() - nm;
            if nm == 0 || nn == 0 {
                return Err(GuardError::Fold(format!(
                    "fold {f}: the {part} part holds {nm} malicious and {nn} normal episodes; every fold needs both \
                     classes (use fewer folds, or pair every malicious episode with its benign control)"
                )));
            }
        }
    }
    Ok(folds)
}

fn calibration_scores(
    scorer: &dyn Scorer,
    train: &[usize],
    groups: &[String],
    malicious: &[bool],
    cfg: &EvalConfig,
    fold: usize,
) -> Result<Vec<f64>, GuardError> {
    match (scorer.learned(), cfg.calibration) {
        (false, _) | (true, Calibration::Fit) => scorer.fit_predict(train, train),
        (true, Calibration::Inner(k)) => {
            let g: Vec<String> = train.iter().map(|&i| groups[i].clone()).collect();
            let y: Vec<bool> = train.iter().map(|&i| malicious[i]).collect();
            let inner = grouped_kfold(&g, &y, None, k, cfg.seed ^ (0x1000 + fold as u64))?;
            let mut out = vec![f64::NAN; train.len()];
            for f in inner {
                let tr: Vec<usize> = f.train.iter().map(|&j| train[j]).collect();
                let te: Vec<usize> = f.test.iter().map(|&j| train[j]).collect();
                let s = scorer.fit_predict(&tr, &te)?;
                for (&j, v) in f.test.iter().zip(s) {
                    out[j] = v;
                }
            }
            Ok(out)
        }
    }
}

/// A fold's index, calibrated threshold and held-out scores.
type FoldRun = Result<(usize, f64, Vec<f64>), GuardError>;

/// Evaluate one scorer on precomputed folds. Shapes: `malicious`, `groups` `[n]`.
pub fn evaluate(
    scorer: &dyn Scorer,
    malicious: &[bool],
    groups: &[String],
    folds: &[Fold],
    cfg: &EvalConfig,
) -> Result<ScorerResult, GuardError> {
    let n = malicious.len();
    let per_fold: Vec<FoldRun> = folds
        .par_iter()
        .enumerate()
        .map(|(f, fold)| {
            let cal = calibration_scores(scorer, &fold.train, groups, malicious, cfg, f)?;
            let ytr: Vec<bool> = fold.train.iter().map(|&i| malicious[i]).collect();
            let tau = calibrate(&cal, &ytr, cfg.rho).map_err(|e| GuardError::Fold(format!("fold {f}: {e}")))?;
            let s = scorer.fit_predict(&fold.train, &fold.test)?;
            if let Some(j) = s.iter().position(|v| !v.is_finite()) {
                return Err(GuardError::Scorer {
                    scorer: scorer.name(),
                    message: format!("fold {f}: non-finite score for episode {}", fold.test[j]),
                });
            }
            Ok((f, tau, s))
        })
        .collect();
    let mut test_scores = vec![f64::NAN; n];
    let mut test_fold = vec![usize::MAX; n];
    let mut rejected = vec![false; n];
    let mut fold_out = Vec::new();
    let mut pooled = Counts::default();
    let mut taus = Vec::new();
    for r in per_fold {
        let (f, tau, s) = r?;
        let fold = &folds[f];
        let y: Vec<bool> = fold.test.iter().map(|&i| malicious[i]).collect();
        let rej: Vec<bool> = s.iter().map(|&v| v >= tau).collect();
        for (j, &i) in fold.test.iter().enumerate() {
            test_scores[i] = s[j];
            test_fold[i] = f;
            rejected[i] = rej[j];
        }
        let c = Counts::tally(&rej, &y);
        let rates = c
            .rates()
            .ok_or_else(|| GuardError::Fold(format!("fold {f}: the test part lacks a class, rates are undefined")))?;
        pooled = pooled.add(&c);
        taus.push(tau);
        fold_out.push(FoldOutcome {
            fold: f,
            threshold: tau,
            counts: c,
            rates,
            g: rates.g(cfg.rho),
            auroc: auroc(&s, &y),
        });
    }
    let rates = pooled.rates().ok_or_else(|| GuardError::Fold("pooled test parts lack a class".into()))?;
    let gs: Vec<f64> = fold_out.iter().map(|f| f.g).collect();
    let (g_mean, g_std) = mean_std(&gs);
    let aucs: Vec<f64> = fold_out.iter().filter_map(|f| f.auroc).collect();
    let sweep = cfg
        .rho_sweep
        .iter()
        .map(|&rho| {
            let g: Vec<f64> = fold_out.iter().map(|f| f.rates.g(rho)).collect();
            let (m, s) = mean_std(&g);
            (rho, m, s, guarded_joint(rates.amr, rates.rnr, rho))
        })
        .collect();
    Ok(ScorerResult {
        scorer: scorer.name(),
        counts: pooled,
        rates,
        g_pooled: rates.g(cfg.rho),
        g_mean,
        g_std,
        auroc_mean: mean_std(&aucs).0,
        folds: fold_out,
        sweep,
        test_scores,
        test_fold,
        rejected,
    })
}

/// The Table-3-style text table.
pub fn table(results: &[ScorerResult], rho: f64) -> String {
    let w = results.iter().map(|r| r.scorer.len()).max().unwrap_or(6).max(6);
    let mut s = format!(
        "{:<w$}  {:>6}  {:>6}  {:>6}  {:>6}  {:>16}  {:>8}  {:>6}\n",
        "Method",
        "AMR↓",
        "BMR↑",
        "RNR↓",
        "ACNR↑",
        format!("G_{rho}↑ (folds)"),
        "G pooled",
        "AUROC"
    );
    for r in results {
        s.push_str(&format!(
            "{:<w$}  {:>6.1}  {:>6.1}  {:>6.1}  {:>6.1}  {:>16}  {:>8.1}  {:>6.3}\n",
            r.scorer,
            r.rates.amr,
            r.rates.bmr,
            r.rates.rnr,
            r.rates.acnr,
            format!("{:.1} ± {:.1}", r.g_mean, r.g_std),
            r.g_pooled,
            r.auroc_mean
        ));
    }
    s
}

/// The rho sweep as a text table (fold mean +- std per rho).
pub fn sweep_table(results: &[ScorerResult]) -> String {
    let w = results.iter().map(|r| r.scorer.len()).max().unwrap_or(6).max(6);
    let mut s = format!("{:<w$}", "rho (frozen τ)");
    if let Some(r) = results.first() {
        for (rho, ..) in &r.sweep {
            s.push_str(&format!("  {:>12}", format!("{rho}")));
        }
    }
    s.push('\n');
    for r in results {
        s.push_str(&format!("{:<w$}", r.scorer));
        for (_, m, sd, _) in &r.sweep {
            s.push_str(&format!("  {:>12}", format!("{m:.1}±{sd:.1}")));
        }
        s.push('\n');
    }
    s
}

/// `results.csv`: one row per scorer.
pub fn to_csv(results: &[ScorerResult], rho: f64) -> String {
    let mut s = String::from("scorer,amr,bmr,rnr,acnr,g_rho,g_mean,g_std,g_pooled,auroc_mean,accepted_malicious,blocked_malicious,rejected_normal,accepted_normal\n");
    for r in results {
        let c = &r.counts;
        s.push_str(&format!(
            "{},{:.4},{:.4},{:.4},{:.4},{},{:.4},{:.4},{:.4},{:.4},{},{},{},{}\n",
            r.scorer,
            r.rates.amr,
            r.rates.bmr,
            r.rates.rnr,
            r.rates.acnr,
            rho,
            r.g_mean,
            r.g_std,
            r.g_pooled,
            r.auroc_mean,
            c.accepted_malicious,
            c.blocked_malicious,
            c.rejected_normal,
            c.accepted_normal
        ));
    }
    s
}

/// `sweep.csv`: one row per scorer and rho.
pub fn sweep_csv(results: &[ScorerResult]) -> String {
    let mut s = String::from("scorer,rho,g_mean,g_std,g_pooled\n");
    for r in results {
        for (rho, m, sd, p) in &r.sweep {
            s.push_str(&format!("{},{rho},{m:.4},{sd:.4},{p:.4}\n", r.scorer));
        }
    }
    s
}
