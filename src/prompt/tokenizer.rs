//! [`Tokenizer`]: a `tokenizers` tokenizer plus the special tokens and BOS rule transformers would use.
use super::{gguf_vocab, ChatTemplate, PromptError};
use crate::model::gguf::GgufFile;
use serde_json::Value as Json;
use std::path::Path;

/// Byte ranges `(start, end)` of tokens in the encoded text.
pub type Offsets = Vec<(usize, usize)>;

/// A tokenizer with its special tokens.
///
/// Encoding never applies the `tokenizers` post-processor (as `apply_chat_template(tokenize=True)` does not);
/// instead a BOS is prepended when [`Tokenizer::add_bos`] is set and the encoded text does not already start with
/// the BOS token, so every prompt has at most one leading BOS.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    origin: String,
    bos: Option<(String, u32)>,
    eos: Option<(String, u32)>,
    extra_eos_ids: Vec<u32>,
    unk: Option<String>,
    pad: Option<(String, u32)>,
    add_bos: bool,
}

/// Special tokens and flags from `tokenizer_config.json` / GGUF metadata.
#[derive(Debug, Default)]
pub(super) struct SpecialTokens {
    pub bos: Option<String>,
    pub eos: Option<String>,
    pub unk: Option<String>,
    pub pad: Option<String>,
    pub add_bos: Option<bool>,
    pub extra_eos_ids: Vec<u32>,
}

impl Tokenizer {
    /// Load a `tokenizer.json`. When they lie beside it, `tokenizer_config.json` supplies the special tokens and
    /// `add_bos_token`, and `generation_config.json` extra EOS ids (`eos_token_id`, a number or a list).
    /// Without `add_bos_token`, BOS is added when the file's post-processor would add it.
    pub fn from_file(path: &Path) -> Result<Self, PromptError> {
        let bytes = std::fs::read(path).map_err(|source| PromptError::Io { path: path.to_path_buf(), source })?;
        let inner = tokenizers::Tokenizer::from_bytes(&bytes)
            .map_err(|e| PromptError::BadTokenizer { path: path.to_path_buf(), message: e.to_string() })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut special = read_tokenizer_config(&dir.join("tokenizer_config.json"))?;
        special.extra_eos_ids = read_generation_eos(&dir.join("generation_config.json"))?;
        let mut tok = Self::assemble(inner, path.display().to_string(), special)?;
        if !tok.add_bos {
            // transformers follows the post-processor in tokenizer.json: detect whether it adds the BOS.
            if let Some((_, bos)) = &tok.bos {
                let enc = tok.inner.encode("", true).map_err(|e| tok.tokenize_error("encoding", e))?;
                tok.add_bos = enc.get_ids().first() == Some(bos);
            }
        }
        Ok(tok)
    }

    /// Build the tokenizer a GGUF file's metadata describes, the way transformers converts it
    /// (`AutoTokenizer.from_pretrained(dir, gguf_file=...)`): byte-level BPE for `tokenizer.ggml.model = "gpt2"`,
    /// SentencePiece-style BPE with byte fallback for `"llama"`. BOS is added when `tokenizer.ggml.add_bos_token`
    /// says so (default: yes for `llama`, no otherwise). EOS ids are `eos_token_id` plus, when present, llama.cpp's
    /// `eot_token_id` and `eom_token_id`.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, PromptError> {
        let built = gguf_vocab::build(gguf)?;
        let inner = serde_json::from_value::<tokenizers::Tokenizer>(built.json).map_err(|e| {
            PromptError::GgufTokenizer { path: gguf.path.clone(), message: format!("tokenizers rejected it: {e}") }
        })?;
        Self::assemble(inner, gguf.path.display().to_string(), built.special)
    }

    fn assemble(mut inner: tokenizers::Tokenizer, origin: String, sp: SpecialTokens) -> Result<Self, PromptError> {
        // transformers only truncates or pads when asked to; a tokenizer.json may carry either setting.
        inner
            .with_truncation(None)
            .map_err(|e| PromptError::Tokenize { origin: origin.clone(), message: e.to_string() })?;
        inner.with_padding(None);
        let with_id = |t: Option<String>| t.and_then(|t| inner.token_to_id(&t).map(|id| (t, id)));
        let bos = with_id(sp.bos);
        let eos = with_id(sp.eos);
        let pad = with_id(sp.pad);
        Ok(Tokenizer {
            add_bos: sp.add_bos.unwrap_or(false) && bos.is_some(),
            origin,
            bos,
            eos,
            extra_eos_ids: sp.extra_eos_ids,
            unk: sp.unk,
            pad,
            inner,
        })
    }

    /// Encode a rendered prompt: special tokens in the text are recognised; BOS is prepended only if the tokenizer
    /// is configured to add it AND the text does not already start with the BOS token (never a double BOS).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, PromptError> {
        Ok(self.encode_with_offsets(text)?.0)
    }

    /// [`Tokenizer::encode`] with each token's byte range in `text`; a prepended BOS gets `(0, 0)`.
    pub fn encode_with_offsets(&self, text: &str) -> Result<(Vec<u32>, Offsets), PromptError> {
        let enc = self.inner.encode(text, false).map_err(|e| self.tokenize_error("encoding", e))?;
        let mut ids = enc.get_ids().to_vec();
        let mut offsets = enc.get_offsets().to_vec();
        if let (true, Some((_, bos))) = (self.add_bos, &self.bos) {
            if ids.first() != Some(bos) {
                ids.insert(0, *bos);
                offsets.insert(0, (0, 0));
            }
        }
        Ok((ids, offsets))
    }

    /// Decode ids to text (byte-level pieces are merged back into UTF-8).
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, PromptError> {
        self.inner.decode(ids, skip_special_tokens).map_err(|e| self.tokenize_error("decoding", e))
    }

    /// The BOS token id, if the tokenizer has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos.as_ref().map(|b| b.1)
    }

    /// Ids that end generation: the EOS token first, then any extra ones (generation_config.json, GGUF EOT/EOM).
    pub fn eos_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.eos.iter().map(|e| e.1).collect();
        for &id in &self.extra_eos_ids {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        ids
    }

    /// The padding token id, if any.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad.as_ref().map(|p| p.1)
    }

    /// Number of ids, added tokens included (Python's `len(tokenizer)`).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token spelled as in the vocabulary (byte-level spelling for GPT-2-style vocabularies).
    pub fn token_to_id(&self, tok: &str) -> Option<u32> {
        self.inner.token_to_id(tok)
    }

    /// The vocabulary spelling of an id.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The BOS token text (`bos_token` in templates).
    pub fn bos_token(&self) -> Option<&str> {
        self.bos.as_ref().map(|b| b.0.as_str())
    }

    /// The EOS token text (`eos_token` in templates).
    pub fn eos_token(&self) -> Option<&str> {
        self.eos.as_ref().map(|e| e.0.as_str())
    }

    /// Whether [`Tokenizer::encode`] prepends a BOS to text that does not start with one.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Override the BOS rule (has no effect without a BOS token).
    pub fn set_add_bos(&mut self, add_bos: bool) {
        self.add_bos = add_bos && self.bos.is_some();
    }

    /// Where the tokenizer came from (a file path), for messages.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// A [`ChatTemplate`] from `source` that sees this tokenizer's special tokens (`bos_token`, `eos_token`,
    /// `unk_token`, `pad_token`) as transformers passes them; `origin` names the template in errors.
    pub fn chat_template(&self, source: String, origin: impl Into<String>) -> Result<ChatTemplate, PromptError> {
        let mut t = ChatTemplate::new_with_origin(
            source,
            self.bos_token().map(str::to_string),
            self.eos_token().map(str::to_string),
            origin.into(),
        )?;
        if let Some(unk) = &self.unk {
            t = t.with_special_token("unk_token", unk);
        }
        if let Some((pad, _)) = &self.pad {
            t = t.with_special_token("pad_token", pad);
        }
        Ok(t)
    }

    fn tokenize_error(&self, what: &str, e: impl std::fmt::Display) -> PromptError {
        PromptError::Tokenize { origin: self.origin.clone(), message: format!("{what} failed: {e}") }
    }
}

fn read_json(path: &Path) -> Result<Option<Json>, PromptError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|source| PromptError::Io { path: path.to_path_buf(), source })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| PromptError::BadConfig { path: path.to_path_buf(), message: format!("invalid JSON: {e}") })
}

/// A special token in tokenizer_config.json: a string or an AddedToken object with `content`.
fn token_field(config: &Json, key: &str) -> Option<String> {
    match config.get(key)? {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content").and_then(Json::as_str).map(str::to_string),
        _ => None,
    }
}

fn read_tokenizer_config(path: &Path) -> Result<SpecialTokens, PromptError> {
    let Some(config) = read_json(path)? else {
        return Ok(SpecialTokens::default());
    };
    if !config.is_object() {
        return Err(PromptError::BadConfig { path: path.to_path_buf(), message: "expected a JSON object".into() });
    }
    Ok(SpecialTokens {
        bos: token_field(&config, "bos_token"),
        eos: token_field(&config, "eos_token"),
        unk: token_field(&config, "unk_token"),
        pad: token_field(&config, "pad_token"),
        add_bos: config.get("add_bos_token").and_then(Json::as_bool),
        extra_eos_ids: Vec::new(),
    })
}

/// The chat template in a tokenizer_config.json: a string, or a list of `{name, template}` of which the one named
/// `default` is used.
pub(super) fn read_config_template(path: &Path) -> Result<Option<String>, PromptError> {
    let Some(config) = read_json(path)? else {
        return Ok(None);
    };
    Ok(match config.get("chat_template") {
        Some(Json::String(s)) => Some(s.clone()),
        Some(Json::Array(list)) => list
            .iter()
            .find(|t| t.get("name").and_then(Json::as_str) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(Json::as_str)
            .map(str::to_string),
        _ => None,
    })
}

fn read_generation_eos(path: &Path) -> Result<Vec<u32>, PromptError> {
    let Some(config) = read_json(path)? else {
        return Ok(Vec::new());
    };
    let to_id = |v: &Json| v.as_u64().and_then(|n| u32::try_from(n).ok());
    Ok(match config.get("eos_token_id") {
        Some(Json::Array(list)) => list.iter().filter_map(to_id).collect(),
        Some(v) => to_id(v).into_iter().collect(),
        None => Vec::new(),
    })
}
