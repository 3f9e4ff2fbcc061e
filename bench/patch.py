#!/usr/bin/env python3
"""Benchmark: activation patching with the cached last-token path vs the full-recompute path, both trustlens, same
pairs, same layer sets (every block, single-layer), both directions, one script. Checks the two give the same shifts
and writes bench/results/patch.json. (An nnsight reference is not part of this script yet.)

Config via env: BENCH_PATCH_CASES (default 6 cases, both channels), BENCH_THREADS.
"""
import json
import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "trustlens")
EXP = os.path.join(ROOT, "experiments", "channel-trust.toml")
CASES = int(os.environ.get("BENCH_PATCH_CASES", "6"))
THREADS = int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1))


def run(full):
    out = os.path.join(ROOT, "bench", "work", "patch-full" if full else "patch-cached")
    cmd = [BIN, "patch", EXP, "--layers", ",".join(str(i) for i in range(30)), "--max-cases", str(CASES),
           "--quiet", "--threads", str(THREADS), "--n-boot", "100", "--out", out]
    if full:
        cmd.append("--full-recompute")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    secs = time.perf_counter() - t0
    with open(os.path.join(out, "patching.json")) as f:
        return secs, json.load(f)


def main():
    cached_s, cached = run(False)
    full_s, full = run(True)
    key = lambda r: (r["case_id"], r["channel"], r["layers"], r["direction"])
    fm = {key(r): r["shift"] for r in full["pairs"]}
    diffs = [abs(r["shift"] - fm[key(r)]) for r in cached["pairs"]]
    n_patches = len(cached["pairs"])
    result = {
        "name": "patch",
        "unit": "patched runs/s",
        "trustlens": round(n_patches / cached_s, 3),
        "reference": round(n_patches / full_s, 3),
        "ratio": round(full_s / cached_s, 2),
        "config": {
            "reference_impl": "trustlens --full-recompute (whole prompts re-run per patch)",
            "cases": CASES, "channels": ["chat", "tool"], "layer_sets": "every block 0..29, single-layer",
            "directions": 2, "patched_runs": n_patches, "threads": THREADS, "dtype": "f32",
            "wall_s_cached": round(cached_s, 1), "wall_s_full": round(full_s, 1),
        },
        "max_abs_shift_diff": max(diffs),
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "patch.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
