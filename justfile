# trustlens tasks. `just --list` shows them. Every recipe runs set-up first; set-up is idempotent and takes seconds
# once everything is installed.
set shell := ["bash", "-euo", "pipefail", "-c"]

model := "models/SmolLM2-135M-Instruct.Q4_1.gguf"
bin := "target/release/trustlens"

# List recipes.
default:
    @just --list

# Install apt packages, the Python venv (torch 2.11 + references), the embedded model, and build trustlens.
setup:
    bash scripts/setup.sh

# The main job: the demo sweep on the embedded model (capture -> probes -> patching -> figures, cached per stage).
demo: setup
    {{bin}} sweep experiments/channel-trust.toml
    @echo "figures: figures/channel-trust/ (summary.png is the one-page overview; manifest.json lists every file)"

# Fetch Qwen2.5-Coder-1.5B-Instruct (GGUF, 1.1 GB, native tool template) for experiments/qwen2.5-coder-1.5b.toml.
qwen-coder: setup
    bash scripts/fetch_qwen_coder.sh

# Reference fixtures for the parity tests, computed by transformers (remade only when their scripts change).
fixtures: setup
    #!/usr/bin/env bash
    set -euo pipefail
    stamp=tests/fixtures/generated/.stamp
    want=$(cat scripts/make_fixtures.py scripts/fixtures_prompt.py scripts/requirements.txt scripts/model.sha256 2>/dev/null | sha256sum | cut -c1-16)
    if [ "$(cat $stamp 2>/dev/null)" != "$want" ]; then
        mkdir -p tests/fixtures/generated
        .venv/bin/python scripts/make_fixtures.py tests/fixtures/generated --smollm {{model}}
        .venv/bin/python scripts/fixtures_prompt.py tests/fixtures/generated
        echo "$want" > $stamp
    fi

# The whole test suite.
test: setup fixtures
    cargo test --release --no-fail-fast

# Benchmarks against the references, results in bench/results/*.json (patching's full sweep: ~6 h on 2 cores, resumable).
bench: setup
    .venv/bin/python bench/forward.py
    .venv/bin/python bench/capture.py
    .venv/bin/python bench/probe.py
    .venv/bin/python bench/patch.py

# The patching benchmark alone (resumes a stopped full sweep; BENCH_PATCH_RESTART=1 starts afresh).
bench-patch: setup
    .venv/bin/python bench/patch.py

# Formatting and lints, as CI expects them.
lint:
    cargo fmt --all -- --check
    cargo clippy --release --all-targets -- -D warnings

# The prepared GPU check (README "Running on GPUs"): CUDA visible, CPU vs CUDA parity, split runs, 8B-shape bf16
# throughput beside transformers; one JSON in $OUT (or target/gpu-check/). Needs no Rust: on the GPU machine run
# `bash scripts/gpu_check.sh` with target/release/trustlens and target/gpu-libs from `just gpu-bundle`.
gpu-check:
    bash scripts/gpu_check.sh

# The GPU check's dry run on the CPU with small shapes (checks the script here).
gpu-check-dry: setup
    GPU_CHECK_DRY_RUN=1 bash scripts/gpu_check.sh

# Build the binary and collect the system libraries it links into target/gpu-libs, for the GPU machine.
gpu-bundle: setup
    bash scripts/gpu_check.sh --bundle
