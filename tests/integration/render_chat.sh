#!/bin/bash
# sits-dist --render-chat against transformers' apply_chat_template (tests/fixtures/chat/cases.json from
# tests/ref/gen_chat_fixtures.py): every case whose render does not depend on the clock, byte for byte
# (stdout holds exactly the prompt, no newline added); cases transformers refused exit non-zero with the
# template's message. Then the served chat endpoint on the same templates: continue_final_message,
# chat_template_kwargs, tools with tool_choice "none", a template's raise_exception as a 400.
. "$top_srcdir/tests/integration/lib.sh"
command -v "${PYTHON:-python3}" >/dev/null 2>&1 || { echo "SKIP: python3 is needed to read the fixture cases"; exit 77; }
PY=${PYTHON:-python3}
C="$top_srcdir/tests/fixtures/chat"
tmp=$(mktemp -d); trap 'kill $srv 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

# one input / expected file pair per case (cases whose template reads the clock, strftime_now, are left to
# test_chat, which pins it -- except where the caller passes the date)
"$PY" - "$C/cases.json" "$tmp" <<'PYEOF'
import glob, json, os, sys
doc = json.load(open(sys.argv[1], encoding="utf-8"))
fix = os.path.dirname(sys.argv[1])
def source(model):   # the model's default template (chat_template.jinja wins over tokenizer_config.json)
    files = glob.glob(os.path.join(fix, model, "chat_template.jinja")) or glob.glob(os.path.join(fix, model, "tokenizer_config.json"))
    return open(files[0], encoding="utf-8").read()
n = 0
for i, c in enumerate(doc["cases"]):
    src = source(c["model"])
    dated = "date_string" in c["input"].get("chat_template_kwargs", {}) and "date_string" in src
    if "strftime_now" in src and not dated:
        continue
    d = "%s/%03d" % (sys.argv[2], i)
    json.dump(c["input"], open(d + ".in", "w", encoding="utf-8"), ensure_ascii=False)
    open(d + ".model", "w").write(c["model"])
    if c["error"] is None:
        open(d + ".exp", "wb").write(c["expected"].encode("utf-8"))
    else:
        open(d + ".err", "w", encoding="utf-8").write(c["error"])
    n += 1
print(n, "cases")
PYEOF
n=0; n_ok=0
for in in "$tmp"/*.in; do
  b=${in%.in}; model=$(cat "$b.model"); n=$((n + 1))
  "$SITS" --model "$C/$model" --render-chat "$in" > "$b.out" 2> "$b.stderr"; rc=$?
  if [ -f "$b.exp" ]; then
    if [ $rc -eq 0 ] && cmp -s "$b.out" "$b.exp"; then n_ok=$((n_ok + 1)); else
      echo "  $(basename "$b") ($model): rc $rc, $(cmp "$b.out" "$b.exp" 2>&1 | head -1)"; head -3 "$b.stderr"; fi
  else
    perr=$(cat "$b.err")
    case "$perr" in
      TemplateError:*) msg=${perr#TemplateError: }
        if [ $rc -ne 0 ] && grep -qF -- "$msg" "$b.stderr"; then n_ok=$((n_ok + 1)); else
          echo "  $(basename "$b") ($model): transformers raised '$msg', rc $rc: $(head -1 "$b.stderr")"; fi ;;
      *) if [ $rc -ne 0 ] && [ ! -s "$b.out" ]; then n_ok=$((n_ok + 1)); else
           echo "  $(basename "$b") ($model): transformers raised, rc $rc"; fi ;;
    esac
  fi
done
[ $n -ge 70 ] && [ $n_ok -eq $n ] && ok "--render-chat: $n_ok of $n cases as transformers" || bad "--render-chat: $n_ok of $n cases"

# Llama 3.2's template writes today's date (strftime_now) into the system header
printf '{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true}' > "$tmp/d.json"
"$SITS" --model "$C/llama32_jinja_file" --render-chat "$tmp/d.json" > "$tmp/d.out" 2>&1
grep -q "Today Date: $(date '+%d %b %Y')" "$tmp/d.out" && ok "strftime_now writes today's date" ||
  { bad "strftime_now"; head -5 "$tmp/d.out"; }

# bad input: not JSON, no messages, an unknown --chat-template, a template the interpreter refuses
echo '{"messages": [' > "$tmp/bad.json"
"$SITS" --model "$C/qwen25" --render-chat "$tmp/bad.json" > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "bad.json" "$tmp/e" && ok "malformed input file refused" || bad "malformed input (rc $rc)"
echo '{"prompt": "x"}' > "$tmp/bad.json"
"$SITS" --model "$C/qwen25" --render-chat "$tmp/bad.json" > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "messages" "$tmp/e" && ok "input without messages refused" || bad "no messages (rc $rc)"
"$SITS" --model "$C/qwen25" --chat-template vicuna --render-chat "$tmp/d.json" > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -ne 0 ] && grep -q "vicuna" "$tmp/e" && ok "unknown --chat-template name refused" || bad "unknown template name (rc $rc)"
printf 'first line\n{{ messages | wordwrap(20) }}\n' > "$tmp/t.jinja"
"$SITS" --model "$C/qwen25" --chat-template "$tmp/t.jinja" --render-chat "$tmp/d.json" > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -ne 0 ] && grep -q "line 2" "$tmp/e" && grep -q "wordwrap" "$tmp/e" && ok "unsupported construct refused with its line" ||
  { bad "unsupported construct (rc $rc)"; cat "$tmp/e"; }

# --- the served chat endpoint renders with the same templates ---------------------------------------
serve_setup "$tmp/m"
cp "$C/qwen25/tokenizer_config.json" "$tmp/m/"    # Qwen2.5's real template over the fixture vocabulary
serve_start "$tmp/m" || finish
post() { curl -s -o "$tmp/body" -w '%{http_code}' "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "$1"; }
code=$(post '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure, "}],
  "add_generation_prompt": false, "continue_final_message": true, "max_tokens": 2, "temperature": 0}')
[ "$code" = 200 ] && ok "continue_final_message (assistant prefill)" || { bad "continue_final_message: $code"; cat "$tmp/body"; }
code=$(post '{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true, "continue_final_message": true}')
[ "$code" = 400 ] && grep -q "not compatible" "$tmp/body" && ok "continue + generation prompt: 400" || bad "both flags: $code"
code=$(post '{"messages": [{"role": "user", "content": "weather?"}], "tools": [{"type": "function", "function":
  {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}], "tool_choice": "none", "max_tokens": 2}')
[ "$code" = 200 ] && ok "tools with tool_choice none are rendered" || { bad "tools none: $code"; cat "$tmp/body"; }
code=$(post '{"messages": [{"role": "user", "content": "weather?"}], "tools": [{"type": "function", "function":
  {"name": "get_weather"}}], "max_tokens": 2}')
[ "$code" = 200 ] && grep -q '"finish_reason":"length"' "$tmp/body" && ok "tools with tool_choice auto (the default) are served" || { bad "tools auto: $code"; cat "$tmp/body"; }
code=$(post '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null, "tool_calls":
  [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
  {"role": "tool", "tool_call_id": "c1", "content": "42"}], "max_tokens": 2}')
[ "$code" = 200 ] && ok "assistant tool_calls and tool results in the history" || { bad "tool history: $code"; cat "$tmp/body"; }
code=$(post '{"messages": [{"role": "assistant", "content": null, "tool_calls":
  [{"type": "function", "function": {"name": "f", "arguments": "{not json"}}]}], "max_tokens": 2}')
[ "$code" = 400 ] && grep -q "arguments" "$tmp/body" && ok "tool_calls arguments that are not JSON: 400" || bad "bad arguments: $code"
code=$(post '{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": [1]}')
[ "$code" = 400 ] && grep -q "chat_template_kwargs" "$tmp/body" && ok "chat_template_kwargs not an object: 400" || bad "kwargs: $code"
kill $srv; wait $srv 2>/dev/null

# a template that raises: Gemma 2 refuses a system role, the client gets its message as a 400
cp "$C/gemma2/tokenizer_config.json" "$tmp/m/"
serve_start "$tmp/m" || finish
code=$(post '{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}], "max_tokens": 2}')
[ "$code" = 400 ] && grep -q "System role not supported" "$tmp/body" && ok "raise_exception -> 400 with the template's message" ||
  { bad "raise: $code"; cat "$tmp/body"; }
code=$(post '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}')
[ "$code" = 200 ] && ok "gemma2 template serves" || { bad "gemma2: $code"; cat "$tmp/body"; }
kill $srv; wait $srv 2>/dev/null
finish
