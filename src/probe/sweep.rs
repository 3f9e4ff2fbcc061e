//! The per-layer sweep: grouped CV folds shared by every layer, position, train set and method; jobs in parallel.
use std::collections::BTreeMap;

use ndarray::{Array2, ArrayView2};
use rayon::prelude::*;

use super::linalg::{cross_gram, rbf_from_gram, row_sq_norms, Standardizer};
use super::report::{CellResult, FoldInfo, FoldResult, ProbeReport, WeightRecord};
use super::solver::{diff_of_means, dual_decision, fit_dual_logistic, primal_weights, SolverOptions};
use super::{ProbeData, ProbeError};
use crate::stats::{
    accuracy, auroc, bootstrap_groups, grouped_kfold, log_loss, permutation_p_value, permute_within_groups, rng_for,
    str_hash, Fold,
};

/// A probe family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// l2 logistic regression on standardised features (linear).
    Logistic,
    /// Difference-of-means direction (linear, no fitting).
    DiffMeans,
    /// Kernel logistic regression with an RBF kernel (non-linear).
    Rbf,
}

impl Method {
    /// Name used in outputs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Method::Logistic => "logistic",
            Method::DiffMeans => "diffmeans",
            Method::Rbf => "rbf",
        }
    }

    /// Parse a name from [`Method::name`].
    pub fn parse(s: &str) -> Option<Method> {
        match s {
            "logistic" | "linear" => Some(Method::Logistic),
            "diffmeans" | "dom" => Some(Method::DiffMeans),
            "rbf" | "kernel" => Some(Method::Rbf),
            _ => None,
        }
    }
}

/// How the inverse regularisation strength C (= 1/alpha) is set.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CChoice {
    /// The same C everywhere.
    Fixed(f64),
    /// Chosen per outer fold by inner grouped CV (lowest held-out log-loss; ties go to the smaller C).
    Grid(Vec<f64>),
}

/// Settings of a probe sweep.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeConfig {
    /// Outer grouped folds.
    pub folds: usize,
    /// Inner grouped folds for choosing C (only with [`CChoice::Grid`]).
    pub inner_folds: usize,
    /// Seed of every random choice (folds, bootstrap, permutations).
    pub seed: u64,
    /// C for `logistic` and `rbf`.
    pub c: CChoice,
    /// Probe families to run.
    pub methods: Vec<Method>,
    /// Bootstrap replicates over cases for the CIs (0: no CIs).
    pub bootstrap: usize,
    /// Label permutations for the p-values (0: none). Run for `logistic` and `diffmeans` trained on one channel
    /// (not for the pooled train set).
    pub permutations: usize,
    /// Confidence level of the CIs.
    pub level: f64,
    /// RBF `gamma`; `None` = 1 / d_model (scikit-learn's "scale" on standardised features).
    pub rbf_gamma: Option<f64>,
    /// Train on pooled channels too (all channels of the run together).
    pub pooled: bool,
    /// Newton solver settings.
    pub solver: SolverOptions,
    /// Keep the logistic weights of every fold in the report (`[d_model]` each; large).
    pub keep_weights: bool,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            folds: 5,
            inner_folds: 3,
            seed: 0,
            c: CChoice::Grid(vec![0.001, 0.01, 0.1, 1.0, 10.0, 100.0]),
            methods: vec![Method::Logistic, Method::DiffMeans, Method::Rbf],
            bootstrap: 1000,
            permutations: 100,
            level: 0.95,
            rbf_gamma: None,
            pooled: true,
            solver: SolverOptions::default(),
            keep_weights: false,
        }
    }
}

impl ProbeConfig {
    fn check(&self) -> Result<(), ProbeError> {
        if self.folds < 2 {
            return Err(ProbeError::Config(format!("--folds must be at least 2, got {}", self.folds)));
        }
        let cs: Vec<f64> = match &self.c {
            CChoice::Fixed(c) => vec![*c],
            CChoice::Grid(g) => {
                if g.is_empty() {
                    return Err(ProbeError::Config("the C grid is empty".into()));
                }
                if self.inner_folds < 2 {
                    return Err(ProbeError::Config(format!(
                        "inner folds must be at least 2, got {}",
                        self.inner_folds
                    )));
                }
                g.clone()
            }
        };
        if let Some(bad) = cs.iter().find(|c| !(**c > 0.0 && c.is_finite())) {
            return Err(ProbeError::Config(format!("C must be positive and finite, got {bad}")));
        }
        if self.methods.is_empty() {
            return Err(ProbeError::Config("no probe methods selected".into()));
        }
        if !(self.level > 0.0 && self.level < 1.0) {
            return Err(ProbeError::Config(format!("confidence level must be in (0, 1), got {}", self.level)));
        }
        Ok(())
    }
}

/// One training set: a name and the channels whose rows it trains on.
#[derive(Debug, Clone)]
struct TrainSet {
    name: String,
    channels: Vec<String>,
}

/// Output of one (layer/position, train set, fold) job for one method.
struct MethodOut {
    decision: Vec<f64>,
    c: Option<f64>,
    iterations: Option<usize>,
    weights: Option<(Vec<f64>, f64)>,
    /// `[n_permutations][n_test_rows]`, empty when not run.
    perm: Vec<Vec<f64>>,
}

struct JobOut {
    n_train: usize,
    methods: Vec<MethodOut>,
}

#[derive(Clone, Copy)]
struct Ctx<'a> {
    labels: &'a [bool],
    groups: &'a [String],
    strata: &'a [String],
    cfg: &'a ProbeConfig,
    perm_labels: &'a [Vec<bool>],
}

/// Run the sweep. `progress` (if given) is advanced once per finished job.
///
/// Shapes: every matrix of `data` is `[data.rows.len(), d_model]`. Errors (before any fitting) on non-finite values,
/// one-class data, too few cases for `cfg.folds`, and (during fitting) on a training fold or test fold holding one
/// class, naming the layer, position, train set and fold.
pub fn run_probes(
    data: &ProbeData,
    cfg: &ProbeConfig,
    progress: Option<&indicatif::ProgressBar>,
) -> Result<ProbeReport, ProbeError> {
    cfg.check()?;
    data.validate()?;
    let labels: Vec<bool> = data.rows.iter().map(|r| r.label).collect();
    let groups: Vec<String> = data.rows.iter().map(|r| r.case_id.clone()).collect();
    let strata: Vec<String> = data.rows.iter().map(|r| r.family.clone()).collect();
    let folds = grouped_kfold(&groups, &labels, Some(&strata), cfg.folds, cfg.seed)?;
    let channels = data.channels();
    for (fi, f) in folds.iter().enumerate() {
        for ch in &channels {
            let ls: Vec<bool> = f.test.iter().filter(|&&r| &data.rows[r].channel == ch).map(|&r| labels[r]).collect();
            let np = ls.iter().filter(|&&l| l).count();
            if np == 0 || np == ls.len() {
                let cases: Vec<&str> = fold_cases(f, &groups);
                return Err(ProbeError::OneClass {
                    what: format!(
                        "fold {fi}: the held-out rows of channel '{ch}' (cases {})",
                        cases.iter().take(8).copied().collect::<Vec<_>>().join(", ")
                            + if cases.len() > 8 { ", ..." } else { "" }
                    ),
                });
            }
        }
    }
    let mut train_sets: Vec<TrainSet> =
        channels.iter().map(|c| TrainSet { name: c.clone(), channels: vec![c.clone()] }).collect();
    if cfg.pooled && channels.len() > 1 {
        train_sets.push(TrainSet { name: "pooled".into(), channels: channels.clone() });
    }
    let mut perm_rng = rng_for(cfg.seed, &[str_hash("permutations")]);
    let perm_labels: Vec<Vec<bool>> =
        (0..cfg.permutations).map(|_| permute_within_groups(&labels, &groups, &mut perm_rng)).collect();
    let ctx = Ctx { labels: &labels, groups: &groups, strata: &strata, cfg, perm_labels: &perm_labels };
    let no_perms: Vec<Vec<bool>> = Vec::new();
    let pooled_ctx = Ctx { perm_labels: &no_perms, ..ctx };

    let keys: Vec<(usize, String)> = data.matrices.keys().cloned().collect();
    let mut jobs = Vec::new();
    for pi in 0..keys.len() {
        for ti in 0..train_sets.len() {
            for fi in 0..folds.len() {
                jobs.push((pi, ti, fi));
            }
        }
    }
    if let Some(pb) = progress {
        pb.set_length(jobs.len() as u64);
    }
    let results: Vec<Result<JobOut, ProbeError>> = jobs
        .par_iter()
        .map(|&(pi, ti, fi)| {
            let (layer, pos) = &keys[pi];
            let x = data.matrices[&keys[pi]].view();
            // Permutation p-values for single-channel train sets only: the pooled fits are ~8x dearer (n^3).
            let c = if train_sets[ti].channels.len() > 1 { &pooled_ctx } else { &ctx };
            let out = run_job(x, data, &folds[fi], &train_sets[ti], c).map_err(|e| match e {
                ProbeError::OneClass { what } => ProbeError::OneClass {
                    what: format!(
                        "layer {layer} position '{pos}' train set '{}' fold {fi}: {what}",
                        train_sets[ti].name
                    ),
                },
                ProbeError::Numerical(m) => ProbeError::Numerical(format!(
                    "layer {layer} position '{pos}' train set '{}' fold {fi}: {m}",
                    train_sets[ti].name
                )),
                other => other,
            });
            if let Some(pb) = progress {
                pb.inc(1);
            }
            out
        })
        .collect();
    let mut outs: BTreeMap<(usize, usize, usize), JobOut> = BTreeMap::new();
    for (key, r) in jobs.iter().zip(results) {
        outs.insert(*key, r?);
    }

    // Aggregate per (layer/position, method, train set, test channel).
    let mut cell_keys = Vec::new();
    for pi in 0..keys.len() {
        for (mi, _) in cfg.methods.iter().enumerate() {
            for ti in 0..train_sets.len() {
                for tc in &channels {
                    cell_keys.push((pi, mi, ti, tc.clone()));
                }
            }
        }
    }
    let cells: Vec<CellResult> = cell_keys
        .par_iter()
        .map(|(pi, mi, ti, tc)| {
            let (layer, pos) = &keys[*pi];
            let method = cfg.methods[*mi];
            let mut dec = Vec::new();
            let mut ys = Vec::new();
            let mut gs = Vec::new();
            let mut rows_all = Vec::new();
            let mut fold_results = Vec::new();
            let mut perm_dec: Vec<Vec<f64>> = vec![Vec::new(); cfg.permutations];
            for (fi, f) in folds.iter().enumerate() {
                let out = &outs[&(*pi, *ti, fi)];
                let mo = &out.methods[*mi];
                let (mut fd, mut fy) = (Vec::new(), Vec::new());
                for (j, &r) in f.test.iter().enumerate() {
                    if &data.rows[r].channel != tc {
                        continue;
                    }
                    fd.push(mo.decision[j]);
                    fy.push(labels[r]);
                    gs.push(groups[r].clone());
                    rows_all.push(r);
                    for (b, pd) in perm_dec.iter_mut().enumerate() {
                        if let Some(v) = mo.perm.get(b) {
                            pd.push(v[j]);
                        }
                    }
                }
                let pred: Vec<bool> = fd.iter().map(|&v| v > 0.0).collect();
                fold_results.push(FoldResult {
                    fold: fi,
                    c: mo.c,
                    iterations: mo.iterations,
                    n_train_rows: out.n_train,
                    n_test_rows: fd.len(),
                    accuracy: accuracy(&pred, &fy),
                    auroc: auroc(&fd, &fy),
                });
                dec.extend(fd);
                ys.extend(fy);
            }
            let boot_seed = cfg.seed ^ str_hash(tc);
            let acc = bootstrap_groups(&gs, cfg.bootstrap, cfg.level, boot_seed, |idx| {
                let p: Vec<bool> = idx.iter().map(|&i| dec[i] > 0.0).collect();
                let y: Vec<bool> = idx.iter().map(|&i| ys[i]).collect();
                accuracy(&p, &y)
            });
            let auc = bootstrap_groups(&gs, cfg.bootstrap, cfg.level, boot_seed, |idx| {
                let s: Vec<f64> = idx.iter().map(|&i| dec[i]).collect();
                let y: Vec<bool> = idx.iter().map(|&i| ys[i]).collect();
                auroc(&s, &y).unwrap_or(f64::NAN)
            });
            let n_perm = perm_dec.iter().filter(|p| p.len() == dec.len() && !p.is_empty()).count();
            let p_value = if n_perm > 0 {
                let null: Vec<f64> = perm_dec
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.len() == dec.len())
                    .map(|(b, p)| {
                        if p.iter().any(|v| v.is_nan()) {
                            return f64::NAN;
                        }
                        let y: Vec<bool> = rows_all.iter().map(|&r| perm_labels[b][r]).collect();
                        auroc(p, &y).unwrap_or(f64::NAN)
                    })
                    .collect();
                Some(permutation_p_value(auc.value, &null))
            } else {
                None
            };
            let mut case_set: Vec<&String> = gs.iter().collect();
            case_set.sort();
            case_set.dedup();
            let mean = |v: Vec<f64>| {
                let v: Vec<f64> = v.into_iter().filter(|x| !x.is_nan()).collect();
                if v.is_empty() {
                    f64::NAN
                } else {
                    v.iter().sum::<f64>() / v.len() as f64
                }
            };
            CellResult {
                layer: *layer,
                position: pos.clone(),
                method: method.name().to_string(),
                train: train_sets[*ti].name.clone(),
                test: tc.clone(),
                n_test_rows: dec.len(),
                n_test_cases: case_set.len(),
                accuracy: acc,
                auroc: auc,
                accuracy_fold_mean: mean(fold_results.iter().map(|f| f.accuracy).collect()),
                auroc_fold_mean: mean(fold_results.iter().map(|f| f.auroc.unwrap_or(f64::NAN)).collect()),
                p_value,
                n_permutations: n_perm,
                folds: fold_results,
            }
        })
        .collect();

    let mut weights = Vec::new();
    if cfg.keep_weights {
        if let Some(mi) = cfg.methods.iter().position(|&m| m == Method::Logistic) {
            for (&(pi, ti, fi), out) in &outs {
                if let Some((w, b)) = &out.methods[mi].weights {
                    weights.push(WeightRecord {
                        layer: keys[pi].0,
                        position: keys[pi].1.clone(),
                        train: train_sets[ti].name.clone(),
                        fold: fi,
                        c: out.methods[mi].c.unwrap_or(f64::NAN),
                        intercept: *b,
                        weights: w.clone(),
                    });
                }
            }
        }
    }
    let d_model = data.matrices.values().next().map(|x| x.ncols()).unwrap_or(0);
    Ok(ProbeReport {
        config: cfg.clone(),
        n_rows: data.rows.len(),
        n_cases: {
            let mut g = groups.clone();
            g.sort();
            g.dedup();
            g.len()
        },
        d_model,
        layers: data.layers(),
        positions: data.positions(),
        channels: channels.clone(),
        train_sets: train_sets.iter().map(|t| t.name.clone()).collect(),
        folds: folds
            .iter()
            .enumerate()
            .map(|(i, f)| FoldInfo {
                fold: i,
                test_cases: fold_cases(f, &groups).into_iter().map(String::from).collect(),
                test_rows: f.test.clone(),
            })
            .collect(),
        cells,
        weights,
        input: serde_json::Value::Null,
    })
}

fn fold_cases<'a>(f: &Fold, groups: &'a [String]) -> Vec<&'a str> {
    let mut v: Vec<&str> = f.test.iter().map(|&r| groups[r].as_str()).collect();
    v.sort();
    v.dedup();
    v
}

fn one_class_name(ys: &[bool]) -> Option<&'static str> {
    let np = ys.iter().filter(|&&l| l).count();
    if np == 0 {
        Some("benign")
    } else if np == ys.len() {
        Some("adversarial")
    } else {
        None
    }
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// Build the kernel for a method from a linear Gram (and squared norms). Returns the matrix itself for `logistic`.
fn kernel_of(
    method: Method,
    gram: &Array2<f64>,
    na: &ndarray::Array1<f64>,
    nb: &ndarray::Array1<f64>,
    gamma: f64,
) -> Array2<f64> {
    match method {
        Method::Rbf => rbf_from_gram(gram, na, nb, gamma),
        _ => gram.clone(),
    }
}

/// Choose C for a kernel method by inner grouped CV on the training rows `train` (indices into `x`).
fn select_c(
    method: Method,
    x: ArrayView2<f32>,
    train: &[usize],
    ctx: &Ctx,
    gamma: f64,
    salt: u64,
) -> Result<f64, ProbeError> {
    let grid = match &ctx.cfg.c {
        CChoice::Fixed(c) => return Ok(*c),
        CChoice::Grid(g) => {
            let mut g = g.clone();
            g.sort_by(f64::total_cmp);
            g
        }
    };
    if grid.len() == 1 {
        return Ok(grid[0]);
    }
    let g_in: Vec<String> = train.iter().map(|&r| ctx.groups[r].clone()).collect();
    let y_in: Vec<bool> = train.iter().map(|&r| ctx.labels[r]).collect();
    let s_in: Vec<String> = train.iter().map(|&r| ctx.strata[r].clone()).collect();
    let inner = grouped_kfold(&g_in, &y_in, Some(&s_in), ctx.cfg.inner_folds, ctx.cfg.seed ^ salt).map_err(|e| {
        ProbeError::Config(format!("inner cross-validation for C: {e} (use a fixed --c or fewer --inner-folds)"))
    })?;
    let mut loss = vec![0.0f64; grid.len()];
    let mut used = 0usize;
    for f in &inner {
        let tr: Vec<usize> = f.train.iter().map(|&i| train[i]).collect();
        let va: Vec<usize> = f.test.iter().map(|&i| train[i]).collect();
        let ytr: Vec<bool> = tr.iter().map(|&r| ctx.labels[r]).collect();
        let yva: Vec<bool> = va.iter().map(|&r| ctx.labels[r]).collect();
        if one_class_name(&ytr).is_some() || va.is_empty() {
            continue;
        }
        let st = Standardizer::fit(x, &tr);
        let xtr = st.apply(x, &tr);
        let xva = st.apply(x, &va);
        let gram = cross_gram(&xtr, &xtr);
        let cross = cross_gram(&xva, &xtr);
        let (ntr, nva) = (row_sq_norms(&xtr), row_sq_norms(&xva));
        let k = kernel_of(method, &gram, &ntr, &ntr, gamma);
        let kc = kernel_of(method, &cross, &nva, &ntr, gamma);
        for (ci, &c) in grid.iter().enumerate() {
            let fit = fit_dual_logistic(&k, &ytr, 1.0 / c, &ctx.cfg.solver)?;
            let p: Vec<f64> = dual_decision(&fit, &kc).into_iter().map(sigmoid).collect();
            loss[ci] += log_loss(&p, &yva);
        }
        used += 1;
    }
    if used == 0 {
        return Err(ProbeError::OneClass { what: "every inner fold for choosing C: the training rows".into() });
    }
    let mut best = 0;
    for ci in 1..grid.len() {
        if loss[ci] < loss[best] - 1e-12 {
            best = ci;
        }
    }
    Ok(grid[best])
}

fn run_job(x: ArrayView2<f32>, data: &ProbeData, fold: &Fold, ts: &TrainSet, ctx: &Ctx) -> Result<JobOut, ProbeError> {
    let cfg = ctx.cfg;
    let train: Vec<usize> =
        fold.train.iter().copied().filter(|&r| ts.channels.contains(&data.rows[r].channel)).collect();
    let test = &fold.test;
    let ytr: Vec<bool> = train.iter().map(|&r| ctx.labels[r]).collect();
    if let Some(only) = one_class_name(&ytr) {
        return Err(ProbeError::OneClass { what: format!("the {} training rows (all {only})", ytr.len()) });
    }
    let st = Standardizer::fit(x, &train);
    let xtr = st.apply(x, &train);
    let xte = st.apply(x, test);
    let d = x.ncols();
    let gamma = cfg.rbf_gamma.unwrap_or(1.0 / d as f64);
    let mut gram: Option<(Array2<f64>, Array2<f64>)> = None;
    let salt = str_hash(&ts.name) ^ (fold.test.first().copied().unwrap_or(0) as u64).wrapping_mul(0x9e37_79b9);
    let mut methods = Vec::new();
    for &m in &cfg.methods {
        let out = match m {
            Method::DiffMeans => {
                let (w, thr) = diff_of_means(&xtr, &ytr)?;
                let decision: Vec<f64> = (xte.dot(&w) - thr).to_vec();
                let mut perm = Vec::new();
                for pl in ctx.perm_labels {
                    let yp: Vec<bool> = train.iter().map(|&r| pl[r]).collect();
                    match diff_of_means(&xtr, &yp) {
                        Ok((w, thr)) => perm.push((xte.dot(&w) - thr).to_vec()),
                        Err(_) => perm.push(vec![f64::NAN; test.len()]),
                    }
                }
                MethodOut { decision, c: None, iterations: None, weights: None, perm }
            }
            Method::Logistic | Method::Rbf => {
                let (g, cross) = gram.get_or_insert_with(|| (cross_gram(&xtr, &xtr), cross_gram(&xte, &xtr)));
                let (ntr, nte) = (row_sq_norms(&xtr), row_sq_norms(&xte));
                let k = kernel_of(m, g, &ntr, &ntr, gamma);
                let kc = kernel_of(m, cross, &nte, &ntr, gamma);
                let c = select_c(m, x, &train, ctx, gamma, salt ^ str_hash(m.name()))?;
                let fit = fit_dual_logistic(&k, &ytr, 1.0 / c, &cfg.solver)?;
                let decision = dual_decision(&fit, &kc);
                let weights = if m == Method::Logistic && cfg.keep_weights {
                    Some((primal_weights(&fit, &xtr).to_vec(), fit.intercept))
                } else {
                    None
                };
                let mut perm = Vec::new();
                if m == Method::Logistic {
                    for pl in ctx.perm_labels {
                        let yp: Vec<bool> = train.iter().map(|&r| pl[r]).collect();
                        if one_class_name(&yp).is_some() {
                            perm.push(vec![f64::NAN; test.len()]);
                            continue;
                        }
                        let pf = fit_dual_logistic(&k, &yp, 1.0 / c, &cfg.solver)?;
                        perm.push(dual_decision(&pf, &kc));
                    }
                }
                MethodOut { decision, c: Some(c), iterations: Some(fit.iterations), weights, perm }
            }
        };
        methods.push(out);
    }
    Ok(JobOut { n_train: train.len(), methods })
}
