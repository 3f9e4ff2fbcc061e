//! Tokenizers and chat templates: everything that turns messages into token ids the way Hugging Face does.
//!
//! - [`Tokenizer`] wraps a `tokenizers` tokenizer loaded from `tokenizer.json` or rebuilt from GGUF metadata the
//!   way `transformers` converts it, with one BOS rule: a BOS is prepended only when the tokenizer is configured to
//!   add one and the text does not already start with it.
//! - [`ChatTemplate`] renders a Jinja chat template with minijinja configured like `apply_chat_template`.
//! - [`PromptAssets::load`] finds both for a model path.
use crate::model::gguf::{GgufError, GgufFile};
use std::path::{Path, PathBuf};

mod gguf_vocab;
mod pyfmt;
pub mod template;
pub mod tokenizer;

pub use template::{strftime_utc, ChatTemplate};
pub use tokenizer::Tokenizer;

/// Errors while loading tokenizers and templates, encoding text or rendering prompts. Every message names the
/// file (or the template's origin) and the problem.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// A file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `tokenizer.json` exists but the `tokenizers` crate cannot load it.
    #[error("{}: not a valid tokenizer.json: {message}", path.display())]
    BadTokenizer { path: PathBuf, message: String },
    /// A JSON side file (`tokenizer_config.json`, `generation_config.json`) is malformed.
    #[error("{}: {message}", path.display())]
    BadConfig { path: PathBuf, message: String },
    /// The GGUF file itself could not be read.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The GGUF metadata does not describe a tokenizer trustlens can rebuild.
    #[error("{}: cannot build a tokenizer from the GGUF metadata: {message}", path.display())]
    GgufTokenizer { path: PathBuf, message: String },
    /// No tokenizer could be found for a model path.
    #[error("{}: {message}", path.display())]
    NoTokenizer { path: PathBuf, message: String },
    /// The chat template does not parse.
    #[error("{origin}: chat template syntax error: {message}")]
    TemplateSyntax { origin: String, message: String },
    /// Rendering failed: the template called `raise_exception`, hit an undefined value, or got bad input.
    #[error("{origin}: chat template failed to render: {message}")]
    TemplateRender { origin: String, message: String },
    /// Encoding or decoding failed inside the tokenizer.
    #[error("{origin}: {message}")]
    Tokenize { origin: String, message: String },
}

/// Tokenizer and chat template for one model.
#[derive(Debug, Clone)]
pub struct PromptAssets {
    /// The tokenizer, with its special tokens and BOS rule.
    pub tokenizer: Tokenizer,
    /// The chat template, if the model ships one.
    pub template: Option<ChatTemplate>,
}

impl PromptAssets {
    /// Tokenizer + chat template for a model path:
    /// - a directory with `tokenizer.json` (plus, when present, `tokenizer_config.json` for the special tokens,
    ///   `add_bos_token` and `chat_template`, `chat_template.jinja` which takes precedence as in transformers, and
    ///   `generation_config.json` for extra EOS ids);
    /// - a `.gguf` file: the directory route when a `tokenizer.json` lies beside it (the GGUF's own
    ///   `tokenizer.chat_template` fills in a missing template), otherwise the tokenizer and template in its
    ///   metadata;
    /// - a `.safetensors` file or a `tokenizer.json`: its directory.
    pub fn load(model_path: &Path) -> Result<Self, PromptError> {
        if model_path.is_dir() {
            return Self::load_dir(model_path);
        }
        if !model_path.exists() {
            return Err(PromptError::NoTokenizer {
                path: model_path.to_path_buf(),
                message: "no such file or directory".into(),
            });
        }
        let dir = match model_path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let ext = model_path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
        let is_tokenizer_json = model_path.file_name().is_some_and(|n| n == "tokenizer.json");
        match ext.as_str() {
            "gguf" => {
                let gguf = GgufFile::open(model_path)?;
                if dir.join("tokenizer.json").is_file() {
                    let mut assets = Self::load_dir(&dir)?;
                    if assets.template.is_none() {
                        assets.template = gguf_template(&gguf, &assets.tokenizer)?;
                    }
                    return Ok(assets);
                }
                let tokenizer = Tokenizer::from_gguf(&gguf)?;
                let template = gguf_template(&gguf, &tokenizer)?;
                Ok(PromptAssets { tokenizer, template })
            }
            "safetensors" => Self::load_dir(&dir),
            _ if is_tokenizer_json => Self::load_dir(&dir),
            _ => Err(PromptError::NoTokenizer {
                path: model_path.to_path_buf(),
                message: "not a model directory, .gguf, .safetensors or tokenizer.json; cannot find a tokenizer".into(),
            }),
        }
    }

    fn load_dir(dir: &Path) -> Result<Self, PromptError> {
        let tokenizer = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
        let jinja = dir.join("chat_template.jinja");
        let template = if jinja.is_file() {
            let source =
                std::fs::read_to_string(&jinja).map_err(|source| PromptError::Io { path: jinja.clone(), source })?;
            Some(tokenizer.chat_template(source, jinja.display().to_string())?)
        } else {
            let config = dir.join("tokenizer_config.json");
            match tokenizer::read_config_template(&config)? {
                Some(source) => Some(tokenizer.chat_template(source, config.display().to_string())?),
                None => None,
            }
        };
        Ok(PromptAssets { tokenizer, template })
    }
}

fn gguf_template(gguf: &GgufFile, tokenizer: &Tokenizer) -> Result<Option<ChatTemplate>, PromptError> {
    match gguf.get("tokenizer.chat_template").and_then(|v| v.as_str()) {
        Some(src) => {
            let origin = format!("{} (tokenizer.chat_template)", gguf.path.display());
            Ok(Some(tokenizer.chat_template(src.to_string(), origin)?))
        }
        None => Ok(None),
    }
}
