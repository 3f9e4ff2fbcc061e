//! Shared helpers for integration tests: where the generated fixtures and the embedded model live.
#![allow(dead_code)]
use std::path::PathBuf;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A generated fixture (made by `just fixtures`, which `just test` runs first). Panics with instructions if missing.
pub fn fixture(rel: &str) -> PathBuf {
    let p = repo().join("tests/fixtures/generated").join(rel);
    assert!(p.exists(), "missing test fixture {}: run `just fixtures` (or `just test`, which makes them)", p.display());
    p
}

/// The embedded model, fetched by `just setup`.
pub fn embedded_model() -> PathBuf {
    let p = repo().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.exists(), "missing embedded model {}: run `just setup`", p.display());
    p
}

/// Named tensors of a safetensors file as tch tensors.
pub fn read_tensors(path: &std::path::Path) -> std::collections::HashMap<String, tch::Tensor> {
    tch::Tensor::read_safetensors(path).expect("read reference tensors").into_iter().collect()
}

/// max |a - b| over all elements (both converted to f32 on the CPU).
pub fn max_abs_diff(a: &tch::Tensor, b: &tch::Tensor) -> f64 {
    assert_eq!(a.size(), b.size(), "shape mismatch");
    let a = a.to_kind(tch::Kind::Float).to_device(tch::Device::Cpu);
    let b = b.to_kind(tch::Kind::Float).to_device(tch::Device::Cpu);
    (a - b).abs().max().double_value(&[])
}

/// stdout and stderr of a finished command, one after the other.
pub fn text(o: &std::process::Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A case file in `dir` with the first `per_family` cases of each family of the built-in set.
pub fn small_cases(dir: &std::path::Path, per_family: usize) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("experiments/cases/channel-trust.jsonl")).unwrap();
    let mut out = String::new();
    for fam in ["\"TP\"", "\"IPI\"", "\"CTS\""] {
        for line in text.lines().filter(|l| l.contains(&format!("\"family\":{fam}"))).take(per_family) {
            out.push_str(line);
            out.push('\n');
        }
    }
    let p = dir.join("cases.jsonl");
    std::fs::write(&p, out).unwrap();
    p
}
