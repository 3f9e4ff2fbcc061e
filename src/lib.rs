//! trustlens: does a language model treat the same malicious instruction differently when it arrives through the
//! user's chat message, a tool's description or a tool's output? See README.md for the tour.
pub mod activations;
pub mod behave;
pub mod capture;
pub mod cases;
pub mod experiment;
pub mod guard;
pub mod model;
pub mod patch;
pub mod plot;
pub mod probe;
pub mod prompt;
pub mod sas;
pub mod stats;
pub mod sweep;

/// SHA-256 of a file's contents, hex; read in 1 MiB blocks. The one file hash of the project (model weights, case
/// files, sweep outputs).
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// Keep freed activation buffers in the process instead of handing them back to the kernel after every forward pass.
///
/// glibc returns the top of the heap to the OS whenever more than `M_TRIM_THRESHOLD` is free and serves blocks above
/// a (dynamic) `M_MMAP_THRESHOLD` with fresh mappings, so each forward pass re-faults its activation buffers page by
/// page: measured on the embedded model, 2.4 million page faults and ~25% of the forward pass's wall time. The
/// `trustlens` binary calls this first thing; library users running many forward passes should too. Resident memory
/// then stays at its high-water mark, which a workbench that reruns the same shapes reaches anyway.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before other threads allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}
