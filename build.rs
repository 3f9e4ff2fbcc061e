//! Make the trustlens binary and tests find libtorch at run time without exported library paths.
//!
//! torch-sys exports the directory of the libtorch it linked as `DEP_TCH_LIBTORCH_LIB`; its own rpath does not reach
//! the final binary, so we add one here. `libtorch_cuda.so` is deliberately *not* linked: rustc's `--as-needed` drops
//! it anyway, and forcing it in (`--no-as-needed`) maps cuBLAS, cuSPARSELt and friends into every process, about
//! 400 MB of resident memory on CPU-only runs. Instead `trustlens::model::cuda` dlopens it when a CUDA device is
//! asked for; `TRUSTLENS_LIBTORCH_LIB` (compile time default, overridable at run time) says where to look.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        println!("cargo:rustc-env=TRUSTLENS_LIBTORCH_LIB={lib}");
    }
}
