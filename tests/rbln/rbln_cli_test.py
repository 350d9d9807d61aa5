"""End-to-end checks of --device rbln through the real `halo` binary: compile then
generate at TP 1/2/4 equals the CPU plugin, the static-limit errors, the memory
refusal, fault injection, the bench report and speculative decoding on verify
programs. Run by ctest with Debian's python3."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None
TMP = None
PROMPTS = ["What is curl?", "What is vim?", "Tell me about apt", "x", "What is a compiler?"]


def halo(*args, check=True, env=None, timeout=300):
    proc = subprocess.run([ARGS.halo, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"halo {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


# The simulator multiplies fp32 activations by the compiled weights, as the cpu
# plugin's reference kernels do; its fast path rounds activations to bf16 for
# its GEMM (vdpbf16ps or AMX's tdpbf16ps), which can move a near tie.
CPU_AS_SIMULATED = {"HALO_CPU_KERNELS": "reference"}


def generate_ids(model, device, *extra, env=None):
    if device == "cpu":
        env = {**CPU_AS_SIMULATED, **(env or {})}
    args = ["generate", model, "--device", device, "--output", "json", "--log-level", "warn",
            "--temperature", "0", "--max-tokens", "24", "--ignore-eos", *extra]
    out = halo(*args, env=env).stdout
    return [json.loads(line)["token_ids"] for line in out.splitlines() if line.strip()]


def load_json(path):
    with open(path) as f:
        return json.load(f)


def compile_model(src, name, *extra):
    out = os.path.join(TMP, name)
    if not os.path.exists(os.path.join(out, "manifest.json")):
        halo("compile", src, "--device", "rbln", "-o", out, "--log-level", "warn", *extra)
    return out


def prompt_args(chat=True):
    args = sum((["--prompt", p] for p in PROMPTS), [])
    return args + (["--chat"] if chat else [])


class CompileThenGenerate(unittest.TestCase):
    def check_equal(self, model_dir, chat, tps, max_seq_len):
        cpu = generate_ids(model_dir, "cpu", *prompt_args(chat))
        for tp in tps:
            with self.subTest(tp=tp):
                out = compile_model(model_dir, f"{os.path.basename(model_dir)}-tp{tp}", "--batch-size", "4",
                                    "--max-seq-len", str(max_seq_len), "--tensor-parallel-size", str(tp))
                manifest = load_json(os.path.join(out, "manifest.json"))
                self.assertEqual(manifest["tensor_parallel_size"], tp)
                self.assertEqual(manifest["kv_block_size"], max_seq_len)
                self.assertEqual(manifest["decode_buckets"], [4, 2, 1])
                for f in ("config.json", "tokenizer.json", "programs/decode_b4.json", "programs/prefill_c128.json",
                          *[f"chip{c}.safetensors" for c in range(tp)]):
                    self.assertTrue(os.path.exists(os.path.join(out, f)), f)
                # 5 prompts on a batch-4 build: a padded decode bucket and a queued request.
                self.assertEqual(generate_ids(out, "rbln", *prompt_args(chat)), cpu)

    def test_demo_model_tp_1_2_4(self):
        self.check_equal(os.path.join(ARGS.source_dir, "models", "pkgchat-5m"), True, (1, 2, 4), 256)

    def test_generated_model_tp_1_2_4(self):
        # Qwen2 (q/k/v biases), 4 query heads and 2 kv heads: TP 4 replicates each kv head on two chips;
        # a prompt longer than one prefill chunk (128) runs as two chunks.
        model = os.path.join(TMP, "qwen2-gen")
        if not os.path.exists(model):
            subprocess.run([sys.executable, os.path.join(ARGS.source_dir, "tools", "make_test_model.py"),
                            "--family", "qwen2", "--out", model, "--hidden", "64", "--layers", "2", "--heads", "4",
                            "--kv-heads", "2", "--intermediate", "96", "--max-pos", "512"], check=True)
        long_prompt = ",".join(str(10 + (i * 37) % 3000) for i in range(200))
        global PROMPTS
        saved = PROMPTS
        try:
            cpu = generate_ids(model, "cpu", *prompt_args(False), "--prompt-ids", long_prompt)
            for tp in (1, 2, 4):
                with self.subTest(tp=tp):
                    out = compile_model(model, f"qwen2-gen-tp{tp}", "--batch-size", "4", "--max-seq-len", "320",
                                        "--tensor-parallel-size", str(tp))
                    self.assertEqual(load_json(os.path.join(out, "manifest.json"))["kv_heads_replicated"], tp == 4)
                    got = generate_ids(out, "rbln", *prompt_args(False), "--prompt-ids", long_prompt)
                    self.assertEqual(got, cpu)
        finally:
            PROMPTS = saved


def generate_json(model, device, *extra):
    args = ["generate", model, "--device", device, "--output", "json", "--log-level", "warn",
            "--temperature", "0", "--ignore-eos", *extra]
    return [json.loads(line) for line in halo(*args).stdout.splitlines() if line.strip()]


def chip_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n))


class Int8(unittest.TestCase):
    """halo compile --quantization int8: int8 values and fp32 scales per output channel in the chip
    files, sharded like the plain weights; the decode programs read about half the bytes."""

    SRC = None

    @classmethod
    def setUpClass(cls):
        cls.SRC = os.path.join(ARGS.source_dir, "models", "pkgchat-5m")
        shape = ("--batch-size", "4", "--max-seq-len", "256")
        cls.bf16 = {tp: compile_model(cls.SRC, f"pkgchat-5m-tp{tp}", *shape, "--tensor-parallel-size", str(tp))
                    for tp in (1, 4)}
        cls.int8 = {tp: compile_model(cls.SRC, f"pkgchat-int8-tp{tp}", *shape, "--tensor-parallel-size", str(tp),
                                      "--quantization", "int8") for tp in (1, 4)}

    def test_manifest_and_chip_files(self):
        for tp, out in self.int8.items():
            with self.subTest(tp=tp):
                m = load_json(os.path.join(out, "manifest.json"))
                q = m["quantization"]
                self.assertEqual(q["type"], "int8")
                self.assertEqual(q["scale_dtype"], "fp32")
                self.assertEqual(q["group_size"], 0)  # one scale per output channel
                self.assertEqual(sorted(q["weights"]), sorted(["q", "k", "v", "o", "gate", "up", "down", "lm_head"]))
                for c in range(tp):
                    h = chip_header(os.path.join(out, f"chip{c}.safetensors"))
                    self.assertEqual(h["embed"]["dtype"], "BF16")  # never quantized
                    self.assertEqual(h["layers.0.q"]["dtype"], "I8")
                    self.assertEqual(h["layers.0.q"]["shape"], [256 // tp, 256])  # rows split
                    self.assertEqual(h["layers.0.q.scales"]["shape"], [256 // tp, 1])
                    self.assertEqual(h["layers.5.down"]["shape"], [256, 704 // tp])  # columns split
                    self.assertEqual(h["layers.5.down.scales"]["shape"], [256, 1])  # the row's scale, whole
                    self.assertEqual(h["lm_head"]["shape"], [4096 // tp, 256])
        bf = load_json(os.path.join(self.bf16[1], "manifest.json"))["memory_per_chip"][0]["weights_bytes"]
        q8 = load_json(os.path.join(self.int8[1], "manifest.json"))["memory_per_chip"][0]["weights_bytes"]
        # 4.7M matrix weights at 1 byte + scales instead of 2; the bf16 embedding (1M) stays.
        self.assertLess(q8, 0.62 * bf)
        self.assertGreater(q8, 0.55 * bf)

    def test_decode_estimate_is_about_half(self):
        def est(out):
            p = [p for p in load_json(os.path.join(out, "manifest.json"))["programs"] if p["name"] == "decode_b1"]
            return p[0]["estimate_at_max_seq_len"]
        bf, q8 = est(self.bf16[1]), est(self.int8[1])
        self.assertLess(q8["dram_bytes_per_chip"], 0.62 * bf["dram_bytes_per_chip"])
        self.assertLess(q8["total_s"], 0.75 * bf["total_s"])

    def test_tp4_equals_tp1_and_agrees_with_bf16(self):
        q1 = generate_ids(self.int8[1], "rbln", *prompt_args(True))
        self.assertEqual(generate_ids(self.int8[4], "rbln", *prompt_args(True)), q1)
        # Teacher-forced top-1 agreement with the bf16 build: every prefix of the bf16 greedy
        # continuation, one next token each from the int8 build.
        runs = generate_json(self.bf16[1], "rbln", "--max-tokens", "16", *prompt_args(True))
        prefixes, want = [], []
        for r in runs:
            seq = r["prompt_token_ids"] + r["outputs"][0]["token_ids"] if "outputs" in r else \
                r["prompt_token_ids"] + r["token_ids"]
            n = len(r["prompt_token_ids"])
            for k in range(n, len(seq)):
                prefixes += ["--prompt-ids", ",".join(map(str, seq[:k]))]
                want.append(seq[k])
        got = [r["outputs"][0]["token_ids"][0] if "outputs" in r else r["token_ids"][0]
               for r in generate_json(self.int8[1], "rbln", "--max-tokens", "1", *prefixes)]
        agree = sum(a == b for a, b in zip(got, want)) / len(want)
        print(f"int8 vs bf16 teacher-forced top-1 agreement: {agree:.3f} over {len(want)} positions",
              file=sys.stderr)
        self.assertEqual(len(got), len(want))
        self.assertGreaterEqual(agree, 0.9)

    def test_device_time_per_decode_is_lower(self):
        def device_seconds(out):
            path = os.path.join(TMP, os.path.basename(out) + "-bench.json")
            halo("bench", "throughput", out, "--device", "rbln", "--num-prompts", "4", "--input-len", "16",
                 "--output-len", "32", "--baseline-prompts", "0", "--output-json", path)
            return load_json(path)["batched"]["device"]["seconds"]
        bf, q8 = device_seconds(self.bf16[1]), device_seconds(self.int8[1])
        print(f"simulated device seconds, 4 x (16 in + 32 out): bf16 {bf:.6f}, int8 {q8:.6f}", file=sys.stderr)
        self.assertLess(q8, 0.8 * bf)

    def test_grouped_gptq8_checkpoint(self):
        # A GPTQ 8-bit checkpoint, groups of 32 (zero offsets: symmetric), lm_head left in bf16.
        src = os.path.join(TMP, "pkgchat-gptq8-g32")
        if not os.path.exists(src):
            subprocess.run([sys.executable, os.path.join(ARGS.source_dir, "tests", "model",
                                                          "make_quantized_checkpoint.py"),
                            self.SRC, src, "gptq8", "--group", "32"], check=True)
        shape = ("--batch-size", "4", "--max-seq-len", "256")
        outs = {tp: compile_model(src, f"pkgchat-gptq8-tp{tp}", *shape, "--tensor-parallel-size", str(tp))
                for tp in (1, 2)}
        q = load_json(os.path.join(outs[2], "manifest.json"))["quantization"]
        self.assertEqual(q["group_size"], 32)
        self.assertNotIn("lm_head", q["weights"])
        h = chip_header(os.path.join(outs[2], "chip1.safetensors"))
        self.assertEqual(h["layers.0.down.scales"]["shape"], [256, 352 // 32])  # its columns' groups
        self.assertEqual(h["lm_head"]["dtype"], "BF16")
        self.assertEqual(generate_ids(outs[2], "rbln", *prompt_args(True)),
                         generate_ids(outs[1], "rbln", *prompt_args(True)))
        # TP 4 would split down_proj's 704 inputs at 176, inside a group of 32.
        p = halo("compile", src, "--device", "rbln", *shape, "--tensor-parallel-size", "4", "--dry-run",
                 check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("splits down_proj at input column 176", p.stderr)
        self.assertIn("quantization group of 32", p.stderr)

    def test_int4_is_refused_naming_the_types(self):
        p = halo("compile", self.SRC, "--device", "rbln", "--quantization", "int4", "--dry-run", check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("uint4", p.stderr)
        self.assertIn("it accepts int8", p.stderr)


class Limits(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = compile_model(os.path.join(ARGS.source_dir, "models", "pkgchat-5m"), "pkgchat-tp2-limits",
                                  "--batch-size", "4", "--max-seq-len", "256", "--tensor-parallel-size", "2")

    def run_bad(self, *args, model=None):
        p = halo("generate", model or self.model, "--device", "rbln", "--prompt", "hi", "--max-tokens", "2",
                 "--log-level", "warn", *args, check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        return p.stderr

    def test_batch_too_big(self):
        err = self.run_bad("--max-num-seqs", "8")
        self.assertIn("--max-num-seqs=8", err)
        self.assertIn("max-num-seqs=4", err)

    def test_max_model_len_larger_than_compiled(self):
        err = self.run_bad("--max-model-len", "512")
        self.assertIn("--max-model-len=512", err)
        self.assertIn("max-model-len=256", err)

    def test_block_size_and_batched_tokens_contradict(self):
        self.assertIn("block-size=256", self.run_bad("--block-size", "16"))
        self.assertIn("max-num-batched-tokens=256", self.run_bad("--max-num-batched-tokens", "2048"))

    def test_compiled_limits_are_adopted(self):
        p = halo("generate", self.model, "--device", "rbln", "--prompt", "hi", "--max-tokens", "2")
        self.assertIn("max_num_seqs=4 max_model_len=256 max_num_batched_tokens=256 chunked_prefill=false", p.stderr)

    def test_memory_does_not_fit_names_the_numbers(self):
        p = halo("compile", os.path.join(ARGS.source_dir, "models", "pkgchat-5m"), "--device", "rbln",
                 "--batch-size", "20000", "--max-seq-len", "512", "--dry-run", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("does not fit", p.stderr)
        self.assertIn("for batch 20000 x max_seq_len 512", p.stderr)
        self.assertIn("GiB usable per chip", p.stderr)

    def test_summary_names_the_context_its_estimates_are_for(self):
        src = os.path.join(ARGS.source_dir, "models", "pkgchat-5m")
        p = halo("compile", src, "--device", "rbln", "--max-seq-len", "512", "--dry-run")
        self.assertIn("context 512", p.stdout)
        self.assertNotIn("context 1024", p.stdout)

    def test_bad_tensor_parallel_size(self):
        src = os.path.join(ARGS.source_dir, "models", "pkgchat-5m")
        p = halo("compile", src, "--tensor-parallel-size", "3", "--dry-run", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("does not divide num_attention_heads=8", p.stderr)
        p = halo("compile", src, "--tensor-parallel-size", "8", "--dry-run", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("needs 8 chips", p.stderr)

    def test_wrong_device_either_way(self):
        p = halo("generate", self.model, "--device", "cpu", "--prompt", "hi", check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("compiled for device 'rbln'", p.stderr)
        err = self.run_bad(model=os.path.join(ARGS.source_dir, "models", "pkgchat-5m"))
        self.assertIn("runs compiled models only", err)


class Faults(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = compile_model(os.path.join(ARGS.source_dir, "models", "pkgchat-5m"), "pkgchat-tp2-limits",
                                  "--batch-size", "4", "--max-seq-len", "256", "--tensor-parallel-size", "2")

    def run_fault(self, fault, env=None):
        t0 = time.monotonic()
        p = halo("generate", self.model, "--device", "rbln", "--prompt", "What is curl?", "--prompt", "hi",
                 "--max-tokens", "16", "--log-level", "warn", check=False, timeout=60,
                 env={"HALO_RBLN_FAULT": fault, **(env or {})})
        self.assertEqual(p.returncode, 1, p.stderr)  # an error exit, not a signal
        # The engine logs the failed step; the command ends with one error line.
        self.assertTrue(p.stderr.strip().splitlines()[-1].startswith("error: "), p.stderr)
        self.assertNotIn("terminate called", p.stderr)
        return p.stderr, time.monotonic() - t0

    def test_chip_fails_at_step(self):
        err, _ = self.run_fault("chip_fail_at_step=3")
        self.assertIn("ZE_RESULT_ERROR_DEVICE_LOST", err)
        self.assertIn("chip 1 failed", err)

    def test_allocation_fails(self):
        err, _ = self.run_fault("alloc_fail=4")
        self.assertIn("ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", err)

    def test_hung_command_times_out(self):
        profile = os.path.join(TMP, "fast-timeout.yaml")
        with open(profile, "w") as f:
            f.write("command_timeout_ms: 300\n")
        err, secs = self.run_fault("hang_at_step=2", env={"HALO_RBLN_PROFILE": profile})
        self.assertIn("did not complete the command within 300 ms", err)
        self.assertLess(secs, 30)


class ServeFault(unittest.TestCase):
    """A chip that fails under a live server: the requests on it end with an
    error, the process stays up and keeps answering, and /health says why."""

    def test_failed_chip_fails_requests_and_the_server_stays_up(self):
        import re
        import urllib.error
        import urllib.request
        model = compile_model(os.path.join(ARGS.source_dir, "models", "pkgchat-5m"), "pkgchat-tp2-limits",
                              "--batch-size", "4", "--max-seq-len", "256", "--tensor-parallel-size", "2")
        proc = subprocess.Popen([ARGS.halo, "serve", model, "--device", "rbln", "--port", "0"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "HALO_RBLN_FAULT": "chip_fail_at_step=4"})
        try:
            url, deadline = None, time.monotonic() + 60
            while url is None and time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                m = re.search(r"ready at (http://[0-9.:]+)/v1", line)
                url = m.group(1) if m else None
            self.assertIsNotNone(url, "server did not become ready")

            def post(body):
                req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(req, timeout=30) as r:
                        return r.status, json.loads(r.read())
                except urllib.error.HTTPError as e:
                    return e.code, json.loads(e.read())

            with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
                name = json.loads(r.read())["data"][0]["id"]
            status, body = post({"model": name, "prompt": "What is curl?", "max_tokens": 16, "ignore_eos": True})
            self.assertGreaterEqual(status, 500, body)
            self.assertIn("chip 1 failed", json.dumps(body))
            self.assertIsNone(proc.poll(), "the server died with the device")
            # Still answering: the model list, and a health check that reports the failure.
            with urllib.request.urlopen(url + "/v1/models", timeout=10) as r:
                self.assertEqual(r.status, 200)
            with self.assertRaises(urllib.error.HTTPError) as h:
                urllib.request.urlopen(url + "/health", timeout=10)
            self.assertEqual(h.exception.code, 503)
            # A later request gets an error too, not a hang.
            status, body = post({"model": name, "prompt": "hi", "max_tokens": 4})
            self.assertGreaterEqual(status, 500, body)
            self.assertIsNone(proc.poll())
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


class Speculative(unittest.TestCase):
    """halo compile --num-speculative-tokens 3: verify programs (one per decode bucket, 4 rows a
    sequence) beside the decode programs; speculation on them (prompt lookup, and the shipped draft
    compiled the same way) gives plain decoding's greedy output with proposals accepted, at batch 1
    and batched; the flag's limits and the refusals name it."""

    NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1,
             "disable_by_batch_size": 1000}  # proposals at every batch size: verifies of 1..4 sequences

    @classmethod
    def setUpClass(cls):
        src = os.path.join(ARGS.source_dir, "models")
        shape = ("--max-seq-len", "256", "--num-speculative-tokens", "3")
        cls.target = {b: compile_model(os.path.join(src, "pkgchat-5m"), f"pkgchat-k3-b{b}", "--batch-size", str(b),
                                       *shape) for b in (1, 4)}
        cls.draft = {b: compile_model(os.path.join(src, "pkgchat-5m-draft"), f"pkgchat-draft-k3-b{b}",
                                      "--batch-size", str(b), *shape) for b in (1, 4)}
        cls.dataset = os.path.join(ARGS.source_dir, "benchmarks", "data", "quoting_prompts.jsonl")

    def bench(self, model, spec, name, *extra):
        """halo bench throughput: plain decoding then speculative decoding of the same 8 prompts that
        quote a package description (greedy, 32 tokens each); the report of both runs."""
        path = os.path.join(TMP, f"spec-{name}.json")
        halo("bench", "throughput", model, "--device", "rbln", "--dataset", self.dataset, "--num-prompts", "8",
             "--output-len", "32", "--speculative-config", json.dumps(spec), "--output-json", path,
             "--log-level", "warn", *extra)
        r = load_json(path)
        s = r["speculative"]
        print(f"rbln speculative {name}: acceptance {s['spec_acceptance_rate']:.3f}, mean length "
              f"{s['spec_mean_accepted_length']:.2f}, device s {r['batched']['device']['seconds']:.6f} -> "
              f"{s['device']['seconds']:.6f}", file=sys.stderr)
        self.assertEqual(s["outputs_equal_to_plain"], 8, name)
        self.assertGreater(s["spec_acceptance_rate"], 0.1, name)  # proposals were verified and accepted
        return r

    def test_manifest_programs_and_summary(self):
        m = load_json(os.path.join(self.target[4], "manifest.json"))
        self.assertEqual(m["num_speculative_tokens"], 3)
        verify = {p["name"]: p for p in m["programs"] if p["kind"] == "verify"}
        self.assertEqual(sorted(verify), ["verify_b1", "verify_b2", "verify_b4"])
        g = load_json(os.path.join(self.target[4], "programs", "verify_b4.json"))["graph"]
        self.assertEqual((g["rows"], g["tokens_per_seq"]), (16, 4))
        decode = {p["name"]: p for p in m["programs"] if p["kind"] == "decode"}
        for b in (1, 2, 4):
            v, d = verify[f"verify_b{b}"], decode[f"decode_b{b}"]
            self.assertEqual(v["tokens"], 4)
            # One read of the weights, as a decode: a little more, not 4x.
            ratio = v["estimate_at_max_seq_len"]["total_s"] / d["estimate_at_max_seq_len"]["total_s"]
            self.assertGreater(ratio, 1.0)
            self.assertLess(ratio, 1.2)
            self.assertGreater(v["decode_ratio_at_ctx_1024"], 1.0)
        p = halo("compile", os.path.join(ARGS.source_dir, "models", "pkgchat-5m"), "--device", "rbln",
                 "--batch-size", "4", "--max-seq-len", "256", "--num-speculative-tokens", "3", "--dry-run").stdout
        self.assertIn("num_speculative_tokens=3", p)
        self.assertIn("programs: 7 (1 prefill, 3 decode, 3 verify)", p)
        self.assertRegex(p, r"program verify_b1 +batch +1 x +4 tokens: .* 1\.\d{3}x decode_b1")

    def test_flag_limits_name_the_flag(self):
        src = os.path.join(ARGS.source_dir, "models", "pkgchat-5m")
        for k, max_len, want in (("17", "256", "--num-speculative-tokens=17 is outside [0, 16]"),
                                 ("8", "8", "--num-speculative-tokens=8 needs 9 tokens per sequence")):
            p = halo("compile", src, "--device", "rbln", "--max-seq-len", max_len, "--num-speculative-tokens", k,
                     "--dry-run", check=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(want, p.stderr)
        # The logits buffer holds a verify's rows: 64 x 4 = 256 rows of 4096 floats, 4 MiB (a prefill
        # chunk's 128 rows without verify programs).
        for k, buffers in (("0", "buffers 0.002 GiB"), ("3", "buffers 0.004 GiB")):
            p = halo("compile", src, "--device", "rbln", "--batch-size", "64", "--max-seq-len", "256",
                     "--num-speculative-tokens", k, "--dry-run")
            self.assertIn(buffers, p.stdout)

    def test_ngram_greedy_equal_batch_1(self):
        self.bench(self.target[1], self.NGRAM, "ngram-b1")

    def test_ngram_greedy_equal_batched(self):
        r = self.bench(self.target[4], self.NGRAM, "ngram-b4")
        self.assertEqual(r["speculative"]["max_running"], 4)
        # Fewer steps at almost the cost of a decode each: less simulated device time.
        self.assertLess(r["speculative"]["device"]["seconds"], r["batched"]["device"]["seconds"])
        # The CLI's own path (AsyncEngine): the chat prompts (5 on a batch-4 build) and 3 quoting ones.
        with open(self.dataset) as f:
            quoting = [json.loads(line)["prompt"] for line in f][:3]
        spec = ("--speculative-config", json.dumps(self.NGRAM))
        for prompts in (prompt_args(True), sum((["--prompt", q] for q in quoting), [])):
            plain = generate_json(self.target[4], "rbln", *prompts, "--max-tokens", "32")
            got = generate_json(self.target[4], "rbln", *prompts, "--max-tokens", "32", *spec)
            self.assertEqual([(o["token_ids"], o["text"]) for o in got],
                             [(o["token_ids"], o["text"]) for o in plain])

    def test_draft_model_greedy_equal(self):
        spec = {"model": self.draft[1], "num_speculative_tokens": 3}
        self.bench(self.target[1], spec, "draft-b1")
        spec = {"model": self.draft[4], "num_speculative_tokens": 3, "disable_by_batch_size": 1000}
        # 3 KV blocks on a batch-4 build: verifies of up to 3 sequences in the 4-sequence program.
        r = self.bench(self.target[4], spec, "draft-b4", "--max-kv-tokens", "768")
        self.assertEqual(r["speculative"]["max_running"], 3)
        # The draft's weights and KV cache on the same chip, beside the target's.
        draft_weights = load_json(os.path.join(self.draft[4], "manifest.json"))["memory_per_chip"][0]["weights_bytes"]
        used = r["speculative"]["device"]["chip_memory_used_bytes"][0] - r["batched"]["device"]["chip_memory_used_bytes"][0]
        self.assertGreater(used, draft_weights)

    def test_refusals_name_the_compile_flag(self):
        plain = compile_model(os.path.join(ARGS.source_dir, "models", "pkgchat-5m"), "pkgchat-5m-tp1",
                              "--batch-size", "4", "--max-seq-len", "256", "--tensor-parallel-size", "1")
        cases = ((plain, self.NGRAM, "compile it with `halo compile --num-speculative-tokens 3`"),
                 (self.target[4], {**self.NGRAM, "num_speculative_tokens": 4},
                  "compiled with --num-speculative-tokens 3"))
        for model, spec, want in cases:
            p = halo("generate", model, "--device", "rbln", "--prompt", "hi", "--max-tokens", "2",
                     "--speculative-config", json.dumps(spec), check=False)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(want, p.stderr)
        # A draft compiled without verify programs cannot mirror the target's verifies.
        draft = compile_model(os.path.join(ARGS.source_dir, "models", "pkgchat-5m-draft"), "pkgchat-draft-k0",
                              "--batch-size", "4", "--max-seq-len", "256")
        p = halo("generate", self.target[4], "--device", "rbln", "--prompt", "hi", "--max-tokens", "2",
                 "--speculative-config", json.dumps({"model": draft, "num_speculative_tokens": 3}), check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("compile the draft with --num-speculative-tokens 3", p.stderr)


class Report(unittest.TestCase):
    def test_devices_lists_rbln(self):
        out = halo("devices", "--device", "rbln").stdout
        self.assertIn("kind=npu", out)
        self.assertIn("chips=4", out)
        self.assertIn("static-shapes", out)
        self.assertNotIn("chunked-prefill", out)

    def test_bench_reports_simulated_throughput_and_memory(self):
        model = compile_model(os.path.join(ARGS.source_dir, "models", "pkgchat-5m"), "pkgchat-tp2-limits",
                              "--batch-size", "4", "--max-seq-len", "256", "--tensor-parallel-size", "2")
        out_json = os.path.join(TMP, "bench.json")
        out = halo("bench", "throughput", model, "--device", "rbln", "--num-prompts", "6", "--input-len", "32",
                   "--output-len", "8", "--baseline-prompts", "0", "--output-json", out_json).stdout
        self.assertIn("device output tokens/s", out)
        self.assertIn("compute / memory / link", out)
        d = load_json(out_json)["batched"]["device"]
        self.assertGreater(d["output_tokens_per_s"], 0)
        shares = d["compute_share"] + d["memory_share"] + d["link_share"]  # the rest: launch overhead
        self.assertGreater(shares, 0.5)
        self.assertLessEqual(shares, 1.0 + 1e-9)
        self.assertGreater(d["chip_memory_used_bytes"][1], 0)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--halo", required=True)
    p.add_argument("--source-dir", required=True)
    ARGS, rest = p.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="halo-rbln-") as tmp:
        TMP = tmp
        unittest.main(argv=[sys.argv[0], *rest])
