"""LoRA adapters offline (vLLM's LLM(..., enable_lora=True) with a LoRARequest per
request): an adapter's first-token logprobs equal the numpy reference with the adapter
merged into the weights (tests/reference/forward.py --lora), prompts of several adapters
in one generate() get what each gets alone, and LoRA without enable_lora is refused."""
import json
import math
import os
import subprocess
import sys

import pytest

from halo import LLM, LoRARequest, SamplingParams


def make_lora(repo_root, model_dir, out, seed, *extra):
    subprocess.run([sys.executable, os.path.join(repo_root, "tools", "make_test_lora.py"), "--base", model_dir,
                    "--out", str(out), "--seed", str(seed), "--scale", "0.5", *extra],
                   check=True, capture_output=True, timeout=120)
    return str(out)


def reference_logprobs(repo_root, model_dir, ids, lora):
    args = [sys.executable, os.path.join(repo_root, "tests", "reference", "forward.py"), model_dir,
            "--prompt-ids", ",".join(map(str, ids)), "--steps", "1"]
    if lora:
        args += ["--lora", lora]
    logits = json.loads(subprocess.run(args, capture_output=True, text=True, timeout=120,
                                       check=True).stdout)["last_logits"]
    m = max(logits)
    lse = m + math.log(sum(math.exp(v - m) for v in logits))
    return [v - lse for v in logits]


@pytest.fixture(scope="module")
def adapters(repo_root, model_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("lora")
    return {
        "sql": make_lora(repo_root, model_dir, d / "sql", 1, "--rank", "8", "--alpha", "16"),
        "all": make_lora(repo_root, model_dir, d / "all", 2, "--rank", "4", "--targets", "all-linear"),
    }


@pytest.fixture(scope="module")
def lora_llm(model_dir):
    return LLM(model_dir, device="cpu", enable_lora=True, max_loras=1, max_lora_rank=8, max_model_len=512)


IDS = [1, 306, 763, 278, 1139, 310, 3186]


def test_adapter_matches_the_merged_reference(lora_llm, adapters, repo_root, model_dir):
    base = reference_logprobs(repo_root, model_dir, IDS, None)
    for i, name in enumerate(["sql", "all"]):
        ref = reference_logprobs(repo_root, model_dir, IDS, adapters[name])
        out = lora_llm.generate({"prompt_token_ids": IDS}, SamplingParams(max_tokens=1, temperature=0, logprobs=5),
                                lora_request=LoRARequest(name, i + 1, adapters[name]), use_tqdm=False)[0]
        top = out.outputs[0].logprobs[0]
        shift = 0.0
        for token, lp in top.items():
            # bf16 activations on the fast kernels: within 0.05 of the exact forward pass
            assert abs(lp.logprob - ref[token]) < 0.05, (name, token, lp.logprob, ref[token])
            shift = max(shift, abs(ref[token] - base[token]))
        assert shift > 0.2, f"{name}: the adapter moves the logprobs"


def test_mixed_adapters_in_one_call_equal_each_alone(lora_llm, adapters):
    # max_loras=1: the two adapters take turns in the one slot.
    reqs = [None, LoRARequest("sql", 1, adapters["sql"]), LoRARequest("all", 2, adapters["all"])]
    prompts = ["The weather today is", "SELECT name FROM", "Once upon a time"]
    sp = SamplingParams(max_tokens=10, temperature=0)
    alone = [lora_llm.generate(p, sp, lora_request=r, use_tqdm=False)[0].outputs[0].text
             for p, r in zip(prompts, reqs)]
    together = lora_llm.generate(prompts * 2, sp, lora_request=reqs * 2, use_tqdm=False)
    assert [o.outputs[0].text for o in together] == alone * 2


def test_lora_request_without_enable_lora_is_refused(llm, adapters):
    with pytest.raises(ValueError) as info:
        llm.generate("hello", SamplingParams(max_tokens=2), lora_request=LoRARequest("sql", 1, adapters["sql"]),
                     use_tqdm=False)
    assert "enable_lora" in str(info.value)


def test_bad_adapter_is_refused_naming_it(lora_llm, repo_root, model_dir, tmp_path):
    big = make_lora(repo_root, model_dir, tmp_path / "big", 3, "--rank", "16")
    with pytest.raises(ValueError) as info:
        lora_llm.generate("hello", SamplingParams(max_tokens=2), lora_request=LoRARequest("big", 9, big),
                          use_tqdm=False)
    assert "max-lora-rank" in str(info.value)
    assert lora_llm.generate("hello", SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].text is not None


def test_rbln_refuses_lora_naming_why(model_dir):
    # Fixed graphs compiled ahead of time have no adapter inputs (ABI v1.6: no HALO_CAP_LORA).
    with pytest.raises(Exception) as info:
        LLM(model_dir, device="rbln", enable_lora=True)
    message = str(info.value)
    assert "rbln" in message and "HALO_CAP_LORA" in message and "halo compile" in message, message
