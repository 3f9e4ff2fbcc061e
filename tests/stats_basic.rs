//! Statistics helpers: AUROC against brute-force pair counting (with ties), grouped k-fold invariants, bootstrap CIs,
//! permutation p-values.
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use trustlens::stats::{
    accuracy, auroc, bootstrap_groups, grouped_kfold, percentile, permutation_p_value, permute_within_groups,
    StatsError,
};

fn brute_auroc(s: &[f64], y: &[bool]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for i in 0..s.len() {
        for j in 0..s.len() {
            if y[i] && !y[j] {
                den += 1.0;
                if s[i] > s[j] {
                    num += 1.0;
                } else if s[i] == s[j] {
                    num += 0.5;
                }
            }
        }
    }
    num / den
}

#[test]
fn auroc_equals_pair_counting_with_ties() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for _ in 0..50 {
        let n = rng.gen_range(2..60);
        // Few distinct values: many ties.
        let s: Vec<f64> = (0..n).map(|_| rng.gen_range(0..5) as f64).collect();
        let mut y: Vec<bool> = (0..n).map(|_| rng.gen()).collect();
        y[0] = true;
        y[1] = false;
        let a = auroc(&s, &y).unwrap();
        assert!((a - brute_auroc(&s, &y)).abs() < 1e-12);
    }
    assert_eq!(auroc(&[0.0, 1.0], &[false, false]), None);
}

#[test]
fn accuracy_counts_matches() {
    assert_eq!(accuracy(&[true, false, true, true], &[true, true, true, false]), 0.5);
}

fn toy_groups(n_groups: usize, per: usize) -> (Vec<String>, Vec<bool>, Vec<String>) {
    let mut g = Vec::new();
    let mut y = Vec::new();
    let mut s = Vec::new();
    for i in 0..n_groups {
        for j in 0..per {
            g.push(format!("g{i}"));
            y.push(j % 2 == 0);
            s.push(["TP", "IPI", "CTS"][i % 3].to_string());
        }
    }
    (g, y, s)
}

#[test]
fn grouped_kfold_keeps_groups_whole_and_is_deterministic() {
    let (g, y, s) = toy_groups(23, 4);
    let folds = grouped_kfold(&g, &y, Some(&s), 5, 42).unwrap();
    assert_eq!(folds.len(), 5);
    let mut seen = vec![0usize; g.len()];
    for f in &folds {
        for &i in &f.test {
            seen[i] += 1;
            assert!(!f.train.iter().any(|&t| g[t] == g[i]), "group {} straddles train and test", g[i]);
        }
        assert_eq!(f.train.len() + f.test.len(), g.len());
        // 23 groups over 5 folds: 4 or 5 groups per fold, stratified by family (8/8/7 groups).
        let n_groups = f.test.len() / 4;
        assert!((4..=5).contains(&n_groups), "fold with {n_groups} groups");
        for fam in ["TP", "IPI", "CTS"] {
            let k = f.test.iter().filter(|&&i| s[i] == fam).count() / 4;
            assert!((1..=2).contains(&k), "family {fam}: {k} groups in a fold");
        }
    }
    assert!(seen.iter().all(|&c| c == 1), "every row is held out exactly once");
    assert_eq!(folds, grouped_kfold(&g, &y, Some(&s), 5, 42).unwrap());
    assert_ne!(folds, grouped_kfold(&g, &y, Some(&s), 5, 43).unwrap());
}

#[test]
fn grouped_kfold_stratifies_one_class_groups() {
    // 10 all-positive groups and 10 all-negative groups: every fold gets both.
    let mut g = Vec::new();
    let mut y = Vec::new();
    for i in 0..20 {
        for _ in 0..3 {
            g.push(format!("c{i:02}"));
            y.push(i < 10);
        }
    }
    for f in grouped_kfold(&g, &y, None, 5, 0).unwrap() {
        let pos = f.test.iter().filter(|&&i| y[i]).count();
        assert_eq!(pos, 6);
        assert_eq!(f.test.len(), 12);
    }
}

#[test]
fn grouped_kfold_refuses_too_few_groups() {
    let (g, y, _) = toy_groups(3, 2);
    let err = grouped_kfold(&g, &y, None, 5, 0).unwrap_err();
    assert!(matches!(err, StatsError::TooFewGroups { k: 5, n_groups: 3 }));
    assert!(err.to_string().contains("3 distinct case"), "{err}");
    assert!(matches!(grouped_kfold(&g, &y, None, 1, 0), Err(StatsError::BadFoldCount(1))));
}

#[test]
fn bootstrap_ci_brackets_the_estimate_and_narrows_with_more_groups() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let width = |n_groups: usize, rng: &mut ChaCha8Rng| {
        let g: Vec<String> = (0..n_groups * 2).map(|i| format!("g{}", i / 2)).collect();
        let v: Vec<f64> = (0..n_groups * 2).map(|_| rng.gen::<f64>()).collect();
        let mean = |idx: &[usize]| idx.iter().map(|&i| v[i]).sum::<f64>() / idx.len() as f64;
        let e = bootstrap_groups(&g, 500, 0.95, 9, mean);
        assert!(e.lo <= e.value && e.value <= e.hi, "{e:?}");
        assert_eq!(e, bootstrap_groups(&g, 500, 0.95, 9, mean), "deterministic");
        e.hi - e.lo
    };
    let narrow = width(400, &mut rng);
    let wide = width(20, &mut rng);
    assert!(narrow < wide / 2.0, "{narrow} vs {wide}");
    let e = bootstrap_groups(&["a".to_string()], 0, 0.95, 0, |_| 1.0);
    assert!(e.lo.is_nan() && e.value == 1.0);
}

#[test]
fn permutation_p_value_and_within_group_shuffles() {
    assert_eq!(permutation_p_value(0.9, &[0.5, 0.6, 0.95, f64::NAN]), 2.0 / 4.0);
    assert_eq!(permutation_p_value(1.0, &[0.5; 99]), 0.01);
    let g: Vec<String> = (0..40).map(|i| format!("g{}", i / 4)).collect();
    let y: Vec<bool> = (0..40).map(|i| i % 4 < 2).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let p = permute_within_groups(&y, &g, &mut rng);
    assert_ne!(p, y);
    for k in 0..10 {
        let c = (0..4).filter(|j| p[k * 4 + j]).count();
        assert_eq!(c, 2, "group composition kept");
    }
    assert_eq!(percentile(&[f64::NAN, 2.0, 4.0], 0.5), 3.0);
}
