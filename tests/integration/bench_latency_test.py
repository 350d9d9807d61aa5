"""`halo bench latency` end to end on --device cpu with the generated tiny
preset: the JSON report has every field, times and fractions are positive,
and the bytes and FLOPs it reports equal the ones computed here from the
shape alone. Bad flags fail naming the flag. Run by ctest with Debian's
python3."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ARGS = None
# The tiny preset (tools/halo/bench_latency.cpp), bf16 weights, untied lm_head.
V, H, I, L, HEADS, KV_HEADS = 256, 64, 128, 2, 4, 2
HD = H // HEADS
QUICK = ("--roofline-budget", "0.2", "--roofline-buffer-mib", "128", "--threads", "2")


def halo(*args, check=True):
    proc = subprocess.run([ARGS.halo, "--log-level", "warn", *args], capture_output=True, text=True,
                          timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"halo {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def run_json(*args):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "latency.json")
        proc = halo("bench", "latency", "--device", "cpu", "--preset", "tiny", *QUICK, *args,
                    "--output-json", path)
        with open(path) as f:
            return json.load(f), proc.stdout


def matmul_params():
    nq, nkv = HEADS * HD, KV_HEADS * HD
    return L * (H * nq + 2 * H * nkv + nq * H + 3 * H * I)


def stream_bytes(elem=2):
    """Bytes of every weight but the embedding: what one decode step streams."""
    norms = 2 * L * H + H
    return (matmul_params() + V * H + norms) * elem


class Report(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.out, cls.stdout = run_json("--batch-sizes", "1,4", "--input-len", "32", "--output-len", "4")

    def test_header_fields(self):
        o = self.out
        for key in ("model", "shape", "parameters", "matmul_parameters", "lm_head_parameters", "weight_stream_bytes",
                    "embedding_row_bytes", "device", "device_name", "device_kind", "prepare_seconds", "limits",
                    "input_len", "output_len", "warmup", "max_prefill_tokens", "roofline", "batches"):
            self.assertIn(key, o)
        self.assertEqual(o["shape"], {"vocab_size": V, "hidden_size": H, "intermediate_size": I, "num_layers": L,
                                      "num_heads": HEADS, "num_kv_heads": KV_HEADS, "head_dim": HD,
                                      "tied_embeddings": False, "weight_dtype": "bf16"})
        self.assertEqual(o["device"], "cpu")
        for key in ("max_num_seqs", "max_model_len", "max_num_batched_tokens", "block_size", "chunked_prefill",
                    "kv_bytes_per_block", "kv_bytes_per_token", "kv_blocks", "kv_cache_dtype"):
            self.assertIn(key, o["limits"])
        lim = o["limits"]
        self.assertGreaterEqual(lim["max_num_seqs"], 4)
        self.assertGreaterEqual(lim["max_model_len"], 36)
        # Every sequence of the largest batch owns blocks for input_len + output_len tokens.
        self.assertGreaterEqual(lim["kv_blocks"] * lim["block_size"], 4 * 36)
        self.assertEqual(o["parameters"], matmul_params() + 2 * V * H + 2 * L * H + H)
        self.assertEqual(o["weight_stream_bytes"], stream_bytes())
        self.assertIn("batch", self.stdout)
        self.assertIn("read bandwidth", self.stdout)
        self.assertIn("matmul peak", self.stdout)

    def test_roofline(self):
        r = self.out["roofline"]
        self.assertEqual(r["measured_on"], "host")
        self.assertTrue(r["applies_to_device"])
        self.assertGreater(r["read_bandwidth_bytes_per_s"], 0)
        self.assertGreaterEqual(r["read_bandwidth_passes"], 5)
        self.assertGreaterEqual(r["read_bandwidth_best_gb_per_s"], r["read_bandwidth_gb_per_s"])
        self.assertTrue(("matmul_peak_flops_per_s" in r) != ("matmul_peak_unavailable" in r), r)
        if "matmul_peak_flops_per_s" in r:
            self.assertGreater(r["matmul_peak_flops_per_s"], 0)

    def test_every_batch_has_positive_times_and_fractions(self):
        rows = self.out["batches"]
        self.assertEqual([r["batch_size"] for r in rows], [1, 4])
        peak = "matmul_peak_flops_per_s" in self.out["roofline"]
        for r in rows:
            p, d = r["prefill"], r["decode"]
            for key in ("tokens", "steps", "logits_rows", "ms", "tokens_per_s", "flops", "flops_per_s",
                        "tflops_per_s"):
                self.assertIn(key, p)
                self.assertGreater(p[key], 0, key)
            self.assertEqual("fraction_of_matmul_peak" in p, peak)
            if peak:
                self.assertGreater(p["fraction_of_matmul_peak"], 0)
            for key in ("steps", "step_ms_p50", "step_ms_p90", "step_ms_mean", "tokens_per_s",
                        "weight_bytes_per_step", "kv_bytes_per_step", "bytes_per_step", "bytes_per_s", "gb_per_s",
                        "fraction_of_read_bandwidth", "flops_per_step", "tflops_per_s"):
                self.assertIn(key, d)
                self.assertGreater(d[key], 0, key)
            self.assertEqual(d["kv_source"], "prefill")
            self.assertEqual(len(d["step_ms"]), 4)
            self.assertTrue(all(t > 0 for t in d["step_ms"]))
            self.assertLessEqual(d["step_ms_p50"], d["step_ms_p90"])

    def test_bytes_and_flops_follow_from_the_shape(self):
        lim = self.out["limits"]
        kv_elem = {"fp32": 4, "bf16": 2, "fp16": 2}[lim["kv_cache_dtype"]]
        kv_per_token = 2 * L * KV_HEADS * HD * kv_elem  # K and V of every layer (the CPU plugin's layout)
        self.assertEqual(lim["kv_bytes_per_token"], kv_per_token)
        self.assertEqual(lim["kv_bytes_per_block"], kv_per_token * lim["block_size"])
        n, out_len = 32, 4
        for r in self.out["batches"]:
            b, p, d = r["batch_size"], r["prefill"], r["decode"]
            weights = stream_bytes() + b * H * 2  # plus the embedding rows of the step's tokens
            self.assertEqual(d["weight_bytes_per_step"], weights)
            mean_ctx = n + (out_len + 1) / 2
            self.assertAlmostEqual(d["kv_bytes_per_step"], b * mean_ctx * kv_per_token, delta=1e-6)
            self.assertAlmostEqual(d["bytes_per_step"], weights + b * mean_ctx * kv_per_token, delta=1e-6)
            self.assertAlmostEqual(d["bytes_per_s"], d["bytes_per_step"] / (d["step_ms_p50"] / 1e3),
                                   delta=1e-6 * d["bytes_per_s"])
            self.assertEqual(p["tokens"], b * n)
            self.assertEqual(p["logits_rows"], b)
            attn = 4 * HEADS * HD * L * b * n * (n + 1) / 2
            flops = 2 * matmul_params() * b * n + 2 * V * H * b + attn
            self.assertAlmostEqual(p["flops"], flops, delta=1e-9 * flops)
            self.assertAlmostEqual(p["tokens_per_s"], b * n / (p["ms"] / 1e3), delta=1e-6 * p["tokens_per_s"])


class Skips(unittest.TestCase):
    def test_prefill_over_the_cap_is_skipped_and_decode_still_runs(self):
        out, stdout = run_json("--batch-sizes", "2", "--input-len", "32", "--output-len", "2",
                               "--max-prefill-tokens", "32", "--warmup", "0")
        [row] = out["batches"]
        self.assertIn("--max-prefill-tokens", row["prefill"]["skipped"])
        self.assertIn("prefill skipped", stdout)
        self.assertEqual(row["decode"]["kv_source"], "unfilled")
        self.assertGreater(row["decode"]["step_ms_p50"], 0)


class BadFlags(unittest.TestCase):
    def expect_error(self, args, fragment):
        proc = halo("bench", "latency", "--device", "cpu", *QUICK, *args, check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn(fragment, proc.stderr)

    def test_zero_batch_size(self):
        self.expect_error(["--preset", "tiny", "--batch-sizes", "0"], "--batch-sizes")

    def test_batch_size_that_is_not_a_number(self):
        self.expect_error(["--preset", "tiny", "--batch-sizes", "1,x"], "--batch-sizes")

    def test_unknown_preset(self):
        self.expect_error(["--preset", "nope"], "--preset")

    def test_model_and_preset_together(self):
        self.expect_error(["--preset", "tiny", "--model", "/nonexistent"], "--preset")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--halo", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
