//! `trustlens patch --run activations/<run>`: patching from a capture run. The run supplies the experiment, the blocks
//! and the per-prompt last-token indices, and its stored values are checked against the clean pass; the results equal
//! patching from the experiment file. Bad runs (missing blocks, no `last` position, another hook, no benign control,
//! an unfinished or tampered file, no file at all) fail with a message naming the problem.
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::*;

/// One TP case, both channels; `conditions`, `positions`, `hook` as given; run `name` under `dir/acts`.
fn experiment(dir: &Path, name: &str, conditions: &str, positions: &str, hook: &str) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("experiments/cases/channel-trust.jsonl")).unwrap();
    let line = text.lines().find(|l| l.contains("\"family\":\"TP\"")).expect("a TP case");
    let cases = dir.join("cases.jsonl");
    std::fs::write(&cases, format!("{line}\n")).unwrap();
    let toml = format!(
        "[model]\npath = \"{}\"\ndtype = \"f32\"\ndevice = \"cpu\"\n\n[cases]\nfile = \"{}\"\n\
         channels = [\"chat\", \"tool\"]\nconditions = {conditions}\ntool_rendering = \"hermes\"\n\n\
         [capture]\nlayers = [4, 12, 20]\npositions = {positions}\nhook = \"{hook}\"\nbatch_size = 4\n\
         run = \"{name}\"\nout_dir = \"{}\"\n",
        embedded_model().display(),
        cases.display(),
        dir.join("acts").display()
    );
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, toml).unwrap();
    p
}

const BOTH: &str = "[\"adversarial\", \"benign\"]";
const LAST: &str = "[\"last\", \"payload_last\"]";
const RESID: &str = "hook_resid_post";

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_trustlens"))
}

fn capture(exp: &Path) {
    let o = bin().args(["capture", exp.to_str().unwrap(), "--threads", "2", "--quiet"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

/// `trustlens patch` with `args`; the parsed patching.json on success, else the output text.
fn patch(args: &[&str], out: &Path) -> Result<serde_json::Value, String> {
    let o = bin()
        .arg("patch")
        .args(args)
        .args(["--quiet", "--threads", "2", "--n-boot", "50", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    if !o.status.success() {
        assert!(!out.exists(), "a failed patch wrote {}", out.display());
        return Err(text(&o));
    }
    Ok(serde_json::from_str(&std::fs::read_to_string(out.join("patching.json")).unwrap()).unwrap())
}

#[test]
fn patching_from_a_run_equals_patching_from_its_experiment() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let exp = experiment(t, "good", BOTH, LAST, RESID);
    capture(&exp);
    let run = t.join("acts/good");
    let from_exp = patch(&[exp.to_str().unwrap(), "--layers", "4,12,20", "--sets", "4+20"], &t.join("e")).unwrap();
    // The run's blocks are the default layer list.
    let from_run = patch(&["--run", run.to_str().unwrap(), "--sets", "4+20"], &t.join("r")).unwrap();
    let (pe, pr) = (from_exp["pairs"].as_array().unwrap(), from_run["pairs"].as_array().unwrap());
    assert_eq!(pe.len(), 2 * 4 * 2, "2 channels x 4 layer sets x 2 directions");
    assert_eq!(pe.len(), pr.len());
    for (e, r) in pe.iter().zip(pr) {
        assert!(e.get("stored_cos").is_none(), "no stored values without --run: {e}");
        let c = r["stored_cos"].as_f64().expect("stored_cos with --run");
        assert!(c > 0.9999, "stored vs clean cosine {c}");
        let mut r = r.clone();
        r.as_object_mut().unwrap().remove("stored_cos");
        assert_eq!(e, &r, "the same pair patched from the run and from the experiment");
    }
    assert_eq!(from_run["config"]["run"].as_str().unwrap(), run.join("activations.h5").to_str().unwrap());
    assert!(from_run["config"]["stored_min_cos"].as_f64().unwrap() > 0.9999);
    // The default output folder is named after the run's folder.
    let o = bin()
        .current_dir(t)
        .args(["patch", "--run", run.to_str().unwrap(), "--layers", "12", "--quiet", "--n-boot", "10"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(t.join("figures/good/patching.csv").exists());

    // Blocks the run does not hold, and an experiment given together with --run.
    let r = run.to_str().unwrap();
    let err = patch(&["--run", r, "--layers", "4,5"], &t.join("x")).unwrap_err();
    assert!(err.contains("--layers `4,5`") && err.contains("block 5 is not in the run"), "{err}");
    assert!(err.contains("4, 12, 20"), "names the blocks it holds: {err}");
    let err = patch(&["--run", r, "--sets", "12..14"], &t.join("x")).unwrap_err();
    assert!(err.contains("--sets `12..14`") && err.contains("block 13"), "{err}");
    let err = patch(&["--run", r, "--layers", "40"], &t.join("x")).unwrap_err();
    assert!(err.contains("layer 40") && err.contains("30 layers"), "{err}");
    let err = patch(&[exp.to_str().unwrap(), "--run", r], &t.join("x")).unwrap_err();
    assert!(err.contains("cannot be used with"), "{err}");
    let err = patch(&[], &t.join("x")).unwrap_err();
    assert!(err.contains("EXPERIMENT"), "{err}");

    // A tampered file (every stored value negated): refused at the first batch, naming the case and block.
    let f = trustlens::activations::ActivationFile::open(&run.join("activations.h5")).unwrap();
    let contents = trustlens::activations::Contents {
        attrs: f.attrs.clone(),
        layers: f.layers.clone(),
        positions: f.positions.clone(),
        rows: f.rows.clone(),
        prompt_index: f.prompt_index.clone(),
        position_index: f.position_index.clone(),
        data: f.read_all().unwrap().into_iter().map(|a| -a).collect(),
    };
    let bad = t.join("tampered/activations.h5");
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    trustlens::activations::write_atomic(&bad, &contents).unwrap();
    let err = patch(&["--run", bad.to_str().unwrap(), "--layers", "12"], &t.join("x")).unwrap_err();
    assert!(err.contains("disagrees with this model's clean pass") && err.contains("block 12"), "{err}");
    assert!(err.contains("cosine -1.0000"), "{err}");

    // An unfinished capture (a checkpoint).
    let mut contents = contents;
    contents.attrs.complete = false;
    trustlens::activations::write_atomic(&bad, &contents).unwrap();
    let err = patch(&["--run", bad.to_str().unwrap()], &t.join("x")).unwrap_err();
    assert!(err.contains("unfinished"), "{err}");
}

#[test]
fn runs_that_cannot_be_patched_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let err = patch(&["--run", t.join("acts/none").to_str().unwrap()], &t.join("x")).unwrap_err();
    assert!(err.contains("no activation file") && err.contains("trustlens capture"), "{err}");

    let cases: [(&str, &str, &str, &str, &str); 3] = [
        ("adv-only", "[\"adversarial\"]", LAST, RESID, "holds no benign control"),
        ("no-last", BOTH, "[\"payload_last\"]", RESID, "patching needs `last`"),
        ("mlp", BOTH, LAST, "hook_mlp_out", "holds `hook_mlp_out`"),
    ];
    for (name, conditions, positions, hook, want) in cases {
        let exp = experiment(t, name, conditions, positions, hook);
        capture(&exp);
        let err = patch(&["--run", t.join("acts").join(name).to_str().unwrap()], &t.join("x")).unwrap_err();
        assert!(err.contains(want), "{name}: {err}");
    }
}
