//! `trustlens guard` end to end: generate -> eval on the tiny fixture model (with a byte-level tokenizer written
//! beside it) with every scorer, the feature cache on a rerun, the LM label log-probs against a direct forward pass
//! (both the resume path and the two-row path), and bad input as one-line errors with exit status 1.
mod common;
use common::text;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use trustlens::guard::{generate, lm, triplet};
use trustlens::model::{self, Batch, HookPoint, HookSpec, LoadOptions};
use trustlens::prompt::PromptAssets;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trustlens"));
    c.current_dir(common::repo());
    c
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("binary runs")
}

/// GPT-2's byte -> printable character map.
fn byte_chars() -> Vec<(u8, char)> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    bs.iter().zip(&cs).map(|(&b, &c)| (b as u8, char::from_u32(c).unwrap())).collect()
}

/// The tiny Llama fixture (vocab 256) in a folder with a byte-level BPE tokenizer without merges (one id per byte).
fn tiny_model(dir: &Path) -> PathBuf {
    let m = dir.join("tiny");
    std::fs::create_dir_all(&m).unwrap();
    let src = common::fixture("tiny-llama");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), m.join(f)).unwrap();
    }
    let vocab: serde_json::Map<String, serde_json::Value> =
        byte_chars().into_iter().map(|(b, c)| (c.to_string(), serde_json::json!(b))).collect();
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": []}
    });
    std::fs::write(m.join("tokenizer.json"), tok.to_string()).unwrap();
    m
}

#[test]
fn generate_then_eval_every_scorer_on_the_tiny_model_and_reuse_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let eps = dir.path().join("eps.jsonl");
    let o = run(&["guard", "generate", "--n", "20", "--seed", "5", "--out", eps.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&eps).unwrap().lines().count(), 20);
    let out = dir.path().join("out");
    let cache = dir.path().join("cache");
    let args = [
        "guard",
        "eval",
        eps.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--layers",
        "all",
        "--out",
        out.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--quiet",
        "--inner-folds",
        "2",
    ];
    let o = run(&args);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for row in [
        "keyword",
        "param-risk",
        "state-risk",
        "scalar-logreg",
        "tfidf-logreg",
        "lm-zeroshot",
        "probe-L0",
        "probe-L1",
        "probe-L2",
    ] {
        assert!(t.lines().any(|l| l.starts_with(row)), "row {row} missing:\n{t}");
    }
    assert!(t.contains("AMR") && t.contains("ACNR") && t.contains("G_1.5"), "{t}");
    assert!(t.contains("20 computed"), "{t}");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 9, "{csv}");
    for line in csv.lines().skip(1) {
        let f: Vec<f64> = line.split(',').skip(1).map(|x| x.parse().unwrap()).collect();
        let (amr, bmr, rnr, acnr, rho, g_mean, g_pooled) = (f[0], f[1], f[2], f[3], f[4], f[5], f[7]);
        assert!((amr + bmr - 100.0).abs() < 1e-9 && (rnr + acnr - 100.0).abs() < 1e-9, "{line}");
        assert!((g_pooled - (100.0 - (rho + 0.5) * amr - 1.5 * rnr).max(0.0)).abs() < 1e-3, "{line}");
        assert!((0.0..=100.0).contains(&g_mean), "{line}");
        // Counts add up to the 10 malicious and 10 normal episodes.
        assert_eq!(f[9] + f[10], 10.0, "{line}");
        assert_eq!(f[11] + f[12], 10.0, "{line}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["results"][0]["folds"].as_array().unwrap().len(), 5);
    assert_eq!(json["results"][0]["sweep"].as_array().unwrap().len(), 5);
    assert!(out.join("sweep.csv").exists() && out.join("scores.csv").exists());
    let scores = std::fs::read_to_string(out.join("scores.csv")).unwrap();
    assert_eq!(scores.lines().count(), 21);

    // A rerun reads every feature from the cache and gives identical results.
    let o2 = run(&args);
    let t2 = text(&o2);
    assert!(o2.status.success(), "{t2}");
    assert!(t2.contains("0 computed") && t2.contains("20 from cache"), "{t2}");
    assert_eq!(std::fs::read_to_string(out.join("results.csv")).unwrap(), csv);
}

/// Reference log P(label | prompt) from one plain forward pass over `prompt + label` with logits everywhere.
fn reference_logp(m: &trustlens::model::Llama, prompt: &[u32], label: &[u32]) -> f64 {
    let seq = [prompt, label].concat();
    let batch = Batch::left_padded(&[seq], 0).unwrap();
    let out = m.forward(&batch, &HookSpec::new().capture(HookPoint::Logits, model::Positions::All)).unwrap();
    let lg =
        out.cache.get(HookPoint::Logits).unwrap().get(0).to_kind(tch::Kind::Double).log_softmax(-1, tch::Kind::Double);
    label.iter().enumerate().map(|(j, &t)| lg.double_value(&[(prompt.len() - 1 + j) as i64, t as i64])).sum()
}

#[test]
fn label_logprobs_match_a_direct_forward_pass() {
    let dir = tempfile::tempdir().unwrap();
    let path = tiny_model(dir.path());
    let assets = PromptAssets::load(&path).unwrap();
    let m = model::load(&path, LoadOptions::default()).unwrap();
    let eps = generate::generate(6, 9).unwrap();
    let texts: Vec<String> = eps.iter().map(|e| triplet::triplet(e).serialize(triplet::Format::Compact)).collect();
    // ("hi", "lo"): two tokens each -> one row + resume; ("high_risk", "low_risk"): nine each -> two rows;
    // ("yes", "no"): three vs two -> two rows; ("ab", "ac"): a shared first token.
    for (hi, lo) in [("hi", "lo"), ("high_risk", "low_risk"), ("yes", "no"), ("ab", "ac")] {
        let r0 = lm::render_prompt(&assets, &texts[0]).unwrap();
        let labels = lm::label_tokens(&assets, &r0, hi, lo).unwrap();
        let prompts = lm::prompts(&assets, &texts, &labels).unwrap();
        let cache = dir.path().join(format!("cache-{hi}"));
        let f =
            lm::extract(&m, &prompts, &labels, 0, 4, &cache, &format!("key-{hi}-{lo}-000000000000000000000"), |_| {})
                .unwrap();
        for (i, p) in prompts.iter().enumerate() {
            let rh = reference_logp(&m, &p.ids, &labels.high_rest);
            let rl = reference_logp(&m, &p.ids, &labels.low_rest);
            assert!((f.logp_high[i] - rh).abs() < 1e-3, "{hi}: episode {i}: {} vs {rh}", f.logp_high[i]);
            assert!((f.logp_low[i] - rl).abs() < 1e-3, "{lo}: episode {i}: {} vs {rl}", f.logp_low[i]);
            let r = f.risk()[i];
            assert!((r - 1.0 / (1.0 + (rl - rh).exp())).abs() < 1e-3);
        }
        // Residuals: the prompt's last token at the last block equals a plain capture.
        let p = &prompts[0];
        let b = Batch::left_padded(&[p.ids[..=p.last].to_vec()], 0).unwrap();
        let out = m.forward(&b, &HookSpec::new().capture_last(HookPoint::ResidPost(2))).unwrap();
        let want: Vec<f32> = Vec::try_from(out.cache.get(HookPoint::ResidPost(2)).unwrap().get(0)).unwrap();
        let got = f.layer(2);
        for (j, w) in want.iter().enumerate() {
            assert!((got[(0, j)] - w).abs() < 1e-4, "{hi}: resid dim {j}");
        }
    }
}

fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, lines.join("\n")).unwrap();
    p
}

#[test]
fn bad_input_is_one_line_with_exit_status_1() {
    let dir = tempfile::tempdir().unwrap();
    let eps = generate::generate(20, 3).unwrap();
    let lines: Vec<String> = eps.iter().map(|e| e.to_json_line()).collect();

    // A missing field names the file, line, record_id and field path.
    let mut bad = lines.clone();
    let mut v: serde_json::Value = serde_json::from_str(&bad[4]).unwrap();
    v["trajectory"][2]["tool_feedback"].as_object_mut().unwrap().remove("mismatch_score");
    bad[4] = v.to_string();
    let p = write(dir.path(), "missing.jsonl", &bad);
    let o = run(&["guard", "eval", p.to_str().unwrap(), "--scorers", "keyword"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("line 5")
            && t.contains(&eps[4].record_id)
            && t.contains("trajectory[2].tool_feedback.mismatch_score"),
        "{t}"
    );
    assert_eq!(String::from_utf8_lossy(&o.stderr).trim().lines().count(), 1, "{t}");

    // A pair with only one side.
    let mut one_sided = lines.clone();
    one_sided.remove(7);
    let p = write(dir.path(), "onesided.jsonl", &one_sided);
    let o = run(&["guard", "eval", p.to_str().unwrap(), "--scorers", "keyword"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains(&format!("pair \"{}\" has only its malicious side", eps[6].pair_id)), "{t}");

    // A fold without both classes: six malicious-only pairs and one benign-only pair, allowed unpaired.
    let mut skewed: Vec<String> = (0..6).map(|i| lines[2 * i].clone()).collect();
    skewed.push(lines[13].clone());
    let p = write(dir.path(), "skewed.jsonl", &skewed);
    let o = run(&["guard", "eval", p.to_str().unwrap(), "--scorers", "keyword", "--allow-unpaired"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("fold") && t.contains("both classes"), "{t}");

    // Unknown scorer, LM scorer without a model, odd --n.
    let p = write(dir.path(), "ok.jsonl", &lines);
    let o = run(&["guard", "eval", p.to_str().unwrap(), "--scorers", "bert"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("unknown scorer `bert`"));
    let o = run(&["guard", "eval", p.to_str().unwrap(), "--scorers", "lm"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("need --model"));
    let o = run(&["guard", "generate", "--n", "7", "--out", dir.path().join("x.jsonl").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("even"));
}
