//! Placing a model's decoder blocks across several devices by memory.
//!
//! A model larger than one GPU (Llama 3.3 70B is about 141 GB in bf16) runs with its blocks split into contiguous
//! ranges over an ordered list of devices: the token embedding sits on the first device, block `i` on the device of
//! its range, and the final norm and unembedding on the device of the last block (or the next one with room). The
//! forward pass moves the residual stream (and the masks, rotary tables and intervention vectors it needs) to a
//! block's device when it crosses a boundary, so results equal a single-device run up to the arithmetic of the
//! devices involved (bit for bit when all entries are the same kind of device).
//!
//! - [`Footprint::from_config`]: bytes per part (embedding, each block, head) from a config and a dtype
//! - [`plan`]: the pure planner (given budgets, which layer goes where); unit-tested with fixed budgets
//! - [`parse_devices`], [`parse_memory`], [`budgets`]: the `--devices` / `--device-memory` front end, reading the
//!   free memory of each GPU (CUDA runtime `cudaMemGetInfo`, through the libtorch CUDA backend that
//!   [`super::cuda`] loads) and the available RAM for `cpu`
//!
//! Putting `cpu` last in the device list spills the blocks that do not fit on the GPUs to CPU memory.
use super::config::ModelConfig;
use super::cuda;
use std::fmt;
use std::ops::Range;
use tch::{Device, Kind};

/// Why a placement could not be made. One line each.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlacementError {
    #[error("--devices: {0}")]
    BadDevices(String),
    #[error("--device-memory: {0}")]
    BadMemory(String),
    #[error("{0}")]
    Query(String),
    #[error("{0}")]
    DoesNotFit(String),
}

/// Bytes of each part of a model's weights in the compute dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footprint {
    /// Token embedding `[vocab, d_model]`.
    pub embed: u64,
    /// Each decoder block (attention, MLP, both norms, biases).
    pub layers: Vec<u64>,
    /// Final RMSNorm weight.
    pub norm: u64,
    /// Unembedding `[vocab, d_model]`.
    pub lm_head: u64,
    /// Tied embeddings: the unembedding shares the embedding's storage when it sits on the same device and is a copy
    /// otherwise.
    pub tied: bool,
}

impl Footprint {
    /// The footprint of `cfg`'s weights in `kind` (the loader dequantises GGUF weights to `kind`, so the same
    /// formula holds for quantised files).
    pub fn from_config(cfg: &ModelConfig, kind: Kind) -> Footprint {
        let b = kind_bytes(kind);
        let (d, h, kv, hd, ffn, v) = (
            cfg.hidden_size as u64,
            cfg.num_attention_heads as u64,
            cfg.n_kv_heads() as u64,
            cfg.head_dim() as u64,
            cfg.intermediate_size as u64,
            cfg.vocab_size as u64,
        );
        let qkv = (h * hd + 2 * kv * hd) * d + if cfg.qkv_bias() { h * hd + 2 * kv * hd } else { 0 };
        let o = d * h * hd + if cfg.o_bias() { d } else { 0 };
        let per_layer = (qkv + o + 3 * ffn * d + 2 * d) * b;
        Footprint {
            embed: v * d * b,
            layers: vec![per_layer; cfg.num_hidden_layers],
            norm: d * b,
            lm_head: v * d * b,
            tied: cfg.tie_word_embeddings,
        }
    }

    /// Bytes of the whole model on one device (tied embeddings counted once).
    pub fn total(&self) -> u64 {
        self.embed + self.layers.iter().sum::<u64>() + self.norm + if self.tied { 0 } else { self.lm_head }
    }
}

/// Bytes per element of a compute dtype.
pub fn kind_bytes(kind: Kind) -> u64 {
    match kind {
        Kind::Half | Kind::BFloat16 => 2,
        Kind::Double => 8,
        _ => 4,
    }
}

/// One entry of the device list with the bytes of weights it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub device: Device,
    pub budget: u64,
}

/// What one slot of a [`Placement`] holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotUse {
    pub device: String,
    pub budget_bytes: u64,
    pub used_bytes: u64,
    /// Blocks on this slot (empty range: none).
    pub layers: Range<usize>,
    pub embed: bool,
    pub head: bool,
}

/// Which device every part of the model goes to.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// Device of each decoder block, in order.
    pub block_devices: Vec<Device>,
    /// Device of the embedding (the first slot's).
    pub embed_device: Device,
    /// Device of the final norm and unembedding.
    pub head_device: Device,
    /// Per slot of the device list, in order.
    pub slots: Vec<SlotUse>,
}

impl Placement {
    /// Everything on one device, no memory check (what `--device` does).
    pub fn single(device: Device, n_layers: usize) -> Placement {
        Placement {
            block_devices: vec![device; n_layers],
            embed_device: device,
            head_device: device,
            slots: vec![SlotUse {
                device: device_name(device),
                budget_bytes: 0,
                used_bytes: 0,
                layers: 0..n_layers,
                embed: true,
                head: true,
            }],
        }
    }

    /// Whether any part is on a GPU.
    pub fn uses_cuda(&self) -> bool {
        self.embed_device.is_cuda() || self.head_device.is_cuda() || self.block_devices.iter().any(|d| d.is_cuda())
    }

    /// A short name: `cuda:0` for one device, `cuda:0[0..40]+cuda:1[40..80]` for a split.
    pub fn short(&self) -> String {
        let used: Vec<&SlotUse> = self.slots.iter().filter(|s| s.embed || s.head || !s.layers.is_empty()).collect();
        if used.len() == 1 {
            return used[0].device.clone();
        }
        used.iter().map(|s| format!("{}[{}..{}]", s.device, s.layers.start, s.layers.end)).collect::<Vec<_>>().join("+")
    }
}

impl fmt::Display for Placement {
    /// One line per slot: `cuda:0  embed + blocks 0..40  68.1 GiB of 70.0 GiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.slots.iter().enumerate() {
            let mut parts = Vec::new();
            if s.embed {
                parts.push("embed".to_string());
            }
            if !s.layers.is_empty() {
                parts.push(format!("blocks {}..{}", s.layers.start, s.layers.end));
            }
            if s.head {
                parts.push("norm + unembedding".to_string());
            }
            if parts.is_empty() {
                parts.push("(unused)".into());
            }
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{:<8} {:<40} {} of {}", s.device, parts.join(" + "), gib(s.used_bytes), gib(s.budget_bytes))?;
        }
        Ok(())
    }
}

/// `12.30 GiB`, `3.50 MiB`, `512 B`.
pub fn gib(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..=1023 => format!("{bytes} B"),
        1024..=1048575 => format!("{:.1} KiB", b / 1024.0),
        1048576..=1073741823 => format!("{:.2} MiB", b / 1048576.0),
        _ => format!("{:.2} GiB", b / 1073741824.0),
    }
}

/// `cpu`, `cuda:N`.
pub fn device_name(d: Device) -> String {
    match d {
        Device::Cpu => "cpu".into(),
        Device::Cuda(i) => format!("cuda:{i}"),
        other => format!("{other:?}").to_ascii_lowercase(),
    }
}

/// Assign contiguous block ranges to `slots` in order, filling each slot before the next (fewest boundaries): the
/// embedding on the first slot, the final norm and unembedding on the slot of the last block, or on a later one if
/// it has no room left. Errors name what does not fit and what would make it fit.
///
/// Greedy filling in order is optimal for this problem: if any contiguous assignment fits, this one does.
pub fn plan(fp: &Footprint, slots: &[Slot]) -> Result<Placement, PlacementError> {
    if slots.is_empty() {
        return Err(PlacementError::BadDevices("no devices given".into()));
    }
    let n = fp.layers.len();
    let mut used = vec![0u64; slots.len()];
    let mut ranges: Vec<Range<usize>> = vec![0..0; slots.len()];
    let avail = || slots.iter().map(|s| format!("{} {}", device_name(s.device), gib(s.budget))).collect::<Vec<_>>();
    let hint = "add devices, put `cpu` last in --devices to spill the remaining blocks to CPU memory, use a smaller \
                dtype (bf16/f16), or raise the budgets with --device-memory";
    if fp.embed > slots[0].budget {
        return Err(PlacementError::DoesNotFit(format!(
            "the embedding ({}) does not fit on the first device {} ({} for weights); {hint}",
            gib(fp.embed),
            device_name(slots[0].device),
            gib(slots[0].budget)
        )));
    }
    used[0] = fp.embed;
    let mut i = 0;
    let mut block_devices = Vec::with_capacity(n);
    for (l, &bytes) in fp.layers.iter().enumerate() {
        while used[i] + bytes > slots[i].budget {
            i += 1;
            if i == slots.len() {
                return Err(PlacementError::DoesNotFit(format!(
                    "the model does not fit: it needs {} in this dtype (embedding {}, {n} blocks of {}, head {}) but \
                     the devices offer {} for weights [{}]; blocks {l}..{n} have no room; {hint}",
                    gib(fp.total()),
                    gib(fp.embed),
                    gib(fp.layers.first().copied().unwrap_or(0)),
                    gib(fp.norm + if fp.tied { 0 } else { fp.lm_head }),
                    gib(slots.iter().map(|s| s.budget).sum()),
                    avail().join(", ")
                )));
            }
            ranges[i] = l..l;
        }
        used[i] += bytes;
        ranges[i].end = l + 1;
        block_devices.push(slots[i].device);
    }
    // The head: norm + unembedding (a copy of the embedding when tied and on another device than it).
    let head_bytes = |j: usize| fp.norm + if fp.tied && slots[j].device == slots[0].device { 0 } else { fp.lm_head };
    while used[i] + head_bytes(i) > slots[i].budget {
        i += 1;
        if i == slots.len() {
            return Err(PlacementError::DoesNotFit(format!(
                "the model does not fit: the final norm and unembedding ({}) have no room after the blocks [{}]; {hint}",
                gib(fp.norm + fp.lm_head),
                avail().join(", ")
            )));
        }
    }
    used[i] += head_bytes(i);
    let head_slot = i;
    let slots_out = slots
        .iter()
        .enumerate()
        .map(|(j, s)| SlotUse {
            device: device_name(s.device),
            budget_bytes: s.budget,
            used_bytes: used[j],
            layers: ranges[j].clone(),
            embed: j == 0,
            head: j == head_slot,
        })
        .collect();
    Ok(Placement {
        block_devices,
        embed_device: slots[0].device,
        head_device: slots[head_slot].device,
        slots: slots_out,
    })
}

/// Parse one device name without touching any GPU: `cpu`, `cuda` (= `cuda:0`), `cuda:N`.
pub fn parse_device_name(s: &str) -> Option<Device> {
    let s = s.trim().to_ascii_lowercase();
    match s.as_str() {
        "cpu" => Some(Device::Cpu),
        "cuda" => Some(Device::Cuda(0)),
        _ => s.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()).map(Device::Cuda),
    }
}

/// Parse a device list: comma-separated `cpu`, `cuda`, `cuda:N` or `auto` (every visible GPU in index order, or
/// `cpu` when there is none). The same device may be named more than once (its memory is then shared evenly between
/// its entries). Every GPU named must exist.
///
/// Example: `cuda:0,cuda:1,cpu` (two GPUs, then CPU memory for whatever does not fit), `auto,cpu`.
pub fn parse_devices(spec: &str) -> Result<Vec<Device>, PlacementError> {
    let mut out = Vec::new();
    for entry in spec.split(',').map(str::trim) {
        if entry.is_empty() {
            return Err(PlacementError::BadDevices(format!("`{spec}` has an empty entry")));
        }
        if entry.eq_ignore_ascii_case("auto") {
            let n = visible_gpus();
            if n == 0 {
                out.push(Device::Cpu);
            } else {
                out.extend((0..n).map(Device::Cuda));
            }
            continue;
        }
        match parse_device_name(entry) {
            Some(Device::Cpu) => out.push(Device::Cpu),
            Some(Device::Cuda(i)) => {
                cuda::ensure_loaded()
                    .map_err(|why| PlacementError::BadDevices(format!("`{entry}` requested but {why}")))?;
                let n = tch::Cuda::device_count() as usize;
                if i >= n {
                    return Err(PlacementError::BadDevices(format!(
                        "`{entry}` requested but {n} CUDA device(s) are visible"
                    )));
                }
                out.push(Device::Cuda(i));
            }
            _ => {
                return Err(PlacementError::BadDevices(format!(
                    "unknown device `{entry}` in `{spec}` (cpu, cuda, cuda:N, auto; comma-separated)"
                )))
            }
        }
    }
    Ok(out)
}

/// GPUs visible to libtorch (0 without a driver or without the CUDA backend).
fn visible_gpus() -> usize {
    if !cuda::driver_present() || cuda::ensure_loaded().is_err() {
        return 0;
    }
    tch::Cuda::device_count().max(0) as usize
}

/// Parse a byte size: `70GiB`, `80GB`, `512MiB`, `1.5TiB`, `123456` (bytes). Decimal units (KB, MB, GB, TB) are
/// powers of 1000, binary ones (KiB, MiB, GiB, TiB) powers of 1024.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let x: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0f64.powi(4),
        _ => return None,
    };
    (x.is_finite() && x >= 0.0).then(|| (x * mult).round() as u64)
}

/// Parse `--device-memory`: `cuda:0=70GiB,cuda:1=70GiB,cpu=200GB`. Each size is the bytes of weights that device
/// may hold (nothing is subtracted from it).
pub fn parse_memory(spec: &str) -> Result<Vec<(Device, u64)>, PlacementError> {
    let mut out: Vec<(Device, u64)> = Vec::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (dev, size) = entry
            .split_once('=')
            .ok_or_else(|| PlacementError::BadMemory(format!("`{entry}`: expected DEVICE=SIZE, e.g. cuda:0=70GiB")))?;
        let d = parse_device_name(dev)
            .ok_or_else(|| PlacementError::BadMemory(format!("`{entry}`: unknown device `{dev}` (cpu, cuda:N)")))?;
        let b = parse_bytes(size).ok_or_else(|| {
            PlacementError::BadMemory(format!("`{entry}`: cannot read the size `{size}` (e.g. 70GiB, 80GB, 512MiB)"))
        })?;
        if out.iter().any(|(o, _)| *o == d) {
            return Err(PlacementError::BadMemory(format!("`{}` is given twice", device_name(d))));
        }
        out.push((d, b));
    }
    Ok(out)
}

/// Fraction of a device's free memory given to weights when no `--device-memory` is given; the rest is left for
/// activations, KV caches and load-time scratch.
pub const WEIGHT_FRACTION: f64 = 0.9;
/// Further bytes kept free on each GPU when its budget is measured (CUDA context, cuBLAS workspaces).
pub const GPU_RESERVE: u64 = 1 << 30;

/// Budgets for a device list: the `--device-memory` value where given, else 90% of the free memory (GPU: minus
/// 1 GiB more) or 90% of the available RAM (CPU). A device named several times shares its budget evenly.
pub fn budgets(devices: &[Device], overrides: &[(Device, u64)]) -> Result<Vec<Slot>, PlacementError> {
    let mut out = Vec::with_capacity(devices.len());
    for &d in devices {
        let total = match overrides.iter().find(|(o, _)| *o == d) {
            Some(&(_, b)) => b,
            None => match d {
                Device::Cpu => (available_ram()? as f64 * WEIGHT_FRACTION) as u64,
                Device::Cuda(i) => {
                    let (free, _) = cuda_mem_info(i)?;
                    ((free as f64 * WEIGHT_FRACTION) as u64).saturating_sub(GPU_RESERVE)
                }
                other => return Err(PlacementError::BadDevices(format!("unsupported device {other:?}"))),
            },
        };
        let shares = devices.iter().filter(|&&x| x == d).count() as u64;
        out.push(Slot { device: d, budget: total / shares });
    }
    Ok(out)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub fn available_ram() -> Result<u64, PlacementError> {
    let text = std::fs::read_to_string("/proc/meminfo").map_err(|e| {
        PlacementError::Query(format!("reading /proc/meminfo for the CPU's memory: {e}; pass --device-memory cpu=SIZE"))
    })?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| PlacementError::Query("/proc/meminfo has no MemAvailable; pass --device-memory cpu=SIZE".into()))
}

/// Free and total bytes of GPU `index`, from the CUDA runtime's `cudaMemGetInfo` (resolved in the libcudart that
/// libtorch's CUDA backend loaded). Selects the device for the call and restores the previous one.
pub fn cuda_mem_info(index: usize) -> Result<(u64, u64), PlacementError> {
    let fail = |why: String| {
        PlacementError::Query(format!(
            "cannot read the free memory of cuda:{index}: {why}; pass --device-memory cuda:{index}=SIZE"
        ))
    };
    cuda::ensure_loaded().map_err(fail)?;
    type GetInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;
    type SetDev = unsafe extern "C" fn(i32) -> i32;
    type GetDev = unsafe extern "C" fn(*mut i32) -> i32;
    let sym = |name: &str| -> Result<*mut libc::c_void, PlacementError> {
        let c = std::ffi::CString::new(name).map_err(|e| fail(e.to_string()))?;
        // SAFETY: dlsym over every loaded object with a valid C string.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) };
        if !p.is_null() {
            return Ok(p);
        }
        // Not in the global scope: ask the CUDA runtime that libtorch_cuda loaded by its soname.
        for lib in ["libcudart.so.13", "libcudart.so.12", "libcudart.so"] {
            let l = std::ffi::CString::new(lib).map_err(|e| fail(e.to_string()))?;
            // SAFETY: dlopen/dlsym with valid C strings; the handle stays open (the runtime is in use anyway).
            let p = unsafe {
                let h = libc::dlopen(l.as_ptr(), libc::RTLD_NOW);
                if h.is_null() {
                    continue;
                }
                libc::dlsym(h, c.as_ptr())
            };
            if !p.is_null() {
                return Ok(p);
            }
        }
        Err(fail(format!("the CUDA runtime symbol {name} is not loaded")))
    };
    // SAFETY: the symbols are the CUDA runtime's functions with these C signatures.
    unsafe {
        let get_info: GetInfo = std::mem::transmute::<*mut libc::c_void, GetInfo>(sym("cudaMemGetInfo")?);
        let set_dev: SetDev = std::mem::transmute::<*mut libc::c_void, SetDev>(sym("cudaSetDevice")?);
        let get_dev: GetDev = std::mem::transmute::<*mut libc::c_void, GetDev>(sym("cudaGetDevice")?);
        let mut prev = 0i32;
        let have_prev = get_dev(&mut prev) == 0;
        let rc = set_dev(index as i32);
        if rc != 0 {
            return Err(fail(format!("cudaSetDevice returned error {rc}")));
        }
        let (mut free, mut total) = (0usize, 0usize);
        let rc = get_info(&mut free, &mut total);
        if have_prev {
            set_dev(prev);
        }
        if rc != 0 {
            return Err(fail(format!("cudaMemGetInfo returned error {rc}")));
        }
        Ok((free as u64, total as u64))
    }
}

/// The front end: parse `devices` and `memory` (`--device-memory`, may be empty), read the budgets and plan.
pub fn plan_for(
    cfg: &ModelConfig,
    kind: Kind,
    devices: &str,
    memory: Option<&str>,
) -> Result<Placement, PlacementError> {
    let devs = parse_devices(devices)?;
    let overrides = match memory {
        Some(m) => parse_memory(m)?,
        None => Vec::new(),
    };
    for (d, _) in &overrides {
        if !devs.contains(d) {
            return Err(PlacementError::BadMemory(format!(
                "`{}` is not in the device list `{devices}`",
                device_name(*d)
            )));
        }
    }
    plan(&Footprint::from_config(cfg, kind), &budgets(&devs, &overrides)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(embed: u64, layers: &[u64], head: u64, tied: bool) -> Footprint {
        Footprint { embed, layers: layers.to_vec(), norm: 1, lm_head: head, tied }
    }
    fn slots(b: &[(Device, u64)]) -> Vec<Slot> {
        b.iter().map(|&(device, budget)| Slot { device, budget }).collect()
    }
    const G0: Device = Device::Cuda(0);
    const G1: Device = Device::Cuda(1);

    #[test]
    fn everything_on_one_device_when_it_fits() {
        let p = plan(&fp(10, &[5; 4], 10, false), &slots(&[(G0, 41), (G1, 100)])).unwrap();
        assert_eq!(p.block_devices, vec![G0; 4]);
        assert_eq!((p.embed_device, p.head_device), (G0, G0));
        assert_eq!(p.slots[0].used_bytes, 41);
        assert_eq!(p.slots[1].layers, 0..0);
        assert_eq!(p.short(), "cuda:0");
    }

    #[test]
    fn contiguous_ranges_fill_in_order() {
        // 10 + 3x5 = 25 <= 27 on cuda:0; blocks 3..6 on cuda:1 (15) + head 11 = 26 <= 30.
        let p = plan(&fp(10, &[5; 6], 10, false), &slots(&[(G0, 27), (G1, 30)])).unwrap();
        assert_eq!(p.block_devices, vec![G0, G0, G0, G1, G1, G1]);
        assert_eq!(p.head_device, G1);
        assert_eq!(p.slots[0].layers, 0..3);
        assert_eq!(p.slots[1].layers, 3..6);
        assert!(p.slots[0].embed && !p.slots[0].head && p.slots[1].head);
        assert_eq!((p.slots[0].used_bytes, p.slots[1].used_bytes), (25, 26));
        assert_eq!(p.short(), "cuda:0[0..3]+cuda:1[3..6]");
    }

    #[test]
    fn head_moves_to_the_next_device_when_the_last_has_no_room() {
        // All blocks fit on cuda:0 but the head does not: it goes to cuda:1.
        let p = plan(&fp(10, &[5; 2], 10, false), &slots(&[(G0, 25), (G1, 20)])).unwrap();
        assert_eq!(p.block_devices, vec![G0, G0]);
        assert_eq!(p.head_device, G1);
        assert_eq!(p.slots[1].layers, 0..0);
        assert_eq!(p.slots[1].used_bytes, 11);
    }

    #[test]
    fn cpu_spill_takes_what_the_gpus_cannot() {
        let p = plan(&fp(10, &[5; 8], 10, false), &slots(&[(G0, 20), (G1, 10), (Device::Cpu, 1000)])).unwrap();
        assert_eq!(p.block_devices, vec![G0, G0, G1, G1, Device::Cpu, Device::Cpu, Device::Cpu, Device::Cpu]);
        assert_eq!(p.head_device, Device::Cpu);
        assert_eq!(p.slots[2].layers, 4..8);
    }

    #[test]
    fn tied_head_is_free_on_the_embedding_device_and_a_copy_elsewhere() {
        let p = plan(&fp(10, &[5; 2], 10, true), &slots(&[(G0, 21)])).unwrap();
        assert_eq!(p.slots[0].used_bytes, 21);
        // Split: the tied unembedding is copied to cuda:1.
        let p = plan(&fp(10, &[5; 2], 10, true), &slots(&[(G0, 15), (G1, 16)])).unwrap();
        assert_eq!(p.block_devices, vec![G0, G1]);
        assert_eq!(p.slots[1].used_bytes, 16);
        assert!(plan(&fp(10, &[5; 2], 10, true), &slots(&[(G0, 15), (G1, 15)])).is_err());
    }

    #[test]
    fn a_layer_larger_than_every_device_is_refused_with_the_blocks_named() {
        let e = plan(&fp(10, &[5, 5, 50, 5], 10, false), &slots(&[(G0, 30), (G1, 40)])).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, PlacementError::DoesNotFit(_)));
        assert!(msg.contains("blocks 2..4 have no room"), "{msg}");
        assert!(msg.contains("cpu"), "the message suggests CPU spill: {msg}");
        let e = plan(&fp(100, &[5], 10, false), &slots(&[(G0, 50), (G1, 400)])).unwrap_err();
        assert!(e.to_string().contains("embedding"), "{e}");
        let e = plan(&fp(10, &[5], 100, false), &slots(&[(G0, 50)])).unwrap_err();
        assert!(e.to_string().contains("unembedding"), "{e}");
        assert!(plan(&fp(1, &[1], 1, false), &[]).is_err());
    }

    #[test]
    fn exact_fit_is_accepted() {
        // 10 + 2*5 = 20 then 2*5 + 11 = 21.
        let p = plan(&fp(10, &[5; 4], 10, false), &slots(&[(G0, 20), (G1, 21)])).unwrap();
        assert_eq!(p.block_devices, vec![G0, G0, G1, G1]);
        assert!(plan(&fp(10, &[5; 4], 10, false), &slots(&[(G0, 20), (G1, 20)])).is_err());
    }

    #[test]
    fn footprint_of_llama_3_1_8b_in_bf16() {
        let cfg: ModelConfig = serde_json::from_value(serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        }))
        .unwrap();
        let f = Footprint::from_config(&cfg, Kind::BFloat16);
        // 8,030,261,248 parameters.
        assert_eq!(f.total() / 2, 8_030_261_248);
        assert_eq!(f.layers.len(), 32);
        assert_eq!(f.layers[0], 218_112_000 * 2);
        assert_eq!(Footprint::from_config(&cfg, Kind::Float).total(), 4 * 8_030_261_248);
    }

    #[test]
    fn seventy_b_on_two_h200_and_with_cpu_spill() {
        // Llama 3.3 70B shapes: 80 blocks, bf16, ~141 GB.
        let cfg: ModelConfig = serde_json::from_value(serde_json::json!({
            "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672,
            "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 128256,
        }))
        .unwrap();
        let f = Footprint::from_config(&cfg, Kind::BFloat16);
        let g = 1u64 << 30;
        assert!(plan(&f, &slots(&[(G0, 120 * g)])).is_err(), "141 GB does not fit on one GPU");
        let p = plan(&f, &slots(&[(G0, 120 * g), (G1, 120 * g)])).unwrap();
        let split = p.slots[0].layers.end;
        assert!(split > 40 && split < 80, "{split}");
        assert_eq!(p.slots[1].layers, split..80);
        let p = plan(&f, &slots(&[(G0, 120 * g), (Device::Cpu, 64 * g)])).unwrap();
        assert_eq!(p.head_device, Device::Cpu);
        assert_eq!(p.block_devices.iter().filter(|d| **d == Device::Cpu).count(), 80 - p.slots[0].layers.end);
    }

    #[test]
    fn sizes_and_memory_specs_parse() {
        assert_eq!(parse_bytes("70GiB"), Some(70 << 30));
        assert_eq!(parse_bytes("80GB"), Some(80_000_000_000));
        assert_eq!(parse_bytes("1.5 KiB"), Some(1536));
        assert_eq!(parse_bytes("123"), Some(123));
        assert_eq!(parse_bytes("12 parsecs"), None);
        assert_eq!(parse_bytes("GiB"), None);
        let m = parse_memory("cuda:0=70GiB, cpu=1MB").unwrap();
        assert_eq!(m, vec![(G0, 70 << 30), (Device::Cpu, 1_000_000)]);
        assert!(parse_memory("cuda:0").unwrap_err().to_string().contains("DEVICE=SIZE"));
        assert!(parse_memory("gpu0=1GB").unwrap_err().to_string().contains("unknown device"));
        assert!(parse_memory("cpu=lots").unwrap_err().to_string().contains("lots"));
        assert!(parse_memory("cpu=1GB,cpu=2GB").unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn device_lists_parse_and_duplicates_share_a_budget() {
        assert_eq!(parse_devices("cpu, cpu").unwrap(), vec![Device::Cpu, Device::Cpu]);
        assert!(parse_devices("cpu,,cpu").unwrap_err().to_string().contains("empty"));
        assert!(parse_devices("tpu:0").unwrap_err().to_string().contains("unknown device `tpu:0`"));
        let b = budgets(&[Device::Cpu, Device::Cpu], &[(Device::Cpu, 100)]).unwrap();
        assert_eq!(b, slots(&[(Device::Cpu, 50), (Device::Cpu, 50)]));
        let b = budgets(&[Device::Cpu], &[]).unwrap();
        assert!(b[0].budget > 0, "the CPU's available memory is read from /proc/meminfo");
    }
}
