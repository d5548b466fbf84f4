#!/bin/bash
# [reasoning] --reasoning-parser openai_gptoss (gpt-oss's harmony format) through the real server (mpirun -np 1,
# CPU, random weights, the byte-level fixture tokenizer) on gpt-oss's own chat template and the official openai
# client. A guided choice (structured_outputs {"choice": [...]}) forces the model's exact text; the grammar
# cannot emit special tokens, so the markup (<|channel|> ...) comes spelled in ordinary byte tokens here --
# the parser reads text, and the detokenizer's keep list that turns gpt-oss's markup tokens into that text is
# covered by tests/server/test_harmony. Checks (harmony_check.py):
#   auto picks openai_gptoss from the template (logged); analysis -> reasoning_content, final -> content, whole
#     and streamed (several reasoning chunks, no markup in any delta, logprobs spell the output); a call
#     (commentary to=functions.get_weather) with tools -> tool_calls, content null, finish tool_calls, whole
#     and streamed; a preamble -> content; the template's call form (recipient before the channel); a call
#     without tools -> nothing; cut at max_tokens -> reasoning only, finish length; tool_choice required
#     refused; /v1/completions untouched;
#   without a reasoning parser: the markup is content as before, a request with tools is refused naming
#     --reasoning-parser openai_gptoss.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import openai' 2>/dev/null || { echo "SKIP: python openai is needed"; exit 77; }
serve_tmp
serve_setup_slow "$tmp/m"
T=$top_srcdir/tests/fixtures/templates/openai-gpt-oss-120b.jinja
CHECK=$top_srcdir/tests/integration/harmony_check.py

if SITS_LOG_LEVEL=info serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T" --reasoning-parser auto; then
  grep -q "reasoning: the chat template's parser is openai_gptoss" "$tmp/err" && ok "auto: openai_gptoss from gpt-oss's template (logged)" ||
    bad "auto did not log openai_gptoss: $(grep -i reasoning "$tmp/err")"
  "$PY" "$CHECK" "$url" with && ok "openai_gptoss: reasoning, content, tool calls, whole and streamed" || bad "openai_gptoss"
  stop_np "$tmp/m" || bad "openai_gptoss server did not stop cleanly"
fi

if serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T"; then
  "$PY" "$CHECK" "$url" without && ok "no reasoning parser: markup as content, tools refused naming openai_gptoss" || bad "without"
  stop_np "$tmp/m" || bad "server without parser did not stop cleanly"
fi
finish
