#!/usr/bin/python3
"""Reference renderer for the halo_jinja tests: Python's jinja2 set up the way
transformers' apply_chat_template sets it up (chat_template_utils.py:
_compile_jinja_template / render_jinja_template), plus vLLM's handling of
list-of-parts content.

usage: render_reference.py CASES.json OUT.json [REPO_ROOT]

CASES.json: {"template_cases": [{name, template, context}],
             "chat_cases": [{name, config, messages, tools?, add_generation_prompt?,
                             continue_final_message?, chat_template_kwargs?}]}
OUT.json:   {"template_cases": {name: {"text": ...} | {"error": ...}},
             "chat_cases": {...}}
Exit code 3 when jinja2 cannot be imported.
"""
import json
import os
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:  # pragma: no cover
    print(f"render_reference.py: cannot import jinja2 ({e}); run scripts/install-deps.sh --test",
          file=sys.stderr)
    sys.exit(3)


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # transformers' override of jinja's tojson (no HTML escaping, insertion order kept)
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()


def render_template_case(case):
    try:
        return {"text": ENV.from_string(case["template"]).render(**case.get("context", {}))}
    except Exception as e:  # any failure is an expected error
        return {"error": f"{type(e).__name__}: {e}"}


def special_token(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def normalize_content(messages):
    # vLLM "string" content format: text parts joined with "\n".
    out = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("content"), list):
            texts = []
            for part in m["content"]:
                texts.append(part if isinstance(part, str) else part["text"])
            m["content"] = "\n".join(texts)
        out.append(m)
    return out


def render_chat_case(case, root):
    try:
        with open(os.path.join(root, case["config"]), encoding="utf-8") as f:
            cfg = json.load(f)
        template = cfg["chat_template"]
        if isinstance(template, list):
            template = {t["name"]: t["template"] for t in template}["default"]
        add_generation_prompt = case.get("add_generation_prompt", True)
        continue_final_message = case.get("continue_final_message", False)
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt are not compatible")
        messages = normalize_content(case["messages"])
        kwargs = {}
        for name in ("bos_token", "eos_token"):
            tok = special_token(cfg.get(name))
            if tok:
                kwargs[name] = tok
        kwargs.update(case.get("chat_template_kwargs", {}))
        rendered = ENV.from_string(template).render(
            messages=messages, tools=case.get("tools"), documents=None,
            add_generation_prompt=add_generation_prompt, **kwargs)
        if continue_final_message:
            final_message = messages[-1]["content"]
            if final_message.strip() not in rendered:
                raise ValueError("final message not in the rendered chat")
            loc = rendered.rindex(final_message.strip())
            if rendered[loc: loc + len(final_message.lstrip())] == final_message:
                rendered = rendered[: loc + len(final_message.lstrip())]
            else:
                rendered = rendered[: loc + len(final_message.strip())]
        return {"text": rendered}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[3] if len(sys.argv) > 3 else os.path.join(os.path.dirname(__file__), "..", "..")
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = {
        "jinja2_version": jinja2.__version__,
        "template_cases": {c["name"]: render_template_case(c) for c in cases.get("template_cases", [])},
        "chat_cases": {c["name"]: render_chat_case(c, root) for c in cases.get("chat_cases", [])},
    }
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    os.replace(tmp, sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
