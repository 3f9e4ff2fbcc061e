//! Error paths and the BOS rule of `trustlens::prompt`, on small files written here (no fixtures needed).
use serde_json::{json, Map};
use std::path::Path;
use trustlens::model::gguf::GgufFile;
use trustlens::prompt::{ChatTemplate, PromptAssets, PromptError, Tokenizer};

const WORD_LEVEL: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": true}],
  "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
  "model": {"type": "WordLevel", "vocab": {"<s>": 0, "hi": 1, "there": 2, "</s>": 3, "[UNK]": 4}, "unk_token": "[UNK]"}
}"#;

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write test file");
    p
}

fn assert_names(err: &PromptError, path: &Path, what: &str) {
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "error does not name {}: {msg}", path.display());
    assert!(msg.contains(what), "error does not say {what:?}: {msg}");
}

#[test]
fn missing_tokenizer_json_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    let err = Tokenizer::from_file(&path).unwrap_err();
    assert!(matches!(err, PromptError::Io { .. }));
    assert_names(&err, &path, "cannot read");
    // A model directory without one.
    let err = PromptAssets::load(dir.path()).unwrap_err();
    assert_names(&err, &path, "cannot read");
}

#[test]
fn malformed_tokenizer_json_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "tokenizer.json", "{\"version\": \"1.0\", \"model\": ");
    let err = Tokenizer::from_file(&path).unwrap_err();
    assert!(matches!(err, PromptError::BadTokenizer { .. }));
    assert_names(&err, &path, "not a valid tokenizer.json");
}

#[test]
fn malformed_tokenizer_config_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tokenizer.json", WORD_LEVEL);
    let config = write(dir.path(), "tokenizer_config.json", "{\"bos_token\": ");
    let err = PromptAssets::load(dir.path()).unwrap_err();
    assert!(matches!(err, PromptError::BadConfig { .. }));
    assert_names(&err, &config, "invalid JSON");
}

#[test]
fn template_syntax_error_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "bad.jinja", "{% for m in messages %}{{ m.content }}");
    let err = ChatTemplate::from_file(&path, None, None).unwrap_err();
    assert!(matches!(err, PromptError::TemplateSyntax { .. }));
    assert_names(&err, &path, "syntax error");

    let err = ChatTemplate::new("{{ messages[0] }".into(), None, None).unwrap_err();
    assert!(err.to_string().contains("<chat template>: chat template syntax error"), "{err}");

    // The same error through a model directory names chat_template.jinja.
    write(dir.path(), "tokenizer.json", WORD_LEVEL);
    let jinja = write(dir.path(), "chat_template.jinja", "{% if %}");
    let err = PromptAssets::load(dir.path()).unwrap_err();
    assert_names(&err, &jinja, "syntax error");
}

#[test]
fn render_errors_carry_the_template_message() {
    let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}".into(), None, None)
        .unwrap()
        .with_origin("my_template.jinja");
    let msgs = [json!({"role": "user", "content": "x"})];
    let err = t.render(&msgs, None, false).unwrap_err();
    assert!(matches!(err, PromptError::TemplateRender { .. }));
    assert!(err.to_string().starts_with("my_template.jinja: chat template failed to render"), "{err}");
    assert!(err.to_string().contains("roles must alternate"), "{err}");
}

#[test]
fn bad_render_inputs_are_errors() {
    let t = ChatTemplate::new("{% for m in messages %}{{ m.content }}{% endfor %}".into(), None, None).unwrap();
    assert!(t.render(&[], None, false).unwrap_err().to_string().contains("empty conversation"));
    assert!(t.render(&[json!("hi")], None, false).unwrap_err().to_string().contains("not a JSON object"));
    let msgs = [json!({"role": "user", "content": "x"})];
    assert!(t.render(&msgs, Some(&[json!(3)]), false).unwrap_err().to_string().contains("tool #0"));
    let mut extra = Map::new();
    extra.insert("messages".into(), json!([]));
    assert!(t.render_with(&msgs, None, false, &extra).unwrap_err().to_string().contains("clashes"));
    // Undefined attribute access fails like Jinja2's default Undefined.
    let t = ChatTemplate::new("{{ messages[0].content.nope.deeper }}".into(), None, None).unwrap();
    assert!(t.render(&msgs, None, false).is_err());
}

#[test]
fn gguf_without_tokenizer_metadata_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes()); // tensors
    bytes.extend(1u64.to_le_bytes()); // metadata entries
    let key = b"general.architecture";
    bytes.extend((key.len() as u64).to_le_bytes());
    bytes.extend(key);
    bytes.extend(8u32.to_le_bytes()); // string
    bytes.extend(5u64.to_le_bytes());
    bytes.extend(b"llama");
    let path = dir.path().join("empty.gguf");
    std::fs::write(&path, bytes).unwrap();
    let gguf = GgufFile::open(&path).expect("valid GGUF");
    let err = Tokenizer::from_gguf(&gguf).unwrap_err();
    assert_names(&err, &path, "tokenizer.ggml.model");
    let err = PromptAssets::load(&path).unwrap_err();
    assert_names(&err, &path, "tokenizer.ggml.model");
}

#[test]
fn unusable_model_paths_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let other = write(dir.path(), "weights.bin", "x");
    assert_names(&PromptAssets::load(&other).unwrap_err(), &other, "cannot find a tokenizer");
    let missing = dir.path().join("nope.gguf");
    assert_names(&PromptAssets::load(&missing).unwrap_err(), &missing, "no such file");
}

#[test]
fn config_add_bos_never_doubles_bos() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tokenizer.json", WORD_LEVEL);
    write(
        dir.path(),
        "tokenizer_config.json",
        r#"{"add_bos_token": true, "bos_token": {"content": "<s>", "special": true}, "eos_token": "</s>",
            "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }} {% endfor %}"}"#,
    );
    write(dir.path(), "generation_config.json", r#"{"eos_token_id": [3, 0]}"#);
    let assets = PromptAssets::load(&dir.path().join("tokenizer.json")).unwrap();
    let tok = &assets.tokenizer;
    assert!(tok.add_bos());
    assert_eq!(tok.bos_id(), Some(0));
    assert_eq!(tok.eos_ids(), vec![3, 0]);
    assert_eq!(tok.encode("hi there").unwrap(), vec![0, 1, 2]);
    assert_eq!(tok.encode("<s> hi there").unwrap(), vec![0, 1, 2]);
    let (ids, offsets) = tok.encode_with_offsets("hi").unwrap();
    assert_eq!((ids, offsets), (vec![0, 1], vec![(0, 0), (0, 2)]));
    let text =
        assets.template.as_ref().unwrap().render(&[json!({"role": "user", "content": "hi"})], None, false).unwrap();
    assert_eq!(text, "<s>hi ");
    assert_eq!(tok.encode(&text).unwrap(), vec![0, 1]);
    let mut tok = tok.clone();
    tok.set_add_bos(false);
    assert_eq!(tok.encode("hi").unwrap(), vec![1]);
}

/// A metadata-only GGUF with string entries.
fn write_gguf(path: &Path, entries: &[(&str, &str)]) {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.extend((entries.len() as u64).to_le_bytes());
    for (key, value) in entries {
        bytes.extend((key.len() as u64).to_le_bytes());
        bytes.extend(key.as_bytes());
        bytes.extend(8u32.to_le_bytes());
        bytes.extend((value.len() as u64).to_le_bytes());
        bytes.extend(value.as_bytes());
    }
    std::fs::write(path, bytes).expect("write GGUF");
}

#[test]
fn gguf_beside_tokenizer_json_uses_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "tokenizer.json", WORD_LEVEL);
    write(dir.path(), "tokenizer_config.json", r#"{"bos_token": "<s>", "eos_token": "</s>"}"#);
    let path = dir.path().join("model.gguf");
    write_gguf(&path, &[("general.architecture", "llama"), ("tokenizer.chat_template", "[{{ eos_token }}]")]);
    let assets = PromptAssets::load(&path).expect("load");
    assert_eq!(assets.tokenizer.origin(), dir.path().join("tokenizer.json").display().to_string());
    assert!(!assets.tokenizer.add_bos(), "no add_bos_token and no BOS-adding post-processor");
    let template = assets.template.expect("the GGUF's template fills in");
    assert!(template.origin().contains("model.gguf (tokenizer.chat_template)"));
    assert_eq!(template.render(&[json!({"role": "user", "content": "x"})], None, false).unwrap(), "[</s>]");
}
