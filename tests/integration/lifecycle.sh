#!/bin/bash
# Slurm-style lifecycle of the real server (mpirun -np 2, CPU, random weights, byte-level fixture
# tokenizer), loopback only. Slurm ends (and preempts) a job with SIGTERM to every task; each case
# sends SIGTERM to both ranks with N requests in flight (tests/integration/serve_client.py drain:
# half streamed -- completions and chat, most with include_usage -- half whole responses):
#   1. drain: /health and a new request answer 503 right after the signal; every client receives a
#      complete response (whole JSON with finish_reason "length" and all its tokens; streams with the
#      final chunk, usage when asked and [DONE]); the job exits 0 within --shutdown-timeout.
#      Requests in flight at the signal == complete responses received.
#   2. --shutdown-timeout expiry (2 s, requests that need much longer): every client still receives a
#      complete response, ending with finish_reason "abort" (never a cut stream); exit 0 in time.
#   3. a second SIGTERM during the drain: immediate stop, the job ends within STOP_S.
#   4. n > 1 (issue 21): cases 1 and 2 with requests of n = 2 / 3 choices (--max-num-seqs holds every
#      choice, so all are running at the signal): every choice of every response ends ("length" with
#      all its tokens, or "abort"), whole bodies carry all choices, streams a finish chunk for each.
# The counts are printed as "lifecycle: ..." lines (recorded in tests/RELIABILITY.md).
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
CL="$top_srcdir/tests/integration/serve_client.py"
N=${LIFECYCLE_N:-8}
STOP_S=${STOP_S:-10}
serve_tmp
serve_setup_slow "$tmp/m"   # requests of a few hundred tokens still run when the signal comes
FLAGS="--block-size 16 --kv-cache-memory 80M --seed 1"
# wait_exit SECONDS: waits for the job $srv; sets rc (999: still running, then killed) and dt
wait_exit() {
  local t0; t0=$(date +%s.%N)
  for _ in $(seq $(($1 * 10))); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if kill -0 $srv 2>/dev/null; then rc=999; kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; wait $srv 2>/dev/null
  else wait $srv; rc=$?; fi
  srv=
}
# drain_case NAME MAX_TOKENS SIGNALS EXPECT_FINISH [server flags...]; CHOICES: n of each request (1),
# SEQS: --max-num-seqs (N)
drain_case() {
  local name=$1 mt=$2 sigs=$3 fin=$4; shift 4
  serve_start "$tmp/m" $FLAGS --max-num-seqs "${SEQS:-$N}" "$@" || return
  local p0 p1 r
  p0=$(rank_pid 0 "$tmp/m"); p1=$(rank_pid 1 "$tmp/m")
  if r=$("$PY" "$CL" drain --port "$port" --pids "$p0,$p1" --n "$N" --max-tokens "$mt" --signals "$sigs" \
           --expect-finish "$fin" --join-timeout 100 --choices "${CHOICES:-1}"); then ok "$name: $r"
  else bad "$name: $r"; tail -5 "$tmp/err"; fi
  echo "lifecycle: $name: $r"
}

# 1. drain: every request runs to its end (64 tokens each: seconds on this model, well inside 60 s)
drain_case "drain" 64 1 length --shutdown-timeout 60
wait_exit 70
[ "$rc" = 0 ] && ok "drain: exit 0, ${dt}s after the responses" || { bad "drain: exit $rc after ${dt}s"; tail -5 "$tmp/err"; }
grep -q "stopping with .* responses not completely sent" "$tmp/err" && bad "drain: the server says responses were not sent"

# 2. shutdown timeout: 2 s, requests of 1000 tokens (far longer): every client gets "abort", whole
drain_case "shutdown-timeout" 1000 1 abort --shutdown-timeout 2
wait_exit 20
[ "$rc" = 0 ] && ok "shutdown-timeout: exit 0, ${dt}s after the responses" || { bad "shutdown-timeout: exit $rc after ${dt}s"; tail -5 "$tmp/err"; }

# 3. second signal: immediate stop (responses are not required; the bounded exit is)
t0=$(date +%s.%N)
drain_case "second-signal" 1000 2 any --shutdown-timeout 60
wait_exit "$STOP_S"
total=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[ "$rc" != 999 ] && ok "second signal: job ended ($rc), ${dt}s after the clients returned" \
  || bad "second signal: job still running ${STOP_S}s after the clients returned"

# 4. n > 1: the drain and the shutdown timeout end every choice of every request
CHOICES=2 SEQS=$((2 * N)) drain_case "drain n=2" 64 1 length --shutdown-timeout 60
wait_exit 70
[ "$rc" = 0 ] && ok "drain n=2: exit 0, ${dt}s after the responses" || { bad "drain n=2: exit $rc after ${dt}s"; tail -5 "$tmp/err"; }
CHOICES=3 SEQS=$((3 * N)) drain_case "shutdown-timeout n=3" 1000 1 abort --shutdown-timeout 2
wait_exit 20
[ "$rc" = 0 ] && ok "shutdown-timeout n=3: exit 0, ${dt}s after the responses" \
  || { bad "shutdown-timeout n=3: exit $rc after ${dt}s"; tail -5 "$tmp/err"; }
finish
