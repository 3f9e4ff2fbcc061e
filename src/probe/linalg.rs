//! Dense helpers for the probes: standardisation with training statistics, Gram matrices, RBF kernels, and a
//! Cholesky solve. Matrices are row-major `ndarray::Array2<f64>`.
use ndarray::{Array1, Array2, ArrayView2, Axis};

/// Per-feature mean and scale of a training matrix (scale = population standard deviation, 1 where it is 0, as
/// scikit-learn's `StandardScaler` does).
#[derive(Debug, Clone)]
pub struct Standardizer {
    /// `[d]` feature means.
    pub mean: Array1<f64>,
    /// `[d]` feature scales.
    pub scale: Array1<f64>,
}

impl Standardizer {
    /// Fit on the rows `rows` of `x` (`[n, d]`, f32); statistics in f64.
    pub fn fit(x: ArrayView2<f32>, rows: &[usize]) -> Self {
        let d = x.ncols();
        let mut mean = Array1::<f64>::zeros(d);
        for &r in rows {
            for (m, &v) in mean.iter_mut().zip(x.row(r)) {
                *m += v as f64;
            }
        }
        let n = rows.len().max(1) as f64;
        mean /= n;
        let mut var = Array1::<f64>::zeros(d);
        for &r in rows {
            for ((s, &v), &m) in var.iter_mut().zip(x.row(r)).zip(&mean) {
                let c = v as f64 - m;
                *s += c * c;
            }
        }
        let scale = var.mapv(|v| {
            let s = (v / n).sqrt();
            if s > 1e-12 * (1.0 + s) && s.is_finite() && s > 0.0 {
                s
            } else {
                1.0
            }
        });
        Standardizer { mean, scale }
    }

    /// Standardise rows `rows` of `x` (`[n, d]`) into a new `[rows.len(), d]` f64 matrix.
    pub fn apply(&self, x: ArrayView2<f32>, rows: &[usize]) -> Array2<f64> {
        let d = x.ncols();
        let mut out = Array2::<f64>::zeros((rows.len(), d));
        for (mut o, &r) in out.axis_iter_mut(Axis(0)).zip(rows) {
            for (((o, &v), &m), &s) in o.iter_mut().zip(x.row(r)).zip(&self.mean).zip(&self.scale) {
                *o = (v as f64 - m) / s;
            }
        }
        out
    }
}

/// Gram matrix `a b^T`: `[n_a, d] x [n_b, d] -> [n_a, n_b]`.
pub fn cross_gram(a: &Array2<f64>, b: &Array2<f64>) -> Array2<f64> {
    a.dot(&b.t())
}

/// Squared row norms `[n]` of `[n, d]`.
pub fn row_sq_norms(a: &Array2<f64>) -> Array1<f64> {
    a.map_axis(Axis(1), |r| r.dot(&r))
}

/// RBF kernel `exp(-gamma |a_i - b_j|^2)` from the cross Gram `[n_a, n_b]` and the squared norms of both sides.
pub fn rbf_from_gram(gram: &Array2<f64>, na: &Array1<f64>, nb: &Array1<f64>, gamma: f64) -> Array2<f64> {
    let mut k = gram.clone();
    for ((i, j), v) in k.indexed_iter_mut() {
        let d2 = (na[i] + nb[j] - 2.0 * *v).max(0.0);
        *v = (-gamma * d2).exp();
    }
    k
}

/// Block size of [`cholesky_in_place`].
const CHOL_BLOCK: usize = 48;

/// In-place Cholesky factorisation of a symmetric positive-definite `[n, n]` row-major matrix: on return the lower
/// triangle holds `L` with `A = L L^T` (the strict upper triangle is overwritten with scratch values). Only the lower
/// triangle of `A` is read. `false` if `A` is not positive definite.
///
/// Right-looking blocked algorithm: factor a diagonal block, solve the panel below it, and update the trailing matrix
/// with one GEMM (`matrixmultiply` through ndarray), which is where the O(n^3) work goes.
pub fn cholesky_in_place(a: &mut [f64], n: usize) -> bool {
    use ndarray::{linalg::general_mat_mul, s, ArrayViewMut2};
    if n <= CHOL_BLOCK {
        return cholesky_unblocked(a, n, 0, n);
    }
    let mut k0 = 0;
    while k0 < n {
        let k1 = (k0 + CHOL_BLOCK).min(n);
        if !cholesky_unblocked(a, n, k0, k1) {
            return false;
        }
        if k1 == n {
            break;
        }
        // Panel: L21 = A21 L11^-T, row by row (forward substitution against the rows of L11).
        for i in k1..n {
            for j in k0..k1 {
                let mut v = a[i * n + j];
                for m in k0..j {
                    v -= a[i * n + m] * a[j * n + m];
                }
                a[i * n + j] = v / a[j * n + j];
            }
        }
        // Trailing update: A22 -= L21 L21^T.
        let mut view = ArrayViewMut2::from_shape((n, n), &mut *a).expect("n x n");
        let rows = view.slice_mut(s![k1.., ..]);
        let (left, mut right) = rows.split_at(ndarray::Axis(1), k1);
        let l21 = left.slice(s![.., k0..k1]);
        general_mat_mul(-1.0, &l21, &l21.t(), 1.0, &mut right);
        k0 = k1;
    }
    true
}

/// Unblocked Cholesky of the diagonal block `[k0..k1, k0..k1]` of a row-major `[n, n]` matrix whose columns `< k0`
/// have already been eliminated from that block.
fn cholesky_unblocked(a: &mut [f64], n: usize, k0: usize, k1: usize) -> bool {
    for j in k0..k1 {
        for k in k0..j {
            let s: f64 = (k0..k).map(|m| a[j * n + m] * a[k * n + m]).sum();
            a[j * n + k] = (a[j * n + k] - s) / a[k * n + k];
        }
        let s: f64 = (k0..j).map(|m| a[j * n + m] * a[j * n + m]).sum();
        let d = a[j * n + j] - s;
        if d.is_nan() || d <= 0.0 {
            return false;
        }
        a[j * n + j] = d.sqrt();
    }
    true
}

/// Reference unblocked Cholesky (row-oriented dot products), kept for tests.
pub fn cholesky_reference(a: &mut [f64], n: usize) -> bool {
    for j in 0..n {
        let (head, tail) = a.split_at_mut(j * n);
        let row_j = &mut tail[..n];
        // Row j, columns < j: L[j][k] = (A[j][k] - sum_{m<k} L[j][m] L[k][m]) / L[k][k].
        for k in 0..j {
            let row_k = &head[k * n..k * n + k + 1];
            let s = dot(&row_j[..k], &row_k[..k]);
            row_j[k] = (row_j[k] - s) / row_k[k];
        }
        let s = row_j[j] - dot(&row_j[..j], &row_j[..j]);
        if s.is_nan() || s <= 0.0 {
            return false;
        }
        row_j[j] = s.sqrt();
    }
    true
}

/// Solve `L L^T x = b` in place given the factor from [`cholesky_in_place`]. Shapes: `l` `[n, n]`, `b` `[n]`.
pub fn cholesky_solve(l: &[f64], n: usize, b: &mut [f64]) {
    // Forward: L y = b.
    for i in 0..n {
        let row = &l[i * n..i * n + i];
        b[i] = (b[i] - dot(row, &b[..i])) / l[i * n + i];
    }
    // Backward: L^T x = y, column-oriented so that L is read by rows.
    for i in (0..n).rev() {
        b[i] /= l[i * n + i];
        let xi = b[i];
        let row = &l[i * n..i * n + i];
        for (bk, &lik) in b[..i].iter_mut().zip(row) {
            *bk -= lik * xi;
        }
    }
}

/// Dot product with four accumulators (lets the compiler vectorise).
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; 4];
    let chunks = n / 4;
    for c in 0..chunks {
        let i = c * 4;
        acc[0] += a[i] * b[i];
        acc[1] += a[i + 1] * b[i + 1];
        acc[2] += a[i + 2] * b[i + 2];
        acc[3] += a[i + 3] * b[i + 3];
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for i in chunks * 4..n {
        s += a[i] * b[i];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocked_cholesky_matches_reference() {
        for n in [5usize, 48, 49, 150, 301] {
            // A = B B^T + n I, SPD.
            let b: Vec<f64> = (0..n * n).map(|i| ((i * 7919 % 1009) as f64 / 1009.0) - 0.5).collect();
            let mut a = vec![0.0; n * n];
            for i in 0..n {
                for j in 0..n {
                    a[i * n + j] =
                        dot(&b[i * n..(i + 1) * n], &b[j * n..(j + 1) * n]) + if i == j { n as f64 } else { 0.0 };
                }
            }
            let (mut l1, mut l2) = (a.clone(), a.clone());
            assert!(cholesky_in_place(&mut l1, n));
            assert!(cholesky_reference(&mut l2, n));
            for i in 0..n {
                for j in 0..=i {
                    assert!((l1[i * n + j] - l2[i * n + j]).abs() < 1e-9, "n {n} ({i}, {j})");
                }
            }
            let mut x: Vec<f64> = (0..n).map(|i| i as f64).collect();
            cholesky_solve(&l1, n, &mut x);
            for i in 0..n {
                let r: f64 = (0..n).map(|j| a[i * n + j] * x[j]).sum();
                assert!((r - i as f64).abs() < 1e-8 * (1.0 + i as f64));
            }
        }
    }

    #[test]
    fn cholesky_solves_spd() {
        let a = [4.0, 2.0, 0.6, 2.0, 5.0, 1.0, 0.6, 1.0, 3.0];
        let mut l = a;
        assert!(cholesky_in_place(&mut l, 3));
        let mut b = [1.0, 2.0, 3.0];
        cholesky_solve(&l, 3, &mut b);
        for i in 0..3 {
            let r: f64 = (0..3).map(|j| a[i * 3 + j] * b[j]).sum();
            assert!((r - [1.0, 2.0, 3.0][i]).abs() < 1e-12);
        }
    }
}
