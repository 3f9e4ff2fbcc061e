#!/usr/bin/env bash
# The prepared GPU check (README: "Running on GPUs"). Two modes:
#
#   scripts/gpu_check.sh --bundle   on the build machine: build the release binary and copy the system libraries it
#                                   links (HDF5, curl, ...; not glibc, not libtorch) into target/gpu-libs, for a GPU
#                                   machine that may lack them. Then carry target/release/trustlens and target/gpu-libs.
#   scripts/gpu_check.sh [ARGS]     on the GPU machine (PyTorch 2.11 installed, no Rust, no network): run
#                                   scripts/gpu_check.py with that machine's python3 and torch/lib; ARGS go to it
#                                   (--help lists them). Writes $OUT/gpu_check.json (or target/gpu-check/ without $OUT).
#
# GPU_CHECK_DRY_RUN=1 runs everything on the CPU with small shapes (checks the script on a machine without a GPU).
# The whole check stops itself before 8 minutes (GPU_CHECK_BUDGET_S, default 450 s, plus a hard timeout).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--bundle" ]; then
    cargo build --release
    rm -rf target/gpu-libs && mkdir -p target/gpu-libs
    ldd target/release/trustlens | awk '/=> \// {print $3}' | grep -v '/torch/lib/' \
        | grep -vE '/(libc|libm|libdl|librt|libpthread|libutil|libresolv|libnsl|libanl|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' \
        | while read -r lib; do cp -L "$lib" target/gpu-libs/; done
    du -sh target/release/trustlens target/gpu-libs
    echo "carry: target/release/trustlens target/gpu-libs   run: bash scripts/gpu_check.sh"
    exit 0
fi

# The Python that has torch: the project's venv here (dry run), plain python3 on the GPU machine.
PY=${GPU_CHECK_PYTHON:-}
if [ -z "$PY" ]; then
    if [ "${GPU_CHECK_DRY_RUN:-0}" = "1" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
"$PY" -c 'import torch' 2>/dev/null || { echo "gpu_check: $PY cannot import torch" >&2; exit 2; }
budget=${GPU_CHECK_BUDGET_S:-450}
export PYTHONUNBUFFERED=1
exec timeout -k 10 $((${budget%.*} + 20)) "$PY" scripts/gpu_check.py "$@"
