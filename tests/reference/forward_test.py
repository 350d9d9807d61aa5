#!/usr/bin/python3
"""Self-checks of the numpy reference forward pass (forward.py).

    /usr/bin/python3 tests/reference/forward_test.py

Each check rewrites a generated model into an equivalent one in another form
(fused Phi-3 tensors, GQA expanded to MHA, tied -> explicit lm_head) and
expects the same logits, or checks a formula against hand-computed values.
"""
import json
import math
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))

import forward  # noqa: E402
import make_test_model  # noqa: E402

IDS = [1, 17, 300, 42, 9, 4000, 123, 5]


def logits_of(model_dir, ids=IDS):
    return forward.Model(model_dir).forward(ids)


def rewrite(src, dst, config_edit, weights_edit):
    """Copies model src to dst (fp32) with an edited config and weights."""
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(src, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    w = forward.read_weights(src)
    config_edit(cfg)
    w = weights_edit(cfg, w)
    with open(os.path.join(dst, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    make_test_model.write_safetensors(os.path.join(dst, "model.safetensors"),
                                      [(k, v.astype(np.float32)) for k, v in w.items()], "F32")


class ForwardSelfCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="halo_ref_")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def gen(self, name, family, *extra):
        out = os.path.join(self.tmp, name)
        make_test_model.main(["--family", family, "--out", out, "--dtype", "fp32", *extra])
        return out

    def test_phi3_fused_equals_llama(self):
        src = self.gen("llama_for_phi3", "llama")

        def cfg_edit(c):
            c["architectures"] = ["Phi3ForCausalLM"]
            c["model_type"] = "phi3"

        def w_edit(c, w):
            out = {}
            for k, v in w.items():
                if k.endswith("self_attn.q_proj.weight"):
                    p = k[: -len("q_proj.weight")]
                    out[p + "qkv_proj.weight"] = np.concatenate(
                        [w[p + "q_proj.weight"], w[p + "k_proj.weight"], w[p + "v_proj.weight"]])
                elif k.endswith("mlp.gate_proj.weight"):
                    p = k[: -len("gate_proj.weight")]
                    out[p + "gate_up_proj.weight"] = np.concatenate([w[p + "gate_proj.weight"], w[p + "up_proj.weight"]])
                elif any(k.endswith(s) for s in ("k_proj.weight", "v_proj.weight", "up_proj.weight")):
                    continue
                else:
                    out[k] = v
            return out

        dst = os.path.join(self.tmp, "phi3_fused")
        rewrite(src, dst, cfg_edit, w_edit)
        np.testing.assert_allclose(logits_of(dst), logits_of(src), rtol=0, atol=1e-12)

    def test_gqa_equals_expanded_mha(self):
        src = self.gen("gqa", "qwen2", "--heads", "4", "--kv-heads", "2")
        group = 2

        def cfg_edit(c):
            c["num_key_value_heads"] = c["num_attention_heads"]

        def w_edit(c, w):
            hd = c["hidden_size"] // c["num_attention_heads"]
            out = dict(w)
            for k, v in w.items():
                if any(s in k for s in ("k_proj", "v_proj")):
                    heads = v.reshape(-1, hd, *v.shape[1:])
                    out[k] = np.repeat(heads, group, axis=0).reshape(-1, *v.shape[1:])
            return out

        dst = os.path.join(self.tmp, "mha")
        rewrite(src, dst, cfg_edit, w_edit)
        np.testing.assert_allclose(logits_of(dst), logits_of(src), rtol=0, atol=1e-12)

    def test_tied_equals_explicit_lm_head(self):
        src = self.gen("tied", "qwen3", "--tie-embeddings")

        def cfg_edit(c):
            c["tie_word_embeddings"] = False

        def w_edit(c, w):
            out = dict(w)
            out["lm_head.weight"] = w["model.embed_tokens.weight"]
            return out

        dst = os.path.join(self.tmp, "untied")
        rewrite(src, dst, cfg_edit, w_edit)
        np.testing.assert_allclose(logits_of(dst), logits_of(src), rtol=0, atol=1e-12)

    def test_causal_prefix(self):
        for fam in ("llama3", "qwen3", "phi3"):
            d = self.gen("causal_" + fam, fam)
            full = logits_of(d)
            for n in (1, 3, 6):
                np.testing.assert_allclose(logits_of(d, IDS[:n])[-1], full[n - 1], rtol=0, atol=1e-10)

    def test_llama3_frequencies(self):
        cfg = forward.Config({
            "architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 4, "rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})
        got = forward.inv_frequencies(cfg)
        base = [500000.0 ** (-2 * i / 16) for i in range(8)]
        for i in range(8):
            wavelen = 2 * math.pi / base[i]
            if wavelen < 8192 / 4:
                want = base[i]
            elif wavelen > 8192 / 1:
                want = base[i] / 8
            else:
                s = (8192 / wavelen - 1) / (4 - 1)
                want = (1 - s) * base[i] / 8 + s * base[i]
            self.assertAlmostEqual(got[i] / want, 1.0, places=12, msg=f"i={i}")
        # The three regions all occur for this config.
        self.assertAlmostEqual(got[0], base[0])
        self.assertAlmostEqual(got[7] / base[7], 1 / 8)
        self.assertTrue(base[4] / 8 < got[4] < base[4])

    def test_linear_scaling(self):
        cfg = forward.Config({
            "architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 4,
            "rope_scaling": {"type": "linear", "factor": 4.0}})
        base = 1.0 / (10000.0 ** (np.arange(0, 16, 2) / 16))
        np.testing.assert_allclose(forward.inv_frequencies(cfg), base / 4.0)

    def test_bf16_rounding(self):
        a = np.array([1.0, 1.00390625, 1.005859375, -2.5, 3.0e-3], dtype=np.float32)
        raw = make_test_model.to_bytes(a, "BF16")
        back = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        # 1 + 2^-8 is a tie -> even (1.0); 1 + 1.5*2^-8 rounds up to 1 + 2^-7.
        np.testing.assert_array_equal(back[:4], np.array([1.0, 1.0, 1.0078125, -2.5], dtype=np.float32))
        self.assertLess(abs(back[4] - a[4]) / a[4], 2 ** -8)

    def test_pkgchat_greedy_is_text(self):
        d = os.path.join(REPO, "models", "pkgchat-5m")
        # <s><|user|>\nWhat is curl?<|end|>\n<|assistant|>\n
        prompt = [1, 3, 17, 4053, 321, 300, 2399, 4026, 4061, 5, 17, 4, 17]
        m = forward.Model(d)
        seq = list(prompt)
        for _ in range(12):
            seq.append(int(np.argmax(m.forward(seq, last_only=True)[-1])))
        text = forward.decode_pieces(d, seq[len(prompt):])
        letters = sum(ch.isalpha() or ch == " " for ch in text)
        self.assertGreater(letters / max(1, len(text)), 0.8, text)
        self.assertGreater(text.count(" "), 3, text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
