"""End-to-end checks of the `halo` binary: generation, batching, stability and
the plugin loader's refusals. Run by ctest with Debian's python3."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ARGS = None
PROMPT_IDS = "1,3,287,1002,45,3001,17,998"


def halo(*args, check=True, env=None):
    proc = subprocess.run([ARGS.halo, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"halo {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def generate_json(*args):
    out = halo("generate", "--output", "json", "--log-level", "warn", *args).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


class Generate(unittest.TestCase):
    def test_json_output_has_the_documented_fields(self):
        [row] = generate_json("--prompt-ids", PROMPT_IDS, "--temperature", "0", "--max-tokens", "8",
                              "--ignore-eos")
        self.assertEqual(row["prompt_token_ids"], [int(x) for x in PROMPT_IDS.split(",")])
        self.assertEqual(len(row["token_ids"]), 8)
        self.assertEqual(row["finish_reason"], "length")
        self.assertIsInstance(row["text"], str)

    def test_greedy_is_stable_across_runs_and_thread_counts(self):
        common = ("--prompt-ids", PROMPT_IDS, "--temperature", "0", "--max-tokens", "24", "--ignore-eos")
        a = generate_json(*common, "--threads", "1")
        b = generate_json(*common, "--threads", "2")
        c = generate_json(*common, "--threads", "2")
        self.assertEqual(a[0]["token_ids"], b[0]["token_ids"])
        self.assertEqual(b[0]["token_ids"], c[0]["token_ids"])

    def test_batched_prompts_match_prompts_run_alone(self):
        prompts = ["What is curl?", "What is vim?", "What is a compiler?"]
        common = ("--chat", "--temperature", "0", "--max-tokens", "20")
        batch = generate_json(*common, *sum((["--prompt", p] for p in prompts), []))
        self.assertEqual(len(batch), 3)
        for p, row in zip(prompts, batch):
            alone = generate_json(*common, "--prompt", p)[0]
            self.assertEqual(row["token_ids"], alone["token_ids"], p)
            self.assertEqual(row["prompt"], p)

    def test_odd_safetensors_header_length_generates_the_same(self):
        # safetensors allows any header length; an odd one leaves the tensors
        # unaligned in the file and the cpu plugin refused it ("not aligned").
        src = os.path.join(ARGS.source_dir, "models", "pkgchat-5m")
        common = ("--prompt-ids", PROMPT_IDS, "--temperature", "0", "--max-tokens", "8", "--ignore-eos")
        with tempfile.TemporaryDirectory() as d:
            for name in os.listdir(src):
                if name != "model.safetensors":
                    os.symlink(os.path.join(src, name), os.path.join(d, name))
            with open(os.path.join(src, "model.safetensors"), "rb") as f:
                raw = f.read()
            n = int.from_bytes(raw[:8], "little")
            header = raw[8:8 + n].rstrip(b" ")
            if len(header) % 2 == 0:
                header += b" "
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(len(header).to_bytes(8, "little") + header + raw[8 + n:])
            [odd] = generate_json(d, *common)
        [ref] = generate_json(src, *common)
        self.assertEqual(odd["token_ids"], ref["token_ids"])

    def test_chat_answer_stops_at_the_models_end_token(self):
        [row] = generate_json("--chat", "--prompt", "What is curl?", "--temperature", "0",
                              "--max-tokens", "400")
        self.assertEqual(row["finish_reason"], "stop", row)
        self.assertIn(row["token_ids"][-1], (2, 5))  # </s> or <|end|> from generation_config.json
        self.assertGreater(len(row["text"].split()), 3, row["text"])
        # The chat template writes <s> itself: no second BOS.
        self.assertEqual(row["prompt_token_ids"][:2], [1, 3])

    def test_ignore_eos_runs_to_max_tokens(self):
        [row] = generate_json("--chat", "--prompt", "What is curl?", "--temperature", "0",
                              "--max-tokens", "300", "--ignore-eos")
        self.assertEqual(len(row["token_ids"]), 300)
        self.assertEqual(row["finish_reason"], "length")

    def test_seeded_sampling_is_reproducible(self):
        common = ("--prompt-ids", PROMPT_IDS, "--temperature", "1.0", "--max-tokens", "16",
                  "--ignore-eos", "--seed", "1234")
        self.assertEqual(generate_json(*common)[0]["token_ids"], generate_json(*common)[0]["token_ids"])

    def test_prompts_file_and_small_kv_cache_preempt_but_finish_everything(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            for i in range(12):
                f.write(f"The package number {i} is\n")
            path = f.name
        try:
            rows = generate_json("--prompts-file", path, "--temperature", "0", "--max-tokens", "40",
                                 "--ignore-eos", "--max-kv-tokens", "256", "--block-size", "16",
                                 "--max-model-len", "128")
        finally:
            os.unlink(path)
        self.assertEqual(len(rows), 12)
        for row in rows:
            self.assertEqual(len(row["token_ids"]), 40)

    def test_max_model_len_that_cannot_fit_is_refused_with_the_largest_that_would(self):
        p = halo("generate", "--prompt-ids", "1,2", "--max-kv-tokens", "64", "--block-size", "16",
                 "--max-model-len", "256", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--max-model-len 64", p.stderr)


    def test_config_file_sets_flags_and_the_command_line_wins(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("max-tokens: 5\ntemperature: 0\nignore-eos: true\nprompt-ids: ['1,3,287']\n")
            path = f.name
        try:
            [row] = generate_json("--config", path)
            self.assertEqual(len(row["token_ids"]), 5)
            [row] = generate_json("--config", path, "--max-tokens", "7")
            self.assertEqual(len(row["token_ids"]), 7)
            [row] = generate_json("--config", os.path.join(ARGS.source_dir, "configs", "cpu.yaml"),
                                  "--prompt-ids", PROMPT_IDS, "--max-tokens", "3", "--ignore-eos")
            self.assertEqual(len(row["token_ids"]), 3)
        finally:
            os.unlink(path)


class BadInput(unittest.TestCase):
    def expect_error(self, args, *fragments):
        p = halo(*args, check=False)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        for frag in fragments:
            self.assertIn(frag, p.stderr)
        self.assertNotIn("terminate called", p.stderr)
        return p

    def bad(self, name):
        return os.path.join(ARGS.bad_plugin_dir, f"libhalo_bad_plugin_{name}.so")

    def test_file_that_is_not_a_shared_library(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "libhalo_plugin_text.so")
            with open(path, "w") as f:
                f.write("this is not an ELF file\n")
            self.expect_error(["devices", "--device", path], path, "truncated or not a valid shared library")

    def test_library_without_entry_symbol(self):
        self.expect_error(["devices", "--device", self.bad("no_entry")], "missing entry symbol",
                          "halo_plugin_get_api")

    def test_wrong_abi_major(self):
        self.expect_error(["devices", "--device", self.bad("wrong_major")], "ABI major version 2",
                          "v1.")

    def test_table_with_null_entries(self):
        self.expect_error(["generate", "--prompt-ids", "1", "--device", self.bad("null_entries")],
                          "required entry")

    def test_unknown_device_name_lists_what_exists(self):
        self.expect_error(["generate", "--prompt-ids", "1", "--device", "nosuch"],
                          "libhalo_plugin_nosuch.so", "plugins found: cpu")

    def test_missing_model_directory(self):
        self.expect_error(["generate", "/nonexistent/model", "--prompt-ids", "1"], "/nonexistent/model")

    def test_bad_config_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("max-tokens: [unclosed\n")
            path = f.name
        try:
            self.expect_error(["generate", "--config", path], path, "not valid YAML")
        finally:
            os.unlink(path)

    def test_bad_prompt_ids(self):
        self.expect_error(["generate", "--prompt-ids", "1,x"], "'x' is not an integer")

    def test_token_outside_vocabulary(self):
        self.expect_error(["generate", "--prompt-ids", "1,999999"], "outside the vocabulary")

    def test_halo_plugin_path_is_searched(self):
        with tempfile.TemporaryDirectory() as d:
            os.symlink(self.bad("wrong_major"), os.path.join(d, "libhalo_plugin_future.so"))
            env = {"HALO_PLUGIN_PATH": d}
            p = halo("devices", "--device", "future", env=env, check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("ABI major version 2", p.stderr)
            p = halo("devices", env=env)
            self.assertIn("future", p.stdout)
            self.assertIn("unusable", p.stdout)
            self.assertIn("cpu", p.stdout)


    def test_truncated_plugin_does_not_take_down_devices(self):
        # A truncated .so used to be dlopen'ed and `halo devices` died of
        # SIGBUS; now it is listed as unusable and the others still are.
        cpu = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ARGS.halo))), "lib", "halo", "plugins",
                           "libhalo_plugin_cpu.so")
        self.assertTrue(os.path.exists(cpu), cpu)
        with open(cpu, "rb") as f:
            data = f.read()
        for size in (len(data) * 6 // 10, 4096):
            with tempfile.TemporaryDirectory() as d:
                broken = os.path.join(d, "libhalo_plugin_broken.so")
                with open(broken, "wb") as f:
                    f.write(data[:size])
                env = {"HALO_PLUGIN_PATH": d}
                p = halo("devices", env=env, check=False)
                self.assertEqual(p.returncode, 0, f"size {size}: rc {p.returncode}\n{p.stdout}\n{p.stderr}")
                self.assertIn("kind=cpu", p.stdout)
                self.assertIn("broken", p.stdout)
                self.assertIn("unusable: plugin " + broken + ": truncated or not a valid shared library (", p.stdout)
                p = self.expect_error(["devices", "--device", broken], broken,
                                      "truncated or not a valid shared library")
                self.assertEqual(p.returncode, 1, f"size {size}: killed by a signal? rc {p.returncode}")
                self.assertNotIn("Bad file descriptor", p.stderr)


class Devices(unittest.TestCase):
    def test_lists_the_cpu_plugin_and_its_device(self):
        out = halo("devices").stdout
        self.assertIn("cpu", out)
        self.assertIn("kind=cpu", out)
        self.assertIn("ABI v1.", out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--halo", required=True)
    parser.add_argument("--bad-plugin-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])
