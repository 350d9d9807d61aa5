#!/usr/bin/env python3
"""The throughput cost of guided decoding at 32 concurrent streams: the same
32 x 128 tokens (greedy, ignore_eos) generated unconstrained, under a
guided_regex and under a recursive guided_grammar (the pushdown matcher),
alternating rounds in one run, through the Python API (halo.LLM) on the same
engine.

    PYTHONPATH=build/python HALO_PLUGIN_PATH=build/lib/halo/plugins \
        python3 benchmarks/guided_throughput.py [--model DIR] [--rounds 3]
"""
import argparse
import time

from halo import LLM, SamplingParams

# Words and spaces without end: every step is constrained,
# and no stream ends before max_tokens.
REGEX = "[a-z ,.]+"
# The same characters, with brackets that nest: a context-free language.
GRAMMAR = 'root ::= item+\nitem ::= [a-z ,.] | "(" item+ ")"'


def run(llm, prompts, params):
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    secs = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
    return tokens, secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/pkgchat-5m")
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    llm = LLM(a.model, max_num_seqs=a.streams, max_model_len=512)
    prompts = [f"Package number {i} is" for i in range(a.streams)]
    plain = SamplingParams(temperature=0, max_tokens=a.tokens, ignore_eos=True)
    common = {"temperature": 0, "max_tokens": a.tokens, "ignore_eos": True}
    guided = {"guided_regex": dict(common, guided_regex=REGEX),
              "guided_grammar": dict(common, guided_grammar=GRAMMAR)}
    ratios = {k: [] for k in guided}
    for r in range(1, a.rounds + 1):
        pt, ps = run(llm, prompts, plain)
        line = f"round {r}: unconstrained {pt / ps:8.1f} tok/s ({pt} tokens)"
        for name, params in guided.items():
            gt, gs = run(llm, prompts, params)
            ratios[name].append((gt / gs) / (pt / ps))
            line += f" | {name} {gt / gs:8.1f} tok/s ({gt} tokens) x{ratios[name][-1]:.3f}"
        print(line + ("  (first round: builds the masks)" if r == 1 else ""))
    for name, rs in ratios.items():
        later = sorted(rs[1:]) or rs
        print(f"{name}: first round x{rs[0]:.3f}; later rounds median x{later[len(later) // 2]:.3f}, best x{max(later):.3f}")


if __name__ == "__main__":
    main()
