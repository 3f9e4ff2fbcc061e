//! Loading libtorch's CUDA backend on demand.
//!
//! libtorch registers its CUDA backend from the static initialisers of `libtorch_cuda.so`. trustlens does not link
//! that library (it would map the CUDA math libraries into every CPU-only run); [`ensure_loaded`] dlopens it with
//! `RTLD_GLOBAL` the first time a CUDA device is asked for. Where it is searched, in order:
//! 1. `$TRUSTLENS_LIBTORCH_LIB/libtorch_cuda.so` (run time), e.g. the `torch/lib` of another PyTorch install;
//! 2. the libtorch directory trustlens was built against;
//! 3. the plain name, through `LD_LIBRARY_PATH` and the loader's cache.
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::OnceLock;

static LOADED: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// dlopen `libtorch_cuda.so` once. Returns the path that loaded, or every attempt's error.
pub fn ensure_loaded() -> Result<PathBuf, String> {
    LOADED.get_or_init(load).clone()
}

/// Whether an NVIDIA kernel driver is visible (`/proc/driver/nvidia` or `/dev/nvidiactl`); without one there is
/// no point loading the CUDA backend for `auto`.
pub fn driver_present() -> bool {
    std::path::Path::new("/proc/driver/nvidia").exists() || std::path::Path::new("/dev/nvidiactl").exists()
}

fn candidates() -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Ok(dir) = std::env::var("TRUSTLENS_LIBTORCH_LIB") {
        c.push(PathBuf::from(dir).join("libtorch_cuda.so"));
    }
    if let Some(dir) = option_env!("TRUSTLENS_LIBTORCH_LIB") {
        c.push(PathBuf::from(dir).join("libtorch_cuda.so"));
    }
    c.push(PathBuf::from("libtorch_cuda.so"));
    c
}

fn load() -> Result<PathBuf, String> {
    let mut errors = Vec::new();
    for path in candidates() {
        if path.is_absolute() && !path.exists() {
            errors.push(format!("{}: not found", path.display()));
            continue;
        }
        let c = CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: dlopen with a valid C string; the handle is intentionally never closed (libtorch's CUDA backend
        // must stay registered for the life of the process).
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if !handle.is_null() {
            return Ok(path);
        }
        // SAFETY: dlerror returns a thread-local C string or null.
        let err = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown dlopen error".to_string()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        errors.push(err);
    }
    Err(format!("could not load libtorch's CUDA backend (libtorch_cuda.so): {}", errors.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CUDA backend loads from the libtorch we built against and registers itself: on a machine without a GPU,
    /// moving a tensor to CUDA then fails for lack of a driver/device, not for lack of a CUDA backend.
    #[test]
    fn cuda_backend_loads_on_demand() {
        let path = ensure_loaded().expect("libtorch_cuda.so should load from the build's libtorch");
        assert!(path.to_string_lossy().contains("libtorch_cuda"));
        if tch::Cuda::device_count() == 0 {
            let t = tch::Tensor::zeros([2], (tch::Kind::Float, tch::Device::Cpu));
            let err = t.f_to_device(tch::Device::Cuda(0)).expect_err("no GPU here").to_string();
            assert!(!err.contains("CUDA' backend"), "CUDA backend not registered: {err}");
        }
    }
}
