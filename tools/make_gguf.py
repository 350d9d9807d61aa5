#!/usr/bin/python3
"""Converts a Hugging Face model directory into a GGUF v3 file.

    /usr/bin/python3 tools/make_gguf.py MODEL_DIR OUT.gguf \
        [--outtype f32|f16|bf16|q8_0|q4_0] [--metadata-json OUT.json]
    /usr/bin/python3 tools/make_gguf.py --vocab-only TOKENIZER_DIR OUT.gguf ...

MODEL_DIR holds config.json, model.safetensors (or model-*.safetensors
shards), tokenizer.json and tokenizer_config.json. --vocab-only writes only
the tokenizer metadata and placeholder "llama" hyperparameters (no tensors;
TOKENIZER_DIR needs no config.json), as llama.cpp's vocabulary-only files;
OUT.gguf may then be "-" to write no GGUF at all, for --metadata-json alone.
--metadata-json writes the GGUF metadata as one JSON object keyed by the GGUF
keys (arrays as JSON arrays), which is what halo's GGUF reader hands to
Tokenizer::from_json.

Written from the GGUF format description and llama.cpp's naming conventions
(numpy + the standard library; no llama.cpp code). Architectures:
LlamaForCausalLM / MistralForCausalLM -> "llama", Qwen2ForCausalLM -> "qwen2",
Qwen3ForCausalLM -> "qwen3", Phi3ForCausalLM -> "phi3" (fused attn_qkv and
ffn_up = gate rows then up rows, as in the Hugging Face checkpoint; no
rope_scaling). A config with rope_scaling is refused.

Weights: 1-D tensors (norms, biases) are always F32; 2-D tensors get
--outtype, except that a tensor whose rows are not a multiple of 32 long is
written F16 when --outtype is q8_0 or q4_0.

Rotary layout: for architecture "llama" the rows of attn_q and attn_k are
PERMUTED, as llama.cpp's converter does. Hugging Face stores each head's
rotary dimensions half-split (the pairs rotated together are rows i and
i + head_dim/2); GGUF "llama" expects them interleaved (rows 2i and 2i + 1).
So within each head (q: attention.head_count heads, k: head_count_kv heads)
GGUF row 2i = HF row i and GGUF row 2i + 1 = HF row i + head_dim/2. A loader
that wants the Hugging Face layout must undo this. qwen2 and qwen3 keep the
Hugging Face layout (llama.cpp runs them in "neox" rope mode).

Tokenizer (tokenizer.ggml.*), following what llama.cpp's converter writes:
  - SentencePiece-style BPE (byte_fallback, "▁" spaces: Llama 2, Mistral,
    pkgchat-5m): model "llama", pre "default", tokens = the vocabulary by id,
    scores derived from the merge ranks (the token made by merge number r
    scores -r; tokens made by no merge score lower than all of those, in id
    order; control, unknown and byte tokens 0), so a SentencePiece-style
    tokenizer that merges the best-scoring pair reproduces the BPE merges;
    token_type 2 unknown, 3 control (special added tokens), 4 user-defined
    (other added tokens), 6 byte (<0xNN>), 1 normal; add_space_prefix from
    the normalizer/pre-tokenizer (whether a "▁" is prepended).
  - byte-level BPE (Llama 3, Qwen): model "gpt2", pre from the split regex
    ("llama-bpe" for Llama 3's, "qwen2" for Qwen's), tokens, token_type (3 for
    special added tokens and added tokens that look like <|...|>, 4 for other
    added tokens), merges as "a b" strings. Ids without a token are written as
    [PADn] with token_type 5 (unused).
  - bos/eos/unknown/padding token ids, add_bos_token/add_eos_token (what the
    Hugging Face tokenizer does: tokenizer_config.json's add_*_token for
    Llama-class tokenizers, else the post-processor template), and
    tokenizer.chat_template from tokenizer_config.json.
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ggml_blocks  # noqa: E402

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# GGUF metadata value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, T_UINT64, T_INT64, \
    T_FLOAT64 = range(13)

# outtype -> (ggml type name, general.file_type)
OUTTYPES = {"f32": ("f32", 0), "f16": ("f16", 1), "bf16": ("bf16", 32), "q8_0": ("q8_0", 7), "q4_0": ("q4_0", 2)}

ARCHES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Phi3ForCausalLM": "phi3",
}

# Split regexes of the byte-level BPE families -> tokenizer.ggml.pre
PRE_REGEXES = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "llama-bpe",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+":
        "qwen2",
}

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6
LLAMA_CLASSES = {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer", "CodeLlamaTokenizerFast",
                 "GemmaTokenizer", "GemmaTokenizerFast"}


class ConvertError(Exception):
    pass


# ---------------------------------------------------------------- safetensors

def read_safetensors(path):
    """-> {name: float32 ndarray}. Header: u64 length, JSON, then the data."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            f.seek(base + b)
            raw = f.read(e - b)
            dt = info["dtype"]
            if dt == "BF16":
                a = ggml_blocks.bf16_to_f32(np.frombuffer(raw, dtype="<u2"))
            elif dt == "F16":
                a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
            elif dt == "F32":
                a = np.frombuffer(raw, dtype="<f4").astype(np.float32)
            else:
                raise ConvertError(f"{path}: tensor {name} has unsupported dtype {dt}")
            out[name] = a.reshape(info["shape"])
    return out


def read_weights(model_dir):
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        raise ConvertError(f"{model_dir}: no .safetensors file")
    w = {}
    for f in files:
        w.update(read_safetensors(os.path.join(model_dir, f)))
    return w


# ---------------------------------------------------------------- tokenizer

def _byte_token(t):
    return re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t) is not None


def _looks_special(t):
    return (t.startswith("<|") and t.endswith("|>")) or t in ("<pad>", "<mask>", "<unk>", "<s>", "</s>")


def _token_str(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def _template_ids(post):
    """TemplateProcessing (possibly inside a Sequence) -> (prefix ids, suffix ids)."""
    if not isinstance(post, dict):
        return [], []
    if post.get("type") == "Sequence":
        pre, suf = [], []
        for p in post.get("processors", []):
            a, b = _template_ids(p)
            pre += a
            suf += b
        return pre, suf
    if post.get("type") != "TemplateProcessing":
        return [], []
    pre, suf, seen = [], [], False
    for item in post.get("single", []):
        if "Sequence" in item:
            seen = True
        elif "SpecialToken" in item:
            ids = post["special_tokens"][item["SpecialToken"]["id"]]["ids"]
            (suf if seen else pre).extend(ids)
    return pre, suf


def _prepends_space(tj):
    def walk(node):
        if not isinstance(node, dict):
            return False
        t = node.get("type")
        if t == "Prepend":
            return node.get("prepend") == "\u2581"
        if t == "Metaspace":
            return node.get("prepend_scheme", "always" if node.get("add_prefix_space", True) else "never") != "never"
        return any(walk(c) for c in node.get("normalizers", []) + node.get("pretokenizers", []))
    return walk(tj.get("normalizer")) or walk(tj.get("pre_tokenizer"))


def _split_regex(pre):
    if not isinstance(pre, dict):
        return None
    if pre.get("type") == "Split":
        return pre.get("pattern", {}).get("Regex")
    for p in pre.get("pretokenizers", []):
        r = _split_regex(p)
        if r:
            return r
    return None


def tokenizer_metadata(tok_dir, config=None):
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    cfg = {}
    cfg_path = os.path.join(tok_dir, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    model = tj.get("model", {})
    if model.get("type", "BPE") != "BPE":
        raise ConvertError(f"{tok_dir}: tokenizer model {model.get('type')} is not BPE")
    vocab = dict(model["vocab"])
    merges = [m.split(" ", 1) if isinstance(m, str) else list(m) for m in model.get("merges", [])]
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    n = max(list(vocab.values()) + list(added.keys())) + 1
    if config and config.get("vocab_size", 0) > n:
        n = config["vocab_size"]
    tokens = [None] * n
    for t, i in vocab.items():
        tokens[i] = t
    for i, a in added.items():
        tokens[i] = a["content"]
    unk = model.get("unk_token")
    spm = bool(model.get("byte_fallback"))
    md = {}
    types = []
    if spm:
        md["tokenizer.ggml.model"] = "llama"
        md["tokenizer.ggml.pre"] = "default"
        rank = {}
        for r, (a, b) in enumerate(merges):
            rank.setdefault(a + b, r)
        scores = []
        for i, t in enumerate(tokens):
            if t is None:
                tokens[i] = f"[PAD{i}]"
                types.append(TOKEN_UNUSED)
                scores.append(0.0)
                continue
            if i in added:
                ty = TOKEN_CONTROL if added[i].get("special") else TOKEN_USER_DEFINED
                if t == unk:
                    ty = TOKEN_UNKNOWN
            elif t == unk:
                ty = TOKEN_UNKNOWN
            elif _byte_token(t):
                ty = TOKEN_BYTE
            else:
                ty = TOKEN_NORMAL
            types.append(ty)
            if ty == TOKEN_NORMAL:
                scores.append(-float(rank[t]) if t in rank else -float(len(merges) + i))
            else:
                scores.append(0.0)
        md["tokenizer.ggml.tokens"] = tokens
        md["tokenizer.ggml.scores"] = scores
        md["tokenizer.ggml.token_type"] = types
        md["tokenizer.ggml.add_space_prefix"] = _prepends_space(tj)
    else:
        regex = _split_regex(tj.get("pre_tokenizer"))
        pre = PRE_REGEXES.get(regex)
        if pre is None:
            raise ConvertError(f"{tok_dir}: unknown byte-level pre-tokenizer regex {regex!r} "
                               f"(known: {', '.join(sorted(set(PRE_REGEXES.values())))})")
        md["tokenizer.ggml.model"] = "gpt2"
        md["tokenizer.ggml.pre"] = pre
        for i, t in enumerate(tokens):
            if t is None:
                tokens[i] = f"[PAD{i}]"
                types.append(TOKEN_UNUSED)
            elif i in added:
                types.append(TOKEN_CONTROL if added[i].get("special") or _looks_special(t) else TOKEN_USER_DEFINED)
            else:
                types.append(TOKEN_NORMAL)
        md["tokenizer.ggml.tokens"] = tokens
        md["tokenizer.ggml.token_type"] = types
        md["tokenizer.ggml.merges"] = [f"{a} {b}" for a, b in merges]

    ids = {t: i for i, t in enumerate(tokens)}

    def special_id(key, cfg_key, config_key=None):
        t = _token_str(cfg.get(cfg_key))
        if t is not None and t in ids:
            md[key] = ids[t]
        elif config_key and config and isinstance(config.get(config_key), int):
            md[key] = config[config_key]
        elif config_key and config and isinstance(config.get(config_key), list) and config[config_key]:
            md[key] = config[config_key][0]

    special_id("tokenizer.ggml.bos_token_id", "bos_token", "bos_token_id")
    special_id("tokenizer.ggml.eos_token_id", "eos_token", "eos_token_id")
    special_id("tokenizer.ggml.unknown_token_id", "unk_token")
    special_id("tokenizer.ggml.padding_token_id", "pad_token", "pad_token_id")
    if "tokenizer.ggml.unknown_token_id" not in md and unk in ids:
        md["tokenizer.ggml.unknown_token_id"] = ids[unk]

    # What the Hugging Face tokenizer adds around a sequence.
    if cfg.get("tokenizer_class") in LLAMA_CLASSES:
        add_bos = bool(cfg.get("add_bos_token", True))
        add_eos = bool(cfg.get("add_eos_token", False))
    else:
        pre_ids, suf_ids = _template_ids(tj.get("post_processor"))
        add_bos = bool(pre_ids)
        add_eos = bool(suf_ids)
        if pre_ids:
            md["tokenizer.ggml.bos_token_id"] = pre_ids[0]
        if suf_ids:
            md["tokenizer.ggml.eos_token_id"] = suf_ids[-1]
    md["tokenizer.ggml.add_bos_token"] = add_bos
    md["tokenizer.ggml.add_eos_token"] = add_eos
    tmpl = cfg.get("chat_template")
    if isinstance(tmpl, list):  # [{"name": ..., "template": ...}]
        tmpl = next((t["template"] for t in tmpl if t.get("name") == "default"), tmpl[0]["template"] if tmpl else None)
    if isinstance(tmpl, str):
        md["tokenizer.chat_template"] = tmpl
    return md


# ---------------------------------------------------------------- model

def permute_rotary(w, n_head):
    """HF half-split rotary rows -> GGUF "llama" interleaved rows, per head."""
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def model_metadata(config, arch):
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or hidden // heads
    md = {
        "general.architecture": arch,
        f"{arch}.context_length": int(config.get("max_position_embeddings", 2048)),
        f"{arch}.embedding_length": hidden,
        f"{arch}.block_count": config["num_hidden_layers"],
        f"{arch}.feed_forward_length": config["intermediate_size"],
        f"{arch}.attention.head_count": heads,
        f"{arch}.attention.head_count_kv": kv,
        f"{arch}.attention.layer_norm_rms_epsilon": float(config.get("rms_norm_eps", 1e-6)),
        f"{arch}.rope.freq_base": float(config.get("rope_theta", 10000.0)),
        f"{arch}.rope.dimension_count": head_dim,
    }
    if head_dim != hidden // heads:
        md[f"{arch}.attention.key_length"] = head_dim
        md[f"{arch}.attention.value_length"] = head_dim
    if config.get("vocab_size"):
        md[f"{arch}.vocab_size"] = config["vocab_size"]
    if config.get("rope_scaling"):
        raise ConvertError(f"rope_scaling {config['rope_scaling']} is not supported")
    if arch == "phi3" and config.get("sliding_window"):
        md["phi3.attention.sliding_window"] = config["sliding_window"]
    return md


def model_tensors(weights, config, arch):
    """-> list of (gguf name, float32 array) in llama.cpp's naming."""
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    w = {k[len("model."):] if k.startswith("model.") else k: v for k, v in weights.items()}
    out = [("token_embd.weight", w.pop("embed_tokens.weight"))]
    names = {
        "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
        "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
        # phi3: fused q/k/v rows (q, then k, then v) and fused gate/up rows (gate, then up)
        "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
    }
    for n in range(config["num_hidden_layers"]):
        for hf, gg in names.items():
            for suffix in ("weight", "bias"):
                key = f"layers.{n}.{hf}.{suffix}"
                if key not in w:
                    continue
                t = w.pop(key)
                if arch == "llama" and gg in ("attn_q", "attn_k"):
                    t = permute_rotary(t, heads if gg == "attn_q" else kv)
                out.append((f"blk.{n}.{gg}.{suffix}", t))
    out.append(("output_norm.weight", w.pop("norm.weight")))
    lm = w.pop("lm_head.weight", None)
    if lm is not None and not config.get("tie_word_embeddings", False):
        out.append(("output.weight", lm))
    w = {k: v for k, v in w.items() if not k.endswith("rotary_emb.inv_freq")}
    if w:
        raise ConvertError(f"unexpected tensors: {', '.join(sorted(w)[:8])}")
    return out


def tensor_type(t, outtype):
    if t.ndim == 1:
        return "f32"
    if outtype in ("q8_0", "q4_0") and t.shape[-1] % 32:
        return "f16"
    return outtype


# ---------------------------------------------------------------- GGUF writer

def _s(v):
    b = v.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value_type(v):
    if isinstance(v, bool):
        return T_BOOL
    if isinstance(v, int):
        return T_UINT32 if 0 <= v < 2**32 else T_INT64
    if isinstance(v, float):
        return T_FLOAT32
    if isinstance(v, str):
        return T_STRING
    if isinstance(v, list):
        return T_ARRAY
    raise ConvertError(f"cannot write metadata value {v!r}")


KEY_TYPES = {  # keys whose type is not what _value_type would pick
    "tokenizer.ggml.token_type": (T_ARRAY, T_INT32),
    "tokenizer.ggml.scores": (T_ARRAY, T_FLOAT32),
}


def _pack_scalar(t, v):
    fmt = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I", T_INT32: "<i",
           T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q", T_FLOAT64: "<d"}
    if t == T_STRING:
        return _s(v)
    return struct.pack(fmt[t], v)


def _pack_kv(key, v):
    out = _s(key)
    t, sub = KEY_TYPES.get(key, (_value_type(v), None))
    out += struct.pack("<I", t)
    if t == T_ARRAY:
        if sub is None:
            sub = _value_type(v[0]) if v else T_UINT32
            if sub == T_UINT32 and any(x < 0 for x in v):
                sub = T_INT32
        out += struct.pack("<IQ", sub, len(v))
        if sub == T_INT32:
            out += np.asarray(v, dtype="<i4").tobytes()
        elif sub == T_FLOAT32:
            out += np.asarray(v, dtype="<f4").tobytes()
        else:
            out += b"".join(_pack_scalar(sub, x) for x in v)
    else:
        out += _pack_scalar(t, v)
    return out


def write_gguf(path, metadata, tensors):
    """tensors: list of (name, ggml type name, shape (row-major, outermost first), data bytes)."""
    md = dict(metadata)
    md["general.alignment"] = ALIGNMENT
    head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(md))
    head += b"".join(_pack_kv(k, v) for k, v in md.items())
    offset = 0
    infos = b""
    for name, tname, shape, data in tensors:
        dims = list(reversed(shape))  # ne[0] is the row length
        infos += _s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", ggml_blocks.TYPES[tname][0], offset)
        offset += (len(data) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    with open(path, "wb") as f:
        f.write(head + infos)
        f.write(b"\0" * (-f.tell() % ALIGNMENT))
        for _, _, _, data in tensors:
            f.write(data)
            f.write(b"\0" * (-len(data) % ALIGNMENT))


def convert(model_dir, out, outtype="f16", vocab_only=False, metadata_json=None):
    config = None
    md = {}
    tensors = []
    if not vocab_only:
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
        archs = config.get("architectures") or []
        arch = next((ARCHES[a] for a in archs if a in ARCHES), None)
        if arch is None:
            raise ConvertError(f"{model_dir}: unsupported architectures {archs} (known: {', '.join(ARCHES)})")
        md.update(model_metadata(config, arch))
        md["general.name"] = os.path.basename(os.path.normpath(model_dir))
        md["general.file_type"] = OUTTYPES[outtype][1]
        for name, t in model_tensors(read_weights(model_dir), config, arch):
            tn = tensor_type(t, OUTTYPES[outtype][0])
            tensors.append((name, tn, list(t.shape), ggml_blocks.quantize(tn, t.reshape(-1))))
    else:
        # llama.cpp reads the hyperparameters even of a vocabulary-only file:
        # placeholders of a one-layer "llama".
        md.update(model_metadata({"hidden_size": 64, "num_attention_heads": 1, "num_hidden_layers": 1,
                                  "intermediate_size": 64, "max_position_embeddings": 4096}, "llama"))
        md["general.name"] = os.path.basename(os.path.normpath(model_dir))
        md["general.file_type"] = OUTTYPES["f32"][1]
    md.update(tokenizer_metadata(model_dir, config))
    if out != "-":
        write_gguf(out, md, tensors)
    if metadata_json:
        full = dict(md)
        full["general.alignment"] = ALIGNMENT
        with open(metadata_json, "w", encoding="utf-8") as f:
            json.dump(full, f, ensure_ascii=False)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model_dir")
    p.add_argument("out")
    p.add_argument("--outtype", choices=sorted(OUTTYPES), default="f16")
    p.add_argument("--vocab-only", action="store_true")
    p.add_argument("--metadata-json")
    a = p.parse_args(argv)
    try:
        convert(a.model_dir, a.out, a.outtype, a.vocab_only, a.metadata_json)
    except (ConvertError, OSError, KeyError, ValueError) as e:
        sys.stderr.write(f"make_gguf: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
