#!/usr/bin/env python3
"""Probe sweep: trustlens vs scikit-learn, timing and parity.

bench (default): the full per-layer grouped-CV logistic probe sweep of `trustlens probe` (every layer and position of
the run; train sets chat, tool, pooled; 5 outer folds; fixed C = 1) against scikit-learn doing the same fits on the
same folds with the same C (StandardScaler fitted on the training fold + LogisticRegression(C, solver="lbfgs"), then
decision values for every held-out row) in this one script. The folds come from trustlens's probes.json, so both
fit exactly the same row sets. Input: activations/channel-trust/activations.h5 when a complete capture exists,
otherwise a synthetic file of the same shape (392 rows = 98 cases x 2 channels x 2 conditions, 4 layers x 3
positions, d_model 576) written here in the capture layout. Reports wall time of the sweep (trustlens: its own
measurement of the sweep, reading the file excluded, like here; also the whole process), the parity (per-cell
accuracy difference in percentage points and per-fit coefficient cosine), and writes bench/results/probe.json.

parity --probes P --npy-dir D [--out O]: recompute the logistic fits recorded in probes.json (run with
--save-weights) with scikit-learn on matrices X_{layer}_{position}.npy and rows.json ({"channel": [...],
"label": [...]}) in D, and write per-cell accuracies and per-fit cosines as JSON (tests/probe_parity.rs uses it).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "trustlens")
THREADS = int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1))


def sklearn_fits(X, channels, labels, report, tol=1e-4, max_iter=1000):
    """Refit every (layer, position, train set, fold) of `report` with scikit-learn.

    X: {(layer, position): [n_rows, d] float32}; channels, labels: [n_rows]. Returns (results, seconds) where
    results[(layer, pos, train, fold)] = (test_rows, decision [n_test], coef [d], intercept).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    channels = np.asarray(channels)
    labels = np.asarray(labels, dtype=bool)
    n = len(labels)
    chans = report["channels"]
    train_sets = {c: [c] for c in chans}
    if "pooled" in report["train_sets"]:
        train_sets["pooled"] = list(chans)
    c_of = {}
    for cell in report["cells"]:
        if cell["method"] != "logistic":
            continue
        for f in cell["folds"]:
            c_of[(cell["layer"], cell["position"], cell["train"], f["fold"])] = f["c"]
    folds = report["folds"]
    out = {}
    t0 = time.perf_counter()
    for (layer, pos), x in X.items():
        for ts, chs in train_sets.items():
            in_ts = np.isin(channels, chs)
            for f in folds:
                test = np.asarray(f["test_rows"], dtype=np.int64)
                is_test = np.zeros(n, dtype=bool)
                is_test[test] = True
                train = np.nonzero(~is_test & in_ts)[0]
                c = c_of[(layer, pos, ts, f["fold"])]
                sc = StandardScaler().fit(x[train])
                clf = LogisticRegression(C=c, solver="lbfgs", tol=tol, max_iter=max_iter)
                clf.fit(sc.transform(x[train]), labels[train])
                dec = clf.decision_function(sc.transform(x[test]))
                out[(layer, pos, ts, f["fold"])] = (test, dec, clf.coef_[0], clf.intercept_[0])
    return out, time.perf_counter() - t0


def compare(X, channels, labels, report, fits):
    """Per in-channel/transfer cell: pooled out-of-fold accuracy of both; per fit: coefficient cosine."""
    channels = np.asarray(channels)
    labels = np.asarray(labels, dtype=bool)
    weights = {(w["layer"], w["position"], w["train"], w["fold"]): np.asarray(w["weights"]) for w in report["weights"]}
    cells = []
    for cell in report["cells"]:
        if cell["method"] != "logistic":
            continue
        pred, ys = [], []
        for f in report["folds"]:
            test, dec, _, _ = fits[(cell["layer"], cell["position"], cell["train"], f["fold"])]
            m = channels[test] == cell["test"]
            pred.append(dec[m] > 0)
            ys.append(labels[test][m])
        acc = float(np.mean(np.concatenate(pred) == np.concatenate(ys)))
        cells.append({"layer": cell["layer"], "position": cell["position"], "train": cell["train"],
                      "test": cell["test"], "accuracy_sklearn": acc, "accuracy_trustlens": cell["accuracy"]["value"],
                      "diff_pp": 100.0 * (cell["accuracy"]["value"] - acc)})
    cos = []
    for key, (_, _, coef, _) in fits.items():
        w = weights.get(key)
        if w is None:
            continue
        c = float(np.dot(w, coef) / (np.linalg.norm(w) * np.linalg.norm(coef)))
        cos.append({"layer": key[0], "position": key[1], "train": key[2], "fold": key[3], "cosine": c})
    return {
        "cells": cells,
        "fits": cos,
        "max_abs_accuracy_diff_pp": max(abs(c["diff_pp"]) for c in cells),
        "min_cosine": min(c["cosine"] for c in cos) if cos else None,
        "n_fits_compared": len(cos),
    }


def parity_main(args):
    with open(args.probes) as f:
        report = json.load(f)
    with open(os.path.join(args.npy_dir, "rows.json")) as f:
        rows = json.load(f)
    X = {}
    for layer in report["layers"]:
        for pos in report["positions"]:
            X[(layer, pos)] = np.load(os.path.join(args.npy_dir, f"X_{layer}_{pos}.npy"))
    fits, secs = sklearn_fits(X, rows["channel"], rows["label"], report, tol=1e-8, max_iter=100000)
    res = compare(X, rows["channel"], rows["label"], report, fits)
    res["sklearn_seconds"] = secs
    text = json.dumps(res, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)


def read_h5(path):
    import h5py
    with h5py.File(path, "r") as f:
        layers = [int(v) for v in f.attrs["layers"]]
        positions = [p.decode() if isinstance(p, bytes) else str(p) for p in f.attrs["positions"]]
        X = {(l, p): np.asarray(f[f"acts/{l}/{p}"], dtype=np.float32) for l in layers for p in positions}
        dec = lambda a: [v.decode() if isinstance(v, bytes) else str(v) for v in a]  # noqa: E731
        channels = dec(f["meta/channel"][()])
        labels = [c == "adversarial" for c in dec(f["meta/condition"][()])]
        complete = str(f.attrs.get("complete", "true"))
    return X, channels, labels, complete


def write_synthetic_h5(path, seed=0):
    """98 cases x {chat, tool} x {adversarial, benign}, layers 6/12/18/24, positions last/payload_last/user_end,
    d_model 576, in the capture layout; a weak channel-specific linear signal plus case offsets."""
    import h5py
    rng = np.random.default_rng(seed)
    d, n_cases = 576, 98
    layers, positions = [6, 12, 18, 24], ["last", "payload_last", "user_end"]
    case_id, family, channel, condition = [], [], [], []
    for c in range(n_cases):
        for ch in ["chat", "tool"]:
            for cond in ["adversarial", "benign"]:
                case_id.append(f"case-{c:03d}")
                family.append(["TP", "IPI", "CTS"][c % 3])
                channel.append(ch)
                condition.append(cond)
    n = len(case_id)
    lab = np.array([c == "adversarial" for c in condition], dtype=np.float32) * 2 - 1
    chi = np.array([ch == "tool" for ch in channel], dtype=np.int64)
    offsets = rng.normal(size=(n_cases, d)).astype(np.float32)
    dirs = rng.normal(size=(2, d)).astype(np.float32) / np.sqrt(d)
    case_idx = np.repeat(np.arange(n_cases), 4)
    s = h5py.string_dtype("utf-8")
    with h5py.File(path, "w") as f:
        attrs = {"format": "trustlens-activations", "model_path": "synthetic", "model_sha256": "0" * 64,
                 "dtype": "f32", "device": "cpu", "chat_template_sha256": "0" * 64, "hook_point": "hook_resid_post",
                 "trustlens_version": "bench", "experiment_config": "", "config_sha256": "0" * 64,
                 "cases_file": "synthetic", "cases_sha256": "0" * 64, "tool_rendering": "hermes",
                 "store_dtype": "f32", "shard": "all", "complete": "true"}
        for k, v in attrs.items():
            f.attrs.create(k, v, dtype=s)
        for k, v in {"format_version": 1, "n_prompts_total": n, "d_model": d, "n_layers_model": 30}.items():
            f.attrs.create(k, np.uint64(v))
        f.attrs.create("layers", np.array(layers, dtype=np.uint32))
        f.attrs.create("positions", np.array(positions, dtype=object), dtype=s)
        for name, vals in [("case_id", case_id), ("family", family), ("subtype", [""] * n), ("channel", channel),
                           ("condition", condition)]:
            f.create_dataset(f"meta/{name}", data=np.array(vals, dtype=object), dtype=s)
        f.create_dataset("meta/prompt_index", data=np.arange(n, dtype=np.uint64))
        for name in ["n_tokens", "last_index"] + [f"pos_{p}" for p in positions]:
            f.create_dataset(f"meta/{name}", data=np.full(n, 100, dtype=np.uint32))
        for li, l in enumerate(layers):
            for p in positions:
                x = rng.normal(size=(n, d)).astype(np.float32) + offsets[case_idx]
                x += (0.5 + li) * lab[:, None] * dirs[chi]
                f.create_dataset(f"acts/{l}/{p}", data=x)


def run_trustlens(h5, out, threads, extra):
    cmd = [BIN, "probe", "--run", h5, "--out", out, "--threads", str(threads), "--quiet"] + extra
    t0 = time.perf_counter()
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    # "probes: ... cells in 1.23 s -> out"
    line = [l for l in res.stderr.splitlines() if l.startswith("probes:")][-1]
    sweep = float(line.split(" in ")[1].split(" s")[0])
    return sweep, wall


def bench_main(args):
    real = os.path.join(ROOT, "activations", "channel-trust", "activations.h5")
    work = os.path.join(ROOT, "bench", "work")
    os.makedirs(work, exist_ok=True)
    source = "synthetic"
    if os.path.exists(real) and not args.synthetic:
        X, channels, labels, complete = read_h5(real)
        if complete == "true":
            h5, source = real, "activations/channel-trust/activations.h5 (embedded model)"
    if source == "synthetic":
        h5 = os.path.join(work, "probe_synthetic.h5")
        write_synthetic_h5(h5)
        X, channels, labels, _ = read_h5(h5)
    out = os.path.join(work, "probe")
    flags = ["--c", "1", "--methods", "logistic", "--bootstrap", "0", "--permutations", "0", "--folds", "5",
             "--seed", "0", "--save-weights"]
    REPEATS = 3
    tl = min(run_trustlens(h5, out, THREADS, flags) for _ in range(REPEATS))
    tl1 = min(run_trustlens(h5, out + "_1t", 1, flags) for _ in range(REPEATS))
    with open(os.path.join(out, "probes.json")) as f:
        report = json.load(f)
    sk_best, fits = float("inf"), None
    for _ in range(REPEATS):
        fits, secs = sklearn_fits(X, channels, labels, report)
        sk_best = min(sk_best, secs)
    parity = compare(X, channels, labels, report, fits)
    # Exactness: the same fits with scikit-learn converged tightly (tol 1e-8), not timed.
    tight_fits, _ = sklearn_fits(X, channels, labels, report, tol=1e-8, max_iter=100000)
    tight = compare(X, channels, labels, report, tight_fits)
    # The full default sweep (inner-CV C grid, logistic + diffmeans + rbf, 1000 bootstraps, 100 permutations).
    full = run_trustlens(h5, os.path.join(work, "probe_full"), THREADS, ["--seed", "0"])
    n_fits = len(fits)
    result = {
        "name": "probe",
        "unit": "s (wall, full per-layer grouped-CV logistic sweep)",
        "trustlens": round(tl[0], 4),
        "reference": round(sk_best, 4),
        "ratio": round(sk_best / tl[0], 2),
        "config": {
            "input": source,
            "rows": len(labels),
            "d_model": int(next(iter(X.values())).shape[1]),
            "layers_x_positions": len(X),
            "train_sets": report["train_sets"],
            "outer_folds": 5,
            "fits": n_fits,
            "C": 1.0,
            "reference_impl": "scikit-learn StandardScaler + LogisticRegression(C, solver='lbfgs') defaults "
                              "(tol 1e-4, max_iter 1000), same folds (from probes.json), decision_function on held-out "
                              "rows; sequential in one process",
            "trustlens_impl": "exact dual Newton (Gram matrix, Cholesky) per fit, rayon over layers x train sets x "
                              "folds",
            "threads": THREADS,
            "repeats": f"best of {REPEATS}",
            "timing": "sweep only on both sides (reading the HDF5 excluded)",
        },
        "trustlens_1_thread": round(tl1[0], 4),
        "ratio_1_thread": round(sk_best / tl1[0], 2),
        "trustlens_process_wall": round(tl[1], 4),
        "parity": {
            "vs_timed_sklearn_default_tol": {
                "max_abs_accuracy_diff_pp": round(parity["max_abs_accuracy_diff_pp"], 3),
                "min_coef_cosine": round(parity["min_cosine"], 6),
            },
            "vs_sklearn_tol_1e-8": {
                "max_abs_accuracy_diff_pp": round(tight["max_abs_accuracy_diff_pp"], 3),
                "min_coef_cosine": round(tight["min_cosine"], 6),
            },
            "in_channel_max_abs_accuracy_diff_pp": round(max(abs(c["diff_pp"]) for c in tight["cells"]
                                                             if c["train"] == c["test"]), 3),
            "fits_compared": parity["n_fits_compared"],
            "cells_compared": len(parity["cells"]),
        },
        "full_default_sweep_seconds": round(full[0], 3),
    }
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "probe.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode")
    p = sub.add_parser("parity")
    p.add_argument("--probes", required=True)
    p.add_argument("--npy-dir", required=True)
    p.add_argument("--out")
    b = sub.add_parser("bench")
    b.add_argument("--synthetic", action="store_true", help="use the synthetic file even if a capture exists")
    args = ap.parse_args()
    if args.mode == "parity":
        parity_main(args)
    else:
        if args.mode is None:
            args.synthetic = False
        bench_main(args)


if __name__ == "__main__":
    sys.exit(main())
