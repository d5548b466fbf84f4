#!/bin/bash
# KV moves allocate nothing after start-up (issue 20, memory plan), on the CPU under mpirun: every
# rank sets its move staging aside at start-up (--kv-move-buffer, counted in the memory plan) and a
# move larger than it goes through it in chunks. For --dp 2 (a forced move every 2 steps) and
# --disaggregate 1:1 and 1:2 (every request moves prefill -> decode), a burst of greedy requests of
# several KV blocks each (8 KiB a block on this model and rank layout) is served
#   - with the default staging (64M: one chunk a move) and with --kv-move-buffer 20K (two blocks
#     a chunk: the moves take more chunks than there are moves), and with 1 (raised to one block:
#     every block a chunk, exactly sits_kv_migrated_blocks_total chunks);
#   - the texts equal those of a one-rank server that moves nothing;
#   - /metrics: moves happened, none failed, sits_device_allocations_after_start_total 0 (the
#     leader's backend, which on the CPU counts its allocations), and no rank logs allocations after
#     start-up when it stops (the followers' count);
#   - the memory plan's start-up lines name the staging, and the refused configuration's message
#     counts it.
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null && command -v "${PYTHON:-python3}" >/dev/null || { echo "SKIP: needs curl and python3"; exit 77; }
tmp=$(mktemp -d); trap 'pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
N=10

# start NP FLAGS...: a server of NP ranks on a free port (sets srv and url); stop: SIGTERM, clean exit
start() { local np=$1; shift; serve_np "$np" "$tmp/m" --load-format dummy --step-timeout 30 --log-level info "$@"; }
stop() { stop_np "$tmp/m"; }
# N concurrent greedy requests, prompts of 2 to 5 blocks, 30 to 42 new tokens; their texts as one JSON list
burst() { "${PYTHON:-python3}" - "$url" "$N" <<'PYEOF'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
def go(i):
    b = {"model": "m", "prompt": ("tale %d of the long river " % i) * (2 + i % 4), "max_tokens": 30 + 4 * (i % 4),
         "temperature": 0, "ignore_eos": True}
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps(b).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["choices"][0]["text"]
with ThreadPoolExecutor(5) as ex:
    print(json.dumps(list(ex.map(go, range(int(sys.argv[2]))))))
PYEOF
}
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

# run NAME NP FLAGS...: serve, compare the burst with the reference, check the counters; sets moves,
# blocks, chunks
run() {
  local name=$1 np=$2; shift 2
  moves=; blocks=; chunks=
  start "$np" "$@" || return 1
  local got; got=$(burst)
  moves=$(metric sits_kv_migrations_total); blocks=$(metric sits_kv_migrated_blocks_total)
  chunks=$(metric sits_kv_move_chunks_total); local failed allocs abytes
  failed=$(metric sits_kv_migrations_failed_total); allocs=$(metric sits_device_allocations_after_start_total)
  abytes=$(metric sits_device_allocated_bytes_after_start_total)
  stop || bad "$name: the job did not stop cleanly"
  if [ -n "$got" ] && [ "$got" = "$ref" ]; then ok "$name: $N greedy texts == one-rank server"
  else bad "$name: texts differ: $(echo "$got" | cut -c1-160) vs $(echo "$ref" | cut -c1-160)"; tail -5 "$tmp/err"; fi
  [ "${moves:-0}" -gt 0 ] && [ "${failed:-1}" = 0 ] && ok "$name: $moves moves of $blocks blocks in $chunks chunks, none failed" \
    || bad "$name: moves '$moves', failed '$failed'"
  [ "$allocs" = 0 ] && [ "$abytes" = 0 ] && ok "$name: sits_device_allocations_after_start_total 0" \
    || bad "$name: $allocs allocations ($abytes bytes) after start-up on the leader"
  if grep -q "after start-up (the memory plan missed them)" "$tmp/err"; then
    bad "$name: a rank allocated after start-up: $(grep -m2 "after start-up (the memory plan missed them)" "$tmp/err")"
  else ok "$name: no rank allocated after start-up"; fi
  grep -q "memory plan:   kv move staging (--kv-move-buffer, 2 buffers)" "$tmp/err" && ok "$name: the memory plan lists the staging" \
    || bad "$name: no staging line in the memory plan"
}

start 1 || finish
ref=$(burst); stop || bad "one-rank server did not stop"
[ -n "$ref" ] && [ "$ref" != "[]" ] || { bad "no reference texts"; finish; }
grep -q "kv move staging" "$tmp/err" && bad "a one-rank server sets a move staging aside" || ok "one rank: no move staging"

# layout NAME NP FLAGS...: the default staging, then two blocks a chunk
layout() {
  local name=$1 np=$2; shift 2
  # default staging: a move fits in one chunk
  run "$name" "$np" "$@"
  [ -n "$chunks" ] && [ "$chunks" = "$moves" ] && ok "$name: one chunk a move with the default staging" \
    || bad "$name: $chunks chunks for $moves moves with the default staging"
  # two blocks a chunk: every move of more than two blocks takes several
  run "$name, --kv-move-buffer 20K" "$np" "$@" --kv-move-buffer 20K
  [ -n "$chunks" ] && [ "$chunks" -gt "${moves:-0}" ] && [ "$chunks" -ge $(( (blocks + 1) / 2 )) ] \
    && ok "$name, 20K: moves larger than the staging went in chunks ($chunks chunks, $moves moves, $blocks blocks)" \
    || bad "$name, 20K: $chunks chunks for $moves moves of $blocks blocks"
}
layout "--dp 2" 2 --dp 2 --kv-migrate-every 2
layout "--disaggregate 1:1" 2 --disaggregate 1:1
layout "--disaggregate 1:2" 3 --disaggregate 1:2
# a staging below one block is raised to one (with a warning): then every block is a chunk
run "--disaggregate 1:1, --kv-move-buffer 1" 2 --disaggregate 1:1 --kv-move-buffer 1
[ -n "$chunks" ] && [ "$chunks" = "$blocks" ] && ok "--kv-move-buffer 1: one block a chunk ($chunks chunks, $blocks blocks)" \
  || bad "--kv-move-buffer 1: $chunks chunks for $blocks blocks"
grep -q "kv-move-buffer 1 bytes holds no KV block of a move" "$tmp/err" && ok "--kv-move-buffer 1: raised, with a warning" \
  || bad "--kv-move-buffer 1: no warning"
# the refusal counts the staging: a KV cache that fits the host alone but not with 3 x 40% of it beside
kib=$(awk '/MemAvailable/ { print $2; exit }' /proc/meminfo)
if [ -n "$kib" ]; then
  big=$(( kib * 1024 * 2 / 5 ))
  timeout 120 $SITS_MPIRUN -np 2 "$SITS" --model "$tmp/m" --load-format dummy --port 0 --dp 2 --kv-move-buffer "$big" \
    > /dev/null 2> "$tmp/e"; rc=$?
  [ $rc -eq 2 ] && grep -q "memory plan: the configuration does not fit" "$tmp/e" \
    && ok "a staging of 2 x 40% of the available memory per rank is refused by the memory plan" \
    || { bad "an oversized staging was not refused (rc $rc)"; tail -3 "$tmp/e"; }
fi
finish
