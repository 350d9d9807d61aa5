"""Guided decoding: hundreds of sampled generations (temperature 1) on the demo
model, each of which must parse and validate against its JSON schema
(python3-jsonschema, independent of halo), fully match its regex (Python's re),
be one of its choices, or derive from its GBNF grammar (the grammar corpus in
tests/data/grammars, checked by tests/reference/gbnf.py, an Earley recognizer
written apart from halo's pushdown matcher). The constraint comes in vLLM's
request fields (guided_json, guided_regex, guided_choice, guided_grammar,
structured_outputs, response_format), as the HTTP API takes them."""
import glob
import json
import os
import re
import sys

import jsonschema
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reference"))
import gbnf  # noqa: E402

SAMPLES = 24  # per constraint and prompt (n)
PROMPTS = ["What is curl?", "The package", "{"]

SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "maxLength": 12},
                    "ok": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
     "required": ["name", "ok"], "additionalProperties": False},
    {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1, "maxItems": 3},
    {"anyOf": [{"type": "boolean"}, {"type": "null"}, {"const": "x"}]},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"enum": [0, 1, 2]}, "y": {"enum": [0, 1, 2]}},
                      "required": ["x", "y"]}},
     "type": "object", "properties": {"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}},
     "required": ["from", "to"]},
    {"type": "string", "format": "date"},
]
REGEXES = [r"\d{3}-\d{4}", r"(yes|no), because [a-z ]{1,20}\.", r"[A-Z][a-z]{1,8} [A-Z][a-z]{1,8}", r"[\u00e0-\u00ff]{2,5}!"]
CHOICES = [["positive", "negative", "neutral"], ["apt", "apt-get", "aptitude", "dpkg"]]
GRAMMAR_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "grammars")
GRAMMARS = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(GRAMMAR_DIR, "*.gbnf")))


def read_grammar(name):
    with open(os.path.join(GRAMMAR_DIR, name + ".gbnf"), encoding="utf-8") as f:
        return f.read()


def check_grammar_output(name, ref, c):
    """A finished output derives from the grammar; one cut by max_tokens is a
    prefix of something that does."""
    if c.finish_reason == "stop":
        assert ref.matches(c.text), f"{name}: {c.text!r} does not derive from the grammar"
    else:
        assert c.finish_reason == "length", (name, c.finish_reason)
        # Cut inside a multi-byte character, the text ends in U+FFFD (as vLLM's does).
        text = c.text[:-1] if c.text.endswith("\ufffd") else c.text
        assert ref.is_prefix(text), f"{name}: {c.text!r} is not a prefix of the grammar's language"


def sample(llm, prompt, fields, max_tokens=160, n=SAMPLES):
    params = {"n": n, "temperature": 1.0, "max_tokens": max_tokens, "seed": 7, **fields}
    out = llm.generate(prompt, params, use_tqdm=False)[0]
    assert len(out.outputs) == n
    return out.outputs


@pytest.mark.parametrize("schema", SCHEMAS, ids=[f"schema{i}" for i in range(len(SCHEMAS))])
def test_guided_json_validates(llm, schema):
    for prompt in PROMPTS:
        for c in sample(llm, prompt, {"guided_json": schema}):
            assert c.finish_reason == "stop", (prompt, c.text)
            jsonschema.validate(json.loads(c.text), schema)


def test_response_format_json_object_parses(llm):
    for prompt in PROMPTS:
        for c in sample(llm, prompt, {"response_format": {"type": "json_object"}}, max_tokens=200):
            if c.finish_reason == "stop":
                assert isinstance(json.loads(c.text), dict), c.text


@pytest.mark.parametrize("pattern", REGEXES)
def test_guided_regex_fully_matches(llm, pattern):
    for prompt in PROMPTS:
        for c in sample(llm, prompt, {"guided_regex": pattern}):
            assert c.finish_reason == "stop", (prompt, c.text)
            assert re.fullmatch(pattern, c.text), (pattern, c.text)


@pytest.mark.parametrize("choices", CHOICES)
def test_guided_choice_is_one_of_them(llm, choices):
    seen = set()
    for prompt in PROMPTS:
        for c in sample(llm, prompt, {"guided_choice": choices}):
            assert c.text in choices, c.text
            seen.add(c.text)
    assert len(seen) > 1, "temperature 1 should reach more than one choice"


def test_bad_constraints_are_value_errors(llm):
    with pytest.raises(ValueError, match="guided_regex"):
        llm.generate("x", {"guided_regex": "(unclosed"}, use_tqdm=False)
    with pytest.raises(ValueError, match="guided_json"):
        llm.generate("x", {"guided_json": {"type": "object", "patternProperties": {"a": {}}}}, use_tqdm=False)
    with pytest.raises(ValueError, match="matches no text"):
        llm.generate("x", {"guided_regex": "a[]b"}, use_tqdm=False)
    with pytest.raises(ValueError, match="cannot both"):
        llm.generate("x", {"guided_regex": "a", "guided_choice": ["b"]}, use_tqdm=False)
    with pytest.raises(ValueError, match="guided_grammar: grammar: line 1: rule 'foo' is used but never defined"):
        llm.generate("x", {"guided_grammar": "root ::= foo"}, use_tqdm=False)
    with pytest.raises(ValueError, match="left-recursive"):
        llm.generate("x", {"guided_grammar": "root ::= root \"a\" | \"a\""}, use_tqdm=False)
    with pytest.raises(ValueError, match="cannot both"):
        llm.generate("x", {"guided_grammar": "root ::= \"a\"", "guided_regex": "a"}, use_tqdm=False)


@pytest.mark.parametrize("name", GRAMMARS)
def test_guided_grammar_outputs_derive_from_the_grammar(llm, name):
    text = read_grammar(name)
    ref = gbnf.parse_grammar(text)
    finished = 0
    for prompt in PROMPTS[:2]:  # 13 grammars x 2 prompts x 16 samples
        for c in sample(llm, prompt, {"guided_grammar": text}, max_tokens=120, n=16):
            check_grammar_output(name, ref, c)
            finished += c.finish_reason == "stop"
    # log_negated ends only at a newline, which the demo model never writes.
    assert finished > 0 or name == "log_negated", f"{name}: no output finished within 120 tokens"


def test_structured_outputs_grammar_and_choice(llm):
    """vLLM's newer request form: structured_outputs {grammar | choice | ...}."""
    ref = gbnf.parse_grammar(read_grammar("balanced"))
    for c in sample(llm, "x", {"structured_outputs": {"grammar": read_grammar("balanced")}}, max_tokens=60):
        check_grammar_output("balanced", ref, c)
    for c in sample(llm, "x", {"structured_outputs": {"choice": ["up", "down"]}}):
        assert c.text in ("up", "down"), c.text


def test_guided_decoding_params_as_vllm_writes_them(llm):
    from halo import GuidedDecodingParams, SamplingParams

    sp = SamplingParams(n=8, temperature=1.0, seed=3, max_tokens=40,
                        guided_decoding=GuidedDecodingParams(choice=["red", "green", "blue"]))
    out = llm.generate("Colour:", sp, use_tqdm=False)[0]
    assert {c.text for c in out.outputs} <= {"red", "green", "blue"}


# Random models of two families (tools/make_test_model.py): near-flat logits
# wander everywhere the mask allows; one has Llama 2's 32k SentencePiece
# tokenizer (leading spaces, byte fallback), the other the demo's byte-level one.
@pytest.fixture(scope="module", params=["qwen3", "llama-sentencepiece"])
def random_llm(request, repo_root, tmp_path_factory):
    import subprocess
    import sys

    from halo import LLM

    out = str(tmp_path_factory.mktemp("guided") / request.param)
    args = ["/usr/bin/python3", f"{repo_root}/tools/make_test_model.py", "--out", out, "--hidden", "64",
            "--layers", "2", "--heads", "4", "--kv-heads", "2", "--intermediate", "128", "--max-pos", "1024"]
    if request.param == "qwen3":
        args += ["--family", "qwen3", "--seed", "5"]
    else:
        args += ["--family", "llama", "--seed", "6", "--tokenizer", f"{repo_root}/tests/data/tokenizers/llama2"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return LLM(out, max_num_seqs=32, max_model_len=1024)


def test_random_models_obey_every_constraint(random_llm):
    checks = [({"guided_json": s}, lambda t, s=s: jsonschema.validate(json.loads(t), s)) for s in SCHEMAS]
    checks += [({"guided_regex": p}, lambda t, p=p: re.fullmatch(p, t) or pytest.fail(f"{p!r}: {t!r}")) for p in REGEXES]
    checks += [({"guided_choice": c}, lambda t, c=c: t in c or pytest.fail(f"{t!r} not in {c}")) for c in CHOICES]
    for name in ("arith", "balanced", "utf8_enum", "chess", "json"):
        ref = gbnf.parse_grammar(read_grammar(name))
        for c in sample(random_llm, "hello", {"guided_grammar": read_grammar(name)}, max_tokens=200):
            check_grammar_output(name, ref, c)
    for fields, check in checks:
        for c in sample(random_llm, "hello", fields, max_tokens=300):
            assert c.finish_reason == "stop", (fields, c.text)
            check(c.text)
