#!/usr/bin/env python3
"""The prepared GPU check of trustlens (run through scripts/gpu_check.sh or `just gpu-check`).

Runs on a machine with one NVIDIA GPU and PyTorch 2.11 installed, using a trustlens binary built elsewhere (no Rust
toolchain, no network needed) and that machine's torch/lib. Writes ONE JSON file (--out), rewritten atomically after
every step so that a run killed at its time limit still leaves what it measured:

1. cuda_visible: torch sees the GPU, and trustlens runs a forward pass on it (its CUDA backend loads from torch/lib).
2. parity: a tiny random Llama (f32) on CPU vs CUDA (SDPA and eager attention): max |diff| of every layer's residual
   stream at every position and of the logits; every layer must be <= 1e-4. Also trustlens on CUDA vs transformers
   on CUDA on the same weights (when transformers is importable).
3. split: the same model split over two "devices" (cuda:0 named twice; cuda:0 + cpu) vs the single-device run,
   forward (every layer, every position), batched last-token capture and patching.
4. throughput: a randomly initialised model of Llama-3.1-8B shapes in bf16: prompts/s and tokens/s of capture and
   patching in trustlens (`model bench --random`), beside transformers (random init, SDPA, same prompts, batches and
   dtype) or, where transformers is not importable, a plain PyTorch reference forward pass (said so in the JSON).

GPU_CHECK_DRY_RUN=1 (or --dry-run) runs the same steps on the CPU with small shapes, to check the script itself on a
machine without a GPU: "cuda:0" becomes "cpu" and the 8B shapes become a small stand-in.
"""
import argparse
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time

T0 = time.time()


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Check:
    def __init__(self, args):
        self.args = args
        self.dry = args.dry_run
        self.dev = "cpu" if self.dry else "cuda:0"
        self.out = args.out
        self.res = {
            "check": "trustlens gpu-check",
            "started": now(),
            "dry_run": self.dry,
            "host": platform.node(),
            "budget_s": args.budget_s,
            "passed": {},
            "notes": [],
        }
        import torch

        self.torch = torch
        lib = os.path.join(os.path.dirname(torch.__file__), "lib")
        self.env = dict(os.environ)
        self.env["LD_LIBRARY_PATH"] = ":".join([lib] + ([self.env["LD_LIBRARY_PATH"]] if self.env.get("LD_LIBRARY_PATH") else []))
        self.env["TRUSTLENS_LIBTORCH_LIB"] = lib
        self.tmp = tempfile.mkdtemp(prefix="trustlens-gpu-check-")
        # System libraries the binary needs that this machine lacks: link only those (and what they need in turn)
        # from the carried copies, so the machine's own libraries are used wherever it has them.
        libs = os.path.abspath(args.libs) if args.libs else None
        if libs and os.path.isdir(libs) and self.missing_libs():
            picked = os.path.join(self.tmp, "libs")
            os.makedirs(picked)
            self.env["LD_LIBRARY_PATH"] += ":" + picked
            used = []
            for _ in range(10):
                missing = [m for m in self.missing_libs() if os.path.exists(os.path.join(libs, m))]
                if not missing:
                    break
                for m in missing:
                    if not os.path.exists(os.path.join(picked, m)):
                        os.symlink(os.path.join(libs, m), os.path.join(picked, m))
                        used.append(m)
            self.res["notes"].append(f"linked carried system libraries from {args.libs}: {used}")

    def missing_libs(self):
        try:
            o = subprocess.run(["ldd", self.args.bin], capture_output=True, text=True, timeout=30, env=self.env).stdout
            return [l.split()[0] for l in o.splitlines() if "not found" in l]
        except Exception:
            return []

    def left(self):
        return self.args.budget_s - (time.time() - T0)

    def save(self):
        self.res["seconds"] = round(time.time() - T0, 1)
        d = os.path.dirname(os.path.abspath(self.out))
        os.makedirs(d, exist_ok=True)
        tmp = self.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.res, f, indent=1, default=str)
        os.replace(tmp, self.out)

    def tl(self, *argv, timeout=None):
        """Run trustlens; return its JSON stdout. Raises RuntimeError with the stderr tail on failure."""
        cmd = [self.args.bin, *map(str, argv)]
        t = max(5.0, min(timeout or 1e9, self.left() - 5))
        t1 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=t)
        if p.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd[1:])}` exited {p.returncode}: {p.stderr.strip()[-1500:]}")
        out = json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}
        out["_wall_s"] = round(time.time() - t1, 2)
        return out

    def step(self, name, fn, min_left=20):
        if self.left() < min_left:
            self.res[name] = {"skipped": f"out of time ({self.left():.0f} s left of {self.args.budget_s})"}
            self.save()
            return
        t1 = time.time()
        try:
            self.res[name] = fn()
        except Exception as e:  # keep going: later steps may still work
            self.res[name] = {"error": f"{type(e).__name__}: {e}"}
        if isinstance(self.res[name], dict):
            self.res[name]["step_s"] = round(time.time() - t1, 1)
        self.save()
        print(f"[{time.time() - T0:6.1f}s] {name}: {summary(self.res[name])}", flush=True)


def summary(r):
    if "error" in r:
        return "ERROR " + r["error"][:300]
    if "skipped" in r:
        return "skipped: " + r["skipped"]
    return "ok=" + str(r.get("ok"))


# ---------------------------------------------------------------------------------------------------------------
# Models and prompts


def write_random_llama(path, cfg, seed, dtype):
    """A Llama checkpoint with random weights (config.json + model.safetensors), made with torch alone."""
    import torch
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    d, ffn, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    h, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", d // h)

    def w(*shape, scale=0.02):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    def norm():
        return (1.0 + 0.1 * torch.randn(d, generator=g)).to(dtype)

    t = {"model.embed_tokens.weight": w(v, d, scale=1.0), "model.norm.weight": norm(), "lm_head.weight": w(v, d)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        t[f"{p}.self_attn.q_proj.weight"] = w(h * hd, d, scale=d**-0.5)
        t[f"{p}.self_attn.k_proj.weight"] = w(kv * hd, d, scale=d**-0.5)
        t[f"{p}.self_attn.v_proj.weight"] = w(kv * hd, d, scale=d**-0.5)
        t[f"{p}.self_attn.o_proj.weight"] = w(d, h * hd, scale=(h * hd) ** -0.5)
        t[f"{p}.mlp.gate_proj.weight"] = w(ffn, d, scale=d**-0.5)
        t[f"{p}.mlp.up_proj.weight"] = w(ffn, d, scale=d**-0.5)
        t[f"{p}.mlp.down_proj.weight"] = w(d, ffn, scale=ffn**-0.5)
        t[f"{p}.input_layernorm.weight"] = norm()
        t[f"{p}.post_attention_layernorm.weight"] = norm()
    save_file({k: x.contiguous() for k, x in t.items()}, os.path.join(path, "model.safetensors"))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    return path


def llama_config(hidden, inter, layers, heads, kv, vocab, dtype="float32"):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": hidden // heads,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": dtype,
    }


def footprint(cfg, nbytes):
    """Bytes of the embedding, one block and the head, as trustlens's placement planner counts them."""
    d, ffn, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    h, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", d // h)
    layer = ((h * hd + 2 * kv * hd) * d + d * h * hd + 3 * ffn * d + 2 * d) * nbytes
    return v * d * nbytes, layer, (d + v * d) * nbytes


def random_prompts(n, lo, hi, vocab, seed):
    r = random.Random(seed)
    return [[r.randrange(3, vocab) for _ in range(r.randint(lo, hi))] for _ in range(n)]


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def max_diffs(a_path, b_path):
    from safetensors.torch import load_file

    a, b = load_file(a_path), load_file(b_path)
    if set(a) != set(b):
        raise RuntimeError(f"different tensors: {sorted(set(a) ^ set(b))}")
    return {k: float((a[k].double() - b[k].double()).abs().max()) for k in sorted(a, key=layer_key)}


def layer_key(k):
    return (1, 0) if k == "logits" else (0, int(k.split(".")[1]))


def shifts_diff(a_path, b_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    if len(a) != len(b):
        raise RuntimeError(f"{len(a)} vs {len(b)} pair results")
    return max(abs(x["shift"] - y["shift"]) for x, y in zip(a, b))


def split_layers(out):
    return [(s["device"], s["layers"]["start"], s["layers"]["end"]) for s in out.get("placement", [])]


# ---------------------------------------------------------------------------------------------------------------
# Steps


def step_env(c):
    torch = c.torch
    r = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "binary": c.args.bin,
        "binary_missing_libs": c.missing_libs(),
    }
    try:
        import transformers

        r["transformers"] = transformers.__version__
    except Exception as e:
        r["transformers"] = None
        r["transformers_error"] = str(e)[:200]
    if torch.cuda.is_available():
        r["gpu"] = torch.cuda.get_device_name(0)
        r["gpu_count"] = torch.cuda.device_count()
        free, total = torch.cuda.mem_get_info(0)
        r["gpu_free_bytes"], r["gpu_total_bytes"] = free, total
    smi = shutil.which("nvidia-smi")
    if smi:
        q = "name,driver_version,memory.total,memory.used"
        p = subprocess.run([smi, f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True, text=True)
        r["nvidia_smi"] = p.stdout.strip() or p.stderr.strip()[:300]
    r["ok"] = True
    return r


def step_cuda_visible(c):
    torch = c.torch
    r = {"torch_sees_cuda": torch.cuda.is_available()}
    if c.dry:
        r["note"] = "dry run: no GPU expected; trustlens ran on the CPU"
    out = c.tl("model", "bench", c.tiny, "--ids", c.ids_tiny, "--device", c.dev, "--repeats", "1")
    r["trustlens_device"] = out.get("device")
    r["trustlens_attn"] = out.get("attn")
    r["trustlens_ran"] = True
    # --devices without budgets: the free memory is read through the CUDA runtime (RAM for the dry run).
    try:
        o = c.tl("model", "bench", c.tiny, "--ids", c.ids_tiny, "--devices", c.dev, "--repeats", "1")
        r["measured_budget_bytes"] = o["placement"][0]["budget_bytes"]
        r["free_memory_read"] = r["measured_budget_bytes"] > 0
    except Exception as e:
        r["free_memory_read"] = False
        r["free_memory_error"] = str(e)[:500]
    r["ok"] = r["free_memory_read"] and (c.dry or (r["torch_sees_cuda"] and out.get("device") == "cuda:0"))
    return r


def step_parity(c):
    r = {"threshold": 1e-4, "model": c.tiny_cfg_summary, "prompts": len(c.prompts_tiny)}
    d = c.tmp
    c.tl("model", "bench", c.tiny, "--ids", c.ids_tiny, "--device", "cpu", "--repeats", "1", "--dump", f"{d}/cpu.st")
    runs = {}
    for attn in ["sdpa", "eager"]:
        o = c.tl(
            "model", "bench", c.tiny, "--ids", c.ids_tiny, "--device", c.dev, "--repeats", "1",
            "--attn", attn, "--dump", f"{d}/dev_{attn}.st",
        )
        diffs = max_diffs(f"{d}/cpu.st", f"{d}/dev_{attn}.st")
        layers = {k: v for k, v in diffs.items() if k != "logits"}
        runs[attn] = {
            "device": o.get("device"),
            "max_abs_diff_per_layer": layers,
            "max_abs_diff_logits": diffs["logits"],
            "worst_layer": max(layers.values()),
            "ok": all(v <= 1e-4 for v in layers.values()),
        }
    r["cpu_vs_device"] = runs
    # Batched last-token capture (left padding) on both devices.
    for dev, name in [("cpu", "cap_cpu"), (c.dev, "cap_dev")]:
        c.tl("model", "bench", c.tiny, "--ids", c.ids_tiny, "--device", dev, "--mode", "capture", "--batch-size", "3",
             "--repeats", "1", "--dump", f"{d}/{name}.st")
    cap = max_diffs(f"{d}/cap_cpu.st", f"{d}/cap_dev.st")
    r["capture_cpu_vs_device_worst"] = max(v for k, v in cap.items() if k != "logits")
    r["ok"] = all(x["ok"] for x in runs.values()) and r["capture_cpu_vs_device_worst"] <= 1e-4
    # trustlens (device, SDPA) vs transformers (device, eager and SDPA) on the same weights and prompts.
    try:
        r["vs_transformers"] = compare_transformers(c, f"{d}/dev_sdpa.st")
    except ImportError as e:
        r["vs_transformers"] = {"skipped": f"transformers not importable: {e}"}
    except Exception as e:
        r["vs_transformers"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    return r


def compare_transformers(c, dump):
    import torch
    import transformers
    from safetensors.torch import load_file

    dev = torch.device("cpu" if c.dry else "cuda:0")
    ours = load_file(dump)
    out = {}
    for impl in ["eager", "sdpa"]:
        m = transformers.AutoModelForCausalLM.from_pretrained(c.tiny, dtype=torch.float32, attn_implementation=impl)
        m = m.to(dev).eval()
        n = m.config.num_hidden_layers
        hs = [[] for _ in range(n + 1)]
        with torch.no_grad():
            for p in c.prompts_tiny:
                o = m(torch.tensor([p], device=dev), output_hidden_states=True)
                for l in range(n - 1):  # hidden_states[l+1] is blocks.l resid_post; the last one is after the norm
                    hs[l].append(o.hidden_states[l + 1][0].float().cpu())
                hs[n].append(o.logits[0].float().cpu())
        diffs = {f"blocks.{l}.hook_resid_post": float((torch.cat(hs[l]) - ours[f"blocks.{l}.hook_resid_post"]).abs().max()) for l in range(n - 1)}
        diffs["logits"] = float((torch.cat(hs[n]) - ours["logits"]).abs().max())
        out[impl] = diffs
        del m
    out["note"] = "trustlens on the device (SDPA) vs transformers on the device; the last block's resid_post is not compared (transformers returns it after the final norm)"
    return out


def step_split(c):
    d = c.tmp
    r = {}
    emb, layer, head = footprint(c.tiny_cfg, 4)
    n = c.tiny_cfg["num_hidden_layers"]
    k = n // 2
    per_slot = max(emb + k * layer, (n - k) * layer + head)
    # The single-device reference with the attention kernel a split run picks (that of the embedding's device).
    single = f"{d}/single_fwd.st"
    c.tl("model", "bench", c.tiny, "--ids", c.ids_tiny, "--device", c.dev, "--repeats", "1", "--dump", single)
    setups = [("same_device_twice", f"{c.dev},{c.dev}", f"{c.dev}={2 * per_slot}", 0.0)]
    if not c.dry:
        setups.append(("gpu_plus_cpu", "cuda:0,cpu", f"cuda:0={emb + k * layer},cpu=8GiB", 1e-4))
    else:
        r["gpu_plus_cpu"] = {"skipped": "dry run: needs a GPU"}
    # Single-device references for capture and patching.
    c.tl("model", "bench", c.tiny, "--ids", c.ids_tiny, "--device", c.dev, "--mode", "capture", "--batch-size", "3",
         "--repeats", "1", "--dump", f"{d}/cap_single.st")
    c.tl("model", "bench", c.tiny, "--ids", c.ids_tiny, "--device", c.dev, "--mode", "patch", "--batch-size", "2",
         "--repeats", "1", "--dump", f"{d}/patch_single.json")
    for name, devices, mem, tol in setups:
        common = ["model", "bench", c.tiny, "--ids", c.ids_tiny, "--devices", devices, "--device-memory", mem, "--repeats", "1"]
        o = c.tl(*common, "--dump", f"{d}/{name}_fwd.st")
        fwd = max_diffs(single, f"{d}/{name}_fwd.st")
        c.tl(*common, "--mode", "capture", "--batch-size", "3", "--dump", f"{d}/{name}_cap.st")
        cap = max_diffs(f"{d}/cap_single.st", f"{d}/{name}_cap.st")
        c.tl(*common, "--mode", "patch", "--batch-size", "2", "--dump", f"{d}/{name}_patch.json")
        pd = shifts_diff(f"{d}/patch_single.json", f"{d}/{name}_patch.json")
        placement = split_layers(o)
        is_split = sum(1 for _, s, e in placement if e > s) == 2
        r[name] = {
            "devices": devices,
            "device_memory": mem,
            "placement": placement,
            "really_split": is_split,
            "tolerance": tol,
            "forward_max_abs_diff": max(fwd.values()),
            "forward_per_layer": fwd,
            "capture_max_abs_diff": max(cap.values()),
            "patch_max_abs_shift_diff": pd,
            "ok": is_split and max(fwd.values()) <= tol and max(cap.values()) <= tol and pd <= max(tol, 1e-6),
        }
    r["ok"] = all(v.get("ok", False) for k2, v in r.items() if isinstance(v, dict) and "skipped" not in v)
    return r


def step_throughput(c):
    torch = c.torch
    a = c.args
    r = {
        "model": c.big_name,
        "random_weights": True,
        "dtype": "bf16",
        "capture": {"prompts": len(c.prompts_cap), "tokens": sum(map(len, c.prompts_cap)), "batch_size": a.batch_size},
        "patch": {"pairs": len(c.prompts_patch) // 2, "layers": c.patch_layers, "batch_pairs": a.batch_pairs},
    }
    common = ["model", "bench", c.big_cfg_path, "--random", "--dtype", "bf16", "--device", c.dev, "--repeats", str(a.repeats)]
    o = c.tl(*common, "--ids", c.ids_cap, "--mode", "capture", "--batch-size", a.batch_size)
    r["capture"]["trustlens"] = pick(o)
    o = c.tl(*common, "--ids", c.ids_patch, "--mode", "patch", "--batch-size", a.batch_pairs, "--layers", ",".join(map(str, c.patch_layers)))
    r["patch"]["trustlens_cached_prefix"] = pick(o)
    if c.left() > 150 or c.dry:
        o = c.tl(*common, "--ids", c.ids_patch, "--mode", "patch", "--batch-size", a.batch_pairs, "--layers",
                 ",".join(map(str, c.patch_layers)), "--full-recompute")
        r["patch"]["trustlens_full_recompute"] = pick(o)
    if c.left() < 60:
        r["reference"] = {"skipped": "out of time"}
        r["ok"] = True
        return r
    try:
        if os.environ.get("GPU_CHECK_NO_TRANSFORMERS"):
            raise ImportError("GPU_CHECK_NO_TRANSFORMERS is set")
        import transformers  # noqa: F401

        ref = "transformers"
    except ImportError as e:
        ref = "torch"
        c.res["notes"].append(f"transformers is not importable ({e}); the reference is a plain PyTorch forward pass")
    r["reference_impl"] = ref
    rc, rp = reference_throughput(c, ref)
    r["capture"][ref] = rc
    r["patch"][ref] = rp
    for part, ours in [("capture", "trustlens"), ("patch", "trustlens_cached_prefix"), ("patch", "trustlens_full_recompute")]:
        if ours in r[part] and ref in r[part]:
            r[part][f"speedup_{ours}_vs_{ref}"] = round(r[part][ours]["prompts_per_s"] / r[part][ref]["prompts_per_s"], 3)
    r["ok"] = True
    return r


def pick(o):
    keep = ["prompts_per_s", "tokens_per_s", "pairs_per_s", "seconds", "prompts", "tokens", "load_s", "device", "attn",
            "weight_bytes_in_dtype", "peak_rss_bytes", "gpu_memory_after", "_wall_s"]
    return {k: o[k] for k in keep if k in o}


def batches_by_length(prompts, bs):
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    return [order[i : i + bs] for i in range(0, len(order), bs)]


def left_pad(torch, seqs, dev):
    t = max(map(len, seqs))
    ids = torch.zeros(len(seqs), t, dtype=torch.long)
    mask = torch.zeros(len(seqs), t, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, t - len(s) :] = torch.tensor(s)
        mask[i, t - len(s) :] = 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    return ids.to(dev), mask.to(dev), pos.to(dev)


def reference_throughput(c, ref):
    """Capture and patching throughput of the reference on the same prompts, batches, dtype and device."""
    import torch

    dev = torch.device(c.dev)
    a = c.args
    t1 = time.time()
    torch.manual_seed(0)
    if ref == "transformers":
        import transformers

        cfg = transformers.AutoConfig.from_pretrained(os.path.dirname(c.big_cfg_path))
        with torch.device(dev):
            m = transformers.LlamaForCausalLM._from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        m.eval()
        layers_mod, norm_mod = m.model.layers, m.model.norm
    else:
        m = TorchLlama(c.big_cfg, dev)
        layers_mod, norm_mod = m.layers, m.norm
    load_s = time.time() - t1
    n = c.big_cfg["num_hidden_layers"]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def forward(ids, mask, pos, hidden=False):
        if ref == "transformers":
            return m(input_ids=ids, attention_mask=mask, position_ids=pos, output_hidden_states=hidden, logits_to_keep=1, use_cache=False)
        return m(ids, mask, pos)

    def run_capture():
        for b in batches_by_length(c.prompts_cap, a.batch_size):
            ids, mask, pos = left_pad(torch, [c.prompts_cap[i] for i in b], dev)
            o = forward(ids, mask, pos, hidden=True)
            # The residual stream after every block at the last token, f32 on the CPU (as trustlens stores it).
            hs = o.hidden_states[1:] if ref == "transformers" else o["hidden"]
            _ = [h[:, -1].float().cpu() for h in hs]
            _ = o.logits[:, -1].float().cpu() if ref == "transformers" else o["logits"].float().cpu()

    captured = {}

    def grab_norm(_m, _i, out):
        captured["norm"] = out[:, -1]

    def run_patch():
        pairs = [(c.prompts_patch[2 * i], c.prompts_patch[2 * i + 1]) for i in range(len(c.prompts_patch) // 2)]
        for j in range(0, len(pairs), a.batch_pairs):
            chunk = pairs[j : j + a.batch_pairs]
            k = len(chunk)
            seqs = [p[0] for p in chunk] + [p[1] for p in chunk]
            ids, mask, pos = left_pad(torch, seqs, dev)
            partner = torch.tensor([i + k if i < k else i - k for i in range(2 * k)], device=dev)
            h = norm_mod.register_forward_hook(grab_norm)
            o = forward(ids, mask, pos, hidden=True)
            hs = o.hidden_states[1:] if ref == "transformers" else o["hidden"]
            clean = captured["norm"].float()
            src = clean[partner]
            for l in c.patch_layers:
                val = hs[l][:, -1][partner].clone()

                def patch_hook(_m, _i, out, val=val):
                    x = out[0] if isinstance(out, tuple) else out
                    x[:, -1] = val
                    return out

                ph = layers_mod[l].register_forward_hook(patch_hook)
                forward(ids, mask, pos)
                ph.remove()
                patched = captured["norm"].float()
                _ = (torch.nn.functional.cosine_similarity(patched, src) - torch.nn.functional.cosine_similarity(clean, src)).cpu()
            h.remove()

    out = []
    for fn, count, toks in [
        (run_capture, len(c.prompts_cap), sum(map(len, c.prompts_cap))),
        (run_patch, 2 * (len(c.prompts_patch) // 2), sum(map(len, c.prompts_patch[: 2 * (len(c.prompts_patch) // 2)]))),
    ]:
        with torch.no_grad():
            fn()  # warm-up
            sync()
            best = math.inf
            for _ in range(a.repeats):
                t = time.time()
                fn()
                sync()
                best = min(best, time.time() - t)
        res = {"seconds": best, "prompts": count, "tokens": toks, "prompts_per_s": count / best, "tokens_per_s": toks / best, "load_s": load_s}
        if fn is run_patch:
            res["pairs_per_s"] = count / 2 / best
            res["method"] = "full recompute with forward hooks (one clean pass + one pass per patched layer)"
        if dev.type == "cuda":
            res["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated(dev)
        out.append(res)
    del m
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return out[0], out[1]


class TorchLlama:
    """A plain PyTorch Llama forward (bf16, SDPA, GQA, RoPE without scaling) for when transformers is missing."""

    def __init__(self, cfg, dev):
        import torch

        self.t, self.cfg, self.dev = torch, cfg, dev
        d, ffn, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
        h, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        hd = d // h
        bf = torch.bfloat16
        r = lambda *s: (torch.randn(*s, device=dev) * 0.02).to(bf)  # noqa: E731
        self.embed, self.lm_head = r(v, d), r(v, d)
        self.layers = [
            torch.nn.Module() for _ in range(cfg["num_hidden_layers"])
        ]  # modules only to carry forward hooks
        self.w = [dict(qkv=r((h + 2 * kv) * hd, d), o=r(d, h * hd), gu=r(2 * ffn, d), down=r(d, ffn)) for _ in self.layers]
        self.norm = torch.nn.Module()
        self.inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, device=dev).float() / hd))

    def _rms(self, x):
        t = self.t
        xf = x.float()
        return (xf * t.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)

    def __call__(self, ids, mask, pos):
        t, F = self.t, self.t.nn.functional
        cfg = self.cfg
        h, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        b, s = ids.shape
        hd = cfg["hidden_size"] // h
        x = F.embedding(ids, self.embed)
        f = pos.float()[..., None] * self.inv
        emb = t.cat([f, f], -1)
        cos, sin = emb.cos().to(x.dtype)[:, None], emb.sin().to(x.dtype)[:, None]
        causal = t.ones(s, s, dtype=t.bool, device=ids.device).tril()
        am = causal[None, None] & mask.bool()[:, None, None, :]
        am = am | t.eye(s, dtype=t.bool, device=ids.device)[None, None]

        def rope(q):
            q1, q2 = q[..., : hd // 2], q[..., hd // 2 :]
            return q * cos + t.cat([-q2, q1], -1) * sin

        hidden = []
        for mod, w in zip(self.layers, self.w):
            a = self._rms(x) @ w["qkv"].T
            q, k, v = a.split([h * hd, kv * hd, kv * hd], -1)
            q = rope(q.view(b, s, h, hd).transpose(1, 2))
            k = rope(k.view(b, s, kv, hd).transpose(1, 2))
            v = v.view(b, s, kv, hd).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=am, enable_gqa=h != kv)
            x = x + o.transpose(1, 2).reshape(b, s, h * hd) @ w["o"].T
            g, u = (self._rms(x) @ w["gu"].T).chunk(2, -1)
            x = x + (F.silu(g) * u) @ w["down"].T
            for hook in mod._forward_hooks.values():
                r = hook(mod, (), x)
                x = r if r is not None and not isinstance(r, tuple) else x
            hidden.append(x)
        y = self._rms(x)
        for hook in self.norm._forward_hooks.values():
            hook(self.norm, (), y)
        return {"hidden": hidden, "logits": y[:, -1] @ self.lm_head.T}


# ---------------------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/trustlens", help="the trustlens binary (built on another machine)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "target/gpu-check"), "gpu_check.json"))
    ap.add_argument("--libs", default="target/gpu-libs", help="carried system libraries, used when ldd finds some missing")
    ap.add_argument("--dry-run", action="store_true", default=os.environ.get("GPU_CHECK_DRY_RUN") == "1")
    ap.add_argument("--budget-s", type=float, default=float(os.environ.get("GPU_CHECK_BUDGET_S", 450)))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16, help="prompts per forward pass in the capture timing")
    ap.add_argument("--batch-pairs", type=int, default=8, help="pairs per batch in the patching timing")
    args = ap.parse_args()
    if not os.path.exists(args.bin):
        sys.exit(f"{args.bin}: no trustlens binary (build with `cargo build --release`, carry target/release/trustlens)")
    c = Check(args)
    print(f"gpu-check: writing {args.out}{' (dry run on the CPU)' if c.dry else ''}", flush=True)

    # The tiny model for parity and splits (f32, GQA, llama3 rope), and its prompts.
    c.tiny_cfg = llama_config(128, 352, 4, 4, 2, 512)
    c.tiny = write_random_llama(os.path.join(c.tmp, "tiny"), c.tiny_cfg, seed=1, dtype=c.torch.float32)
    c.tiny_cfg_summary = "Llama d=128 ffn=352 4 layers 4 heads (2 kv) vocab 512, random f32"
    c.prompts_tiny = random_prompts(7, 3, 60, 512, seed=2)
    c.ids_tiny = write_json(os.path.join(c.tmp, "ids_tiny.json"), c.prompts_tiny)
    # The 8B shapes (a small stand-in for the dry run).
    if c.dry:
        c.big_cfg = llama_config(256, 512, 4, 8, 2, 2048, dtype="bfloat16")
        c.big_name = "dry-run stand-in: d=256 ffn=512 4 layers 8 heads (2 kv) vocab 2048"
        c.prompts_cap = random_prompts(12, 8, 40, 2048, seed=3)
        c.prompts_patch = random_prompts(8, 8, 40, 2048, seed=4)
        c.patch_layers = [1, 2]
        args.batch_size, args.batch_pairs, args.repeats = 4, 2, 1
    else:
        c.big_cfg = llama_config(4096, 14336, 32, 32, 8, 128256, dtype="bfloat16")
        c.big_name = "Llama-3.1-8B shapes (d=4096 ffn=14336 32 layers 32 heads (8 kv) vocab 128256), random weights"
        c.prompts_cap = random_prompts(128, 128, 384, 128256, seed=3)
        c.prompts_patch = random_prompts(64, 128, 384, 128256, seed=4)
        c.patch_layers = [8, 16, 24]
    bigdir = os.path.join(c.tmp, "big")
    os.makedirs(bigdir, exist_ok=True)
    c.big_cfg_path = write_json(os.path.join(bigdir, "config.json"), c.big_cfg)
    c.ids_cap = write_json(os.path.join(c.tmp, "ids_cap.json"), c.prompts_cap)
    c.ids_patch = write_json(os.path.join(c.tmp, "ids_patch.json"), c.prompts_patch)

    c.step("environment", lambda: step_env(c), min_left=0)
    c.step("cuda_visible", lambda: step_cuda_visible(c))
    c.step("parity", lambda: step_parity(c))
    c.step("split", lambda: step_split(c))
    c.step("throughput", lambda: step_throughput(c), min_left=90 if not c.dry else 10)
    for k in ["cuda_visible", "parity", "split", "throughput"]:
        c.res["passed"][k] = bool(c.res.get(k, {}).get("ok"))
    c.res["all_passed"] = all(c.res["passed"].values())
    c.res["finished"] = now()
    c.save()
    shutil.rmtree(c.tmp, ignore_errors=True)
    print(json.dumps({"passed": c.res["passed"], "seconds": c.res["seconds"], "out": args.out}), flush=True)
    return 0 if c.res["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
