#!/usr/bin/python3
"""Tests of tools/make_gguf.py and tools/ggml_blocks.py.

    /usr/bin/python3 tests/tools/make_gguf_test.py [--root HALO_SOURCE_DIR]

Writes models/pkgchat-5m and small random models (tools/make_test_model.py:
llama untied with a row length that is not a multiple of 32, qwen2 with
biases, qwen3 with head_dim != hidden/heads, phi3) to GGUF in every outtype
and reads each file back with the minimal GGUF reader below, which shares no
code with the writer: header, kv count, tensor infos, alignment, and every
tensor's values against the original safetensors (Q8_0 within max|x|/254 of
its block, Q4_0 within max|x|/8, F16/BF16 within their rounding, F32 exact,
q/k rows of "llama" permuted to the interleaved rotary layout). Also checks
ggml_blocks.py's K-quant dequantization against blocks packed here from the
layout description. numpy + the standard library only.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if "--root" in sys.argv:
    i = sys.argv.index("--root")
    ROOT = sys.argv[i + 1]
    del sys.argv[i:i + 2]
PY = sys.executable
MAKE_GGUF = os.path.join(ROOT, "tools", "make_gguf.py")
BLOCKS = os.path.join(ROOT, "tools", "ggml_blocks.py")

GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 8: "Q8_0", 30: "BF16"}
OUTTYPE_GGML = {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0"}
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}


# ---------------------------------------------------------------- minimal GGUF reader

class Reader:
    def __init__(self, data):
        self.b = data
        self.p = 0

    def take(self, n):
        if self.p + n > len(self.b):
            raise ValueError(f"truncated at {self.p}")
        out = self.b[self.p:self.p + n]
        self.p += n
        return out

    def u(self, fmt):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))[0]

    def string(self):
        return self.take(self.u("Q")).decode("utf-8")

    def value(self, t):
        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
        if t in scalar:
            return self.u(scalar[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.u("I"), self.u("Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError(f"bad value type {t}")


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data)
    assert r.take(4) == b"GGUF", "magic"
    version, n_tensors, n_kv = r.u("I"), r.u("Q"), r.u("Q")
    md, types = {}, {}
    for _ in range(n_kv):
        k = r.string()
        t = r.u("I")
        types[k] = t
        md[k] = r.value(t)
    tensors = {}
    for _ in range(n_tensors):
        name = r.string()
        nd = r.u("I")
        dims = [r.u("Q") for _ in range(nd)]
        tensors[name] = {"dims": dims, "type": r.u("I"), "offset": r.u("Q")}
    align = md.get("general.alignment", 32)
    start = (r.p + align - 1) // align * align
    assert all(x == 0 for x in data[r.p:start]), "padding before the data is not zero"
    return {"version": version, "n_kv": n_kv, "md": md, "kv_types": types, "tensors": tensors, "data": data,
            "data_start": start, "align": align}


def tensor_bytes(t):
    n = int(np.prod(t["dims"]))
    name = GGML_TYPES[t["type"]]
    return {"F32": 4 * n, "F16": 2 * n, "BF16": 2 * n, "Q8_0": n // 32 * 34, "Q4_0": n // 32 * 18}[name]


def tensor_values(g, name):
    """Dequantized, as float64 with shape (rows, row length), written here from the layouts."""
    t = g["tensors"][name]
    off = g["data_start"] + t["offset"]
    raw = np.frombuffer(g["data"], dtype=np.uint8, count=tensor_bytes(t), offset=off)
    kind = GGML_TYPES[t["type"]]
    if kind == "F32":
        v = raw.view("<f4").astype(np.float64)
    elif kind == "F16":
        v = raw.view("<f2").astype(np.float64)
    elif kind == "BF16":
        v = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    elif kind == "Q8_0":
        blk = raw.reshape(-1, 34)
        d = blk[:, :2].copy().view("<f2").astype(np.float64)
        v = (d * blk[:, 2:].copy().view(np.int8)).reshape(-1)
    else:  # Q4_0: byte j = element j (low nibble) | element j + 16 (high nibble)
        blk = raw.reshape(-1, 18)
        d = blk[:, :2].copy().view("<f2").astype(np.float64)
        lo = (blk[:, 2:] & 15).astype(np.float64) - 8
        hi = (blk[:, 2:] >> 4).astype(np.float64) - 8
        v = (d * np.concatenate([lo, hi], axis=1)).reshape(-1)
    return v.reshape(list(reversed(t["dims"])))


def read_safetensors(model_dir):
    out = {}
    for fn in sorted(os.listdir(model_dir)):
        if not fn.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, fn), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            h = json.loads(f.read(n))
            blob = f.read()
        for k, info in h.items():
            if k == "__metadata__":
                continue
            b, e = info["data_offsets"]
            raw = np.frombuffer(blob[b:e], dtype=np.uint8)
            if info["dtype"] == "BF16":
                a = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
            elif info["dtype"] == "F16":
                a = raw.view("<f2")
            else:
                a = raw.view("<f4")
            out[k] = a.astype(np.float64).reshape(info["shape"])
    return out


def interleave_rotary(w, n_head):
    """Within each head, GGUF row 2i = HF row i, row 2i + 1 = HF row i + head_dim/2."""
    hd = w.shape[0] // n_head
    out = np.empty_like(w)
    for h in range(n_head):
        for i in range(hd // 2):
            out[h * hd + 2 * i] = w[h * hd + i]
            out[h * hd + 2 * i + 1] = w[h * hd + hd // 2 + i]
    return out


def run(*args):
    p = subprocess.run([PY, *args], capture_output=True, text=True)
    if p.returncode:
        raise AssertionError(f"{' '.join(args)} failed: {p.stderr}")
    return p


class MakeGguf(unittest.TestCase):
    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="halo_make_gguf_")
        cls.models = {"pkgchat-5m": os.path.join(ROOT, "models", "pkgchat-5m")}
        specs = {
            "rand-llama": ["--family", "llama", "--hidden", "64", "--intermediate", "80", "--heads", "4",
                           "--kv-heads", "2", "--dtype", "fp32"],
            "rand-qwen2": ["--family", "qwen2", "--tie-embeddings", "--dtype", "fp16"],
            "rand-qwen3": ["--family", "qwen3", "--head-dim", "32", "--heads", "4", "--hidden", "64"],
            "rand-p3": ["--family", "phi3"],
        }
        for name, args in specs.items():
            d = os.path.join(cls.tmp.name, name)
            run(os.path.join(ROOT, "tools", "make_test_model.py"), "--out", d, *args)
            cls.models[name] = d

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def convert(self, name, outtype):
        out = os.path.join(self.tmp.name, f"{name}-{outtype}.gguf")
        run(MAKE_GGUF, self.models[name], out, "--outtype", outtype)
        return read_gguf(out)

    def check_model(self, name, outtype):
        d = self.models[name]
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        g = self.convert(name, outtype)
        md = g["md"]
        self.assertEqual(g["version"], 3)
        self.assertEqual(g["n_kv"], len(md))
        arch = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
                "Phi3ForCausalLM": "phi3"}[cfg["architectures"][0]]
        self.assertEqual(md["general.architecture"], arch)
        self.assertEqual(md["general.alignment"], 32)
        self.assertEqual(g["kv_types"]["general.alignment"], 4)  # uint32
        self.assertEqual(md["general.file_type"], FILE_TYPES[outtype])
        heads = cfg["num_attention_heads"]
        kv = cfg["num_key_value_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        self.assertEqual(md[f"{arch}.block_count"], cfg["num_hidden_layers"])
        self.assertEqual(md[f"{arch}.embedding_length"], cfg["hidden_size"])
        self.assertEqual(md[f"{arch}.feed_forward_length"], cfg["intermediate_size"])
        self.assertEqual(md[f"{arch}.context_length"], cfg["max_position_embeddings"])
        self.assertEqual(md[f"{arch}.attention.head_count"], heads)
        self.assertEqual(md[f"{arch}.attention.head_count_kv"], kv)
        self.assertEqual(md[f"{arch}.rope.dimension_count"], head_dim)
        self.assertAlmostEqual(md[f"{arch}.rope.freq_base"], cfg["rope_theta"], places=3)
        self.assertAlmostEqual(md[f"{arch}.attention.layer_norm_rms_epsilon"], cfg["rms_norm_eps"], places=9)
        if head_dim != cfg["hidden_size"] // heads:
            self.assertEqual(md[f"{arch}.attention.key_length"], head_dim)
            self.assertEqual(md[f"{arch}.attention.value_length"], head_dim)
        else:
            self.assertNotIn(f"{arch}.attention.key_length", md)
        self.assertEqual(len(md["tokenizer.ggml.tokens"]), len(md["tokenizer.ggml.token_type"]))
        self.assertEqual(g["kv_types"]["tokenizer.ggml.tokens"], 9)

        # tensor infos: aligned, in bounds, not overlapping
        ends = []
        for tname, t in g["tensors"].items():
            self.assertEqual(t["offset"] % 32, 0, tname)
            ends.append((t["offset"], t["offset"] + tensor_bytes(t)))
        ends.sort()
        for (b0, e0), (b1, _) in zip(ends, ends[1:]):
            self.assertLessEqual(e0, b1)
        self.assertLessEqual(g["data_start"] + ends[-1][1], len(g["data"]))
        self.assertEqual(g["data_start"] % 32, 0)

        # names and values against the checkpoint
        w = read_safetensors(d)
        hf = {
            "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
            "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
            "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
            "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
            "mlp.down_proj.weight": "ffn_down.weight", "self_attn.q_proj.bias": "attn_q.bias",
            "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
            "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
            "self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight",
        }
        expected = {}
        for k, v in w.items():
            if k == "model.embed_tokens.weight":
                expected["token_embd.weight"] = v
            elif k == "model.norm.weight":
                expected["output_norm.weight"] = v
            elif k == "lm_head.weight":
                if not cfg.get("tie_word_embeddings"):
                    expected["output.weight"] = v
            else:
                parts = k.split(".")  # model.layers.N.<rest>
                rest = ".".join(parts[3:])
                gname = f"blk.{parts[2]}.{hf[rest]}"
                if arch == "llama" and rest == "self_attn.q_proj.weight":
                    v = interleave_rotary(v, heads)
                if arch == "llama" and rest == "self_attn.k_proj.weight":
                    v = interleave_rotary(v, kv)
                expected[gname] = v
        self.assertEqual(sorted(g["tensors"]), sorted(expected))
        if cfg.get("tie_word_embeddings"):
            self.assertNotIn("output.weight", g["tensors"])
        for tname, ref in expected.items():
            t = g["tensors"][tname]
            kind = GGML_TYPES[t["type"]]
            self.assertEqual(list(reversed(t["dims"])), list(ref.shape), tname)
            if ref.ndim == 1:
                self.assertEqual(kind, "F32", tname)
            elif outtype in ("q8_0", "q4_0") and ref.shape[-1] % 32:
                self.assertEqual(kind, "F16", tname)
            else:
                self.assertEqual(kind, OUTTYPE_GGML[outtype], tname)
            got = tensor_values(g, tname)
            if kind == "F32":
                np.testing.assert_array_equal(got, ref.astype(np.float32), err_msg=tname)
            elif kind == "F16":
                np.testing.assert_array_equal(got, ref.astype(np.float16), err_msg=tname)
            elif kind == "BF16":
                np.testing.assert_allclose(got, ref, rtol=2.0**-8, atol=0, err_msg=tname)
            else:
                blocks_ref = ref.reshape(-1, 32)
                amax = np.abs(blocks_ref).max(axis=1, keepdims=True)
                err = np.abs(got.reshape(-1, 32) - blocks_ref)
                # Q8_0: half a step of max/127; Q4_0: a step of max/8 at worst
                # (-max clamps to 7 steps); both up to fp16 rounding of d
                bound = amax / 254 * (1 + 2.0**-10) if kind == "Q8_0" else amax / 8 * (1 + 2.0**-10)
                self.assertTrue(np.all(err <= bound + 1e-12), f"{tname}: max excess {np.max(err - bound)}")

    def test_models_in_every_outtype(self):
        for name in self.models:
            for outtype in ("f32", "f16", "bf16", "q8_0", "q4_0"):
                with self.subTest(model=name, outtype=outtype):
                    self.check_model(name, outtype)

    def test_pkgchat_tokenizer_metadata(self):
        g = self.convert("pkgchat-5m", "f16")
        md = g["md"]
        with open(os.path.join(ROOT, "models", "pkgchat-5m", "tokenizer.json")) as f:
            tj = json.load(f)
        with open(os.path.join(ROOT, "models", "pkgchat-5m", "tokenizer_config.json")) as f:
            tc = json.load(f)
        self.assertEqual(md["tokenizer.ggml.model"], "llama")
        self.assertEqual(md["tokenizer.ggml.pre"], "default")
        toks = md["tokenizer.ggml.tokens"]
        for t, i in tj["model"]["vocab"].items():
            self.assertEqual(toks[i], t)
        types = md["tokenizer.ggml.token_type"]
        self.assertEqual(g["kv_types"]["tokenizer.ggml.token_type"], 9)
        self.assertEqual(types[toks.index("<unk>")], 2)
        self.assertEqual(types[toks.index("<s>")], 3)
        self.assertEqual(types[toks.index("<0x0A>")], 6)
        self.assertEqual(md["tokenizer.ggml.bos_token_id"], toks.index("<s>"))
        self.assertEqual(md["tokenizer.ggml.eos_token_id"], toks.index(tc["eos_token"]))
        self.assertIs(md["tokenizer.ggml.add_bos_token"], True)
        self.assertIs(md["tokenizer.ggml.add_eos_token"], False)
        self.assertIs(md["tokenizer.ggml.add_space_prefix"], False)  # its normalizer prepends nothing
        self.assertEqual(md["tokenizer.chat_template"], tc["chat_template"])
        # merge ranks become scores: the token made by an earlier merge scores higher
        scores = md["tokenizer.ggml.scores"]
        a, b = (x.split(" ") if isinstance(x, str) else x for x in tj["model"]["merges"][:2])
        self.assertGreater(scores[toks.index(a[0] + a[1])], scores[toks.index(b[0] + b[1])])

    def test_byte_level_tokenizers(self):
        for name, pre in (("llama3", "llama-bpe"), ("qwen3", "qwen2")):
            with self.subTest(name=name):
                out = os.path.join(self.tmp.name, f"{name}.json")
                run(MAKE_GGUF, "--vocab-only", os.path.join(ROOT, "tests", "data", "tokenizers", name), "-",
                    "--metadata-json", out)
                with open(out) as f:
                    md = json.load(f)
                self.assertEqual(md["tokenizer.ggml.model"], "gpt2")
                self.assertEqual(md["tokenizer.ggml.pre"], pre)
                self.assertIn("tokenizer.ggml.merges", md)
                self.assertNotIn("tokenizer.ggml.scores", md)
                self.assertIs(md["tokenizer.ggml.add_bos_token"], False)

    def test_q8_0_blocks_via_cli(self):
        rng = np.random.default_rng(1)
        x = (rng.standard_normal(32 * 50) * np.repeat(rng.uniform(0.01, 10, 50), 32)).astype(np.float32)
        x[:32] = 0  # an all-zero block
        src = os.path.join(self.tmp.name, "x.f32")
        q = os.path.join(self.tmp.name, "x.q8_0")
        back = os.path.join(self.tmp.name, "x.back")
        x.astype("<f4").tofile(src)
        run(BLOCKS, "quant", "q8_0", src, q)
        self.assertEqual(os.path.getsize(q), 50 * 34)
        run(BLOCKS, "dequant", "q8_0", q, back)
        y = np.fromfile(back, dtype="<f4").reshape(-1, 32)
        xb = x.reshape(-1, 32)
        amax = np.abs(xb).max(axis=1, keepdims=True)
        self.assertTrue(np.all(np.abs(y - xb) <= amax / 254 * (1 + 2.0**-10)))
        np.testing.assert_array_equal(y[0], 0)

    def test_k_quant_dequant(self):
        """Blocks packed here from the layout description; ggml_blocks must unpack them."""
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import ggml_blocks
        rng = np.random.default_rng(2)
        for kind in ("q4_k", "q5_k"):
            nb = 3
            d = rng.uniform(0.001, 0.1, nb).astype(np.float16)
            dmin = rng.uniform(0.001, 0.1, nb).astype(np.float16)
            sc = rng.integers(0, 64, (nb, 8))
            mn = rng.integers(0, 64, (nb, 8))
            q = rng.integers(0, 32 if kind == "q5_k" else 16, (nb, 256))
            raw = bytearray()
            for b in range(nb):
                s = [0] * 12
                for j in range(8):
                    if j < 4:
                        s[j] |= sc[b, j] & 63
                        s[j + 4] |= mn[b, j] & 63
                    else:
                        s[j + 4] |= (sc[b, j] & 15) | ((mn[b, j] & 15) << 4)
                        s[j - 4] |= (sc[b, j] >> 4) << 6
                        s[j] |= (mn[b, j] >> 4) << 6
                qs = [0] * 128
                qh = [0] * 32
                for j in range(8):  # sub-block j: chunk j // 2, low nibbles if j even
                    for l in range(32):
                        v = int(q[b, 32 * j + l])
                        qs[32 * (j // 2) + l] |= (v & 15) << (4 * (j % 2))
                        qh[l] |= (v >> 4) << j
                raw += d[b:b + 1].tobytes() + dmin[b:b + 1].tobytes() + bytes(s)
                if kind == "q5_k":
                    raw += bytes(qh)
                raw += bytes(qs)
            got = ggml_blocks.dequantize(kind, bytes(raw)).reshape(nb, 256)
            sub = np.repeat(np.arange(8), 32)
            want = (d.astype(np.float64)[:, None] * sc[:, sub] * q
                    - dmin.astype(np.float64)[:, None] * mn[:, sub])
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=kind)
        # Q6_K
        nb = 2
        d = rng.uniform(0.001, 0.1, nb).astype(np.float16)
        scales = rng.integers(-128, 128, (nb, 16))
        q = rng.integers(0, 64, (nb, 256))
        raw = bytearray()
        for b in range(nb):
            ql = [0] * 128
            qh = [0] * 64
            for i in range(256):
                h, r = divmod(i, 128)
                part, l = divmod(r, 32)  # part 0..3 of the half, l 0..31
                v = int(q[b, i])
                byte = 64 * h + l + (32 if part in (1, 3) else 0)
                ql[byte] |= (v & 15) << (4 if part >= 2 else 0)
                qh[32 * h + l] |= (v >> 4) << (2 * part)
            raw += bytes(ql) + bytes(qh) + scales[b].astype(np.int8).tobytes() + d[b:b + 1].tobytes()
        got = ggml_blocks.dequantize("q6_k", bytes(raw)).reshape(nb, 256)
        want = d.astype(np.float64)[:, None] * scales[:, np.arange(256) // 16] * (q - 32)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg="q6_k")

    def test_unsupported_architecture_is_refused(self):
        d = os.path.join(self.tmp.name, "bad")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"architectures": ["GPTNeoXForCausalLM"]}, f)
        p = subprocess.run([PY, MAKE_GGUF, d, os.path.join(d, "x.gguf")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("unsupported architectures", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
