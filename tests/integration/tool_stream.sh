#!/bin/bash
# Tool calls streamed incrementally (issue 21), through the real server (mpirun -np 1, CPU, random weights) and
# the official openai client, in each family's format -- hermes (Qwen2.5's template), llama3_json (Llama 3.1's),
# mistral (Mistral Nemo's): with tool_choice forcing the call (a named function; required with two tools), the
# streamed deltas, joined the way the client joins them, equal the whole response of the same seed (names,
# arguments, content, finish "tool_calls"); the first delta of a call carries its id, type and name with
# arguments "", and the arguments come in more than one fragment, as the model writes them (held to the end they
# would be one). With tool_choice "auto" and an output that is no call, the text streams as content.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import openai' 2>/dev/null || { echo "SKIP: python openai is needed"; exit 77; }
serve_tmp
# the 8-layer test model (4096 positions: room for the tools prompt): a step takes milliseconds, so the pump
# meets the arguments' tokens as they come (the 2-layer one wrote a short argument string within one pump
# pass now and then, and it arrived whole)
serve_setup_slow "$tmp/m"
T=$top_srcdir/tests/fixtures/templates
for fmt in hermes:Qwen-Qwen2.5-7B-Instruct.jinja llama3_json:meta-llama-Llama-3.1-8B-Instruct.jinja \
           mistral:mistralai-Mistral-Nemo-Instruct-2407.jinja; do
  parser=${fmt%%:*}
  serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T/${fmt#*:}" --tool-call-parser "$parser" || continue
  "$PY" - "$url" "$parser" <<'PYEOF' && ok "$parser: streamed tool calls join into the whole response" || bad "$parser: streamed tool calls"
import json, sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
fmt = sys.argv[2]
fails = 0
def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH %s:" % fmt, what)
tools = [{"type": "function", "function": {"name": "get_weather", "description": "current weather",
          "parameters": {"type": "object", "properties": {"location": {"type": "string", "maxLength": 20},
                                                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                         "required": ["location", "unit"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 8}},
                                                                             "required": ["tz"]}}}]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
def joined(stream):
    calls, content, fin, order = {}, "", None, []
    for ev in stream:
        if not ev.choices:
            continue
        ch = ev.choices[0]
        d = ch.delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                check(tc.id and tc.type == "function" and tc.function.name and tc.function.arguments == "",
                      "first delta of call %d: %s" % (tc.index, tc))
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "args": [], "first": len(order)}
            else:
                check(tc.id is None and tc.function.name is None, "a later delta repeats the head: %s" % tc)
                calls[tc.index]["args"].append(tc.function.arguments or "")
            order.append(tc.index)
        fin = ch.finish_reason or fin
    return calls, content, fin, order
for seed, choice in ((21, {"type": "function", "function": {"name": "get_weather"}}), (22, "required"), (23, "required")):
    kw = dict(model="m", messages=ask, tools=tools, tool_choice=choice, max_tokens=160, seed=seed, temperature=1.0)
    whole = c.chat.completions.create(**kw).choices[0]
    calls, content, fin, order = joined(c.chat.completions.create(stream=True, **kw))
    wc = whole.message.tool_calls or []
    check(whole.finish_reason == "tool_calls" and wc, "seed %d: whole response has no calls: %s" % (seed, whole))
    check(fin == whole.finish_reason, "seed %d: stream finish %s, whole %s" % (seed, fin, whole.finish_reason))
    check(sorted(calls) == list(range(len(wc))), "seed %d: streamed call indices %s, whole %d calls" % (seed, sorted(calls), len(wc)))
    for k, w in enumerate(wc):
        s = calls.get(k)
        if not s:
            continue
        check(s["name"] == w.function.name and "".join(s["args"]) == w.function.arguments,
              "seed %d call %d: streamed %s(%s), whole %s(%s)" % (seed, k, s["name"], "".join(s["args"]), w.function.name, w.function.arguments))
        check(len(s["args"]) > 1, "seed %d call %d: the arguments came in one piece %r (not incremental)" % (seed, k, s["args"]))
        json.loads(w.function.arguments)
    check(content == (whole.message.content or ""), "seed %d: streamed content %r, whole %r" % (seed, content, whole.message.content))
# auto with no call in the output (the grammar of a choice forces plain text): content streams, no calls
kw = dict(model="m", messages=ask, tools=tools, tool_choice="auto", max_tokens=10, seed=24, temperature=1.0,
          extra_body={"structured_outputs": {"choice": ["sunny today", "rainy"]}})
whole = c.chat.completions.create(**kw).choices[0]
calls, content, fin, order = joined(c.chat.completions.create(stream=True, **kw))
check(not calls and content == whole.message.content and content in ("sunny today", "rainy"), "auto, no call: %r %s vs %r" % (content, calls, whole.message.content))
sys.exit(1 if fails else 0)
PYEOF
  for r in 0; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done
  wait $srv; srv=
done
finish
