#!/usr/bin/env python3
"""Benchmark: forward-pass tokens/s of trustlens vs Hugging Face transformers on the embedded model.

Same prompts (16 prompts of about 256 tokens, token ids fixed here and passed to both), same dtype (f32), same thread
count, batch 1, all hidden states returned (transformers: eager attention, output_hidden_states=True; trustlens:
every blocks.{i}.hook_resid_post and the logits at every position). Best of 3 timed passes after a warm-up, for both.
Writes bench/results/forward.json.
"""
import json
import os
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BIN = os.path.join(ROOT, "target", "release", "trustlens")
THREADS = int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1))
N_PROMPTS, TOKENS, REPEATS = 16, 256, 3


def prompts(tok):
    """16 distinct ~256-token prompts built from the BIPIA email contexts (or a fallback text)."""
    src = os.path.join(ROOT, "..", "shared", "datasets", "bipia", "email", "test.jsonl")
    texts = []
    if os.path.exists(src):
        with open(src) as f:
            for line in f:
                row = json.loads(line)
                texts.append(str(row.get("context", "")) + " " + str(row.get("question", "")))
    words = " ".join(texts) if texts else " ".join(f"The quick brown fox {i} jumps over the lazy dog." for i in range(4000))
    ids = tok(words, add_special_tokens=False)["input_ids"]
    out = []
    for i in range(N_PROMPTS):
        chunk = ids[i * TOKENS:(i + 1) * TOKENS]
        if len(chunk) < TOKENS:
            chunk = (chunk + ids)[:TOKENS]
        out.append([1] + chunk[: TOKENS - 1])
    return out


def main():
    torch.set_num_threads(THREADS)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    gdir, gname = os.path.split(MODEL)
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    ps = prompts(tok)
    os.makedirs(os.path.join(ROOT, "bench", "work"), exist_ok=True)
    ids_path = os.path.join(ROOT, "bench", "work", "forward_prompts.json")
    with open(ids_path, "w") as f:
        json.dump(ps, f)
    n_tokens = sum(len(p) for p in ps)

    # trustlens first (its own process; the model loads there).
    res = subprocess.run([BIN, "model", "bench", MODEL, "--ids", ids_path, "--threads", str(THREADS),
                          "--repeats", str(REPEATS), "--dtype", "f32", "--device", "cpu"],
                         check=True, capture_output=True, text=True)
    tl = json.loads(res.stdout)

    model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    tensors = [torch.tensor([p]) for p in ps]

    def run_all():
        with torch.no_grad():
            for t in tensors:
                out = model(input_ids=t, output_hidden_states=True, use_cache=False)
                _ = out.logits[0, 0, 0].item()

    run_all()
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        run_all()
        best = min(best, time.perf_counter() - t0)
    ref_tps = n_tokens / best

    dequant_bytes = tl["weight_bytes_in_dtype"]
    result = {
        "name": "forward",
        "unit": "tokens/s",
        "trustlens": round(tl["tokens_per_s"], 1),
        "reference": round(ref_tps, 1),
        "ratio": round(tl["tokens_per_s"] / ref_tps, 3),
        "config": {
            "model": "SmolLM2-135M-Instruct Q4_1 GGUF (dequantised to f32 by both)",
            "reference_impl": f"transformers {__import__('transformers').__version__}, eager, output_hidden_states=True",
            "prompts": len(ps), "tokens_per_prompt": TOKENS, "batch": 1, "dtype": "f32", "threads": THREADS,
            "repeats": f"best of {REPEATS} after a warm-up",
        },
        "peak_rss_after_load_bytes": tl["peak_rss_after_load_bytes"],
        "dequantised_weight_bytes": dequant_bytes,
        "rss_over_weights": round(tl["peak_rss_after_load_bytes"] / dequant_bytes, 3),
        "rss_before_load_bytes": tl["rss_before_load_bytes"],
        "load_rss_over_weights": round((tl["peak_rss_after_load_bytes"] - tl["rss_before_load_bytes"]) / dequant_bytes, 3),
        "matmul_peak_gflops": round(tl["matmul_peak_flops_per_s"] / 1e9, 1),
        "forward_gflops": round(tl["achieved_flops_per_s"] / 1e9, 1),
        "fraction_of_matmul_peak": round(tl["fraction_of_matmul_peak"], 3),
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "forward.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
