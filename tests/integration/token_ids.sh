#!/bin/bash
# [token ids] vLLM's return_token_ids through the real server (mpirun -np 1, CPU, random weights, the byte-level
# fixture tokenizer, Qwen3's template with the qwen3 reasoning parser and hermes tool calls) and the official openai
# client: prompt_token_ids (chat: at the top; completions: in each choice) equal to HF transformers' tokenizer, the
# output's token_ids decoding (HF) to the forced text, streamed per chunk and joined equal to the whole response
# (token_ids_check.py says what else).
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import openai, requests' 2>/dev/null || { echo "SKIP: python openai and requests are needed"; exit 77; }
"$PY" -c 'import transformers, jinja2' 2>/dev/null || { echo "SKIP: python transformers (and jinja2) are the reference"; exit 77; }
serve_tmp
# the 8-layer test model: the pump meets the tokens as they come, so the stream has many chunks
serve_setup_slow "$tmp/m"
T=$top_srcdir/tests/fixtures/templates/Qwen-Qwen3-0.6B.jinja
if serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T" --reasoning-parser qwen3 --tool-call-parser hermes; then
  "$PY" "$top_srcdir/tests/integration/token_ids_check.py" "$url" "$tmp/m" "$T" &&
    ok "return_token_ids: prompt ids == HF, output ids decode to the text, whole and streamed (chat, tools, completions)" ||
    bad "return_token_ids"
  stop_np "$tmp/m" || bad "server did not stop cleanly"
fi
finish
