//! Statistics for probes and experiments: AUROC (Mann-Whitney U with mid-ranks for ties), accuracy, grouped k-fold
//! splits (stratified where possible), bootstrap percentile confidence intervals over groups, and label-permutation
//! p-values. Everything random is seeded through `rand_chacha`, so a seed fixes every number.
use std::collections::BTreeMap;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Errors of the statistics helpers.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// Lengths of parallel slices differ.
    #[error("length mismatch: {what} has {got} entries, expected {expected}")]
    Length { what: &'static str, got: usize, expected: usize },
    /// Fewer groups (cases) than requested folds.
    #[error("too few cases for {k}-fold cross-validation: {n_groups} distinct case(s); use --folds <= {n_groups}")]
    TooFewGroups { k: usize, n_groups: usize },
    /// k < 2.
    #[error("fold count must be at least 2, got {0}")]
    BadFoldCount(usize),
    /// A score is NaN or infinite.
    #[error("non-finite score at index {0}")]
    NonFinite(usize),
}

/// A deterministic RNG for a seed and a stream of labels: the same `(seed, parts)` always gives the same stream, and
/// different parts give independent-looking streams (splitmix64 mixing).
pub fn rng_for(seed: u64, parts: &[u64]) -> ChaCha8Rng {
    let mut h = splitmix(seed ^ 0x7472_7573_746c_656e);
    for &p in parts {
        h = splitmix(h ^ splitmix(p.wrapping_add(0x9e37_79b9_7f4a_7c15)));
    }
    ChaCha8Rng::seed_from_u64(h)
}

/// A stable 64-bit hash of a string (FNV-1a), for deriving seeds from names.
pub fn str_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Area under the ROC curve of `scores` (higher = more likely positive) against `labels`, computed as the
/// Mann-Whitney U statistic with mid-ranks for tied scores: `P(score_pos > score_neg) + 0.5 P(tie)`.
///
/// Shapes: `scores` and `labels` both `[n]`. Returns `None` when one class is absent (AUROC undefined).
pub fn auroc(scores: &[f64], labels: &[bool]) -> Option<f64> {
    assert_eq!(scores.len(), labels.len(), "auroc: scores and labels differ in length");
    let n_pos = labels.iter().filter(|&&l| l).count();
    let n_neg = labels.len() - n_pos;
    if n_pos == 0 || n_neg == 0 {
        return None;
    }
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    // Sum of (1-based, mid-) ranks of the positives.
    let mut rank_sum_pos = 0.0f64;
    let mut i = 0;
    while i < idx.len() {
        let mut j = i + 1;
        while j < idx.len() && scores[idx[j]] == scores[idx[i]] {
            j += 1;
        }
        let mid = (i + 1 + j) as f64 / 2.0; // mean of ranks i+1..=j
        for &k in &idx[i..j] {
            if labels[k] {
                rank_sum_pos += mid;
            }
        }
        i = j;
    }
    let u = rank_sum_pos - (n_pos * (n_pos + 1)) as f64 / 2.0;
    Some(u / (n_pos as f64 * n_neg as f64))
}

/// Fraction of `predicted[i] == labels[i]`. Shapes: both `[n]`; `NaN` for `n = 0`.
pub fn accuracy(predicted: &[bool], labels: &[bool]) -> f64 {
    assert_eq!(predicted.len(), labels.len(), "accuracy: lengths differ");
    if labels.is_empty() {
        return f64::NAN;
    }
    predicted.iter().zip(labels).filter(|(p, l)| p == l).count() as f64 / labels.len() as f64
}

/// Mean binary log-loss of probabilities `p` (clipped to `[1e-15, 1 - 1e-15]`) against `labels`. Shapes: `[n]`.
pub fn log_loss(p: &[f64], labels: &[bool]) -> f64 {
    let eps = 1e-15;
    let s: f64 = p
        .iter()
        .zip(labels)
        .map(|(&q, &l)| {
            let q = q.clamp(eps, 1.0 - eps);
            if l {
                -q.ln()
            } else {
                -(1.0 - q).ln()
            }
        })
        .sum();
    s / labels.len().max(1) as f64
}

/// One cross-validation fold: row indices into the data the split was made for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Fold {
    /// Rows used for training, ascending.
    pub train: Vec<usize>,
    /// Held-out rows, ascending.
    pub test: Vec<usize>,
}

/// Grouped k-fold split: every group (case) lands wholly in one test fold, so no group straddles train and test.
///
/// Stratified where possible: groups are bucketed by `(stratum, label signature)` where the label signature says
/// whether the group holds positives only, negatives only or both; within each bucket the groups are shuffled by
/// `seed` and dealt round-robin, continuing the deal across buckets, so folds get similar class and stratum mixes and
/// sizes differing by at most one group per bucket. Deterministic for a seed; group order in the input does not matter
/// (buckets and groups are sorted by name before shuffling).
///
/// Shapes: `groups`, `labels` and `strata` (if given) are `[n_rows]`. Returns `k` folds.
pub fn grouped_kfold(
    groups: &[String],
    labels: &[bool],
    strata: Option<&[String]>,
    k: usize,
    seed: u64,
) -> Result<Vec<Fold>, StatsError> {
    if k < 2 {
        return Err(StatsError::BadFoldCount(k));
    }
    if labels.len() != groups.len() {
        return Err(StatsError::Length { what: "labels", got: labels.len(), expected: groups.len() });
    }
    if let Some(s) = strata {
        if s.len() != groups.len() {
            return Err(StatsError::Length { what: "strata", got: s.len(), expected: groups.len() });
        }
    }
    // group -> (has_pos, has_neg, stratum)
    let mut info: BTreeMap<&str, (bool, bool, &str)> = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        let e = info.entry(g.as_str()).or_insert((false, false, strata.map(|s| s[i].as_str()).unwrap_or("")));
        if labels[i] {
            e.0 = true;
        } else {
            e.1 = true;
        }
    }
    if info.len() < k {
        return Err(StatsError::TooFewGroups { k, n_groups: info.len() });
    }
    let mut buckets: BTreeMap<(String, u8), Vec<&str>> = BTreeMap::new();
    for (g, (p, n, s)) in &info {
        let sig = match (p, n) {
            (true, true) => 0u8,
            (true, false) => 1,
            _ => 2,
        };
        buckets.entry((s.to_string(), sig)).or_default().push(g);
    }
    let mut rng = rng_for(seed, &[str_hash("grouped_kfold"), k as u64]);
    let mut fold_of: BTreeMap<&str, usize> = BTreeMap::new();
    let mut next = 0usize;
    for gs in buckets.values_mut() {
        gs.shuffle(&mut rng);
        for g in gs.iter() {
            fold_of.insert(g, next % k);
            next += 1;
        }
    }
    let mut folds = vec![Fold { train: vec![], test: vec![] }; k];
    for (i, g) in groups.iter().enumerate() {
        let f = fold_of[g.as_str()];
        for (j, fold) in folds.iter_mut().enumerate() {
            if j == f {
                fold.test.push(i);
            } else {
                fold.train.push(i);
            }
        }
    }
    Ok(folds)
}

/// A point estimate with a percentile confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Estimate {
    /// The statistic on the full sample.
    pub value: f64,
    /// Lower percentile bound (NaN when no bootstrap was run or it was undefined).
    pub lo: f64,
    /// Upper percentile bound.
    pub hi: f64,
}

/// Percentile `q` in `[0, 1]` of `xs` (linear interpolation between order statistics, like numpy's default).
/// NaNs are dropped; `NaN` if nothing remains.
pub fn percentile(xs: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// Bootstrap over groups (cases): resample the distinct groups with replacement `n_boot` times, take all rows of each
/// drawn group (a group drawn twice contributes its rows twice), evaluate `stat` on those row indices, and return the
/// percentile interval at `level` (e.g. 0.95) around `stat` on all rows. Replicates where `stat` returns NaN (e.g. one
/// class only) are dropped.
///
/// Shapes: `groups` is `[n_rows]`; `stat` receives row indices into it.
pub fn bootstrap_groups<F>(groups: &[String], n_boot: usize, level: f64, seed: u64, stat: F) -> Estimate
where
    F: Fn(&[usize]) -> f64,
{
    let all: Vec<usize> = (0..groups.len()).collect();
    let value = stat(&all);
    if n_boot == 0 {
        return Estimate { value, lo: f64::NAN, hi: f64::NAN };
    }
    let mut by_group: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        by_group.entry(g.as_str()).or_default().push(i);
    }
    let members: Vec<&Vec<usize>> = by_group.values().collect();
    let mut rng = rng_for(seed, &[str_hash("bootstrap")]);
    let mut reps = Vec::with_capacity(n_boot);
    let mut idx = Vec::with_capacity(groups.len());
    for _ in 0..n_boot {
        idx.clear();
        for _ in 0..members.len() {
            idx.extend_from_slice(members[rng.gen_range(0..members.len())]);
        }
        reps.push(stat(&idx));
    }
    let a = (1.0 - level) / 2.0;
    Estimate { value, lo: percentile(&reps, a), hi: percentile(&reps, 1.0 - a) }
}

/// Permute `labels` within each group (like scikit-learn's `permutation_test_score` with `groups`): the group
/// composition of classes is kept, only which row of a group carries which label changes. Shapes: `[n_rows]`.
pub fn permute_within_groups(labels: &[bool], groups: &[String], rng: &mut ChaCha8Rng) -> Vec<bool> {
    let mut by_group: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, g) in groups.iter().enumerate() {
        by_group.entry(g.as_str()).or_default().push(i);
    }
    let mut out = labels.to_vec();
    for rows in by_group.values() {
        let mut ls: Vec<bool> = rows.iter().map(|&i| labels[i]).collect();
        ls.shuffle(rng);
        for (&i, l) in rows.iter().zip(ls) {
            out[i] = l;
        }
    }
    out
}

/// Permutation-test p-value `(1 + #{null >= observed}) / (1 + n_null)` (one-sided, never zero). NaN nulls are
/// dropped; `NaN` if `observed` is NaN.
pub fn permutation_p_value(observed: f64, null: &[f64]) -> f64 {
    if observed.is_nan() {
        return f64::NAN;
    }
    let valid: Vec<f64> = null.iter().copied().filter(|x| !x.is_nan()).collect();
    let ge = valid.iter().filter(|&&x| x >= observed - 1e-12).count();
    (1 + ge) as f64 / (1 + valid.len()) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auroc_ties_and_perfect() {
        assert_eq!(auroc(&[0.1, 0.2, 0.3, 0.4], &[false, false, true, true]), Some(1.0));
        assert_eq!(auroc(&[0.4, 0.3, 0.2, 0.1], &[false, false, true, true]), Some(0.0));
        assert_eq!(auroc(&[0.5, 0.5, 0.5, 0.5], &[false, true, false, true]), Some(0.5));
        assert_eq!(auroc(&[1.0, 2.0], &[true, true]), None);
    }

    #[test]
    fn percentile_matches_numpy_linear() {
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.5);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.0), 1.0);
    }
}
