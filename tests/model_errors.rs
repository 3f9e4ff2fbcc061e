//! Bad input to `trustlens model ...`: one line naming the file and the problem, exit status != 0, no panic.
mod common;

use common::*;
use std::path::Path;
use std::process::Command;

fn trustlens(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_trustlens")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr)
}

/// Run, and check: failure, no panic or backtrace, one line, mentioning each of `needles`.
fn fails_with(args: &[&str], needles: &[&str]) {
    let (code, err) = trustlens(args);
    assert_ne!(code, 0, "{args:?} succeeded");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{args:?} panicked: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: expected one line, got: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: `{n}` not in: {err}");
    }
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[test]
fn missing_config() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().to_str().unwrap();
    fails_with(&["model", "inspect", p], &["config.json"]);
}

#[test]
fn malformed_config() {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&fixture("tiny-llama"), d.path());
    std::fs::write(d.path().join("config.json"), "{\"hidden_size\": 64,").unwrap();
    fails_with(&["model", "inspect", d.path().to_str().unwrap()], &["config.json", "bad config"]);
}

#[test]
fn unsupported_architecture() {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&fixture("tiny-llama"), d.path());
    edit_config(d.path(), |v| {
        v["architectures"] = serde_json::json!(["GPTNeoXForCausalLM"]);
        v["model_type"] = serde_json::json!("gpt_neox");
    });
    fails_with(&["model", "inspect", d.path().to_str().unwrap()], &["config.json", "GPTNeoXForCausalLM"]);
}

#[test]
fn weight_shape_disagrees_with_config() {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&fixture("tiny-llama"), d.path());
    edit_config(d.path(), |v| v["intermediate_size"] = serde_json::json!(96));
    fails_with(
        &["model", "inspect", "--verify", d.path().to_str().unwrap()],
        &["model.safetensors", "mlp.gate_proj.weight", "[128, 64]", "[96, 64]"],
    );
}

#[test]
fn truncated_safetensors() {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&fixture("tiny-llama"), d.path());
    let p = d.path().join("model.safetensors");
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 1000]).unwrap();
    fails_with(&["model", "inspect", d.path().to_str().unwrap()], &["model.safetensors", "truncated"]);
    // A cut inside the header is caught too.
    std::fs::write(&p, &bytes[..20]).unwrap();
    fails_with(&["model", "inspect", d.path().to_str().unwrap()], &["model.safetensors"]);
}

#[test]
fn truncated_gguf() {
    let d = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(embedded_model()).unwrap();
    let p = d.path().join("cut.gguf");
    std::fs::write(&p, &bytes[..bytes.len() / 3]).unwrap();
    fails_with(&["model", "inspect", p.to_str().unwrap()], &["cut.gguf", "truncated"]);
}

#[test]
fn unsupported_quantisation_type() {
    let p = fixture("quants/unsupported.gguf");
    fails_with(&["model", "inspect", p.to_str().unwrap()], &["unsupported.gguf", "Q2_K", "token_embd.weight"]);
}

#[test]
fn pickle_checkpoints_are_refused_with_a_conversion_hint() {
    let d = tempfile::tempdir().unwrap();
    copy_dir(&fixture("tiny-llama"), d.path());
    std::fs::remove_file(d.path().join("model.safetensors")).unwrap();
    std::fs::write(d.path().join("pytorch_model.bin"), b"not really a pickle").unwrap();
    fails_with(&["model", "inspect", d.path().to_str().unwrap()], &["pytorch_model.bin", "pickle", "save_pretrained"]);
    let pt = d.path().join("weights.pt");
    std::fs::write(&pt, b"x").unwrap();
    fails_with(&["model", "inspect", pt.to_str().unwrap()], &["weights.pt", "pickle"]);
}

#[test]
fn missing_tokenizer() {
    // The tiny random models have no tokenizer.json: generation needs one.
    let p = fixture("tiny-llama");
    fails_with(&["model", "generate", p.to_str().unwrap(), "--prompt", "hi", "--device", "cpu"], &["tokenizer"]);
}

#[test]
fn bad_device_and_dtype() {
    let m = embedded_model();
    let m = m.to_str().unwrap();
    fails_with(&["model", "generate", m, "--prompt", "hi", "--device", "cuda:7"], &["cuda:7"]);
    fails_with(&["model", "generate", m, "--prompt", "hi", "--dtype", "f8"], &["f8"]);
}

#[test]
fn inspect_embedded_model() {
    let out = Command::new(env!("CARGO_BIN_EXE_trustlens"))
        .args(["model", "inspect", embedded_model().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    for want in ["llama", "layers          30", "d_model         576", "9 / 3 KV heads", "134,515,008", "Q4_1", "Q8_0"]
    {
        assert!(s.contains(want), "`{want}` not in:\n{s}");
    }
}

#[test]
fn generate_answers_paris() {
    let out = Command::new(env!("CARGO_BIN_EXE_trustlens"))
        .args([
            "model",
            "generate",
            embedded_model().to_str().unwrap(),
            "--chat",
            "--prompt",
            "What is the capital of France?",
            "--device",
            "cpu",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Paris"));
}
