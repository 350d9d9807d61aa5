#!/usr/bin/python3
"""Writes a PEFT LoRA adapter for a base model directory, as PEFT saves one:
adapter_config.json and adapter_model.safetensors with random lora_A [r, in] and
lora_B [out, r] for the targeted projections. For tests; numpy only.

    tools/make_test_lora.py --base MODEL_DIR --out DIR [--rank 8] [--alpha 16]
        [--targets q_proj,v_proj | all-linear] [--rslora] [--rank-pattern KEY=R ...]
        [--layers 0,2] [--dtype f32|bf16|f16] [--seed 0] [--break WHAT]

--break writes an adapter halo must refuse: dora, modules_to_save, embedding,
wrong_shape, unknown_module, bin (adapter_model.bin instead of safetensors).
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_test_model import write_safetensors  # noqa: E402

DTYPES = {"f32": "F32", "bf16": "BF16", "f16": "F16"}


def modules(cfg):
    """(module name, out, in) of every projection of the base, Hugging Face names."""
    h = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    hd = cfg.get("head_dim") or h // heads
    inter = cfg["intermediate_size"]
    phi3 = "Phi3ForCausalLM" in cfg.get("architectures", [])
    out = []
    for i in range(cfg["num_hidden_layers"]):
        a, m = f"model.layers.{i}.self_attn", f"model.layers.{i}.mlp"
        if phi3:
            out.append((f"{a}.qkv_proj", (heads + 2 * kv) * hd, h))
            out.append((f"{m}.gate_up_proj", 2 * inter, h))
        else:
            out += [(f"{a}.q_proj", heads * hd, h), (f"{a}.k_proj", kv * hd, h), (f"{a}.v_proj", kv * hd, h),
                    (f"{m}.gate_proj", inter, h), (f"{m}.up_proj", inter, h)]
        out += [(f"{a}.o_proj", h, heads * hd), (f"{m}.down_proj", h, inter)]
    return out


def targeted(name, targets):
    return "all-linear" in targets or any(name == t or name.endswith("." + t) for t in targets)


def rank_for(name, r, patterns):
    for key, value in patterns.items():
        if re.fullmatch(r"(.*\.)?" + key, name):
            return value
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--targets", default="q_proj,v_proj")
    ap.add_argument("--rslora", action="store_true")
    ap.add_argument("--rank-pattern", action="append", default=[], help="KEY=R (repeatable)")
    ap.add_argument("--layers", default="", help="only these layers (layers_to_transform)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--scale", type=float, default=0.05, help="standard deviation of the random values")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--break", dest="brk", choices=["dora", "modules_to_save", "embedding", "wrong_shape",
                                                     "unknown_module", "bin"])
    a = ap.parse_args(argv)
    with open(os.path.join(a.base, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    targets = [t for t in a.targets.split(",") if t]
    patterns = {k: int(v) for k, v in (p.split("=", 1) for p in a.rank_pattern)}
    layers = [int(x) for x in a.layers.split(",") if x]
    rng = np.random.default_rng(a.seed)
    tensors = {}
    for name, n_out, n_in in modules(cfg):
        if not targeted(name, targets):
            continue
        if layers and int(name.split(".")[2]) not in layers:
            continue
        r = rank_for(name, a.rank, patterns)
        key = "base_model.model." + name
        tensors[key + ".lora_A.weight"] = rng.normal(0, a.scale, (r, n_in)).astype(np.float32)
        tensors[key + ".lora_B.weight"] = rng.normal(0, a.scale, (n_out, r)).astype(np.float32)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": a.base, "r": a.rank,
              "lora_alpha": a.alpha, "lora_dropout": 0.0, "bias": "none", "use_rslora": a.rslora,
              "target_modules": targets, "rank_pattern": patterns, "alpha_pattern": {}, "fan_in_fan_out": False,
              "modules_to_save": None, "use_dora": False, "layers_to_transform": layers or None,
              "inference_mode": True}
    if a.brk == "dora":
        config["use_dora"] = True
    elif a.brk == "modules_to_save":
        config["modules_to_save"] = ["lm_head"]
    elif a.brk == "embedding":
        tensors["base_model.model.model.embed_tokens.lora_embedding_A"] = np.zeros((a.rank, 8), np.float32)
    elif a.brk == "wrong_shape":
        k = next(k for k in tensors if k.endswith("lora_A.weight"))
        tensors[k] = tensors[k][:, :-1].copy()
    elif a.brk == "unknown_module":
        tensors["base_model.model.model.layers.0.self_attn.r_proj.lora_A.weight"] = np.zeros((a.rank, 8), np.float32)
        tensors["base_model.model.model.layers.0.self_attn.r_proj.lora_B.weight"] = np.zeros((8, a.rank), np.float32)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "adapter_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    if a.brk == "bin":
        with open(os.path.join(a.out, "adapter_model.bin"), "wb") as f:
            f.write(b"not read")
    else:
        write_safetensors(os.path.join(a.out, "adapter_model.safetensors"), list(tensors.items()), DTYPES[a.dtype])
    return 0


if __name__ == "__main__":
    sys.exit(main())
