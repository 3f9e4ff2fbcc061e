//! `trustlens sweep` end to end on the embedded model with a few cases: every stage runs once, a re-run is all
//! cached, editing one section re-runs only the stages that read it, and bad experiment files fail before any work.
mod common;

use common::{small_cases, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

fn sweep(dir: &Path, exp: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trustlens"))
        .current_dir(dir)
        .arg("sweep")
        .arg(exp)
        .args(extra)
        .output()
        .expect("binary runs")
}

fn write_experiment(dir: &Path, capture_layers: &str, patch_layers: &str, extra: &str) -> PathBuf {
    let toml = format!(
        "[model]\npath = \"{}\"\ndtype = \"f32\"\ndevice = \"cpu\"\n\n\
         [cases]\nfile = \"cases.jsonl\"\nchannels = [\"chat\", \"tool\"]\ntool_rendering = \"hermes\"\n\n\
         [capture]\nlayers = {capture_layers}\npositions = [\"last\"]\nbatch_size = 4\nrun = \"t\"\n\n\
         [probe]\nmethods = [\"logistic\", \"diffmeans\"]\nfolds = 3\nbootstrap = 50\npermutations = 0\n\n\
         [patch]\nlayers = {patch_layers}\nmax_cases = 1\nn_boot = 50\n{extra}",
        root().join(MODEL).display()
    );
    let p = dir.join("exp.toml");
    std::fs::write(&p, toml).unwrap();
    p
}

fn manifest(dir: &Path) -> serde_json::Value {
    let t = std::fs::read_to_string(dir.join("figures/t/manifest.json")).expect("manifest.json");
    serde_json::from_str(&t).unwrap()
}

/// (stage, status) pairs from the manifest.
fn statuses(dir: &Path) -> Vec<(String, String)> {
    manifest(dir)["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["stage"].as_str().unwrap().to_string(), s["status"].as_str().unwrap().to_string()))
        .collect()
}

fn st(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[test]
fn sweep_caches_stages_and_reruns_only_what_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    small_cases(dir, 2);
    let exp = write_experiment(dir, "[2, 4]", "[3]", "");

    let o = sweep(dir, &exp, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(statuses(dir), st(&[("capture", "ran"), ("probe", "ran"), ("patch", "ran"), ("figures", "ran")]));
    for f in ["activations/t/activations.h5", "figures/t/probes.csv", "figures/t/patching.csv"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let m = manifest(dir);
    assert_eq!(m["model_sha256"].as_str().unwrap().split(':').nth(1).unwrap().len(), 64);
    assert!(m["experiment_text"].as_str().unwrap().contains("[patch]"));
    assert!(m["effective_config"].as_str().unwrap().contains("[sweep]"), "defaults are filled in");
    let figures = &m["stages"][3]["outputs"];
    let names: Vec<&str> = figures.as_array().unwrap().iter().map(|o| o["path"].as_str().unwrap()).collect();
    assert!(names.iter().any(|n| n.ends_with(".png")) && names.iter().any(|n| n.ends_with(".svg")), "{names:?}");

    // Nothing changed: every stage cached.
    let o = sweep(dir, &exp, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("all stages cached"), "{}", text(&o));
    assert_eq!(
        statuses(dir),
        st(&[("capture", "cached"), ("probe", "cached"), ("patch", "cached"), ("figures", "cached")])
    );

    // A new patch layer list: patching and figures only.
    let exp = write_experiment(dir, "[2, 4]", "[1, 3]", "");
    let o = sweep(dir, &exp, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(statuses(dir), st(&[("capture", "cached"), ("probe", "cached"), ("patch", "ran"), ("figures", "ran")]));

    // A new capture layer list: capture, probes and figures; patching stays cached.
    let exp = write_experiment(dir, "[2, 5]", "[1, 3]", "");
    let o = sweep(dir, &exp, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(statuses(dir), st(&[("capture", "ran"), ("probe", "ran"), ("patch", "cached"), ("figures", "ran")]));
    let probes = std::fs::read_to_string(dir.join("figures/t/probes.csv")).unwrap();
    assert!(probes.lines().any(|l| l.starts_with("5,")), "probes cover the new layer");

    // A deleted output invalidates its stage; --force re-runs a stage and what reads it.
    std::fs::remove_file(dir.join("figures/t/patching.csv")).unwrap();
    let o = sweep(dir, &exp, &["--dry-run"]);
    assert!(text(&o).contains("patching.csv changed or is missing"), "{}", text(&o));
    let o = sweep(dir, &exp, &["--force", "probe", "--stages", "capture,probe,patch"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(statuses(dir), st(&[("capture", "cached"), ("probe", "ran"), ("patch", "ran")]));
}

#[test]
fn bad_experiments_fail_before_any_work() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    small_cases(dir, 1);
    let cases: [(&str, &str, &str, &[&str]); 6] = [
        // unknown keys: named, with the nearest valid one
        ("[2]", "[2]", "\n[sweep]\nstage = [\"capture\"]\n", &["stage", "stages"]),
        ("[2]", "[2]", "random_contrl = true\n", &["random_contrl", "random_control"]),
        // layers past the model's depth (30 blocks)
        ("[2, 30]", "[2]", "", &["layer 30", "30 layers"]),
        ("[2]", "[31]", "", &["patch.layers", "layer 31"]),
        ("[2]", "[2]", "sets = [\"2+40\"]\n", &["patch.sets", "40"]),
        // unknown stage
        ("[2]", "[2]", "\n[sweep]\nstages = [\"capture\", \"figure\"]\n", &["figure", "figures"]),
    ];
    for (capture, patch, extra, needles) in cases {
        let exp = write_experiment(dir, capture, patch, extra);
        let o = sweep(dir, &exp, &[]);
        let t = text(&o);
        assert!(!o.status.success(), "should fail: {t}");
        for n in needles {
            assert!(t.contains(n), "missing `{n}` in: {t}");
        }
        assert!(!dir.join("activations").exists() && !dir.join("figures").exists(), "no work was done: {t}");
    }
    // A missing model.
    let exp = write_experiment(dir, "[2]", "[2]", "");
    let toml = std::fs::read_to_string(&exp).unwrap().replace(MODEL, "models/nope.gguf");
    std::fs::write(&exp, toml).unwrap();
    let o = sweep(dir, &exp, &[]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("nope.gguf"), "{t}");
    assert!(!dir.join("activations").exists(), "no work was done: {t}");
}
