//! The forward pass equals Hugging Face transformers: every layer's residual stream within 1e-4 (max abs, f32) and
//! identical greedy tokens, on seeded tiny random Llama (GQA + llama3 rope scaling, untied), Mistral (explicit
//! head_dim, one KV head) and Qwen2 (q/k/v biases, tied) models, and on the embedded SmolLM2 GGUF loaded by both
//! sides. References come from `scripts/make_fixtures.py`.
mod common;

use common::*;
use std::path::Path;
use tch::{Device, Tensor};
use trustlens::model::{self, AttnImpl, Batch, DType, HookPoint, HookSpec, LoadOptions, Positions};

const TOL: f64 = 1e-4;

fn reference(dir: &Path) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let ids = |k: &str| -> Vec<Vec<u32>> { serde_json::from_value(v[k].clone()).unwrap() };
    (ids("prompts"), ids("greedy"))
}

/// Every layer's resid_post, the final norm and the logits of each prompt run alone.
fn check_parity(name: &str, model_path: &Path, dtype: DType, prefix: &str, tol: f64) -> f64 {
    check_parity_with(name, model_path, dtype, prefix, tol, AttnImpl::Eager)
}

fn check_parity_with(name: &str, model_path: &Path, dtype: DType, prefix: &str, tol: f64, attn: AttnImpl) -> f64 {
    let dir = fixture(name);
    let (prompts, greedy) = reference(&dir);
    let refs = read_tensors(&dir.join("reference.safetensors"));
    let mut m = model::load(model_path, LoadOptions { dtype, device: Device::Cpu }).unwrap();
    m.attn_impl = attn;
    let n = m.n_layers();
    let mut worst: f64 = 0.0;
    for (i, p) in prompts.iter().enumerate() {
        let batch = Batch::left_padded(std::slice::from_ref(p), 0).unwrap();
        let mut spec =
            HookSpec::new().capture(HookPoint::LnFinal, Positions::All).capture(HookPoint::Logits, Positions::All);
        for l in 0..n {
            spec = spec.capture(HookPoint::ResidPost(l), Positions::All);
        }
        let out = m.forward(&batch, &spec).unwrap();
        for l in 0..n {
            let got = out.cache.get(HookPoint::ResidPost(l)).unwrap().squeeze_dim(0);
            let want = &refs[&format!("{prefix}p{i}.resid_post.{l}")];
            let d = max_abs_diff(&got, want);
            worst = worst.max(d);
            assert!(d <= tol, "{name} prompt {i} layer {l}: resid_post max abs diff {d:.3e} > {tol:.0e}");
        }
        let d = max_abs_diff(
            &out.cache.get(HookPoint::LnFinal).unwrap().squeeze_dim(0),
            &refs[&format!("{prefix}p{i}.ln_final")],
        );
        assert!(d <= tol, "{name} prompt {i}: ln_final diff {d:.3e}");
        let logits = out.cache.get(HookPoint::Logits).unwrap().squeeze_dim(0);
        let want = &refs[&format!("{prefix}p{i}.logits")];
        // Logits are larger in magnitude; compare relative to their scale.
        let scale = want.abs().max().double_value(&[]).max(1.0);
        let d = max_abs_diff(&logits, want) / scale;
        worst = worst.max(d);
        assert!(d <= tol, "{name} prompt {i}: logits relative diff {d:.3e}");
    }
    if dtype == DType::F32 {
        let eos = if name == "smollm2" { vec![2] } else { vec![] };
        let max_new = greedy.iter().map(|g| g.len()).max().unwrap();
        for (i, p) in prompts.iter().enumerate() {
            let got = m.generate_greedy(std::slice::from_ref(p), 0, max_new, &eos).unwrap();
            assert_eq!(got[0], greedy[i], "{name} prompt {i}: greedy tokens differ from transformers");
        }
    }
    worst
}

#[test]
fn tiny_llama_gqa_llama3_rope_untied_matches_hf() {
    let d = check_parity("tiny-llama", &fixture("tiny-llama"), DType::F32, "", TOL);
    eprintln!("tiny-llama worst diff {d:.2e}");
}

#[test]
fn tiny_mistral_head_dim_matches_hf() {
    check_parity("tiny-mistral", &fixture("tiny-mistral"), DType::F32, "", TOL);
}

#[test]
fn tiny_llama_linear_rope_attention_bias_matches_hf() {
    check_parity("tiny-llama-linear", &fixture("tiny-llama-linear"), DType::F32, "", TOL);
}

#[test]
fn tiny_mistral_is_sharded() {
    assert!(fixture("tiny-mistral").join("model.safetensors.index.json").exists(), "fixture should be sharded");
}

#[test]
fn tiny_qwen2_biases_tied_matches_hf() {
    check_parity("tiny-qwen2", &fixture("tiny-qwen2"), DType::F32, "", TOL);
}

#[test]
fn embedded_smollm2_gguf_matches_hf() {
    let d = check_parity("smollm2", &embedded_model(), DType::F32, "", TOL);
    eprintln!("smollm2 worst diff {d:.2e}");
}

/// The fused SDPA kernel (the CUDA default) agrees with transformers too, within float rounding.
#[test]
fn sdpa_attention_matches_hf() {
    for name in ["tiny-llama", "tiny-llama-linear", "tiny-mistral", "tiny-qwen2"] {
        let d = check_parity_with(name, &fixture(name), DType::F32, "", TOL, AttnImpl::Sdpa);
        eprintln!("{name}: SDPA vs transformers eager, worst max abs diff {d:.3e}");
    }
}

/// bf16 drift: trustlens bf16 against transformers bf16 on the same weights. bf16 has 8 mantissa bits, so the bound
/// is loose; the measured figure is printed for the record.
#[test]
fn bf16_and_f16_drift_is_small() {
    for name in ["tiny-llama", "tiny-mistral", "tiny-qwen2"] {
        let d = check_parity(name, &fixture(name), DType::BF16, "bf16.", 0.25);
        eprintln!("{name}: bf16 trustlens vs bf16 transformers, worst max abs diff {d:.3e}");
        // And how far bf16 drifts from the f32 reference (inherent to the dtype, the same for both sides).
        let d32 = check_parity(name, &fixture(name), DType::BF16, "", 1.0);
        eprintln!("{name}: bf16 trustlens vs f32 transformers, worst max abs diff {d32:.3e}");
        let d16 = check_parity(name, &fixture(name), DType::F16, "", 0.05);
        eprintln!("{name}: f16 trustlens vs f32 transformers, worst max abs diff {d16:.3e}");
    }
}

/// A prompt alone and inside a left-padded batch of different lengths gives the same hidden states (1e-5, f32),
/// and the returned last-token indices point at each prompt's own last token.
#[test]
fn padded_batch_equals_single_prompts() {
    let dir = fixture("tiny-llama");
    let (prompts, _) = reference(&dir);
    let m = model::load(&dir, LoadOptions::default()).unwrap();
    let n = m.n_layers();
    let spec = |k: Positions| {
        let mut s = HookSpec::new().capture(HookPoint::Logits, Positions::Last);
        for l in 0..n {
            s = s.capture(HookPoint::ResidPost(l), k.clone());
        }
        s
    };
    let batch = Batch::left_padded(&prompts, 0).unwrap();
    let mut all_last = Vec::new();
    let out = m.forward(&batch, &spec(Positions::Last)).unwrap();
    assert_eq!(out.last_token_index, prompts.iter().map(|p| p.len() as i64 - 1).collect::<Vec<_>>());
    // Per-example explicit positions: the middle token of each prompt.
    let mids: Vec<i64> = prompts.iter().map(|p| p.len() as i64 / 2).collect();
    let out_mid = m.forward(&batch, &spec(Positions::At(mids.clone()))).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        let single = Batch::left_padded(std::slice::from_ref(p), 0).unwrap();
        let s = m.forward(&single, &spec(Positions::All)).unwrap();
        for l in 0..n {
            let full = s.cache.get(HookPoint::ResidPost(l)).unwrap().get(0);
            let d_last = max_abs_diff(&out.cache.get(HookPoint::ResidPost(l)).unwrap().get(i as i64), &full.get(-1));
            let d_mid =
                max_abs_diff(&out_mid.cache.get(HookPoint::ResidPost(l)).unwrap().get(i as i64), &full.get(mids[i]));
            assert!(d_last <= 1e-5 && d_mid <= 1e-5, "prompt {i} layer {l}: batch vs alone {d_last:.2e} / {d_mid:.2e}");
        }
        all_last.push(out.cache.get(HookPoint::Logits).unwrap().get(i as i64));
        let d = max_abs_diff(&all_last[i], &s.cache.get(HookPoint::Logits).unwrap().get(0));
        assert!(d <= 1e-5, "prompt {i}: logits batch vs alone {d:.2e}");
    }
    // Batched greedy decoding equals one-by-one decoding.
    let batched = m.generate_greedy(&prompts, 0, 6, &[]).unwrap();
    for (i, p) in prompts.iter().enumerate() {
        assert_eq!(batched[i], m.generate_greedy(std::slice::from_ref(p), 0, 6, &[]).unwrap()[0], "prompt {i}");
    }
    let _ = Tensor::zeros([1], (tch::Kind::Float, Device::Cpu));
}
