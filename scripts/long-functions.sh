#!/usr/bin/env bash
# Lists the C++ functions longer than N lines (default 100), the project rule
# being that none is without a reason written beside it: a `// long: ...`
# comment on the line of the function's name or in the comment block just
# above it. Prints one function a line, longest first:
#
#   file:line length name [long: reason]
#
# where line is the line of the function's name and length counts the lines
# from it to the closing brace. Scans core/, plugins/, tools/, python/src/ and
# docs/examples/ (not tests/ or fuzz/) unless paths are given.
#
#   scripts/long-functions.sh [-n N] [--unexplained] [PATH...]
#
#   -n N           report functions longer than N lines (default 100)
#   --unexplained  only those without a `// long:` reason; exits 1 if any
#
# A brace counter (python3, standard library only), not a compiler: it skips
# comments, string/char/raw-string literals and preprocessor lines, and takes
# a `{` at namespace or class scope that follows a parameter list (and
# qualifiers or a constructor's initializer list) as a function body. A
# function's lambdas and local classes count as part of it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

limit=100 unexplained=0 paths=()
while (($#)); do
  case "$1" in
    -n) limit="$2"; shift 2 ;;
    --unexplained) unexplained=1; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "long-functions.sh: unknown argument $1" >&2; exit 2 ;;
    *) paths+=("$1"); shift ;;
  esac
done
if ((${#paths[@]} == 0)); then
  cd "$here"
  paths=(core plugins tools python/src docs/examples)
fi

files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
  find "${paths[@]}" -type f \( -name '*.cpp' -o -name '*.cc' -o -name '*.cxx' -o -name '*.h' \
    -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)

exec python3 - "$limit" "$unexplained" "${files[@]}" <<'PY'
import re
import sys

limit, unexplained, files = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:]

def blank_literals(src):
    """Returns src with comments, literals and preprocessor lines blanked to
    spaces (newlines kept, so offsets and line numbers stay), and the set of
    lines holding a `// long:` comment."""
    out, reasons, i, n, line = [], {}, 0, len(src), 1
    at_line_start = True  # only whitespace so far on this line
    while i < n:
        c = src[i]
        if c == "\n":
            out.append(c); line += 1; i += 1; at_line_start = True
            continue
        if at_line_start and c == "#":  # preprocessor line, with continuations
            while i < n and src[i] != "\n":
                if src[i] == "\\" and i + 1 < n and src[i + 1] == "\n":
                    out.append(" \n"); line += 1; i += 2
                else:
                    out.append(" "); i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            m = re.match(r"//\s*long:\s*(.*)", src[i:j])
            if m:
                reasons[line] = m.group(1).strip()
            out.append(" " * (j - i)); i = j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            body = src[i:j]
            out.append(re.sub(r"[^\n]", " ", body)); line += body.count("\n"); i = j
            continue
        m = re.match(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(', src[i:i + 24])
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = src.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            body = src[i:j]
            out.append('""' + re.sub(r"[^\n]", " ", body[2:])); line += body.count("\n"); i = j
            continue
        if c == "'" and i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_"):
            # a digit separator (1'000) unless the word before is a prefix (u8'x')
            k = i
            while k > 0 and (src[k - 1].isalnum() or src[k - 1] == "_"):
                k -= 1
            if src[k:i] not in ("u8", "u", "U", "L"):
                out.append(" "); i += 1
                continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else c); i = j
            continue
        out.append(c); i += 1
    return "".join(out), reasons

TOKEN = re.compile(r"[A-Za-z_]\w*|::|->|\d[\w.]*|\S")
NOT_NAMES = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype",
             "noexcept", "alignas", "alignof", "static_assert", "__attribute__",
             "__declspec", "requires", "throw", "new", "delete", "co_return", "co_await"}

def function_name(header):
    """The name of the function whose header (the text from the end of the
    previous declaration to the `{`) this is, or None when the `{` opens no
    function body. A constructor's initializer list or trailing qualifiers may
    follow the parameter list."""
    toks = TOKEN.findall(header)
    while toks and toks[0] in ("public", "private", "protected") and toks[1:2] == [":"]:
        toks = toks[2:]
    if toks[:1] == ["extern"] and toks[1:2] == ['"']:  # extern "C" int f() {
        toks = toks[3:]
    if not toks or toks[0] in ("namespace", "extern", "using", "typedef"):
        return None
    if toks[0] == "template":
        depth, k = 0, 1
        while k < len(toks):  # skip template<...>
            depth += {"<": 1, ">": -1}.get(toks[k], 0)
            k += 1
            if depth == 0:
                break
        toks = toks[k:]
    # a lambda at namespace scope: name it by its variable
    for k, t in enumerate(toks):
        if t == "=" and toks[k + 1:k + 2] == ["["] and (k == 0 or toks[k - 1] != "operator"):
            return toks[k - 1] if k > 0 else None
    depth = 0
    for k, t in enumerate(toks):
        if t in ("class", "struct", "union", "enum") and depth == 0:
            return None
        if t == "(":
            prev = toks[k - 1] if k else ""
            if depth == 0 and k and (prev not in NOT_NAMES and (prev[0].isalpha() or prev[0] == "_")
                                     or "operator" in toks[max(0, k - 4):k]):
                # name: walk back over `A::B::~C` or `operator...`
                j = k - 1
                if "operator" in toks[max(0, k - 4):k]:
                    j = max(x for x in range(max(0, k - 4), k) if toks[x] == "operator")
                    name = "operator" + "".join(toks[j + 1:k])
                else:
                    name = toks[j]
                if j > 0 and toks[j - 1] == "~":
                    j -= 1; name = "~" + name
                while j >= 2 and toks[j - 1] == "::" and re.match(r"[A-Za-z_]", toks[j - 2]):
                    j -= 2; name = toks[j] + "::" + name
                return name
            depth += 1
        elif t == ")":
            depth -= 1
        elif t == "=" and depth == 0 and (k == 0 or toks[k - 1] != "operator"):
            return None  # a variable's initializer
    return None

def scan(path):
    src = open(path, encoding="utf-8", errors="replace").read()
    code, reasons = blank_literals(src)
    line_of = [0] * (len(code) + 1)
    ln = 1
    for k, ch in enumerate(code):
        line_of[k] = ln
        if ch == "\n":
            ln += 1
    line_of[len(code)] = ln
    found = []
    # scopes: a stack of ("ns"|"class"|"other", class name or None)
    scopes, start, i, n = [], 0, 0, len(code)
    while i < n:
        c = code[i]
        if c in ";}":
            if c == "}" and scopes:
                scopes.pop()
            start = i + 1
        elif c == "{":
            header = code[start:i]
            stripped = header.rstrip()
            name = function_name(header)
            # inside a constructor's initializer list, `member{...}` is no body
            init = re.search(r"\)\s*(?:noexcept\s*)?:(?!:)", header)
            in_parens = header.count("(") > header.count(")")  # `f(x = {})`
            if in_parens or (name and init and stripped and (stripped[-1].isalnum() or stripped[-1] in "_>")):
                depth, j = 1, i + 1
                while j < n and depth:
                    depth += {"{": 1, "}": -1}.get(code[j], 0)
                    j += 1
                i = j
                continue
            if name and (not scopes or scopes[-1][0] != "other"):
                # the function's body: skip to its closing brace
                depth, j = 1, i + 1
                while j < n and depth:
                    depth += {"{": 1, "}": -1}.get(code[j], 0)
                    j += 1
                # its first line: the line of its name
                m = None
                for m in re.finditer(r"(?<!\w)" + re.escape(name.split("::")[-1].lstrip("~")) + r"(?!\w)", header):
                    pass
                first = line_of[start + m.start()] if m else line_of[i]
                last = line_of[j - 1]
                qual = "::".join(s[1] for s in scopes if s[0] == "class" and s[1])
                full = f"{qual}::{name}" if qual and "::" not in name else name
                reason = next((reasons[l] for l in range(first - 3, first + 1) if l in reasons), None)
                if reason is None:  # or anywhere in the comment block right above
                    l = first - 1
                    while l > 0 and src.splitlines()[l - 1].strip().startswith("//"):
                        if l in reasons:
                            reason = reasons[l]; break
                        l -= 1
                found.append((path, first, last - first + 1, full, reason))
                start, i = j, j
                continue
            toks = TOKEN.findall(header)
            kind = "other"
            if any(t in ("namespace",) for t in toks[:2]) or toks[:1] == ["extern"]:
                kind = "ns"
            elif name is None and any(t in ("class", "struct", "union") for t in toks):
                kind = "class" if not scopes or scopes[-1][0] != "other" else "other"
            cname = None
            if kind == "class":  # its name: the word after the last class-key
                # outside template<...> (`template <class T> struct X : B<T> {`)
                depth, keys = 0, []
                for k, t in enumerate(toks):
                    depth += {"<": 1, ">": -1}.get(t, 0)
                    if depth == 0 and t in ("class", "struct", "union") and k + 1 < len(toks):
                        keys.append(k)
                if keys and re.match(r"[A-Za-z_]", toks[keys[-1] + 1]):
                    cname = toks[keys[-1] + 1]
            scopes.append((kind, cname))
            start = i + 1
        i += 1
    return found

rows = []
for f in files:
    rows += [r for r in scan(f) if r[2] > limit]
rows.sort(key=lambda r: (-r[2], r[0], r[1]))
shown = [r for r in rows if not (unexplained and r[4])]
for path, line, length, name, reason in shown:
    print(f"{path}:{line} {length} {name}" + (f"  [long: {reason}]" if reason else ""))
sys.exit(1 if unexplained and shown else 0)
PY
