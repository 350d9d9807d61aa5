#!/usr/bin/env python3
"""What guided requests cost the others in the same batch: the time per token
of one unconstrained greedy stream alone, then with 8 schema-guided requests
(JSON tool calls, sampled) beside it, on a model with Qwen3's 151k-token
vocabulary (a random 2-layer model from tools/make_test_model.py, so the
vocabulary dominates, as in agents' first steps). Each round's schema names
its properties afresh, so its masks are new states, as a new agent request's
are. Same run, same engine: the ratio is the guided requests' cost.

    PYTHONPATH=build/python HALO_PLUGIN_PATH=build/lib/halo/plugins \\
        python3 benchmarks/guided_interference.py [--rounds 4]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from halo import LLM, GuidedDecodingParams, SamplingParams

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def schema(r):
    return {"type": "object", "properties": {
        f"name_{r}": {"enum": ["get_weather", "search_files", "run_command"]},
        f"args_{r}": {"type": "object", "properties": {
            f"path_{r}": {"type": "string", "maxLength": 40},
            f"count_{r}": {"type": "integer", "minimum": 1, "maximum": 500}},
            "required": [f"path_{r}", f"count_{r}"]}},
        "required": [f"name_{r}", f"args_{r}"]}


def make_model(out):
    subprocess.run([sys.executable, os.path.join(REPO, "tools", "make_test_model.py"), "--out", out,
                    "--family", "qwen3", "--seed", "5", "--max-pos", "1024",
                    "--tokenizer", os.path.join(REPO, "tests", "data", "tokenizers", "qwen3")],
                   check=True, capture_output=True)


def ms_per_token(llm, prompts, params):
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    secs = time.perf_counter() - t0
    return 1000 * secs / len(outs[0].outputs[0].token_ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a model directory (default: a random Qwen3-vocabulary model)")
    ap.add_argument("--guided", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4)
    a = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    model = a.model or os.path.join(tmp.name, "qwen3-vocab")
    if not a.model:
        make_model(model)
    llm = LLM(model, max_num_seqs=a.guided + 1, max_model_len=1024)
    plain = SamplingParams(temperature=0, max_tokens=a.tokens, ignore_eos=True)
    ratios = []
    for r in range(a.rounds):
        alone = ms_per_token(llm, ["The tool to call is"], plain)
        guided = [SamplingParams(temperature=1.0, seed=100 * r + i, max_tokens=a.tokens,
                                 guided_decoding=GuidedDecodingParams(json=schema(r))) for i in range(a.guided)]
        beside = ms_per_token(llm, ["The tool to call is"] + ["Call a tool:"] * a.guided, [plain] + guided)
        ratios.append(beside / alone)
        print(f"round {r}: alone {alone:7.2f} ms/token, with {a.guided} guided beside {beside:7.2f} ms/token "
              f"(x{beside / alone:.2f})")
    ratios.sort()
    print(f"median x{ratios[len(ratios) // 2]:.2f} (the issue's bound: x1.10)")


if __name__ == "__main__":
    main()
