#!/bin/bash
# Connections (issue 20): the real server (mpirun -np 2, CPU, random weights) with 5,000 idle TCP
# connections and 100 clients that send a completion's body one byte a second must still answer
# /health and a completion within 1 s each, without resetting the idle connections; connections from
# one address beyond --max-connections-per-client, and any beyond --max-connections, get 503 with
# Retry-After (never a reset); and the slow bodies are cut after --request-read-timeout (8 s here; none
# before the checks at ~4 s).
# Loopback only (sources 127.0.0.x), bounded.
# tests/integration/serve_client.py flood does the client side (python3 asyncio).
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
IDLE=${FLOOD_IDLE:-5000}
SLOW=${FLOOD_SLOW:-100}
need=$((IDLE + SLOW + 700))
ulimit -n $((2 * need + 1000)) 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
[ "$(ulimit -n)" -ge $((need + 200)) ] || { echo "SKIP: open files limit $(ulimit -n) < $((need + 200))"; exit 77; }
CL="$top_srcdir/tests/integration/serve_client.py"
serve_tmp
serve_setup "$tmp/m"
serve_start "$tmp/m" --max-num-seqs 8 --kv-cache-memory 2M --seed 1 --max-connections-per-client 500 \
  --request-read-timeout 8 || finish
if r=$("$PY" "$CL" flood --port "$port" --idle "$IDLE" --slow "$SLOW" --over 50 --slow-cut 15); then ok "flood: $r"
else bad "flood: $r"; tail -5 "$tmp/err"; fi
echo "conn_flood: $r"
# afterwards: healthy, and a clean SIGTERM exit
curl -sf -m 5 "$url/health" > /dev/null && ok "healthy after the flood" || bad "/health after the flood"
for rk in 0 1; do p=$(rank_pid $rk "$tmp/m") && kill -TERM "$p"; done
for _ in $(seq 200); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
if kill -0 $srv 2>/dev/null; then bad "still running 20 s after SIGTERM"; else wait $srv; rc=$?; srv=
  [ $rc = 0 ] && ok "SIGTERM after the flood: exit 0" || bad "SIGTERM after the flood: exit $rc"; fi
# 2. the whole server full: --max-connections 300 held, 20 more ask /health -> 503 + Retry-After each
serve_start "$tmp/m" --max-num-seqs 8 --kv-cache-memory 2M --seed 1 --max-connections 300 --max-connections-per-client 0 || finish
if r=$("$PY" "$CL" full --port "$port" --held 300 --over 20); then ok "full: $r"; else bad "full: $r"; tail -5 "$tmp/err"; fi
kill -TERM $srv; wait $srv; srv=
finish
