#!/usr/bin/env python3
"""Check a trustlens activation file with h5py (used by tests/capture_e2e.rs).

usage: check_h5.py FILE --rows N --layers 2,4 --positions last,payload_last --d-model 576 [--complete] [--dtype f16]
Prints one JSON line with what it read; exits 1 with a message on the first mismatch.
"""
import argparse
import json
import sys

import h5py
import numpy as np

ATTRS = ["format", "format_version", "model_path", "model_sha256", "dtype", "device", "chat_template_sha256",
         "hook_point", "trustlens_version", "experiment_config", "config_sha256", "cases_file", "cases_sha256",
         "tool_rendering", "store_dtype", "shard", "n_prompts_total", "complete", "d_model", "n_layers_model",
         "layers", "positions"]
META = ["prompt_index", "case_id", "family", "subtype", "channel", "condition", "n_tokens", "last_index"]


def fail(msg):
    print(f"check_h5: {msg}", file=sys.stderr)
    sys.exit(1)


def s(x):
    return x.decode() if isinstance(x, bytes) else str(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--layers", required=True)
    ap.add_argument("--positions", required=True)
    ap.add_argument("--d-model", type=int, required=True)
    ap.add_argument("--complete", action="store_true")
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    a = ap.parse_args()
    layers = [int(x) for x in a.layers.split(",")]
    positions = a.positions.split(",")
    with h5py.File(a.file, "r") as f:
        for k in ATTRS:
            if k not in f.attrs:
                fail(f"missing attribute {k}")
        if s(f.attrs["format"]) != "trustlens-activations":
            fail("format attribute")
        if list(int(x) for x in f.attrs["layers"]) != layers:
            fail(f"layers {list(f.attrs['layers'])} != {layers}")
        if [s(x) for x in f.attrs["positions"]] != positions:
            fail(f"positions {list(f.attrs['positions'])} != {positions}")
        if int(f.attrs["d_model"]) != a.d_model:
            fail("d_model")
        if len(s(f.attrs["model_sha256"])) != 64:
            fail("model_sha256 is not a SHA-256")
        if "[capture]" not in s(f.attrs["experiment_config"]):
            fail("experiment_config is not the TOML config")
        if s(f.attrs["store_dtype"]) != a.dtype:
            fail(f"store_dtype {s(f.attrs['store_dtype'])} != {a.dtype}")
        if a.complete and s(f.attrs["complete"]) != "true":
            fail("file is not complete")
        for k in META + [f"pos_{p}" for p in positions]:
            if f"meta/{k}" not in f:
                fail(f"missing meta/{k}")
            if f[f"meta/{k}"].shape != (a.rows,):
                fail(f"meta/{k} shape {f[f'meta/{k}'].shape} != ({a.rows},)")
        pi = f["meta/prompt_index"][:]
        if np.any(np.diff(pi.astype(np.int64)) <= 0):
            fail("rows are not sorted by prompt index")
        nt, li = f["meta/n_tokens"][:], f["meta/last_index"][:]
        if np.any(li != nt - 1):
            fail("last_index != n_tokens - 1")
        for p in positions:
            pos = f[f"meta/pos_{p}"][:]
            if np.any(pos > li):
                fail(f"pos_{p} beyond the last token")
        norms = {}
        for l in layers:
            for p in positions:
                name = f"acts/{l}/{p}"
                if name not in f:
                    fail(f"missing {name}")
                d = f[name]
                if d.shape != (a.rows, a.d_model):
                    fail(f"{name} shape {d.shape} != ({a.rows}, {a.d_model})")
                if d.dtype != (np.float16 if a.dtype == "f16" else np.float32):
                    fail(f"{name} dtype {d.dtype}")
                x = d[:]
                if not np.all(np.isfinite(x)):
                    fail(f"{name} has non-finite values")
                norms[name] = float(np.linalg.norm(x, axis=1).mean()) if a.rows else 0.0
        fams = sorted(set(s(x) for x in f["meta/family"][:]))
        chans = sorted(set(s(x) for x in f["meta/channel"][:]))
        conds = sorted(set(s(x) for x in f["meta/condition"][:]))
        print(json.dumps({"ok": True, "rows": a.rows, "families": fams, "channels": chans, "conditions": conds,
                          "case_ids": [s(x) for x in f["meta/case_id"][:]], "norms": norms}))


if __name__ == "__main__":
    main()
