//! Activation files: the HDF5 layout written by `trustlens capture`, its reader, shard merging and summaries.
//!
//! # Layout (`activations/<run>/activations.h5`, format version 1)
//! - `acts/{layer}/{position}`: `[n_rows, d_model]` f32 (f16 when `store_dtype` is `f16`), the hook's value at that token (layer = block index,
//!   position = `last`, `payload_last` or `user_end`);
//! - `meta/prompt_index` `[n_rows]` u64: index of the prompt in the full (unsharded) prompt list (cases in file order
//!   x channels x conditions, in the experiment's order); rows are sorted by it;
//! - `meta/case_id`, `meta/family`, `meta/subtype` (`""` when none), `meta/channel`, `meta/condition`: `[n_rows]`
//!   UTF-8 strings;
//! - `meta/n_tokens`, `meta/last_index` `[n_rows]` u32; `meta/pos_{position}` `[n_rows]` u32 token index of each
//!   captured position (own coordinates, no padding);
//! - file attributes: see [`RunAttrs`] (strings), plus `layers` (u32 array), `positions` (string array),
//!   `format` = `trustlens-activations`, `format_version` = 1.
//!
//! A file with `complete = 0` is a checkpoint of a run still in progress (or killed): it holds the rows finished so
//! far, already sorted. Files are always written to a temporary name and renamed into place, so a reader never sees a
//! half-written file.
pub mod journal;

use hdf5::types::VarLenUnicode;
use hdf5_metno as hdf5;
use ndarray::{Array1, Array2};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Errors of activation files. One line each, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum ActivationsError {
    #[error("{path}: {source}", path = .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: HDF5: {message}", path = .path.display())]
    Hdf5 { path: PathBuf, message: String },
    #[error("{path}: {message}", path = .path.display())]
    Format { path: PathBuf, message: String },
    #[error("{0}")]
    Refused(String),
}

/// Current layout version.
pub const FORMAT_VERSION: u32 = 1;

/// Per-row metadata (one row = one rendered prompt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMeta {
    pub case_id: String,
    /// `TP`, `IPI` or `CTS`.
    pub family: String,
    /// `P1`/`P2`/`P3` for TP cases.
    pub subtype: Option<String>,
    /// `chat`, `chat+tools` or `tool`.
    pub channel: String,
    /// `adversarial` or `benign`.
    pub condition: String,
    /// Prompt length in tokens.
    pub n_tokens: usize,
    /// Index of the last prompt token (`n_tokens - 1`).
    pub last_index: usize,
}

/// File attributes: where the numbers came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunAttrs {
    /// Model path as given.
    pub model_path: String,
    /// SHA-256 of the weight file(s): `hex` for one file, `name:hex;name:hex` for shards.
    pub model_sha256: String,
    /// Compute dtype (`f32`, `f16`, `bf16`).
    pub dtype: String,
    /// Device the forward passes ran on (`cpu`, `cuda:0`).
    pub device: String,
    /// SHA-256 of the chat template source.
    pub chat_template_sha256: String,
    /// Hook name inside each block, e.g. `hook_resid_post`.
    pub hook_point: String,
    /// trustlens version that wrote the file.
    pub trustlens_version: String,
    /// The effective experiment configuration (TOML, after command-line overrides).
    pub experiment_config: String,
    /// SHA-256 over everything that determines the numbers (model, dtype, cases, channels, conditions, rendering,
    /// layers, hook, positions, stored dtype). Shards merge only when this matches.
    pub config_sha256: String,
    /// The case file as given, and the SHA-256 of its bytes.
    pub cases_file: String,
    pub cases_sha256: String,
    /// `native` or `hermes` (or `none` without tool channels).
    pub tool_rendering: String,
    /// Stored dtype (`f32` or `f16`; readers always get f32).
    pub store_dtype: String,
    /// `K/N` for a shard, `all` for a whole run or a merged file.
    pub shard: String,
    /// Prompts in the whole (unsharded) run.
    pub n_prompts_total: usize,
    /// False for a checkpoint of an unfinished run.
    pub complete: bool,
    /// Width of each stored row.
    pub d_model: usize,
    /// Blocks in the model.
    pub n_layers_model: usize,
}

/// Everything that goes into a file; [`write_atomic`] writes it.
#[derive(Debug, Clone)]
pub struct Contents {
    pub attrs: RunAttrs,
    pub layers: Vec<usize>,
    pub positions: Vec<String>,
    pub rows: Vec<RowMeta>,
    /// `[n_rows]` index in the full prompt list.
    pub prompt_index: Vec<u64>,
    /// `[n_positions][n_rows]` token index of each position.
    pub position_index: Vec<Vec<u32>>,
    /// `[layers * positions]` (layer-major) arrays of `[n_rows, d_model]`.
    pub data: Vec<Array2<f32>>,
}

fn h5err(path: &Path) -> impl Fn(hdf5::Error) -> ActivationsError + '_ {
    move |e| ActivationsError::Hdf5 { path: path.to_path_buf(), message: e.to_string() }
}

fn vlu(s: &str) -> VarLenUnicode {
    // VarLenUnicode refuses interior NULs; none of our strings have them, but never panic on input.
    s.replace('\0', "").parse().expect("no NUL")
}

/// Write `contents` to `path` via `path.tmp` + fsync + rename + directory fsync: a crash at any moment leaves either
/// the old file or the new one.
pub fn write_atomic(path: &Path, c: &Contents) -> Result<(), ActivationsError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let res = write_h5(&tmp, c).and_then(|_| {
        let f = std::fs::File::open(&tmp).map_err(|source| ActivationsError::Io { path: tmp.clone(), source })?;
        f.sync_all().map_err(|source| ActivationsError::Io { path: tmp.clone(), source })?;
        std::fs::rename(&tmp, path).map_err(|source| ActivationsError::Io { path: path.to_path_buf(), source })
    });
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res?;
    journal::sync_dir(path);
    Ok(())
}

fn write_h5(path: &Path, c: &Contents) -> Result<(), ActivationsError> {
    let e = h5err(path);
    let n = c.rows.len();
    let d = c.attrs.d_model;
    if c.data.len() != c.layers.len() * c.positions.len() || c.position_index.len() != c.positions.len() {
        return Err(ActivationsError::Format { path: path.to_path_buf(), message: "internal: contents shape".into() });
    }
    let f = hdf5::File::create(path).map_err(&e)?;
    let a = &c.attrs;
    let strs: [(&str, &str); 16] = [
        ("format", "trustlens-activations"),
        ("model_path", &a.model_path),
        ("model_sha256", &a.model_sha256),
        ("dtype", &a.dtype),
        ("device", &a.device),
        ("chat_template_sha256", &a.chat_template_sha256),
        ("hook_point", &a.hook_point),
        ("trustlens_version", &a.trustlens_version),
        ("experiment_config", &a.experiment_config),
        ("config_sha256", &a.config_sha256),
        ("cases_file", &a.cases_file),
        ("cases_sha256", &a.cases_sha256),
        ("tool_rendering", &a.tool_rendering),
        ("store_dtype", &a.store_dtype),
        ("shard", &a.shard),
        ("complete", if a.complete { "true" } else { "false" }),
    ];
    for (k, v) in strs {
        f.new_attr::<VarLenUnicode>().create(k).and_then(|at| at.write_scalar(&vlu(v))).map_err(&e)?;
    }
    let ints: [(&str, u64); 4] = [
        ("format_version", FORMAT_VERSION as u64),
        ("n_prompts_total", a.n_prompts_total as u64),
        ("d_model", d as u64),
        ("n_layers_model", a.n_layers_model as u64),
    ];
    for (k, v) in ints {
        f.new_attr::<u64>().create(k).and_then(|at| at.write_scalar(&v)).map_err(&e)?;
    }
    let layers = Array1::from_iter(c.layers.iter().map(|&l| l as u32));
    f.new_attr_builder().with_data(&layers).create("layers").map_err(&e)?;
    let positions = Array1::from_iter(c.positions.iter().map(|p| vlu(p)));
    f.new_attr_builder().with_data(&positions).create("positions").map_err(&e)?;

    let meta = f.create_group("meta").map_err(&e)?;
    let str_col = |name: &str, it: &mut dyn Iterator<Item = &str>| -> Result<(), ActivationsError> {
        let arr = Array1::from_iter(it.map(vlu));
        if arr.is_empty() {
            meta.new_dataset::<VarLenUnicode>().shape([0]).create(name).map_err(&e)?;
        } else {
            meta.new_dataset_builder().with_data(&arr).create(name).map_err(&e)?;
        }
        Ok(())
    };
    str_col("case_id", &mut c.rows.iter().map(|r| r.case_id.as_str()))?;
    str_col("family", &mut c.rows.iter().map(|r| r.family.as_str()))?;
    str_col("subtype", &mut c.rows.iter().map(|r| r.subtype.as_deref().unwrap_or("")))?;
    str_col("channel", &mut c.rows.iter().map(|r| r.channel.as_str()))?;
    str_col("condition", &mut c.rows.iter().map(|r| r.condition.as_str()))?;
    let u32_col = |name: &str, v: Vec<u32>| -> Result<(), ActivationsError> {
        if v.is_empty() {
            meta.new_dataset::<u32>().shape([0]).create(name).map_err(&e)?;
        } else {
            meta.new_dataset_builder().with_data(&Array1::from(v)).create(name).map_err(&e)?;
        }
        Ok(())
    };
    u32_col("n_tokens", c.rows.iter().map(|r| r.n_tokens as u32).collect())?;
    u32_col("last_index", c.rows.iter().map(|r| r.last_index as u32).collect())?;
    for (p, idx) in c.positions.iter().zip(&c.position_index) {
        u32_col(&format!("pos_{p}"), idx.clone())?;
    }
    if c.prompt_index.is_empty() {
        meta.new_dataset::<u64>().shape([0]).create("prompt_index").map_err(&e)?;
    } else {
        meta.new_dataset_builder()
            .with_data(&Array1::from(c.prompt_index.clone()))
            .create("prompt_index")
            .map_err(&e)?;
    }

    let acts = f.create_group("acts").map_err(&e)?;
    for (li, l) in c.layers.iter().enumerate() {
        let g = acts.create_group(&l.to_string()).map_err(&e)?;
        for (pi, p) in c.positions.iter().enumerate() {
            let arr = &c.data[li * c.positions.len() + pi];
            if arr.dim() != (n, d) {
                return Err(ActivationsError::Format {
                    path: path.to_path_buf(),
                    message: format!("internal: layer {l} {p}: {:?} rows, expected ({n}, {d})", arr.dim()),
                });
            }
            // Activations are computed and kept in f32; `store_dtype = "f16"` narrows them only on disk (round to
            // nearest even). f16 -> f32 -> f16 is lossless, so a resumed run still writes identical bytes.
            match (a.store_dtype.as_str(), n) {
                ("f16", 0) => {
                    g.new_dataset::<half::f16>().shape([0, d]).create(p.as_str()).map_err(&e)?;
                }
                ("f16", _) => {
                    let narrow = arr.mapv(half::f16::from_f32);
                    g.new_dataset_builder().with_data(&narrow).create(p.as_str()).map_err(&e)?;
                }
                (_, 0) => {
                    g.new_dataset::<f32>().shape([0, d]).create(p.as_str()).map_err(&e)?;
                }
                _ => {
                    g.new_dataset_builder().with_data(arr).create(p.as_str()).map_err(&e)?;
                }
            }
        }
    }
    f.close().map_err(&e)?;
    Ok(())
}

/// An activation file opened for reading. Metadata is read at open; arrays on demand.
#[derive(Debug, Clone)]
pub struct ActivationFile {
    pub path: PathBuf,
    /// Block indices with stored activations, ascending.
    pub layers: Vec<usize>,
    /// Position names (`last`, ...).
    pub positions: Vec<String>,
    /// One entry per row, aligned with the rows of every array.
    pub rows: Vec<RowMeta>,
    pub attrs: RunAttrs,
    /// `[n_rows]` index of each row in the full prompt list.
    pub prompt_index: Vec<u64>,
    /// `[n_positions][n_rows]` token index of each position.
    pub position_index: Vec<Vec<u32>>,
}

impl ActivationFile {
    /// Open a file and read its attributes and row metadata.
    pub fn open(path: &Path) -> Result<Self, ActivationsError> {
        let e = h5err(path);
        if !path.exists() {
            return Err(ActivationsError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        let f = hdf5::File::open(path).map_err(&e)?;
        let fmt_err = |m: String| ActivationsError::Format { path: path.to_path_buf(), message: m };
        let s = |k: &str| -> Result<String, ActivationsError> {
            let at = f.attr(k).map_err(|_| fmt_err(format!("not a trustlens activation file (no `{k}` attribute)")))?;
            Ok(at.read_scalar::<VarLenUnicode>().map_err(&e)?.as_str().to_string())
        };
        let u = |k: &str| -> Result<u64, ActivationsError> {
            let at = f.attr(k).map_err(|_| fmt_err(format!("not a trustlens activation file (no `{k}` attribute)")))?;
            at.read_scalar::<u64>().map_err(&e)
        };
        if s("format")? != "trustlens-activations" {
            return Err(fmt_err("not a trustlens activation file".into()));
        }
        let version = u("format_version")?;
        if version != FORMAT_VERSION as u64 {
            return Err(fmt_err(format!("format version {version}, this trustlens reads {FORMAT_VERSION}")));
        }
        let attrs = RunAttrs {
            model_path: s("model_path")?,
            model_sha256: s("model_sha256")?,
            dtype: s("dtype")?,
            device: s("device")?,
            chat_template_sha256: s("chat_template_sha256")?,
            hook_point: s("hook_point")?,
            trustlens_version: s("trustlens_version")?,
            experiment_config: s("experiment_config")?,
            config_sha256: s("config_sha256")?,
            cases_file: s("cases_file")?,
            cases_sha256: s("cases_sha256")?,
            tool_rendering: s("tool_rendering")?,
            store_dtype: s("store_dtype")?,
            shard: s("shard")?,
            n_prompts_total: u("n_prompts_total")? as usize,
            complete: s("complete")? == "true",
            d_model: u("d_model")? as usize,
            n_layers_model: u("n_layers_model")? as usize,
        };
        let layers: Vec<usize> =
            f.attr("layers").and_then(|a| a.read_raw::<u32>()).map_err(&e)?.into_iter().map(|l| l as usize).collect();
        let positions: Vec<String> = f
            .attr("positions")
            .and_then(|a| a.read_raw::<VarLenUnicode>())
            .map_err(&e)?
            .into_iter()
            .map(|p| p.as_str().to_string())
            .collect();
        let strs = |name: &str| -> Result<Vec<String>, ActivationsError> {
            Ok(f.dataset(&format!("meta/{name}"))
                .and_then(|d| d.read_raw::<VarLenUnicode>())
                .map_err(&e)?
                .into_iter()
                .map(|v| v.as_str().to_string())
                .collect())
        };
        let u32s = |name: &str| -> Result<Vec<u32>, ActivationsError> {
            f.dataset(&format!("meta/{name}")).and_then(|d| d.read_raw::<u32>()).map_err(&e)
        };
        let (case_id, family, subtype, channel, condition) =
            (strs("case_id")?, strs("family")?, strs("subtype")?, strs("channel")?, strs("condition")?);
        let (n_tokens, last_index) = (u32s("n_tokens")?, u32s("last_index")?);
        let prompt_index = f.dataset("meta/prompt_index").and_then(|d| d.read_raw::<u64>()).map_err(&e)?;
        let n = case_id.len();
        for (name, len) in [
            ("family", family.len()),
            ("subtype", subtype.len()),
            ("channel", channel.len()),
            ("condition", condition.len()),
            ("n_tokens", n_tokens.len()),
            ("last_index", last_index.len()),
            ("prompt_index", prompt_index.len()),
        ] {
            if len != n {
                return Err(fmt_err(format!("meta/{name} has {len} rows, meta/case_id has {n}")));
            }
        }
        let rows = (0..n)
            .map(|i| RowMeta {
                case_id: case_id[i].clone(),
                family: family[i].clone(),
                subtype: if subtype[i].is_empty() { None } else { Some(subtype[i].clone()) },
                channel: channel[i].clone(),
                condition: condition[i].clone(),
                n_tokens: n_tokens[i] as usize,
                last_index: last_index[i] as usize,
            })
            .collect();
        let position_index =
            positions.iter().map(|p| u32s(&format!("pos_{p}"))).collect::<Result<Vec<_>, ActivationsError>>()?;
        Ok(ActivationFile { path: path.to_path_buf(), layers, positions, rows, attrs, prompt_index, position_index })
    }

    /// `[n_rows, d_model]` activations at block `layer`, position `position` (stored f16 is widened to f32).
    pub fn read(&self, layer: usize, position: &str) -> Result<Array2<f32>, ActivationsError> {
        if !self.layers.contains(&layer) {
            return Err(ActivationsError::Format {
                path: self.path.clone(),
                message: format!("no layer {layer} in this file (layers: {:?})", self.layers),
            });
        }
        if !self.positions.iter().any(|p| p == position) {
            return Err(ActivationsError::Format {
                path: self.path.clone(),
                message: format!("no position `{position}` in this file (positions: {})", self.positions.join(", ")),
            });
        }
        let e = h5err(&self.path);
        let f = hdf5::File::open(&self.path).map_err(&e)?;
        let ds = f.dataset(&format!("acts/{layer}/{position}")).map_err(&e)?;
        // HDF5 widens stored f16 to f32 on read (exactly).
        let arr = ds.read_2d::<f32>().map_err(&e)?;
        if arr.dim() != (self.rows.len(), self.attrs.d_model) {
            return Err(ActivationsError::Format {
                path: self.path.clone(),
                message: format!(
                    "acts/{layer}/{position} is {:?}, expected ({}, {})",
                    arr.dim(),
                    self.rows.len(),
                    self.attrs.d_model
                ),
            });
        }
        Ok(arr)
    }

    /// All arrays, layer-major then position (the [`Contents::data`] order).
    pub fn read_all(&self) -> Result<Vec<Array2<f32>>, ActivationsError> {
        let mut out = Vec::new();
        for &l in &self.layers {
            for p in &self.positions {
                out.push(self.read(l, p)?);
            }
        }
        Ok(out)
    }

    /// A human-readable summary: model, layers, counts per family/channel/condition, mean L2 norm per layer and
    /// position (`trustlens activations inspect`).
    pub fn summary(&self) -> Result<String, ActivationsError> {
        use std::fmt::Write;
        let a = &self.attrs;
        let mut s = String::new();
        let _ = writeln!(s, "file        {}", self.path.display());
        let _ = writeln!(s, "model       {} (sha256 {})", a.model_path, short(&a.model_sha256));
        let _ = writeln!(s, "compute     {} on {}; stored {}", a.dtype, a.device, a.store_dtype);
        let _ = writeln!(s, "hook        blocks.L.{}", a.hook_point);
        let _ = writeln!(s, "layers      {:?} of {} (d_model {})", self.layers, a.n_layers_model, a.d_model);
        let _ = writeln!(s, "positions   {}", self.positions.join(", "));
        let _ = writeln!(
            s,
            "cases       {} (sha256 {}), tool rendering {}",
            a.cases_file,
            short(&a.cases_sha256),
            a.tool_rendering
        );
        let status = if a.complete { "complete" } else { "INCOMPLETE (checkpoint of an unfinished run)" };
        let _ = writeln!(
            s,
            "rows        {} of {} prompts (shard {}), {status}",
            self.rows.len(),
            a.n_prompts_total,
            a.shard
        );
        let _ = writeln!(s, "written by  trustlens {}; config sha256 {}", a.trustlens_version, short(&a.config_sha256));
        let count = |key: &dyn Fn(&RowMeta) -> String| {
            let mut m: BTreeMap<String, usize> = BTreeMap::new();
            for r in &self.rows {
                *m.entry(key(r)).or_default() += 1;
            }
            m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(s, "family      {}", count(&|r| r.family.clone()));
        let _ = writeln!(
            s,
            "subtype     {}",
            count(&|r| format!("{}/{}", r.family, r.subtype.clone().unwrap_or_else(|| "-".into())))
        );
        let _ = writeln!(s, "channel     {}", count(&|r| r.channel.clone()));
        let _ = writeln!(s, "condition   {}", count(&|r| r.condition.clone()));
        if !self.rows.is_empty() {
            let toks: Vec<usize> = self.rows.iter().map(|r| r.n_tokens).collect();
            let _ = writeln!(
                s,
                "tokens      min {} / mean {:.1} / max {}",
                toks.iter().min().unwrap(),
                toks.iter().sum::<usize>() as f64 / toks.len() as f64,
                toks.iter().max().unwrap()
            );
        }
        let _ = writeln!(s, "L2 norm per layer and position (mean / min / max over rows):");
        for &l in &self.layers {
            for p in &self.positions {
                let arr = self.read(l, p)?;
                let norms: Vec<f64> = arr
                    .rows()
                    .into_iter()
                    .map(|r| r.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>().sqrt())
                    .collect();
                if norms.is_empty() {
                    let _ = writeln!(s, "  layer {l:>3} {p:<13} (no rows)");
                    continue;
                }
                let mean = norms.iter().sum::<f64>() / norms.len() as f64;
                let min = norms.iter().cloned().fold(f64::INFINITY, f64::min);
                let max = norms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let nonfinite = arr.iter().filter(|x| !x.is_finite()).count();
                let warn = if nonfinite > 0 { format!("  ({nonfinite} non-finite values!)") } else { String::new() };
                let _ = writeln!(s, "  layer {l:>3} {p:<13} {mean:>10.3} / {min:>10.3} / {max:>10.3}{warn}");
            }
        }
        Ok(s)
    }
}

fn short(h: &str) -> &str {
    &h[..h.len().min(16)]
}

/// Join complete shard files (`--shard K/N` captures of the same experiment) into one file at `out`, rows sorted by
/// prompt index. Refuses shards from different models, configurations, layer or position sets, incomplete shards,
/// duplicates and missing shards. Returns the merged row count.
pub fn merge(out: &Path, shards: &[PathBuf], overwrite: bool) -> Result<usize, ActivationsError> {
    if shards.is_empty() {
        return Err(ActivationsError::Refused("merge: no shard files given".into()));
    }
    if out.exists() && !overwrite {
        return Err(ActivationsError::Refused(format!("{}: exists; pass --overwrite to replace it", out.display())));
    }
    let files = shards.iter().map(|p| ActivationFile::open(p)).collect::<Result<Vec<_>, _>>()?;
    let first = &files[0];
    let mut seen: BTreeMap<usize, PathBuf> = BTreeMap::new();
    let mut n_of = None;
    for f in &files {
        let refuse = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
            Err(ActivationsError::Refused(format!(
                "merge: {} and {} differ in {what} ({a:?} vs {b:?}); shards must come from one experiment",
                first.path.display(),
                f.path.display()
            )))
        };
        let (x, y) = (&first.attrs, &f.attrs);
        if x.model_sha256 != y.model_sha256 {
            return refuse("model (weights SHA-256)", &short(&x.model_sha256), &short(&y.model_sha256));
        }
        if first.layers != f.layers {
            return refuse("layers", &first.layers, &f.layers);
        }
        if first.positions != f.positions {
            return refuse("positions", &first.positions, &f.positions);
        }
        if x.config_sha256 != y.config_sha256 {
            return refuse("configuration (config_sha256)", &short(&x.config_sha256), &short(&y.config_sha256));
        }
        if x.d_model != y.d_model || x.n_prompts_total != y.n_prompts_total {
            return refuse("shape", &(x.d_model, x.n_prompts_total), &(y.d_model, y.n_prompts_total));
        }
        if !y.complete {
            return Err(ActivationsError::Refused(format!(
                "merge: {} is an unfinished run (complete = false); re-run its capture to finish it",
                f.path.display()
            )));
        }
        let (k, n) = parse_shard(&y.shard).ok_or_else(|| {
            ActivationsError::Refused(format!("merge: {} is not a shard (shard = `{}`)", f.path.display(), y.shard))
        })?;
        if *n_of.get_or_insert(n) != n {
            return refuse("shard count", &n_of, &n);
        }
        if let Some(other) = seen.insert(k, f.path.clone()) {
            return Err(ActivationsError::Refused(format!(
                "merge: shard {k}/{n} given twice ({} and {})",
                other.display(),
                f.path.display()
            )));
        }
    }
    let n = n_of.unwrap_or(1);
    let missing: Vec<String> = (1..=n).filter(|k| !seen.contains_key(k)).map(|k| format!("{k}/{n}")).collect();
    if !missing.is_empty() {
        return Err(ActivationsError::Refused(format!("merge: missing shard(s) {}", missing.join(", "))));
    }
    // Gather rows from every shard, then sort by prompt index.
    let mut all: Vec<(u64, usize, usize)> = Vec::new(); // (prompt, file, row)
    for (fi, f) in files.iter().enumerate() {
        all.extend(f.prompt_index.iter().enumerate().map(|(ri, &p)| (p, fi, ri)));
    }
    all.sort_unstable();
    if all.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(ActivationsError::Refused("merge: two shards hold the same prompt".into()));
    }
    if all.len() != first.attrs.n_prompts_total {
        return Err(ActivationsError::Refused(format!(
            "merge: shards hold {} rows, the run has {} prompts",
            all.len(),
            first.attrs.n_prompts_total
        )));
    }
    let datas = files.iter().map(|f| f.read_all()).collect::<Result<Vec<_>, _>>()?;
    let d = first.attrs.d_model;
    let n_arr = first.layers.len() * first.positions.len();
    let mut data = vec![Array2::<f32>::zeros((all.len(), d)); n_arr];
    for (out_row, &(_, fi, ri)) in all.iter().enumerate() {
        for (a, arr) in data.iter_mut().enumerate() {
            arr.row_mut(out_row).assign(&datas[fi][a].row(ri));
        }
    }
    let mut attrs = first.attrs.clone();
    attrs.shard = "all".into();
    attrs.complete = true;
    let mut devices: Vec<&str> = files.iter().map(|f| f.attrs.device.as_str()).collect();
    devices.sort_unstable();
    devices.dedup();
    attrs.device = devices.join(",");
    let contents = Contents {
        attrs,
        layers: first.layers.clone(),
        positions: first.positions.clone(),
        rows: all.iter().map(|&(_, fi, ri)| files[fi].rows[ri].clone()).collect(),
        prompt_index: all.iter().map(|&(p, _, _)| p).collect(),
        position_index: (0..first.positions.len())
            .map(|pi| all.iter().map(|&(_, fi, ri)| files[fi].position_index[pi][ri]).collect())
            .collect(),
        data,
    };
    if let Some(dir) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| ActivationsError::Io { path: dir.to_path_buf(), source })?;
    }
    write_atomic(out, &contents)?;
    Ok(contents.rows.len())
}

/// Parse `K/N` (1-based K).
pub fn parse_shard(s: &str) -> Option<(usize, usize)> {
    let (k, n) = s.split_once('/')?;
    let (k, n) = (k.trim().parse().ok()?, n.trim().parse().ok()?);
    (n >= 1 && k >= 1 && k <= n).then_some((k, n))
}
