#!/usr/bin/python3
"""Writes a small random Hugging Face model directory for tests.

    /usr/bin/python3 tools/make_test_model.py --family qwen3 --out /tmp/m \
        [--hidden 64] [--layers 2] [--heads 4] [--kv-heads 2] [--head-dim N] \
        [--intermediate 128] [--dtype bf16|fp16|fp32] [--seed 0] [--shards 1] \
        [--tie-embeddings] [--tokenizer DIR] [--vocab N] [--max-pos 2048]

Families: llama (Llama 2 style), llama3 (Llama 3.1 style, rope_scaling
"llama3"), mistral, qwen2 (q/k/v biases), qwen3 (explicit head_dim, q/k
RMSNorm), phi3 (fused qkv_proj and gate_up_proj). config.json looks like the
family's real Hugging Face config; generation_config.json, tokenizer.json and
tokenizer_config.json (copied from --tokenizer, default models/pkgchat-5m)
complete the directory. Weights: model.safetensors, or --shards N files
model-0000i-of-0000N.safetensors with model.safetensors.index.json.

Weights are random but deterministic for a --seed: linear layers
N(0, 1/fan_in), embeddings N(0, 1/hidden), norms 1 + N(0, 0.1^2), biases
N(0, 0.1^2); every layer changes the residual stream and logits are O(1).
numpy + the standard library only.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ("llama", "llama3", "mistral", "qwen2", "qwen3", "phi3")
END_TOKENS = ("<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<|im_end|>", "<|endoftext|>", "</s>")
DTYPES = {"bf16": ("BF16", "bfloat16"), "fp16": ("F16", "float16"), "fp32": ("F32", "float32")}


def to_bytes(a, dtype):
    """fp32 array -> little-endian bytes of the safetensors dtype."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.astype("<f4").tobytes()
    if dtype == "F16":
        return a.astype("<f2").tobytes()
    # BF16: upper 16 bits of the fp32 pattern, rounded to nearest even.
    u = a.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def write_safetensors(path, tensors, dtype, metadata=None):
    """tensors: list of (name, fp32 array), written in name order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    blobs = []
    offset = 0
    for name, arr in sorted(tensors, key=lambda t: t[0]):
        data = to_bytes(arr, dtype)
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)  # data starts 8-byte aligned, as safetensors writes it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    return offset


def tokenizer_info(tok_dir):
    """(vocab size = max id + 1, {token content: id}) from tokenizer.json."""
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    ids = {}
    vocab = tok.get("model", {}).get("vocab", {})
    if isinstance(vocab, dict):
        ids.update(vocab)
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        ids.update({p[0]: i for i, p in enumerate(vocab)})
    for t in tok.get("added_tokens", []):
        ids[t["content"]] = t["id"]
    return (max(ids.values()) + 1 if ids else 0), ids


def special_ids(tok_dir, ids):
    """bos/eos ids named by tokenizer_config.json (None when absent)."""
    path = os.path.join(tok_dir, "tokenizer_config.json")
    cfg = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)

    def lookup(key):
        v = cfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return ids.get(v) if isinstance(v, str) else None

    return lookup("bos_token"), lookup("eos_token")


def make_config(a, vocab, head_dim, bos, eos, torch_dtype):
    fam = a.family
    c = {}
    common = {
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "max_position_embeddings": a.max_pos,
        "vocab_size": vocab,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "tie_word_embeddings": bool(a.tie_embeddings),
        "torch_dtype": torch_dtype,
        "transformers_version": "4.46.0",
        "use_cache": True,
    }
    if bos is not None:
        common["bos_token_id"] = bos
    if eos is not None:
        common["eos_token_id"] = eos
    if fam in ("llama", "llama3"):
        c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
             "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1, "rms_norm_eps": 1e-5}
        c.update(common)
        if fam == "llama":
            c.update({"rope_scaling": None, "rope_theta": 10000.0})
        else:
            c.update({"rope_theta": 500000.0,
                      "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}})
        if a.head_dim is not None:
            c["head_dim"] = head_dim
    elif fam == "mistral":
        c = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "attention_dropout": 0.0,
             "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "sliding_window": None}
        c.update(common)
        if a.head_dim is not None:
            c["head_dim"] = head_dim
    elif fam == "qwen2":
        c = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "attention_dropout": 0.0,
             "max_window_layers": a.layers, "rms_norm_eps": 1e-6, "rope_scaling": None, "rope_theta": 1000000.0,
             "sliding_window": a.max_pos, "use_sliding_window": False}
        c.update(common)
    elif fam == "qwen3":
        c = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
             "attention_dropout": 0.0, "head_dim": head_dim, "max_window_layers": a.layers, "rms_norm_eps": 1e-6,
             "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None, "use_sliding_window": False}
        c.update(common)
    elif fam == "phi3":
        c = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_bias": False,
             "attention_dropout": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0,
             "original_max_position_embeddings": a.max_pos, "rms_norm_eps": 1e-5, "rope_scaling": None,
             "rope_theta": 10000.0, "sliding_window": None}
        c.update(common)
        if eos is not None:
            c["pad_token_id"] = eos
    return dict(sorted(c.items()))


def make_weights(a, vocab, head_dim, rng):
    h, inter = a.hidden, a.intermediate
    q_rows, kv_rows = a.heads * head_dim, a.kv_heads * head_dim

    def linear(out_f, in_f):
        return rng.standard_normal((out_f, in_f), dtype=np.float32) / np.float32(np.sqrt(in_f))

    def norm(n):
        return np.float32(1.0) + np.float32(0.1) * rng.standard_normal(n, dtype=np.float32)

    def bias(n):
        return np.float32(0.1) * rng.standard_normal(n, dtype=np.float32)

    t = [("model.embed_tokens.weight", rng.standard_normal((vocab, h), dtype=np.float32) / np.float32(np.sqrt(h)))]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        t.append((p + "input_layernorm.weight", norm(h)))
        t.append((p + "post_attention_layernorm.weight", norm(h)))
        if a.family == "phi3":
            t.append((p + "self_attn.qkv_proj.weight", linear(q_rows + 2 * kv_rows, h)))
            t.append((p + "mlp.gate_up_proj.weight", linear(2 * inter, h)))
        else:
            t.append((p + "self_attn.q_proj.weight", linear(q_rows, h)))
            t.append((p + "self_attn.k_proj.weight", linear(kv_rows, h)))
            t.append((p + "self_attn.v_proj.weight", linear(kv_rows, h)))
            t.append((p + "mlp.gate_proj.weight", linear(inter, h)))
            t.append((p + "mlp.up_proj.weight", linear(inter, h)))
        if a.family == "qwen2":
            t.append((p + "self_attn.q_proj.bias", bias(q_rows)))
            t.append((p + "self_attn.k_proj.bias", bias(kv_rows)))
            t.append((p + "self_attn.v_proj.bias", bias(kv_rows)))
        if a.family == "qwen3":
            t.append((p + "self_attn.q_norm.weight", norm(head_dim)))
            t.append((p + "self_attn.k_norm.weight", norm(head_dim)))
        t.append((p + "self_attn.o_proj.weight", linear(h, q_rows)))
        t.append((p + "mlp.down_proj.weight", linear(h, inter)))
    t.append(("model.norm.weight", norm(h)))
    if not a.tie_embeddings:
        t.append(("lm_head.weight", linear(vocab, h)))
    return t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", required=True, choices=FAMILIES)
    p.add_argument("--out", required=True)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=None,
                   help="default hidden/heads (qwen3: 2*hidden/heads, to differ from it as Qwen3 does)")
    p.add_argument("--intermediate", type=int, default=128)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--tie-embeddings", action="store_true")
    p.add_argument("--tokenizer", default=os.path.join(REPO, "models", "pkgchat-5m"))
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--max-pos", type=int, default=2048)
    a = p.parse_args(argv)

    if a.hidden <= 0 or a.layers <= 0 or a.heads <= 0 or a.kv_heads <= 0 or a.intermediate <= 0:
        p.error("sizes must be positive")
    if a.heads % a.kv_heads:
        p.error(f"--kv-heads {a.kv_heads} does not divide --heads {a.heads}")
    if a.family == "phi3" and a.head_dim is not None and a.head_dim * a.heads != a.hidden:
        p.error("phi3 has no head_dim key: --head-dim must equal hidden/heads")
    if a.head_dim is None:
        if a.hidden % a.heads:
            p.error(f"--heads {a.heads} does not divide --hidden {a.hidden}; give --head-dim")
        head_dim = a.hidden // a.heads * (2 if a.family == "qwen3" else 1)
        if a.family == "qwen3":
            a.head_dim = head_dim
    else:
        head_dim = a.head_dim
    if head_dim % 2:
        p.error(f"head_dim {head_dim} must be even for RoPE")
    if a.shards < 1:
        p.error("--shards must be >= 1")

    tok_vocab, ids = tokenizer_info(a.tokenizer)
    vocab = a.vocab if a.vocab is not None else tok_vocab
    bos, eos = special_ids(a.tokenizer, ids)
    if bos is not None and bos >= vocab:
        bos = None
    if eos is not None and eos >= vocab:
        eos = None
    st_dtype, torch_dtype = DTYPES[a.dtype]

    os.makedirs(a.out, exist_ok=True)
    config = make_config(a, vocab, head_dim, bos, eos, torch_dtype)
    with open(os.path.join(a.out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    gen = {"_from_model_config": True, "transformers_version": config["transformers_version"]}
    if bos is not None:
        gen["bos_token_id"] = bos
    # generation_config lists every end-of-turn token the tokenizer has (as
    # Llama 3.1's lists <|end_of_text|>, <|eom_id|>, <|eot_id|>).
    gen_eos = [eos] if eos is not None else []
    for piece in END_TOKENS:
        if piece in ids and ids[piece] < vocab and ids[piece] not in gen_eos:
            gen_eos.append(ids[piece])
    if gen_eos:
        gen["eos_token_id"] = gen_eos[0] if len(gen_eos) == 1 else gen_eos
    gen.update({"do_sample": True, "temperature": 0.6, "top_p": 0.9})
    with open(os.path.join(a.out, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        src = os.path.join(a.tokenizer, name)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(a.out, name))
            os.chmod(os.path.join(a.out, name), 0o644)

    # Remove weights of an earlier run in the same directory.
    for name in os.listdir(a.out):
        if name.endswith(".safetensors") or name == "model.safetensors.index.json":
            os.remove(os.path.join(a.out, name))

    rng = np.random.default_rng(a.seed)
    tensors = make_weights(a, vocab, head_dim, rng)
    meta = {"format": "pt"}
    if a.shards == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, st_dtype, meta)
    else:
        n = a.shards
        groups = [tensors[i::n] for i in range(n)]  # interleaved: every shard gets some of each layer
        weight_map, total = {}, 0
        for i, group in enumerate(groups):
            fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            total += write_safetensors(os.path.join(a.out, fname), group, st_dtype, meta)
            for name, _ in group:
                weight_map[name] = fname
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
