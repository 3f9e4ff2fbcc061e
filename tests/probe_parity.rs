//! Parity with scikit-learn: the logistic probe sweep's per-cell accuracy within 1 percentage point and every fold's
//! coefficient vector at cosine >= 0.99 of `StandardScaler` + `LogisticRegression(C=1/alpha, solver="lbfgs")` on the
//! same folds (bench/probe.py parity recomputes the fits recorded in probes.json). Needs `.venv/bin/python` with
//! scikit-learn (`just setup`); skipped with a message when it is missing.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use ndarray::Array2;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use trustlens::probe::{run_probes, CChoice, Method, ProbeConfig, ProbeData, RowInfo};

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.gen_range(1e-12..1.0);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn write_npy_f32(path: &Path, x: &Array2<f32>) {
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", x.nrows(), x.ncols());
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(b"\x93NUMPY\x01\x00").unwrap();
    f.write_all(&(header.len() as u16).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    for v in x.iter() {
        f.write_all(&v.to_le_bytes()).unwrap();
    }
}

/// 50 cases x {chat, tool} x {adversarial, benign}, d = 300 (n < d as in real captures); layer 2 weak signal, layer 5
/// strong, channel-specific directions; case offsets.
fn data() -> ProbeData {
    let (n_cases, d) = (50, 300);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let dirs: Vec<Vec<f64>> = (0..2).map(|_| (0..d).map(|_| normal(&mut rng) / (d as f64).sqrt()).collect()).collect();
    let mut rows = Vec::new();
    let mut xs = [Vec::new(), Vec::new()];
    for c in 0..n_cases {
        let off: Vec<f64> = (0..d).map(|_| normal(&mut rng)).collect();
        for (ci, ch) in ["chat", "tool"].iter().enumerate() {
            for label in [true, false] {
                rows.push(RowInfo {
                    case_id: format!("c{c:02}"),
                    family: ["TP", "IPI"][c % 2].into(),
                    channel: ch.to_string(),
                    label,
                });
                let s = if label { 1.0 } else { -1.0 };
                for (li, strength) in [1.0, 4.0].iter().enumerate() {
                    for j in 0..d {
                        xs[li].push((normal(&mut rng) + off[j] + strength * s * dirs[ci][j]) as f32);
                    }
                }
            }
        }
    }
    let n = rows.len();
    let mut data = ProbeData { rows, matrices: Default::default() };
    let [a, b] = xs;
    data.matrices.insert((2, "last".into()), Array2::from_shape_vec((n, d), a).unwrap());
    data.matrices.insert((5, "last".into()), Array2::from_shape_vec((n, d), b).unwrap());
    data
}

fn python() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    p.exists().then_some(p)
}

fn check(c: CChoice, tag: &str) {
    let Some(py) = python() else {
        eprintln!("skipping: .venv/bin/python missing (run `just setup`)");
        return;
    };
    let data = data();
    let cfg = ProbeConfig {
        folds: 5,
        c,
        methods: vec![Method::Logistic],
        bootstrap: 0,
        permutations: 0,
        keep_weights: true,
        ..Default::default()
    };
    let report = run_probes(&data, &cfg, None).unwrap();
    let dir = tempfile::tempdir().unwrap();
    report.write(dir.path()).unwrap();
    for ((l, p), x) in &data.matrices {
        write_npy_f32(&dir.path().join(format!("X_{l}_{p}.npy")), x);
    }
    let rows = serde_json::json!({
        "channel": data.rows.iter().map(|r| r.channel.clone()).collect::<Vec<_>>(),
        "label": data.rows.iter().map(|r| r.label).collect::<Vec<_>>(),
    });
    std::fs::write(dir.path().join("rows.json"), rows.to_string()).unwrap();
    let out = dir.path().join("parity.json");
    let st = Command::new(py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/probe.py"))
        .args(["parity", "--probes"])
        .arg(dir.path().join("probes.json"))
        .arg("--npy-dir")
        .arg(dir.path())
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "bench/probe.py parity failed");
    let res: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let max_diff = res["max_abs_accuracy_diff_pp"].as_f64().unwrap();
    let min_cos = res["min_cosine"].as_f64().unwrap();
    let n_fits = res["n_fits_compared"].as_u64().unwrap();
    eprintln!("{tag}: max |accuracy diff| {max_diff:.3} pp, min coefficient cosine {min_cos:.6}, {n_fits} fits");
    for cell in res["cells"].as_array().unwrap() {
        if cell["train"] == cell["test"] || cell["diff_pp"].as_f64().unwrap() != 0.0 {
            eprintln!(
                "  layer {} {} -> {}: trustlens {:.4} sklearn {:.4}",
                cell["layer"], cell["train"], cell["test"], cell["accuracy_trustlens"], cell["accuracy_sklearn"]
            );
        }
    }
    assert_eq!(n_fits, 2 * 3 * 5, "every (layer, train set, fold) fit compared");
    // One held-out row of a 100-row cell is 1 pp: a decision value within rounding of 0 may flip.
    assert!(max_diff <= 1.0 + 1e-9, "accuracy differs by {max_diff} pp");
    assert!(min_cos >= 0.99, "coefficient cosine {min_cos}");
    // Sanity: the strong layer is well separated in-channel, so the comparison is not between two chance probes.
    assert!(report.cell(5, "last", "logistic", "chat", "chat").unwrap().accuracy.value > 0.9);
}

#[test]
fn logistic_probe_matches_sklearn_fixed_c() {
    check(CChoice::Fixed(1.0), "C = 1");
}

#[test]
fn logistic_probe_matches_sklearn_with_inner_cv_choice_of_c() {
    // The per-fold C chosen by inner CV is recorded in probes.json and reused by scikit-learn.
    check(CChoice::Grid(vec![0.001, 0.01, 0.1, 1.0]), "inner-CV C");
}
