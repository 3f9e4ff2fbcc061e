//! Byte/id equality of `trustlens::prompt` with Hugging Face transformers, against the reference JSON that
//! `scripts/fixtures_prompt.py` writes to tests/fixtures/generated/prompt/ (run `just fixtures`).
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use trustlens::model::gguf::GgufFile;
use trustlens::prompt::{strftime_utc, ChatTemplate, PromptAssets, Tokenizer};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture_dir() -> PathBuf {
    root().join("tests/fixtures/generated/prompt")
}

fn fixture(name: &str) -> Value {
    let path = fixture_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}\nThe Python reference fixtures are missing: run `just fixtures` \
             (or `.venv/bin/python scripts/fixtures_prompt.py tests/fixtures/generated`).",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}; regenerate with `just fixtures`", path.display()))
}

fn smollm_path() -> PathBuf {
    let p = root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(p.is_file(), "{}: missing; run scripts/setup.sh to fetch the embedded model", p.display());
    p
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("id list").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn offsets(v: &Value) -> Vec<(usize, usize)> {
    v.as_array()
        .expect("offset list")
        .iter()
        .map(|p| (p[0].as_u64().expect("offset") as usize, p[1].as_u64().expect("offset") as usize))
        .collect()
}

fn messages(case: &Value) -> Vec<Value> {
    case["messages"].as_array().expect("messages").clone()
}

fn tools(case: &Value) -> Option<Vec<Value>> {
    case["tools"].as_array().cloned()
}

fn kwargs(case: &Value) -> Map<String, Value> {
    case["kwargs"].as_object().cloned().unwrap_or_default()
}

/// Render one fixture case and compare with HF: the same text, or an error where HF raised.
fn check_case(template: &ChatTemplate, tokenizer: &Tokenizer, case: &Value) {
    let name = case["name"].as_str().expect("name");
    let tools = tools(case);
    let got = template.render_with(
        &messages(case),
        tools.as_deref(),
        case["add_generation_prompt"].as_bool().expect("flag"),
        &kwargs(case),
    );
    if let Some(err) = case.get("error") {
        let got_err = got.expect_err(&format!("case `{name}`: HF raised {err}, trustlens rendered"));
        let msg = got_err.to_string();
        assert!(msg.contains(template.origin()), "case `{name}`: error does not name the template: {msg}");
        // raise_exception messages must come through verbatim.
        if let Some(text) = err.as_str().and_then(|e| e.strip_prefix("TemplateError: ")) {
            assert!(msg.contains(text), "case `{name}`: error lacks the template's message {text:?}: {msg}");
        }
        return;
    }
    let got = got.unwrap_or_else(|e| panic!("case `{name}`: {e}"));
    let want = case["rendered"].as_str().expect("rendered");
    assert_eq!(got, want, "case `{name}`: rendered prompt differs from HF");
    let got_ids = tokenizer.encode(&got).unwrap_or_else(|e| panic!("case `{name}`: {e}"));
    assert_eq!(got_ids, ids(&case["ids"]), "case `{name}`: token ids differ from HF");
}

#[test]
fn smollm_gguf_tokenizer_matches_hf() {
    let fx = fixture("smollm.json");
    let assets = PromptAssets::load(&smollm_path()).expect("load SmolLM GGUF");
    let tok = &assets.tokenizer;
    assert_eq!(tok.bos_id(), Some(fx["bos_id"].as_u64().unwrap() as u32));
    assert_eq!(tok.eos_ids(), vec![fx["eos_id"].as_u64().unwrap() as u32]);
    assert_eq!(tok.pad_id(), Some(fx["pad_id"].as_u64().unwrap() as u32));
    assert_eq!(tok.vocab_size(), fx["vocab_size"].as_u64().unwrap() as usize);
    assert!(!tok.add_bos(), "SmolLM's GGUF says add_bos_token = false");
    for (token, id) in fx["token_to_id"].as_object().unwrap() {
        assert_eq!(tok.token_to_id(token), Some(id.as_u64().unwrap() as u32), "token_to_id({token:?})");
    }
    for rec in fx["encode"].as_array().unwrap() {
        let text = rec["text"].as_str().unwrap();
        let (got_ids, got_offsets) = tok.encode_with_offsets(text).expect("encode");
        assert_eq!(got_ids, ids(&rec["ids"]), "ids of {text:?}");
        assert_eq!(got_offsets, offsets(&rec["offsets"]), "byte offsets of {text:?}");
        assert_eq!(tok.decode(&got_ids, false).unwrap(), rec["decoded"].as_str().unwrap(), "decode of {text:?}");
        assert_eq!(
            tok.decode(&got_ids, true).unwrap(),
            rec["decoded_skip_special"].as_str().unwrap(),
            "decode(skip_special_tokens) of {text:?}"
        );
    }
}

#[test]
fn smollm_chat_template_matches_hf() {
    let fx = fixture("smollm.json");
    let assets = PromptAssets::load(&smollm_path()).expect("load SmolLM GGUF");
    let template = assets.template.as_ref().expect("the GGUF carries a chat template");
    assert_eq!(template.source(), fx["chat_template"].as_str().unwrap());
    assert!(!template.supports_tools());
    assert_eq!(template.sha256().len(), 64);
    for case in fx["cases"].as_array().unwrap() {
        check_case(template, &assets.tokenizer, case);
    }
}

#[test]
fn llama31_template_matches_hf() {
    let fx = fixture("llama31.json");
    let smollm = PromptAssets::load(&smollm_path()).expect("load SmolLM GGUF");
    let path = root().join("tests/fixtures/templates/llama31.jinja");
    let template = ChatTemplate::from_file(&path, Some("<|begin_of_text|>".into()), Some("<|eot_id|>".into()))
        .expect("compile llama31.jinja")
        .with_special_token("unk_token", "<|endoftext|>")
        .with_special_token("pad_token", "<|im_end|>");
    assert!(template.supports_tools());
    let cases = fx["cases"].as_array().unwrap();
    assert!(cases.iter().any(|c| c.get("error").is_some()) && cases.iter().any(|c| c.get("rendered").is_some()));
    for case in cases {
        check_case(&template, &smollm.tokenizer, case);
    }
}

#[test]
fn llama31_uses_strftime_now_without_date_string() {
    let path = root().join("tests/fixtures/templates/llama31.jinja");
    let template = ChatTemplate::from_file(&path, Some("<|begin_of_text|>".into()), None).expect("compile");
    let msgs = [serde_json::json!({"role": "user", "content": "hi"})];
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let out = template.render(&msgs, None, true).expect("render");
    // Allow for the render straddling midnight.
    let dates = [strftime_utc(now, "%d %b %Y"), strftime_utc(now + 5, "%d %b %Y")];
    assert!(dates.iter().any(|d| out.contains(&format!("Today Date: {d}\n"))), "{out}");
}

#[test]
fn small_templates_match_jinja2() {
    let fx = fixture("templates.json");
    let smollm = PromptAssets::load(&smollm_path()).expect("load SmolLM GGUF");
    let s = |k: &str| fx[k].as_str().unwrap().to_string();
    for case in fx["cases"].as_array().unwrap() {
        let template = ChatTemplate::new(
            case["template"].as_str().unwrap().to_string(),
            Some(s("bos_token")),
            Some(s("eos_token")),
        )
        .unwrap_or_else(|e| panic!("case `{}`: {e}", case["name"]))
        .with_special_token("unk_token", &s("unk_token"))
        .with_special_token("pad_token", &s("pad_token"));
        check_case(&template, &smollm.tokenizer, case);
    }
}

#[test]
fn strftime_matches_python() {
    for case in fixture("strftime.json").as_array().unwrap() {
        let (ts, fmt) = (case["ts"].as_i64().unwrap(), case["format"].as_str().unwrap());
        assert_eq!(strftime_utc(ts, fmt), case["out"].as_str().unwrap(), "strftime({ts}, {fmt:?})");
    }
}

fn bos_count(ids: &[u32], bos: u32) -> usize {
    ids.iter().filter(|&&i| i == bos).count()
}

/// HF's own ids with a doubled leading BOS collapsed: what the no-double-BOS rule must give.
fn collapse_double_bos(mut ids: Vec<u32>, bos: u32) -> Vec<u32> {
    if ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
        ids.remove(0);
    }
    ids
}

#[test]
fn tokenizer_dir_with_bos_post_processor_never_doubles_bos() {
    let fx = fixture("bos.json");
    let dir = fixture_dir().join("bos");
    let assets = PromptAssets::load(&dir).expect("load tokenizer directory");
    let tok = &assets.tokenizer;
    let bos = fx["bos_id"].as_u64().unwrap() as u32;
    assert_eq!(tok.bos_id(), Some(bos));
    assert!(tok.add_bos(), "the saved post-processor adds BOS, so add_bos must be detected");

    // The directory's chat_template.jinja writes the BOS itself: exactly one BOS, as apply_chat_template gives.
    let template = assets.template.as_ref().expect("chat_template.jinja");
    let msgs: Vec<Value> = fx["messages"].as_array().unwrap().clone();
    let rendered = template.render(&msgs, None, true).expect("render");
    assert_eq!(rendered, fx["rendered"].as_str().unwrap());
    let got = tok.encode(&rendered).expect("encode");
    assert_eq!(got, ids(&fx["chat_ids"]));
    assert_eq!(got[0], bos);
    assert_eq!(bos_count(&got, bos), 1);
    // Whereas HF's plain tokenizer call doubles it: the case the rule exists for.
    assert_eq!(&ids(&fx["plain_call_ids"])[..2], &[bos, bos]);

    // Text without a leading BOS gets one; text with one keeps exactly one.
    for rec in fx["texts"].as_array().unwrap() {
        let text = rec["text"].as_str().unwrap();
        let got = tok.encode(text).expect("encode");
        assert_eq!(got, collapse_double_bos(ids(&rec["ids"]), bos), "encode({text:?})");
        assert_eq!(got[0], bos, "encode({text:?}) starts with BOS");
        assert!(got.len() < 2 || got[1] != bos, "encode({text:?}) has a double BOS");
    }

    // The Llama-3.1-style template, rendered with this tokenizer's special tokens.
    let src = std::fs::read_to_string(root().join("tests/fixtures/templates/llama31.jinja")).unwrap();
    let llama = tok.chat_template(src, "llama31.jinja").expect("compile");
    let tools: Vec<Value> = fixture("llama31.json")["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "tools_user")
        .and_then(|c| c["tools"].as_array().cloned())
        .expect("tools fixture");
    let mut extra = Map::new();
    extra.insert("date_string".into(), Value::from("26 Jul 2024"));
    let rendered = llama.render_with(&msgs, Some(&tools), true, &extra).expect("render");
    assert_eq!(rendered, fx["llama31_rendered"].as_str().unwrap());
    let got = tok.encode(&rendered).expect("encode");
    assert_eq!(got, ids(&fx["llama31_ids"]));
    assert_eq!(bos_count(&got, bos), 1);
}

#[test]
fn smollm_with_forced_bos_keeps_one_bos() {
    // SmolLM's BOS is `<|im_start|>`, which every ChatML turn starts with: forcing add_bos must not add another.
    let mut assets = PromptAssets::load(&smollm_path()).expect("load");
    assets.tokenizer.set_add_bos(true);
    let template = assets.template.as_ref().unwrap();
    let text = template.render(&[serde_json::json!({"role": "user", "content": "hi"})], None, true).unwrap();
    let ids = assets.tokenizer.encode(&text).unwrap();
    assert_eq!(ids[0], 1);
    assert_ne!(ids[1], 1);
    assert_eq!(assets.tokenizer.encode("hi").unwrap()[0], 1);
}

#[test]
fn sentencepiece_gguf_matches_hf() {
    let fx = fixture("tiny_llama.json");
    let path: &Path = &fixture_dir().join("tiny_llama.gguf");
    let gguf = GgufFile::open(path).expect("open tiny_llama.gguf");
    let tok = Tokenizer::from_gguf(&gguf).expect("build SentencePiece tokenizer");
    let bos = fx["bos_id"].as_u64().unwrap() as u32;
    assert_eq!(tok.bos_id(), Some(bos));
    assert!(tok.add_bos(), "llama vocabularies add BOS by default");
    assert_eq!(tok.eos_ids(), vec![fx["eos_id"].as_u64().unwrap() as u32]);
    assert_eq!(tok.vocab_size(), fx["vocab_size"].as_u64().unwrap() as usize);
    for rec in fx["encode"].as_array().unwrap() {
        let text = rec["text"].as_str().unwrap();
        let plain = ids(&rec["ids"]);
        let (got, got_offsets) = tok.encode_with_offsets(text).expect("encode");
        assert_eq!(got, collapse_double_bos(ids(&rec["ids_with_bos"]), bos), "encode({text:?})");
        let mut want_offsets = offsets(&rec["offsets"]);
        if plain.first() != Some(&bos) {
            want_offsets.insert(0, (0, 0));
        }
        assert_eq!(got_offsets, want_offsets, "offsets of {text:?}");
        assert_eq!(tok.decode(&plain, false).unwrap(), rec["decoded"].as_str().unwrap(), "decode of {text:?}");
        assert_eq!(tok.decode(&plain, true).unwrap(), rec["decoded_skip_special"].as_str().unwrap());
    }
    let assets = PromptAssets::load(path).expect("load tiny_llama.gguf");
    let chat = &fx["chat"];
    let rendered = assets.template.as_ref().unwrap().render(&messages(chat), None, false).unwrap();
    assert_eq!(rendered, chat["rendered"].as_str().unwrap());
    let got = assets.tokenizer.encode(&rendered).unwrap();
    assert_eq!(got, ids(&chat["ids"]));
    assert_eq!(bos_count(&got, bos), 1);
}
