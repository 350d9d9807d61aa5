#!/usr/bin/env python3
"""Offline throughput through the Python API (halo.LLM.generate) against `halo bench
throughput` on the same workload: 64 prompts of 128 random token ids, 128 generated tokens
each (greedy, ignore_eos). Alternates the two for --rounds rounds and prints both output
tok/s and their ratio.

  HALO_PLUGIN_PATH=build/lib/halo/plugins PYTHONPATH=python \\
      /usr/bin/python3 benchmarks/python_throughput.py [--model M] [--halo build/bin/halo]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time


def write_dataset(path, num_prompts, input_len, output_len, vocab, seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(100, vocab) for _ in range(input_len)] for _ in range(num_prompts)]
    with open(path, "w", encoding="utf-8") as f:
        for ids in prompts:
            f.write(json.dumps({"prompt_token_ids": ids, "output_len": output_len}) + "\n")
    return prompts


def run_cli(halo, model, dataset, out_json, extra):
    cmd = [halo, "bench", "throughput", model, "--dataset", dataset, "--baseline-prompts", "0",
           "--output-json", out_json, "--log-level", "warn", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}")
    with open(out_json, encoding="utf-8") as f:
        result = json.load(f)["batched"]
    return result["output_tokens"], result["duration_s"]


def run_python(llm, prompts, output_len):
    from halo import SamplingParams

    params = SamplingParams(temperature=0, ignore_eos=True, max_tokens=output_len)
    start = time.perf_counter()
    outs = llm.generate(prompt_token_ids=prompts, sampling_params=params, use_tqdm=False)
    seconds = time.perf_counter() - start
    return sum(len(o.outputs[0].token_ids) for o in outs), seconds


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/pkgchat-5m")
    p.add_argument("--halo", default="build/bin/halo")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()

    from halo import LLM, SamplingParams

    llm = LLM(args.model, device=args.device)
    vocab = llm.get_tokenizer().vocab_size
    print(f"model {args.model} on {llm.engine.device}: {args.num_prompts} prompts x "
          f"{args.input_len} tokens in, {args.output_len} out (vocab {vocab})")
    extra = ["--device", args.device]
    with tempfile.TemporaryDirectory() as tmp:
        dataset = os.path.join(tmp, "dataset.jsonl")
        prompts = write_dataset(dataset, args.num_prompts, args.input_len, args.output_len, vocab,
                                args.seed)
        llm.generate(prompt_token_ids=prompts[:2], sampling_params=SamplingParams(max_tokens=2),
                     use_tqdm=False)  # warm up
        rows = []
        for r in range(args.rounds):
            cli_tokens, cli_s = run_cli(args.halo, args.model, dataset, os.path.join(tmp, f"out{r}.json"),
                                        extra)
            py_tokens, py_s = run_python(llm, prompts, args.output_len)
            cli_tps, py_tps = cli_tokens / cli_s, py_tokens / py_s
            rows.append((cli_tps, py_tps))
            print(f"round {r + 1}: halo bench throughput {cli_tps:10.1f} tok/s ({cli_tokens} tokens, "
                  f"{cli_s:.3f} s) | LLM.generate {py_tps:10.1f} tok/s ({py_tokens} tokens, "
                  f"{py_s:.3f} s) | python/cli {py_tps / cli_tps:.3f}")
        cli_best = max(r[0] for r in rows)
        py_best = max(r[1] for r in rows)
        print(f"best: halo bench throughput {cli_best:.1f} tok/s, LLM.generate {py_best:.1f} tok/s, "
              f"ratio {py_best / cli_best:.3f}")


if __name__ == "__main__":
    main()
