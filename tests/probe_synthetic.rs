//! Synthetic checks of the probe sweep: a planted linear signal is found, an XOR signal is missed by the linear
//! probes and found by the RBF probe, shuffled labels give chance with a large p-value, results are deterministic for
//! a seed whatever the thread count, and the dual Newton solver agrees with linfa-logistic.
use ndarray::Array2;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use trustlens::probe::solver::{fit_dual_logistic, fit_linfa, primal_weights, SolverOptions};
use trustlens::probe::{run_probes, CChoice, Method, ProbeConfig, ProbeData, RowInfo};

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.gen_range(1e-12..1.0);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// `n_cases` cases x {chat, tool} x {adversarial, benign}; row features from `feat(rng, label, channel_index)` plus a
/// per-case offset shared by the case's rows. One layer (3) and position "last".
fn synth<F>(n_cases: usize, d: usize, seed: u64, feat: F) -> ProbeData
where
    F: Fn(&mut ChaCha8Rng, bool, usize) -> Vec<f64>,
{
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut rows = Vec::new();
    let mut x = Vec::new();
    let fams = ["TP", "IPI", "CTS"];
    for c in 0..n_cases {
        let offset: Vec<f64> = (0..d).map(|_| 0.3 * normal(&mut rng)).collect();
        for (ci, ch) in ["chat", "tool"].iter().enumerate() {
            for label in [true, false] {
                let v = feat(&mut rng, label, ci);
                x.extend(v.iter().zip(&offset).map(|(a, b)| (a + b) as f32));
                rows.push(RowInfo {
                    case_id: format!("case-{c:03}"),
                    family: fams[c % 3].to_string(),
                    channel: ch.to_string(),
                    label,
                });
            }
        }
    }
    let n = rows.len();
    let mut data = ProbeData { rows, matrices: Default::default() };
    data.matrices.insert((3, "last".into()), Array2::from_shape_vec((n, d), x).unwrap());
    data
}

fn cfg(methods: Vec<Method>, permutations: usize) -> ProbeConfig {
    ProbeConfig {
        folds: 5,
        c: CChoice::Grid(vec![0.01, 0.1, 1.0]),
        methods,
        bootstrap: 200,
        permutations,
        seed: 7,
        ..Default::default()
    }
}

fn noise(rng: &mut ChaCha8Rng, d: usize) -> Vec<f64> {
    (0..d).map(|_| normal(rng)).collect()
}

#[test]
fn planted_linear_signal_is_found() {
    let d = 40;
    let data = synth(40, d, 1, |rng, label, _| {
        let mut v = noise(rng, d);
        let s = if label { 1.0 } else { -1.0 };
        for (j, x) in v.iter_mut().enumerate().take(5) {
            *x += s * 0.8 * (1.0 + j as f64 * 0.1);
        }
        v
    });
    let r = run_probes(&data, &cfg(vec![Method::Logistic, Method::DiffMeans, Method::Rbf], 50), None).unwrap();
    for m in ["logistic", "diffmeans"] {
        for tr in ["chat", "tool", "pooled"] {
            for te in ["chat", "tool"] {
                let c = r.cell(3, "last", m, tr, te).unwrap();
                assert!(c.auroc.value > 0.95, "{m} {tr}->{te}: AUROC {}", c.auroc.value);
                assert!(c.auroc.lo <= c.auroc.value && c.auroc.value <= c.auroc.hi);
                assert!(c.accuracy.value > 0.85, "{m} {tr}->{te}: accuracy {}", c.accuracy.value);
                assert_eq!(c.n_test_rows, 80);
                assert_eq!(c.n_test_cases, 40);
                assert_eq!(c.folds.len(), 5);
                // 50 permutations: the smallest attainable p is 1/51. None for the pooled train set.
                if tr == "pooled" {
                    assert!(c.p_value.is_none());
                } else {
                    assert!(c.p_value.unwrap() < 0.03, "{m} {tr}->{te}: p {:?}", c.p_value);
                }
            }
        }
    }
    assert!(r.cell(3, "last", "rbf", "chat", "chat").unwrap().auroc.value > 0.9);
    assert!(r.cell(3, "last", "rbf", "chat", "chat").unwrap().p_value.is_none());
}

#[test]
fn xor_signal_is_missed_by_linear_and_found_by_rbf() {
    let d = 10;
    let data = synth(60, d, 2, |rng, label, _| {
        let mut v = noise(rng, d);
        // label = sign(x0) == sign(x1): the four quadrant clusters of an XOR.
        let a: f64 = if rng.gen::<bool>() { 1.0 } else { -1.0 };
        let b = if label { a } else { -a };
        v[0] = 2.0 * a + 0.4 * v[0];
        v[1] = 2.0 * b + 0.4 * v[1];
        v
    });
    let mut c = cfg(vec![Method::Logistic, Method::DiffMeans, Method::Rbf], 0);
    c.c = CChoice::Grid(vec![0.01, 0.1, 1.0, 10.0, 100.0]);
    let r = run_probes(&data, &c, None).unwrap();
    for ch in ["chat", "tool"] {
        let lin = r.cell(3, "last", "logistic", ch, ch).unwrap().auroc.value;
        let dom = r.cell(3, "last", "diffmeans", ch, ch).unwrap().auroc.value;
        let rbf = r.cell(3, "last", "rbf", ch, ch).unwrap().auroc.value;
        assert!(lin < 0.7, "{ch}: logistic AUROC {lin} on XOR");
        assert!(dom < 0.7, "{ch}: diffmeans AUROC {dom} on XOR");
        assert!(rbf > 0.9, "{ch}: rbf AUROC {rbf} on XOR");
    }
}

#[test]
fn shuffled_labels_give_chance_and_large_p() {
    let d = 30;
    // Features carry no information about the label.
    let data = synth(40, d, 3, |rng, _, _| noise(rng, d));
    let r = run_probes(&data, &cfg(vec![Method::Logistic, Method::DiffMeans], 100), None).unwrap();
    for m in ["logistic", "diffmeans"] {
        for ch in ["chat", "tool"] {
            let c = r.cell(3, "last", m, ch, ch).unwrap();
            assert!((c.auroc.value - 0.5).abs() < 0.15, "{m} {ch}: AUROC {}", c.auroc.value);
            assert!(c.auroc.lo < 0.5 && c.auroc.hi > 0.5, "{m} {ch}: CI {:?} excludes chance", c.auroc);
            let p = c.p_value.unwrap();
            eprintln!("{m} {ch}: AUROC {:.3} p {p:.3}", c.auroc.value);
            assert!(p > 0.05, "{m} {ch}: p {p}");
            assert_eq!(c.n_permutations, 100);
        }
    }
}

#[test]
fn deterministic_for_a_seed_whatever_the_threads() {
    let d = 20;
    let data = synth(25, d, 4, |rng, label, ch| {
        let mut v = noise(rng, d);
        v[ch] += if label { 1.0 } else { -1.0 };
        v
    });
    let c = cfg(vec![Method::Logistic, Method::DiffMeans, Method::Rbf], 10);
    let run = |threads| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let r = pool.install(|| run_probes(&data, &c, None)).unwrap();
        serde_json::to_string(&r).unwrap()
    };
    let a = run(1);
    assert_eq!(a, run(3));
    let mut c2 = c.clone();
    c2.seed = 8;
    let r2 = serde_json::to_string(&run_probes(&data, &c2, None).unwrap()).unwrap();
    assert_ne!(a, r2, "another seed should change folds or bootstrap");
}

#[test]
fn folds_never_split_a_case_and_channel_specific_signal_does_not_transfer() {
    let d = 20;
    // Chat rows carry the signal on dimension 0, tool rows on dimension 1.
    let data = synth(40, d, 5, |rng, label, ch| {
        let mut v = noise(rng, d);
        v[ch] += if label { 2.0 } else { -2.0 };
        v
    });
    let r = run_probes(&data, &cfg(vec![Method::Logistic], 0), None).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for f in &r.folds {
        for c in &f.test_cases {
            assert!(seen.insert(c.clone()), "case {c} in two test folds");
        }
    }
    assert_eq!(seen.len(), 40);
    assert!(r.cell(3, "last", "logistic", "chat", "chat").unwrap().auroc.value > 0.95);
    assert!(r.cell(3, "last", "logistic", "tool", "tool").unwrap().auroc.value > 0.95);
    assert!(r.cell(3, "last", "logistic", "chat", "tool").unwrap().auroc.value < 0.75);
    assert!(r.cell(3, "last", "logistic", "tool", "chat").unwrap().auroc.value < 0.75);
    assert!(r.cell(3, "last", "logistic", "pooled", "chat").unwrap().auroc.value > 0.95);
    let csv = r.to_csv();
    assert_eq!(csv.lines().count(), 1 + 3 * 2);
    assert!(csv.starts_with("layer,position,method,train,test,"));
}

fn random_problem(n: usize, d: usize, seed: u64) -> (Array2<f64>, Vec<bool>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let w: Vec<f64> = (0..d).map(|_| normal(&mut rng)).collect();
    let mut x = Array2::<f64>::zeros((n, d));
    let mut y = Vec::new();
    for i in 0..n {
        let mut z = 0.3;
        for j in 0..d {
            x[(i, j)] = normal(&mut rng);
            z += 0.4 * w[j] * x[(i, j)];
        }
        y.push(rng.gen::<f64>() < 1.0 / (1.0 + (-z).exp()));
    }
    (x, y)
}

#[test]
fn dual_newton_meets_the_optimality_conditions_and_agrees_with_linfa() {
    for (n, d, alpha) in [(60usize, 200usize, 1.0f64), (150, 30, 0.1), (80, 80, 10.0)] {
        let (x, y) = random_problem(n, d, n as u64);
        let k = x.dot(&x.t());
        let fit = fit_dual_logistic(&k, &y, alpha, &SolverOptions::default()).unwrap();
        let w = primal_weights(&fit, &x);
        // Primal gradient: X^T (p - y) + alpha w = 0 and sum(p - y) = 0.
        let f = x.dot(&w) + fit.intercept;
        let g: Vec<f64> = f.iter().zip(&y).map(|(&fi, &yi)| 1.0 / (1.0 + (-fi).exp()) - yi as u8 as f64).collect();
        let grad = x.t().dot(&ndarray::Array1::from(g.clone())) + &w * alpha;
        let gmax = grad.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(gmax < 1e-6, "n {n} d {d}: max |grad_w| {gmax}");
        assert!(g.iter().sum::<f64>().abs() < 1e-6);
        assert!(fit.iterations < 30);

        let (wl, bl) = fit_linfa(&x, &y, alpha, 5000, 1e-8).unwrap();
        let cos = w.dot(&wl) / (w.dot(&w).sqrt() * wl.dot(&wl).sqrt());
        assert!(cos > 0.9999, "n {n} d {d}: cosine to linfa {cos}");
        assert!((fit.intercept - bl).abs() < 1e-3 * (1.0 + bl.abs()), "intercepts {} vs {bl}", fit.intercept);
    }
}

#[test]
fn linfa_orientation_is_the_true_class_even_when_it_is_the_minority() {
    // Positives are the minority: linfa labels the majority class +1, fit_linfa must flip back.
    let (x, mut y) = random_problem(120, 5, 9);
    for (i, v) in y.iter_mut().enumerate() {
        *v = x[(i, 0)] > 0.8;
    }
    assert!(y.iter().filter(|&&v| v).count() < 60);
    let (w, _) = fit_linfa(&x, &y, 1.0, 2000, 1e-8).unwrap();
    assert!(w[0] > 0.0, "weight on the positive feature must be positive, got {}", w[0]);
}
