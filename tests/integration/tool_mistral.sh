#!/bin/bash
# [tool calls] Mistral through the real server (mpirun -np 1, CPU, random weights) and the official openai client, on
# Mistral Nemo's template with a tokenizer whose [TOOL_CALLS] / [ARGS] / [CALL_ID] are control (special) tokens, as in
# Mistral's own tokenizers (the byte-level fixture with three reserved special tokens renamed):
#   - call ids are 9 letters and digits (vLLM's MistralToolCall): the template refuses any other id when the call
#     comes back in the history -- a forced call's id goes back and renders (200), a call_... id is refused (400);
#   - the markup tokens reach the parser as text (vLLM keeps special tokens for the mistral parser): a reply of
#     [TOOL_CALLS] tokens (logit_bias) that is no call comes back as that text, while without tools the same tokens
#     are dropped like every special token.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import openai' 2>/dev/null || { echo "SKIP: python openai is needed"; exit 77; }
serve_tmp
serve_setup_slow "$tmp/m"
rename_special "$tmp/m" "3002=[TOOL_CALLS]" "3003=[ARGS]" "3005=[CALL_ID]" || { bad "tokenizer patch"; finish; }
T=$top_srcdir/tests/fixtures/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja
if serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T"; then
  "$PY" - "$url" "$top_srcdir/tests/integration" <<'PYEOF' && ok "mistral: 9-character call ids go back through the template; the markup tokens reach the parser" || bad "mistral"
import sys, openai, re
sys.path.insert(0, sys.argv[2])
from stream_checks import Checker
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
check = Checker()
tools = [{"type": "function", "function": {"name": "get_weather", "description": "current weather",
          "parameters": {"type": "object", "properties": {"location": {"type": "string", "maxLength": 12}},
                         "required": ["location"]}}}]
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
w = c.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice="required", max_tokens=120, seed=3, parallel_tool_calls=False,
                              temperature=1.0).choices[0]
calls = w.message.tool_calls or []
check(w.finish_reason == "tool_calls" and calls, "forced call: %s" % w)
ids = [x.id for x in calls]
check(all(re.fullmatch(r"[A-Za-z0-9]{9}", i or "") for i in ids), "ids %s" % ids)
s_ids = [tc.id for ev in c.chat.completions.create(model="m", messages=ask, tools=tools, tool_choice="required",
                                                   max_tokens=120, seed=3, temperature=1.0, stream=True, parallel_tool_calls=False)
         if ev.choices for tc in (ev.choices[0].delta.tool_calls or []) if tc.id]
check(s_ids and all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in s_ids), "streamed ids %s" % s_ids)
def back(cid):
    return ask + [{"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function", "function":
                  {"name": "get_weather", "arguments": calls[0].function.arguments if calls else "{}"}}]},
                  {"role": "tool", "tool_call_id": cid, "content": "sunny"}]
if calls:
    r = c.chat.completions.create(model="m", messages=back(ids[0]), tools=tools, max_tokens=2, temperature=0)
    check(r.choices, "the call's id did not go back")
try:
    c.chat.completions.create(model="m", messages=back("call_" + "x" * 24), tools=tools, max_tokens=2)
    check(False, "a call_ id in the history was accepted: the template's check did not run")
except openai.BadRequestError as e:
    check("9" in str(e), "400 without the template's reason: %s" % e)
# [TOOL_CALLS] (id 3002, special) forced at every step: kept as text with the parser on, dropped without tools
r = c.chat.completions.create(model="m", messages=ask, tools=tools, max_tokens=3, temperature=0, logit_bias={"3002": 100})
check(r.choices[0].message.content == "[TOOL_CALLS]" * 3 and not r.choices[0].message.tool_calls, "kept: %s" % r.choices[0])
r = c.chat.completions.create(model="m", messages=ask, max_tokens=3, temperature=0, logit_bias={"3002": 100})
check(r.choices[0].message.content == "" and r.usage.completion_tokens == 3, "without tools: %s" % r.choices[0])
check.done()
PYEOF
  stop_np "$tmp/m" || bad "server did not stop cleanly"
fi
finish
