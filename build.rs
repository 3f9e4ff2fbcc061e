//! Make the trustlens binary and tests find libtorch at run time without exported library paths.
//!
//! torch-sys exports the directory of the libtorch it linked as `DEP_TCH_LIBTORCH_LIB`; its own rpath does not reach
//! the final binary, so we add one here. rustc links with `--as-needed`, which would drop `libtorch_cuda.so` (nothing
//! references its symbols directly) and leave CUDA invisible on GPU machines: keep it explicitly when present.
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
        if Path::new(&lib).join("libtorch_cuda.so").exists() {
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
    }
}
