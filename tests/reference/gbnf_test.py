#!/usr/bin/python3
"""Tests of the GBNF reference recognizer (gbnf.py) and its corpus.

    /usr/bin/python3 -m pytest -q tests/reference/gbnf_test.py

Checks every grammar in tests/data/grammars against its hand-written valid and
invalid examples, every prefix of the valid ones with is_prefix, the malformed
grammars in errors.json, and a few grammars (left recursion, nullable rules)
that only a general recognizer handles.
"""
import json
import os
import subprocess
import sys

import pytest

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gbnf  # noqa: E402

NAMES = gbnf.corpus_names()


def load(name):
    with open(os.path.join(gbnf.CORPUS, name + ".gbnf"), encoding="utf-8") as f:
        return gbnf.parse_grammar(f.read())


def examples(name, kind):
    return gbnf.read_examples(os.path.join(gbnf.CORPUS, "%s.%s.txt" % (name, kind)))


def error_cases():
    with open(os.path.join(gbnf.CORPUS, "errors.json"), encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------- corpus

def test_corpus_size():
    assert len(NAMES) >= 12
    for name in NAMES:
        assert len(examples(name, "valid")) >= 6, name
        assert len(examples(name, "invalid")) >= 6, name


@pytest.mark.parametrize("name", NAMES)
def test_valid_examples_match(name):
    grammar = load(name)
    for s in examples(name, "valid"):
        assert grammar.matches(s), s


@pytest.mark.parametrize("name", NAMES)
def test_invalid_examples_do_not_match(name):
    grammar = load(name)
    for s in examples(name, "invalid"):
        assert not grammar.matches(s), s


@pytest.mark.parametrize("name", NAMES)
def test_every_prefix_of_valid_is_prefix(name):
    grammar = load(name)
    for s in examples(name, "valid"):
        for k in range(len(s) + 1):
            assert grammar.is_prefix(s[:k]), (s, k)


@pytest.mark.parametrize("case", error_cases(), ids=lambda c: repr(c["grammar"])[:30])
def test_malformed_grammar_raises(case):
    with pytest.raises(gbnf.GrammarError) as info:
        gbnf.parse_grammar(case["grammar"])
    words = case.get("error_any") or [case["error"]]
    assert any(w in str(info.value).lower() for w in words), str(info.value)


def test_self_test_command():
    run = subprocess.run([sys.executable, os.path.join(HERE, "gbnf.py"), "--self-test"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_match_command():
    path = os.path.join(gbnf.CORPUS, "utf8_enum.gbnf")
    for text, code in (("café, 日本語", 0), ("cafe", 1)):
        run = subprocess.run([sys.executable, os.path.join(HERE, "gbnf.py"), path],
                             input=text.encode("utf-8"), capture_output=True)
        assert run.returncode == code, text


# ---------------------------------------------------------------- generality

def test_left_recursive_expression():
    g = gbnf.parse_grammar('''
        root ::= expr
        expr ::= expr "+" term | expr "-" term | term
        term ::= term "*" atom | atom
        atom ::= [0-9]+ | "(" expr ")"
    ''')
    assert g.matches("1+2*3-(4-5)*6")
    assert g.matches("((1))")
    assert not g.matches("1+")
    assert not g.matches("+1")
    assert g.is_prefix("1+(2*")
    assert not g.is_prefix("1+)")


def test_left_recursive_list_and_indirect_recursion():
    g = gbnf.parse_grammar('''
        root ::= list
        list ::= list "," item | item
        item ::= a | "x"
        a    ::= b "!"
        b    ::= a | "y"     # indirect left recursion a -> b -> a
    ''')
    assert g.matches("x,y!,y!!!,x")
    assert not g.matches("x,,y!")
    assert not g.matches("y")


def test_nullable_left_recursion():
    g = gbnf.parse_grammar('''
        root ::= s
        s    ::= s s | "(" s ")" | ""
        x    ::= x | ""   # unused, cyclic and nullable
    ''')
    for s in ["", "()", "(())()", "()()()"]:
        assert g.matches(s), s
    for s in ["(", ")(", "(()"]:
        assert not g.matches(s), s
    assert g.is_prefix("((")


def test_nullable_chain():
    g = gbnf.parse_grammar('root ::= a b c "z"\na ::= "" | "a"\nb ::= a a\nc ::= b? ()')
    assert g.matches("z") and g.matches("aaz") and g.matches("aaaaaz")
    assert not g.matches("aaaaaaz")


# ---------------------------------------------------------------- dialect details

def test_is_prefix_ignores_dead_rules():
    # "b" can never finish (no base case), so "ab" is not a viable prefix.
    g = gbnf.parse_grammar('root ::= "a" ( "b" loop | "c" )\nloop ::= "x" loop')
    assert g.is_prefix("a")
    assert not g.is_prefix("ab")
    assert g.matches("ac")


def test_negated_class_and_dot():
    g = gbnf.parse_grammar('root ::= [^a-c\\n] .')
    assert g.matches("d\n") and g.matches("😀x")
    assert not g.matches("a\n") and not g.matches("\nx") and not g.matches("d")


def test_repetition_forms():
    cases = {'"a"{3}': (3, 3), '"a"{2,}': (2, None), '"a"{,2}': (0, 2), '"a"{1,3}': (1, 3),
             '"a"{0}': (0, 0), '"a"*': (0, None), '"a"+': (1, None), '"a"?': (0, 1)}
    for op, (lo, hi) in cases.items():
        g = gbnf.parse_grammar("root ::= " + op)
        for n in range(8):
            want = n >= lo and (hi is None or n <= hi)
            assert g.matches("a" * n) == want, (op, n)


def test_rule_boundaries_and_comments():
    g = gbnf.parse_grammar('root::=a b#comment ::= "no"\na\n::= "#"\nb ::= ( "|" | ) c\nc ::=')
    assert g.matches("#|") and g.matches("#")
    assert not g.matches("#no")


def test_class_dash_and_escapes():
    g = gbnf.parse_grammar(r'root ::= [-a] [b-] [\-\]\[] "\x41\u00e9\U0001F600\/"')
    assert g.matches("-b]Aé😀/") and g.matches("a-[Aé😀/")
    assert not g.matches("bb]Aé😀/")


@pytest.mark.parametrize("text", [
    'root ::= [a-c-e]',      # '-' in the middle, not forming a range
    'root ::= []',           # empty class
    'root ::= [^]',
    'root ::= "a"{}',
    'root ::= "a"*?',
    'root ::= "a"{2}+',
    'root ::= * "a"',
    'root ::= "\\U00110000"',
    'root ::= "a" ::= "b"',
    'root ::= "a" @',
])
def test_more_malformed(text):
    with pytest.raises(gbnf.GrammarError):
        gbnf.parse_grammar(text)
