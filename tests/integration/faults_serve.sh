#!/bin/bash
# Server faults (mpirun -np 2, CPU, random weights, byte-level fixture tokenizer). For each fault: the
# job ends (or the server recovers) within a stated bound, the log says what happened, and no client
# gets corrupted output (tests/soak/sse_check.py: a cut stream is a prefix of the greedy reference
# text, with valid SSE framing and JSON; a stream never claims a normal finish it did not reach).
#   1. kill -9 of rank 1 (a follower) mid-stream     -> job exits non-zero within JOB_END_S
#   2. kill -9 of rank 0 (the leader) mid-stream     -> client connection closes, job (rank 1 too) ends
#   3. SIGSTOP of rank 1 mid-stream, --step-timeout 3 -> the deadline fires, job ends
#   4. unreadable model shard (a directory in place of model.safetensors; a dangling symlink)
#                                                     -> start-up fails on every rank with the path named
#   5. 50 clients that disconnect at random points (streaming and not, 5 at a time) -> the server stays
#      healthy, every KV block comes back (/metrics), the next request gives the reference output
#   (KV offload tier full disk: tests/integration/kv_offload.sh, which has the swap load it needs.)
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
CHECK="$top_srcdir/tests/soak/sse_check.py"
JOB_END_S=${JOB_END_S:-20}
tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
serve_setup_slow "$tmp/m"   # big enough to stream for ~10 s or more on a loaded 2-core machine
FLAGS="--max-num-seqs 8 --block-size 4 --kv-cache-memory 4M --seed 1"
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
LONG='{"model":"m","prompt":"Hello there","max_tokens":400,"temperature":0,"ignore_eos":true'
SHORT='{"model":"m","prompt":"The quick brown fox","max_tokens":12,"temperature":0,"ignore_eos":true}'
post() { curl -s "$url/v1/completions" -H 'Content-Type: application/json' "$@"; }
text_of() { "$PY" -c 'import json,sys; sys.stdout.write(json.load(sys.stdin)["choices"][0]["text"])'; }
# wait_job SECONDS: waits for the mpirun job $srv; sets dt and rc (rc 999: still running)
# (dt counts from $tf, the moment of the fault, when set; else from the call)
wait_job() {
  local t0=${tf:-$(date +%s.%N)}
  for _ in $(seq $(($1 * 10))); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  if kill -0 $srv 2>/dev/null; then rc=999; kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; wait $srv 2>/dev/null
  else wait $srv; rc=$?; fi
  srv=
}
# stream_then FAULT: starts the long stream, waits for 10 chunks, applies FAULT (a command), returns
# after the stream's curl ended (bounded); sets crc (curl status)
stream_then() {
  curl -sN -m 120 "$url/v1/completions" -H 'Content-Type: application/json' -d "$LONG"',"stream":true}' > "$tmp/sse" 2>/dev/null &
  local c=$!
  for _ in $(seq 300); do [ "$(grep -c '^data: ' "$tmp/sse")" -ge 10 ] && break; sleep 0.1; done
  tf=$(date +%s.%N)
  "$@"
  for _ in $(seq $((JOB_END_S * 10 + 100))); do kill -0 $c 2>/dev/null || break; sleep 0.1; done
  kill -9 $c 2>/dev/null
  wait $c; crc=$?
  cdt=$(awk -v a="$tf" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
judge_stream() { # name
  local r
  if r=$("$PY" "$CHECK" "$tmp/sse" "$tmp/ref"); then
    case "$r" in complete*) bad "$1: the stream completed, the fault came too late ($r)";;
                 *) ok "$1: client stream ended ${cdt}s after the fault, cleanly: $r, curl rc $crc";; esac
  else bad "$1: corrupted stream: $r"; fi
}

# reference texts (greedy, same server flags), and the start-up time of a fresh server
serve_start "$tmp/m" $FLAGS || finish
post -d "$LONG}" | text_of > "$tmp/ref"
post -d "$SHORT" | text_of > "$tmp/ref_short"
[ "$(wc -c < "$tmp/ref")" -gt 100 ] && ok "reference: $(wc -c < "$tmp/ref") chars of greedy text" || bad "reference text too short"
blocks=$(metric sits_kv_blocks_free)

# 5. random disconnects (first, on this server)
# (max_tokens 900: long enough that no client finishes before its cut; fits the 1024-token KV pool)
"$PY" - "$url" "${LONG/\"max_tokens\":400/\"max_tokens\":900}" <<'PYEOF' > "$tmp/disc" 2>&1
import random, subprocess, sys, time
url, long = sys.argv[1], sys.argv[2]
random.seed(13)
procs, n_cut, n_done = [], 0, 0
for i in range(50):
    stream = i % 2 == 0
    body = long + (',"stream":true}' if stream else '}')
    t = random.uniform(0.05, 1.5)
    procs.append(subprocess.Popen(["curl", "-s", "-o", "/dev/null", "-m", "%.2f" % t, url + "/v1/completions",
                                   "-H", "Content-Type: application/json", "-d", body]))
    if len(procs) == 5:
        for p in procs:
            rc = p.wait()
            n_cut += rc == 28
            n_done += rc == 0
        procs = []
print("clients 50, cut by timeout", n_cut, "completed", n_done)
PYEOF
n_cut=$(awk '{print $6}' "$tmp/disc")
t0=$(date +%s)
for _ in $(seq 300); do [ "$(metric sits_num_requests_running)" = 0 ] && [ "$(metric sits_num_requests_waiting)" = 0 ] && break; sleep 0.1; done
dt=$(( $(date +%s) - t0 ))
free_now=$(metric sits_kv_blocks_free)
if [ "$free_now" = "$blocks" ]; then ok "50 random disconnects ($(cat "$tmp/disc")): all $blocks KV blocks free ${dt}s later"
else bad "after random disconnects: $free_now of $blocks KV blocks free ($(cat "$tmp/disc"))"; fi
[ "${n_cut:-0}" -ge 40 ] || bad "only ${n_cut:-0} of 50 clients were cut mid-request"
curl -sf "$url/health" > /dev/null && ok "healthy after the disconnects" || bad "/health after the disconnects"
[ "$(post -d "$SHORT" | text_of)" = "$(cat "$tmp/ref_short")" ] && ok "next request gives the reference output" \
  || bad "output after the disconnects differs from the reference"

# 1. kill -9 of rank 1 mid-stream (same server)
pid1=$(rank_pid 1 "$tmp/m")
stream_then kill -9 "$pid1"
wait_job "$JOB_END_S"
if [ $rc -ne 999 ] && [ $rc -ne 0 ]; then ok "kill -9 rank 1 mid-stream: job ended ($rc) ${dt}s after the kill"
else bad "kill -9 rank 1: job rc $rc after ${dt}s"; fi
judge_stream "kill -9 rank 1"
grep -qE "rank 1 .*(signal 9|Killed)" "$tmp/err" && ok "kill -9 rank 1 reported: $(grep -E 'rank 1 .*(signal 9|Killed)' "$tmp/err" | head -1 | cut -c1-120)" \
  || { bad "kill -9 rank 1 not reported"; tail -5 "$tmp/err"; }

# 2. kill -9 of rank 0 (the leader) mid-stream
serve_start "$tmp/m" $FLAGS || finish
pid0=$(rank_pid 0 "$tmp/m")
stream_then kill -9 "$pid0"
wait_job "$JOB_END_S"
if [ $rc -ne 999 ] && [ $rc -ne 0 ]; then ok "kill -9 leader mid-stream: job ended ($rc) within ${dt}s"; else bad "kill -9 leader: job rc $rc after ${dt}s"; fi
[ $crc -ne 0 ] && ok "kill -9 leader: client connection closed (curl rc $crc)" || bad "kill -9 leader: curl rc 0"
judge_stream "kill -9 leader"
pgrep -f "$tmp/m" > /dev/null && bad "kill -9 leader: a rank outlived the job" || ok "kill -9 leader: no rank left running"
grep -qE "rank 0 .*(signal 9|Killed)" "$tmp/err" && ok "kill -9 leader reported: $(grep -E 'rank 0 .*(signal 9|Killed)' "$tmp/err" | head -1 | cut -c1-120)" \
  || { bad "kill -9 leader not reported"; tail -5 "$tmp/err"; }

# 3. SIGSTOP of rank 1 mid-stream: the leader's step deadline (3 s) fires
serve_start "$tmp/m" $FLAGS --step-timeout 3 || finish
pid1=$(rank_pid 1 "$tmp/m")
stream_then kill -STOP "$pid1"
wait_job "$JOB_END_S"
kill -9 "$pid1" 2>/dev/null
if [ $rc -ne 999 ] && [ $rc -ne 0 ]; then ok "SIGSTOP rank 1 mid-stream: job ended ($rc) within ${dt}s"; else bad "SIGSTOP rank 1: job rc $rc after ${dt}s"; fi
judge_stream "SIGSTOP rank 1"
grep -q "did not complete within 3.0 s" "$tmp/err" && ok "stall reported by the deadline" || { bad "stall not reported"; tail -5 "$tmp/err"; }

tf=
# 4. unreadable shard: a directory in place of model.safetensors, then a dangling symlink
for kind in directory symlink; do
  d="$tmp/shard_$kind"
  serve_setup "$d" > /dev/null
  if [ $kind = directory ]; then mkdir "$d/model.safetensors"; else ln -s "$tmp/nonexistent.safetensors" "$d/model.safetensors"; fi
  t0=$(date +%s)
  timeout 60 $SITS_MPIRUN -np 2 "$SITS" --model "$d" --load-format safetensors --port $port > "$tmp/o" 2> "$tmp/e"; rc=$?
  dt=$(( $(date +%s) - t0 ))
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $dt -le "$JOB_END_S" ] && grep -q "model.safetensors" "$tmp/e"; then
    ok "unreadable shard ($kind): start-up fails ($rc) in ${dt}s: $(grep -m1 'model.safetensors' "$tmp/e" | cut -c1-140)"
  else bad "unreadable shard ($kind): rc $rc after ${dt}s"; tail -5 "$tmp/e"; fi
done
echo "KV offload tier full disk: see tests/integration/kv_offload.sh"
finish
