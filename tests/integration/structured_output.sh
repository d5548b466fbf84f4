#!/bin/bash
# Structured output and tool calls through the real server (mpirun -np 2: TP 2, CPU, random weights) with the
# official openai client: every schema of tests/unit/data/grammar_cases.json as response_format json_schema
# (python jsonschema validates what comes back), json_object, guided_regex / guided_choice (vLLM's extra
# fields), refused schemas and tools (400 naming the parameter and the keyword), and a weather-function
# round trip on the Qwen2.5 template (hermes <tool_call> format): tool_choice required and a named function
# force a call that parses, streamed as tool-call deltas; the tool's answer goes back as a tool message. Issue 21's
# two parts together: n = 2 with a guided choice, logprobs and sampling controls; n = 2 forced tool calls, whole and
# streamed; min_tokens with a grammar (eos held back while the grammar allows more, the grammar's end wins).
. "$top_srcdir/tests/integration/lib.sh"
PY=${PYTHON:-python3}
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
"$PY" -c 'import openai, jsonschema' 2>/dev/null || { echo "SKIP: python openai and jsonschema are needed"; exit 77; }
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
sed -i "s/\"max_position_embeddings\": 512/\"max_position_embeddings\": 2048/" "$tmp/m/config.json"   # room for the tools prompt
serve_start "$tmp/m" --chat-template "$top_srcdir/tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja" || finish
"$PY" - "$url" "$top_srcdir/tests/unit/data/grammar_cases.json" <<'PYEOF' && ok "structured output and tool calls" || bad "structured output and tool calls"
import json, re, sys, openai, jsonschema
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
cases = json.load(open(sys.argv[2]))
fails = 0
def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH", what)
msgs = [{"role": "user", "content": "Give me JSON."}]
finished = 0
for i, case in enumerate(cases):
    for seed in (1, 2):
        r = c.chat.completions.create(model="m", messages=msgs, max_tokens=400, temperature=1.0, seed=seed,
                                      response_format={"type": "json_schema", "json_schema": {"name": case["name"], "schema": case["schema"]}})
        ch = r.choices[0]
        if ch.finish_reason != "stop":
            print("  %s seed %d: not finished in 400 tokens (%s)" % (case["name"], seed, ch.finish_reason))
            continue
        finished += 1
        try:
            jsonschema.validate(json.loads(ch.message.content), case["schema"], cls=jsonschema.Draft202012Validator)
        except Exception as e:
            check(False, "%s seed %d: %r: %s" % (case["name"], seed, ch.message.content[:200], str(e).splitlines()[0]))
print("json_schema: %d of %d finished" % (finished, 2 * len(cases)))
check(finished >= 3 * len(cases) // 2, "fewer than 3/4 of the schema requests finished")
# json_object, streamed: the chunks join into a JSON object
text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
    model="m", messages=msgs, max_tokens=400, seed=3, response_format={"type": "json_object"}, stream=True) if ch.choices)
try:
    check(isinstance(json.loads(text), dict), "json_object: not an object: %r" % text[:200])
except ValueError:
    check(False, "json_object stream: %r does not parse" % text[:200])
# regex and choice (vLLM's extra fields), completions and chat
r = c.completions.create(model="m", prompt="Phone:", max_tokens=40, seed=4, extra_body={"guided_regex": r"\d{3}-\d{4}"})
check(re.fullmatch(r"\d{3}-\d{4}", r.choices[0].text), "guided_regex: %r" % r.choices[0].text)
r = c.chat.completions.create(model="m", messages=msgs, max_tokens=20, seed=5,
                              extra_body={"structured_outputs": {"choice": ["positive", "negative", "neutral"]}})
check(r.choices[0].message.content in ("positive", "negative", "neutral"), "choice: %r" % r.choices[0].message.content)
# min_tokens with a grammar: min_tokens holds eos back while the grammar allows more (regex a+: at least 5 tokens
# before eos); once the grammar allows nothing but eos (a choice made, a schema's object closed) the grammar wins
# and the output ends there, finish "stop", valid -- never a sampler left without a token (vLLM masks eos for
# min_tokens; with nothing else allowed the grammar's end is the only valid output)
r = c.completions.create(model="m", prompt="As:", max_tokens=20, seed=13, extra_body={"guided_regex": "a+", "min_tokens": 5})
check(re.fullmatch("a+", r.choices[0].text) and r.usage.completion_tokens >= 5, "min_tokens + regex: %r, %d tokens, %s" %
      (r.choices[0].text, r.usage.completion_tokens, r.choices[0].finish_reason))
for body in ({"guided_choice": ["yes", "no"]},
             {"response_format": {"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "object", "properties": {"a": {"type": "boolean"}},
                                                                                              "required": ["a"], "additionalProperties": False}}}}):
    r = c.completions.create(model="m", prompt="Answer:", max_tokens=30, seed=14, extra_body=dict(body, min_tokens=20))
    t = r.choices[0].text
    check(r.choices[0].finish_reason == "stop" and (t in ("yes", "no") if "guided_choice" in body else isinstance(json.loads(t).get("a"), bool)),
          "min_tokens 20 + %s: %r %s" % (list(body), t, r.choices[0].finish_reason))
# refused: the parameter and the keyword are named
for body, param, word in [({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "email"}}}}, "response_format", "format"),
                          ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 0}}}}, "response_format", "minimum"),
                          ({"extra_body": {"guided_regex": "(ab"}}, "guided_regex", "unbalanced"),
                          ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools", "name"),
                          ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice", "'g'")]:
    try:
        c.chat.completions.create(model="m", messages=msgs, max_tokens=5, **body)
        check(False, "accepted: %s" % body)
    except openai.BadRequestError as e:
        err = e.body if isinstance(e.body, dict) else {}
        err = err.get("error", err)
        check(err.get("param") == param and word in err.get("message", ""), "400 for %s: %s" % (body, err))
# the weather-function round trip
tools = [{"type": "function", "function": {"name": "get_weather", "description": "current weather",
          "parameters": {"type": "object", "properties": {"location": {"type": "string", "maxLength": 20},
                                                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                         "required": ["location"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 8}}}}}]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
r = c.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice="required", max_tokens=200, seed=6,
                              parallel_tool_calls=False)
ch = r.choices[0]
check(ch.finish_reason == "tool_calls" and ch.message.tool_calls, "required: no tool call: %s" % ch)
if ch.message.tool_calls:
    call = ch.message.tool_calls[0]
    check(call.type == "function" and call.function.name in ("get_weather", "get_time") and call.id.startswith("call_"), "call: %s" % call)
    check(isinstance(json.loads(call.function.arguments), dict), "arguments: %r" % call.function.arguments)
    back = ask + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                  {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "unit": "celsius"})}]
    r2 = c.chat.completions.create(model="m", messages=back, tools=tools, tool_choice="none", max_tokens=8, seed=7)
    check(r2.choices[0].finish_reason in ("length", "stop") and r2.choices[0].message.tool_calls is None, "round trip answer: %s" % r2.choices[0])
# a named function, streamed: id / type / name first, then the arguments
deltas = [ch.choices[0] for ch in c.chat.completions.create(model="m", messages=ask, tools=tools, max_tokens=200, seed=8, stream=True,
          tool_choice={"type": "function", "function": {"name": "get_weather"}}) if ch.choices]
calls = [tc for d in deltas for tc in (d.delta.tool_calls or [])]
check(deltas and deltas[-1].finish_reason == "tool_calls", "stream finish: %s" % (deltas[-1] if deltas else None))
check(len(calls) >= 2 and calls[0].id and calls[0].function.name == "get_weather", "stream deltas: %s" % calls)
args = "".join(tc.function.arguments or "" for tc in calls)
try:
    a = json.loads(args)
    check(isinstance(a.get("location"), str), "stream arguments: %r" % args)
except ValueError:
    check(False, "stream arguments do not parse: %r" % args)
# both parts of issue 21 together: n = 2 with a constraint (a grammar state per choice), logprobs and sampling controls
labels = ("positive", "negative", "neutral")
r = c.chat.completions.create(model="m", messages=msgs, max_tokens=20, seed=10, n=2, logprobs=True, top_logprobs=2,
                              presence_penalty=0.5, logit_bias={"0": -5},
                              extra_body={"structured_outputs": {"choice": list(labels)}, "min_p": 0.01, "repetition_penalty": 1.1})
check(sorted(ch.index for ch in r.choices) == [0, 1], "n = 2 choice: indices %s" % [ch.index for ch in r.choices])
for ch in r.choices:
    check(ch.message.content in labels and ch.finish_reason == "stop", "n = 2 choice %d: %r %s" % (ch.index, ch.message.content, ch.finish_reason))
    lp = ch.logprobs.content if ch.logprobs else None
    check(lp and all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in lp), "n = 2 choice %d: logprobs %s" % (ch.index, lp))
    # the scored tokens: the text, then the stop token that ended it
    check(lp and "".join(t.token for t in lp[:-1]) == ch.message.content, "n = 2 choice %d: logprob tokens %s" % (ch.index, lp))
# n = 2 forced tool calls: each choice parsed on its own, whole and streamed (deltas carry the choice's index)
r = c.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice="required", max_tokens=200, seed=11, n=2)
check(len(r.choices) == 2 and all(ch.finish_reason == "tool_calls" and ch.message.tool_calls for ch in r.choices),
      "n = 2 tool calls: %s" % r.choices)
ids = [tc.id for ch in r.choices for tc in (ch.message.tool_calls or [])]
check(len(ids) == len(set(ids)), "n = 2 tool call ids repeat: %s" % ids)
per = {}
for ev in c.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice="required", max_tokens=200, seed=12,
                                    n=2, stream=True):
    for ch in ev.choices:
        d = per.setdefault(ch.index, {"calls": [], "fin": None})
        d["calls"] += ch.delta.tool_calls or []
        d["fin"] = ch.finish_reason or d["fin"]
check(sorted(per) == [0, 1] and all(v["fin"] == "tool_calls" and v["calls"] and v["calls"][0].function.name for v in per.values()),
      "n = 2 streamed tool calls: %s" % per)
for i, v in per.items():
    try:
        check(isinstance(json.loads("".join(tc.function.arguments or "" for tc in v["calls"])), dict), "n = 2 stream %d arguments" % i)
    except ValueError:
        check(False, "n = 2 stream %d: arguments do not parse" % i)
print("fails:", fails)
sys.exit(1 if fails else 0)
PYEOF
# the masks are made while the device runs the step's forward pass and broadcast after the plan (TP 2 here),
# except for the steps where a row's min_tokens is pending with a grammar (the min_tokens cases above)
m=$(curl -s "$url/metrics")
mt=$(echo "$m" | awk '$1 == "sits_grammar_masks_total" { print $2 }'); mo=$(echo "$m" | awk '$1 == "sits_grammar_masks_overlapped_total" { print $2 }')
[ "${mo:-0}" -gt 0 ] && [ "$mo" -lt "${mt:-0}" ] && ok "grammar masks: $mo of $mt made during the forward pass (the rest: min_tokens pending)" \
  || bad "grammar masks: '$mo' overlapped of '$mt'"
for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done
wait $srv; rc=$?; srv=
[ $rc -eq 0 ] && ok "server stopped cleanly" || bad "server exit $rc"

# Tool calls at a drain (the event-loop server): SIGTERM with three tool requests in flight on a slower
# model, --shutdown-timeout 4. A forced call (tool_choice required, streamed) ends by itself during the
# drain: its deltas and finish "tool_calls" arrive whole. Two tool_choice auto requests (no call in their
# output: the stream's text goes out as content as the parser rules calls out), 2000 tokens with ignore_eos,
# meet the timeout: the streamed one gets its text as content, finish "abort", usage and [DONE]; the whole
# one a 200 body with the text, "abort".
serve_setup_slow "$tmp/m2"
serve_start "$tmp/m2" --chat-template "$top_srcdir/tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja" \
  --shutdown-timeout 4 || finish
p0=$(rank_pid 0 "$tmp/m2"); p1=$(rank_pid 1 "$tmp/m2")
"$PY" - "$port" "$p0,$p1" <<'PYEOF' && ok "tool calls at a drain" || bad "tool calls at a drain"
import http.client, json, os, signal, sys, threading, time
port, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2].split(",")]
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"location": {"type": "string", "maxLength": 20}}, "required": ["location"]}}}]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
reqs = {"forced": dict(tool_choice="required", max_tokens=200, stream=True, stream_options={"include_usage": True}),
        "auto-stream": dict(tool_choice="auto", max_tokens=2000, ignore_eos=True, stream=True, stream_options={"include_usage": True}),
        "auto-whole": dict(tool_choice="auto", max_tokens=2000, ignore_eos=True)}
res = {k: {} for k in reqs}
def run(name, extra):
    r = res[name]
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c.request("POST", "/v1/chat/completions", json.dumps(dict(model="m2", messages=ask, tools=tools, seed=9, **extra)),
                  {"Content-Type": "application/json"})
        h = c.getresponse()
        r["status"] = h.status
        if not extra.get("stream"):
            r["body"] = json.loads(h.read())
            return
        buf = b""
        while True:
            piece = h.read1(65536)
            if not piece:
                break
            buf += piece
            r["first"] = True
        r["events"] = buf.decode("utf-8").split("\n\n")
    except Exception as e:
        r["exc"] = "%s: %s" % (type(e).__name__, e)
th = [threading.Thread(target=run, args=kv, daemon=True) for kv in reqs.items()]
for t in th:
    t.start()
def inflight():
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/metrics")
        for line in c.getresponse().read().decode().splitlines():
            if line.startswith("sits_num_requests_inflight "):
                return float(line.split()[1])
    except Exception:
        pass
    return 0
t_end = time.time() + 60
while time.time() < t_end and not (inflight() >= 3 and res["forced"].get("first") and res["auto-stream"].get("first")):
    time.sleep(0.02)
for p in pids:
    os.kill(p, signal.SIGTERM)
for t in th:
    t.join(100)
fails = 0
def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH", what)
def stream(name):
    r = res[name]
    check(r.get("status") == 200 and "exc" not in r, "%s: %s" % (name, {k: r.get(k) for k in ("status", "exc")}))
    ev = [e for e in r.get("events", []) if e.strip()]
    check(ev and ev[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in ev), "%s: not a whole stream: %r" % (name, ev[-3:]))
    objs = [json.loads(e[6:]) for e in ev if e.startswith("data: ") and e != "data: [DONE]"]
    fin = [ch["finish_reason"] for o in objs for ch in o.get("choices", []) if ch.get("finish_reason")]
    deltas = [ch["delta"] for o in objs for ch in o.get("choices", [])]
    usage = [o["usage"] for o in objs if o.get("usage")]
    check(len(usage) == 1, "%s: usage chunks %s" % (name, usage))
    return fin, deltas, usage[0] if usage else {}
fin, deltas, usage = stream("forced")
calls = [tc for d in deltas for tc in d.get("tool_calls") or []]
check(fin == ["tool_calls"], "forced: finish %s" % fin)
fin_forced = fin
check(calls and calls[0].get("function", {}).get("name") == "get_weather", "forced: deltas %s" % calls)
try:
    check(isinstance(json.loads("".join(tc["function"].get("arguments") or "" for tc in calls)), dict), "forced: arguments")
except ValueError as e:
    check(False, "forced: arguments do not parse: %s" % e)
fin, deltas, usage = stream("auto-stream")
text = "".join(d.get("content") or "" for d in deltas)
check(fin == ["abort"], "auto-stream: finish %s" % fin)
check(0 < usage.get("completion_tokens", 0) < 2000 and len(text) > 0, "auto-stream: %d chars of text for %s" % (len(text), usage))
print("drain: forced call %s, auto stream %d tokens / %d chars delivered" % (fin_forced, usage.get("completion_tokens", 0), len(text)))
r = res["auto-whole"]
ch = (r.get("body") or {}).get("choices", [{}])[0]
check(r.get("status") == 200 and ch.get("finish_reason") == "abort" and ch.get("message", {}).get("content"),
      "auto-whole: %s %s" % (r.get("status"), str(ch)[:200]))
print("fails:", fails)
sys.exit(1 if fails else 0)
PYEOF
wait $srv; rc=$?; srv=
[ $rc -eq 0 ] && ok "drained server exit 0" || bad "drained server exit $rc"
finish
