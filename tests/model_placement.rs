//! Models split over several devices by the placement planner give the same captures and patches as a single-device
//! run. On a machine without a GPU the devices are `cpu,cpu` (the GPU paths, `cuda:0,cuda:0` and `cuda:0,cpu`, are
//! exercised by `scripts/gpu_check.sh`): the plan, the loader's per-block placement, the boundary handling of the
//! forward pass, the prefix-cached patching and the CLI's `--devices` / `[model] devices` are the code under test.
mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use tch::{Device, Kind, Tensor};
use trustlens::model::placement::{self, Footprint, Slot};
use trustlens::model::{
    Batch, DType, HookPoint, HookSpec, Intervention, InterventionMode, Llama, ModelSource, Positions,
};

fn prompts() -> Vec<Vec<u32>> {
    vec![vec![3, 17, 42, 99, 5, 250, 7], vec![1, 2, 3], vec![200, 100, 50, 25, 12, 6, 3, 1, 0, 9, 8]]
}

/// Budgets for two `cpu` slots that put blocks 0..k on the first and the rest plus the head on the second.
fn two_slot_budgets(fp: &Footprint, k: usize) -> Vec<Slot> {
    let first = fp.embed + fp.layers[..k].iter().sum::<u64>();
    let second = fp.layers[k..].iter().sum::<u64>() + fp.norm + fp.lm_head;
    vec![Slot { device: Device::Cpu, budget: first }, Slot { device: Device::Cpu, budget: second }]
}

fn load_split(dir: &Path, k: usize) -> (Llama, placement::Placement) {
    let (cfg, store) = ModelSource::resolve(dir).unwrap().open().unwrap();
    let fp = Footprint::from_config(&cfg, Kind::Float);
    let plan = placement::plan(&fp, &two_slot_budgets(&fp, k)).unwrap();
    let m = Llama::load_placed(cfg, &store, Kind::Float, &plan.block_devices, plan.head_device).unwrap();
    (m, plan)
}

fn load_single(dir: &Path) -> Llama {
    let (cfg, store) = ModelSource::resolve(dir).unwrap().open().unwrap();
    Llama::load(cfg, &store, Kind::Float, Device::Cpu).unwrap()
}

fn every_hook(n: usize) -> HookSpec {
    let mut s = HookSpec::new().capture(HookPoint::Embed, Positions::All);
    for l in 0..n {
        for h in [HookPoint::ResidPre(l), HookPoint::AttnOut(l), HookPoint::ResidMid(l), HookPoint::MlpOut(l)] {
            s = s.capture(h, Positions::All);
        }
        s = s.capture(HookPoint::ResidPost(l), Positions::All);
    }
    s.capture(HookPoint::LnFinal, Positions::All).capture(HookPoint::Logits, Positions::All)
}

#[test]
fn planner_splits_the_tiny_model_where_the_budgets_say() {
    let dir = fixture("tiny-llama");
    for k in 1..3 {
        let (m, plan) = load_split(&dir, k);
        assert_eq!(plan.slots[0].layers, 0..k);
        assert_eq!(plan.slots[1].layers, k..3);
        assert!(plan.slots[0].embed && plan.slots[1].head);
        assert_eq!(m.blocks.len(), 3);
        assert_eq!(plan.short(), format!("cpu[0..{k}]+cpu[{k}..3]"));
    }
    // One byte less on the second slot and the head no longer fits anywhere.
    let (cfg, _) = ModelSource::resolve(&dir).unwrap().open().unwrap();
    let fp = Footprint::from_config(&cfg, Kind::Float);
    let mut b = two_slot_budgets(&fp, 1);
    b[1].budget -= 1;
    let err = placement::plan(&fp, &b).unwrap_err().to_string();
    assert!(err.contains("unembedding"), "{err}");
}

#[test]
fn split_forward_equals_single_device_at_every_hook() {
    let dir = fixture("tiny-llama");
    let single = load_single(&dir);
    let batch = Batch::left_padded(&prompts(), 0).unwrap();
    let spec = every_hook(single.n_layers());
    let want = single.forward(&batch, &spec).unwrap();
    for k in 1..3 {
        let (split, _) = load_split(&dir, k);
        let got = split.forward(&batch, &spec).unwrap();
        assert_eq!(want.cache.tensors.len(), got.cache.tensors.len());
        for (hook, t) in &want.cache.tensors {
            let g = got.cache.get(*hook).unwrap_or_else(|| panic!("{hook} missing from the split run"));
            assert_eq!(max_abs_diff(t, g), 0.0, "split at {k}: {hook} differs");
        }
        // Greedy decoding with the KV cache (keys and values live on each block's device).
        let a = single.generate_greedy(&prompts(), 0, 5, &[]).unwrap();
        let b = split.generate_greedy(&prompts(), 0, 5, &[]).unwrap();
        assert_eq!(a, b, "split at {k}: greedy tokens differ");
    }
}

#[test]
fn split_patching_over_the_cached_prefix_equals_single_device() {
    let dir = fixture("tiny-llama");
    let single = load_single(&dir);
    let (split, _) = load_split(&dir, 2);
    let prompts = prompts();
    let batch = Batch::left_padded(&prompts, 0).unwrap();
    let lens: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
    let mut spec = HookSpec::new().capture_last(HookPoint::LnFinal).capture_last(HookPoint::Logits);
    for l in 0..3 {
        spec = spec.capture_last(HookPoint::ResidPost(l));
    }
    let (clean_a, prefix_a) = single.forward_with_prefix(&batch, &spec).unwrap();
    let (clean_b, prefix_b) = split.forward_with_prefix(&batch, &spec).unwrap();
    assert_eq!(
        max_abs_diff(clean_a.cache.get(HookPoint::Logits).unwrap(), clean_b.cache.get(HookPoint::Logits).unwrap()),
        0.0
    );
    tch::manual_seed(3);
    for start in 0..=3usize {
        let h = Tensor::randn([3, 64], (Kind::Float, Device::Cpu));
        // A later patch on the way, when there is a later block.
        let mut rest = HookSpec::new().capture_last(HookPoint::LnFinal).capture_last(HookPoint::Logits);
        if start + 1 < 3 {
            rest = rest.intervene(Intervention {
                hook: HookPoint::ResidPost(start + 1),
                targets: lens.iter().enumerate().map(|(b, &n)| (b, n as i64 - 1)).collect(),
                values: Tensor::randn([3, 64], (Kind::Float, Device::Cpu)),
                mode: InterventionMode::Add,
            });
        }
        let a = single.resume_last_token(&prefix_a, start, &h, &rest).unwrap();
        let b = split.resume_last_token(&prefix_b, start, &h, &rest).unwrap();
        for hook in [HookPoint::LnFinal, HookPoint::Logits] {
            assert_eq!(max_abs_diff(a.get(hook).unwrap(), b.get(hook).unwrap()), 0.0, "resume from {start}: {hook}");
        }
    }
    // The patching driver end to end: both directions at every layer, cached prefix.
    let pairs: Vec<trustlens::patch::Pair> = (0..2)
        .map(|i| trustlens::patch::Pair {
            case_id: format!("c{i}"),
            family: "TP".into(),
            subtype: None,
            channel: "chat".into(),
            adversarial: prompts[i].clone(),
            benign: prompts[i + 1].clone(),
        })
        .collect();
    let opts = trustlens::patch::PatchOptions {
        layer_sets: vec![vec![0], vec![1], vec![2], vec![0, 2]],
        readout: trustlens::patch::Readout::parse("ln_final").unwrap(),
        batch_pairs: 2,
        full_recompute: false,
        random_control: true,
        seed: 5,
        pad_id: 0,
    };
    let ra = trustlens::patch::run(&single, &pairs, &opts, |_| {}).unwrap();
    let rb = trustlens::patch::run(&split, &pairs, &opts, |_| {}).unwrap();
    assert_eq!(ra.len(), rb.len());
    for (x, y) in ra.iter().zip(&rb) {
        assert_eq!((x.shift, x.cos_clean, x.random_shift), (y.shift, y.cos_clean, y.random_shift), "{}", x.layers);
    }
}

#[test]
fn random_weights_build_at_a_configs_shapes_and_are_seeded() {
    let cfg_path = fixture("tiny-llama").join("config.json");
    let cfg = || trustlens::model::ModelConfig::from_file(&cfg_path).unwrap();
    let devs = vec![Device::Cpu; 3];
    let a = Llama::random_placed(cfg(), DType::BF16.kind(), &devs, Device::Cpu, 7).unwrap();
    let b = Llama::random_placed(cfg(), DType::BF16.kind(), &devs, Device::Cpu, 7).unwrap();
    let c = Llama::random_placed(cfg(), DType::BF16.kind(), &devs, Device::Cpu, 8).unwrap();
    let single = load_single(&fixture("tiny-llama"));
    assert_eq!(a.n_params(), single.n_params());
    let batch = Batch::left_padded(&prompts(), 0).unwrap();
    let spec = HookSpec::new().capture_last(HookPoint::ResidPost(2)).capture_last(HookPoint::Logits);
    let (oa, ob, oc) =
        (a.forward(&batch, &spec).unwrap(), b.forward(&batch, &spec).unwrap(), c.forward(&batch, &spec).unwrap());
    let la = oa.cache.get(HookPoint::Logits).unwrap();
    assert_eq!(la.kind(), Kind::BFloat16, "compute dtype is bf16");
    assert_eq!(max_abs_diff(la, ob.cache.get(HookPoint::Logits).unwrap()), 0.0);
    assert!(max_abs_diff(la, oc.cache.get(HookPoint::Logits).unwrap()) > 0.0, "another seed, other weights");
    assert!(la.to_kind(Kind::Float).isfinite().all().int64_value(&[]) == 1);
    // A device list of the wrong length is refused.
    let err = Llama::random_placed(cfg(), Kind::Float, &devs[..2], Device::Cpu, 0).err().unwrap().to_string();
    assert!(err.contains("2 block devices for a model of 3 blocks"), "{err}");
}

// ---- The CLI on the embedded model: `trustlens capture` and `trustlens patch` with a CPU+CPU split. ----

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trustlens"));
    c.current_dir(repo());
    c
}

/// Writes the built-in set's first TP case (one case keeps the split-device runs short) to `dir/cases.jsonl`.
fn first_tp_case(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("experiments/cases/channel-trust.jsonl")).unwrap();
    let line = text.lines().find(|l| l.contains("\"family\":\"TP\"")).expect("the built-in case set has a TP case");
    let p = dir.join("cases.jsonl");
    std::fs::write(&p, format!("{line}\n")).unwrap();
    p
}

fn experiment(dir: &Path, name: &str, model_extra: &str) -> PathBuf {
    let cases = first_tp_case(dir);
    let toml = format!(
        "[model]\npath = \"{}\"\ndtype = \"f32\"\ndevice = \"cpu\"\n{model_extra}\n[cases]\nfile = \"{}\"\n\
         channels = [\"chat\", \"tool\"]\ntool_rendering = \"hermes\"\n\n[capture]\nlayers = [3, 14, 15, 29]\n\
         positions = [\"last\", \"payload_last\"]\nbatch_size = 3\nrun = \"{name}\"\nout_dir = \"{}\"\n",
        embedded_model().display(),
        cases.display(),
        dir.join("out").display()
    );
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, toml).unwrap();
    p
}

fn h5_data(path: &Path) -> Vec<Vec<f32>> {
    let f = trustlens::activations::ActivationFile::open(path).unwrap();
    assert!(f.attrs.complete);
    f.read_all().unwrap().iter().map(|a| a.iter().copied().collect()).collect()
}

#[test]
fn cli_capture_and_patch_on_a_cpu_split_equal_the_single_device_run() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // SmolLM2-135M in f32: 113 MB tied embedding, 30 blocks of 14.2 MB. 800 MB over two `cpu` entries (400 MB each)
    // puts about 20 blocks on the first and the rest with the head on the second.
    let single = experiment(t, "single", "");
    let split = experiment(t, "split", "devices = [\"cpu\", \"cpu\"]\ndevice_memory = \"cpu=800MB\"\n");
    let mut summaries = Vec::new();
    for exp in [&single, &split] {
        let sj = t.join(format!("{}.json", exp.file_stem().unwrap().to_string_lossy()));
        let args =
            ["capture", exp.to_str().unwrap(), "--threads", "2", "--quiet", "--summary-json", sj.to_str().unwrap()];
        let o = bin().args(args).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
        summaries.push(serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&sj).unwrap()).unwrap());
    }
    assert_eq!(summaries[0]["device"], "cpu");
    let dev = summaries[1]["device"].as_str().unwrap().to_string();
    assert!(dev.starts_with("cpu[0..") && dev.ends_with("..30]"), "the split run is split: {dev}");
    let a = h5_data(&t.join("out/single/activations.h5"));
    let b = h5_data(&t.join("out/split/activations.h5"));
    assert_eq!(a.len(), b.len());
    assert!(a.iter().zip(&b).all(|(x, y)| x == y), "captures differ between the single and split runs");

    // bf16 compute on a split (135M in bf16: 270 MB over two 200 MB slots): stored as f32, close to the f32 run but
    // not equal to it (the compute really was bf16).
    let o = bin()
        .args(["capture", split.to_str().unwrap(), "--dtype", "bf16", "--run", "bf16", "--threads", "2", "--quiet"])
        .args(["--device-memory", "cpu=400MB"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let f = trustlens::activations::ActivationFile::open(&t.join("out/bf16/activations.h5")).unwrap();
    assert_eq!((f.attrs.dtype.as_str(), f.attrs.store_dtype.as_str()), ("bf16", "f32"));
    assert!(f.attrs.device.contains("+cpu["), "split: {}", f.attrs.device);
    let c = h5_data(&t.join("out/bf16/activations.h5"));
    for (x, y) in a.iter().zip(&c) {
        let scale = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = x.iter().zip(y).fold(0f32, |m, (p, q)| m.max((p - q).abs()));
        assert!(worst > 0.0 && worst < 0.1 * scale, "bf16 vs f32: worst {worst} at scale {scale}");
    }

    // Patching with the command-line flags against the single device (the split capture above used the experiment
    // key).
    let mut results = Vec::new();
    for (i, extra) in [vec![], vec!["--devices", "cpu,cpu", "--device-memory", "cpu=800MB"]].into_iter().enumerate() {
        let out = t.join(format!("patch{i}"));
        let o = bin()
            .args(["patch", single.to_str().unwrap(), "--layers", "3,15,29", "--sets", "14+15", "--n-boot", "50"])
            .args(["--quiet", "--threads", "2", "--out", out.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("patching.json")).unwrap()).unwrap();
        results.push(v);
    }
    assert_eq!(results[0]["config"]["device"], "cpu");
    assert!(results[1]["config"]["device"].as_str().unwrap().contains("+cpu["));
    let pairs0 = &results[0]["pairs"];
    assert!(pairs0.as_array().unwrap().len() >= 16, "1 case x 2 channels x 4 sets x 2 directions");
    assert_eq!(pairs0, &results[1]["pairs"], "patching differs with --devices");
}

#[test]
fn cli_refuses_a_model_that_does_not_fit_and_bad_device_lists() {
    let tmp = tempfile::tempdir().unwrap();
    let exp = experiment(tmp.path(), "nofit", "");
    let o = bin()
        .args(["capture", exp.to_str().unwrap(), "--quiet", "--devices", "cpu", "--device-memory", "100MB"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("DEVICE=SIZE"), "{}", text(&o));
    let o = bin()
        .args(["capture", exp.to_str().unwrap(), "--quiet", "--devices", "cpu,cpu", "--device-memory", "cpu=400MB"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(msg.contains("does not fit") && msg.contains("have no room") && msg.contains("--device-memory"), "{msg}");
    let o = bin().args(["patch", exp.to_str().unwrap(), "--quiet", "--devices", "cpu,tpu:1"]).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("tpu:1"), "{}", text(&o));
    let bad = experiment(tmp.path(), "bad", "devices = []\n");
    let o = bin().args(["capture", bad.to_str().unwrap(), "--quiet"]).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("model.devices"), "{}", text(&o));
}
