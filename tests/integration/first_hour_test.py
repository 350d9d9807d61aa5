"""What a new user brings in the first hour, end to end through the `halo`
binary: vLLM's command-line flags, Hugging Face model ids (from a cache laid
out as huggingface_hub lays it out, and downloaded from a local stand-in of
the Hub), `halo generate`'s --n/--stop/--stop-token-ids/--logprobs, and the
small things that tripped users (program name in --help, the printed curl
example, --check-config catching a dtype the device refuses).
Run by ctest with Debian's python3."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None
PROMPT_IDS = "1,3,287,1002,45,3001,17,998"


def halo(*args, check=True, env=None, timeout=300):
    proc = subprocess.run([ARGS.halo, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"halo {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def generate_json(*args, env=None):
    out = halo("generate", "--output", "json", "--log-level", "warn", *args, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def model_dir():
    return os.path.join(ARGS.source_dir, "models", "pkgchat-5m")


class GenerateFlags(unittest.TestCase):
    GREEDY = ("--prompt-ids", PROMPT_IDS, "--temperature", "0", "--ignore-eos")

    def test_n_returns_n_distinct_seeded_choices(self):
        [row] = generate_json("--prompt-ids", PROMPT_IDS, "--temperature", "1.0", "--max-tokens", "12",
                              "--ignore-eos", "--seed", "7", "--n", "3")
        self.assertEqual([c["index"] for c in row["outputs"]], [0, 1, 2])
        self.assertTrue(all(len(c["token_ids"]) == 12 for c in row["outputs"]))
        self.assertEqual(row["token_ids"], row["outputs"][0]["token_ids"])
        self.assertGreater(len({tuple(c["token_ids"]) for c in row["outputs"]}), 1)
        [again] = generate_json("--prompt-ids", PROMPT_IDS, "--temperature", "1.0", "--max-tokens", "12",
                                "--ignore-eos", "--seed", "7", "--n", "3")
        self.assertEqual(row["outputs"], again["outputs"])

    def test_stop_string_ends_the_text_before_it(self):
        [full] = generate_json("--chat", "--prompt", "What is curl?", "--temperature", "0", "--max-tokens", "60")
        words = full["text"].split()
        self.assertGreater(len(words), 4, full["text"])
        stop = words[3]
        cut = full["text"].index(stop)
        [row] = generate_json("--chat", "--prompt", "What is curl?", "--temperature", "0", "--max-tokens", "60",
                              "--stop", stop)
        self.assertEqual(row["text"], full["text"][:cut])
        self.assertEqual(row["finish_reason"], "stop")
        self.assertEqual(row["stop_reason"], stop)

    def test_stop_token_ids_end_the_sequence_at_that_token(self):
        [full] = generate_json(*self.GREEDY, "--max-tokens", "10")
        target = full["token_ids"][4]
        first = full["token_ids"].index(target)
        [row] = generate_json(*self.GREEDY, "--max-tokens", "10", "--stop-token-ids", f"{target}")
        self.assertEqual(row["finish_reason"], "stop")
        self.assertEqual(row["token_ids"], full["token_ids"][:first + 1])

    def test_logprobs_of_greedy_tokens_are_the_largest(self):
        [row] = generate_json(*self.GREEDY, "--max-tokens", "6", "--logprobs", "3")
        self.assertEqual(len(row["logprobs"]), 6)
        for tok, lp in zip(row["token_ids"], row["logprobs"]):
            self.assertEqual(lp["token_id"], tok)
            self.assertLessEqual(lp["logprob"], 0.0)
            self.assertEqual(len(lp["top"]), 3)
            self.assertAlmostEqual(max(lp["top"].values()), lp["logprob"], places=4)

    def test_bad_stop_token_ids_are_named(self):
        p = halo("generate", "--prompt-ids", "1", "--stop-token-ids", "1,zz", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--stop-token-ids", p.stderr)


class VllmFlags(unittest.TestCase):
    def test_flags_without_effect_are_accepted_and_explained(self):
        p = halo("serve", "--check-config", "--trust-remote-code", "--enforce-eager", "--swap-space", "4",
                 "--disable-log-requests", "--disable-log-stats", "--pipeline-parallel-size", "1",
                 "--load-format", "safetensors", "--distributed-executor-backend", "mp")
        self.assertIn("max-num-seqs", p.stdout)
        self.assertIn("trust_remote_code has no effect", p.stderr)
        self.assertIn("swap_space has no effect", p.stderr)

    def test_settings_vllm_names_are_honoured(self):
        p = halo("serve", "--check-config", "--gpu-memory-utilization", "0.5", "--max-num-seqs", "3",
                 "--served-model-name", "m", "--tokenizer", model_dir(), "--revision", "main")
        self.assertIn("device-memory-utilization = 0.5", p.stdout)
        self.assertIn("max-num-seqs = 3", p.stdout)
        self.assertIn(f"tokenizer = {model_dir()}", p.stdout)

    def test_flags_halo_cannot_honour_are_refused_with_the_reason(self):
        for args, frag in [(["--quantization", "awq"], "quantization=awq: expected one of none, int8, int4"),
                           (["--pipeline-parallel-size", "2"], "pipeline_parallel_size=2"),
                           (["--speculative-model", "d"], "speculative_config"),
                           (["--ssl-keyfile", "k.pem"], "TLS"),
                           (["--load-format", "gguf"], "load_format=gguf")]:
            p = halo("serve", "--check-config", *args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(frag, p.stderr, args)
            self.assertNotIn("terminate called", p.stderr)

    def test_generate_takes_them_too(self):
        [row] = generate_json("--prompt-ids", "1,3", "--max-tokens", "2", "--ignore-eos", "--trust-remote-code",
                              "--enforce-eager", "--download-dir", tempfile.gettempdir())
        self.assertEqual(len(row["token_ids"]), 2)

    def test_unknown_flag_is_an_error(self):
        p = halo("serve", "--check-config", "--no-such-flag", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--no-such-flag", p.stderr + p.stdout)

    def test_check_config_refuses_a_dtype_the_cpu_plugin_cannot_run(self):
        p = halo("serve", "--sagemaker", "--check-config", check=False, env={"OPTION_DTYPE": "fp16"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("OPTION_DTYPE", p.stdout + p.stderr)
        self.assertIn("float16", p.stdout + p.stderr)


class SmallThings(unittest.TestCase):
    def test_help_names_the_program(self):
        out = halo("--help").stdout
        self.assertIn("Usage: halo", out)
        out = halo("serve", "--help").stdout
        self.assertIn("halo serve", out)
        self.assertIn("on by default", out)

    def test_devices_describes_the_default_fast_path(self):
        out = halo("devices").stdout
        self.assertNotIn("reference, fp32 KV", out)

    def test_unknown_device_says_which_target_builds_it(self):
        p = halo("generate", "--prompt-ids", "1", "--device", "nosuch", check=False)
        self.assertIn("--target halo_plugin_nosuch", p.stderr)

    def test_printed_curl_example_expands_the_api_key(self):
        proc = subprocess.Popen([ARGS.halo, "serve", "--port", "0", "--api-key", "k1"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            lines = []
            for line in proc.stdout:
                lines.append(line)
                if line.strip().startswith("-d "):
                    break
            example = "".join(lines)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        self.assertIn('-H "Authorization: Bearer $HALO_API_KEY"', example)
        self.assertNotIn("'Authorization: Bearer $HALO_API_KEY'", example)


def lay_out_cache(cache, repo_id, src, sha="0123456789abcdef0123456789abcdef01234567"):
    """A Hugging Face cache entry as huggingface_hub writes it: blobs, a
    snapshot of relative symlinks, refs/main holding the commit."""
    root = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    os.makedirs(os.path.join(root, "blobs"))
    os.makedirs(os.path.join(root, "refs"))
    snap = os.path.join(root, "snapshots", sha)
    os.makedirs(snap)
    for i, name in enumerate(sorted(os.listdir(src))):
        if not os.path.isfile(os.path.join(src, name)):
            continue
        blob = f"{i:040x}"
        shutil.copy(os.path.join(src, name), os.path.join(root, "blobs", blob))
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, name))
    with open(os.path.join(root, "refs", "main"), "w") as f:
        f.write(sha)
    return snap


class HubIds(unittest.TestCase):
    GREEDY = ("--prompt-ids", PROMPT_IDS, "--temperature", "0", "--max-tokens", "6", "--ignore-eos")

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)

    def test_id_from_the_cache_generates_what_the_directory_does(self):
        cache = os.path.join(self.tmp, "hub")
        lay_out_cache(cache, "halo-test/pkgchat-5m", model_dir())
        env = {"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"}
        [by_id] = generate_json("halo-test/pkgchat-5m", *self.GREEDY, env=env)
        [by_dir] = generate_json(model_dir(), *self.GREEDY)
        self.assertEqual(by_id["token_ids"], by_dir["token_ids"])
        # HF_HOME/hub and --download-dir find the same cache.
        env = {"HF_HOME": self.tmp, "HF_HUB_OFFLINE": "1"}
        [row] = generate_json("halo-test/pkgchat-5m", *self.GREEDY, env=env)
        self.assertEqual(row["token_ids"], by_dir["token_ids"])
        [row] = generate_json("halo-test/pkgchat-5m", "--download-dir", cache, *self.GREEDY,
                              env={"HF_HUB_OFFLINE": "1"})
        self.assertEqual(row["token_ids"], by_dir["token_ids"])

    def test_serve_check_config_and_sagemaker_take_an_id(self):
        cache = os.path.join(self.tmp, "hub")
        lay_out_cache(cache, "halo-test/pkgchat-5m", model_dir())
        env = {"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"}
        p = halo("serve", "halo-test/pkgchat-5m", "--check-config", env=env)
        self.assertIn("model 'halo-test/pkgchat-5m'", p.stdout)
        p = halo("serve", "--sagemaker", "--check-config", env={**env, "HF_MODEL_ID": "halo-test/pkgchat-5m"})
        self.assertIn("environment HF_MODEL_ID", p.stdout)

    def test_missing_id_offline_says_what_was_tried(self):
        cache = os.path.join(self.tmp, "empty")
        os.makedirs(cache)
        p = halo("generate", "nobody/nothing", "--prompt-ids", "1", check=False,
                 env={"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("HF_HUB_OFFLINE", p.stderr)
        self.assertIn(cache, p.stderr)
        p = halo("serve", "nobody/nothing", "--check-config", check=False,
                 env={"HF_HUB_CACHE": cache, "HF_HUB_OFFLINE": "1"})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("HF_HUB_OFFLINE", p.stdout + p.stderr)

    def test_download_from_a_hub_then_offline_from_the_cache(self):
        repos = os.path.join(self.tmp, "repos", "halo-test")
        os.makedirs(repos)
        shutil.copytree(model_dir(), os.path.join(repos, "pkgchat-5m"))
        hub = subprocess.Popen([sys.executable, os.path.join(ARGS.source_dir, "tests", "hub", "fake_hub.py"),
                                os.path.join(self.tmp, "repos")], stdout=subprocess.PIPE, text=True)
        self.addCleanup(hub.wait)
        self.addCleanup(hub.terminate)
        port = int(hub.stdout.readline())
        cache = os.path.join(self.tmp, "cache")
        env = {"HF_HUB_CACHE": cache, "HF_ENDPOINT": f"http://127.0.0.1:{port}"}
        [dl] = generate_json("halo-test/pkgchat-5m", *self.GREEDY, env=env)
        [by_dir] = generate_json(model_dir(), *self.GREEDY)
        self.assertEqual(dl["token_ids"], by_dir["token_ids"])
        snaps = os.listdir(os.path.join(cache, "models--halo-test--pkgchat-5m", "snapshots"))
        self.assertEqual(len(snaps), 1)
        hub.terminate()
        [off] = generate_json("halo-test/pkgchat-5m", *self.GREEDY, env={**env, "HF_HUB_OFFLINE": "1"})
        self.assertEqual(off["token_ids"], by_dir["token_ids"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--halo", required=True)
    parser.add_argument("--source-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])
