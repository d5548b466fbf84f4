#!/bin/bash
# [allowed_token_ids, bad_words] vLLM's two sampling params through the real server (mpirun -np 1, CPU, random weights,
# the byte-level fixture tokenizer) and the official openai client; the bad words' token sequences from HF
# transformers' tokenizer under vLLM's rule (token_limits_check.py says what is checked).
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import openai, requests' 2>/dev/null || { echo "SKIP: python openai and requests are needed"; exit 77; }
"$PY" -c 'import transformers' 2>/dev/null || { echo "SKIP: python transformers is the reference"; exit 77; }
serve_tmp
serve_setup "$tmp/m"
if serve_np 1 "$tmp/m" --load-format dummy; then
  "$PY" "$top_srcdir/tests/integration/token_limits_check.py" "$url" "$tmp/m" &&
    ok "allowed_token_ids and bad_words: outputs within the set / free of HF's sequences, greedy up to the ban; 400s" ||
    bad "allowed_token_ids / bad_words"
  stop_np "$tmp/m" || bad "server did not stop cleanly"
fi
finish
