#!/usr/bin/env python3
"""gen_template_fixtures.py -- expected renders of real chat templates and of language-feature snippets,
produced by the reference: transformers' own renderer (transformers.utils.chat_template_utils.
render_jinja_template, i.e. jinja2's ImmutableSandboxedEnvironment as apply_chat_template configures it).

Inputs: the 70 .jinja templates that llama.cpp ships in models/templates/, taken from the PyPI sdist of
llama-cpp-python 0.3.36 (MIT). The sdist is fetched with
    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
unless --sdist PATH names a local copy.

Outputs (tests/fixtures/templates/):
    *.jinja        the templates, byte for byte as in the sdist
    expected.json  {"generator": {...versions...}, "now": epoch, "cases": [...], "templates": {name: [per case:
                   {"case", "vars", "output"} or {"case", "vars", "raised": msg} or {"case", "vars", "error": msg}]},
                   "features": [{"name", "template", "vars", "output" | "raised" | "error" | "compile_error"}]}
"vars" is exactly the variable set the template is rendered with (messages after transformers' reasoning
aliasing, tools, documents, add_generation_prompt, bos/eos/unk/pad tokens, ...), so the C test renders the
same thing without knowing transformers' calling convention. strftime_now uses a fixed clock
(2024-07-26 12:00:00, TZ=UTC) on both sides.

Default: regenerate in memory and compare with the committed files (exit 1 on any difference).
--write: (re)write the files. Deterministic: the same inputs and versions give the same bytes.
"""
import argparse
import copy
import datetime
import glob
import json
import math
import random
import struct
import os
import subprocess
import sys
import tarfile
import tempfile

os.environ["TZ"] = "UTC"
import time  # noqa: E402

time.tzset()

import jinja2  # noqa: E402
import transformers  # noqa: E402
from transformers.utils import chat_template_utils as ctu  # noqa: E402

NOW = 1721995200  # 2024-07-26 12:00:00 UTC
SDIST = "llama-cpp-python==0.3.36"
TEMPLATE_DIR_IN_SDIST = "vendor/llama.cpp/models/templates/"
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "fixtures", "templates"))


class FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.datetime.fromtimestamp(NOW, tz)


ctu.datetime = FixedDatetime  # strftime_now() reads chat_template_utils.datetime.now()


def family_tokens(name):
    n = name.lower()
    if "llama-3" in n or "llama-cpp-deepseek" in n or "firefunction" in n or "hermes-3" in n or "functionary" in n:
        return {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    if "qwen" in n or "qwq" in n or "hermes-2" in n or "smollm" in n or "mimo" in n:
        return {"bos_token": "", "eos_token": "<|im_end|>"}
    if "gemma" in n:
        return {"bos_token": "<bos>", "eos_token": "<eos>"}
    if "deepseek" in n:
        return {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}
    if "phi" in n:
        return {"bos_token": "<s>", "eos_token": "<|endoftext|>"}
    if "command-r" in n or "cohere" in n:
        return {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"}
    if "granite" in n:
        return {"bos_token": "<|start_of_role|>", "eos_token": "<|end_of_text|>"}
    if "gpt-oss" in n:
        return {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"}
    return {"bos_token": "<s>", "eos_token": "</s>"}


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "max_results": {"type": "integer", "default": 5}},
            "required": ["query"]}}},
]
TOOL_CALL = {"id": "call_0001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}

SYS = "You are a helpful assistant."
UNI = "Ünïcödé ✓ 日本語 🙂 — \"double\" and 'single' quotes,\nnew line, tab\tand {\"json\": [1, 2.5, null]} <b>html</b> \\ backslash"

CASES = [
    ("user_only", [{"role": "user", "content": "Hello!"}], None, True, {}),
    ("system_user", [{"role": "system", "content": SYS}, {"role": "user", "content": "What is 2+2?"}], None, True, {}),
    ("multi_turn", [{"role": "system", "content": SYS}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}], None, True, {}),
    ("assistant_last", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}],
     None, False, {}),
    ("no_system_multi", [{"role": "user", "content": "One"}, {"role": "assistant", "content": "Two"},
                         {"role": "user", "content": "Three"}], None, False, {}),
    ("unicode", [{"role": "system", "content": "  Padded system prompt.  \n"}, {"role": "user", "content": UNI},
                 {"role": "assistant", "content": "Réponse: ✓\n\nDone."}, {"role": "user", "content": "Encore"}],
     None, True, {}),
    ("tools", [{"role": "system", "content": SYS}, {"role": "user", "content": "Weather in Zürich?"},
               {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
               {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather",
                "content": "{\"temperature\": 21.5, \"condition\": \"sunny\"}"}],
     TOOLS, True, {}),
    ("tools_no_calls", [{"role": "user", "content": "Search for jinja2 docs."}], TOOLS, True, {}),
    ("reasoning", [{"role": "user", "content": "Think first: 3*7?"},
                   {"role": "assistant", "content": "21", "reasoning_content": "3 times 7 is 21."},
                   {"role": "user", "content": "And 4*6?"}], None, True, {}),
    ("content_parts", [{"role": "user", "content": [{"type": "text", "text": "Part one."},
                                                    {"type": "text", "text": "Part two."}]}], None, True, {}),
    ("thinking_off", [{"role": "user", "content": "Quick answer please."}], None, True, {"enable_thinking": False}),
    ("parallel_tools", [{"role": "user", "content": "Weather in Paris and Oslo, then search."},
                        {"role": "assistant", "content": "Checking.", "tool_calls": [
                            {"id": "call_a", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                            {"id": "call_b", "type": "function",
                             "function": {"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}}]},
                        {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": "18C"},
                        {"role": "tool", "tool_call_id": "call_b", "name": "get_weather", "content": "9C"},
                        {"role": "assistant", "content": "Paris 18C, Oslo 9C."},
                        {"role": "user", "content": "Thanks!"}], TOOLS, True, {}),
    ("tool_call_null_content", [{"role": "user", "content": "Weather in Zürich?"},
                                {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                                {"role": "tool", "tool_call_id": "call_0001", "content": "sunny"}], TOOLS, True, {}),
    ("documents", [{"role": "system", "content": SYS}, {"role": "user", "content": "Summarise the documents."}],
     None, True, {"documents": [{"title": "Doc A", "text": "Alpha text."}, {"title": "Doc B", "text": "Beta\ntext."}]}),
]


def render_case(src, name, case):
    cname, messages, tools, agp, extra = case
    kwargs = dict(family_tokens(name))
    kwargs.update({"unk_token": "<unk>", "pad_token": "<pad>"})
    kwargs.update(extra)
    # The variables exactly as render_jinja_template hands them to the template.
    chat = ctu._alias_reasoning_fields(ctu._plain_template_data(copy.deepcopy(messages)))
    documents = kwargs.pop("documents", None)
    env_vars = {"messages": chat, "tools": copy.deepcopy(tools), "documents": copy.deepcopy(documents),
                "add_generation_prompt": agp}
    env_vars.update(kwargs)
    rec = {"case": cname, "vars": env_vars}
    try:
        out, _ = ctu.render_jinja_template(conversations=[copy.deepcopy(messages)], tools=copy.deepcopy(tools),
                                           documents=copy.deepcopy(documents), chat_template=src,
                                           add_generation_prompt=agp, **kwargs)
        rec["output"] = out[0]
    except jinja2.exceptions.TemplateSyntaxError as e:
        rec["compile_error"] = f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - every failure is recorded
        if type(e) is jinja2.exceptions.TemplateError:
            rec["raised"] = str(e)
        else:
            rec["error"] = f"{type(e).__name__}: {e}"
    return rec


# Language features: (name, template, vars). Rendered by the same environment (transformers' compile).
FEATURES = [
    ("print_types", "{{ none }}|{{ true }}|{{ False }}|{{ 1 }}|{{ -3 }}|{{ 1.0 }}|{{ 0.1 }}|{{ 1e-05 }}|{{ 1e16 }}|{{ 123456789012345.0 }}|{{ 2.5e-3 }}|{{ 1/3 }}", {}),
    ("print_containers", "{{ [1, 'a', none, true, 1.5] }}|{{ (1,) }}|{{ (1, 'b') }}|{{ {'k': 'v', 'n': [1, {'x': none}]} }}|{{ [] }}|{{ {} }}", {}),
    ("repr_quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', 'bs\\\\', 'uni é ✓', '\\x01'] }}", {}),
    ("print_tuple_stmt", "{{ 1, 2 }}", {}),
    ("undefined_print", "[{{ nothing }}][{{ d.missing }}][{{ nothing is defined }}]", {"d": {}}),
    ("arith", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ 7.5 // 2 }} {{ 1 + 2.5 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'a' ~ 1 ~ none }} {{ -(2) }} {{ +3 }} {{ true + 1 }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ not true or true }} {{ not (true or true) }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' ~ 'b' + 'c' }} {{ -2 ** 2 }}", {}),
    ("compare", "{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 'x' in 'xyz' }} {{ 2 in [1,2] }} {{ 'k' in {'k':1} }} {{ 3 not in [1] }} {{ none == none }} {{ 1 != 2 }} {{ 'b' >= 'a' }}", {}),
    ("logic_values", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ none or [] }}|{{ [] or {} }}", {}),
    ("condexpr", "{{ 'y' if x else 'n' }}{{ 'y' if not x else 'n' }}[{{ 'only' if false }}]{{ 'a' if false else 'b' if true else 'c' }}", {"x": 1}),
    ("string_literals", "{{ 'a\\nb' }}|{{ \"tab\\there\" }}|{{ 'uni\\u00e9\\U0001F600' }}|{{ 'x\\x41' }}|{{ 'keep\\d' }}|{{ 'adj' 'acent' }}", {}),
    ("slicing", "{{ s[1:3] }}|{{ s[::-1] }}|{{ s[-2:] }}|{{ l[1:] }}|{{ l[::2] }}|{{ l[-1] }}|{{ s[0] }}|{{ l[:-1] }}|{{ s[10:] }}|{{ u[1:3] }}|{{ u[-1] }}", {"s": "hello", "l": [1, 2, 3, 4, 5], "u": "añ日b"}),
    ("attr_item", "{{ d.a }}|{{ d['a'] }}|{{ d.l.0 }}|{{ d.l[1] }}|{{ d['l'][-1] }}|{{ d.get('a') }}|{{ d.get('zz', 'def') }}|{{ d.get('zz') }}|{{ d.n.x.y }}", {"d": {"a": 1, "l": [10, 20, 30], "n": {"x": {"y": "deep"}}}}),
    ("for_loop_vars", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('a','b') }};{% endfor %}", {"l": ["x", "y", "z"]}),
    ("for_else_filter", "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% else %}empty{% endfor %}|{% for x in [] %}no{% else %}else{% endfor %}", {"l": [1, 2, 3]}),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("for_string_dict", "{% for c in 'héllo' %}[{{ c }}]{% endfor %}{% for k in {'z': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("nested_loops", "{% for i in range(3) %}{% set outer = loop %}{% for j in range(2) %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}", {}),
    ("recursive_loop", "{% for item in tree recursive %}<{{ item.name }}{% if item.children %}:{{ loop(item.children) }}{% endif %}>{% endfor %}", {"tree": [{"name": "a", "children": [{"name": "b", "children": []}, {"name": "c"}]}, {"name": "d"}]}),
    ("scoping", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }}", {}),
    ("scoping_loop_carry", "{% set x = 0 %}{% for i in [1, 2, 3] %}{{ x }}{% set x = i %}{% endfor %}|{{ x }}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("set_tuple_block", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set blk %}inner {{ a }}{% endset %}[{{ blk }}]{% set up | upper %}shout{% endset %}{{ up }}", {}),
    ("macro", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(name='Cy', punct='?') }}", {}),
    ("macro_varargs_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{{ varargs }}{{ kwargs }}{% endmacro %}{% call wrap('b') %}bold{% endcall %}|{% macro m() %}{{ varargs|length }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("macro_recursion", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}", {}),
    ("call_block_args", "{% macro lst(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) lst([1, 2]) %}[{{ x }}]{% endcall %}", {}),
    ("filter_block", "{% filter upper %}hello {{ name }}{% endfilter %}", {"name": "world"}),
    ("raw_block", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}!", {}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}", {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}),
    ("whitespace_trim_lstrip", "<ul>\n  {% for i in [1, 2] %}\n    <li>{{ i }}</li>\n  {% endfor %}\n</ul>\n", {}),
    ("whitespace_minus", "a   {%- if true -%}   b   {%- endif -%}   c\n  {{- ' d ' -}}  \n e", {}),
    ("whitespace_plus", "x\n    {%+ if true %}y{% endif +%}\nz", {}),
    ("whitespace_comment", "a\n  {# comment #}\nb {#- trimmed -#}   c\n", {}),
    ("lstrip_not_var", "line\n    {{ 'v' }}\n    {% if true %}t{% endif %}\n", {}),
    ("trailing_newline", "text\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc", {}),
    ("trim_blocks_only_newline", "{% if true %}  \nx{% endif %}\n\ny", {}),
    ("filters_string", "{{ '  pad  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ 'hello wORLD-foo (bar'|title }}|{{ 'hELLO'|capitalize }}|{{ 'a-b-c'|replace('-', '+') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|reverse }}|{{ 'one two  three'|wordcount }}|{{ 'x'|center(5) }}|{{ 'abc'|length }}|{{ 'é✓'|length }}", {}),
    ("filters_list", "{{ [3, 1, 2]|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ ['b', 'A', 'c']|sort }}|{{ ['b', 'A', 'c']|sort(case_sensitive=true) }}|{{ [1, 2, 3]|first }}|{{ [1, 2, 3]|last }}|{{ [1, 2, 2, 1]|unique|list }}|{{ [1, 2, 3]|reverse|list }}|{{ [1, 2, 3]|sum }}|{{ [1, 5, 3]|max }}|{{ [4, 2, 8]|min }}|{{ [1, 2]|join(', ') }}|{{ [1, 2, 3, 4, 5]|batch(2)|list }}|{{ [1, 2, 3, 4]|slice(3)|list }}|{{ 'ab'|list }}", {}),
    ("filters_dicts", "{{ d|dictsort }}|{{ d|dictsort(reverse=true) }}|{{ d|dictsort(by='value') }}|{{ d|items|list }}|{{ d|length }}|{{ users|map(attribute='name')|join(',') }}|{{ users|selectattr('admin')|map(attribute='name')|list }}|{{ users|rejectattr('admin')|map(attribute='name')|list }}|{{ users|selectattr('name', 'equalto', 'b')|list|length }}|{{ users|sort(attribute='age')|map(attribute='name')|join }}|{{ users|map(attribute='missing', default='?')|join }}|{{ users|sum(attribute='age') }}|{{ users|max(attribute='age') }}", {"d": {"b": 2, "A": 3, "c": 1}, "users": [{"name": "a", "admin": True, "age": 30}, {"name": "b", "admin": False, "age": 20}]}),
    ("filters_select", "{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('even')|list }}|{{ [0, 1, '', 'a']|select|list }}|{{ ['a', 1, none]|select('string')|list }}|{{ [1, 5, 10]|select('gt', 4)|list }}|{{ ['A', 'b']|map('lower')|list }}|{{ [1.5, 2.5]|map('int')|list }}|{{ [1, 2]|select('in', [2, 3])|list }}", {}),
    ("filters_numbers", "{{ '42'|int }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 3.9|int }}|{{ '2.5'|float }}|{{ 'x'|float }}|{{ 7|float }}|{{ -3|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.1|round(0, 'ceil') }}|{{ 2.9|round(method='floor') }}|{{ 5|round }}|{{ '0x1A'|int(base=16) }}", {}),
    ("filters_default", "{{ x|default('dflt') }}|{{ ''|default('empty') }}|{{ ''|default('empty', true) }}|{{ none|default('n') }}|{{ x|d('d') }}|{{ 0|default(5, boolean=true) }}", {}),
    ("filters_tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ 'é\"<>&'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ [1.0, 2.5, none, true]|tojson }}|{{ {}|tojson(indent=4) }}|{{ []|tojson }}|{{ d|tojson(indent='\\t') }}", {"d": {"z": [1, {"y": None}], "a": "x\ny", "emoji": "🙂"}}),
    ("filters_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x\\ny'|indent('> ') }}", {}),
    ("filters_misc", "{{ '<a href=\"x\">&\\'</a>'|e }}|{{ 'ok'|safe }}|{{ 5|string ~ 'x' }}|{{ none|string }}|{{ 'long text here'|truncate(9) }}|{{ 'long text here'|truncate(9, true) }}|{{ 'short'|truncate(10) }}|{{ {'a': 1}|attr('a') }}|{{ [[1, 2], [3]]|map('length')|list }}|{{ 'a b'|split|list if false else 'a b'.split() }}", {}),
    ("tests", "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ {} is sequence }}{{ true is boolean }}{{ true is true }}{{ 0 is false }}{{ x is callable }}{{ range is callable }}{{ 2 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 2 is ge 2 }}{{ 'a' is in 'abc' }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ none is sameas none }}{{ x is not none }}{{ 1 is equalto 1 }}{{ 'upper' is filter }}{{ 'odd' is test }}{{ [1]|select is iterable }}", {"x": 1}),
    ("str_methods", "{{ ' a b '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b  c'.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ ' x  y '.split(None, 1) }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'abc'.upper() }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'abcb'.find('b') }}|{{ 'abcb'.rfind('b') }}|{{ 'abc'.find('z') }}|{{ 'abcb'.index('c') }}|{{ 'abab'.count('ab') }}|{{ '-'.join(['a', 'b']) }}|{{ '{} and {}'.format(1, 'two') }}|{{ '{0}{1}{0}'.format('a', 'b') }}|{{ '{x}!'.format(x=5) }}|{{ '123'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ ' '.isspace() }}|{{ 'ab'.islower() }}|{{ 'AB'.isupper() }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '7'.zfill(3) }}|{{ 'a=b=c'.partition('=') }}|{{ 'ab'.center(6, '*') }}|{{ 'x'.ljust(3, '.') }}|{{ 'x'.rjust(3) }}|{{ 'prefix_x'.removeprefix('prefix_') }}|{{ 'é✓日'.find('日') }}", {}),
    ("dict_list_methods", "{{ d.items()|list }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.items() }}|{{ d.keys() }}|{{ [1, 2, 1].count(1) }}|{{ [1, 2, 3].index(2) }}|{{ d|list }}", {"d": {"a": 1, "b": [2]}}),
    ("dict_global", "{{ dict(a=1, b='x') }}|{{ dict({'k': 2}, c=3) }}|{{ dict([('p', 1)]) }}", {}),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ strftime_now('%d %B %Y') }}|{{ strftime_now('%A %b %-d') }}", {}),
    ("range_global", "{{ range(3)|list }}|{{ range(1, 7, 2)|list }}|{{ range(5, 0, -2)|list }}|{{ range(0)|list }}", {}),
    ("raise", "{% if x %}{{ raise_exception('Bad input: ' ~ x) }}{% endif %}ok", {"x": "boom"}),
    ("error_undefined_attr", "{{ nothing.attr }}", {}),
    ("error_undefined_add", "{{ nothing + 1 }}", {}),
    ("error_div_zero", "{{ 1 / 0 }}", {}),
    ("error_list_append", "{% set l = [1] %}{% set _ = l.append(2) %}{{ l }}", {}),
    ("error_dict_pop", "{{ d.pop('a') }}", {"d": {"a": 1}}),
    ("error_type_add", "{{ 'a' + 1 }}", {}),
    ("error_not_callable", "{{ x() }}", {"x": 1}),
    ("error_length_generator", "{{ [1, 2]|select|length }}", {}),
    ("error_unpack", "{% set a, b = [1, 2, 3] %}", {}),
    ("error_tojson_undefined", "{{ nothing|tojson }}", {}),
    ("error_compare_types", "{{ 1 < 'a' }}", {}),
    ("error_namespace_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
    ("unknown_filter_in_if", "{% if false %}{{ x|nosuchfilter }}{% endif %}fine", {"x": 1}),
    ("unknown_filter_in_if_taken", "{% if true %}{{ x|nosuchfilter }}{% endif %}", {"x": 1}),
    ("compile_error_unknown_filter", "{{ x|nosuchfilter }}", {"x": 1}),
    ("compile_error_unclosed", "{% if x %}never closed", {}),
    ("compile_error_unknown_tag", "{% frobnicate %}", {}),
    ("compile_error_bad_expr", "{{ 1 + }}", {}),
    ("compile_error_endfor", "{% endfor %}", {}),
    ("compile_error_unterminated_string", "{{ 'abc }}", {}),
    ("loop_in_macro_scope", "{% set g = 'G' %}{% macro m() %}{{ g }}{{ later }}{% endmacro %}{% set later = 'L' %}{{ m() }}", {}),
    ("messages_typical", "{%- for message in messages %}{{- '<|' + message['role'] + '|>\\n' + message['content'] | trim + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}", {"messages": [{"role": "user", "content": " hi "}], "add_generation_prompt": True}),
    ("is_test_bare_args", "{{ 3 is divisibleby(3) }}{{ x is sameas x }}{{ [1] is sequence and true }}{{ 'a' if 1 is odd else 'b' }}", {"x": [1]}),
    ("nested_data_repr", "{{ messages }}", {"messages": [{"role": "user", "content": "it's \"q\"", "n": 1.5, "b": None, "t": [True]}]}),
    ("int_overflow_error", "{{ 9223372036854775807 + 1 }}", {}),
    ("markup_concat", "{{ 'a'|safe + '<b>' }}|{{ '<x>' + 'y'|safe }}|{{ ('<'|safe) * 2 }}|{{ '<'|e }}|{{ ('<'|e)|e }}|{{ '<'|forceescape|forceescape }}|{{ ('<a>'|safe).upper() + '&' }}|{{ 'x'|safe ~ '<' }}|{{ ('a b'|safe).replace('a', '<') }}|{{ ('<'|safe)|trim + '>' }}|{{ ('q'|safe)|string + '\"' }}", {}),
    ("for_over_undefined", "{% for x in u %}x{% else %}empty{% endfor %}", {}),
    ("error_for_over_none", "{% for x in n %}x{% endfor %}", {"n": None}),
    ("repr_unicode", "{{ ['\u2028', '\x7f', '\u00e9', '\u00a0', '\U0001F600', '\u200b', '\x1b[0m', '\ud7ff'] }}", {}),
    ("float_printing", "{{ 1e22 }} {{ 1.5e300 }} {{ -0.0 }} {{ 100.0 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 2.5|round(1) }} {{ 1/7 }} {{ 3.14159|round(3) }} {{ 2.675|round(2) }} {{ 0.1 + 0.2 }} {{ 123456789.123456789 }} {{ -1.5e-10 }}", {}),
    ("tojson_numbers", "{{ {'f': 1.0, 'g': 1e-07, 'i': 10 ** 15, 'n': -2, 'b': false}|tojson }}|{{ x|tojson }}", {"x": {"big": 12345678901234, "r": 0.5, "e": 1e100}}),
    ("tojson_escapes", "{{ '\x00\x1f\u2028\x7f/'|tojson }}|{{ '\u00e9\U0001F600'|tojson(ensure_ascii=true) }}|{{ {'k': 'v'}|tojson(indent=2, separators=(',', ' = ')) }}", {}),
    ("loop_depth", "{% for a in [[1, [2]], 3] recursive %}{{ loop.depth }}{{ loop.depth0 }}{% if a is iterable %}({{ loop(a) }}){% endif %};{% endfor %}", {}),
    ("macro_default_refs_param", "{% macro m(a, b=a * 2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(3) }}|{{ m(3, 1) }}|{{ m(b=5, a=1) }}", {}),
    ("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}][{{ b is defined }}]{% endmacro %}{{ m(1) }}", {}),
    ("error_macro_too_many", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("error_macro_bad_kwarg", "{% macro m(a) %}{% endmacro %}{{ m(z=1) }}", {}),
    ("set_in_if_in_loop", "{% for i in [1, 2] %}{% if i == 1 %}{% set y = 'one' %}{% endif %}[{{ y }}]{% endfor %}", {}),
    ("namespace_in_macro", "{% set ns = namespace(c=0) %}{% macro inc() %}{% set ns.c = ns.c + 1 %}{% endmacro %}{{ inc() }}{{ inc() }}{{ ns.c }}", {}),
    ("dict_literal", "{{ {'b': 1, 'a': 2, 'b': 3} }}|{{ {1: 'x', true: 'y'} }}|{{ 1 in {'a': 1}.values() }}|{{ {'a': 1}.items()|list }}", {}),
    ("string_order", "{{ '\u00e9' > 'z' }}{{ 'a' < 'aa' }}{{ 'B' < 'a' }}{{ [1, 'a'] == [1, 'a'] }}{{ (1, 2) == [1, 2] }}", {}),
    ("split_edges", "{{ ''.split() }}|{{ ''.split(',') }}|{{ 'a,'.split(',') }}|{{ '  '.split(' ') }}|{{ 'a\tb\nc'.split() }}|{{ 'a b c'.rsplit(None, 1) }}|{{ 'aXbXc'.split('X', 0) }}|{{ 'x'.split('x') }}", {}),
    ("strip_unicode_ws", "[{{ '\u3000x\u00a0'.strip() }}]|[{{ '\u3000x\u00a0'|trim }}]|[{{ '\u200bx'.strip() }}]|[{{ 'abcxcba'.strip('abc') }}]", {}),
    ("title_variants", "{{ \"they're bill's friends\"|title }}|{{ \"they're bill's friends\".title() }}|{{ 'hello_world-x (y) [z] {w} <v>'|title }}|{{ 'éCOLE'|capitalize }}|{{ 'ÉCOLE'|lower }}|{{ 'straße'|upper }}|{{ 'a1b2'.title() }}", {}),
    ("error_items_on_list", "{{ [1]|items|list }}", {}),
    ("getattr_index", "{{ 'abc'.0 }}|{{ [[1, 2]].0.1 }}|{{ none.x }}|[{{ 1.real }}]", {}),
    ("error_attr_of_none_attr", "{{ none.x.y }}", {}),
    ("ws_nested_indent", "{%- for m in messages %}\n    {%- if m.role == 'user' %}\n        {{- 'U:' + m.content }}\n    {%- else %}\nA: {{ m.content }}\n    {% endif %}\n{%- endfor %}\n", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
    ("ws_tabs_lstrip", "\t\t{% if true %}x{% endif %}\n  \t{% for i in [1] %}{{ i }}{% endfor %}\n{{ 'a' }}   {% if true %}b{% endif %}\n   {# c #}x\n{%- raw -%}  r  {%- endraw -%}  z", {}),
    ("ws_minus_unicode", "a\u3000 {%- if true %}b{% endif -%} \u00a0\nc", {}),
    ("ws_block_end_eats_one_newline", "{% if true %}\n\nx{% endif %}\n\n{% for i in [1] %}\n{{ i }}\n{% endfor %}\n", {}),
    ("ws_comment_only_line", "a\n    {#- c #}\n  b\n  {# c -#}\n  c", {}),
    ("selectattr_tests", "{{ msgs|selectattr('role', 'in', ['user', 'tool'])|map(attribute='content')|join('/') }}|{{ msgs|rejectattr('tool_calls', 'defined')|list|length }}|{{ msgs|selectattr('tool_calls')|list|length }}|{{ msgs|map(attribute='role')|unique|list }}|{{ msgs|map(attribute='tool_calls.0.name', default='-')|list }}", {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": [{"name": "f"}]}, {"role": "tool", "content": "c"}]}),
    ("loop_over_items_filter", "{% for k, v in d|items %}{{ k }}:{{ v }},{% endfor %}|{% for k, v in d|dictsort %}{{ k }}{% endfor %}|{% for p in d.items() if p[1] > 1 %}{{ p[0] }}{% endfor %}", {"d": {"x": 1, "y": 2, "W": 3}}),
    ("conditional_chains", "{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}{% if not a and not b %}!{% endif %}{% if a is not defined or a == 0 %}?{% endif %}", {"a": 0, "b": "", "c": [1]}),
    ("string_concat_numbers", "{{ 'n=' ~ 1.0 ~ ',' ~ none ~ ',' ~ true ~ ',' ~ [1] ~ ',' ~ {'a': 'b'} }}", {}),
    ("list_concat_slice_step", "{{ ([1, 2] + [3])[::-2] }}|{{ (1, 2) + (3,) }}|{{ 'abcdef'[1:5:2] }}|{{ [1, 2, 3][5:] }}|{{ [1, 2, 3][-10:2] }}", {}),
    ("count_vs_length", "{{ [1, 2]|count }}|{{ {'a': 1}|count }}|{{ 'abc'|count }}|{{ 'a b c'|wordcount }}", {}),
    ("percent_format", "{{ '%s=%d' % ('a', 3) }}|{{ '%5.2f|%-4s|%04d|%x|%r|%%|%+d' % (3.14159, 'ab', 42, 255, 'q', -5) }}|{{ 'no args' % () }}|{{ '%(k)s!' % {'k': 'v'} }}|{{ 'plain' % {} }}|{{ '%s' % [1, 2] }}|{{ '%.1s|%c|%5s|%e|%g' % ('xyz', 65, 'é', 12345.678, 0.0001) }}", {}),
    ("error_percent_extra", "{{ 'x' % 5 }}", {}),
    ("error_percent_missing", "{{ '%s %s' % ('a',) }}", {}),
    ("soft_frames", "{% for x in [1] %}{% if false %}{{ x|nosuch }}{% endif %}{% endfor %}{{ 1 if true else 2|nosuch }}ok", {}),
    ("compile_error_filter_block_in_if", "{% if 1 %}{% filter nosuch %}x{% endfilter %}{% endif %}", {}),
    ("compile_error_loop_in_if", "{% if true %}{% for x in [1] %}{{ x|nosuch }}{% endfor %}{% endif %}", {}),
    ("compile_error_setblock_in_if", "{% if true %}{% set x %}{{ 1|nosuch }}{% endset %}{% endif %}", {}),
    ("compile_error_unknown_test", "{{ 1 is nosuchtest }}", {}),
    ("map_select_falsy", "{{ false|map(attribute='x')|list }}|{{ 0|select|list }}|{{ none|reject|list }}|{{ ''|map('upper')|list }}", {}),
    ("percent_lenient", "{{ 'x' % [1] }}|{{ 'y' % {'a': 1} }}|{{ '%s' % [1, 2] }}|{{ '%s' % {'a': 1} }}", {}),
    ("markup_methods", "{{ ('a,b'|e).split(',') }}|{{ ('x y'|safe).partition(' ') }}|{{ ['<'|e, 'p'] }}|{{ ('<a>'|e).upper() }}", {}),
    ("error_unhashable_in", "{{ [1] in {'a': 1} }}", {}),
    ("unique_lazy_unhashable", "{{ [{'a': 1}]|unique|int }}|{{ [[1], [1]]|unique|list|length if false else 'lazy' }}", {}),
    ("loop_changed", "{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}[{{ x }}]{% endif %}{{ loop.changed(x, 'k') }};{% endfor %}", {}),
    ("truncate_non_str", "{{ [1, 2]|truncate(5) }}|{{ {'a': 1}|truncate(3) }}", {}),
    ("indent_first_blank", "{{ 'l1\n\nl3\n'|indent(2) }}|{{ 'l1\n\nl3\n'|indent(2, true, true) }}|{{ ''|indent(4, true) }}", {}),
]


# Every filter on an undefined value, one snippet each (jinja2's Undefined fails on some, not others).
FEATURES += [(f"undefined_filter_{i}", "[{{ u|%s }}]" % f, {}) for i, f in enumerate([
    "length", "count", "trim", "upper", "lower", "title", "capitalize", "string", "list", "join(',')", "first",
    "last", "int", "float", "default('d')", "items|list", "sort", "reverse|list", "sum", "select|list",
    "map('upper')|list", "max", "min", "unique|list", "safe", "e", "tojson", "abs", "round", "replace('a', 'b')",
    "indent", "center(3)", "wordcount", "truncate(2)", "dictsort", "batch(2)|list", "selectattr('x')|list",
    "attr('x')", "d('x', true)"])]


# Float printing and arithmetic over a fixed set of awkward doubles (random bit patterns included).
_FR = random.Random(7)
FLOATS = [0.1, 0.5, 2.675, 1e16, 1e15, 9999999999999998.0, 1e-4, 1e-5, 123.456, 5e-324, 1.7976931348623157e308,
          -0.5, 1e22, 2.5, 3.5, -68.0, 28.9, 10.2] + [round(_FR.uniform(-1e6, 1e6), _FR.randint(0, 9)) for _ in range(20)]
for _ in range(20):
    _f = struct.unpack("d", struct.pack("Q", _FR.getrandbits(64)))[0]
    if math.isfinite(_f):
        FLOATS.append(_f)
FEATURES.append(("float_ops", "{% for f in fs %}{{ f }}|{{ f|tojson }}|{{ f|round(3) }}|{{ f * 3 }}|{{ f // 1.7 }}|"
                 "{{ f % 1.3 }}|{{ (f|string)|float }}|{{ f / 7 }}|{{ f|int if f|abs < 1e18 else 0 }}\n{% endfor %}",
                 {"fs": FLOATS}))


FEATURES += [
    ("break_in_blocks", "{% for i in [1, 2] %}{% set y %}a{% break %}{% endset %}{{ i }}{% endfor %}|{% for i in [1, 2] %}{% filter upper %}a{% continue %}{% endfilter %}{{ i }}{% endfor %}|{% for i in [1, 2] %}{% with %}{% break %}{% endwith %}{% endfor %}", {}),
    ("compile_error_break_outside", "{% break %}", {}),
    ("compile_error_continue_after_loop", "{% for i in [1] %}{% endfor %}{% continue %}", {}),
    ("compile_error_break_in_call", "{% macro m() %}{{ caller() }}{% endmacro %}{% for i in [1] %}{% call m() %}{% break %}{% endcall %}{% endfor %}", {}),
    ("compile_error_break_in_macro", "{% for i in [1] %}{% macro q() %}{% break %}{% endmacro %}{% endfor %}", {}),
    ("filtered_tuple_loop", "{% for k, v in [['a', 1], ['b', 2], ['c', 3]] if v > 1 %}{{ loop.previtem }}{{ k }}{{ loop.nextitem }};{% endfor %}", {}),
]

# Random snippets (fixed seeds): expressions over every operator / filter / test / method, and statement
# structures (loops, ifs, namespaces, macros, call/set/filter blocks, whitespace control). Snippets whose
# reference output prints a generator's address are skipped (not reproducible anywhere).
_EXPR_ATOMS = ["1", "2", "0", "-3", "2.5", "0.1", "1e3", "'a'", "'Hello World'", "''", "' x '", "none", "true", "false",
               "[1, 2, 3]", "['b', 'a']", "{'k': 1, 'j': 'v'}", "(1, 'x')", "s", "n", "l", "d", "u", "m", "m.role",
               "m['content']", "d.k", "l[0]", "l[-1]", "s[1:]", "l|length", "'é日'", "msgs", "msgs[0]"]
_BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "not in", "**"]
_FILTERS = ["length", "trim", "upper", "lower", "title", "capitalize", "string", "list", "first", "last", "int", "float",
            "default('D')", "join(',')", "join", "sort", "reverse|list", "unique|list", "sum", "max", "min", "tojson",
            "tojson(indent=1)", "items|list", "dictsort", "abs", "round", "round(1)", "replace('a', 'X')", "indent(2)",
            "center(7)", "wordcount", "selectattr('role', 'equalto', 'user')|list", "map(attribute='role')|list",
            "select|list", "reject|list", "batch(2)|list", "e", "safe", "map('upper')|list", "count", "truncate(5)",
            "rejectattr('content')|list", "d('z', true)"]
_TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
          "boolean", "true", "false", "odd", "even", "divisibleby 2", "eq 1", "in [1, 'a']", "lower", "upper", "callable"]
_METHODS = ["strip()", "upper()", "lower()", "split()", "split(',')", "startswith('a')", "endswith('o')",
            "replace('l', 'L')", "title()", "find('l')", "count('l')", "get('k')", "get('zz', 5)", "items()", "keys()",
            "values()", "lstrip('H')", "rstrip()", "capitalize()", "index(1)", "isdigit()", "format(1)", "zfill(4)",
            "splitlines()"]
_EXPR_VARS = {"s": "hello", "n": 7, "l": [3, 1, 2], "d": {"k": 1, "j": "v"}, "m": {"role": "user", "content": "hi"},
              "msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}]}


def _random_expr(r, d=0):
    x = r.random()
    if d > 3 or x < 0.3:
        return r.choice(_EXPR_ATOMS)
    if x < 0.5:
        return f"({_random_expr(r, d + 1)} {r.choice(_BINOPS)} {_random_expr(r, d + 1)})"
    if x < 0.65:
        return f"{_random_expr(r, d + 1)}|{r.choice(_FILTERS)}"
    if x < 0.75:
        return f"({_random_expr(r, d + 1)} is {'not ' if r.random() < 0.3 else ''}{r.choice(_TESTS)})"
    if x < 0.85:
        return f"({_random_expr(r, d + 1)}).{r.choice(_METHODS)}"
    if x < 0.92:
        return f"({_random_expr(r, d + 1)} if {_random_expr(r, d + 1)} else {_random_expr(r, d + 1)})"
    return f"not {_random_expr(r, d + 1)}"


_ITERS = ["msgs", "d.items()", "d", "range(3)", "msgs|reverse", "msgs|selectattr('role', 'equalto', 'user')"]
_SEXPRS = ["x", "i", "loop.index", "loop.first", "loop.last", "loop.previtem", "loop.nextitem", "loop.length", "ns.a",
           "ns.b", "m.role", "m.content", "m.content|trim", "msgs|length", "y", "k", "v", "caller()", "varargs",
           "kwargs", "a", "b", "msgs[0].content", "(ns.a ~ '-')", "loop.cycle('p', 'q')", "mac(1)", "mac(a=2, b='z')",
           "1 + ns.a|length"]
_STMT_VARS = {"msgs": [{"role": "system", "content": " sys "}, {"role": "user", "content": "hi\nthere"},
                       {"role": "assistant", "content": "yo"}], "d": {"p": 1, "q": [2]}, "x": "X"}


def _random_stmts(r):
    def ws():
        return r.choice(["", "", "-", "+"])

    def ws2():
        return r.choice(["", "", "-"])

    def pre():
        return r.choice(["", " ", "\n", "  \n  ", "\t", "\n\n    ", "x\n  "])

    def out():
        return pre() + "{{" + ws2() + " " + r.choice(_SEXPRS) + " " + ws2() + "}}"

    def body(d):
        return "".join(stmt(d + 1) for _ in range(r.randint(1, 3)))

    def stmt(d):
        if d > 3 or r.random() < 0.3:
            return out()
        t = r.random()
        if t < 0.2:
            target = r.choice(["m", "x", "k, v"])
            cond = r.choice(["", " if loop is not defined", " if m is defined"])
            els = f"{{%{ws()} else {ws()}%}}" + body(d) if r.random() < 0.3 else ""
            return (pre() + f"{{%{ws()} for {target} in {r.choice(_ITERS)}{cond} {ws()}%}}" + body(d) + els +
                    f"{{%{ws()} endfor {ws()}%}}")
        if t < 0.35:
            elif_ = f"{{%{ws()} elif {r.choice(_SEXPRS)} {ws()}%}}" + body(d) if r.random() < 0.4 else ""
            else_ = f"{{%{ws()} else {ws()}%}}" + body(d) if r.random() < 0.5 else ""
            return (pre() + f"{{%{ws()} if {r.choice(_SEXPRS)} {ws()}%}}" + body(d) + elif_ + else_ +
                    f"{{%{ws()} endif {ws()}%}}")
        if t < 0.5:
            return pre() + f"{{%{ws()} set ns.{r.choice(['a', 'b'])} = {r.choice(_SEXPRS)} {ws()}%}}"
        if t < 0.6:
            return pre() + f"{{%{ws()} set y = {r.choice(_SEXPRS)} {ws()}%}}"
        if t < 0.68:
            return pre() + f"{{%{ws()} set y {ws()}%}}" + body(d) + f"{{%{ws()} endset {ws()}%}}"
        if t < 0.82:
            return pre() + f"{{%{ws()} call(a) mac(3) {ws()}%}}" + body(d) + "{% endcall %}"
        if t < 0.9:
            return pre() + "{#" + ws2() + " comment " + ws2() + "#}"
        return pre() + f"{{%{ws()} filter upper {ws()}%}}" + body(d) + "{% endfilter %}"

    head = ("{% set ns = namespace(a='', b=0) %}{% macro mac(a, b='B') %}[{{ a }}{{ b }}"
            "{{ caller() if caller is defined }}{{ varargs|length }}]{% endmacro %}")
    return head + "".join(stmt(0) for _ in range(r.randint(1, 4))) + r.choice(["", "\n", "  \n"])


def random_features():
    out = []
    r = random.Random(20240726)
    for i in range(300):
        src = "".join(
            r.choice(["", "\n", "  ", "\t"]) + "{{ " + _random_expr(r) + " }}" for _ in range(r.randint(1, 3)))
        out.append((f"random_expr_{i}", src, _EXPR_VARS))
    for i in range(150):
        out.append((f"random_stmts_{i}", _random_stmts(r), _STMT_VARS))
    return out


def render_feature(name, src, variables):
    rec = {"name": name, "template": src, "vars": variables}
    try:
        tmpl = ctu._compile_jinja_template(src)
    except Exception as e:  # noqa: BLE001
        rec["compile_error"] = f"{type(e).__name__}: {e}"
        return rec
    try:
        rec["output"] = tmpl.render(**copy.deepcopy(variables))
    except Exception as e:  # noqa: BLE001
        if type(e) is jinja2.exceptions.TemplateError:
            rec["raised"] = str(e)
        else:
            rec["error"] = f"{type(e).__name__}: {e}"
    return rec


def fetch_sdist(path):
    if path:
        return path
    d = tempfile.mkdtemp(prefix="llamacpp_sdist_")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", d, SDIST],
                   check=True, stdout=subprocess.DEVNULL)
    return glob.glob(os.path.join(d, "*.tar.gz"))[0]


def read_templates(sdist):
    out = {}
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            base = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if base.startswith(TEMPLATE_DIR_IN_SDIST) and base.endswith(".jinja") and m.isfile():
                out[os.path.basename(base)] = tf.extractfile(m).read()
    return dict(sorted(out.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sdist", help="path of llama_cpp_python-0.3.36.tar.gz (default: pip download it)")
    ap.add_argument("--write", action="store_true", help="write the fixtures (default: only check them)")
    args = ap.parse_args()

    templates = read_templates(fetch_sdist(args.sdist))
    result = {
        "generator": {"script": "tests/ref/gen_template_fixtures.py", "transformers": transformers.__version__,
                      "jinja2": jinja2.__version__, "python": sys.version.split()[0], "source": SDIST},
        "now": NOW,
        "cases": [c[0] for c in CASES],
        "templates": {},
        "features": [render_feature(*f) for f in FEATURES] + [
            rec for rec in (render_feature(*f) for f in random_features())
            if " at 0x" not in rec.get("output", "")],
    }
    for name, raw in templates.items():
        src = raw.decode("utf-8")
        result["templates"][name] = [render_case(src, name, c) for c in CASES]
    text = json.dumps(result, ensure_ascii=False, indent=1, sort_keys=False) + "\n"

    exp_path = os.path.join(OUT, "expected.json")
    if args.write:
        os.makedirs(OUT, exist_ok=True)
        for name, raw in templates.items():
            with open(os.path.join(OUT, name), "wb") as f:
                f.write(raw)
        with open(exp_path, "w", encoding="utf-8") as f:
            f.write(text)
        n_out = sum(1 for v in result["templates"].values() for r in v if "output" in r)
        n_all = sum(len(v) for v in result["templates"].values())
        print(f"wrote {len(templates)} templates, {n_all} cases ({n_out} rendered), {len(FEATURES)} features to {OUT}")
        return 0
    bad = 0
    for name, raw in templates.items():
        p = os.path.join(OUT, name)
        if not os.path.exists(p) or open(p, "rb").read() != raw:
            print(f"differs: {p}")
            bad += 1
    if not os.path.exists(exp_path) or open(exp_path, encoding="utf-8").read() != text:
        print(f"differs: {exp_path}")
        bad += 1
    print("fixtures up to date" if not bad else f"{bad} fixture file(s) differ; rerun with --write")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
