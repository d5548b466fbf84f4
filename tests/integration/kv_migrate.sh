#!/bin/bash
# KV moves between groups of ranks under mpirun on the CPU (issue 8, item 4): a burst of greedy
# requests gets exactly the texts of a plain one-rank server when
#   - --dp 2 replicas migrate running sequences with their KV every few steps (--kv-migrate-every),
#     also with --tp 2 replicas (4 ranks, heads split) and with an int8 or fp8 KV cache;
#   - --kv-migrate-threshold 0.5 on a small cache: a replica that passes it hands a sequence over;
#   - every few moves are corrupted on purpose (--kv-migrate-corrupt-every): the destination rejects
#     them by checksum and the sequences recompute there (counted as failed moves);
#   - --disaggregate P:D prefills on P ranks and decodes on D ranks for 1:1, 2:2, 1:2 and 2:1 (KV
#     heads resharded between TP sizes); every request moves exactly once.
# The moves are asserted from /metrics (sits_kv_migrations_total and friends).
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null && command -v "${PYTHON:-python3}" >/dev/null || { echo "SKIP: needs curl and python3"; exit 77; }
tmp=$(mktemp -d); trap 'pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
N=12

# start NP FLAGS...: a server of NP ranks on a free port (sets srv and url); stop: SIGTERM to the
# front-end (it stops every rank), 0 when the job ended cleanly within 30 s
start() { local np=$1; shift; serve_np "$np" "$tmp/m" --load-format dummy --step-timeout 30 "$@"; }
stop() { stop_np "$tmp/m"; }
# N concurrent greedy requests of different prompts and lengths (several KV blocks each); prints
# their texts as one JSON list
burst() { "${PYTHON:-python3}" - "$url" "$N" <<'PYEOF'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
def go(i):
    b = {"model": "m", "prompt": ("story %d about the sea " % i) * (1 + i % 4), "max_tokens": 20 + 3 * (i % 5),
         "temperature": 0, "ignore_eos": True}
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps(b).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["choices"][0]["text"]
with ThreadPoolExecutor(6) as ex:
    print(json.dumps(list(ex.map(go, range(int(sys.argv[2]))))))
PYEOF
}
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

# run NAME NP REF FLAGS...: serve with FLAGS, compare the burst with REF; sets moves, seqs, failed
run() {
  local name=$1 np=$2 ref=$3; shift 3
  moves=; seqs=; failed=
  start "$np" "$@" || return 1
  local got; got=$(burst)
  moves=$(metric sits_kv_migrations_total); seqs=$(metric sits_kv_migrated_sequences_total)
  failed=$(metric sits_kv_migrations_failed_total); local bytes; bytes=$(metric sits_kv_migrated_bytes_total)
  stop || bad "$name: the job did not stop cleanly"
  if [ -n "$got" ] && [ "$got" = "$ref" ]; then ok "$name: $N greedy texts == plain server ($moves moves, $seqs sequences, $bytes bytes, $failed failed)"
  else bad "$name: texts differ: $(echo "$got" | cut -c1-200) vs $(echo "$ref" | cut -c1-200)"; tail -5 "$tmp/err"; return 1; fi
}

start 1 || finish
ref=$(burst); stop || bad "plain server did not stop"
[ -n "$ref" ] && [ "$ref" != "[]" ] || { bad "no reference texts"; finish; }

# data-parallel migration, forced every 2 and 3 steps
if run "--dp 2, a move every 3 steps" 2 "$ref" --dp 2 --kv-migrate-every 3; then
  [ "${moves:-0}" -gt 0 ] && [ "${failed:-1}" -eq 0 ] && ok "--dp 2: $moves migrations, none failed" || bad "--dp 2: moves '$moves' failed '$failed'"
fi
if run "--dp 2 --tp 2 (4 ranks), a move every 2 steps" 4 "$ref" --dp 2 --tp 2 --kv-migrate-every 2; then
  [ "${moves:-0}" -gt 0 ] && [ "${failed:-1}" -eq 0 ] && ok "--dp 2 --tp 2: $moves migrations" || bad "--dp 2 --tp 2: moves '$moves' failed '$failed'"
fi
# threshold: 20 blocks a replica, --kv-migrate-threshold 0.5; two long generations (A, B: one per
# replica) and a long prompt C: the replica holding C passes 10 blocks and hands the other short
# sequence to the second replica (whichever C landed on, the other one fits there). C is sent only
# once A and B are both counted as running: the router gives a request to the replica with the fewest,
# so A and B are then on different replicas whatever the machine's load (sent together, C could come
# first and A and B share a replica, where C would not fit). The slower model (8 layers) keeps A and B
# running for seconds: with the tiny one their 250 tokens took 50 ms, and C often came after them.
serve_setup_slow "$tmp/slow/m"   # served as "m", as the requests name it
KV_T=2560K   # 20 blocks of 16 tokens of the slower model
imbalance() { "${PYTHON:-python3}" - "$url" <<'PYEOF'
import json, sys, threading, time, urllib.request
def running():
    for line in urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=30).read().decode().splitlines():
        if line.startswith("sits_num_requests_running "): return float(line.split()[1])
    return 0
def go(i, prompt, n, out):
    b = {"model": "m", "prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True}
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps(b).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    out[i] = json.load(r)["choices"][0]["text"]
out = [None] * 3
ts = [threading.Thread(target=go, args=(0, "A short one", 250, out)), threading.Thread(target=go, args=(1, "B short two", 250, out)),
      threading.Thread(target=go, args=(2, "the sea and the sky " * 25, 40, out))]
ts[0].start(); ts[1].start()
t0 = time.time()
while running() < 2 and time.time() - t0 < 60: time.sleep(0.01)
ts[2].start()
for t in ts: t.join()
print(json.dumps(out))
PYEOF
}
start_t() { local np=$1; shift; serve_np "$np" "$tmp/slow/m" --load-format dummy --step-timeout 30 "$@"; }
start_t 1 --kv-cache-memory $KV_T && ref_t=$(url=$url imbalance) && stop_np "$tmp/slow/m"
if [ -n "$ref_t" ] && start_t 2 --dp 2 --kv-cache-memory $KV_T --kv-migrate-threshold 0.5; then
  got=$(imbalance); moves=$(metric sits_kv_migrations_total); stop_np "$tmp/slow/m" || bad "threshold run did not stop cleanly"
  [ -n "$got" ] && [ "$got" = "$ref_t" ] && ok "--kv-migrate-threshold 0.5: texts == plain server" || bad "threshold: texts differ"
  [ "${moves:-0}" -ge 1 ] && ok "--kv-migrate-threshold 0.5: $moves migration(s) when one replica passed it" || bad "threshold: no migration"
fi
# corrupted moves: rejected by checksum, recomputed on the destination, same texts
if run "--dp 2, every 2nd move corrupted" 2 "$ref" --dp 2 --kv-migrate-every 2 --kv-migrate-corrupt-every 2; then
  [ "${failed:-0}" -gt 0 ] && [ "$failed" -lt "${moves:-0}" ] && grep -q "payload checksum mismatch" "$tmp/err" \
    && ok "corrupt moves rejected ($failed of $moves) and recomputed" || bad "corrupt moves: failed '$failed' of '$moves'"
fi
# int8 KV cache (bit-exact moves of q + scales): against a plain int8 server
if "$SITS" --help | grep -q -- "--kv-cache-dtype"; then
  start 1 --kv-cache-dtype int8 && ref8=$(burst) && stop
  if [ -n "$ref8" ] && run "--dp 2 int8 KV, a move every 2 steps" 2 "$ref8" --dp 2 --kv-cache-dtype int8 --kv-migrate-every 2; then
    [ "${moves:-0}" -gt 0 ] && ok "int8 KV: $moves migrations" || bad "int8 KV: no migration"
  fi
  # [fp8 kv] the same with an FP8 (E4M3) KV cache
  start 1 --kv-cache-dtype fp8 && ref8=$(burst) && stop
  if [ -n "$ref8" ] && run "--dp 2 fp8 KV, a move every 2 steps" 2 "$ref8" --dp 2 --kv-cache-dtype fp8 --kv-migrate-every 2; then
    [ "${moves:-0}" -gt 0 ] && ok "fp8 KV: $moves migrations" || bad "fp8 KV: no migration"
  fi
fi
# prefill -> decode disaggregation, equal and different TP sizes
for pd in 1:1 2:2 1:2 2:1; do
  np=$(( ${pd%:*} + ${pd#*:} ))
  if run "--disaggregate $pd ($np ranks)" "$np" "$ref" --disaggregate "$pd"; then
    [ "${seqs:-0}" -eq "$N" ] && [ "${failed:-1}" -eq 0 ] && ok "--disaggregate $pd: each of the $N requests moved once" \
      || bad "--disaggregate $pd: $seqs sequences moved, $failed failed"
  fi
done
# a prompt one token longer than a step's budget: its first chunk leaves the last prompt token, which the
# prefill ranks must still compute (they took "one token left" for "first token out, waiting to move": hung)
if start 2 --disaggregate 1:1 --max-num-batched-tokens 7 --max-num-seqs 4; then
  got=$(curl -s -m 60 "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model": "m", "prompt": [5, 6, 7, 8, 9, 10, 11, 12], "max_tokens": 4, "temperature": 0}' | tr -d ' ')
  echo "$got" | grep -q '"finish_reason":"length"' && ok "--disaggregate 1:1: a prompt ending one token past a chunk" \
    || bad "--disaggregate 1:1, prompt one past a chunk: $(echo "$got" | cut -c1-200)"
  stop || bad "chunk-boundary run did not stop cleanly"
fi
grep -q "prefill tp 1 -> decode tp 2" <(start 3 --disaggregate 1:2 && cat "$tmp/err"; stop) && ok "layout line names the two groups" || bad "disaggregated layout line"
# refused layouts
timeout 60 $SITS_MPIRUN -np 3 "$SITS" --model "$tmp/m" --load-format dummy --port 0 --disaggregate 1:1 > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "P + D = 3 ranks" "$tmp/e" && ok "--disaggregate 1:1 on 3 ranks refused" || bad "bad --disaggregate accepted (rc $rc)"
timeout 60 $SITS_MPIRUN -np 2 "$SITS" --model "$tmp/m" --load-format dummy --disaggregate 1:1 --prompt-ids 1,2 > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && ok "--disaggregate refused offline" || bad "--disaggregate offline (rc $rc)"
finish
