#!/bin/bash
# [kv move] KV moves on two GPUs with NCCL (grouped ncclSend/ncclRecv over the job-wide kv
# communicator), the GPU twin of tests/integration/kv_migrate.sh on the trained demo model
# (models/demo, nkv 2): sequential greedy requests (one sequence at a time, so every step has the
# same shapes as on one GPU) give the texts of a one-GPU server when
#   - --dp 2 replicas (one GPU each) migrate the running sequence every 2 steps;
#   - every 3rd move is corrupted on purpose: rejected by checksum, recomputed (same texts);
#   - --disaggregate 1:1 prefills on GPU 0 and decodes on GPU 1;
#   - [memory plan] --kv-move-buffer 1 (raised to one block): every block of a move is a chunk
#     through the staging set aside at start-up.
# Every run: no device allocation after start-up (sits_device_allocations_after_start_total 0 and
# no rank's "after start-up" warning), the memory plan lists the device staging.
# Exit 77 without 2 GPUs.
. "$top_srcdir/tests/integration/lib.sh"
n=$(sits_gpu_count)
[ "${n:-0}" -ge 2 ] || { echo "SKIP: kv_migrate_cuda needs 2 GPUs, ${n:-0} found"; exit 77; }
command -v curl >/dev/null && command -v "${PYTHON:-python3}" >/dev/null || { echo "SKIP: needs curl and python3"; exit 77; }
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
m="$top_srcdir/models/demo"
tmp=$(mktemp -d); trap 'pkill -9 -f "$tmp/x" 2>/dev/null; rm -rf "$tmp"' EXIT

start() {
  local np=$1; shift
  $SITS_MPIRUN -np "$np" "$SITS" --model "$m" --device cuda --port 0 --step-timeout 60 --max-model-len 512 \
    --gpu-memory-utilization 0.3 --log-level info "$@" --trace-file "$tmp/x.trace" > "$tmp/out" 2> "$tmp/err" &
  srv=$!
  for _ in $(seq 600); do
    port=$(sed -n 's|^sits-dist: serving .* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/err" | head -1)
    if [ -n "$port" ]; then url=http://127.0.0.1:$port; curl -sf "$url/health" >/dev/null && return 0; fi
    kill -0 $srv 2>/dev/null || break
    sleep 0.1
  done
  bad "server ($np ranks: $*) did not start"; tail -5 "$tmp/err"; return 1
}
stop() {
  local p; p=$(rank_pid 0 "$tmp/x") && kill -TERM "$p"
  for _ in $(seq 300); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
  if kill -0 $srv 2>/dev/null; then pkill -9 -f "$tmp/x"; wait $srv; srv=; return 1; fi
  wait $srv; local rc=$?; srv=; return $rc
}
texts() { "${PYTHON:-python3}" - "$url" <<'PYEOF'
import json, sys, urllib.request
out = []
for p in ["The", "A list comprehension", "Python is a programming language that", "def fib(n):"]:
    b = {"model": "demo", "prompt": p, "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps(b).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    out.append(json.load(r)["choices"][0]["text"])
print(json.dumps(out))
PYEOF
}
metric() { curl -s "$url/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
run() {
  local name=$1 np=$2; shift 2
  start "$np" "$@" || return 1
  got=$(texts); moves=$(metric sits_kv_migrations_total); failed=$(metric sits_kv_migrations_failed_total)
  blocks=$(metric sits_kv_migrated_blocks_total); chunks=$(metric sits_kv_move_chunks_total)
  local allocs; allocs=$(metric sits_device_allocations_after_start_total)
  stop || bad "$name: the job did not stop cleanly"
  [ "$allocs" = 0 ] && ! grep -q "after start-up (the memory plan missed them)" "$tmp/err" \
    && ok "$name: no device allocation after start-up ($chunks chunks)" \
    || bad "$name: allocations after start-up: leader '$allocs'; $(grep -m2 "memory plan missed" "$tmp/err")"
  grep -q "memory plan:   kv move staging (--kv-move-buffer, device)" "$tmp/err" || bad "$name: no staging in the memory plan"
  [ -n "$got" ] && [ "$got" = "$ref" ] && ok "$name: greedy texts == one GPU ($moves moves, $failed failed)" \
    || { bad "$name: '$got' vs '$ref'"; tail -5 "$tmp/err"; return 1; }
}
start 1 || finish
ref=$(texts); stop
[ -n "$ref" ] || { bad "no reference"; finish; }
run "--dp 2, a move every 2 steps" 2 --dp 2 --kv-migrate-every 2 && { [ "${moves:-0}" -gt 0 ] && [ "${failed:-1}" -eq 0 ] || bad "dp 2: moves '$moves' failed '$failed'"; }
run "--dp 2, every 3rd move corrupted" 2 --dp 2 --kv-migrate-every 2 --kv-migrate-corrupt-every 3 && { [ "${failed:-0}" -gt 0 ] || bad "corrupt: no failed move"; }
run "--disaggregate 1:1" 2 --disaggregate 1:1 && { [ "${moves:-0}" -ge 4 ] && [ "${failed:-1}" -eq 0 ] || bad "disaggregate: moves '$moves'"; }
run "--dp 2, --kv-move-buffer 1 (a block a chunk)" 2 --dp 2 --kv-migrate-every 2 --kv-move-buffer 1 && \
  { [ "${moves:-0}" -gt 0 ] && [ "$chunks" = "$blocks" ] && [ "$chunks" -gt "$moves" ] \
    && ok "--kv-move-buffer 1: $moves moves of $blocks blocks in $chunks chunks" || bad "--kv-move-buffer 1: $chunks chunks, $blocks blocks, $moves moves"; }
grep -h "kv move" "$tmp/err" | tail -2
finish
