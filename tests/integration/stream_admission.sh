#!/bin/bash
# Admissions while every connection streams (issue 22's scheduler at scale, found there): the real server
# (one rank, CPU, random weights) gets 256 streamed completions of 300 tokens at once. All 256 must be in
# flight before the first stream ends, /metrics must answer within 10 s throughout, and every stream must
# end with 300 tokens and [DONE]. Before the fix the pump (the thread that moves tokens to the
# connections) held its list's lock through every pass that delivered something -- with tokens at every
# step, always -- so the HTTP threads waiting to add a request (or to finish one) were shut out: on an
# H200 requests reached the scheduler at ~85 a second and the batch averaged 86 of 1024; here /metrics took
# 28 s and the first requests ended before a third of the rest were admitted.
# tests/integration/serve_client.py streams does the client side (python3 asyncio).
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
N=${STREAMS_N:-256}
ulimit -n $((4 * N + 1000)) 2>/dev/null
serve_tmp
serve_setup "$tmp/m"
serve_np 1 "$tmp/m" --load-format dummy --max-num-seqs "$N" --max-num-batched-tokens 8192 --max-waiting $((2 * N)) \
  --max-connections-per-client $((2 * N)) --step-timeout 60 || finish
if r=$("$PY" "$top_srcdir/tests/integration/serve_client.py" streams --port "$port" --n "$N" --max-tokens 300 --max-metrics-s 10)
then ok "streams: $r"; else bad "streams: $r"; tail -5 "$tmp/err"; fi
stop_np "$tmp/m" && ok "SIGTERM afterwards: exit 0" || bad "SIGTERM afterwards: not a clean exit"
finish
