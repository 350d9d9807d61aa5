#!/usr/bin/python3
"""Generates cases.json (the halo_jinja test cases) next to this file.
Edit the cases here, then run: /usr/bin/python3 tests/jinja/make_cases.py
Expected outputs are NOT stored: render_reference.py computes them with
Python's jinja2 at test time."""
import json
import os
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.json")
T = []
def t(name, template, **context):
    T.append({"name": name, "template": template, "context": context})

# --- output, literals, repr/str
t("print_literals", "{{ 'a' }}|{{ \"b\" }}|{{ 1 }}|{{ 1.5 }}|{{ true }}|{{ False }}|{{ none }}|{{ None }}")
t("print_list_repr", "{{ ['a', 1, 2.0, none, true, \"it's\", 'q\"'] }}")
t("print_dict_repr", "{{ {'b': 1, 'a': [1, {'x': none}]} }}|{{ d }}", d={"z": 1, "y": "two", "x": [1.5, None, True]})
t("print_tuple_repr", "{{ (1,) }}|{{ (1, 'a') }}|{{ () }}|{{ 1, 2 }}")
t("print_floats", "{{ 0.1 + 0.2 }}|{{ 1e-5 }}|{{ 1e16 }}|{{ 1.0e15 }}|{{ 3.0 }}|{{ -0.5 }}|{{ 2.5e-3 }}|{{ 123456789.125 }}")
t("print_undefined", "[{{ missing }}][{{ missing_dict.x is defined }}]", missing_dict={})
t("string_escapes", "{{ 'a\\nb\\t\\\\c\\'d' }}|{{ \"\\u00e9\\x41\" }}|{{ 'x' 'y' }}")
t("repr_escapes", "{{ ['a\\nb', 'tab\\there', 'back\\\\slash', 'both\\'\"'] }}")
t("unicode_text", "{{ s }}|{{ s|length }}|{{ s[1] }}|{{ s[::-1] }}|{{ s|upper }}", s="héllo wörld ✓")
# --- comments / whitespace
t("comment", "a{# comment #}b{#- c -#}  c\n{# line #}\nd")
t("ws_minus", "a  {{- 'x' -}}  b\n  {%- if true -%}  c  {%- endif -%}  \n d")
t("ws_trim_blocks", "{% if true %}\nline1\n{% endif %}\nline2\n")
t("ws_lstrip_blocks", "  {% if true %}\n    x\n  {% endif %}\n  {{ 'y' }}\n")
t("ws_plus", "  {%+ if true %}x{% endif %}\n{% if true +%}\ny{% endif %}")
t("ws_lstrip_not_line_start", "a {% if true %}b{% endif %} c\n\t{% for i in [1] %}{{ i }}{% endfor %}\n")
t("ws_trailing_newline", "x\n")
t("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n")
t("raw_block", "{% raw %}{{ not evaluated }}{% if %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}|")
# --- if / for
t("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %},{% endfor %}")
t("for_loop_vars", "{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}")
t("for_prev_next", "{% for x in [1,2,3] %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}")
t("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] %}{{ x }}{% else %}empty{% endfor %}")
t("for_filter_if", "{% for x in range(10) if x is odd %}{{ x }}{{ loop.index }}{{ '.' if loop.last }},{% endfor %}")
t("for_dict_items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}", d={"b": 1, "a": 2, "c": [3]})
t("for_unpack_tuples", "{% for a, b in [(1, 'x'), [2, 'y']] %}{{ a }}{{ b }}{% endfor %}")
t("for_string", "{% for c in 'héy' %}[{{ c }}]{% endfor %}")
t("for_nested_loop", "{% for i in [1,2] %}{% set outer = loop %}{% for j in 'ab' %}{{ outer.index }}{{ loop.index }}{{ j }} {% endfor %}{% endfor %}")
t("for_scope", "{% set x = 1 %}{% for i in range(3) %}{{ x }}{% if i == 0 %}{% set x = 5 %}{% endif %}{{ x }};{% endfor %}{{ x }}")
t("for_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}")
t("loop_cycle", "{% for i in range(5) %}{{ loop.cycle('odd', 'even') }} {% endfor %}")
t("for_undefined_iter", "[{% for x in nothing %}{{ x }}{% endfor %}]")
# --- set / namespace / with
t("set_simple", "{% set a = 1 %}{% set b, c = 2, 'x' %}{{ a }}{{ b }}{{ c }}")
t("set_block", "{% set x %}  hello {{ 'w' }}\n{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}")
t("namespace", "{% set ns = namespace(found=false, n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }} {{ ns.missing is defined }}")
t("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}")
t("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]")
t("if_set_leaks", "{% if true %}{% set v = 'in' %}{% endif %}{{ v }}")
# --- macros / call
t("macro_defaults", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }}|{{ greet('B', 'Hi') }}|{{ greet('C', punct='?') }}|{{ greet(name='D') }}")
t("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}]{% endmacro %}{{ m(1) }}")
t("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{% endmacro %}{{ fact(5) }}")
t("macro_call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner {{ 1 + 1 }}{% endcall %}")
t("macro_call_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}<{{ item }}>{% endcall %}")
t("macro_globals", "{% macro show() %}{{ top }}{% endmacro %}{% set top = 'T' %}{{ show() }}", top="ctx")
t("filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}")
# --- expressions
t("arith_int_float", "{{ 7 / 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 1 + 2.0 }}|{{ 10 / 5 }}|{{ 7.5 // 2 }}|{{ 3 * 1.5 }}")
t("arith_strings_lists", "{{ 'ab' * 3 }}|{{ 2 * 'x' }}|{{ [1] * 2 }}|{{ [1] + [2] }}|{{ 'a' + 'b' }}|{{ 'a' ~ 1 ~ none ~ true }}")
t("arith_precedence", "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ -2 ** 2 }}|{{ 2 ** 3 ** 2 }}|{{ 10 - 2 - 3 }}|{{ 'a' ~ (1 + 2) }}")
t("unary", "{{ -x }}|{{ +x }}|{{ not x }}|{{ -1.5 }}|{{ not none }}", x=3)
t("comparisons", "{{ 1 < 2 }}{{ 2 <= 2 }}{{ 3 > 4 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ 1 != 2 }}{{ none == none }}{{ [1,2] == [1,2] }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ true == 1 }}")
t("in_not_in", "{{ 'a' in 'cat' }}{{ 'x' not in 'cat' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}{{ 'v' in d }}", d={"v": 0})
t("and_or_values", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ none or [] }}|{{ 1 and 0 or 2 }}|{{ not 1 or 2 }}")
t("cond_expr", "{{ 'yes' if x else 'no' }}|{{ 'a' if false }}|{{ 1 if x > 5 else 2 if x > 1 else 3 }}", x=3)
t("truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0, false] %}{{ 'T' if v else 'F' }}{% endfor %}")
t("attr_item_access", "{{ d.a }}|{{ d['a'] }}|{{ d.b.c }}|{{ d['b']['c'] }}|{{ l[0] }}|{{ l[-1] }}|{{ l.1 }}|{{ d.missing }}|{{ l[10] }}", d={"a": 1, "b": {"c": "deep"}}, l=["x", "y"])
t("dict_key_vs_method", "{{ d.items is defined }}|{{ d['items'] }}|{{ d.get('k') }}|{{ d.get('nope', 'dflt') }}|{{ d.get('nope') }}", d={"items": "key!", "k": "v"})
t("slicing", "{{ l[1:] }}|{{ l[:2] }}|{{ l[::-1] }}|{{ l[::2] }}|{{ l[-2:] }}|{{ s[1:4] }}|{{ s[::-1] }}|{{ l[5:] }}|{{ l[1:-1] }}", l=[1, 2, 3, 4, 5], s="abcdef")
t("list_dict_literals", "{% set d = {'a': 1, 'b': [1, 2], 'c': {'x': none}} %}{{ d.b[1] }}{{ d.c.x }}{{ [1, 2, 3][1] }}{{ {'k': 'v'}['k'] }}{{ [] }}{{ {} }}")
t("int_literals", "{{ 1_000 }}|{{ 1.5e3 }}|{{ 0 }}")
# --- tests
t("tests_types", "{{ 1 is number }}{{ 1.0 is float }}{{ 1 is integer }}{{ true is integer }}{{ true is boolean }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 3 is iterable }}{{ [] is sequence }}{{ none is none }}{{ 0 is none }}{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ x is not defined }}", x=1)
t("tests_values", "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 'a' is equalto 'a' }}{{ 1 is eq 2 }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 3 is gt 2 }}{{ 2 is in [1, 2] }}{{ none is not none }}")
t("test_is_not", "{{ x is not none }}|{{ not x is none }}|{{ x is not string }}", x="s")
# --- filters
t("f_trim_case", "[{{ '  a b  '|trim }}][{{ 'xxaxx'|trim('x') }}][{{ 'hELLo wORLD'|lower }}][{{ 'abc'|upper }}][{{ 'hELLO world'|capitalize }}][{{ 'hello wORLD-foo (bar)'|title }}]")
t("f_length_count", "{{ [1, 2]|length }}{{ 'abc'|length }}{{ {'a': 1}|length }}{{ [1]|count }}{{ missing|length }}")
t("f_default", "[{{ missing|default('d') }}][{{ none|default('d') }}][{{ ''|default('d') }}][{{ ''|default('d', true) }}][{{ 0|d('z', boolean=true) }}][{{ missing|d }}][{{ 'set'|default('d') }}]")
t("f_join", "{{ [1, 'a', none]|join(', ') }}|{{ ['x', 'y']|join }}|{{ users|join(',', attribute='name') }}", users=[{"name": "a"}, {"name": "b"}])
t("f_tojson", "{{ d|tojson }}|{{ [1, 'é', none, true, 1.5]|tojson }}|{{ 'a\"b\\n'|tojson }}|{{ {}|tojson }}", d={"name": "get_weather", "params": {"type": "object", "z": 1, "a": [1, 2]}, "u": "日本\u00e9"})
t("f_tojson_indent", "{{ d|tojson(indent=2) }}|{{ d|tojson(indent=0) }}|{{ [] |tojson(indent=2) }}|{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(sort_keys=true) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ '😀'|tojson(true) }}", d={"b": [1, {"c": None}], "a": "x"})
t("f_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}{{ d|items|list }}", d={"x": 1, "y": [2]})
t("f_selectattr", "{{ xs|selectattr('role', 'equalto', 'user')|map(attribute='c')|list }}|{{ xs|rejectattr('role', 'equalto', 'user')|list|length }}|{{ xs|selectattr('t', 'defined')|map(attribute='c')|join(',') }}|{{ xs|selectattr('t')|list|length }}|{{ xs|rejectattr('t', 'undefined')|list|length }}",
  xs=[{"role": "user", "c": 1}, {"role": "assistant", "c": 2, "t": True}, {"role": "user", "c": 3, "t": False}])
t("f_select_reject", "{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ [0, 1, '', 'a']|select|list }}|{{ [1, 5, 9]|select('gt', 4)|list }}")
t("f_map", "{{ ['a', 'B']|map('upper')|list }}|{{ xs|map(attribute='n')|list }}|{{ xs|map(attribute='zz', default='-')|list }}|{{ ['a ', ' b']|map('trim')|join('|') }}|{{ xs|map(attribute='p.q')|list }}", xs=[{"n": 1, "p": {"q": "deep"}}, {"n": 2, "p": {"q": "deeper"}}])
t("f_first_last", "{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ 'abc'|first }}{{ 'abc'|last }}[{{ []|first }}]")
t("f_string_int_float", "{{ 1|string ~ 'x' }}|{{ '42'|int + 1 }}|{{ '3.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 3.9|int }}|{{ '2.5'|float * 2 }}|{{ 'bad'|float }}|{{ 5|float }}|{{ true|int }}")
t("f_list", "{{ 'abc'|list }}|{{ {'a': 1, 'b': 2}|list }}|{{ (1, 2)|list }}")
t("f_replace", "{{ 'aaa'|replace('a', 'b') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'hello world'|replace('world', 'there') }}")
t("f_safe_escape", "{{ '<b>'|safe }}|{{ '<a href=\"x\">&\\'</a>'|e }}")
t("f_unique_reverse_sort", "{{ [3, 1, 3, 2, 1]|unique|list }}|{{ ['a', 'A', 'b']|unique|list }}|{{ [1, 2, 3]|reverse|list }}|{{ 'abc'|reverse }}|{{ [3, 1, 2]|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}|{{ xs|sort(attribute='k')|map(attribute='v')|join }}",
  xs=[{"k": 2, "v": "b"}, {"k": 1, "v": "a"}, {"k": 3, "v": "c"}])
t("f_indent", "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb'|indent(width=3, blank=true) }}][{{ 'x\\ny'|indent('>>') }}]")
t("f_abs_round", "{{ -3|abs }}|{{ (-3.5)|abs }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 2.1|round(method='ceil') }}|{{ 2.9|round(0, 'floor') }}|{{ 7|round }}|{{ 1.23456|round(3) }}")
t("f_misc", "{{ [1, 2, 3]|sum }}|{{ [3, 1, 2]|max }}|{{ [3, 1, 2]|min }}|{{ 'a b  c'|wordcount }}|{{ {'b': 1, 'a': 2}|dictsort }}|{{ '%s-%d'|format('x', 5) }}|{{ 'ab'|center(6) }}|{{ {'n': 'v'}|attr('n') is defined }}")
t("f_chain", "{{ '  Hello World  '|trim|lower|replace('world', 'there')|upper }}")
t("f_filter_precedence", "{{ 'a' + ' b '|trim + 'c' }}|{{ -3|abs }}|{{ [1, 2]|length > 1 }}")
# --- string methods
t("m_strip", "[{{ '  x  '.strip() }}][{{ '\\n\\nx\\n'.lstrip('\\n') }}][{{ 'x\\n\\n'.rstrip('\\n') }}][{{ 'xyhixy'.strip('xy') }}][{{ '  x  '.lstrip() }}][{{ '  x  '.rstrip() }}]")
t("m_starts_ends", "{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}{{ 'hello'.startswith('lo') }}{{ 'hello'.startswith(('x', 'h')) }}{{ ''.endswith('') }}")
t("m_split", "{{ 'a,b,,c'.split(',') }}|{{ '  a  b c '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a b c'.split(none, 1) }}|{{ 'a<x>b<x>c'.split('<x>')[-1] }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ ''.split() }}|{{ ''.split(',') }}")
t("m_case_replace", "{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}|{{ 'hello world'.title() }}|{{ \"it's o'neil\".title() }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'hello'.capitalize() }}")
t("m_format", "{{ '{} and {}'.format('a', 1) }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') }}|{{ '{{lit}}'.format() }}")
t("m_misc", "{{ 'abcabc'.find('c') }}{{ 'abc'.find('z') }}{{ 'abcabc'.count('b') }}{{ '123'.isdigit() }}{{ 'a1'.isalpha() }}|{{ ', '.join(['a', 'b']) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}")
t("m_dict", "{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.items()|list }}|{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}", d={"b": 1, "a": 2})
# --- globals
t("g_range", "{{ range(3)|list }}|{{ range(1, 4)|list }}|{{ range(10, 0, -3)|list }}|{% for i in range(2) %}{{ i }}{% endfor %}")
t("g_dict", "{{ dict(a=1, b='x') }}")
t("g_strftime_year", "{{ strftime_now('%Y') }}")
# --- errors (reference must error too)
t("err_syntax", "line1\n{% if x %}\n{{ x }}\n")
t("err_syntax_expr", "a\nb\n{{ 1 + }}")
t("err_unknown_tag", "{% frobnicate %}")
t("err_raise_exception", "{{ raise_exception('custom failure message') }}")
t("err_undefined_call", "{{ nope() }}")
t("err_unknown_filter", "{{ 'x'|nofilter }}")
t("err_undefined_attr_of_undefined", "{{ a.b.c }}")
t("err_add_undefined", "{{ missing + 1 }}")
t("err_str_plus_int", "{{ 'a' + 1 }}")
t("err_div_zero", "{{ 1 / 0 }}")
t("err_list_append", "{% set l = [] %}{{ l.append(1) }}")
t("err_macro_recursion", "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}")
t("err_tojson_undefined", "{{ missing|tojson }}")
t("err_compare_types", "{{ 1 < 'a' }}")
t("err_not_iterable", "{% for x in 5 %}{% endfor %}")

C = []
def chat(name, config, messages, **kw):
    c = {"name": name, "config": config, "messages": messages}
    c.update(kw)
    C.append(c)

L2 = "tests/data/tokenizers/llama2/tokenizer_config.json"
L3 = "tests/data/tokenizers/llama3/tokenizer_config.json"
Q3 = "tests/data/tokenizers/qwen3/tokenizer_config.json"
PK = "models/pkgchat-5m/tokenizer_config.json"
basic = [{"role": "user", "content": "Hello!"}]
conv = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "  4  "},
        {"role": "user", "content": "And 3+3? ünïcödé 日本"}]
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city, e.g. \"Paris\".",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                           "unit": {"type": "string", "enum": ["c", "f"]}},
                         "required": ["city"]}}},
         {"type": "function", "function": {"name": "now", "description": "Current time", "parameters": {"type": "object", "properties": {}}}}]
tool_history = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
                {"role": "tool", "content": "{\"temp\": 21}"},
                {"role": "assistant", "content": "<think>\nchecking\n</think>\n\nIt is 21C.", "tool_calls": [{"type": "function", "function": {"name": "now", "arguments": "{}"}}]},
                {"role": "tool", "content": "12:00"},
                {"role": "tool", "content": "second result"},
                {"role": "user", "content": "Thanks"}]

chat("llama2_basic", L2, basic)
chat("llama2_system_conv", L2, [conv[0], conv[1], conv[2], conv[3]])
chat("llama2_no_gen_prompt", L2, conv, add_generation_prompt=False)
chat("llama2_not_alternating", L2, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
chat("llama2_content_parts", L2, [{"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}])
chat("llama2_continue_final", L2, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am  "}], add_generation_prompt=False, continue_final_message=True)
chat("llama3_basic", L3, basic)
chat("llama3_conv", L3, conv)
chat("llama3_with_tools", L3, conv, tools=tools)
chat("llama3_tool_history", L3, tool_history, tools=tools)
chat("llama3_no_gen_prompt", L3, conv, add_generation_prompt=False)
chat("llama3_continue_final", L3, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure, here"}], add_generation_prompt=False, continue_final_message=True)
chat("qwen3_basic", Q3, basic)
chat("qwen3_conv", Q3, conv)
chat("qwen3_with_tools", Q3, conv, tools=tools)
chat("qwen3_tools_no_system", Q3, basic, tools=tools)
chat("qwen3_tool_history", Q3, tool_history, tools=tools)
chat("qwen3_enable_thinking_false", Q3, conv, chat_template_kwargs={"enable_thinking": False})
chat("qwen3_enable_thinking_true", Q3, conv, chat_template_kwargs={"enable_thinking": True})
chat("qwen3_reasoning_content", Q3, [{"role": "user", "content": "Q1"},
                                     {"role": "assistant", "content": "A1", "reasoning_content": "thought 1"},
                                     {"role": "user", "content": "Q2"},
                                     {"role": "assistant", "content": "A2", "reasoning_content": "\nthought 2\n"}], add_generation_prompt=False)
chat("qwen3_think_in_content", Q3, [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nAnswer"}], add_generation_prompt=False)
chat("qwen3_tool_response_user", Q3, [{"role": "user", "content": "<tool_response>x</tool_response>"}, {"role": "user", "content": "real"}])
chat("qwen3_content_parts", Q3, [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
chat("qwen3_continue_final", Q3, [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Partial answer"}], add_generation_prompt=False, continue_final_message=True)
chat("pkgchat_basic", PK, basic)
chat("pkgchat_conv", PK, conv)
chat("pkgchat_no_gen_prompt", PK, conv, add_generation_prompt=False)
chat("pkgchat_unknown_role", PK, [{"role": "tool", "content": "x"}])
chat("gen_prompt_and_continue", PK, basic, add_generation_prompt=True, continue_final_message=True)


# A Llama-3.1-style tool template (condensed from the published one) as a template case.
LLAMA31 = r'''{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions." }}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
'''
T.append({"name": "llama31_tools", "template": LLAMA31, "context": {"bos_token": "<|begin_of_text|>", "messages": tool_history[:4], "tools": tools, "add_generation_prompt": True}})
T.append({"name": "llama31_no_tools", "template": LLAMA31, "context": {"bos_token": "<|begin_of_text|>", "messages": conv, "add_generation_prompt": True}})
T.append({"name": "llama31_multi_tool_calls_error", "template": LLAMA31, "context": {"bos_token": "<|begin_of_text|>", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": {}}}, {"function": {"name": "b", "arguments": {}}}]}], "tools": tools}})

# Tool templates written for these tests from the formats the model cards
# describe (not copied from any model): Mistral's [AVAILABLE_TOOLS] /
# [TOOL_CALLS] / [TOOL_RESULTS] (v0.3 instruct, 9-character call ids), and
# the pythonic calls of Llama 3.2 [f(a="x"), g()] with results under ipython.
MISTRAL_TOOLS = r'''{{- bos_token }}
{%- set last = namespace(user=-1) %}
{%- for m in messages %}{% if m.role == 'user' %}{% set last.user = loop.index0 %}{% endif %}{% endfor %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {%- if tools and loop.index0 == last.user %}
            {{- '[AVAILABLE_TOOLS] ' + tools | tojson + '[/AVAILABLE_TOOLS]' }}
        {%- endif %}
        {{- '[INST] ' + m.content + '[/INST]' }}
    {%- elif m.role == 'assistant' and m.tool_calls %}
        {{- '[TOOL_CALLS] [' }}
        {%- for c in m.tool_calls %}
            {%- if c.id is not defined or c.id | length != 9 %}
                {{- raise_exception('Mistral tool call ids are 9 characters: ' ~ c.id) }}
            {%- endif %}
            {{- {'name': c.function.name, 'arguments': c.function.arguments, 'id': c.id} | tojson }}
            {%- if not loop.last %}{{- ', ' }}{% endif %}
        {%- endfor %}
        {{- ']' + eos_token }}
    {%- elif m.role == 'assistant' %}
        {{- ' ' + m.content + eos_token }}
    {%- elif m.role == 'tool' %}
        {{- '[TOOL_RESULTS] ' + {'call_id': m.tool_call_id, 'content': m.content} | tojson + '[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception('Only user, assistant and tool roles are supported, not ' + m.role) }}
    {%- endif %}
{%- endfor %}
'''
PYTHONIC_TOOLS = r'''{{- bos_token }}
{%- if tools %}
    {{- '<|start_header_id|>system<|end_header_id|>\n\nYou can call these functions:\n' }}
    {%- for t in tools %}
        {{- t.function | tojson(indent=2) + '\n' }}
    {%- endfor %}
    {{- 'To call functions, answer only with a Python list of calls: [func(arg=value), ...]<|eot_id|>' }}
{%- endif %}
{%- for m in messages %}
    {%- if m.role == 'assistant' and m.tool_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n[' }}
        {%- for c in m.tool_calls %}
            {{- c.function.name + '(' }}
            {%- for k, v in c.function.arguments | items %}
                {{- k + '=' + v | tojson }}{% if not loop.last %}{{ ', ' }}{% endif %}
            {%- endfor %}
            {{- ')' }}{% if not loop.last %}{{ ', ' }}{% endif %}
        {%- endfor %}
        {{- ']<|eot_id|>' }}
    {%- elif m.role == 'tool' %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\n\n' + m.content | string + '<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + m.content | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}
'''
mistral_history = [{"role": "user", "content": "Weather in Paris and Lyon?"},
                   {"role": "assistant", "content": "", "tool_calls": [
                       {"id": "abc123xyz", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
                       {"id": "def456uvw", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Lyon"}}}]},
                   {"role": "tool", "tool_call_id": "abc123xyz", "content": "{\"temp\": 21}"},
                   {"role": "tool", "tool_call_id": "def456uvw", "content": "19"},
                   {"role": "assistant", "content": "Paris 21C, Lyon 19C."},
                   {"role": "user", "content": "Thanks"}]
pythonic_history = [{"role": "user", "content": " Weather in Paris? "},
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}},
                        {"type": "function", "function": {"name": "now", "arguments": {}}}]},
                    {"role": "tool", "content": "{\"temp\": 21}"},
                    {"role": "tool", "content": "12:00"}]
for name, template, msgs in (("mistral", MISTRAL_TOOLS, mistral_history), ("pythonic", PYTHONIC_TOOLS, pythonic_history)):
    ctx = {"bos_token": "<s>", "eos_token": "</s>", "tools": tools, "add_generation_prompt": True}
    T.append({"name": name + "_tools", "template": template, "context": dict(ctx, messages=msgs[:1])})
    T.append({"name": name + "_tool_history", "template": template, "context": dict(ctx, messages=msgs)})
    T.append({"name": name + "_no_tools", "template": template, "context": dict(ctx, messages=msgs[:1], tools=None)})
T.append({"name": "mistral_bad_call_id_error", "template": MISTRAL_TOOLS, "context": {"bos_token": "<s>", "eos_token": "</s>", "tools": tools, "messages": [mistral_history[0], {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "function": {"name": "now", "arguments": {}}}]}]}})
json.dump({"template_cases": T, "chat_cases": C}, open(OUT, "w", encoding="utf-8"), ensure_ascii=False, indent=1)
print(len(T), len(C))
