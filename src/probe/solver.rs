//! Exact l2-regularised logistic regression in the dual (kernel) form, a difference-of-means direction, and a thin
//! wrapper over `linfa-logistic` for cross-checks.
//!
//! Objective (the one `linfa-logistic` minimises, and scikit-learn's with `C = 1/alpha`):
//! `J(w, b) = sum_i log(1 + exp(-s_i (w.x_i + b))) + alpha/2 |w|^2`, `s_i = +-1`, intercept `b` unpenalised.
//! By the representer theorem `w = X^T a`, so with the Gram matrix `K = X X^T` the problem lives in `n + 1`
//! unknowns: `f = K a + b`, penalty `alpha/2 a^T K a`. With n << d (hundreds of prompts, thousands of dimensions)
//! that is much smaller than the primal. A kernel other than `X X^T` (RBF) gives kernel logistic regression, the
//! non-linear probe, with the same solver.
//!
//! Newton's method with a backtracking line search. The Newton system
//! `[[W K + alpha I, W 1], [1^T W K, 1^T W 1]] [da; db] = -[g + alpha a; 1^T g]` (W = diag p(1-p), g = p - y) reduces to
//! the symmetric positive-definite `(K + alpha W^-1) da + 1 db = -W^-1 (g + alpha a)`, `1^T (a + da) = 0`, solved by one
//! Cholesky factorisation and two triangular solves. It converges quadratically to machine precision in ~10 steps.
use ndarray::{Array1, Array2};

use super::linalg::{cholesky_in_place, cholesky_solve, dot};
use super::ProbeError;

/// Solver settings.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct SolverOptions {
    /// Newton iteration cap.
    pub max_iter: usize,
    /// Stop when half the squared Newton decrement falls below `tol * max(1, J)`.
    pub tol: f64,
}

impl Default for SolverOptions {
    fn default() -> Self {
        SolverOptions { max_iter: 100, tol: 1e-13 }
    }
}

/// A fitted dual logistic model: `f(x) = sum_i dual_i k(x_i, x) + intercept`.
#[derive(Debug, Clone)]
pub struct DualFit {
    /// `[n_train]` dual coefficients `a`.
    pub dual: Vec<f64>,
    /// Unpenalised intercept `b`.
    pub intercept: f64,
    /// Newton steps taken.
    pub iterations: usize,
    /// Final objective value.
    pub objective: f64,
}

#[inline]
fn softplus(z: f64) -> f64 {
    // log(1 + exp(z)), stable.
    if z > 0.0 {
        z + (-z).exp().ln_1p()
    } else {
        z.exp().ln_1p()
    }
}

#[inline]
fn sigmoid(z: f64) -> f64 {
    if z >= 0.0 {
        1.0 / (1.0 + (-z).exp())
    } else {
        let e = z.exp();
        e / (1.0 + e)
    }
}

fn objective(f: &[f64], y: &[bool], alpha: f64, a: &[f64], ka: &[f64]) -> f64 {
    let loss: f64 = f.iter().zip(y).map(|(&fi, &yi)| softplus(if yi { -fi } else { fi })).sum();
    loss + 0.5 * alpha * dot(a, ka)
}

fn matvec(k: &[f64], n: usize, v: &[f64], out: &mut [f64]) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = dot(&k[i * n..(i + 1) * n], v);
    }
}

/// Fit l2 logistic regression in the dual on a kernel matrix.
///
/// Shapes: `kernel` `[n, n]` symmetric PSD (row-major, contiguous), `y` `[n]` (true = positive class).
/// `alpha > 0` is the penalty weight (= 1/C). Errors when a class is missing or the iteration cap is hit.
pub fn fit_dual_logistic(
    kernel: &Array2<f64>,
    y: &[bool],
    alpha: f64,
    opts: &SolverOptions,
) -> Result<DualFit, ProbeError> {
    let n = y.len();
    assert_eq!(kernel.dim(), (n, n), "kernel must be [n, n]");
    if !(alpha > 0.0 && alpha.is_finite()) {
        return Err(ProbeError::Config(format!("alpha must be positive and finite, got {alpha}")));
    }
    let k = kernel.as_standard_layout();
    let k = k.as_slice().expect("standard layout");
    let n_pos = y.iter().filter(|&&v| v).count();
    if n_pos == 0 || n_pos == n {
        return Err(ProbeError::OneClass { what: "training rows".into() });
    }
    let mut a = vec![0.0f64; n];
    let mut ka = vec![0.0f64; n];
    let mut b = (n_pos as f64 / (n - n_pos) as f64).ln();
    let mut f = vec![b; n];
    let mut obj = objective(&f, y, alpha, &a, &ka);
    let (mut r, mut winv, mut z1, mut z2, mut kr, mut kda) =
        (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    let mut m = vec![0.0f64; n * n];
    let mut f_new = vec![0.0f64; n];
    let mut a_new = vec![0.0f64; n];
    let mut ka_new = vec![0.0f64; n];
    for it in 0..opts.max_iter {
        let mut gb = 0.0;
        for i in 0..n {
            let p = sigmoid(f[i]);
            let g = p - if y[i] { 1.0 } else { 0.0 };
            gb += g;
            r[i] = g + alpha * a[i];
            winv[i] = 1.0 / (p * (1.0 - p)).max(1e-15);
        }
        matvec(k, n, &r, &mut kr);
        m.copy_from_slice(k);
        for i in 0..n {
            m[i * n + i] += alpha * winv[i];
            z1[i] = -r[i] * winv[i];
            z2[i] = 1.0;
        }
        if !cholesky_in_place(&mut m, n) {
            return Err(ProbeError::Numerical("Newton system not positive definite (kernel not PSD?)".into()));
        }
        cholesky_solve(&m, n, &mut z1);
        cholesky_solve(&m, n, &mut z2);
        let sa: f64 = a.iter().sum();
        let db = (z1.iter().sum::<f64>() + sa) / z2.iter().sum::<f64>();
        let da: Vec<f64> = z1.iter().zip(&z2).map(|(u, v)| u - db * v).collect();
        let decrement = -(dot(&kr, &da) + gb * db);
        if decrement / 2.0 <= opts.tol * obj.max(1.0) {
            return Ok(DualFit { dual: a, intercept: b, iterations: it, objective: obj });
        }
        matvec(k, n, &da, &mut kda);
        let mut t = 1.0;
        let mut accepted = false;
        for _ in 0..60 {
            for i in 0..n {
                a_new[i] = a[i] + t * da[i];
                ka_new[i] = ka[i] + t * kda[i];
                f_new[i] = ka_new[i] + b + t * db;
            }
            let o = objective(&f_new, y, alpha, &a_new, &ka_new);
            if o <= obj - 1e-4 * t * decrement.max(0.0) || (o <= obj && t < 1e-6) {
                obj = o;
                accepted = true;
                break;
            }
            t *= 0.5;
        }
        if !accepted {
            // No decrease possible in floating point: we are at the optimum to machine precision.
            return Ok(DualFit { dual: a, intercept: b, iterations: it, objective: obj });
        }
        a.copy_from_slice(&a_new);
        ka.copy_from_slice(&ka_new);
        f.copy_from_slice(&f_new);
        b += t * db;
    }
    Err(ProbeError::Numerical(format!("Newton did not converge in {} iterations (alpha {alpha})", opts.max_iter)))
}

/// Decision values `K_test a + b` for a dual fit. Shapes: `cross` `[n_test, n_train]` -> `[n_test]`.
pub fn dual_decision(fit: &DualFit, cross: &Array2<f64>) -> Vec<f64> {
    let a = Array1::from(fit.dual.clone());
    (cross.dot(&a) + fit.intercept).to_vec()
}

/// Primal weights `w = X^T a` of a linear-kernel dual fit. Shapes: `x_train` `[n, d]` -> `[d]`.
pub fn primal_weights(fit: &DualFit, x_train: &Array2<f64>) -> Array1<f64> {
    x_train.t().dot(&Array1::from(fit.dual.clone()))
}

/// Difference-of-means direction: `w = mean(x | pos) - mean(x | neg)` and the threshold halfway between the
/// projected class means, so that `x.w - threshold > 0` predicts positive. Shapes: `x` `[n, d]`, `y` `[n]`.
pub fn diff_of_means(x: &Array2<f64>, y: &[bool]) -> Result<(Array1<f64>, f64), ProbeError> {
    let d = x.ncols();
    let (mut mp, mut mn) = (Array1::<f64>::zeros(d), Array1::<f64>::zeros(d));
    let (mut np, mut nn) = (0usize, 0usize);
    for (row, &l) in x.rows().into_iter().zip(y) {
        if l {
            mp += &row;
            np += 1;
        } else {
            mn += &row;
            nn += 1;
        }
    }
    if np == 0 || nn == 0 {
        return Err(ProbeError::OneClass { what: "training rows".into() });
    }
    mp /= np as f64;
    mn /= nn as f64;
    let w = &mp - &mn;
    let thr = 0.5 * (mp.dot(&w) + mn.dot(&w));
    Ok((w, thr))
}

/// Fit with `linfa-logistic` (L-BFGS) on a standardised `[n, d]` matrix; returns `(w [d], b)` oriented so that the
/// decision `x.w + b > 0` means the positive (`true`) class, whichever class linfa took as its "positive" one (it
/// labels the more frequent class +1, the first seen on a tie, and `predict_probabilities` refers to that class).
pub fn fit_linfa(
    x: &Array2<f64>,
    y: &[bool],
    alpha: f64,
    max_iter: u64,
    grad_tol: f64,
) -> Result<(Array1<f64>, f64), ProbeError> {
    use linfa::prelude::Fit;
    let targets = Array1::from(y.to_vec());
    let ds = linfa::Dataset::new(x.clone(), targets);
    let model = linfa_logistic::LogisticRegression::default()
        .alpha(alpha)
        .with_intercept(true)
        .max_iterations(max_iter)
        .gradient_tolerance(grad_tol)
        .fit(&ds)
        .map_err(|e| ProbeError::Numerical(format!("linfa-logistic: {e}")))?;
    let sign = if model.labels().pos.class { 1.0 } else { -1.0 };
    Ok((model.params() * sign, model.intercept() * sign))
}
