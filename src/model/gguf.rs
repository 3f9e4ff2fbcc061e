//! GGUF v2/v3 reader: metadata, tensor directory and dequantisation of the common ggml block formats.
//!
//! The file is memory-mapped; a tensor's bytes are only read when it is dequantised. Layout (little endian):
//! `"GGUF"`, version `u32`, tensor count `u64`, metadata count `u64`, the metadata key/values, the tensor infos
//! (name, dims with the fastest-varying first, ggml type, offset), padding to `general.alignment` (32 by default),
//! then the tensor data.
//!
//! Supported tensor types: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K (the block layouts of llama.cpp's
//! `ggml-quants.c`). Anything else is refused with [`GgufError::UnsupportedType`].
use half::{bf16, f16};
use memmap2::Mmap;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Errors while reading a GGUF file. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a GGUF file (magic bytes {magic:?})", .path.display())]
    BadMagic { path: PathBuf, magic: [u8; 4] },
    #[error("{}: unsupported GGUF version {version} (supported: 2, 3)", .path.display())]
    BadVersion { path: PathBuf, version: u32 },
    #[error("{}: truncated or corrupt GGUF file: {what}", .path.display())]
    Truncated { path: PathBuf, what: String },
    #[error("{}: tensor `{tensor}` has ggml type {ty} which trustlens cannot dequantise (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)", .path.display())]
    UnsupportedType { path: PathBuf, tensor: String, ty: String },
    #[error("{}: no tensor named `{name}`", .path.display())]
    MissingTensor { path: PathBuf, name: String },
}

impl GgufError {
    fn truncated(path: &Path, what: impl Into<String>) -> Self {
        GgufError::Truncated { path: path.to_path_buf(), what: what.into() }
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<GgufValue>),
}

impl GgufValue {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }
    /// Any integer (or bool) as u64; negative values give `None`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v as u64),
            GgufValue::U16(v) => Some(v as u64),
            GgufValue::U32(v) => Some(v as u64),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            GgufValue::Bool(b) => Some(b as u64),
            _ => None,
        }
    }
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            GgufValue::I8(v) => Some(v as i64),
            GgufValue::I16(v) => Some(v as i64),
            GgufValue::I32(v) => Some(v as i64),
            GgufValue::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// ggml tensor types trustlens knows by name (only some can be dequantised).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    BF16,
    Other(u32),
}

impl GgmlType {
    fn from_u32(v: u32) -> Self {
        match v {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            9 => GgmlType::Q8_1,
            10 => GgmlType::Q2K,
            11 => GgmlType::Q3K,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            15 => GgmlType::Q8K,
            30 => GgmlType::BF16,
            o => GgmlType::Other(o),
        }
    }

    /// (values per block, bytes per block) for the types we can read.
    pub fn block(self) -> Option<(usize, usize)> {
        Some(match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::BF16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q5K => (256, 176),
            GgmlType::Q6K => (256, 210),
            _ => return None,
        })
    }

    pub fn name(self) -> String {
        match self {
            GgmlType::Q2K => "Q2_K".into(),
            GgmlType::Q3K => "Q3_K".into(),
            GgmlType::Q4K => "Q4_K".into(),
            GgmlType::Q5K => "Q5_K".into(),
            GgmlType::Q6K => "Q6_K".into(),
            GgmlType::Q8K => "Q8_K".into(),
            GgmlType::Other(v) => format!("type id {v}"),
            t => format!("{t:?}"),
        }
    }
}

/// One entry of the tensor directory.
#[derive(Debug, Clone)]
pub struct GgufTensorInfo {
    pub name: String,
    /// Shape in PyTorch order (slowest-varying first), i.e. GGUF's `ne` reversed.
    pub shape: Vec<usize>,
    pub ty: GgmlType,
    /// Byte offset relative to the start of the data section.
    pub offset: u64,
}

impl GgufTensorInfo {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// An opened, memory-mapped GGUF file.
pub struct GgufFile {
    pub path: PathBuf,
    pub version: u32,
    pub metadata: BTreeMap<String, GgufValue>,
    pub tensors: Vec<GgufTensorInfo>,
    index: BTreeMap<String, usize>,
    data_start: usize,
    mmap: Mmap,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(GgufError::truncated(self.path, format!("file ends inside {what} at byte {}", self.pos))),
        }
    }
    fn u8(&mut self, w: &str) -> Result<u8, GgufError> {
        Ok(self.take(1, w)?[0])
    }
    fn u16(&mut self, w: &str) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.take(2, w)?.try_into().unwrap()))
    }
    fn u32(&mut self, w: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.take(4, w)?.try_into().unwrap()))
    }
    fn u64(&mut self, w: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.take(8, w)?.try_into().unwrap()))
    }
    fn len(&mut self, w: &str) -> Result<usize, GgufError> {
        let n = self.u64(w)?;
        // A length can never exceed the bytes left; catching it here avoids huge allocations on corrupt files.
        if n > (self.buf.len() - self.pos) as u64 {
            return Err(GgufError::truncated(self.path, format!("{w} claims length {n} past the end of the file")));
        }
        Ok(n as usize)
    }
    fn string(&mut self, w: &str) -> Result<String, GgufError> {
        let n = self.len(w)?;
        let bytes = self.take(n, w)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }
    fn value(&mut self, ty: u32, w: &str) -> Result<GgufValue, GgufError> {
        Ok(match ty {
            0 => GgufValue::U8(self.u8(w)?),
            1 => GgufValue::I8(self.u8(w)? as i8),
            2 => GgufValue::U16(self.u16(w)?),
            3 => GgufValue::I16(self.u16(w)? as i16),
            4 => GgufValue::U32(self.u32(w)?),
            5 => GgufValue::I32(self.u32(w)? as i32),
            6 => GgufValue::F32(f32::from_bits(self.u32(w)?)),
            7 => GgufValue::Bool(self.u8(w)? != 0),
            8 => GgufValue::String(self.string(w)?),
            9 => {
                let ety = self.u32(w)?;
                let n = self.len(w)?;
                let mut v = Vec::with_capacity(n.min(1 << 20));
                for _ in 0..n {
                    v.push(self.value(ety, w)?);
                }
                GgufValue::Array(v)
            }
            10 => GgufValue::U64(self.u64(w)?),
            11 => GgufValue::I64(self.u64(w)? as i64),
            12 => GgufValue::F64(f64::from_bits(self.u64(w)?)),
            t => return Err(GgufError::truncated(self.path, format!("unknown metadata value type {t} in {w}"))),
        })
    }
}

impl GgufFile {
    /// Open and parse the header, metadata and tensor directory; checks that every tensor lies inside the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| GgufError::Io { path: path.clone(), source };
        let file = File::open(&path).map_err(io)?;
        // SAFETY: the mapping is read-only; a file changed underneath us can give wrong values but no UB beyond that
        // which every mmap-based loader (llama.cpp, safetensors) accepts.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let mut c = Cursor { buf: &mmap, pos: 0, path: &path };
        let magic: [u8; 4] = c.take(4, "the magic bytes")?.try_into().unwrap();
        if &magic != b"GGUF" {
            return Err(GgufError::BadMagic { path, magic });
        }
        let version = c.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::BadVersion { path, version });
        }
        let n_tensors = c.u64("the tensor count")?;
        let n_kv = c.u64("the metadata count")?;
        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key = c.string(&format!("metadata key #{i}"))?;
            let ty = c.u32(&format!("the type of `{key}`"))?;
            let v = c.value(ty, &format!("metadata `{key}`"))?;
            metadata.insert(key, v);
        }
        let mut tensors = Vec::new();
        for i in 0..n_tensors {
            let name = c.string(&format!("tensor name #{i}"))?;
            let w = format!("tensor info `{name}`");
            let nd = c.u32(&w)? as usize;
            if nd > 8 {
                return Err(GgufError::truncated(&path, format!("{w} has {nd} dimensions")));
            }
            let mut ne = Vec::with_capacity(nd);
            for _ in 0..nd {
                ne.push(c.u64(&w)? as usize);
            }
            let ty = GgmlType::from_u32(c.u32(&w)?);
            let offset = c.u64(&w)?;
            ne.reverse();
            tensors.push(GgufTensorInfo { name, shape: ne, ty, offset });
        }
        let align = metadata.get("general.alignment").and_then(|v| v.as_u64()).unwrap_or(32).max(1) as usize;
        let data_start = c.pos.div_ceil(align) * align;
        let mut index = BTreeMap::new();
        for (i, t) in tensors.iter().enumerate() {
            index.insert(t.name.clone(), i);
            if let Some((bv, bb)) = t.ty.block() {
                let n = t.numel();
                if n % bv != 0 {
                    return Err(GgufError::truncated(
                        &path,
                        format!("tensor `{}` has {n} values, not a multiple of its block size {bv}", t.name),
                    ));
                }
                let end = data_start as u64 + t.offset + (n / bv * bb) as u64;
                if end > mmap.len() as u64 {
                    return Err(GgufError::truncated(
                        &path,
                        format!("tensor `{}` ends at byte {end} but the file has {} bytes", t.name, mmap.len()),
                    ));
                }
            }
        }
        Ok(GgufFile { path, version, metadata, tensors, index, data_start, mmap })
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.get(key)
    }

    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw (possibly quantised) bytes of a tensor.
    pub fn raw_bytes(&self, info: &GgufTensorInfo) -> Result<&[u8], GgufError> {
        let (bv, bb) = info.ty.block().ok_or_else(|| GgufError::UnsupportedType {
            path: self.path.clone(),
            tensor: info.name.clone(),
            ty: info.ty.name(),
        })?;
        let start = self.data_start + info.offset as usize;
        Ok(&self.mmap[start..start + info.numel() / bv * bb])
    }

    /// Dequantise a tensor straight into a new f32 CPU tensor of its PyTorch shape (no intermediate buffer), then
    /// tell the kernel the mapped source pages are no longer needed, so that loading a model does not keep the
    /// whole file resident beside the dequantised weights.
    pub fn dequantize_tensor(&self, info: &GgufTensorInfo) -> Result<tch::Tensor, GgufError> {
        let bytes = self.raw_bytes(info)?;
        let dims: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
        let t = tch::Tensor::empty(&dims, (tch::Kind::Float, tch::Device::Cpu));
        let n = info.numel();
        // SAFETY: `t` is a freshly allocated, contiguous f32 CPU tensor of exactly `n` elements that nothing else
        // references yet; the slice does not outlive this block.
        let dst = unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, n) };
        dequantize_into(info.ty, bytes, dst);
        release_pages(bytes);
        Ok(t)
    }

    /// Dequantise a tensor to f32 values in row-major PyTorch order ([`GgufTensorInfo::shape`]).
    pub fn dequantize(&self, name: &str) -> Result<Vec<f32>, GgufError> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| GgufError::MissingTensor { path: self.path.clone(), name: name.to_string() })?;
        let bytes = self.raw_bytes(info)?;
        let mut out = vec![0f32; info.numel()];
        dequantize_into(info.ty, bytes, &mut out);
        Ok(out)
    }
}

/// Dequantise `bytes` of ggml type `ty` into `out` (whose length is the value count). `ty` must have a block layout.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    let h = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes(c.try_into().unwrap());
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::Q8_0 => {
            for (y, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(34)) {
                let d = h(b, 0);
                for (j, v) in y.iter_mut().enumerate() {
                    *v = d * (b[2 + j] as i8) as f32;
                }
            }
        }
        GgmlType::Q4_0 => {
            for (y, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(18)) {
                let d = h(b, 0);
                for j in 0..16 {
                    let q = b[2 + j];
                    y[j] = ((q & 0xF) as i32 - 8) as f32 * d;
                    y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
                }
            }
        }
        GgmlType::Q4_1 => {
            for (y, b) in out.chunks_exact_mut(32).zip(bytes.chunks_exact(20)) {
                let (d, m) = (h(b, 0), h(b, 2));
                for j in 0..16 {
                    let q = b[4 + j];
                    y[j] = (q & 0xF) as f32 * d + m;
                    y[j + 16] = (q >> 4) as f32 * d + m;
                }
            }
        }
        GgmlType::Q4K => {
            for (y, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(144)) {
                let (d, dmin) = (h(b, 0), h(b, 2));
                let scales = &b[4..16];
                let qs = &b[16..144];
                for (k, j) in (0..256).step_by(64).enumerate() {
                    let ((d1, m1), (d2, m2)) = (k_scale(2 * k, d, dmin, scales), k_scale(2 * k + 1, d, dmin, scales));
                    let q = &qs[32 * k..32 * k + 32];
                    for l in 0..32 {
                        y[j + l] = d1 * (q[l] & 0xF) as f32 - m1;
                        y[j + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
                    }
                }
            }
        }
        GgmlType::Q5K => {
            for (y, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(176)) {
                let (d, dmin) = (h(b, 0), h(b, 2));
                let scales = &b[4..16];
                let qh = &b[16..48];
                let qs = &b[48..176];
                let (mut u1, mut u2) = (1u8, 2u8);
                for (k, j) in (0..256).step_by(64).enumerate() {
                    let ((d1, m1), (d2, m2)) = (k_scale(2 * k, d, dmin, scales), k_scale(2 * k + 1, d, dmin, scales));
                    let ql = &qs[32 * k..32 * k + 32];
                    for l in 0..32 {
                        let hi1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                        let hi2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                        y[j + l] = d1 * ((ql[l] & 0xF) + hi1) as f32 - m1;
                        y[j + 32 + l] = d2 * ((ql[l] >> 4) + hi2) as f32 - m2;
                    }
                    u1 <<= 2;
                    u2 <<= 2;
                }
            }
        }
        GgmlType::Q6K => {
            for (y, b) in out.chunks_exact_mut(256).zip(bytes.chunks_exact(210)) {
                let ql_all = &b[0..128];
                let qh_all = &b[128..192];
                let sc_all = &b[192..208];
                let d = h(b, 208);
                for n in 0..2 {
                    let (ql, qh, sc) = (&ql_all[64 * n..], &qh_all[32 * n..], &sc_all[8 * n..]);
                    let y = &mut y[128 * n..];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                        y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                        y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                        y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                    }
                }
            }
        }
        other => unreachable!("dequantize_into called with {other:?}, which has no block layout"),
    }
}

/// Drop the resident pages of a read-only file mapping that covers `bytes` (whole pages inside it only). The data
/// stays readable: the kernel reloads it from the file on the next access.
pub fn release_pages(bytes: &[u8]) {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let start = bytes.as_ptr() as usize;
    let begin = start.div_ceil(page) * page;
    let end = (start + bytes.len()) / page * page;
    if end > begin {
        // SAFETY: [begin, end) lies inside a live read-only file mapping; MADV_DONTNEED on such a mapping only
        // discards clean page-cache references, and later reads fault the pages back in from the file.
        unsafe { libc::madvise(begin as *mut libc::c_void, end - begin, libc::MADV_DONTNEED) };
    }
}

/// Sub-block `j`'s effective (scale, minimum) in a Q4_K/Q5_K block with super-scales `d` and `dmin`.
fn k_scale(j: usize, d: f32, dmin: f32, scales: &[u8]) -> (f32, f32) {
    let (sc, m) = scale_min_k4(j, scales);
    (d * sc as f32, dmin * m as f32)
}

/// The 6-bit scale and minimum of sub-block `j` in a K-quant's packed 12-byte scale array.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_1_block_layout() {
        // d = 0.5, m = -1.0, nibbles: low = j % 16, high = 15 - j % 16.
        let mut b = Vec::new();
        b.extend_from_slice(&f16::from_f32(0.5).to_le_bytes());
        b.extend_from_slice(&f16::from_f32(-1.0).to_le_bytes());
        for j in 0..16u8 {
            b.push(j | ((15 - j) << 4));
        }
        let mut out = [0f32; 32];
        dequantize_into(GgmlType::Q4_1, &b, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], j as f32 * 0.5 - 1.0);
            assert_eq!(out[16 + j], (15 - j) as f32 * 0.5 - 1.0);
        }
    }

    #[test]
    fn scale_min_unpacking() {
        let q: Vec<u8> = (0..12).map(|i| (i * 37 + 11) as u8).collect();
        for j in 0..4 {
            assert_eq!(scale_min_k4(j, &q), (q[j] & 63, q[j + 4] & 63));
        }
        let (s, m) = scale_min_k4(5, &q);
        assert_eq!(s, (q[9] & 0xF) | ((q[1] >> 6) << 4));
        assert_eq!(m, (q[9] >> 4) | ((q[5] >> 6) << 4));
    }
}
