//! Model loading and the Llama-class forward pass with hook points.
//!
//! - [`config`]: HF `config.json` (or GGUF metadata) -> [`ModelConfig`]
//! - [`weights`]: memory-mapped safetensors and GGUF behind HF tensor names
//! - [`gguf`]: the GGUF reader and dequantisers
//! - [`hooks`]: [`HookPoint`], [`HookSpec`] in, [`ActivationCache`] out
//! - [`llama`]: the forward pass, batching and greedy decoding
//! - [`placement`]: splitting the blocks over several devices by memory (`--devices cuda:0,cuda:1,cpu`)
//!
//! [`load`] resolves a path (a model directory, a `.safetensors` file, or a `.gguf` file) and builds a [`Llama`].
pub mod config;
pub mod cuda;
pub mod gguf;
pub mod hooks;
pub mod llama;
pub mod placement;
pub mod weights;

pub use config::{Architecture, ModelConfig};
pub use hooks::{ActivationCache, Capture, HookPoint, HookSpec, Intervention, InterventionMode, Positions};
pub use llama::{AttnImpl, Batch, ForwardOutput, KvCache, Llama, PrefixCache};
pub use placement::{Placement, PlacementError};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use tch::{Device, Kind};
use weights::WeightStore;

/// Everything that can go wrong loading or running a model. Messages name the file and the problem in one line.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: bad config: {why}", path = .path.display())]
    BadConfig { path: PathBuf, why: String },
    #[error("{path}: {why}", path = .path.display())]
    BadWeights { path: PathBuf, why: String },
    #[error("{path}: missing tensor `{name}`", path = .path.display())]
    MissingTensor { path: PathBuf, name: String },
    #[error("{path}: no weights found (expected model.safetensors, model.safetensors.index.json with shards, or a .gguf file)", path = .path.display())]
    NoWeights { path: PathBuf },
    #[error("{path}: PyTorch pickle checkpoints are not loaded: unpickling can run arbitrary code and cannot be memory-mapped. Convert once with Python: `from transformers import AutoModelForCausalLM; AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(OUT, safe_serialization=True)` and point trustlens at OUT", path = .path.display())]
    Pickle { path: PathBuf },
    #[error(transparent)]
    Gguf(#[from] gguf::GgufError),
    #[error("{0}")]
    Device(String),
    #[error(transparent)]
    Placement(#[from] placement::PlacementError),
    #[error("{0}")]
    Input(String),
}

impl ModelError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        ModelError::Io { path: path.to_path_buf(), source }
    }
}

/// Compute dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32,
    F16,
    BF16,
}

impl DType {
    pub fn kind(self) -> Kind {
        match self {
            DType::F32 => Kind::Float,
            DType::F16 => Kind::Half,
            DType::BF16 => Kind::BFloat16,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }
}

impl FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" | "float" => Ok(DType::F32),
            "f16" | "float16" | "half" => Ok(DType::F16),
            "bf16" | "bfloat16" => Ok(DType::BF16),
            _ => Err(format!("unknown dtype `{s}` (f32, f16, bf16)")),
        }
    }
}

/// Parse `cpu`, `cuda`, `cuda:N` or `auto` (first GPU if CUDA is usable, else CPU), checking the GPU exists.
pub fn parse_device(s: &str) -> Result<Device, ModelError> {
    let s = s.trim().to_ascii_lowercase();
    if s == "cpu" {
        return Ok(Device::Cpu);
    }
    let idx = match s.as_str() {
        "auto" | "cuda" => 0,
        _ => match s.strip_prefix("cuda:").map(|n| n.parse::<usize>()) {
            Some(Ok(n)) => n,
            _ => return Err(ModelError::Device(format!("unknown device `{s}` (cpu, cuda, cuda:N, auto)"))),
        },
    };
    if s == "auto" && !cuda::driver_present() {
        // No NVIDIA driver: don't map the CUDA libraries (hundreds of MB resident) just to learn there is no GPU.
        return Ok(Device::Cpu);
    }
    let loaded = cuda::ensure_loaded();
    let cuda_n = if loaded.is_ok() { tch::Cuda::device_count() as usize } else { 0 };
    if s == "auto" {
        return Ok(if cuda_n > 0 { Device::Cuda(0) } else { Device::Cpu });
    }
    if let Err(why) = loaded {
        return Err(ModelError::Device(format!("device `{s}` requested but {why}")));
    }
    if idx >= cuda_n {
        return Err(ModelError::Device(format!("device `{s}` requested but {cuda_n} CUDA device(s) are visible")));
    }
    Ok(Device::Cuda(idx))
}

/// Where a model's files are.
#[derive(Debug, Clone)]
pub enum ModelSource {
    /// A directory with `config.json` and safetensors weights.
    HfDir(PathBuf),
    /// A GGUF file.
    Gguf(PathBuf),
}

impl ModelSource {
    /// Resolve a user-given path. Pickle checkpoints are refused with a conversion hint.
    pub fn resolve(path: &Path) -> Result<Self, ModelError> {
        if !path.exists() {
            return Err(ModelError::io(
                path,
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
            ));
        }
        let ext = |p: &Path| p.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase()).unwrap_or_default();
        if path.is_file() {
            return match ext(path).as_str() {
                "gguf" => Ok(ModelSource::Gguf(path.to_path_buf())),
                "safetensors" | "json" => Ok(ModelSource::HfDir(path.parent().unwrap_or(Path::new(".")).to_path_buf())),
                "bin" | "pt" | "pth" | "ckpt" | "pkl" => Err(ModelError::Pickle { path: path.to_path_buf() }),
                _ => Err(ModelError::NoWeights { path: path.to_path_buf() }),
            };
        }
        if path.join("config.json").exists() {
            let has_st = std::fs::read_dir(path)
                .map_err(|e| ModelError::io(path, e))?
                .filter_map(|e| e.ok())
                .any(|e| weights::is_weight_shard(&e.path()));
            if !has_st {
                let pickle = ["pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "consolidated.00.pth"]
                    .iter()
                    .map(|n| path.join(n))
                    .find(|p| p.exists());
                if let Some(p) = pickle {
                    return Err(ModelError::Pickle { path: p });
                }
            }
            return Ok(ModelSource::HfDir(path.to_path_buf()));
        }
        let ggufs: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| ModelError::io(path, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| ext(p) == "gguf")
            .collect();
        match ggufs.as_slice() {
            [one] => Ok(ModelSource::Gguf(one.clone())),
            [] => Err(ModelError::io(
                &path.join("config.json"),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no config.json (and no .gguf file) in the model directory",
                ),
            )),
            _ => Err(ModelError::Input(format!("{}: several .gguf files; name one", path.display()))),
        }
    }

    /// The main file of the model, for messages and hashing.
    pub fn path(&self) -> &Path {
        match self {
            ModelSource::HfDir(p) | ModelSource::Gguf(p) => p,
        }
    }

    /// Parse the config and open the weights (memory-mapped; nothing is read yet).
    pub fn open(&self) -> Result<(ModelConfig, WeightStore), ModelError> {
        match self {
            ModelSource::HfDir(dir) => {
                let cfg = ModelConfig::from_file(&dir.join("config.json"))?;
                let store = WeightStore::open_safetensors_dir(dir)?;
                Ok((cfg, store))
            }
            ModelSource::Gguf(p) => {
                let file = gguf::GgufFile::open(p)?;
                let cfg = ModelConfig::from_gguf(&file)?;
                let (h, kv) = (cfg.num_attention_heads, cfg.n_kv_heads());
                Ok((cfg, WeightStore::from_gguf(file, h, kv)))
            }
        }
    }
}

/// How to load a model.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    pub dtype: DType,
    pub device: Device,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions { dtype: DType::F32, device: Device::Cpu }
    }
}

/// Load a model from a directory, safetensors file or GGUF file.
pub fn load(path: &Path, opts: LoadOptions) -> Result<Llama, ModelError> {
    let (cfg, store) = ModelSource::resolve(path)?.open()?;
    Llama::load(cfg, &store, opts.dtype.kind(), opts.device)
}

/// Load a model split over a device list by memory (see [`placement`]): `devices` is `--devices`
/// (`cuda:0,cuda:1,cpu`, `auto`), `memory` the optional `--device-memory` (`cuda:0=70GiB,...`). Returns the model
/// and where its parts went.
pub fn load_placed(
    path: &Path,
    dtype: DType,
    devices: &str,
    memory: Option<&str>,
) -> Result<(Llama, Placement), ModelError> {
    let (cfg, store) = ModelSource::resolve(path)?.open()?;
    let plan = placement::plan_for(&cfg, dtype.kind(), devices, memory)?;
    let m = Llama::load_placed(cfg, &store, dtype.kind(), &plan.block_devices, plan.head_device)?;
    Ok((m, plan))
}

/// Where a run's model goes: a device list when `devices` is given (placement by memory), else the single
/// `device` (no memory check).
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceChoice {
    Single(String),
    Split { devices: String, memory: Option<String> },
}

impl DeviceChoice {
    /// Plan for `cfg`: a [`Placement`] with every part's device.
    pub fn plan(&self, cfg: &ModelConfig, dtype: DType) -> Result<Placement, ModelError> {
        match self {
            DeviceChoice::Single(d) => Ok(Placement::single(parse_device(d)?, cfg.num_hidden_layers)),
            DeviceChoice::Split { devices, memory } => {
                Ok(placement::plan_for(cfg, dtype.kind(), devices, memory.as_deref())?)
            }
        }
    }
}

/// A summary of a checkpoint without loading its weights (`trustlens model inspect`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelSummary {
    pub path: PathBuf,
    pub format: String,
    pub architecture: String,
    pub layers: usize,
    pub d_model: usize,
    pub d_ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub parameters: usize,
    pub tied_embeddings: bool,
    pub rope_theta: f64,
    pub rope_scaling: Option<String>,
    pub stored_types: BTreeMap<String, usize>,
    pub stored_bytes: u64,
    pub quantised: bool,
}

/// Inspect a checkpoint: config and tensor directory only.
pub fn inspect(path: &Path) -> Result<ModelSummary, ModelError> {
    let src = ModelSource::resolve(path)?;
    let (cfg, store) = src.open()?;
    store.check_supported()?;
    let arch = cfg.architecture().map_err(|why| ModelError::BadConfig { path: path.to_path_buf(), why })?;
    let (d, h, kv, hd, ffn, v) = (
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.n_kv_heads(),
        cfg.head_dim(),
        cfg.intermediate_size,
        cfg.vocab_size,
    );
    let per_layer = (h * hd + 2 * kv * hd) * d
        + if cfg.qkv_bias() { h * hd + 2 * kv * hd } else { 0 }
        + d * h * hd
        + if cfg.o_bias() { d } else { 0 }
        + 3 * ffn * d
        + 2 * d;
    let parameters = v * d + cfg.num_hidden_layers * per_layer + d + if cfg.tie_word_embeddings { 0 } else { v * d };
    Ok(ModelSummary {
        path: src.path().to_path_buf(),
        format: match src {
            ModelSource::HfDir(_) => "safetensors".into(),
            ModelSource::Gguf(_) => "gguf".into(),
        },
        architecture: arch.name().into(),
        layers: cfg.num_hidden_layers,
        d_model: d,
        d_ffn: ffn,
        heads: h,
        kv_heads: kv,
        head_dim: hd,
        vocab: v,
        parameters,
        tied_embeddings: cfg.tie_word_embeddings,
        rope_theta: cfg.rope_theta,
        rope_scaling: cfg.rope_scaling.as_ref().map(|r| format!("{} x{}", r.rope_type, r.factor.unwrap_or(1.0))),
        stored_types: store.stored_types(),
        stored_bytes: store.stored_bytes(),
        quantised: store.is_quantised(),
    })
}
