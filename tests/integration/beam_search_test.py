#!/usr/bin/python3
"""`halo generate --beam-width W` against the independent numpy beam search
(tests/reference/beam_search.py over tests/reference/forward.py).

    /usr/bin/python3 tests/integration/beam_search_test.py --halo build/bin/halo --source-dir .

Random fp32 models (tools/make_test_model.py: llama and qwen3, hidden 64,
2 layers), two prompts each, widths 1/2/4, length penalties 1/0/2,
early_stopping false/true/never, max_tokens 8-12, with and without
--ignore-eos, and cases with a --stop-token-ids id chosen so that the
reference finishes hypotheses with it. halo runs with --kv-cache-dtype fp32.
Every case: the same outputs (count, token_ids in order, finish_reason) and
cumulative_logprob / beam_score within 2e-3. Where the reference meets a
decision closer than 1e-4 (fp32 may decide the other way) the case is printed
as ambiguous and not compared; more than a third ambiguous fails the test.
Exits 77 (ctest SKIP_RETURN_CODE) when numpy is missing. Run by ctest with
Debian's python3.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__
sys.stdout.reconfigure(line_buffering=True)  # ordered with halo's stderr under ctest

try:
    import numpy  # noqa: F401  (forward.py and make_test_model.py need it)
except ImportError:
    print("SKIP: numpy is missing for this python "
          f"({sys.executable}); install python3-numpy (scripts/install-deps.sh --test)")
    sys.exit(77)

TOL = 2e-3
PROMPTS = ([1, 17, 300, 42], [9, 100, 2000, 7, 55, 3])
MODELS = (("llama", 11), ("qwen3", 12))

# (name, width, n, length_penalty, early_stopping, max_tokens, ignore_eos, stop ids: 0 none,
#  1 one per prompt, 2 two per prompt, 3 the 1st, 3rd and 5th most likely first tokens of every
#  prompt; see choose_stop_ids)
CONFIGS = (
    ("w1-greedy", 1, None, 1.0, "false", 10, True, 0),
    ("w2", 2, None, 1.0, "false", 10, True, 0),
    ("w4", 4, None, 1.0, "false", 10, True, 0),
    ("w4-n2-lp0", 4, 2, 0.0, "false", 8, True, 0),
    ("w4-lp2", 4, None, 2.0, "false", 12, True, 0),
    ("w1-stop", 1, None, 1.0, "false", 10, True, 1),
    ("w2-stop-es", 2, None, 1.0, "true", 10, True, 2),
    ("w2-stop-lp0", 2, None, 0.0, "false", 10, True, 2),
    ("w4-stop", 4, None, 1.0, "false", 12, True, 1),
    ("w4-stop2", 4, None, 1.0, "false", 12, True, 2),
    ("w4-stop-lp0-es", 4, None, 0.0, "true", 10, True, 2),
    ("w4-stop-lp2-never", 4, None, 2.0, "never", 12, True, 1),
    ("w4-n3-lp2-eos+stop", 4, 3, 2.0, "false", 12, False, 1),
    ("w2-lp0-eos", 2, None, 0.0, "false", 8, False, 0),
    ("w2-rank-stops", 2, None, 1.0, "false", 8, True, 3),
    ("w4-rank-stops-es", 4, None, 1.0, "true", 8, True, 3),
)


def run_halo(args, model_dir, cfg, stop_ids):
    name, width, n, lp, es, max_tokens, ignore_eos, use_stop = cfg
    cmd = [args.halo, "generate", model_dir, "--output", "json", "--log-level", "warn",
           "--kv-cache-dtype", "fp32", "--threads", str(args.threads),
           "--beam-width", str(width), "--length-penalty", repr(lp), "--early-stopping", es,
           "--max-tokens", str(max_tokens)]
    for p in PROMPTS:
        cmd += ["--prompt-ids", ",".join(map(str, p))]
    if n is not None:
        cmd += ["--n", str(n)]
    if ignore_eos:
        cmd.append("--ignore-eos")
    if stop_ids:
        cmd += ["--stop-token-ids", ",".join(map(str, stop_ids))]
    cmd += args.halo_arg
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip().startswith("{")]
    if len(rows) != len(PROMPTS):
        raise RuntimeError(f"{' '.join(cmd)}: expected {len(PROMPTS)} JSON lines, got {len(rows)}:\n{proc.stdout}")
    return rows


def compare(ref, got):
    """Differences between the reference row and halo's row (empty: equal)."""
    diffs = []
    if got.get("prompt_token_ids") != ref["prompt_token_ids"]:
        diffs.append(f"prompt_token_ids {got.get('prompt_token_ids')} != {ref['prompt_token_ids']}")
    outs = got.get("outputs")
    if not isinstance(outs, list):
        return diffs + [f"no outputs list in {got}"]
    if len(outs) != len(ref["outputs"]):
        diffs.append(f"{len(outs)} outputs, reference {len(ref['outputs'])}")
    for i, (r, h) in enumerate(zip(ref["outputs"], outs)):
        if h.get("index") != i:
            diffs.append(f"output {i}: index {h.get('index')}")
        if h.get("token_ids") != r["token_ids"]:
            diffs.append(f"output {i}: token_ids {h.get('token_ids')} != {r['token_ids']}")
        if h.get("finish_reason") != r["finish_reason"]:
            diffs.append(f"output {i}: finish_reason {h.get('finish_reason')} != {r['finish_reason']}")
        for key in ("cumulative_logprob", "beam_score"):
            v = h.get(key)
            if not isinstance(v, (int, float)) or abs(v - r[key]) > TOL:
                diffs.append(f"output {i}: {key} {v} != {r[key]:.6f} (tolerance {TOL})")
    if outs:
        if got.get("token_ids") != outs[0].get("token_ids"):
            diffs.append(f"top-level token_ids {got.get('token_ids')} != outputs[0]'s")
        if got.get("finish_reason") != outs[0].get("finish_reason"):
            diffs.append(f"top-level finish_reason {got.get('finish_reason')} != outputs[0]'s")
    return diffs


def choose_stop_ids(bs, fn, model_dir):
    """Tokens the reference's width-4 search takes early: for every prompt, the
    best hypothesis' 2nd token (level 1) and also its 3rd (level 2), so that
    stop cases do finish hypotheses with them (and, with two, often W of them,
    ending the search early). Level 3: the prompt's 1st, 3rd and 5th most
    likely first tokens, so that a stop candidate walked at rank >= W while
    fewer than W new beams exist is dropped (the rank rule, not a count of
    new beams)."""
    one, two, ranks = [], [], []
    for p in PROMPTS:
        row = bs.search_model(fn, model_dir, p, 4, max_tokens=10, length_penalty=1.0,
                              early_stopping="false", ignore_eos=True)
        best = row["outputs"][0]["token_ids"]
        for t in best[1:2]:
            if t not in one:
                one.append(t)
        for t in best[1:3]:
            if t not in two:
                two.append(t)
        first = numpy.argsort(-fn(list(p)), kind="stable")
        for t in (int(first[0]), int(first[2]), int(first[4])):
            if t not in ranks:
                ranks.append(t)
    return {0: [], 1: one, 2: two, 3: ranks}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--halo", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--threads", type=int, default=1, help="halo --threads (default 1: keep CPU use modest)")
    ap.add_argument("--halo-arg", action="append", default=[], help="extra argument for halo generate; repeat")
    ap.add_argument("--keep", action="store_true", help="keep the generated models")
    ap.add_argument("--reference-only", action="store_true",
                    help="run only the reference (no halo): its outcomes, ambiguities and stop coverage")
    args = ap.parse_args()
    t0 = time.time()

    sys.path.insert(0, os.path.join(args.source_dir, "tests", "reference"))
    import beam_search as bs  # noqa: E402

    print("== reference self-checks (tests/reference/beam_search.py --self-test)")
    if bs.self_test() != 0:
        print("FAIL: the reference's own self-checks fail")
        return 1

    help_text = "" if args.reference_only else \
        subprocess.run([args.halo, "generate", "--help"], capture_output=True, text=True).stdout
    if not args.reference_only and "--beam-width" not in help_text:
        print(f"FAIL: {args.halo} generate has no --beam-width flag")
        return 1

    tmp = tempfile.mkdtemp(prefix="halo-beam-")
    failures, ambiguous, compared, stop_outputs_compared = [], [], 0, 0
    total, early_done = 0, 0
    try:
        for family, seed in MODELS:
            model_dir = os.path.join(tmp, family)
            subprocess.run([sys.executable, os.path.join(args.source_dir, "tools", "make_test_model.py"),
                            "--family", family, "--out", model_dir, "--hidden", "64", "--layers", "2",
                            "--dtype", "fp32", "--seed", str(seed)], check=True)
            fn = bs.ModelLogprobs(model_dir)
            stop_sets = choose_stop_ids(bs, fn, model_dir)
            print(f"== {family} (seed {seed}): eos ids {bs.model_eos_ids(model_dir)}, stop ids for stop cases "
                  f"{stop_sets[1]} (one per prompt), {stop_sets[2]} (two per prompt), {stop_sets[3]} (ranks)")
            for cfg in CONFIGS:
                name, width, n, lp, es, max_tokens, ignore_eos, use_stop = cfg
                try:
                    rows = None if args.reference_only else run_halo(args, model_dir, cfg, stop_sets[use_stop])
                    err = "--reference-only"
                except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                    rows = None
                    err = str(e)
                for pi, prompt in enumerate(PROMPTS):
                    total += 1
                    label = f"{family}/{name}/p{pi}"
                    ref = bs.search_model(fn, model_dir, prompt, width, n=n, max_tokens=max_tokens,
                                          length_penalty=lp, early_stopping=es, ignore_eos=ignore_eos,
                                          stop_token_ids=stop_sets[use_stop])
                    reasons = "/".join(o["finish_reason"] for o in ref["outputs"])
                    lens = ",".join(str(len(o["token_ids"])) for o in ref["outputs"])
                    what = f"{len(ref['outputs'])} outputs [{reasons}] lengths [{lens}] in {ref['steps']} steps"
                    early_done += ref["steps"] < max_tokens and not ref["ambiguous"]
                    if args.reference_only:
                        if ref["ambiguous"]:
                            ambiguous.append(label)
                        else:
                            compared += 1
                            stop_outputs_compared += sum(o["finish_reason"] == "stop" for o in ref["outputs"])
                        print(f"{'AMBIG' if ref['ambiguous'] else 'ref  '} {label}: {what} "
                              f"{'; '.join(ref['ambiguous'] + ref['notes'])}")
                        continue
                    if rows is None:
                        failures.append(label)
                        print(f"FAIL  {label}: halo failed: {err}")
                        continue
                    diffs = compare(ref, rows[pi])
                    if ref["ambiguous"]:
                        ambiguous.append(label)
                        print(f"AMBIG {label}: {what}; skipped ({'equal anyway' if not diffs else 'differs'}): "
                              + "; ".join(ref["ambiguous"]))
                        continue
                    compared += 1
                    if diffs:
                        failures.append(label)
                        print(f"FAIL  {label}: {what}")
                        for d in diffs:
                            print(f"        {d}")
                        for note in ref["notes"]:
                            print(f"        note: {note}")
                    else:
                        stop_outputs_compared += sum(o["finish_reason"] == "stop" for o in ref["outputs"])
                        worst = max((max(abs(h["cumulative_logprob"] - r["cumulative_logprob"]),
                                         abs(h["beam_score"] - r["beam_score"]))
                                     for r, h in zip(ref["outputs"], rows[pi]["outputs"])), default=0.0)
                        print(f"ok    {label}: {what}; max |diff| {worst:.2e}")
    finally:
        if args.keep:
            print(f"models kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"== {total} cases: {compared} compared, {len(failures)} failed, {len(ambiguous)} ambiguous (skipped), "
          f"{stop_outputs_compared} compared outputs ended by a stop id, {early_done} compared cases done before "
          f"max_tokens; {time.time() - t0:.1f} s")
    ok = True
    if failures:
        print("FAIL: " + ", ".join(failures))
        ok = False
    if 3 * len(ambiguous) > total:
        print(f"FAIL: {len(ambiguous)} of {total} cases are ambiguous (more than a third)")
        ok = False
    if stop_outputs_compared == 0:
        print("FAIL: no compared case finished a hypothesis with a stop id (choose another stop id)")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
