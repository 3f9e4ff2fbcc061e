#!/usr/bin/env python3
"""Reference values for trustlens's parity tests, computed by Hugging Face transformers.

Usage: .venv/bin/python scripts/make_fixtures.py OUTDIR [--smollm PATH.gguf]

Writes, for seeded tiny random models (Llama with GQA + llama3 rope scaling, untied; Mistral with an explicit
head_dim; Qwen2 with q/k/v biases, tied) and for the embedded SmolLM2 GGUF (dequantised by transformers' own GGUF
loader, an implementation independent of trustlens's):
  OUTDIR/<name>/config.json, model.safetensors   (tiny models only)
  OUTDIR/<name>/reference.safetensors            resid_post per layer per prompt ("p{i}.resid_post.{l}", [T, d]),
                                                  final norm ("p{i}.ln_final") and logits ("p{i}.logits"), f32;
                                                  bf16 runs of the same ("bf16.p{i}...") for the drift report
  OUTDIR/<name>/reference.json                    prompts (token ids) and greedy continuations
Residual streams are read with forward hooks on each decoder layer, so there is no ambiguity about which entry of
`hidden_states` is normalised.
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

torch.set_num_threads(max(1, os.cpu_count() or 1))


def tiny_configs():
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
    return {
        "tiny-llama": LlamaConfig(**common, num_attention_heads=4, num_key_value_heads=2, rope_theta=50000.0,
                                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
                                  tie_word_embeddings=False),
        "tiny-mistral": MistralConfig(**common, num_attention_heads=4, num_key_value_heads=1, head_dim=24,
                                      rope_theta=10000.0, tie_word_embeddings=False, sliding_window=None),
        # Linear rope scaling and Llama's attention_bias (q/k/v/o biases).
        "tiny-llama-linear": LlamaConfig(**common, num_attention_heads=4, num_key_value_heads=4, rope_theta=10000.0,
                                         rope_scaling={"rope_type": "linear", "factor": 2.0}, attention_bias=True,
                                         tie_word_embeddings=False),
        "tiny-qwen2": Qwen2Config(**common, num_attention_heads=4, num_key_value_heads=2, rope_theta=1000000.0,
                                  tie_word_embeddings=True, use_sliding_window=False),
    }


def capture(model, ids):
    """Run one unpadded prompt; return resid_post per layer, final norm output and logits (all [T, *], f32)."""
    layers = model.model.layers
    outs = {}
    hooks = []
    for i, layer in enumerate(layers):
        def hook(_m, _inp, out, i=i):
            outs[i] = (out[0] if isinstance(out, tuple) else out).detach()
        hooks.append(layer.register_forward_hook(hook))
    normed = {}
    hooks.append(model.model.norm.register_forward_hook(lambda _m, _i, o: normed.setdefault("x", o.detach())))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    for h in hooks:
        h.remove()
    res = {f"resid_post.{l}": outs[l][0].float() for l in range(len(layers))}
    res["ln_final"] = normed["x"][0].float()
    res["logits"] = logits.float()
    return res


def greedy(model, ids, n, eos):
    with torch.no_grad():
        kw = dict(max_new_tokens=n, do_sample=False, pad_token_id=0)
        if eos is None:
            kw.update(min_new_tokens=n, eos_token_id=None)
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), **kw)
    return out[0, len(ids):].tolist()


def dump(model, name, outdir, prompts, n_new, eos, bf16_model=None):
    tensors, ref = {}, {"prompts": prompts, "greedy": []}
    for i, ids in enumerate(prompts):
        for k, v in capture(model, ids).items():
            tensors[f"p{i}.{k}"] = v.contiguous()
        ref["greedy"].append(greedy(model, ids, n_new, eos))
        if bf16_model is not None:
            for k, v in capture(bf16_model, ids).items():
                tensors[f"bf16.p{i}.{k}"] = v.contiguous()
    save_file(tensors, os.path.join(outdir, name, "reference.safetensors"))
    with open(os.path.join(outdir, name, "reference.json"), "w") as f:
        json.dump(ref, f)


def quant_fixture(outdir):
    """A GGUF file holding random blocks of every tensor type trustlens dequantises, and gguf-py's dequantisation of
    each (an independent implementation of llama.cpp's block layouts) as the reference."""
    import numpy as np
    import gguf
    from gguf.quants import dequantize
    from gguf import GGMLQuantizationType as Q
    rng = np.random.default_rng(7)
    d = os.path.join(outdir, "quants")
    os.makedirs(d, exist_ok=True)
    # (type, offsets of the f16 scale fields inside one block)
    kinds = {"Q4_0": (Q.Q4_0, [0]), "Q4_1": (Q.Q4_1, [0, 2]), "Q8_0": (Q.Q8_0, [0]), "Q4_K": (Q.Q4_K, [0, 2]),
             "Q5_K": (Q.Q5_K, [0, 2]), "Q6_K": (Q.Q6_K, [208]), "F16": (Q.F16, None), "BF16": (Q.BF16, None),
             "F32": (Q.F32, None)}
    w = gguf.GGUFWriter(os.path.join(d, "quants.gguf"), "llama")
    refs = {}
    rows, cols = 4, 512
    for name, (qt, scale_offsets) in kinds.items():
        block_vals, block_bytes = gguf.GGML_QUANT_SIZES[qt]
        nb = rows * cols // block_vals
        raw = rng.integers(0, 256, size=(nb, block_bytes), dtype=np.uint8)
        if scale_offsets is not None:
            for off in scale_offsets:
                scales = rng.uniform(-0.05, 0.05, size=nb).astype(np.float16)
                raw[:, off:off + 2] = scales.view(np.uint8).reshape(nb, 2)
        elif qt == Q.F16:
            raw = rng.standard_normal(nb).astype(np.float16).view(np.uint8).reshape(nb, 2)
        elif qt == Q.BF16:
            f = rng.standard_normal(nb).astype(np.float32)
            raw = (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(nb, 2)
        else:
            raw = rng.standard_normal(nb).astype(np.float32).view(np.uint8).reshape(nb, 4)
        raw = raw.reshape(rows, -1)
        refs[name] = torch.from_numpy(np.ascontiguousarray(dequantize(raw, qt).astype(np.float32).reshape(rows, cols)))
        w.add_tensor(name, raw, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file(refs, os.path.join(d, "reference.safetensors"))
    # A well-formed llama GGUF whose embedding is Q2_K, a type trustlens does not dequantise.
    u = gguf.GGUFWriter(os.path.join(d, "unsupported.gguf"), "llama")
    for k, v in {"block_count": 1, "context_length": 64, "embedding_length": 256, "feed_forward_length": 512,
                 "attention.head_count": 4, "attention.head_count_kv": 4}.items():
        u.add_uint32(f"llama.{k}", v)
    u.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    u.add_tensor("token_embd.weight", rng.integers(0, 256, size=(32, 84), dtype=np.uint8), raw_dtype=Q.Q2_K)
    u.write_header_to_file()
    u.write_kv_data_to_file()
    u.write_tensors_to_file()
    u.close()
    print("[fixtures] quants: ok")


def main():
    outdir = sys.argv[1]
    smollm = None
    if "--smollm" in sys.argv:
        smollm = sys.argv[sys.argv.index("--smollm") + 1]
    quant_fixture(outdir)
    gen = torch.Generator().manual_seed(1234)
    prompts = [torch.randint(3, 256, (n,), generator=gen).tolist() for n in (7, 19, 12)]
    for name, cfg in tiny_configs().items():
        torch.manual_seed(sum(map(ord, name)))
        cfg._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, attn_implementation="eager").eval()
        # Random init leaves norms at 1 and biases at 0; perturb them so the parity tests exercise them.
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "norm" in pname or pname.endswith("bias"):
                    p.add_(0.1 * torch.randn_like(p))
        d = os.path.join(outdir, name)
        os.makedirs(d, exist_ok=True)
        # tiny-mistral is saved in shards, to exercise model.safetensors.index.json.
        shard = "150KB" if name == "tiny-mistral" else "50GB"
        model.save_pretrained(d, safe_serialization=True, max_shard_size=shard)
        bf16 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16, attn_implementation="eager").eval()
        dump(model, name, outdir, prompts, 8, None, bf16_model=bf16)
        print(f"[fixtures] {name}: ok")
    if smollm:
        d = os.path.join(outdir, "smollm2")
        os.makedirs(d, exist_ok=True)
        gdir, gname = os.path.split(os.path.abspath(smollm))
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
        model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
        msgs = [[{"role": "user", "content": "What is the capital of France?"}],
                [{"role": "user", "content": "List three primary colours."}]]
        ps = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=True) for m in msgs]
        ps = [p["input_ids"] if isinstance(p, dict) or hasattr(p, "keys") else p for p in ps]
        dump(model, "smollm2", outdir, ps, 24, tok.eos_token_id)
        ref = json.load(open(os.path.join(d, "reference.json")))
        ref["texts"] = [tok.decode(g, skip_special_tokens=True) for g in ref["greedy"]]
        json.dump(ref, open(os.path.join(d, "reference.json"), "w"))
        print(f"[fixtures] smollm2: {ref['texts'][0]!r}")


if __name__ == "__main__":
    main()
