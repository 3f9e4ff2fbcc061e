//! GGUF dequantisation equals gguf-py's (an independent implementation of llama.cpp's block layouts) for every
//! supported type, on random blocks.
mod common;

use common::*;
use tch::Tensor;
use trustlens::model::gguf::GgufFile;

#[test]
fn every_supported_type_dequantises_like_gguf_py() {
    let dir = fixture("quants");
    let refs = read_tensors(&dir.join("reference.safetensors"));
    let g = GgufFile::open(dir.join("quants.gguf")).unwrap();
    for name in ["Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16", "F32"] {
        let info = g.tensor_info(name).unwrap_or_else(|| panic!("fixture lacks {name}"));
        assert_eq!(info.ty.name(), name);
        let want = &refs[name];
        let shape: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
        assert_eq!(shape, want.size(), "{name}: shape");
        let got = Tensor::from_slice(&g.dequantize(name).unwrap()).reshape(&shape);
        let scale = want.abs().max().double_value(&[]).max(1e-6);
        let d = max_abs_diff(&got, want);
        assert!(d <= 1e-6 * scale, "{name}: max abs diff {d:e} (scale {scale:e})");
    }
}

#[test]
fn truncated_gguf_is_refused_with_the_file_named() {
    let src = std::fs::read(fixture("quants/quants.gguf")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for cut in [3usize, 40, src.len() / 2, src.len() - 1] {
        let p = dir.path().join("cut.gguf");
        std::fs::write(&p, &src[..cut]).unwrap();
        let err = GgufFile::open(&p).err().unwrap_or_else(|| panic!("cut at {cut} was accepted")).to_string();
        assert!(err.contains("cut.gguf"), "{err}");
    }
}
