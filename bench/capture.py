#!/usr/bin/env python3
"""Benchmark: `trustlens capture` throughput (prompts/s) vs Hugging Face transformers on the same prompts.

Same prompt token ids (trustlens renders the built-in cases through the embedded model's chat template and dumps the
ids and its length-bucketed batches with `capture --dump-prompts`; transformers runs exactly those batches, left
padded with an attention mask), same dtype (f32), same thread count, same batch size. transformers: eager attention,
`output_hidden_states=True`, `logits_to_keep=1`, last-token rows of the requested layers copied out as numpy.
  (a) all 30 layers: trustlens captures blocks.0..29.hook_resid_post;
  (b) layers up to half depth: trustlens captures blocks 3, 7, 11, 14 and stops after block 14 (early exit);
      transformers has no early exit and runs the whole model.
Throughput uses a fixed subset of the built-in set (every 8th case: 13 cases x chat/tool x adversarial/benign =
52 prompts; BENCH_CASE_STRIDE changes the stride). trustlens' time is its forward+store time (capture's own `forward_seconds`, model load excluded); the
reference's is the sum over the same batches after a one-batch warm-up. Also: peak RSS of the full built-in capture
(392 prompts, experiments/channel-trust.toml) against the f32 weights + 1 GiB. Writes bench/results/capture.json.
Set BENCH_CAPTURE_FULL=0 to skip the full capture.
"""
import json
import os
import shutil
import subprocess
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
BIN = os.path.join(ROOT, "target", "release", "trustlens")
THREADS = int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1))
BATCH = int(os.environ.get("BENCH_BATCH", 4))
EVERY = int(os.environ.get("BENCH_CASE_STRIDE", 8))
WORK = os.path.join(ROOT, "bench", "work", "capture")
CONFIGS = {"all_30_layers": list(range(30)), "half_depth": [3, 7, 11, 14]}


def experiment(cases, layers, out_dir, run):
    lay = ", ".join(str(x) for x in layers)
    text = f"""[model]
path = "{MODEL}"
dtype = "f32"
device = "cpu"

[cases]
file = "{cases}"
channels = ["chat", "tool"]
conditions = ["adversarial", "benign"]
tool_rendering = "hermes"

[capture]
layers = [{lay}]
positions = ["last"]
batch_size = {BATCH}
run = "{run}"
out_dir = "{out_dir}"
"""
    path = os.path.join(WORK, f"{run}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def trustlens_capture(exp, extra=()):
    summary = os.path.join(WORK, os.path.basename(exp) + ".summary.json")
    subprocess.run([BIN, "capture", exp, "--threads", str(THREADS), "--overwrite", "--quiet",
                    "--summary-json", summary, *extra], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    with open(summary) as f:
        return json.load(f)


def reference(model, dump, layers):
    prompts, batches, pad = dump["prompts"], dump["batches"], dump["pad_id"]

    def run_batch(b):
        seqs = [prompts[i] for i in b]
        t = max(len(s) for s in seqs)
        ids = torch.tensor([[pad] * (t - len(s)) + s for s in seqs])
        mask = torch.tensor([[0] * (t - len(s)) + [1] * len(s) for s in seqs])
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False,
                        logits_to_keep=1)
        # hidden_states[l + 1] is blocks.l.hook_resid_post; left padding puts every last token at -1.
        return [out.hidden_states[l + 1][:, -1].float().numpy().copy() for l in layers]

    run_batch(batches[0])
    t0 = time.perf_counter()
    for b in batches:
        run_batch(b)
    return time.perf_counter() - t0


def main():
    torch.set_num_threads(THREADS)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK, exist_ok=True)
    with open(os.path.join(ROOT, "experiments", "cases", "channel-trust.jsonl")) as f:
        lines = [l for l in f if l.strip() and not l.startswith("//")]
    cases = os.path.join(WORK, "cases.jsonl")
    with open(cases, "w") as f:
        f.writelines(lines[::EVERY])

    from transformers import AutoModelForCausalLM
    gdir, gname = os.path.split(MODEL)
    model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    results = {}
    for name, layers in CONFIGS.items():
        exp = experiment(cases, layers, os.path.join(WORK, "out"), name)
        dump_path = exp + ".prompts.json"
        subprocess.run([BIN, "capture", exp, "--dump-prompts", dump_path], check=True, cwd=ROOT,
                       stderr=subprocess.DEVNULL)
        with open(dump_path) as f:
            dump = json.load(f)
        tl = trustlens_capture(exp)
        ref_s = reference(model, dump, layers)
        n = len(dump["prompts"])
        results[name] = {
            "trustlens": round(tl["computed_rows"] / tl["forward_seconds"], 3),
            "reference": round(n / ref_s, 3),
            "layers": layers,
            "prompts": n,
            "tokens": sum(len(p) for p in dump["prompts"]),
            "batches": len(dump["batches"]),
        }
        results[name]["ratio"] = round(results[name]["trustlens"] / results[name]["reference"], 3)
        print(name, json.dumps(results[name]), flush=True)

    full = None
    if os.environ.get("BENCH_CAPTURE_FULL", "1") != "0":
        exp = os.path.join(ROOT, "experiments", "channel-trust.toml")
        tl = trustlens_capture(exp, ["--out-dir", os.path.join(WORK, "full"), "--device", "cpu"])
        full = {
            "prompts": tl["rows"],
            "wall_seconds": round(tl["total_seconds"], 1),
            "prompts_per_s": round(tl["computed_rows"] / tl["forward_seconds"], 3),
            "peak_rss_bytes": tl["peak_rss_bytes"],
            "weight_bytes_f32": tl["weight_bytes"],
            "rss_minus_weights_gib": round((tl["peak_rss_bytes"] - tl["weight_bytes"]) / 2**30, 3),
            "target": "peak RSS <= weights + 1 GiB",
            "meets_target": tl["peak_rss_bytes"] <= tl["weight_bytes"] + 2**30,
        }
        print("full", json.dumps(full), flush=True)

    a = results["all_30_layers"]
    result = {
        "name": "capture",
        "unit": "prompts/s",
        "trustlens": a["trustlens"],
        "reference": a["reference"],
        "ratio": a["ratio"],
        "config": {
            "model": "SmolLM2-135M-Instruct Q4_1 GGUF (dequantised to f32 by both)",
            "reference_impl": f"transformers {__import__('transformers').__version__}, eager, "
                              "output_hidden_states=True, logits_to_keep=1",
            "prompts": a["prompts"], "tokens": a["tokens"], "batch": BATCH, "batches": a["batches"],
            "dtype": "f32", "threads": THREADS, "positions": "last",
            "subset": f"every {EVERY}th built-in case x chat/tool x adversarial/benign",
        },
        "all_30_layers": {**a, "target_ratio": 1.0},
        "half_depth": {**results["half_depth"], "target_ratio": 1.6},
        "full_builtin_capture": full,
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "capture.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
