//! `trustlens probe` end to end on small activation files in the capture layout: outputs, and bad input (missing
//! layer, NaN activations, too few cases, an unfinished capture) as one-line errors with exit status 1.
use std::path::Path;
use std::process::Command;

use ndarray::Array2;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use trustlens::activations::{write_atomic, Contents, RowMeta, RunAttrs};

const D: usize = 16;

/// `n_cases` cases x {chat, tool} x {adversarial, benign}; layers 2 and 4, position `last`; the label is visible on
/// dimension 0 at layer 4 only.
fn write_run(dir: &Path, n_cases: usize, complete: bool, nan_at: Option<usize>) -> std::path::PathBuf {
    let mut rows = Vec::new();
    for c in 0..n_cases {
        for ch in ["chat", "tool"] {
            for cond in ["adversarial", "benign"] {
                rows.push(RowMeta {
                    case_id: format!("case-{c:02}"),
                    family: ["TP", "IPI"][c % 2].into(),
                    subtype: None,
                    channel: ch.into(),
                    condition: cond.into(),
                    n_tokens: 10,
                    last_index: 9,
                });
            }
        }
    }
    let n = rows.len();
    let adv: Vec<bool> = rows.iter().map(|r| r.condition == "adversarial").collect();
    let mut rng = ChaCha8Rng::seed_from_u64(n_cases as u64);
    let mut mk = |signal: f32| {
        Array2::from_shape_fn((n, D), |(i, j)| {
            let noise: f32 = rng.gen_range(-1.0..1.0);
            noise + if j == 0 && adv[i] { signal } else { 0.0 }
        })
    };
    let l2 = mk(0.0);
    let mut l4 = mk(3.0);
    if let Some(r) = nan_at {
        l4[(r, 3)] = f32::NAN;
    }
    let contents = Contents {
        attrs: RunAttrs {
            model_path: "synthetic".into(),
            dtype: "f32".into(),
            device: "cpu".into(),
            hook_point: "hook_resid_post".into(),
            store_dtype: "f32".into(),
            shard: "all".into(),
            n_prompts_total: n,
            complete,
            d_model: D,
            n_layers_model: 6,
            ..Default::default()
        },
        layers: vec![2, 4],
        positions: vec!["last".into()],
        rows,
        prompt_index: (0..n as u64).collect(),
        position_index: vec![vec![9; n]],
        data: vec![l2, l4],
    };
    let run = dir.join("run");
    std::fs::create_dir_all(&run).unwrap();
    write_atomic(&run.join("activations.h5"), &contents).unwrap();
    run
}

fn probe(args: &[&str]) -> std::process::Output {
    // The file was written by this (multi-threaded) test process, whose HDF5 library may still hold its lock for a
    // moment after the close; the reader is another process, so skip HDF5's advisory locking here.
    Command::new(env!("CARGO_BIN_EXE_trustlens"))
        .env("HDF5_USE_FILE_LOCKING", "FALSE")
        .arg("probe")
        .args(args)
        .output()
        .unwrap()
}

fn one_line_error(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(1), "exit status");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.starts_with("error:"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    err
}

#[test]
fn probe_writes_csv_and_json() {
    let tmp = tempfile::tempdir().unwrap();
    let run = write_run(tmp.path(), 12, true, None);
    let out_dir = tmp.path().join("fig");
    let out = probe(&[
        "--run",
        run.to_str().unwrap(),
        "--folds",
        "3",
        "--bootstrap",
        "50",
        "--permutations",
        "20",
        "--out",
        out_dir.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let csv = std::fs::read_to_string(out_dir.join("probes.csv")).unwrap();
    // 2 layers x 1 position x 3 methods x 3 train sets x 2 test channels.
    assert_eq!(csv.lines().count(), 1 + 2 * 3 * 3 * 2);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("probes.json")).unwrap()).unwrap();
    assert_eq!(json["n_rows"], 48);
    assert_eq!(json["n_cases"], 12);
    assert_eq!(json["folds"].as_array().unwrap().len(), 3);
    assert_eq!(json["config"]["folds"], 3);
    let cells = json["cells"].as_array().unwrap();
    let find = |layer: u64, m: &str, tr: &str, te: &str| {
        cells
            .iter()
            .find(|c| c["layer"] == layer && c["method"] == m && c["train"] == tr && c["test"] == te)
            .unwrap()
            .clone()
    };
    let strong = find(4, "logistic", "chat", "chat");
    assert!(strong["auroc"]["value"].as_f64().unwrap() > 0.95, "{strong}");
    assert_eq!(strong["folds"].as_array().unwrap().len(), 3);
    assert!(strong["p_value"].as_f64().unwrap() < 0.1);
    let none = find(2, "logistic", "chat", "chat");
    assert!(none["auroc"]["value"].as_f64().unwrap() < 0.8, "{none}");
}

#[test]
fn missing_layer_nan_too_few_cases_and_unfinished_runs_fail_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let run = write_run(tmp.path(), 6, true, None);
    let r = run.to_str().unwrap();
    let err = one_line_error(&probe(&["--run", r, "--layers", "2,9", "--quiet"]));
    assert!(err.contains("layer 9") && err.contains("[2, 4]"), "{err}");
    let err = one_line_error(&probe(&["--run", r, "--positions", "user_end", "--quiet"]));
    assert!(err.contains("position 'user_end'"), "{err}");
    let err = one_line_error(&probe(&["--run", r, "--folds", "10", "--quiet"]));
    assert!(err.contains("too few cases for 10-fold") && err.contains("6 distinct case"), "{err}");

    let tmp2 = tempfile::tempdir().unwrap();
    let run = write_run(tmp2.path(), 6, true, Some(9));
    let err = one_line_error(&probe(&["--run", run.to_str().unwrap(), "--quiet"]));
    assert!(err.contains("layer 4") && err.contains("case 'case-02'") && err.contains("NaN"), "{err}");

    let tmp3 = tempfile::tempdir().unwrap();
    let run = write_run(tmp3.path(), 6, false, None);
    let err = one_line_error(&probe(&["--run", run.to_str().unwrap(), "--quiet"]));
    assert!(err.contains("not complete"), "{err}");
}
