//! `trustlens capture` and `trustlens activations` end to end on the embedded model with a few cases: the HDF5
//! layout (checked by h5py), kill/resume identity, shards and merge, bad input.
mod common;

use common::{small_cases, text};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use trustlens::activations::ActivationFile;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trustlens"));
    c.current_dir(root());
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("binary runs")
}

/// An experiment file in `dir`; `extra` is appended to [capture].
fn experiment(dir: &Path, cases: &Path, channels: &str, layers: &str, positions: &str, extra: &str) -> PathBuf {
    let toml = format!(
        "[model]\npath = \"{MODEL}\"\ndtype = \"f32\"\ndevice = \"cpu\"\n\n[cases]\nfile = \"{}\"\nchannels = {channels}\n\
         tool_rendering = \"hermes\"\n\n[capture]\nlayers = {layers}\npositions = {positions}\nbatch_size = 2\n\
         run = \"t\"\nout_dir = \"{}\"\n{extra}",
        cases.display(),
        dir.join("out").display()
    );
    let p = dir.join("exp.toml");
    std::fs::write(&p, toml).unwrap();
    p
}

fn h5(dir: &Path) -> PathBuf {
    dir.join("out/t/activations.h5")
}

#[test]
fn capture_layout_is_read_by_h5py_and_the_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = small_cases(tmp.path(), 1);
    let exp = experiment(
        tmp.path(),
        &cases,
        "[\"chat\", \"tool\"]",
        "[2, 4]",
        "[\"last\", \"payload_last\", \"user_end\"]",
        "",
    );
    let o = run(&["capture", exp.to_str().unwrap(), "--threads", "1", "--quiet"]);
    assert!(o.status.success(), "{}", text(&o));
    let file = h5(tmp.path());
    let py = root().join(".venv/bin/python");
    let o = Command::new(&py)
        .args([
            root().join("scripts/check_h5.py").to_str().unwrap(),
            file.to_str().unwrap(),
            "--rows",
            "12",
            "--layers",
            "2,4",
            "--positions",
            "last,payload_last,user_end",
            "--d-model",
            "576",
            "--complete",
        ])
        .output()
        .expect("venv python runs");
    assert!(o.status.success(), "h5py check failed: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"families\": [\"CTS\", \"IPI\", \"TP\"]"), "{out}");
    assert!(out.contains("\"channels\": [\"chat\", \"tool\"]"), "{out}");

    let f = ActivationFile::open(&file).unwrap();
    assert_eq!(f.layers, vec![2, 4]);
    assert_eq!(f.rows.len(), 12);
    assert!(f.attrs.complete);
    assert_eq!(f.attrs.hook_point, "hook_resid_post");
    assert_eq!(f.attrs.tool_rendering, "hermes");
    let x = f.read(4, "last").unwrap();
    assert_eq!(x.dim(), (12, 576));
    // Rows in prompt order: case x channel x condition.
    let order: Vec<(String, String)> = f.rows.iter().map(|r| (r.channel.clone(), r.condition.clone())).collect();
    assert_eq!(order[0], ("chat".into(), "adversarial".into()));
    assert_eq!(order[1], ("chat".into(), "benign".into()));
    assert_eq!(order[2], ("tool".into(), "adversarial".into()));
    // In the chat channel the payload ends the user message.
    let (pl, ue) = (&f.position_index[1], &f.position_index[2]);
    assert_eq!(pl[0], ue[0]);
    assert!(ue[2] > pl[2], "TP tool channel: the poisoned description precedes the user turn");
    assert_eq!(f.rows[6].family, "IPI");
    assert!(ue[6] < pl[6], "IPI tool channel: the tool result follows the user turn");
    // The last-token activation of a row equals a single-prompt forward pass (<= 1e-5: padding noise).
    let llama = trustlens::model::load(&root().join(MODEL), Default::default()).unwrap();
    let assets = trustlens::prompt::PromptAssets::load(&root().join(MODEL)).unwrap();
    let loaded = trustlens::cases::load_cases(&cases).unwrap();
    let r = trustlens::cases::render_case(
        &loaded[0].case,
        trustlens::cases::Channel::Tool,
        trustlens::cases::Condition::Benign,
        &assets,
        &trustlens::cases::RenderOptions::with_tool_rendering(trustlens::cases::ToolRendering::Hermes),
    )
    .unwrap();
    let batch = trustlens::model::Batch::left_padded(std::slice::from_ref(&r.token_ids), 0).unwrap();
    let hp = trustlens::model::HookPoint::ResidPost(4);
    let out = llama.forward(&batch, &trustlens::model::HookSpec::new().capture_last(hp)).unwrap();
    let v: Vec<f32> = Vec::try_from(out.cache.get(hp).unwrap().flatten(0, -1)).unwrap();
    let diff = v.iter().zip(x.row(3).iter()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(diff <= 1e-4, "row 3 differs from a lone forward pass by {diff}");
    assert_eq!(f.rows[3].n_tokens, r.token_ids.len());

    // inspect
    let o = run(&["activations", "inspect", file.to_str().unwrap()]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for needle in
        ["layers      [2, 4] of 30", "family      CTS 4, IPI 4, TP 4", "channel     chat 6, tool 6", "layer   4 last"]
    {
        assert!(t.contains(needle), "missing `{needle}` in\n{t}");
    }

    // Re-running a finished run does nothing; a different config is refused unless --overwrite.
    let o = run(&["capture", exp.to_str().unwrap(), "--quiet"]);
    assert!(o.status.success() && text(&o).contains("already complete"), "{}", text(&o));
    let o = run(&["capture", exp.to_str().unwrap(), "--quiet", "--layers", "3"]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("different model or configuration") && t.contains("--overwrite"), "{t}");
    assert_eq!(t.trim().lines().count(), 1, "one-line error: {t}");
    assert!(ActivationFile::open(&file).unwrap().attrs.complete, "the finished run is kept");
    let o = run(&["capture", exp.to_str().unwrap(), "--quiet", "--layers", "3", "--overwrite"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(ActivationFile::open(&file).unwrap().layers, vec![3]);
}

fn wait_for_record(journal: &Path, child: &mut std::process::Child) {
    let t0 = Instant::now();
    loop {
        if let Ok(b) = std::fs::read(journal) {
            if b.windows(8).any(|w| w == b"TLREC001") {
                return;
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("capture ended ({st}) before it could be killed");
        }
        assert!(t0.elapsed() < Duration::from_secs(300), "no journal record after 300 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn killed_capture_resumes_to_a_bitwise_identical_file() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = small_cases(tmp.path(), 2);
    let exp = experiment(tmp.path(), &cases, "[\"chat\"]", "[1, 3]", "[\"last\", \"payload_last\"]", "");
    let e = exp.to_str().unwrap();
    let args = ["capture", e, "--threads", "1", "--quiet", "--checkpoint-secs", "0"];
    // Uninterrupted reference run.
    let o = run(&args);
    assert!(o.status.success(), "{}", text(&o));
    let reference = std::fs::read(h5(tmp.path())).unwrap();
    std::fs::remove_dir_all(tmp.path().join("out")).unwrap();

    // Killed with SIGKILL after its first batch, then with SIGINT, then finished.
    let journal = tmp.path().join("out/t/capture.journal");
    for sig in [libc::SIGKILL, libc::SIGINT] {
        let mut child =
            bin().args(args).args(["--pause-ms", "400"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        if sig == libc::SIGINT {
            // Wait for a second record: the resumed run appends after the first one.
            let n0 = std::fs::read(&journal).unwrap().windows(8).filter(|w| *w == b"TLREC001").count();
            let t0 = Instant::now();
            while std::fs::read(&journal).unwrap().windows(8).filter(|w| *w == b"TLREC001").count() <= n0 {
                assert!(t0.elapsed() < Duration::from_secs(300));
                std::thread::sleep(Duration::from_millis(5));
            }
        } else {
            wait_for_record(&journal, &mut child);
        }
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = child.wait().unwrap();
        assert!(!st.success(), "the capture was killed");
        // A readable checkpoint is always there.
        let f = ActivationFile::open(&h5(tmp.path())).expect("checkpoint readable after a kill");
        assert!(!f.attrs.complete);
        assert!(f.rows.len() < 12, "{} rows", f.rows.len());
    }
    // Simulate a kill in the middle of a journal write: a torn tail is dropped on resume.
    {
        use std::io::Write;
        let mut j = std::fs::OpenOptions::new().append(true).open(&journal).unwrap();
        j.write_all(b"TLREC001\x10\x00\x00\x00\x00\x00\x00\x00half a rec").unwrap();
    }
    let o = run(&args);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("resumed") && !t.contains(" 0 resumed"), "{t}");
    assert!(!journal.exists(), "journal removed after completion");
    let resumed = std::fs::read(h5(tmp.path())).unwrap();
    assert!(
        resumed == reference,
        "resumed file differs from the uninterrupted run ({} vs {} bytes)",
        resumed.len(),
        reference.len()
    );
}

#[test]
fn shards_merge_into_the_full_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = small_cases(tmp.path(), 1);
    let exp = experiment(tmp.path(), &cases, "[\"chat\"]", "[2]", "[\"last\"]", "");
    let e = exp.to_str().unwrap();
    let o = run(&["capture", e, "--threads", "1", "--quiet"]);
    assert!(o.status.success(), "{}", text(&o));
    for s in ["1/2", "2/2"] {
        let o = run(&["capture", e, "--threads", "1", "--quiet", "--shard", s]);
        assert!(o.status.success(), "{}", text(&o));
    }
    let s1 = tmp.path().join("out/t/shard-1-of-2/activations.h5");
    let s2 = tmp.path().join("out/t/shard-2-of-2/activations.h5");
    assert_eq!(ActivationFile::open(&s1).unwrap().rows.len(), 3);
    let merged = tmp.path().join("merged.h5");
    let m = merged.to_str().unwrap();
    // Missing shard refused.
    let o = run(&["activations", "merge", m, s1.to_str().unwrap()]);
    assert!(!o.status.success() && text(&o).contains("missing shard(s) 2/2"), "{}", text(&o));
    let o = run(&["activations", "merge", m, s2.to_str().unwrap(), s1.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let full = ActivationFile::open(&h5(tmp.path())).unwrap();
    let mf = ActivationFile::open(&merged).unwrap();
    assert_eq!(full.rows, mf.rows);
    assert_eq!(full.prompt_index, mf.prompt_index);
    assert_eq!(full.attrs.config_sha256, mf.attrs.config_sha256);
    let (a, b) = (full.read(2, "last").unwrap(), mf.read(2, "last").unwrap());
    let diff = (&a - &b).iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(diff <= 1e-4, "merged shards differ from the full run by {diff}");

    // A shard with another layer set is refused.
    let o = run(&["capture", e, "--threads", "1", "--quiet", "--shard", "2/2", "--layers", "3", "--run", "u"]);
    assert!(o.status.success(), "{}", text(&o));
    let u2 = tmp.path().join("out/u/shard-2-of-2/activations.h5");
    let o = run(&["activations", "merge", m, "--overwrite", s1.to_str().unwrap(), u2.to_str().unwrap()]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains("differ in layers"), "{t}");
}

/// `store = "f16"`: h5py sees float16 datasets; the reader widens them to f32, equal to the f32 run rounded to f16.
#[test]
fn f16_store_is_the_f32_run_rounded() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = small_cases(tmp.path(), 1);
    let exp32 = experiment(tmp.path(), &cases, "[\"chat\"]", "[3]", "[\"last\"]", "");
    let o = run(&["capture", exp32.to_str().unwrap(), "--threads", "1", "--quiet"]);
    assert!(o.status.success(), "{}", text(&o));
    let x32 = ActivationFile::open(&h5(tmp.path())).unwrap().read(3, "last").unwrap();

    let dir16 = tmp.path().join("f16");
    std::fs::create_dir_all(&dir16).unwrap();
    let exp16 = experiment(&dir16, &cases, "[\"chat\"]", "[3]", "[\"last\"]", "store = \"f16\"\n");
    let o = run(&["capture", exp16.to_str().unwrap(), "--threads", "1", "--quiet"]);
    assert!(o.status.success(), "{}", text(&o));
    let file = h5(&dir16);
    let o = Command::new(root().join(".venv/bin/python"))
        .args([
            root().join("scripts/check_h5.py").to_str().unwrap(),
            file.to_str().unwrap(),
            "--rows",
            "6",
            "--layers",
            "3",
            "--positions",
            "last",
            "--d-model",
            "576",
            "--complete",
            "--dtype",
            "f16",
        ])
        .output()
        .expect("venv python runs");
    assert!(o.status.success(), "h5py check failed: {}", text(&o));
    let f = ActivationFile::open(&file).unwrap();
    assert_eq!(f.attrs.store_dtype, "f16");
    let x16 = f.read(3, "last").unwrap();
    assert_eq!(x16.dim(), x32.dim());
    for (a, b) in x32.iter().zip(x16.iter()) {
        assert_eq!(half::f16::from_f32(*a).to_f32(), *b, "stored f16 is the f32 value rounded to nearest");
    }
}

/// Out-of-memory handling: with every chunk above one prompt failing as CUDA OOM would (test seam), the capture halves
/// its batch down to 1 and finishes with the same rows as an unbatched run.
#[test]
fn out_of_memory_halves_the_batch_and_finishes() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = small_cases(tmp.path(), 1);
    let exp = experiment(tmp.path(), &cases, "[\"chat\"]", "[2]", "[\"last\"]", "");
    let o = bin()
        .args(["capture", exp.to_str().unwrap(), "--threads", "1", "--quiet"])
        .env("TRUSTLENS_FAULT_OOM_ABOVE", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let halved = ActivationFile::open(&h5(tmp.path())).unwrap().read(2, "last").unwrap();
    let o = run(&["capture", exp.to_str().unwrap(), "--threads", "1", "--quiet", "--batch-size", "1", "--overwrite"]);
    assert!(o.status.success(), "{}", text(&o));
    let single = ActivationFile::open(&h5(tmp.path())).unwrap().read(2, "last").unwrap();
    assert_eq!(halved, single, "batch 1 after halving is the unbatched run");

    // Even one prompt does not fit: a clear error, finished work kept.
    let o = bin()
        .args(["capture", exp.to_str().unwrap(), "--threads", "1", "--quiet", "--overwrite"])
        .env("TRUSTLENS_FAULT_OOM_ABOVE", "0")
        .output()
        .unwrap();
    let t = text(&o);
    assert!(!o.status.success() && t.contains("out of memory with a single prompt"), "{t}");
}

#[test]
fn bad_input_gives_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = small_cases(tmp.path(), 1);
    let one_line_failure = |o: &Output, needle: &str| {
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success(), "expected failure: {}", text(o));
        assert!(err.contains(needle), "missing `{needle}` in {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    };
    // Layer past the depth.
    let exp = experiment(tmp.path(), &cases, "[\"chat\"]", "[6, 30]", "[\"last\"]", "");
    one_line_failure(&run(&["capture", exp.to_str().unwrap(), "--quiet"]), "layer 30 is past the model's depth");
    // Invalid case file: a malformed line, and a case that fails validation.
    let bad = tmp.path().join("bad.jsonl");
    let good = std::fs::read_to_string(&cases).unwrap();
    std::fs::write(&bad, format!("{good}{{not json\n")).unwrap();
    let exp = experiment(tmp.path(), &bad, "[\"chat\"]", "[2]", "[\"last\"]", "");
    one_line_failure(&run(&["capture", exp.to_str().unwrap(), "--quiet"]), "could not be read");
    let mut v2: serde_json::Value = serde_json::from_str(good.lines().next().unwrap()).unwrap();
    v2["payload"]["action"] = serde_json::Value::String(String::new());
    std::fs::write(&bad, format!("{}\n", serde_json::to_string(&v2).unwrap())).unwrap();
    one_line_failure(&run(&["capture", exp.to_str().unwrap(), "--quiet"]), "bad.jsonl");
    // Unwritable output: out_dir under a regular file.
    let exp = experiment(tmp.path(), &cases, "[\"chat\"]", "[2]", "[\"last\"]", "");
    let blocker = tmp.path().join("blocker");
    std::fs::write(&blocker, "x").unwrap();
    let o = run(&["capture", exp.to_str().unwrap(), "--quiet", "--out-dir", blocker.join("sub").to_str().unwrap()]);
    one_line_failure(&o, "blocker");
    // Unknown key with a suggestion.
    let exp_text = std::fs::read_to_string(&exp).unwrap().replace("batch_size", "batch_sise");
    std::fs::write(&exp, exp_text).unwrap();
    one_line_failure(&run(&["capture", exp.to_str().unwrap(), "--quiet"]), "did you mean `batch_size`");
    // Bad shard spec.
    let exp = experiment(tmp.path(), &cases, "[\"chat\"]", "[2]", "[\"last\"]", "");
    one_line_failure(&run(&["capture", exp.to_str().unwrap(), "--quiet", "--shard", "3/2"]), "--shard");
}
