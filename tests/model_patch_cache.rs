//! Last-token patching over a cached prefix equals a full recompute with the same interventions, for single- and
//! multi-layer patches, with prompts of different lengths in one left-padded batch.
mod common;

use common::*;
use std::path::Path;
use tch::{Device, Kind, Tensor};
use trustlens::model::{
    self, Batch, HookPoint, HookSpec, Intervention, InterventionMode, Llama, LoadOptions, Positions,
};

fn readouts() -> HookSpec {
    HookSpec::new().capture_last(HookPoint::LnFinal).capture_last(HookPoint::Logits)
}

fn patch_at(layers: &[usize], lens: &[usize], values: &[Tensor]) -> HookSpec {
    let mut s = readouts();
    for (&l, v) in layers.iter().zip(values) {
        s = s.intervene(Intervention {
            hook: HookPoint::ResidPost(l),
            targets: lens.iter().enumerate().map(|(b, &n)| (b, n as i64 - 1)).collect(),
            values: v.shallow_clone(),
            mode: InterventionMode::Replace,
        });
    }
    s
}

/// `tol` bounds max |full - cached| relative to max(1, max |full|) when `relative`, absolutely otherwise.
/// Single-layer patches at every `step`-th layer, plus two multi-layer sets.
fn check(m: &Llama, prompts: &[Vec<u32>], tol: f64, relative: bool, step: usize) {
    let batch = Batch::left_padded(prompts, 0).unwrap();
    let lens: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
    let n = m.n_layers();
    let d = m.d_model() as i64;
    let mut clean_spec = readouts();
    for l in 0..n {
        clean_spec = clean_spec.capture_last(HookPoint::ResidPost(l));
    }
    let (clean, prefix) = m.forward_with_prefix(&batch, &clean_spec).unwrap();
    let plain = m.forward(&batch, &clean_spec).unwrap();
    // The prefix-keeping pass is the ordinary pass.
    assert_eq!(
        max_abs_diff(clean.cache.get(HookPoint::Logits).unwrap(), plain.cache.get(HookPoint::Logits).unwrap()),
        0.0
    );
    tch::manual_seed(11);
    let scale = clean.cache.get(HookPoint::ResidPost(0)).unwrap().abs().mean(Kind::Float).double_value(&[]);
    let rand = || Tensor::randn([prompts.len() as i64, d], (Kind::Float, Device::Cpu)) * scale;
    let mut sets: Vec<Vec<usize>> = (0..n).step_by(step).map(|l| vec![l]).collect();
    sets.push((0..n).collect()); // cumulative 0..L
    if n > 2 {
        sets.push(vec![0, n - 1]);
    }
    for set in sets {
        let values: Vec<Tensor> = set.iter().map(|_| rand()).collect();
        let full = m.forward(&batch, &patch_at(&set, &lens, &values)).unwrap();
        // Cached: start after the first patched layer with its value, patch the rest on the way.
        let rest = patch_at(&set[1..], &lens, &values[1..]);
        let cached = m.resume_last_token(&prefix, set[0] + 1, &values[0], &rest).unwrap();
        for hook in [HookPoint::LnFinal, HookPoint::Logits] {
            let a = full.cache.get(hook).unwrap();
            let b = cached.get(hook).unwrap();
            let scale = if relative { a.abs().max().double_value(&[]).max(1.0) } else { 1.0 };
            let diff = max_abs_diff(a, b) / scale;
            assert!(diff <= tol, "patch at {set:?}: {hook} full vs cached differ by {diff:.3e}");
        }
    }
    // Resuming with the clean values reproduces the clean readout.
    for l in (0..n).step_by(step) {
        let h = clean.cache.get(HookPoint::ResidPost(l)).unwrap();
        let r = m.resume_last_token(&prefix, l + 1, h, &readouts()).unwrap();
        let want = clean.cache.get(HookPoint::LnFinal).unwrap();
        let scale = if relative { want.abs().max().double_value(&[]).max(1.0) } else { 1.0 };
        let diff = max_abs_diff(r.get(HookPoint::LnFinal).unwrap(), want) / scale;
        assert!(diff <= tol, "layer {l}: clean resume differs by {diff:.3e}");
    }
}

fn prompts_for(vocab: u32) -> Vec<Vec<u32>> {
    [9usize, 23, 1, 15]
        .iter()
        .enumerate()
        .map(|(i, &n)| (0..n as u32).map(|j| (j * 31 + 7 * i as u32 + 3) % vocab).collect())
        .collect()
}

#[test]
fn cached_last_token_patch_equals_full_recompute_tiny_models() {
    for name in ["tiny-llama", "tiny-mistral", "tiny-qwen2"] {
        let m = model::load(&fixture(name), LoadOptions::default()).unwrap();
        check(&m, &prompts_for(256), 1e-4, false, 1);
    }
}

#[test]
fn cached_last_token_patch_equals_full_recompute_embedded() {
    let m = model::load(Path::new(&embedded_model()), LoadOptions::default()).unwrap();
    // SmolLM2's final-norm output reaches magnitudes in the hundreds, where f32 rounding of a 1-row GEMM versus a
    // T-row GEMM alone exceeds 1e-4 absolute: compare relative to the readout's scale.
    check(&m, &prompts_for(49152)[..2], 1e-4, true, 7);
}

#[test]
fn resume_rejects_what_it_cannot_do() {
    let m = model::load(&fixture("tiny-llama"), LoadOptions::default()).unwrap();
    let prompts = prompts_for(256);
    let batch = Batch::left_padded(&prompts, 0).unwrap();
    let (_, prefix) = m.forward_with_prefix(&batch, &HookSpec::new()).unwrap();
    let h = Tensor::zeros([prompts.len() as i64, m.d_model() as i64], (Kind::Float, Device::Cpu));
    let all = HookSpec::new().capture(HookPoint::LnFinal, Positions::All);
    assert!(m.resume_last_token(&prefix, 1, &h, &all).is_err());
    let early = HookSpec::new().capture_last(HookPoint::ResidPost(0));
    assert!(m.resume_last_token(&prefix, 2, &h, &early).is_err());
    assert!(m.resume_last_token(&prefix, 99, &h, &readouts()).is_err());
    let wrong = Tensor::zeros([1, 3], (Kind::Float, Device::Cpu));
    assert!(m.resume_last_token(&prefix, 1, &wrong, &readouts()).is_err());
}
