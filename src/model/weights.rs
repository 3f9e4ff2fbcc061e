//! Weight sources behind HF tensor names: memory-mapped safetensors (single file or sharded) and GGUF (dequantised,
//! renamed to HF names, llama.cpp's q/k row permutation undone). The forward pass only ever sees HF names.
use super::gguf::{GgmlType, GgufFile};
use super::ModelError;
use memmap2::Mmap;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor};

/// Where one safetensors tensor lives in its mapped file.
pub struct StEntry {
    file: usize,
    dtype: safetensors::Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// Where the weights come from.
pub enum WeightStore {
    Safetensors { files: Vec<(PathBuf, Mmap)>, entries: HashMap<String, StEntry> },
    Gguf { file: GgufFile, permute_qk: bool, n_heads: usize, n_kv_heads: usize },
}

impl WeightStore {
    /// Open `model.safetensors` or the shards named by `model.safetensors.index.json` in `dir`.
    pub fn open_safetensors_dir(dir: &Path) -> Result<Self, ModelError> {
        let index = dir.join("model.safetensors.index.json");
        let single = dir.join("model.safetensors");
        let paths: Vec<PathBuf> = if index.exists() {
            let text = std::fs::read_to_string(&index).map_err(|e| ModelError::io(&index, e))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| ModelError::BadWeights { path: index.clone(), why: format!("malformed index: {e}") })?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| ModelError::BadWeights { path: index.clone(), why: "no `weight_map` object".into() })?;
            let mut shards: Vec<String> = map.values().filter_map(|s| s.as_str().map(String::from)).collect();
            shards.sort();
            shards.dedup();
            shards.into_iter().map(|s| dir.join(s)).collect()
        } else if single.exists() {
            vec![single]
        } else {
            let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| ModelError::io(dir, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| is_weight_shard(p))
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(ModelError::NoWeights { path: dir.to_path_buf() });
            }
            found
        };
        let mut files = Vec::new();
        let mut entries = HashMap::new();
        for (fi, path) in paths.into_iter().enumerate() {
            let f = File::open(&path).map_err(|e| ModelError::io(&path, e))?;
            // SAFETY: read-only mapping of a weight file; see GgufFile::open.
            let mmap = unsafe { Mmap::map(&f) }.map_err(|e| ModelError::io(&path, e))?;
            let bad = |why: String| ModelError::BadWeights { path: path.clone(), why };
            let (n, meta) = safetensors::SafeTensors::read_metadata(&mmap)
                .map_err(|e| bad(format!("truncated or not a safetensors file ({e:?})")))?;
            let data_len = mmap.len() - 8 - n;
            for (name, info) in meta.tensors() {
                let (s, e) = info.data_offsets;
                if e > data_len {
                    return Err(bad(format!(
                        "truncated: tensor `{name}` needs bytes up to {e} of the data section but it has {data_len}"
                    )));
                }
                entries.insert(
                    name.clone(),
                    StEntry {
                        file: fi,
                        dtype: info.dtype,
                        shape: info.shape.clone(),
                        start: 8 + n + s,
                        end: 8 + n + e,
                    },
                );
            }
            files.push((path, mmap));
        }
        Ok(WeightStore::Safetensors { files, entries })
    }

    /// Wrap an opened GGUF file. `permute_qk` undoes llama.cpp's rotary row order (llama/mistral conversions).
    pub fn from_gguf(file: GgufFile, n_heads: usize, n_kv_heads: usize) -> Self {
        let arch = file.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
        let permute_qk = arch == "llama" || arch == "mistral";
        WeightStore::Gguf { file, permute_qk, n_heads, n_kv_heads }
    }

    /// The file a tensor lives in, for error messages.
    pub fn path_of(&self, name: &str) -> PathBuf {
        match self {
            WeightStore::Safetensors { files, entries } => {
                entries.get(name).map(|e| files[e.file].0.clone()).unwrap_or_else(|| files[0].0.clone())
            }
            WeightStore::Gguf { file, .. } => file.path.clone(),
        }
    }

    /// Whether a tensor of this HF name exists.
    pub fn contains(&self, name: &str) -> bool {
        match self {
            WeightStore::Safetensors { entries, .. } => entries.contains_key(name),
            WeightStore::Gguf { file, .. } => gguf_name(name).is_some_and(|g| file.tensor_info(&g).is_some()),
        }
    }

    /// Load one tensor by HF name onto the CPU in `kind`, checking its shape. `Ok(None)` if it does not exist.
    pub fn load(&self, name: &str, shape: &[usize], kind: Kind) -> Result<Option<Tensor>, ModelError> {
        let (t, stored_shape) = match self {
            WeightStore::Safetensors { files, entries } => {
                let Some(e) = entries.get(name) else {
                    return Ok(None);
                };
                let src_kind = match e.dtype {
                    safetensors::Dtype::F32 => Kind::Float,
                    safetensors::Dtype::F16 => Kind::Half,
                    safetensors::Dtype::BF16 => Kind::BFloat16,
                    other => {
                        return Err(ModelError::BadWeights {
                            path: files[e.file].0.clone(),
                            why: format!("tensor `{name}` has dtype {other:?}; trustlens reads F32, F16 and BF16"),
                        })
                    }
                };
                if e.shape != shape {
                    return Err(shape_error(&files[e.file].0, name, &e.shape, shape));
                }
                let dims: Vec<i64> = e.shape.iter().map(|&d| d as i64).collect();
                let bytes = &files[e.file].1[e.start..e.end];
                let _release = ReleaseOnDrop(bytes);
                let t = Tensor::f_from_data_size(bytes, &dims, src_kind)
                    .map_err(|err| ModelError::BadWeights { path: files[e.file].0.clone(), why: err.to_string() })?;
                (t, e.shape.clone())
            }
            WeightStore::Gguf { file, permute_qk, n_heads, n_kv_heads } => {
                let Some(gname) = gguf_name(name) else {
                    return Ok(None);
                };
                let Some(info) = file.tensor_info(&gname) else {
                    return Ok(None);
                };
                if info.shape != shape {
                    return Err(shape_error(&file.path, &gname, &info.shape, shape));
                }
                let mut t = file.dequantize_tensor(info).map_err(ModelError::Gguf)?;
                if *permute_qk {
                    if name.ends_with("q_proj.weight") || name.ends_with("q_proj.bias") {
                        t = unpermute_rows(&t, *n_heads);
                    } else if name.ends_with("k_proj.weight") || name.ends_with("k_proj.bias") {
                        t = unpermute_rows(&t, *n_kv_heads);
                    }
                }
                (t, info.shape.clone())
            }
        };
        debug_assert_eq!(stored_shape, shape);
        Ok(Some(if t.kind() == kind { t } else { t.to_kind(kind) }))
    }

    /// Stored tensor types with their counts, for `model inspect` (e.g. `Q4_1: 210`).
    pub fn stored_types(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        match self {
            WeightStore::Safetensors { entries, .. } => {
                for e in entries.values() {
                    *m.entry(format!("{:?}", e.dtype)).or_default() += 1;
                }
            }
            WeightStore::Gguf { file, .. } => {
                for t in &file.tensors {
                    *m.entry(t.ty.name()).or_default() += 1;
                }
            }
        }
        m
    }

    /// Check that every tensor type in the store can be read, before spending time loading.
    pub fn check_supported(&self) -> Result<(), ModelError> {
        if let WeightStore::Gguf { file, .. } = self {
            if let Some(t) = file.tensors.iter().find(|t| t.ty.block().is_none()) {
                return Err(ModelError::Gguf(super::gguf::GgufError::UnsupportedType {
                    path: file.path.clone(),
                    tensor: t.name.clone(),
                    ty: t.ty.name(),
                }));
            }
        }
        Ok(())
    }

    /// Total bytes of the stored weights (mapped files or GGUF tensor data).
    pub fn stored_bytes(&self) -> u64 {
        match self {
            WeightStore::Safetensors { entries, .. } => entries.values().map(|e| (e.end - e.start) as u64).sum(),
            WeightStore::Gguf { file, .. } => file
                .tensors
                .iter()
                .map(|t| t.ty.block().map(|(bv, bb)| (t.numel() / bv * bb) as u64).unwrap_or(0))
                .sum(),
        }
    }

    /// Whether any stored tensor is quantised (not a plain float type).
    pub fn is_quantised(&self) -> bool {
        match self {
            WeightStore::Safetensors { .. } => false,
            WeightStore::Gguf { file, .. } => {
                file.tensors.iter().any(|t| !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16))
            }
        }
    }
}

/// Releases a mapped byte range's resident pages once its tensor has been copied out.
struct ReleaseOnDrop<'a>(&'a [u8]);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        super::gguf::release_pages(self.0);
    }
}

/// `model.safetensors`, `model-00001-of-00002.safetensors` and the like (not any safetensors file in the folder).
pub(crate) fn is_weight_shard(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with("model") && name.ends_with(".safetensors")
}

fn shape_error(path: &Path, name: &str, got: &[usize], want: &[usize]) -> ModelError {
    ModelError::BadWeights {
        path: path.to_path_buf(),
        why: format!("tensor `{name}` has shape {got:?} but the config implies {want:?}"),
    }
}

/// Undo llama.cpp's per-head interleaving of rotary rows: `[n_head, rows/n_head/2, 2, ...]` with the middle axes
/// swapped back. Works for weights `[rows, cols]` and biases `[rows]`.
fn unpermute_rows(t: &Tensor, n_head: usize) -> Tensor {
    let size = t.size();
    let rows = size[0];
    let n = n_head as i64;
    let mut shape = vec![n, rows / n / 2, 2];
    shape.extend_from_slice(&size[1..]);
    t.reshape(&shape).transpose(1, 2).contiguous().reshape(&size)
}

/// HF tensor name -> GGUF tensor name.
fn gguf_name(hf: &str) -> Option<String> {
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (idx, tail) = rest.split_once('.')?;
    let g = match tail {
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.o_proj.bias" => "attn_output.bias",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(format!("blk.{idx}.{g}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_gguf() {
        assert_eq!(gguf_name("model.layers.3.self_attn.k_proj.weight").as_deref(), Some("blk.3.attn_k.weight"));
        assert_eq!(gguf_name("lm_head.weight").as_deref(), Some("output.weight"));
        assert_eq!(gguf_name("model.layers.x"), None);
    }

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp permute: reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2).reshape(rows, cols)
        let (rows, cols, n) = (12i64, 3i64, 2i64);
        let w = Tensor::arange(rows * cols, (Kind::Float, tch::Device::Cpu)).reshape([rows, cols]);
        let permuted = w.reshape([n, 2, rows / n / 2, cols]).transpose(1, 2).contiguous().reshape([rows, cols]);
        let back = unpermute_rows(&permuted, n as usize);
        assert!(back.equal(&w));
    }
}
