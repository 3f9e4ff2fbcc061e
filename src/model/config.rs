//! Model configuration, deserialised straight from Hugging Face `config.json` (or built from GGUF metadata with the
//! same field names), so there is one description of an architecture whatever the weight format.
use super::gguf::GgufFile;
use super::ModelError;
use serde::Deserialize;
use std::path::Path;

/// The decoder families trustlens runs. They share one forward pass (pre-norm, RMSNorm, RoPE, GQA, SwiGLU); they
/// differ in biases, tying and rope variants, all of which the config carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Mistral,
    Qwen2,
}

impl Architecture {
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Mistral => "mistral",
            Architecture::Qwen2 => "qwen2",
        }
    }
}

/// `rope_scaling` as HF writes it (`type` in older files, `rope_type` in newer ones).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RopeScaling {
    #[serde(alias = "type")]
    pub rope_type: String,
    #[serde(default)]
    pub factor: Option<f64>,
    #[serde(default)]
    pub low_freq_factor: Option<f64>,
    #[serde(default)]
    pub high_freq_factor: Option<f64>,
    #[serde(default)]
    pub original_max_position_embeddings: Option<usize>,
}

/// HF `config.json` for `LlamaForCausalLM`, `MistralForCausalLM` and `Qwen2ForCausalLM`.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub model_type: Option<String>,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    #[serde(default)]
    pub head_dim: Option<usize>,
    pub vocab_size: usize,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    #[serde(default)]
    pub rope_scaling: Option<RopeScaling>,
    /// transformers >= 5 writes `rope_theta` and the scaling into one `rope_parameters` object; [`Self::from_file`]
    /// folds it into `rope_theta` / `rope_scaling`.
    #[serde(default)]
    pub rope_parameters: Option<serde_json::Value>,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Llama's switch for q/k/v/o biases; Qwen2 always has q/k/v biases.
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    #[serde(default)]
    pub bos_token_id: Option<serde_json::Value>,
    #[serde(default)]
    pub eos_token_id: Option<serde_json::Value>,
    #[serde(default)]
    pub hidden_act: Option<String>,
    #[serde(default)]
    pub torch_dtype: Option<String>,
    /// Mistral-style sliding window. trustlens attends over the full prompt; prompts longer than the window are
    /// refused rather than silently computed differently.
    #[serde(default)]
    pub sliding_window: Option<usize>,
    #[serde(default)]
    pub use_sliding_window: Option<bool>,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_theta() -> f64 {
    10000.0
}

impl ModelConfig {
    /// Parse `config.json`, check the architecture is one we run and the numbers are consistent.
    pub fn from_file(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
        let mut cfg: ModelConfig = serde_json::from_str(&text)
            .map_err(|e| ModelError::BadConfig { path: path.to_path_buf(), why: e.to_string() })?;
        if let Some(rp) = cfg.rope_parameters.take() {
            if let Some(theta) = rp.get("rope_theta").and_then(|v| v.as_f64()) {
                cfg.rope_theta = theta;
            }
            let rs: RopeScaling = serde_json::from_value(rp).map_err(|e| ModelError::BadConfig {
                path: path.to_path_buf(),
                why: format!("rope_parameters: {e}"),
            })?;
            if rs.rope_type != "default" {
                cfg.rope_scaling = Some(rs);
            }
        }
        cfg.architecture().map_err(|why| ModelError::BadConfig { path: path.to_path_buf(), why })?;
        cfg.check().map_err(|why| ModelError::BadConfig { path: path.to_path_buf(), why })?;
        Ok(cfg)
    }

    /// Build the same configuration from GGUF metadata (`{arch}.block_count`, ...).
    pub fn from_gguf(g: &GgufFile) -> Result<Self, ModelError> {
        let bad = |why: String| ModelError::BadConfig { path: g.path.clone(), why };
        let arch = g
            .get("general.architecture")
            .and_then(|v| v.as_str())
            .ok_or_else(|| bad("GGUF metadata has no general.architecture".into()))?
            .to_string();
        let (model_type, hf_arch) = match arch.as_str() {
            "llama" => ("llama", "LlamaForCausalLM"),
            "mistral" => ("mistral", "MistralForCausalLM"),
            "qwen2" => ("qwen2", "Qwen2ForCausalLM"),
            other => {
                return Err(bad(format!(
                    "unsupported architecture `{other}` (trustlens runs llama, mistral and qwen2 decoders)"
                )))
            }
        };
        let u = |k: &str| -> Result<usize, ModelError> {
            g.get(&format!("{arch}.{k}"))
                .and_then(|v| v.as_u64())
                .map(|v| v as usize)
                .ok_or_else(|| bad(format!("GGUF metadata lacks {arch}.{k}")))
        };
        let f = |k: &str| g.get(&format!("{arch}.{k}")).and_then(|v| v.as_f64());
        let hidden = u("embedding_length")?;
        let heads = u("attention.head_count")?;
        let kv = u("attention.head_count_kv").unwrap_or(heads);
        let vocab = match g.get(&format!("{arch}.vocab_size")).and_then(|v| v.as_u64()) {
            Some(v) => v as usize,
            None => g
                .get("tokenizer.ggml.tokens")
                .and_then(|v| v.as_array())
                .map(|a| a.len())
                .or_else(|| g.tensor_info("token_embd.weight").map(|t| t.shape[0]))
                .ok_or_else(|| bad("cannot tell the vocabulary size".into()))?,
        };
        let head_dim =
            g.get(&format!("{arch}.attention.key_length")).and_then(|v| v.as_u64()).map(|v| v as usize).or_else(|| {
                g.get(&format!("{arch}.rope.dimension_count")).and_then(|v| v.as_u64()).map(|v| v as usize)
            });
        let rope_scaling = match g.get(&format!("{arch}.rope.scaling.type")).and_then(|v| v.as_str()) {
            Some("linear") => Some(RopeScaling {
                rope_type: "linear".into(),
                factor: f("rope.scaling.factor"),
                low_freq_factor: None,
                high_freq_factor: None,
                original_max_position_embeddings: None,
            }),
            _ => None,
        };
        let tie = g.tensor_info("output.weight").is_none();
        let cfg = ModelConfig {
            architectures: vec![hf_arch.to_string()],
            model_type: Some(model_type.to_string()),
            hidden_size: hidden,
            intermediate_size: u("feed_forward_length")?,
            num_hidden_layers: u("block_count")?,
            num_attention_heads: heads,
            num_key_value_heads: Some(kv),
            head_dim,
            vocab_size: vocab,
            rms_norm_eps: f("attention.layer_norm_rms_epsilon").unwrap_or(1e-5),
            rope_theta: f("rope.freq_base").unwrap_or(10000.0),
            rope_scaling,
            rope_parameters: None,
            tie_word_embeddings: tie,
            attention_bias: g.tensor_info("blk.0.attn_q.bias").is_some(),
            max_position_embeddings: u("context_length").ok(),
            bos_token_id: g.get("tokenizer.ggml.bos_token_id").and_then(|v| v.as_u64()).map(Into::into),
            eos_token_id: g.get("tokenizer.ggml.eos_token_id").and_then(|v| v.as_u64()).map(Into::into),
            hidden_act: Some("silu".into()),
            torch_dtype: None,
            sliding_window: None,
            use_sliding_window: None,
        };
        cfg.check().map_err(bad)?;
        Ok(cfg)
    }

    /// Which decoder family this config describes.
    pub fn architecture(&self) -> Result<Architecture, String> {
        let from_arch = self.architectures.iter().find_map(|a| match a.as_str() {
            "LlamaForCausalLM" => Some(Architecture::Llama),
            "MistralForCausalLM" => Some(Architecture::Mistral),
            "Qwen2ForCausalLM" => Some(Architecture::Qwen2),
            _ => None,
        });
        let from_type = self.model_type.as_deref().and_then(|t| match t {
            "llama" => Some(Architecture::Llama),
            "mistral" => Some(Architecture::Mistral),
            "qwen2" => Some(Architecture::Qwen2),
            _ => None,
        });
        from_arch.or(from_type).ok_or_else(|| {
            format!(
                "unsupported architecture {:?} / model_type {:?} (trustlens runs LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM)",
                self.architectures,
                self.model_type.as_deref().unwrap_or("none")
            )
        })
    }

    pub fn n_kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }

    /// Whether q/k/v projections carry biases (always for Qwen2, `attention_bias` for Llama).
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias || self.architecture() == Ok(Architecture::Qwen2)
    }

    /// Whether o_proj carries a bias (Llama's `attention_bias` only).
    pub fn o_bias(&self) -> bool {
        self.attention_bias && self.architecture() != Ok(Architecture::Qwen2)
    }

    fn check(&self) -> Result<(), String> {
        let nz = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("vocab_size", self.vocab_size),
        ];
        for (k, v) in nz {
            if v == 0 {
                return Err(format!("{k} is 0"));
            }
        }
        if self.n_kv_heads() == 0 || !self.num_attention_heads.is_multiple_of(self.n_kv_heads()) {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads,
                self.n_kv_heads()
            ));
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!(
                "hidden_size {} is not divisible by num_attention_heads {} and no head_dim is given",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(format!("head_dim {} is odd; rotary embeddings need an even head_dim", self.head_dim()));
        }
        if let Some(act) = &self.hidden_act {
            if act != "silu" && act != "swish" {
                return Err(format!("hidden_act `{act}` is not supported (silu only)"));
            }
        }
        if let Some(rs) = &self.rope_scaling {
            match rs.rope_type.as_str() {
                "default" => {}
                "linear" => {
                    rs.factor.ok_or("rope_scaling of type linear needs `factor`")?;
                }
                "llama3" => {
                    for (k, v) in [
                        ("factor", rs.factor),
                        ("low_freq_factor", rs.low_freq_factor),
                        ("high_freq_factor", rs.high_freq_factor),
                    ] {
                        v.ok_or_else(|| format!("rope_scaling of type llama3 needs `{k}`"))?;
                    }
                    rs.original_max_position_embeddings
                        .ok_or("rope_scaling of type llama3 needs `original_max_position_embeddings`")?;
                }
                other => return Err(format!("rope_scaling type `{other}` is not supported (default, linear, llama3)")),
            }
        }
        Ok(())
    }

    /// End-of-sequence token ids named in the config (an int or a list).
    pub fn eos_ids(&self) -> Vec<u32> {
        match &self.eos_token_id {
            Some(serde_json::Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
            Some(serde_json::Value::Array(a)) => a.iter().filter_map(|v| v.as_u64()).map(|v| v as u32).collect(),
            _ => vec![],
        }
    }
}
