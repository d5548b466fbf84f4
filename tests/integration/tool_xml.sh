#!/bin/bash
# [tool calls] qwen3_coder: the XML calls of Qwen3-Coder / Qwen3.5 (<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n
# </parameter>\n</function>\n</tool_call>) through the real server (mpirun -np 1, CPU, random weights) on Qwen3-Coder's
# own template and the official openai client. The template alone picks the parser (auto, logged at start). A guided
# choice forces the model's text to vLLM's own test case (tests/tool_use/test_qwen3coder_tool_parser.py, "tool_with_typed
# _params": its tools, output, expected call and content), so the expected values are vLLM's: the whole response's
# call and content, the stream's deltas joined the way the client joins them equal to it (the arguments in more than
# one fragment); tool_choice required / named force the format (the output opens a call of a listed function); an
# assistant turn with the call and a tool result renders back through the template.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import openai' 2>/dev/null || { echo "SKIP: python openai is needed"; exit 77; }
serve_tmp
serve_setup_slow "$tmp/m"
T=$top_srcdir/tests/fixtures/templates/Qwen3-Coder.jinja
if SITS_LOG_LEVEL=info serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T"; then
  grep -q "qwen3_coder" "$tmp/err" && ok "auto: qwen3_coder from Qwen3-Coder's template (logged)" ||
    bad "auto did not pick qwen3_coder: $(grep -i "tool" "$tmp/err" | head -3)"
  "$PY" - "$url" "$top_srcdir/tests/integration" <<'PYEOF' && ok "qwen3_coder: vLLM's typed call, whole and streamed; forced calls; the call renders back" || bad "qwen3_coder"
import json, sys, openai
sys.path.insert(0, sys.argv[2])
from stream_checks import Checker
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
check = Checker()
tools = [{"type": "function", "function": {"name": "get_current_weather", "description": "Get the current weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"},
                                                          "state": {"type": "string", "description": "The state code"},
                                                          "unit": {"type": "string", "enum": ["fahrenheit", "celsius"]}},
                         "required": ["city", "state"]}}},
         {"type": "function", "function": {"name": "calculate_area", "description": "Calculate area of a shape",
          "parameters": {"type": "object", "properties": {"shape": {"type": "string"}, "dimensions": {"type": "object"},
                                                          "precision": {"type": "integer"}}}}}]
ask = [{"role": "user", "content": "What is the area of a circle of radius 15.5?"}]
out = ("Let me calculate that area for you.<tool_call>\n<function=calculate_area>\n<parameter=shape>\ncircle\n</parameter>\n"
       "<parameter=dimensions>\n{\"radius\": 15.5}\n</parameter>\n<parameter=precision>\n3\n</parameter>\n</function>\n</tool_call>")
want_args = {"shape": "circle", "dimensions": {"radius": 15.5}, "precision": 3}
kw = dict(model="m", messages=ask, tools=tools, tool_choice="auto", max_tokens=200, temperature=0,
          extra_body={"structured_outputs": {"choice": [out]}})
w = c.chat.completions.create(**kw).choices[0]
tc = w.message.tool_calls or []
check(w.finish_reason == "tool_calls" and len(tc) == 1 and tc[0].function.name == "calculate_area" and
      json.loads(tc[0].function.arguments) == want_args and w.message.content == "Let me calculate that area for you.",
      "whole: %s" % w)
calls, content, fin = {}, "", None
for ev in c.chat.completions.create(stream=True, **kw):
    if not ev.choices:
        continue
    d = ev.choices[0].delta
    content += d.content or ""
    for t in d.tool_calls or []:
        if t.index not in calls:
            check(t.id and t.function.name and t.function.arguments == "", "first delta: %s" % t)
            calls[t.index] = {"id": t.id, "name": t.function.name, "args": []}
        else:
            calls[t.index]["args"].append(t.function.arguments or "")
    fin = ev.choices[0].finish_reason or fin
check(fin == "tool_calls" and content == w.message.content and list(calls) == [0], "stream: %r %s %s" % (content, calls, fin))
if tc and 0 in calls:
    s = calls[0]
    check(s["name"] == tc[0].function.name and "".join(s["args"]) == tc[0].function.arguments,
          "streamed call %s != whole %s" % (s, tc[0]))
    check(len(s["args"]) > 1, "the arguments came in one piece: %r" % s["args"])
# forced: required (either function) and named; random weights ramble inside a value, so only the opening is checked
for choice, names in (("required", ("get_current_weather", "calculate_area")),
                      ({"type": "function", "function": {"name": "get_current_weather"}}, ("get_current_weather",))):
    r = c.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice=choice, max_tokens=12, seed=5,
                                  temperature=1.0).choices[0]
    text = r.message.content or ""
    check(any(("<tool_call>\n<function=" + n + ">\n").startswith(text[:len("<tool_call>\n<function=" + n + ">\n")]) and
              text.startswith("<tool_call>\n<function=") for n in names), "forced %s: %r" % (choice, text))
# the call and its result back through the template (the arguments as an object, as vLLM passes them)
hist = ask + [{"role": "assistant", "content": None, "tool_calls": [{"id": tc[0].id if tc else "call_x", "type": "function",
               "function": {"name": "calculate_area", "arguments": json.dumps(want_args)}}]},
              {"role": "tool", "tool_call_id": "call_x", "content": "754.77"}]
import urllib.request
req = urllib.request.Request(sys.argv[1] + "/tokenize", data=json.dumps({"model": "m", "messages": hist}).encode(),
                             headers={"Content-Type": "application/json"})
toks = json.load(urllib.request.urlopen(req))["tokens"]
req = urllib.request.Request(sys.argv[1] + "/detokenize", data=json.dumps({"model": "m", "tokens": toks}).encode(),
                             headers={"Content-Type": "application/json"})
prompt = json.load(urllib.request.urlopen(req))["prompt"]
check("<function=calculate_area>\n<parameter=shape>\ncircle\n</parameter>\n" in prompt and "754.77" in prompt,
      "the call did not render back: %r" % prompt[-400:])
check.done()
PYEOF
  stop_np "$tmp/m" || bad "server did not stop cleanly"
fi
finish
