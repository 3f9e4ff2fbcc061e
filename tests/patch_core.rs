//! Activation patching: the cached last-token path equals the full recompute, a self-patch shifts nothing, and the
//! bookkeeping (directions, layer sets, controls, summaries) is right.
mod common;

use common::*;
use trustlens::model::{self, LoadOptions};
use trustlens::patch::{self, Pair, PatchOptions, Readout};

fn pairs(same: bool) -> Vec<Pair> {
    (0..5u32)
        .map(|i| {
            let adv: Vec<u32> = (0..(6 + 3 * i)).map(|j| (j * 17 + i * 5 + 3) % 256).collect();
            let ben: Vec<u32> =
                if same { adv.clone() } else { (0..(9 + i)).map(|j| (j * 29 + i + 11) % 256).collect() };
            Pair {
                case_id: format!("c{i}"),
                family: if i % 2 == 0 { "TP".into() } else { "IPI".into() },
                subtype: None,
                channel: "chat".into(),
                adversarial: adv,
                benign: ben,
            }
        })
        .collect()
}

fn opts(full: bool, readout: Readout) -> PatchOptions {
    PatchOptions {
        layer_sets: vec![vec![0], vec![1], vec![2], vec![0, 1, 2], vec![0, 2]],
        readout,
        batch_pairs: 2,
        full_recompute: full,
        random_control: true,
        seed: 3,
        pad_id: 0,
    }
}

#[test]
fn cached_path_equals_full_recompute() {
    let m = model::load(&fixture("tiny-llama"), LoadOptions::default()).unwrap();
    for readout in [Readout::LnFinal, Readout::ResidPost, Readout::Logits] {
        let cached = patch::run(&m, &pairs(false), &opts(false, readout), |_| {}).unwrap();
        let full = patch::run(&m, &pairs(false), &opts(true, readout), |_| {}).unwrap();
        assert_eq!(cached.len(), 5 * 5 * 2);
        for (c, f) in cached.iter().zip(&full) {
            assert_eq!((&c.case_id, &c.layers, c.direction), (&f.case_id, &f.layers, f.direction));
            assert!(
                (c.shift - f.shift).abs() <= 1e-4,
                "{readout:?} {} {} {}: {} vs {}",
                c.case_id,
                c.layers,
                c.direction,
                c.shift,
                f.shift
            );
            assert!((c.cos_clean - f.cos_clean).abs() <= 1e-12);
        }
        // Patching every layer of the cumulative set from the first one on moves the target onto the source
        // exactly when the readout is the last block's residual stream.
        if readout == Readout::ResidPost {
            for r in cached.iter().filter(|r| r.layers == "0..2") {
                assert!((r.recovery - 1.0).abs() < 1e-4, "cumulative patch should recover fully: {}", r.recovery);
            }
        }
    }
}

#[test]
fn self_patch_shifts_nothing() {
    let m = model::load(&fixture("tiny-llama"), LoadOptions::default()).unwrap();
    let full = patch::run(&m, &pairs(true), &opts(true, Readout::LnFinal), |_| {}).unwrap();
    for r in &full {
        assert_eq!(r.shift, 0.0, "full-recompute self patch must be exactly 0: {r:?}");
    }
    let cached = patch::run(&m, &pairs(true), &opts(false, Readout::LnFinal), |_| {}).unwrap();
    for r in &cached {
        assert!(r.shift.abs() < 1e-6, "cached self patch: {r:?}");
        // The random control really moves the state.
        if let Some(rs) = r.random_shift {
            assert!(rs < -1e-3, "random control should lower the similarity: {rs}");
        }
    }
}

#[test]
fn summary_groups_and_cis() {
    let m = model::load(&fixture("tiny-llama"), LoadOptions::default()).unwrap();
    let res = patch::run(&m, &pairs(false), &opts(false, Readout::LnFinal), |_| {}).unwrap();
    let s = patch::summarize(&res, 200, 0.95, 1);
    let all = s.iter().find(|r| r.layers == "2" && r.direction == "forward" && r.family == "all").unwrap();
    assert_eq!(all.n, 5);
    let mean = res.iter().filter(|r| r.layers == "2" && r.direction == "forward").map(|r| r.shift).sum::<f64>() / 5.0;
    assert!((all.shift.value - mean).abs() < 1e-12);
    assert!(all.shift.lo <= all.shift.value && all.shift.value <= all.shift.hi);
    assert!(all.random_shift.is_some());
    assert_eq!(s.iter().find(|r| r.layers == "2" && r.direction == "forward" && r.family == "TP").unwrap().n, 3);
    assert!(s.iter().find(|r| r.layers == "0..2").unwrap().random_shift.is_none());
}

#[test]
fn bad_layer_sets_are_refused() {
    let m = model::load(&fixture("tiny-llama"), LoadOptions::default()).unwrap();
    for bad in [vec![], vec![3], vec![2, 1], vec![1, 1]] {
        let mut o = opts(false, Readout::LnFinal);
        o.layer_sets = vec![bad.clone()];
        assert!(patch::run(&m, &pairs(false), &o, |_| {}).is_err(), "{bad:?} accepted");
    }
}
