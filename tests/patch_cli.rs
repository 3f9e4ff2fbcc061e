//! `trustlens patch` on bad input: unknown experiment keys, layers past the model's depth, malformed `--sets`, an
//! unknown `--readout`, a missing model. Each exits non-zero with a message that names the bad value, and before any
//! heavy work: the experiments here point at a case file that does not exist, so an error about anything else proves
//! the check ran before the prompts were rendered (and the model loaded, which comes after).
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

/// An experiment whose case file is missing; `model` is written as given, `extra` appended.
fn experiment(dir: &Path, model: &Path, extra: &str) -> PathBuf {
    let text = format!(
        "[model]\npath = \"{}\"\ndtype = \"f32\"\ndevice = \"cpu\"\n\n[cases]\nfile = \"{}\"\n\
         channels = [\"chat\", \"tool\"]\nconditions = [\"adversarial\", \"benign\"]\n\n\
         [capture]\nlayers = [6, 12]\n{extra}",
        model.display(),
        dir.join("no-such-cases.jsonl").display()
    );
    let p = dir.join("exp.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `trustlens patch EXP args...`; returns stderr, asserting a non-zero exit.
fn fails(exp: &Path, args: &[&str]) -> String {
    let out_dir = exp.parent().unwrap().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_trustlens"))
        .arg("patch")
        .arg(exp)
        .args(args)
        .arg("--quiet")
        .arg("--out")
        .arg(&out_dir)
        .output()
        .expect("binary runs");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(!o.status.success(), "`patch {args:?}` should fail; stderr: {err}");
    assert!(!err.contains("no-such-cases"), "`patch {args:?}`: the flag must be checked before the cases: {err}");
    assert!(!out_dir.exists(), "`patch {args:?}` wrote outputs");
    err
}

#[test]
fn unknown_experiment_keys_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::embedded_model();
    let exp = experiment(tmp.path(), &model, "[patch]\nlayer = \"all\"\n");
    let err = fails(&exp, &[]);
    assert!(err.contains("layer"), "{err}");
    assert!(err.contains("exp.toml"), "{err}");

    let exp = experiment(tmp.path(), &model, "batch_sise = 4\n");
    let err = fails(&exp, &[]);
    assert!(err.contains("batch_sise"), "{err}");
}

#[test]
fn layers_past_the_model_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let exp = experiment(tmp.path(), &common::embedded_model(), "");
    let err = fails(&exp, &["--layers", "99"]);
    assert!(err.contains("--layers `99`") && err.contains("layer 99") && err.contains("30 layers"), "{err}");

    let err = fails(&exp, &["--layers", "6,30"]);
    assert!(err.contains("layer 30") && err.contains("0..=29"), "{err}");

    let err = fails(&exp, &["--sets", "12..40"]);
    assert!(err.contains("--sets `12..40`") && err.contains("layer 30") && err.contains("30 layers"), "{err}");

    let err = fails(&exp, &["--sets", "6+99"]);
    assert!(err.contains("`6+99`") && err.contains("layer 99"), "{err}");

    let exp = experiment(tmp.path(), &common::embedded_model(), "");
    std::fs::write(&exp, std::fs::read_to_string(&exp).unwrap().replace("[6, 12]", "[6, 31]")).unwrap();
    let err = fails(&exp, &[]);
    assert!(err.contains("capture.layers") && err.contains("layer 31"), "{err}");
}

#[test]
fn malformed_layer_flags_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let exp = experiment(tmp.path(), &common::embedded_model(), "");
    for bad in ["12+", "5..2", "abc", "1..x"] {
        let err = fails(&exp, &["--sets", bad]);
        assert!(err.contains("--sets") && err.contains(&format!("`{bad}`")), "--sets {bad}: {err}");
    }
    let err = fails(&exp, &["--sets", "5..2"]);
    assert!(err.contains("empty range"), "{err}");
    let err = fails(&exp, &["--sets", "12+"]);
    assert!(err.contains("a layer index is missing"), "{err}");
    let err = fails(&exp, &["--sets", "abc"]);
    assert!(err.contains("`abc` is not a layer index"), "{err}");

    let err = fails(&exp, &["--layers", "6,x"]);
    assert!(err.contains("--layers `6,x`"), "{err}");
}

#[test]
fn unknown_readout_is_named_with_the_choices() {
    let tmp = tempfile::tempdir().unwrap();
    let exp = experiment(tmp.path(), &common::embedded_model(), "");
    let err = fails(&exp, &["--readout", "logit"]);
    assert!(err.contains("--readout") && err.contains("`logit`"), "{err}");
    for choice in ["ln_final", "resid_post", "logits"] {
        assert!(err.contains(choice), "{err}");
    }
}

#[test]
fn missing_model_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-model.gguf");
    let exp = experiment(tmp.path(), &missing, "");
    let err = fails(&exp, &[]);
    assert!(err.contains("no-such-model.gguf") && err.contains("model.path"), "{err}");
    assert_eq!(err.matches("no such file").count(), 1, "the reason once: {err}");
}
