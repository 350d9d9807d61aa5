#!/usr/bin/python3
"""Independent numpy reference forward pass for halo's model families.

    /usr/bin/python3 tests/reference/forward.py MODEL_DIR --prompt-ids 1,2,3 [--steps 16]

prints {"last_logits": [...], "greedy_ids": [...]} on stdout: the logits at the
last prompt position and `steps` greedy tokens (no EOS stop; the whole
sequence is recomputed for every step). Also: --decode prints the greedy text
(pieces from tokenizer.json) on stderr; --all-logits adds "logits": one row per
prompt position; --pool LAST|MEAN|CLS [--no-normalize] prints only
{"embedding": [...]}, the pooled final hidden states (embeddings); --lora DIR
runs with a PEFT LoRA adapter merged into the weights (W + scale * B A).

Written from the semantics of Hugging Face transformers' modeling code
(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
Phi3ForCausalLM) and its own safetensors reader; it shares nothing with the
C++ loader. Everything is computed in float64 from the stored weights
(bf16/fp16 widened exactly). numpy + the standard library only.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# ----------------------------------------------------------------- weights


def read_safetensors(path):
    """{name: float64 array} of every F32/F16/BF16 tensor in one file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = raw[base + b:base + end]
        shape = tuple(e["shape"])
        dt = e["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2")
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            continue  # not a weight (halo never needs integer tensors)
        out[name] = a.astype(np.float64).reshape(shape)
    return out


def read_weights(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    with open(os.path.join(model_dir, "model.safetensors.index.json"), encoding="utf-8") as f:
        index = json.load(f)
    w = {}
    for fname in sorted(set(index["weight_map"].values())):
        w.update(read_safetensors(os.path.join(model_dir, fname)))
    return w


# ----------------------------------------------------------------- config


class Config:
    def __init__(self, c):
        arch = c["architectures"][0]
        self.arch = arch
        self.family = {
            "LlamaForCausalLM": "llama",
            "MistralForCausalLM": "mistral",
            "Qwen2ForCausalLM": "qwen2",
            "Qwen3ForCausalLM": "qwen3",
            "Phi3ForCausalLM": "phi3",
        }.get(arch)
        if self.family is None:
            raise SystemExit(f"forward.py: unsupported architecture {arch}")
        self.vocab = c["vocab_size"]
        self.hidden = c["hidden_size"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"]
        self.kv_heads = c.get("num_key_value_heads") or self.heads
        default_head_dim = 128 if self.family == "qwen3" else self.hidden // self.heads
        self.head_dim = default_head_dim if self.family == "phi3" else (c.get("head_dim") or default_head_dim)
        default_eps = 1e-5 if self.family == "phi3" else 1e-6
        self.eps = c.get("rms_norm_eps", default_eps)
        self.theta = c.get("rope_theta", 10000.0)
        self.rope_scaling = c.get("rope_scaling")
        self.tied = c.get("tie_word_embeddings", False)
        self.act = c.get("hidden_act", "silu")
        if c.get("partial_rotary_factor", 1.0) != 1.0:
            raise SystemExit("forward.py: partial_rotary_factor != 1 not implemented")


# ----------------------------------------------------------------- math


def rms_norm(x, w, eps):
    # HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then * weight.
    var = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(var + eps) * w


def act_fn(x, name):
    if name in ("silu", "swish"):
        return x / (1.0 + np.exp(-x))
    if name in ("gelu_pytorch_tanh", "gelu_tanh"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    raise SystemExit(f"forward.py: hidden_act {name} not implemented")


def inv_frequencies(cfg):
    """HF rope init functions: default, linear, llama3 (_compute_llama3_parameters)."""
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    rs = cfg.rope_scaling
    if not rs:
        return inv_freq
    kind = rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return inv_freq
    if kind == "linear":
        # HF divides the positions by factor; the same as dividing the frequencies.
        return inv_freq / rs["factor"]
    if kind == "llama3":
        factor = rs["factor"]
        low = rs["low_freq_factor"]
        high = rs["high_freq_factor"]
        old_ctx = rs["original_max_position_embeddings"]
        low_freq_wavelen = old_ctx / low
        high_freq_wavelen = old_ctx / high
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        return np.where(is_medium, smoothed, inv_freq_llama)
    raise SystemExit(f"forward.py: rope_scaling {kind} not implemented")


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, cos, sin):
    # x [heads, T, head_dim]; cos/sin [T, head_dim]
    return x * cos + rotate_half(x) * sin


# ----------------------------------------------------------------- model


def merge_lora(w, adapter_dir):
    """Adds a PEFT adapter's scale * B @ A to each target's weight, in place.

    From PEFT's LoraLayer semantics: scale = lora_alpha / r, or
    lora_alpha / sqrt(r) with use_rslora; alpha_pattern keys match a module
    name whole or as a dotted suffix; the rank is A's row count."""
    with open(os.path.join(adapter_dir, "adapter_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    tensors = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    merged = 0
    for name, a in tensors.items():
        if not name.endswith(".lora_A.weight"):
            continue
        module = name[: -len(".lora_A.weight")]
        b = tensors[module + ".lora_B.weight"]
        if module.startswith("base_model.model."):
            module = module[len("base_model.model."):]
        alpha = cfg.get("lora_alpha", 8)
        for key, value in (cfg.get("alpha_pattern") or {}).items():
            if module == key or module.endswith("." + key):
                alpha = value
        r = a.shape[0]
        scale = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
        w[module + ".weight"] = w[module + ".weight"] + scale * (b @ a)
        merged += 1
    if merged == 0:
        raise SystemExit(f"{adapter_dir}: no lora_A/lora_B pairs")


class Model:
    def __init__(self, model_dir, lora=None):
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            self.cfg = Config(json.load(f))
        self.w = read_weights(model_dir)
        if lora:
            merge_lora(self.w, lora)
        self.inv_freq = inv_frequencies(self.cfg)

    def layer_weights(self, i):
        """(q, k, v, gate, up) weights of layer i, splitting Phi-3's fused tensors."""
        c, w, p = self.cfg, self.w, f"model.layers.{i}."
        if c.family == "phi3":
            qkv = w[p + "self_attn.qkv_proj.weight"]
            qp = c.heads * c.head_dim
            kp = c.kv_heads * c.head_dim
            q, k, v = qkv[:qp], qkv[qp:qp + kp], qkv[qp + kp:qp + 2 * kp]
            gu = w[p + "mlp.gate_up_proj.weight"]
            inter = gu.shape[0] // 2
            gate, up = gu[:inter], gu[inter:]  # Phi3MLP: gate, up = chunk(2)
        else:
            q = w[p + "self_attn.q_proj.weight"]
            k = w[p + "self_attn.k_proj.weight"]
            v = w[p + "self_attn.v_proj.weight"]
            gate = w[p + "mlp.gate_proj.weight"]
            up = w[p + "mlp.up_proj.weight"]
        return q, k, v, gate, up

    def forward(self, ids, last_only=False):
        """Logits [T, vocab] for the token ids (positions 0..T-1); [1, vocab] if last_only."""
        c, w = self.cfg, self.w
        x = self.hidden(ids, last_only)
        head = w["model.embed_tokens.weight"] if c.tied else w["lm_head.weight"]
        return x @ head.T

    def hidden(self, ids, last_only=False):
        """The final hidden states [T, hidden] (after the model's last norm: lm_head's input)."""
        c, w = self.cfg, self.w
        T = len(ids)
        x = w["model.embed_tokens.weight"][np.asarray(ids)]
        pos = np.arange(T, dtype=np.float64)
        freqs = np.outer(pos, self.inv_freq)
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb), np.sin(emb)
        mask = np.triu(np.full((T, T), -np.inf), k=1)
        group = c.heads // c.kv_heads
        for i in range(c.layers):
            p = f"model.layers.{i}."
            qw, kw, vw, gate_w, up_w = self.layer_weights(i)
            h = rms_norm(x, w[p + "input_layernorm.weight"], c.eps)
            q, k, v = h @ qw.T, h @ kw.T, h @ vw.T
            if c.family == "qwen2":
                q = q + w[p + "self_attn.q_proj.bias"]
                k = k + w[p + "self_attn.k_proj.bias"]
                v = v + w[p + "self_attn.v_proj.bias"]
            q = q.reshape(T, c.heads, c.head_dim).transpose(1, 0, 2)
            k = k.reshape(T, c.kv_heads, c.head_dim).transpose(1, 0, 2)
            v = v.reshape(T, c.kv_heads, c.head_dim).transpose(1, 0, 2)
            if c.family == "qwen3":
                q = rms_norm(q, w[p + "self_attn.q_norm.weight"], c.eps)
                k = rms_norm(k, w[p + "self_attn.k_norm.weight"], c.eps)
            q = apply_rope(q, cos, sin)
            k = apply_rope(k, cos, sin)
            k = np.repeat(k, group, axis=0)  # repeat_kv: head j uses kv head j // group
            v = np.repeat(v, group, axis=0)
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(c.head_dim) + mask
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = (probs @ v).transpose(1, 0, 2).reshape(T, c.heads * c.head_dim)
            x = x + attn @ w[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], c.eps)
            mlp = (act_fn(h @ gate_w.T, c.act) * (h @ up_w.T)) @ w[p + "mlp.down_proj.weight"].T
            x = x + mlp
        if last_only:
            x = x[-1:]
        return rms_norm(x, w["model.norm.weight"], c.eps)


def pool(hidden, kind, normalize):
    """vLLM's / sentence-transformers' pooling of hidden states [T, H]."""
    if kind == "LAST":
        v = hidden[-1]
    elif kind == "MEAN":
        v = hidden.mean(axis=0)
    elif kind == "CLS":
        v = hidden[0]
    else:
        raise ValueError(f"unknown pooling {kind}")
    if normalize:
        v = v / max(np.linalg.norm(v), 1e-12)
    return v


# ----------------------------------------------------------------- decoding for humans


def decode_pieces(model_dir, ids):
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    inv = {v: k for k, v in tok["model"]["vocab"].items()}
    for t in tok.get("added_tokens", []):
        inv[t["id"]] = t["content"]
    out = bytearray()
    for i in ids:
        piece = inv.get(i, f"<?{i}>")
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
            out += bytes([int(piece[3:5], 16)])
        else:
            out += piece.replace("\u2581", " ").encode("utf-8")
    return out.decode("utf-8", errors="replace")


def main(argv=None):
    ap = argparse.ArgumentParser(description="numpy reference forward pass")
    ap.add_argument("model_dir")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--decode", action="store_true", help="print prompt + greedy text on stderr")
    ap.add_argument("--all-logits", action="store_true", help="also output logits of every prompt position")
    ap.add_argument("--pool", choices=["LAST", "MEAN", "CLS"],
                    help="only output the prompt's pooled final hidden states as \"embedding\"")
    ap.add_argument("--no-normalize", action="store_true", help="with --pool: do not L2-normalise")
    ap.add_argument("--lora", help="a PEFT LoRA adapter directory, merged into the weights")
    a = ap.parse_args(argv)
    ids = [int(t) for t in a.prompt_ids.split(",") if t.strip()]
    if not ids:
        ap.error("--prompt-ids is empty")
    model = Model(a.model_dir, a.lora)
    if a.pool:
        v = pool(model.hidden(ids), a.pool, not a.no_normalize)
        json.dump({"embedding": [float(x) for x in v]}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    logits = model.forward(ids)
    result = {"last_logits": [float(v) for v in logits[-1]]}
    if a.all_logits:
        result["logits"] = [[float(v) for v in row] for row in logits]
    seq = list(ids)
    greedy = []
    for step in range(a.steps):
        if step > 0:
            logits = model.forward(seq, last_only=True)
        nxt = int(np.argmax(logits[-1]))
        greedy.append(nxt)
        seq.append(nxt)
    result["greedy_ids"] = greedy
    if a.decode:
        text = decode_pieces(a.model_dir, greedy)
        print(f"prompt: {decode_pieces(a.model_dir, ids)!r}\ngreedy: {text!r}", file=sys.stderr)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
