#!/usr/bin/python3
"""Independent reference recognizer for the GBNF grammar dialect used by halo.

Written from the dialect description only (not from the C++ code); it exists to
check the C++ grammar-constrained decoder.  Standard library only.

Dialect
-------
* A grammar is a sequence of rules ``name ::= alternatives``.  Names are one or
  more of ``[A-Za-z0-9_-]``.  The start rule is ``root`` (required).
* Whitespace (space, tab, CR, LF) separates tokens anywhere; ``#`` starts a
  comment running to the end of the line.  A rule body ends where the next
  ``name ::=`` begins (a name, optional whitespace/comments, ``::=``) or at the
  end of the text.
* Alternatives are separated by ``|``; an alternative is a sequence of zero or
  more terms, and an empty alternative (or empty body) matches "".
* Terms: ``"lit"`` / ``'lit'`` (may be empty), character classes ``[...]`` with
  single characters and ranges ``a-z`` (``^`` first negates: any code point in
  0..0x10FFFF, surrogates excluded, that is not listed), ``.`` (any code point
  except surrogates, newline included), a rule reference, ``( alternatives )``.
* Escapes in literals and classes: ``\\n \\r \\t \\\\ \\" \\' \\[ \\] \\- \\^ \\/``,
  ``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH`` (exact digit counts, value <= 0x10FFFF).
  Anything else after a backslash is an error.
* In a class a raw ``-`` is literal only first (after ``^``) or last; ``]``
  must be escaped; ``[]`` and ``[^]`` are errors (empty class).
* One postfix operator per term, optionally preceded by whitespace: ``*`` ``+``
  ``?`` ``{m}`` ``{m,}`` ``{m,n}`` ``{,n}`` (m <= n <= 1000, m <= 1000).
  ``a**`` / ``a*?`` / ``a{2}*`` are errors.
* Errors: empty grammar, missing ``::=``, rule defined twice, undefined rule,
  missing root, unterminated literal/class, unbalanced parentheses, bad
  escapes, reversed ranges, bad repetition bounds, stray characters.

Matching is over Unicode code points.  The recognizer is Earley with the
Aycock-Horspool nullable fix, so left recursion and nullable rules work.  Rules
that can derive no finite string are pruned, which makes ``is_prefix`` exact.

Command line::

    gbnf.py GRAMMAR_FILE < text    # exit 0 if stdin (UTF-8) matches, else 1
    gbnf.py --self-test            # check the corpus in tests/data/grammars
"""
import bisect
import json
import os
import sys

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
MAX_REPEAT = 1000
NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'",
                  "[": "[", "]": "]", "-": "-", "^": "^", "/": "/"}
HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
OPERATORS = "*+?{"


class GrammarError(ValueError):
    """A malformed grammar; the message says what and where."""


# ---------------------------------------------------------------- terminals

def _normalize(ranges):
    """Sort and merge inclusive (lo, hi) ranges."""
    merged = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _complement(ranges):
    """All scalar values (0..0x10FFFF minus surrogates) not in `ranges`."""
    out, nxt = [], 0
    for lo, hi in _normalize(list(ranges) + [SURROGATES]):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return out


class Terminal:
    """A set of code points stored as sorted disjoint inclusive ranges."""
    __slots__ = ("los", "his")

    def __init__(self, ranges):
        ranges = _normalize(ranges)
        self.los = [lo for lo, _ in ranges]
        self.his = [hi for _, hi in ranges]

    def matches(self, cp):
        k = bisect.bisect_right(self.los, cp) - 1
        return k >= 0 and cp <= self.his[k]

    def is_empty(self):
        return not self.los

    def __repr__(self):
        return "Terminal(%r)" % list(zip(self.los, self.his))


# ---------------------------------------------------------------- grammar

class Grammar:
    """Productions over integer nonterminals; symbols are ints or Terminals."""

    def __init__(self, names, productions, root):
        self.names = names            # nonterminal id -> name
        self.root = root
        self.productions = _prune(productions)
        self.by_lhs = [[] for _ in names]
        for p, (lhs, _) in enumerate(self.productions):
            self.by_lhs[lhs].append(p)
        self.nullable = _nullable(self.productions)

    def matches(self, s):
        """True iff the whole of `s` derives from root."""
        last = self._chart(s)
        if last is None:
            return False
        return any(d == len(self.productions[p][1]) and o == 0
                   and self.productions[p][0] == self.root for p, d, o in last)

    def is_prefix(self, s):
        """True iff `s` can be extended to a string that derives from root."""
        last = self._chart(s)
        return bool(last)

    def _chart(self, s):
        """Run Earley over `s`; return the last item list, or None if it died."""
        items = [(p, 0, 0) for p in self.by_lhs[self.root]]
        waiting = []                  # per position: symbol -> [items]
        for i in range(len(s) + 1):
            if not items:
                return None
            cp = ord(s[i]) if i < len(s) else None
            waiting.append({})
            items = self._step(i, cp, items, waiting)
            if cp is None:
                return items
        return None

    def _step(self, i, cp, items, waiting):
        """Predict/complete set i (in place, returns it); scan into a new list.

        Returns the full set i when cp is None, else the scanned set i+1."""
        seen = set(items)
        nxt, nxt_seen = [], set()
        here = waiting[i]

        def add(item):
            if item not in seen:
                seen.add(item)
                items.append(item)

        j = 0
        while j < len(items):
            p, d, o = items[j]
            j += 1
            lhs, rhs = self.productions[p]
            if d == len(rhs):
                for wp, wd, wo in waiting[o].get(lhs, ()):
                    add((wp, wd + 1, wo))
                continue
            sym = rhs[d]
            if type(sym) is int:
                here.setdefault(sym, []).append((p, d, o))
                for q in self.by_lhs[sym]:
                    add((q, 0, i))
                if sym in self.nullable:
                    add((p, d + 1, o))
            elif cp is not None and sym.matches(cp):
                item = (p, d + 1, o)
                if item not in nxt_seen:
                    nxt_seen.add(item)
                    nxt.append(item)
        return items if cp is None else nxt


def _prune(productions):
    """Drop productions using a symbol that derives no finite string."""
    productive = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in productions:
            if lhs not in productive and all(
                    (sym in productive) if type(sym) is int else not sym.is_empty()
                    for sym in rhs):
                productive.add(lhs)
                changed = True
    return [(lhs, tuple(rhs)) for lhs, rhs in productions
            if all((s in productive) if type(s) is int else not s.is_empty() for s in rhs)]


def _nullable(productions):
    nullable = set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in productions:
            if lhs not in nullable and all(type(s) is int and s in nullable for s in rhs):
                nullable.add(lhs)
                changed = True
    return frozenset(nullable)


# ---------------------------------------------------------------- parser

class _Parser:
    """Recursive-descent parser producing productions directly."""

    def __init__(self, text):
        self.text = text
        self.pos = 0
        self.names = []               # id -> name
        self.ids = {}                 # user rule name -> id
        self.defined = set()
        self.first_use = {}           # name -> position of first reference
        self.productions = []         # (lhs id, [symbols])

    # --- helpers
    def error(self, message, pos=None):
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        raise GrammarError("%s (line %d, column %d)" % (message, line, col))

    def eof(self):
        return self.pos >= len(self.text)

    def peek(self):
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_space(self, pos):
        text = self.text
        while pos < len(text):
            if text[pos] in " \t\r\n":
                pos += 1
            elif text[pos] == "#":
                end = text.find("\n", pos)
                pos = len(text) if end < 0 else end + 1
            else:
                break
        return pos

    def name_end(self, pos):
        while pos < len(self.text) and self.text[pos] in NAME_CHARS:
            pos += 1
        return pos

    def at_rule_start(self):
        end = self.name_end(self.pos)
        return end > self.pos and self.text.startswith("::=", self.skip_space(end))

    def nonterminal(self, name):
        if name not in self.ids:
            self.ids[name] = len(self.names)
            self.names.append(name)
        return self.ids[name]

    def fresh(self, alternatives):
        nt = len(self.names)
        self.names.append("<generated %d>" % nt)
        for alt in alternatives:
            self.productions.append((nt, list(alt)))
        return nt

    # --- grammar level
    def parse(self):
        self.pos = self.skip_space(0)
        if self.eof():
            self.error("empty grammar: no rules")
        while not self.eof():
            self.rule()
        for name, pos in self.first_use.items():
            if name not in self.defined:
                self.error("undefined rule '%s'" % name, pos)
        if "root" not in self.defined:
            self.error("missing root rule: no rule named 'root'", 0)
        return Grammar(self.names, self.productions, self.ids["root"])

    def rule(self):
        start = self.pos
        end = self.name_end(start)
        if end == start:
            self.error("expected a rule name, found %r" % self.peek())
        name = self.text[start:end]
        self.pos = self.skip_space(end)
        if not self.text.startswith("::=", self.pos):
            self.error("expected '::=' after rule name '%s'" % name)
        if name in self.defined:
            self.error("rule '%s' defined twice (duplicate definition)" % name, start)
        self.defined.add(name)
        self.pos += 3
        lhs = self.nonterminal(name)
        for alt in self.alternatives(nested=False):
            self.productions.append((lhs, alt))
        self.pos = self.skip_space(self.pos)

    def alternatives(self, nested):
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            alts.append(self.sequence(nested))
        return alts

    def sequence(self, nested):
        seq = []
        while True:
            self.pos = self.skip_space(self.pos)
            c = self.peek()
            if c == "" or c == "|" or (c == ")" and nested):
                return seq
            if c == ")":
                self.error("unbalanced parenthesis: unexpected ')'")
            if c in NAME_CHARS and self.at_rule_start():
                if nested:
                    self.error("unbalanced parenthesis: expected ')' before next rule")
                return seq
            seq.extend(self.postfix(self.term()))

    def term(self):
        c = self.peek()
        if c in NAME_CHARS:
            return [self.reference()]
        if c in "\"'":
            return self.literal()
        if c == "[":
            return [self.char_class()]
        if c == ".":
            self.pos += 1
            return [Terminal(_complement([]))]
        if c == "(":
            return [self.group()]
        if c in OPERATORS:
            self.error("repetition operator %r without a preceding term" % c)
        if c == ":" and self.text.startswith("::=", self.pos):
            self.error("unexpected '::=' (missing rule name?)")
        self.error("unexpected character %r" % c)

    def reference(self):
        start = self.pos
        self.pos = self.name_end(start)
        name = self.text[start:self.pos]
        self.first_use.setdefault(name, start)
        return self.nonterminal(name)

    def group(self):
        open_pos = self.pos
        self.pos += 1
        alts = self.alternatives(nested=True)
        if self.peek() != ")":
            self.error("unbalanced parenthesis: '(' is never closed", open_pos)
        self.pos += 1
        return self.fresh(alts)

    # --- literals, classes, escapes
    def literal(self):
        quote, start = self.peek(), self.pos
        self.pos += 1
        out = []
        while True:
            if self.eof():
                self.error("unterminated string literal", start)
            c = self.peek()
            if c == quote:
                self.pos += 1
                return out
            cp = self.char(start, "string literal")
            out.append(Terminal([(cp, cp)]))

    def char(self, start, what):
        """One possibly-escaped code point; advances past it."""
        if self.eof():
            self.error("unterminated " + what, start)
        c = self.peek()
        if c != "\\":
            self.pos += 1
            return ord(c)
        if self.pos + 1 >= len(self.text):
            self.error("unterminated " + what, start)
        e = self.text[self.pos + 1]
        if e in SIMPLE_ESCAPES:
            self.pos += 2
            return ord(SIMPLE_ESCAPES[e])
        if e in HEX_ESCAPES:
            digits = self.text[self.pos + 2:self.pos + 2 + HEX_ESCAPES[e]]
            if len(digits) != HEX_ESCAPES[e] or any(d not in "0123456789abcdefABCDEF" for d in digits):
                self.error("bad escape: \\%s needs exactly %d hex digits" % (e, HEX_ESCAPES[e]))
            value = int(digits, 16)
            if value > MAX_CODE_POINT:
                self.error("bad escape: code point 0x%X out of range" % value)
            self.pos += 2 + len(digits)
            return value
        self.error("bad escape sequence '\\%s'" % e)

    def char_class(self):
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges = []
        while True:
            if self.eof():
                self.error("unterminated character class", start)
            if self.peek() == "]":
                break
            ranges.append(self.class_item(start, first=not ranges))
        self.pos += 1
        if not ranges:
            self.error("empty character class", start)
        return Terminal(_complement(ranges) if negated else ranges)

    def class_item(self, start, first):
        text, pos = self.text, self.pos
        if text[pos] == "-" and not first and text[pos + 1:pos + 2] != "]":
            self.error("'-' must be escaped unless first or last in a character class")
        lo = self.char(start, "character class")
        if self.peek() == "-" and self.text[self.pos + 1:self.pos + 2] not in ("]", ""):
            self.pos += 1
            hi = self.char(start, "character class")
            if hi < lo:
                self.error("reversed range in character class: %r-%r" % (chr(lo), chr(hi)))
            return (lo, hi)
        return (lo, lo)

    # --- repetition
    def postfix(self, seq):
        after = self.skip_space(self.pos)
        if after >= len(self.text) or self.text[after] not in OPERATORS:
            return seq
        self.pos = after
        op = self.peek()
        sym = seq[0] if len(seq) == 1 else self.fresh([seq])
        if op == "{":
            lo, hi = self.bounds()
            out = self.repeat(sym, lo, hi)
        else:
            self.pos += 1
            out = {"*": lambda: [self.star(sym)],
                   "+": lambda: [sym, self.star(sym)],
                   "?": lambda: [self.fresh([[], [sym]])]}[op]()
        after = self.skip_space(self.pos)
        if after < len(self.text) and self.text[after] in OPERATORS:
            self.error("stacked repetition operators: parenthesize the inner term", after)
        return out

    def star(self, sym):
        nt = len(self.names)        # the id fresh() will assign
        return self.fresh([[], [nt, sym]])  # left recursive: R ::= "" | R sym

    def repeat(self, sym, lo, hi):
        out = [sym] * lo
        if hi is None:
            return out + [self.star(sym)]
        tail = None                   # U_k ::= "" | sym U_{k-1}
        for _ in range(hi - lo):
            tail = self.fresh([[], [sym] + ([tail] if tail is not None else [])])
        return out + ([tail] if tail is not None else [])

    def number(self):
        start = self.pos
        while self.peek().isascii() and self.peek().isdigit():
            self.pos += 1
        if self.pos == start:
            return None
        value = int(self.text[start:self.pos])
        if value > MAX_REPEAT:
            self.error("repetition bound %d exceeds %d" % (value, MAX_REPEAT), start)
        return value

    def bounds(self):
        start = self.pos
        self.pos = self.skip_space(self.pos + 1)
        lo = self.number()
        self.pos = self.skip_space(self.pos)
        comma = self.peek() == ","
        hi = lo
        if comma:
            self.pos = self.skip_space(self.pos + 1)
            hi = self.number()
            self.pos = self.skip_space(self.pos)
        if self.peek() != "}":
            self.error("malformed repetition: expected '}'", start)
        self.pos += 1
        if lo is None and (not comma or hi is None):
            self.error("malformed repetition: no bounds given", start)
        lo = lo or 0
        if hi is not None and lo > hi:
            self.error("invalid repetition {%d,%d}: min greater than max" % (lo, hi), start)
        return lo, hi


def parse_grammar(text):
    """Parse GBNF `text` into a Grammar; raises GrammarError if malformed."""
    return _Parser(text).parse()


# ---------------------------------------------------------------- corpus / CLI

CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "data", "grammars")


def read_examples(path):
    """One JSON string literal per line; blank lines are skipped."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def corpus_names():
    return sorted(f[:-5] for f in os.listdir(CORPUS) if f.endswith(".gbnf"))


def self_test():
    failures = 0
    for name in corpus_names():
        base = os.path.join(CORPUS, name)
        with open(base + ".gbnf", encoding="utf-8") as f:
            grammar = parse_grammar(f.read())
        for want, suffix in ((True, ".valid.txt"), (False, ".invalid.txt")):
            for s in read_examples(base + suffix):
                if grammar.matches(s) != want:
                    failures += 1
                    print("FAIL %s: %r should %smatch" % (name, s, "" if want else "not "))
    with open(os.path.join(CORPUS, "errors.json"), encoding="utf-8") as f:
        for case in json.load(f):
            try:
                parse_grammar(case["grammar"])
                failures += 1
                print("FAIL errors.json: accepted %r" % case["grammar"])
            except GrammarError as e:
                words = case.get("error_any") or [case["error"]]
                if not any(w in str(e).lower() for w in words):
                    failures += 1
                    print("FAIL errors.json: %r gave %r, wanted one of %r" % (case["grammar"], str(e), words))
    print("self-test: %s" % ("ok" if not failures else "%d failure(s)" % failures))
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print("usage: gbnf.py GRAMMAR_FILE < text | gbnf.py --self-test", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        try:
            grammar = parse_grammar(f.read())
        except GrammarError as e:
            print("grammar error: %s" % e, file=sys.stderr)
            return 2
    try:
        text = sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError:
        return 1
    return 0 if grammar.matches(text) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
