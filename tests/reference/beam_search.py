#!/usr/bin/python3
"""Independent numpy beam search over the reference forward pass (forward.py).

    /usr/bin/python3 tests/reference/beam_search.py MODEL_DIR --prompt-ids 1,2,3 \
        --beam-width 4 [--n 2] [--max-tokens 12] [--length-penalty 1.0] \
        [--early-stopping false|true|never] [--ignore-eos] [--stop-token-ids 5,9]
    /usr/bin/python3 tests/reference/beam_search.py --self-test

prints one JSON line shaped like `halo generate --beam-width W --output json`
("token_ids", "finish_reason", "outputs": [{index, token_ids, finish_reason,
cumulative_logprob, beam_score}]) plus "ambiguous": the decisions whose margin
was below --tie-margin (default 1e-4), where a float32 engine may decide the
other way. --self-test checks the search on hand-made log-probability tables.

The algorithm (the one halo implements; written here from its description,
sharing nothing with the C++ code), float64 throughout:
  * log-probabilities are log_softmax of the raw logits (no temperature);
  * a beam is (generated tokens, cum = sum of their logprobs); step 0 has one
    empty beam;
  * every step, each live beam (in beam order) offers its top 2W tokens (ties:
    lower id first) scored cum + logprob; the pool is sorted by score
    descending (ties: lower beam index, then lower token id) and walked with a
    rank r counting every candidate: a stop id with r < W becomes a finished
    hypothesis ("stop"; the id and its logprob are kept), a stop id never
    becomes a live beam; any other token becomes a new live beam, until W new
    beams exist (their order is the next step's beam index);
  * a finished hypothesis scores cum / L**lp, L = prompt length + generated
    tokens not counting a final stop id; the finished set keeps at most W,
    dropping the lowest score (ties: the newer one);
  * when the new beams have max_tokens tokens, they all finish ("length") and
    the search ends (this comes before the done check: with early_stopping
    true and W finished at that last step, the live beams are still added;
    "notes" says when that changed the result);
  * done (after each step, once W are finished): early_stopping true at once;
    false when the worst finished score >= best live cum / Lcur**lp (Lcur =
    prompt length + tokens generated so far); "never" likewise but with
    Lmax = prompt length + max_tokens when lp > 0;
  * result: finished hypotheses by score descending (ties: earlier finished
    first), the first n.
If a step leaves no live beam (every walked candidate was a stop id) the search
ends with what is finished; the description does not cover that case, so it
is reported in "ambiguous" too.
numpy + the standard library only.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TIE_MARGIN = 1e-4


# ----------------------------------------------------------------- model side


def log_softmax(logits):
    x = np.asarray(logits, dtype=np.float64)
    m = np.max(x)
    return x - (m + math.log(np.sum(np.exp(x - m))))


class ModelLogprobs:
    """Callable: full token sequence -> float64 log-probabilities of the next token.

    Uses forward.Model (the whole sequence is recomputed, as forward.py does);
    results are cached by sequence, so searches with different settings over
    the same prompt share their forward passes."""

    def __init__(self, model_dir):
        import forward  # same directory; imported lazily so --self-test needs no model

        self.model = forward.Model(model_dir)
        self.cache = {}
        self.calls = 0

    def __call__(self, seq):
        key = tuple(seq)
        hit = self.cache.get(key)
        if hit is None:
            self.calls += 1
            hit = log_softmax(self.model.forward(list(seq), last_only=True)[-1])
            self.cache[key] = hit
        return hit


def _id_list(v):
    if v is None:
        return []
    if isinstance(v, list):
        return [int(x) for x in v]
    return [int(v)]


def model_eos_ids(model_dir):
    """The model's eos ids: generation_config.json's, then config.json's (union)."""
    ids = []
    for name in ("generation_config.json", "config.json"):
        path = os.path.join(model_dir, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for i in _id_list(json.load(f).get("eos_token_id")):
                if i not in ids:
                    ids.append(i)
    return ids


def stop_set(model_dir, stop_token_ids=(), ignore_eos=False):
    s = set(int(t) for t in stop_token_ids)
    if not ignore_eos:
        s.update(model_eos_ids(model_dir))
    return s


# ----------------------------------------------------------------- search


def parse_early_stopping(v):
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    if s == "never":
        return "never"
    raise ValueError(f"early_stopping must be true, false or never, not {v!r}")


def beam_search(logprobs_fn, prompt, width, n=None, max_tokens=16, length_penalty=1.0,
                early_stopping=False, stop_ids=(), tie_margin=TIE_MARGIN):
    """Beam search as described in the module docstring.

    logprobs_fn(seq) -> 1-D float64 log-probabilities for the token after seq
    (seq = prompt + generated tokens). Returns a dict: "outputs" (the first n
    finished hypotheses, best first: token_ids, cumulative_logprob,
    beam_score, finish_reason), "ambiguous" (strings describing decisions
    whose margin was below tie_margin), "steps"."""
    W = int(width)
    if W < 1:
        raise ValueError("width must be >= 1")
    n = W if n is None else int(n)
    if not 1 <= n <= W:
        raise ValueError("n must be in [1, width]")
    T = int(max_tokens)
    if T < 1:
        raise ValueError("max_tokens must be >= 1")
    lp = float(length_penalty)
    es = parse_early_stopping(early_stopping)
    S = set(int(t) for t in stop_ids)
    prompt = [int(t) for t in prompt]
    Lp = len(prompt)
    ambiguous = []
    notes = []

    def score_of(cum, length):
        return cum / (length ** lp)

    finished = []  # dicts: tokens, cum, score, reason, seq (finish order)
    counter = [0]

    def add_finished(tokens, cum, reason, step):
        length = Lp + len(tokens) - (1 if reason == "stop" else 0)
        h = {"tokens": list(tokens), "cum": cum, "score": score_of(cum, length), "reason": reason,
             "seq": counter[0]}
        counter[0] += 1
        finished.append(h)
        if len(finished) > W:
            by_score = sorted(finished, key=lambda e: (e["score"], -e["seq"]))
            worst, next_worst = by_score[0], by_score[1]
            if next_worst["score"] - worst["score"] < tie_margin:
                ambiguous.append(f"step {step}: finished set overflow drops score {worst['score']:.6f}, "
                                 f"next {next_worst['score']:.6f}")
            finished.remove(worst)

    live = [([], 0.0)]  # (tokens, cum), in beam order
    step = 0
    while True:
        # Candidates: each live beam's top 2W tokens.
        pool = []
        beam_lists = []  # per beam: (sorted logprobs, order) for the top-2W cut check
        for bi, (toks, cum) in enumerate(live):
            lps = np.asarray(logprobs_fn(prompt + toks), dtype=np.float64)
            order = np.argsort(-lps, kind="stable")  # ties: lower id first
            k = min(2 * W, len(order))
            beam_lists.append((lps, order, k))
            for j in range(k):
                t = int(order[j])
                pool.append((cum + float(lps[t]), bi, t, j))
        pool.sort(key=lambda c: (-c[0], c[1], c[2]))

        new_live = []
        last = -1
        for r, (sc, bi, t, j) in enumerate(pool):
            last = r
            toks, cum = live[bi]
            if t in S:
                if r < W:
                    add_finished(toks + [t], sc, "stop", step)
            else:
                new_live.append((toks + [t], sc))
                if len(new_live) == W:
                    break

        # Margins around the decisions the walk made.
        window = pool[:last + 2]
        for i in range(len(window) - 1):
            a, b = window[i], window[i + 1]
            gap = a[0] - b[0]
            if gap >= tie_margin:
                continue
            a_stop, b_stop = a[2] in S, b[2] in S
            if i == last:
                ambiguous.append(f"step {step}: walk cut between beam {a[1]} token {a[2]} ({a[0]:.6f}) "
                                 f"and beam {b[1]} token {b[2]} ({b[0]:.6f})")
            elif i == W - 1 and (a_stop or b_stop):
                ambiguous.append(f"step {step}: stop token at rank {W - 1}/{W} boundary: beam {a[1]} token {a[2]}"
                                 f" ({a[0]:.6f}) vs beam {b[1]} token {b[2]} ({b[0]:.6f})")
        # A beam whose last pooled candidate was reached: its top-2W cut matters.
        for c in window:
            lps, order, k = beam_lists[c[1]]
            if c[3] == k - 1 and k < len(order):
                with np.errstate(invalid="ignore"):  # -inf - -inf: impossible tokens, no decision
                    gap = float(lps[order[k - 1]] - lps[order[k]])
                if gap < tie_margin:
                    ambiguous.append(f"step {step}: beam {c[1]}'s top-{2 * W} cut: tokens {int(order[k - 1])} "
                                     f"and {int(order[k])} differ by {gap:.2e}")

        live = new_live
        generated = step + 1
        step += 1
        if not live:
            ambiguous.append(f"step {step - 1}: no live beam left (every walked candidate was a stop id): "
                             "not covered by the algorithm's description")
            break
        if generated >= T:
            if es is True and len(finished) >= W:
                worst = min(h["score"] for h in finished)
                better = [toks for toks, cum in live if score_of(cum, Lp + generated) > worst]
                if better:
                    notes.append(f"last step: W hypotheses were finished and early_stopping is true; the live "
                                 f"beams were added as 'length' (max_tokens comes first), and {len(better)} of "
                                 "them beat the worst finished one (a done-check-first order would drop them)")
            for toks, cum in live:
                add_finished(toks, cum, "length", step - 1)
            live = []
            break
        if len(finished) >= W:
            if es is True:
                break
            best_live = max(cum for _, cum in live)
            length = (Lp + T) if (es == "never" and lp > 0) else (Lp + generated)
            bound = score_of(best_live, length)
            worst = min(h["score"] for h in finished)
            if abs(worst - bound) < tie_margin:
                ambiguous.append(f"step {step - 1}: done check: worst finished {worst:.6f} vs bound {bound:.6f}")
            if worst >= bound:
                live = []
                break

    ranked = sorted(finished, key=lambda e: (-e["score"], e["seq"]))
    for i in range(min(n + 1, len(ranked)) - 1):
        gap = ranked[i]["score"] - ranked[i + 1]["score"]
        if gap < tie_margin:
            ambiguous.append(f"final order: outputs {i} and {i + 1} scores {ranked[i]['score']:.6f} and "
                             f"{ranked[i + 1]['score']:.6f}")
    outputs = [{"index": i, "token_ids": h["tokens"], "finish_reason": h["reason"],
                "cumulative_logprob": h["cum"], "beam_score": h["score"]} for i, h in enumerate(ranked[:n])]
    return {"outputs": outputs, "ambiguous": ambiguous, "notes": notes, "steps": step}


def search_model(logprobs_fn, model_dir, prompt, width, n=None, max_tokens=16, length_penalty=1.0,
                 early_stopping=False, ignore_eos=False, stop_token_ids=(), tie_margin=TIE_MARGIN):
    """beam_search with the stop set of a model directory; returns halo's JSON shape."""
    res = beam_search(logprobs_fn, prompt, width, n=n, max_tokens=max_tokens, length_penalty=length_penalty,
                      early_stopping=early_stopping, stop_ids=stop_set(model_dir, stop_token_ids, ignore_eos),
                      tie_margin=tie_margin)
    best = res["outputs"][0] if res["outputs"] else {"token_ids": [], "finish_reason": None}
    return {"prompt_token_ids": list(prompt), "token_ids": best["token_ids"], "finish_reason": best["finish_reason"],
            "outputs": res["outputs"], "ambiguous": res["ambiguous"], "notes": res["notes"], "steps": res["steps"]}


# ----------------------------------------------------------------- self-test


def _table_fn(table, vocab, prompt_len=1):
    """logprobs_fn from {tuple(generated tokens): {token: prob}} (the prompt stripped);
    missing tokens share the rest of the mass equally."""

    def fn(seq):
        gen = tuple(seq[prompt_len:])
        probs = table.get(gen, {})
        rest = 1.0 - sum(probs.values())
        others = vocab - len(probs)
        p = np.full(vocab, rest / others if others else 0.0)
        for t, v in probs.items():
            p[t] = v
        with np.errstate(divide="ignore"):
            return np.log(p)

    return fn


def _brute_force_greedy(fn, prompt, T):
    seq = list(prompt)
    out = []
    for _ in range(T):
        t = int(np.argmax(fn(seq)))
        out.append(t)
        seq.append(t)
    return out


def self_test():
    fails = []

    def check(name, cond, detail=""):
        print(f"{'ok  ' if cond else 'FAIL'} {name}{(': ' + detail) if detail and not cond else ''}")
        if not cond:
            fails.append(name)

    V = 8
    # 1. W=1 is greedy; cum is the sum of the chosen logprobs.
    rng = np.random.default_rng(0)
    cache = {}

    def rand_fn(seq):
        k = tuple(seq)
        if k not in cache:
            cache[k] = log_softmax(rng.standard_normal(V) * 2)
        return cache[k]

    r = beam_search(rand_fn, [0], 1, max_tokens=6)
    g = _brute_force_greedy(rand_fn, [0], 6)
    o = r["outputs"][0]
    check("W=1 equals greedy", o["token_ids"] == g, f"{o['token_ids']} vs {g}")
    want_cum = sum(float(rand_fn([0] + g[:i])[g[i]]) for i in range(6))
    check("cum is the sum of logprobs", abs(o["cumulative_logprob"] - want_cum) < 1e-12)
    check("length score = cum / L", abs(o["beam_score"] - want_cum / 7) < 1e-12)
    check("finish_reason length", o["finish_reason"] == "length")

    # 2. W = V keeps every first token; with T = 2 and lp = 0 the best output is the best pair.
    r = beam_search(rand_fn, [0], V, max_tokens=2, length_penalty=0.0)
    pairs = sorted(((float(rand_fn([0])[a] + rand_fn([0, a])[b]), a, b) for a in range(V) for b in range(V)),
                   reverse=True)
    check("W=V, T=2: outputs are the best W pairs in order",
          [o["token_ids"] for o in r["outputs"]] == [[a, b] for _, a, b in pairs[:V]])

    # 3. Stop handling on a hand-made table. Stop id 7. Prompt [0], W=2.
    #    step 0: 7 (p .5), 1 (.3), 2 (.15) -> 7 finished (rank 0 < 2), live [1], [2]
    #    The finished hypothesis keeps 7, cum = log .5, L = Lp + 0 = 1 -> score log .5.
    t = {(): {7: 0.5, 1: 0.3, 2: 0.15},
         (1,): {3: 0.9}, (2,): {4: 0.9},
         (1, 3): {7: 0.9}, (2, 4): {5: 0.9}}
    fn = _table_fn(t, V)
    r = beam_search(fn, [0], 2, max_tokens=4, length_penalty=1.0, early_stopping=True, stop_ids={7})
    outs = r["outputs"]
    check("early_stopping true stops once W finished",
          [o["token_ids"] for o in outs] == [[1, 3, 7], [7]],
          f"{[(o['token_ids'], o['beam_score']) for o in outs]}")
    #    With T = 3 the last step finishes [1, 3, 7] (the second finished one) while the new beams
    #    reach max_tokens: max_tokens comes first, so the live beams are added and [2, 4, 5]
    #    (score log(.15 * .9 * .9) / 4 = -0.527) displaces [7] (-0.693).
    r3 = beam_search(fn, [0], 2, max_tokens=3, length_penalty=1.0, early_stopping=True, stop_ids={7})
    check("max_tokens is handled before the done check",
          [o["token_ids"] for o in r3["outputs"]] == [[1, 3, 7], [2, 4, 5]] and len(r3["notes"]) == 1,
          f"{r3}")
    check("stop keeps the id and its logprob in cum",
          abs(outs[1]["cumulative_logprob"] - math.log(0.5)) < 1e-12 and outs[1]["finish_reason"] == "stop")
    want = (math.log(0.3) + math.log(0.9) + math.log(0.9)) / 3  # L = 1 + 3 - 1
    check("stop score excludes the stop token from L", abs(outs[0]["beam_score"] - want) < 1e-12,
          f"{outs[0]['beam_score']} vs {want}")

    # 4. A stop candidate at rank >= W is neither finished nor live.
    t = {(): {1: 0.4, 2: 0.3, 7: 0.2}, (1,): {3: 0.9}, (2,): {3: 0.9}}
    r = beam_search(_table_fn(t, V), [0], 2, max_tokens=2, length_penalty=0.0, stop_ids={7})
    check("stop at rank W is dropped", all(o["finish_reason"] == "length" for o in r["outputs"]) and
          [o["token_ids"] for o in r["outputs"]] == [[1, 3], [2, 3]], f"{r['outputs']}")

    # 5. Done rule "false" vs "never" vs true with lp=1, W=1.
    #    step 0: 7 (0.6) finishes: cum log .6 = -0.51, L = 1, score -0.51. live [1] with cum log .4 = -0.92.
    #    false: bound = -0.92 / 2 = -0.46 > -0.51 -> not done; step 1: [1,2] cum log .4 + log .99 ~ -0.93,
    #    length -> score -0.93/3 = -0.31, which beats the stop hypothesis.
    #    true: done after step 0 -> [7].
    #    never (lp > 0): bound = -0.92 / (1 + 2) = -0.31 > -0.51 -> continue, same as false here.
    t = {(): {7: 0.6, 1: 0.4}, (1,): {2: 0.99}}
    fn = _table_fn(t, V)
    r_true = beam_search(fn, [0], 1, max_tokens=2, early_stopping=True, stop_ids={7})
    r_false = beam_search(fn, [0], 1, max_tokens=2, early_stopping=False, stop_ids={7})
    check("early_stopping true returns the first finished", r_true["outputs"][0]["token_ids"] == [7])
    check("early_stopping false keeps searching while a live beam can win",
          r_false["outputs"][0]["token_ids"] == [1, 2], f"{r_false['outputs']}")
    #    lp = 0: bound = best live cum = -0.92 < -0.51 -> done after step 0 with false.
    r0 = beam_search(fn, [0], 1, max_tokens=2, length_penalty=0.0, early_stopping=False, stop_ids={7})
    check("lp=0, false: done when no live beam can beat the worst", r0["outputs"][0]["token_ids"] == [7]
          and r0["steps"] == 1, f"{r0['outputs']} steps {r0['steps']}")

    # 6. "never" differs from false (lp = 2, prompt of 5, T = 5, W = 1).
    #    step 0: 7 (p .5) finishes: score log .5 / 5^2 = -0.0277; live [1] cum log .45 = -0.799;
    #            false bound -0.799 / 6^2 = -0.0222 > -0.0277 -> continue (never: / 10^2, continue).
    #    step 1: [1] -> 2 (p .3, the rest .1 each): live [1, 2] cum -2.003.
    #            false: bound -2.003 / 7^2 = -0.0409 <= -0.0277 -> done -> [7].
    #            never: bound -2.003 / 10^2 = -0.0200 > -0.0277 -> continue; the tokens after have
    #            p = 1, so [1, 2, 3, 3, 3] ends by length with -2.003 / 10^2 and wins.
    t = {(): {7: 0.5, 1: 0.45}, (1,): {2: 0.3}, (1, 2): {3: 1.0}, (1, 2, 3): {3: 1.0}, (1, 2, 3, 3): {3: 1.0}}
    fn = _table_fn(t, V, prompt_len=5)
    p5 = [0, 0, 0, 0, 0]
    rf = beam_search(fn, p5, 1, max_tokens=5, length_penalty=2.0, early_stopping=False, stop_ids={7})
    rn = beam_search(fn, p5, 1, max_tokens=5, length_penalty=2.0, early_stopping="never", stop_ids={7})
    check("false: done by the current-length bound", rf["outputs"][0]["token_ids"] == [7] and rf["steps"] == 2,
          f"{rf['outputs']} steps {rf['steps']}")
    check("never: the max-length bound keeps searching", rn["outputs"][0]["token_ids"] == [1, 2, 3, 3, 3],
          f"{rn['outputs']}")

    # 7. Finished set keeps at most W; the lowest score is dropped; final order by score.
    #    W=2, T=1: step 0 candidates 7 (.4), 6 (.3), 1 (.2), 2 (.1) with stops {7, 6} -> both finished
    #    (ranks 0, 1), live [1], [2] -> length -> finished now 4 > 2: keep the best two.
    t = {(): {7: 0.4, 6: 0.3, 1: 0.2, 2: 0.1}}
    fn = _table_fn(t, V)
    r = beam_search(fn, [0], 2, max_tokens=1, length_penalty=1.0, stop_ids={7, 6})
    # scores: [7] log .4 / 1 = -0.916, [6] log .3 = -1.204, [1] log .2 / 2 = -0.805, [2] log .1 / 2 = -1.151
    check("finished set keeps the best W", [o["token_ids"] for o in r["outputs"]] == [[1], [7]],
          f"{[(o['token_ids'], o['beam_score']) for o in r['outputs']]}")

    # 8. Overflow ties drop the newer one; final ties keep the earlier one first.
    t = {(): {7: 0.25, 6: 0.25, 5: 0.25, 1: 0.2}}
    r = beam_search(_table_fn(t, V), [0], 2, max_tokens=1, length_penalty=0.0, stop_ids={7, 6, 5})
    check("ties: lower id walked first, newer dropped, earlier first",
          [o["token_ids"] for o in r["outputs"]] == [[5], [6]], f"{r['outputs']}")
    check("exact ties are reported as ambiguous", any("final order" in a for a in r["ambiguous"]))

    # 9. Pool order ties: lower beam index first; top 2W per beam ties: lower id first.
    lpz = log_softmax(np.zeros(V))

    r = beam_search(lambda seq: lpz, [0], 2, max_tokens=2, length_penalty=0.0)
    check("flat logits: lowest ids win", [o["token_ids"] for o in r["outputs"]] == [[0, 0], [0, 1]],
          f"{r['outputs']}")
    check("flat logits are ambiguous", len(r["ambiguous"]) > 0)

    # 10. n < W returns the first n; clear margins give no ambiguity.
    r = beam_search(rand_fn, [0], 3, n=2, max_tokens=4)
    check("n outputs", len(r["outputs"]) == 2)
    scores = [o["beam_score"] for o in r["outputs"]]
    check("outputs sorted by score", scores == sorted(scores, reverse=True))

    # 11. No live beam left: search ends, reported.
    t = {(): {7: 0.5, 6: 0.4, 1: 0.1}}
    r = beam_search(_table_fn(t, V), [0], 1, max_tokens=3, stop_ids={7, 6})
    check("exhausted pool ends the search", [o["token_ids"] for o in r["outputs"]] == [[7]] and
          any("no live beam" in a for a in r["ambiguous"]), f"{r}")

    # 12. Larger W on the random table: every output has T tokens (no stops), cum matches its tokens.
    r = beam_search(rand_fn, [0], 4, max_tokens=5, length_penalty=2.0)
    ok = True
    for o in r["outputs"]:
        toks = o["token_ids"]
        cum = sum(float(rand_fn([0] + toks[:i])[toks[i]]) for i in range(len(toks)))
        ok &= len(toks) == 5 and abs(cum - o["cumulative_logprob"]) < 1e-12 and \
            abs(o["beam_score"] - cum / 6 ** 2) < 1e-12
    check("cum and score consistent with the tokens", ok)
    # and it is never worse than greedy under lp = 0 (the greedy path is among W=1's).
    r4 = beam_search(rand_fn, [0], 4, max_tokens=5, length_penalty=0.0)
    r1 = beam_search(rand_fn, [0], 1, max_tokens=5, length_penalty=0.0)
    check("W=4 finds a cum at least greedy's (lp = 0)",
          r4["outputs"][0]["cumulative_logprob"] >= r1["outputs"][0]["cumulative_logprob"] - 1e-12)

    print(f"{len(fails)} failed" if fails else "all self-checks passed")
    return 1 if fails else 0


# ----------------------------------------------------------------- command line


def main(argv=None):
    ap = argparse.ArgumentParser(description="numpy reference beam search")
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--prompt-ids", action="append", default=[], help="comma-separated token ids; repeat for more")
    ap.add_argument("--beam-width", type=int, default=1)
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--length-penalty", type=float, default=1.0)
    ap.add_argument("--early-stopping", default="false")
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--stop-token-ids", default="")
    ap.add_argument("--tie-margin", type=float, default=TIE_MARGIN)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.model_dir or not a.prompt_ids:
        ap.error("MODEL_DIR and --prompt-ids are required (or --self-test)")
    stops = [int(t) for t in a.stop_token_ids.split(",") if t.strip()]
    fn = ModelLogprobs(a.model_dir)
    for p in a.prompt_ids:
        ids = [int(t) for t in p.split(",") if t.strip()]
        row = search_model(fn, a.model_dir, ids, a.beam_width, n=a.n, max_tokens=a.max_tokens,
                           length_penalty=a.length_penalty, early_stopping=a.early_stopping,
                           ignore_eos=a.ignore_eos, stop_token_ids=stops, tie_margin=a.tie_margin)
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
