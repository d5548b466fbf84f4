#!/bin/bash
# [anthropic] POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API, as vLLM serves it) through the
# real server (mpirun -np 1, CPU, random weights, the byte-level fixture tokenizer) and the official anthropic SDK
# (anthropic_check.py). The oracle is the chat endpoint: the same conversation through /v1/chat/completions at
# temperature 0 gives the same text, thinking, tool calls (input == the parsed arguments), stop reasons and token counts
# as /v1/messages whole and through client.messages.stream (event order, block indices, deltas joined == the final
# blocks, the final message == the whole one); a guided choice (vLLM's structured_outputs, passed to both) forces the
# model's text where the split must be known. qwen3 + hermes on Qwen3's template:
#   a string / text-block content, system as a string or text blocks (a system message first), turns; max_tokens ->
#   stop_reason max_tokens; a thinking block then the text, cut inside the thinking; stop_sequences -> stop_reason
#   stop_sequence naming the one matched (and end_turn when none is); thinking disabled / enabled = the template's
#   enable_thinking; tools with tool_choice tool / any / any + disable_parallel_tool_use / none / auto after thinking
#   (stop_reason tool_use); the round trip (the message sent back, tool_result in a user turn) and a history of two
#   calls with text-block and is_error results == the chat messages they mean; count_tokens == the chat prompt's count
#   (its usage and /tokenize); every error's status and Anthropic shape (400 bad fields, missing max_tokens, image /
#   document blocks, server tools; 404 model; 405); the wire (named events, no [DONE]); /metrics and the trace count it
#   as a chat request; a client leaving mid-stream cancels it. With --api-key: x-api-key and Bearer pass, a wrong or
#   missing key is 401 authentication_error.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import anthropic' 2>/dev/null || { echo "SKIP: the python anthropic package is needed (pip install anthropic)"; exit 77; }
serve_tmp
# the 8-layer test model (4096 positions: room for the tools prompt; streams token by token)
serve_setup_slow "$tmp/m"
T=$top_srcdir/tests/fixtures/templates
CHECK=$top_srcdir/tests/integration/anthropic_check.py

if serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T/Qwen-Qwen3-0.6B.jinja" --reasoning-parser qwen3 \
     --tool-call-parser hermes --trace-file "$tmp/trace.jsonl"; then
  "$PY" "$CHECK" "$url" "$tmp/trace.jsonl" && ok "qwen3 + hermes: /v1/messages == /v1/chat/completions, whole and streamed" ||
    bad "qwen3 + hermes"
  stop_np "$tmp/m" || bad "qwen3 server did not stop cleanly"
fi

if serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T/Qwen-Qwen3-0.6B.jinja" --api-key sekret; then
  "$PY" "$CHECK" auth "$url" sekret && ok "--api-key: x-api-key and Bearer accepted, 401 in Anthropic's shape" || bad "--api-key"
  stop_np "$tmp/m" || bad "the --api-key server did not stop cleanly"
fi
finish
