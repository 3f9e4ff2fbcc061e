#!/usr/bin/env python3
"""Benchmark: activation patching. trustlens' cached last-token path vs its own full recompute on the full sweep, and
vs nnsight on a subset.

1. patch.json, the full sweep (the issue's >= 20x target): every built-in case (98; BENCH_PATCH_SWEEP_CASES=N keeps
   the first N of the file) x {chat, tool} x both directions (forward = adversarial -> benign, reverse = benign ->
   adversarial) x the demo's layer set (single-layer patches at every block 0..29 plus the four paper depths
   6+12+18+24 together: 31 sets). Readout = the final norm at the last token; shift = cos(r_patched, r_source) -
   cos(r_target, r_source). Two trustlens paths on the same inputs:
   - cached (`trustlens patch`): one clean pass per batch keeps each block's keys and values, then every patch
     recomputes only the last token from the patched block up;
   - full recompute (`trustlens patch --full-recompute`, the reference): whole prompts re-run for every patch, in
     the same batches.
   The cases are dealt round-robin into BENCH_PATCH_GROUPS groups (default 14 of 7 cases, so every group mixes the
   families and prompt lengths); each group is run by both paths back to back, in alternating order, so load on a
   shared machine falls on both alike. Seconds are the sums of the patch loops (model load and prompt rendering
   excluded: trustlens reports its loop time in patching.json). Every shift of the two paths is compared. The file
   is rewritten after each group (`complete: false` until the last), so a stopped run keeps what it measured and
   resumes from there.
2. patch_nnsight.json, a subset (BENCH_PATCH_NNSIGHT_CASES, default `tp-p1-01`; x {chat, tool} x 30 blocks x 2
   directions = 120 patched runs): the cached path vs nnsight (PyPI nnsight, over transformers' eager
   LlamaForCausalLM loaded from the same GGUF, f32) on the same prompts (token ids dumped by
   `trustlens capture --dump-prompts`), paired and batched exactly as trustlens does (pairs sorted by length,
   `--batch-pairs` pairs per batch, rows = adversarial then benign, left padded with a mask, mask-derived position
   ids). Per batch: one clean trace saving `model.layers[l].output[:, -1]` for every l and
   `model.norm.output[:, -1]`, then one trace per layer writing the partner rows' value into
   `model.layers[l].output[:, -1]` (both directions in the same batch) and saving the readout. One untimed warm-up
   trace of each kind first. (A subset, because nnsight re-runs whole prompts for every patch.)

Same thread count everywhere (BENCH_THREADS, default all cores), f32, CPU. BENCH_PATCH_FULL=0 skips the full
sweep, BENCH_PATCH_NNSIGHT=0 the nnsight subset. TRUSTLENS_BIN picks the binary (default target/release/trustlens).
On 2 CPU cores the full sweep takes about 6 hours (the full-recompute side: 32 whole passes over 392 prompts of up to
773 tokens); a stopped sweep resumes at its next group the next time it runs with the same plan
(BENCH_PATCH_RESTART=1 starts afresh).
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
RESULTS = os.environ.get("BENCH_RESULTS_DIR", os.path.join(ROOT, "bench", "results"))
NNSIGHT_CASES = [c.strip() for c in os.environ.get("BENCH_PATCH_NNSIGHT_CASES", "tp-p1-01").split(",") if c.strip()]
SWEEP_CASES = int(os.environ.get("BENCH_PATCH_SWEEP_CASES", "0"))  # 0 = all
GROUPS = int(os.environ.get("BENCH_PATCH_GROUPS", "14"))
THREADS = int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1))
FULL = os.environ.get("BENCH_PATCH_FULL", "1") != "0"
NNSIGHT = os.environ.get("BENCH_PATCH_NNSIGHT", "1") != "0"
LAYERS = list(range(int(os.environ.get("BENCH_PATCH_LAYERS", "30"))))
SETS = ["6+12+18+24"] if len(LAYERS) > 24 else []
BATCH_PAIRS = 8


def all_case_lines():
    """The built-in experiment and its case file's lines by id, in file order."""
    with open(EXP, "rb") as f:
        exp = tomllib.load(f)
    lines = {}
    with open(os.path.join(ROOT, exp["cases"]["file"])) as f:
        for line in f:
            if line.strip() and not line.lstrip().startswith(("#", "//")):
                lines[json.loads(line)["id"]] = line if line.endswith("\n") else line + "\n"
    return exp, lines


def subset_experiment(name, case_ids):
    """An experiment over the chosen cases only: the built-in experiment's [model] and [cases] settings."""
    exp, lines = all_case_lines()
    missing = [c for c in case_ids if c not in lines]
    if missing:
        raise SystemExit(f"no case {missing} in {exp['cases']['file']}")
    work = os.path.join(WORK, name)
    os.makedirs(work, exist_ok=True)
    cases = os.path.join(work, "cases.jsonl")
    with open(cases, "w") as f:
        f.writelines(lines[c] for c in case_ids)
    m, c = exp["model"], exp["cases"]
    path = os.path.join(work, "patch-bench.toml")
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
out_dir = {json.dumps(os.path.join(work, "activations"))}
""")
    return path, c["channels"]


def trustlens(exp, full, sets=()):
    """One `trustlens patch` run; returns (patch-loop seconds, process wall seconds, {key: shift})."""
    out = os.path.join(os.path.dirname(exp), "full" if full else "cached")
    cmd = [BIN, "patch", exp, "--layers", ",".join(map(str, LAYERS)), "--quiet",
           "--threads", str(THREADS), "--n-boot", "100", "--batch-pairs", str(BATCH_PAIRS), "--device", "cpu",
           "--out", out]
    for s in sets:
        cmd += ["--sets", s]
    if full:
        cmd.append("--full-recompute")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "patching.json")) as f:
        doc = json.load(f)
    shifts = {(r["case_id"], r["channel"], r["layers"], r["direction"]): r["shift"] for r in doc["pairs"]}
    return doc["config"]["seconds"], wall, shifts


def pairs_from_dump(exp, channels, case_ids):
    """The experiment's prompts as trustlens renders them, paired per case x channel like `trustlens patch`."""
    dump_path = os.path.join(os.path.dirname(exp), "prompts.json")
    subprocess.run([BIN, "capture", exp, "--dump-prompts", dump_path], check=True, cwd=ROOT,
                   stderr=subprocess.DEVNULL)
    with open(dump_path) as f:
        dump = json.load(f)
    # capture's plan order: case x channel x condition (adversarial, benign).
    if len(dump["prompts"]) != len(case_ids) * len(channels) * 2:
        raise SystemExit(f"dump has {len(dump['prompts'])} prompts, expected {case_ids} x {channels} x 2")
    pairs = []
    for c, case_id in enumerate(case_ids):
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


def load():
    return round(os.getloadavg()[0], 2)


COMMON = {"threads": THREADS, "dtype": "f32", "device": "cpu", "cpus": os.cpu_count(),
          "directions": ["forward", "reverse"], "readout": "ln_final at the last token", "batch_pairs": BATCH_PAIRS}


def nnsight_subset():
    exp, channels = subset_experiment("nnsight", NNSIGHT_CASES)
    pairs, pad_id = pairs_from_dump(exp, channels, NNSIGHT_CASES)
    load0 = load()
    cached_s, _, cached = trustlens(exp, False)
    load1 = load()
    print(f"nnsight subset, trustlens cached: {cached_s:.1f} s", flush=True)
    nn_s, nn, nn_impl = run_nnsight(pairs, pad_id)
    print(f"nnsight subset, nnsight: {nn_s:.1f} s", flush=True)
    n = len(cached)
    return {
        "name": "patch_nnsight",
        "unit": "patched runs/s",
        "trustlens": round(n / cached_s, 3),
        "reference": round(n / nn_s, 3),
        "ratio": round(nn_s / cached_s, 2),
        "config": {
            "reference_impl": nn_impl + ": one clean trace per batch, then one trace per patched layer "
                                        "(whole prompts re-run), both directions batched together",
            "trustlens_impl": "trustlens patch, cached last-token path (clean pass keeps keys/values; patched "
                              "runs recompute only the last token from the patched block up)",
            "seconds_trustlens": round(cached_s, 2), "seconds_nnsight": round(nn_s, 2), **COMMON,
            "patched_runs": n, "cases": NNSIGHT_CASES, "channels": channels, "pairs": len(pairs),
            "layer_sets": f"every block {LAYERS[0]}..{LAYERS[-1]}, single-layer",
            "prompt_tokens": sorted(len(p[k]) for p in pairs for k in ("adv", "ben")),
            "timing": "patching loops only (model load and prompt rendering excluded), one run each",
            "load_avg_1m_at_start": load0, "load_avg_1m_before_nnsight": load1, "load_avg_1m_after": load(),
        },
        "max_abs_shift_diff": max_diff(cached, nn),
    }


def git_commit():
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return r.stdout.strip() or None


def full_sweep(nnsight_result):
    _, lines = all_case_lines()
    ids = list(lines)
    if SWEEP_CASES:
        ids = ids[:SWEEP_CASES]
    groups = [ids[g::GROUPS] for g in range(min(GROUPS, len(ids)))]
    # What makes two runs' groups comparable; a stopped run with the same plan is resumed at its next group.
    plan = {"cases_total": len(ids), "groups_total": len(groups), "layers": [LAYERS[0], LAYERS[-1]], "sets": SETS,
            "batch_pairs": BATCH_PAIRS, "threads": THREADS}
    per_group, diff = [], 0.0
    path = os.path.join(RESULTS, "patch.json")
    if os.path.exists(path) and os.environ.get("BENCH_PATCH_RESTART", "0") == "0":
        with open(path) as f:
            prev = json.load(f)
        if prev.get("complete") is False and prev.get("config", {}).get("plan") == plan:
            per_group, diff = prev["config"]["groups"], prev["max_abs_shift_diff"]
            print(f"resuming the stopped sweep in {path} at group {len(per_group) + 1}/{len(groups)} "
                  "(BENCH_PATCH_RESTART=1 starts afresh)", flush=True)
    for g in range(len(per_group), len(groups)):
        case_ids = groups[g]
        exp = subset_experiment(f"sweep-{g:02}", case_ids)[0]
        l0 = load()
        # Alternate which path goes first, so drift in the machine's load falls on both.
        order = (False, True) if g % 2 == 0 else (True, False)
        got = {full: trustlens(exp, full, SETS) for full in order}
        (cs, _, cached), (fs, _, full) = got[False], got[True]
        group_diff = max_diff(cached, full)
        diff = max(diff, group_diff)
        per_group.append({"group": g, "cases": len(case_ids), "case_ids": case_ids, "patched_runs": len(cached),
                          "seconds_cached": round(cs, 2), "seconds_full": round(fs, 2), "ratio": round(fs / cs, 2),
                          "max_abs_shift_diff": group_diff, "load_avg_1m_before": l0, "load_avg_1m_after": load(),
                          "commit": git_commit(),
                          "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        cached_s = sum(x["seconds_cached"] for x in per_group)
        full_s = sum(x["seconds_full"] for x in per_group)
        n = sum(x["patched_runs"] for x in per_group)
        print(f"group {g + 1}/{len(groups)}: {len(case_ids)} cases, cached {cs:.1f} s, full {fs:.1f} s "
              f"(x{fs / cs:.1f}); running total x{full_s / cached_s:.2f}", flush=True)
        write("patch.json", {
            "name": "patch",
            "unit": "patched runs/s",
            "trustlens": round(n / cached_s, 3),
            "reference": round(n / full_s, 3),
            "ratio": round(full_s / cached_s, 2),
            "complete": len(per_group) == len(groups),
            "config": {
                "trustlens_impl": "trustlens patch, cached last-token path (clean pass keeps keys/values; patched "
                                  "runs recompute only the last token from the patched block up)",
                "reference_impl": "trustlens patch --full-recompute (whole prompts re-run for every patch, "
                                  "same batches)",
                "target_ratio": 20,
                "plan": plan,
                "cases": sum(x["cases"] for x in per_group), "cases_total": len(ids),
                "channels": ["chat", "tool"],
                "layer_sets": f"every block {LAYERS[0]}..{LAYERS[-1]} single-layer" +
                              "".join(f" + {s} together" for s in SETS),
                "patched_runs": n, **COMMON,
                "seconds_cached": round(cached_s, 2), "seconds_full": round(full_s, 2),
                "groups": per_group,
                "timing": "patching loops only (model load and prompt rendering excluded); the cases dealt "
                          f"round-robin into {len(groups)} groups, each group run by both paths back to back in "
                          "alternating order (a group's two timings always come from the same minutes); seconds "
                          "are sums over groups. A stopped run resumes at its next group, so groups may come "
                          "from different sittings: see each group's `finished` and `commit`",
                "nnsight_subset": None if nnsight_result is None else {
                    "ratio": nnsight_result["ratio"], "trustlens": nnsight_result["trustlens"],
                    "reference": nnsight_result["reference"], "cases": nnsight_result["config"]["cases"],
                    "patched_runs": nnsight_result["config"]["patched_runs"],
                    "max_abs_shift_diff": nnsight_result["max_abs_shift_diff"],
                    "file": "bench/results/patch_nnsight.json"},
            },
            "max_abs_shift_diff": diff,
        })


def main():
    torch.set_num_threads(THREADS)
    os.makedirs(WORK, exist_ok=True)
    nn = None
    if NNSIGHT:
        nn = nnsight_subset()
        write("patch_nnsight.json", nn)
    elif os.path.exists(os.path.join(RESULTS, "patch_nnsight.json")):
        with open(os.path.join(RESULTS, "patch_nnsight.json")) as f:
            nn = json.load(f)
    if FULL:
        full_sweep(nn)


if __name__ == "__main__":
    main()
