"""`halo bench throughput --num-lora-adapters` end to end on --device cpu with
the embedded pkgchat-5m: the base-only run and the LoRA run of the same prompts
are both in the JSON report, the LoRA/base ratio is positive and the adapters
changed the outputs (so they ran). No speed is asserted. Run by ctest with
Debian's python3."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

ARGS = None
PROMPTS = 4


def halo(*args, check=True):
    proc = subprocess.run([ARGS.halo, "--log-level", "warn", *args], capture_output=True, text=True,
                          timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"halo {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


BENCH = ("bench", "throughput", "--device", "cpu", "--threads", "2", "--num-prompts", str(PROMPTS),
         "--input-len", "16", "--output-len", "8")


class LoraReport(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "throughput.json")
            proc = halo(*BENCH, "--num-lora-adapters", "2", "--lora-rank", "8", "--output-json", path)
            with open(path) as f:
                cls.out = json.load(f)
        cls.stdout = proc.stdout

    def test_base_and_lora_runs_are_reported(self):
        o = self.out
        for run in ("batched", "lora"):
            self.assertIn(run, o)
            for key in ("requests", "duration_s", "output_tokens", "output_tokens_per_s", "steps"):
                self.assertIn(key, o[run])
            self.assertEqual(o[run]["requests"], PROMPTS)
            self.assertEqual(o[run]["output_tokens"], PROMPTS * 8)
        self.assertEqual(o["lora"]["num_adapters"], 2)
        self.assertEqual(o["lora"]["rank"], 8)
        self.assertNotIn("one_at_a_time", o)  # the baseline is the base-only batched run
        self.assertIn("LoRA (2 adapters, rank 8) vs base only", self.stdout)

    def test_ratio_is_positive(self):
        self.assertGreater(self.out["lora_vs_base_output_tokens_per_s"], 0)

    def test_adapters_change_the_outputs(self):
        lora = self.out["lora"]
        self.assertIs(lora["outputs_differ_from_base"], True)
        self.assertLess(lora["outputs_equal_to_base"], PROMPTS)


class BadFlags(unittest.TestCase):
    def expect_error(self, args, fragment):
        proc = halo(*BENCH, *args, check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn(fragment, proc.stderr)

    def test_negative_adapter_count(self):
        self.expect_error(["--num-lora-adapters", "-1"], "--num-lora-adapters")

    def test_not_with_embeddings(self):
        self.expect_error(["--num-lora-adapters", "2", "--task", "embed"], "--num-lora-adapters")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--halo", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
