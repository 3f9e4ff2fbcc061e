//! Bad input to the probes: NaN/inf activations, missing layers, one-class folds, too few cases. Library errors
//! name the layer, position and case; the CLI exits non-zero with one line.
use std::process::Command;

use ndarray::Array2;
use trustlens::probe::{run_probes, CChoice, Method, ProbeConfig, ProbeData, ProbeError, RowInfo};

fn data(n_cases: usize, both_classes: bool) -> ProbeData {
    let mut rows = Vec::new();
    for c in 0..n_cases {
        for ch in ["chat", "tool"] {
            for label in [true, false] {
                rows.push(RowInfo {
                    case_id: format!("c{c}"),
                    family: "TP".into(),
                    channel: ch.into(),
                    label: label || !both_classes,
                });
            }
        }
    }
    let n = rows.len();
    let x = Array2::from_shape_fn((n, 6), |(i, j)| ((i * 7 + j * 3) % 11) as f32 + if i % 2 == 0 { 1.0 } else { 0.0 });
    let mut d = ProbeData { rows, matrices: Default::default() };
    d.matrices.insert((4, "last".into()), x.clone());
    d.matrices.insert((8, "last".into()), x);
    d
}

fn cfg() -> ProbeConfig {
    ProbeConfig {
        folds: 3,
        c: CChoice::Fixed(1.0),
        methods: vec![Method::Logistic],
        bootstrap: 10,
        permutations: 0,
        ..Default::default()
    }
}

#[test]
fn nan_and_inf_name_layer_position_and_case() {
    let mut d = data(6, true);
    d.matrices.get_mut(&(8, "last".to_string())).unwrap()[(5, 2)] = f32::NAN;
    let e = run_probes(&d, &cfg(), None).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ProbeError::NonFinite { layer: 8, row: 5, .. }), "{msg}");
    assert!(msg.contains("layer 8") && msg.contains("'last'") && msg.contains("case 'c1'"), "{msg}");
    let mut d = data(6, true);
    d.matrices.get_mut(&(4, "last".to_string())).unwrap()[(0, 0)] = f32::INFINITY;
    let msg = run_probes(&d, &cfg(), None).unwrap_err().to_string();
    assert!(msg.contains("layer 4") && msg.contains("inf") && msg.contains("case 'c0'"), "{msg}");
}

#[test]
fn missing_layer_is_named() {
    let mut d = data(6, true);
    let msg = d.select_layers(&[4, 30]).unwrap_err().to_string();
    assert!(msg.contains("layer 30") && msg.contains("[4, 8]"), "{msg}");
    d.select_layers(&[8]).unwrap();
    assert_eq!(d.layers(), vec![8]);
}

#[test]
fn too_few_cases_for_the_fold_count() {
    let d = data(2, true);
    let msg = run_probes(&d, &cfg(), None).unwrap_err().to_string();
    assert!(msg.contains("too few cases for 3-fold") && msg.contains("2 distinct case"), "{msg}");
}

#[test]
fn one_class_data_and_one_class_folds() {
    let d = data(6, false);
    let msg = run_probes(&d, &cfg(), None).unwrap_err().to_string();
    assert!(msg.contains("only one class") && msg.contains("adversarial"), "{msg}");

    // Cases with one class each, and a fold whose tool rows are all adversarial.
    let mut d = data(6, true);
    for r in d.rows.iter_mut() {
        if r.channel == "tool" {
            r.label = true;
        }
    }
    let msg = run_probes(&d, &cfg(), None).unwrap_err().to_string();
    assert!(msg.contains("fold") && msg.contains("channel 'tool'") && msg.contains("only one class"), "{msg}");
}

#[test]
fn bad_config_is_refused() {
    let d = data(6, true);
    let mut c = cfg();
    c.c = CChoice::Fixed(-1.0);
    assert!(run_probes(&d, &c, None).unwrap_err().to_string().contains("C must be positive"));
    let mut c = cfg();
    c.folds = 1;
    assert!(run_probes(&d, &c, None).unwrap_err().to_string().contains("at least 2"));
}

#[test]
fn cli_reports_a_missing_run_with_nonzero_exit() {
    let out = Command::new(env!("CARGO_BIN_EXE_trustlens"))
        .args(["probe", "--run", "/nonexistent/run-xyz", "--quiet"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error:") && err.contains("run-xyz"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
