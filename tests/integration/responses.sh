#!/bin/bash
# [responses] POST /v1/responses (OpenAI's Responses API, as vLLM serves it) through the real server (mpirun -np 1, CPU,
# random weights, the byte-level fixture tokenizer) and the official openai client (responses_check.py). The oracle
# is the chat endpoint: the same conversation through /v1/chat/completions at temperature 0 gives the same text,
# reasoning, tool calls, finish and token counts as /v1/responses whole, streamed (create(stream=True): event order,
# sequence numbers, deltas joined per item == the final response's items) and through the stream helper; a guided
# choice (vLLM's structured_outputs, passed to both) forces the model's text where the split must be known:
#   qwen3 + hermes on Qwen3's template: input as a string, text parts, developer / assistant messages, instructions
#     (a system message first); a reasoning item then the message; cut at max_output_tokens -> status incomplete,
#     incomplete_details max_output_tokens; reasoning.effort (none renders the closed thinking); tool calls forced
#     (named, required, parallel_tool_calls false) and auto after reasoning; a history of reasoning /
#     function_call / function_call_output items == the chat messages vLLM joins them into; text.format
#     json_schema (parses, validates) / json_object; the request echoed; the wire (event: lines, no [DONE]);
#     every refusal's status and error.param; /v1/responses/{id} get / cancel / delete 404 (nothing is stored);
#     /metrics and the trace file count it as a chat request; a client leaving mid-stream cancels it (abort, blocks
#     back); where the OpenAI Agents SDK is installed, an agent's forced call (whole and streamed runs) carries the
#     chat endpoint's arguments and its tool's result is the final output;
#   openai_gptoss on gpt-oss's template: analysis -> a reasoning item, final -> the message, a call -> a
#     function_call item.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import openai, jsonschema' 2>/dev/null || { echo "SKIP: python openai and jsonschema are needed"; exit 77; }
serve_tmp
# the 8-layer test model (4096 positions: room for the tools prompt; streams token by token)
serve_setup_slow "$tmp/m"
T=$top_srcdir/tests/fixtures/templates
CHECK=$top_srcdir/tests/integration/responses_check.py

if serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T/Qwen-Qwen3-0.6B.jinja" --reasoning-parser qwen3 \
     --tool-call-parser hermes --trace-file "$tmp/trace.jsonl"; then
  "$PY" "$CHECK" "$url" qwen3 "$tmp/trace.jsonl" && ok "qwen3 + hermes: /v1/responses == /v1/chat/completions, whole and streamed" ||
    bad "qwen3 + hermes"
  stop_np "$tmp/m" || bad "qwen3 server did not stop cleanly"
fi

if serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T/openai-gpt-oss-120b.jinja" --reasoning-parser auto; then
  "$PY" "$CHECK" "$url" harmony && ok "openai_gptoss: reasoning, message and function_call items == chat" || bad "openai_gptoss"
  stop_np "$tmp/m" || bad "gpt-oss server did not stop cleanly"
fi
finish
