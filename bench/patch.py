#!/usr/bin/env python3
"""Benchmark: activation patching, trustlens vs nnsight (and trustlens' cached path vs its own full recompute).

The subset (same for every implementation): the built-in cases named in BENCH_PATCH_CASES (comma-separated ids;
default `tp-p1-01`) x {chat, tool} = 2 adversarial/benign pairs (prompts of 61-309 tokens); single-layer last-token patches at every block
0..29; both directions (forward = adversarial -> benign, reverse = benign -> adversarial): 2 x 30 x 2 = 120 patched
runs. (The subset is small because the references re-run whole prompts for every patch: 31 full forward passes per
batch; on a loaded 2-core VM that is minutes per case.) Readout:
the final norm's output at the last token; shift = cos(r_patched, r_source) - cos(r_target, r_source).

1. trustlens, cached path (`trustlens patch --layers 0,...,29` on an experiment over those cases): one clean pass per batch that keeps
   each block's keys and values, then only the last token from block l+1 up for each patch.
2. nnsight (PyPI nnsight, over transformers' eager LlamaForCausalLM loaded from the same GGUF, f32): the same
   prompts (token ids dumped by `trustlens capture --dump-prompts`), paired and batched exactly as trustlens does
   (pairs sorted by length, `--batch-pairs` pairs per batch, rows = adversarial then benign, left padded with a mask,
   mask-derived position ids). Per batch: one clean trace saving `model.layers[l].output[:, -1]` for every l and
   `model.norm.output[:, -1]`, then one trace per layer writing the partner rows' value into
   `model.layers[l].output[:, -1]` (both directions in the same batch) and saving the readout. One untimed warm-up
   trace of each kind first.
3. trustlens `--full-recompute` (whole prompts re-run per patch, the in-house reference), unless
   BENCH_PATCH_FULL=0; written to bench/results/patch_cache.json (the issue's >= 20x target). patch.json is written
   before this stage (with the figure already in patch_cache.json, if any) and again after it.

Times are the patching loops alone (model load and prompt rendering excluded for both: trustlens reports the time of
its patch loop in patching.json, nnsight's loop is timed here), same thread count (BENCH_THREADS, default all
cores), f32, CPU. Shifts are checked against each other (max abs diff). Writes bench/results/patch.json (trustlens
vs nnsight, with the cached-vs-full figure in its config) and bench/results/patch_cache.json.
"""
import json
import os
import subprocess
import time
import tomllib

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TRUSTLENS_BIN", os.path.join(ROOT, "target", "release", "trustlens"))
EXP = os.path.join(ROOT, "experiments", "channel-trust.toml")
WORK = os.path.join(ROOT, "bench", "work", "patch")
RESULTS = os.path.join(ROOT, "bench", "results")
CASE_IDS = [c.strip() for c in os.environ.get("BENCH_PATCH_CASES", "tp-p1-01").split(",") if c.strip()]
THREADS = int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1))
FULL = os.environ.get("BENCH_PATCH_FULL", "1") != "0"
LAYERS = list(range(int(os.environ.get("BENCH_PATCH_LAYERS", "30"))))
BATCH_PAIRS = 8
LOAD0 = LOAD1 = None


def subset_experiment():
    """An experiment over the chosen cases only: the built-in experiment's [model] and [cases] settings."""
    with open(EXP, "rb") as f:
        exp = tomllib.load(f)
    with open(os.path.join(ROOT, exp["cases"]["file"])) as f:
        lines = {json.loads(l)["id"]: l for l in f if l.strip() and not l.lstrip().startswith(("#", "//"))}
    missing = [c for c in CASE_IDS if c not in lines]
    if missing:
        raise SystemExit(f"BENCH_PATCH_CASES: no case {missing} in {exp['cases']['file']}")
    cases = os.path.join(WORK, "cases.jsonl")
    with open(cases, "w") as f:
        f.writelines(lines[c] if lines[c].endswith("\n") else lines[c] + "\n" for c in CASE_IDS)
    m, c = exp["model"], exp["cases"]
    path = os.path.join(WORK, "patch-bench.toml")
    with open(path, "w") as f:
        f.write(f"""[model]
path = {json.dumps(os.path.join(ROOT, m["path"]))}
dtype = "f32"
device = "cpu"

[cases]
file = {json.dumps(cases)}
channels = {json.dumps(c["channels"])}
conditions = ["adversarial", "benign"]
tool_rendering = {json.dumps(c.get("tool_rendering", "auto"))}

[capture]
layers = [0]                      # unused: --layers picks the patched blocks
positions = ["last"]
run = "patch-bench"
out_dir = {json.dumps(os.path.join(WORK, "activations"))}
""")
    return path, c["channels"]


def trustlens(exp, full):
    out = os.path.join(WORK, "full" if full else "cached")
    cmd = [BIN, "patch", exp, "--layers", ",".join(map(str, LAYERS)), "--quiet",
           "--threads", str(THREADS), "--n-boot", "100", "--batch-pairs", str(BATCH_PAIRS), "--device", "cpu",
           "--out", out]
    if full:
        cmd.append("--full-recompute")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "patching.json")) as f:
        doc = json.load(f)
    shifts = {(r["case_id"], r["channel"], r["layers"], r["direction"]): r["shift"] for r in doc["pairs"]}
    return doc["config"]["seconds"], wall, shifts


def pairs_from_dump(exp, channels):
    """The experiment's prompts as trustlens renders them, paired per case x channel like `trustlens patch`."""
    dump_path = os.path.join(WORK, "prompts.json")
    subprocess.run([BIN, "capture", exp, "--dump-prompts", dump_path], check=True, cwd=ROOT,
                   stderr=subprocess.DEVNULL)
    with open(dump_path) as f:
        dump = json.load(f)
    # capture's plan order: case x channel x condition (adversarial, benign).
    if len(dump["prompts"]) != len(CASE_IDS) * len(channels) * 2:
        raise SystemExit(f"dump has {len(dump['prompts'])} prompts, expected {CASE_IDS} x {channels} x 2")
    pairs = []
    for c, case_id in enumerate(CASE_IDS):
        for h, ch in enumerate(channels):
            i = (c * len(channels) + h) * 2
            pairs.append({"case_id": case_id, "channel": ch, "adv": dump["prompts"][i],
                          "ben": dump["prompts"][i + 1]})
    # trustlens: BTreeMap order (case_id, channel), then a stable sort by the longer prompt.
    pairs.sort(key=lambda p: (p["case_id"], p["channel"]))
    pairs.sort(key=lambda p: max(len(p["adv"]), len(p["ben"])))
    return pairs, dump["pad_id"]


def left_pad(rows, pad_id):
    t = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (t - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (t - len(r)) + [1] * len(r) for r in rows])
    return {"input_ids": ids, "attention_mask": mask}


def row_cos(a, b):
    a, b = a.double().numpy(), b.double().numpy()
    return (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1), 1e-30)


def nnsight_patch(model, enc, layers, k):
    """One batch: clean trace, then one patched trace per layer. Returns {(row, layer): shift}."""
    hs = []
    with torch.no_grad(), model.trace(enc):
        for l in layers:
            hs.append(model.model.layers[l].output[:, -1].save())
        r = model.model.norm.output[:, -1].save()
    partner = list(range(k, 2 * k)) + list(range(k))
    r_src = r[partner]
    cos_clean = row_cos(r, r_src)
    out = {}
    for li, l in enumerate(layers):
        src = hs[li][partner]
        with torch.no_grad(), model.trace(enc):
            model.model.layers[l].output[:, -1] = src
            rp = model.model.norm.output[:, -1].save()
        for i, s in enumerate(row_cos(rp, r_src) - cos_clean):
            out[(i, l)] = float(s)
    return out


def run_nnsight(pairs, pad_id):
    import nnsight
    import transformers
    from nnsight import TransformersModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_path = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    gdir, gname = os.path.split(model_path)
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    hf = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32,
                                              attn_implementation="eager").eval()
    model = TransformersModel(hf, tokenizer=tok)
    # Warm-up (untimed): one clean and one patched trace on the shortest pair.
    w = pairs[0]
    nnsight_patch(model, left_pad([w["adv"], w["ben"]], pad_id), LAYERS[:1], 1)
    shifts = {}
    t0 = time.perf_counter()
    for s in range(0, len(pairs), BATCH_PAIRS):
        chunk = pairs[s:s + BATCH_PAIRS]
        k = len(chunk)
        enc = left_pad([p["adv"] for p in chunk] + [p["ben"] for p in chunk], pad_id)
        for (i, l), v in nnsight_patch(model, enc, LAYERS, k).items():
            p = chunk[i % k]
            # Rows < k are adversarial targets receiving benign values: reverse.
            shifts[(p["case_id"], p["channel"], str(l), "reverse" if i < k else "forward")] = v
    secs = time.perf_counter() - t0
    impl = (f"nnsight {nnsight.__version__} over transformers {transformers.__version__} "
            "(LlamaForCausalLM from the same GGUF, eager attention, f32)")
    return secs, shifts, impl


def max_diff(a, b):
    if a.keys() != b.keys():
        raise SystemExit(f"the implementations patched different sets: {len(a)} vs {len(b)} results")
    return max(abs(a[key] - b[key]) for key in a)


def write(name, obj):
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, name)
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(path + ".tmp", path)
    print(json.dumps(obj, indent=2), flush=True)


def main():
    torch.set_num_threads(THREADS)
    os.makedirs(WORK, exist_ok=True)
    exp, channels = subset_experiment()
    pairs, pad_id = pairs_from_dump(exp, channels)
    subset = {
        "cases": CASE_IDS, "channels": channels,
        "pairs": len(pairs), "layer_sets": f"every block {LAYERS[0]}..{LAYERS[-1]}, single-layer",
        "directions": ["forward", "reverse"], "readout": "ln_final at the last token",
        "batch_pairs": BATCH_PAIRS, "prompt_tokens": sorted(len(p[k]) for p in pairs for k in ("adv", "ben")),
    }
    global LOAD0, LOAD1
    LOAD0 = round(os.getloadavg()[0], 2)
    cached_s, cached_wall, cached = trustlens(exp, False)
    LOAD1 = round(os.getloadavg()[0], 2)
    print(f"trustlens cached: {cached_s:.1f} s", flush=True)
    nn_s, nn, nn_impl = run_nnsight(pairs, pad_id)
    print(f"nnsight: {nn_s:.1f} s", flush=True)
    n = len(cached)
    common = {"threads": THREADS, "dtype": "f32", "device": "cpu", "patched_runs": n, **subset,
              "timing": "patching loop only (model load and prompt rendering excluded), one run each, on a VM "
                        "shared with other jobs: the same trustlens run has taken from 33 s to 85 s there, so "
                        "compare the ratios (both sides in one run) rather than the absolute times",
              "load_avg_1m_at_start": LOAD0, "load_avg_1m_before_nnsight": LOAD1,
              "cpus": os.cpu_count()}

    def patch_result(cache):
        return {
            "name": "patch",
            "unit": "patched runs/s",
            "trustlens": round(n / cached_s, 3),
            "reference": round(n / nn_s, 3),
            "ratio": round(nn_s / cached_s, 2),
            "config": {
                "reference_impl": nn_impl + ": one clean trace per batch, then one trace per patched layer "
                                            "(whole prompts re-run), both directions batched together",
                "trustlens_impl": "trustlens patch, cached last-token path (clean pass keeps keys/values; patched "
                                  "runs recompute only the last token from the patched block up)",
                "seconds_trustlens": round(cached_s, 2), "seconds_nnsight": round(nn_s, 2), **common,
                "cached_vs_full_recompute": None if cache is None else {
                    "ratio": cache["ratio"], "max_abs_shift_diff": cache["max_abs_shift_diff"],
                    "patched_runs": cache["config"].get("patched_runs"),
                    "measured": cache["config"].get("measured", "this run"),
                    "file": "bench/results/patch_cache.json",
                },
            },
            "max_abs_shift_diff": max_diff(cached, nn),
        }

    # Written now and again after the full-recompute stage (which is long), so a stopped run keeps this figure.
    cache_path = os.path.join(RESULTS, "patch_cache.json")
    previous = None
    if os.path.exists(cache_path):
        with open(cache_path) as f:
            previous = json.load(f)
    write("patch.json", patch_result(previous))
    if FULL:
        full_s, full_wall, full = trustlens(exp, True)
        print(f"trustlens full recompute: {full_s:.1f} s", flush=True)
        cache_result = {
            "name": "patch_cache",
            "unit": "patched runs/s",
            "trustlens": round(n / cached_s, 3),
            "reference": round(n / full_s, 3),
            "ratio": round(full_s / cached_s, 2),
            "config": {"reference_impl": "trustlens --full-recompute (whole prompts re-run per patch)",
                       "seconds_cached": round(cached_s, 2), "seconds_full": round(full_s, 2),
                       "wall_s_cached_process": round(cached_wall, 1), "wall_s_full_process": round(full_wall, 1),
                       "target_ratio": 20, **common},
            "max_abs_shift_diff": max_diff(cached, full),
            "max_abs_shift_diff_full_vs_nnsight": max_diff(full, nn),
        }
        cache_result["config"]["load_avg_1m_after_full"] = round(os.getloadavg()[0], 2)
        write("patch_cache.json", cache_result)
        write("patch.json", patch_result(cache_result))


if __name__ == "__main__":
    main()
