#!/bin/bash
# KV offload tiers (issue 8 item 2; the full-disk fault of issue 13) on the real server under
# mpirun -np 2 on the CPU, random weights, byte-level fixture tokenizer. One load -- LOAD_N
# concurrent greedy requests of mixed prompt and output lengths -- runs against:
#   reference  --tp 2, plenty of KV, no offload tier (nothing to swap)
#   host       --tp 2, a small KV pool, host tier only                 -> swaps, host bytes only
#   disk       --tp 2, a small KV pool, a tiny host tier + --kv-offload-dir -> swaps reach the disk tier
#   lz4        --tp 2, a small KV pool, host tier, --kv-offload-lz4 on -> swaps
#   pp         --pp 2 (each stage swaps its layers), a small KV pool, host tier -> swaps
#   full disk  --tp 2, a small KV pool, no host tier, --kv-offload-dir on a file-size limit of 1 KiB
#              (the ranks run under `ulimit -f 1`: every write of the disk tier fails with EFBIG)
#              -> every swap falls back to recompute, a warning names the failed write, no crash,
#              no hang, the job exits 0 on SIGTERM
# Every run must give exactly the reference's texts (greedy), and the swaps must really have
# happened (/metrics: swapped out and back in, bytes per tier, failures) -- so a run that never
# swapped, or swapped and restored wrong KV, fails. The host and disk runs must also have restored
# some sequences from prefetched bytes (sits_kv_swap_prefetched_total: the restore's tier reads
# overlapped with earlier steps) -- with the same outputs.
# Knobs (tests/gpu/kv_offload_cuda.sh sets them): KVO_MODEL (a model directory; default: random
# weights, byte-level tokenizer), KVO_FLAGS (more server flags, e.g. --device cuda --load-format
# safetensors), KVO_BLOCK_BYTES (KV bytes of one 4-token block per rank at tp 2 / pp 2; default
# 1024 = the default model's fp32 KV), KVO_SKIP_FULL_DISK=1 (skip the file-size-limit case).
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
LOAD_N=${LOAD_N:-24}
tmp=$(mktemp -d)
srv=
# every run has --trace-file $tmp/trace: the pattern that finds this test's ranks (and only them)
cleanup() { [ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/trace" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
serve_setup "$tmp/m"
MODEL=${KVO_MODEL:-$tmp/m}
BB=${KVO_BLOCK_BYTES:-1024}
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
# default model: fp32 KV, 2 layers, 2 KV heads of 16: a block of 4 tokens is 1 KiB per rank at --tp 2
# (one head each) and at --pp 2 (one layer each)
COMMON="--max-num-seqs 8 --max-num-batched-tokens 64 --block-size 4 --seed 1 --served-model-name m --trace-file $tmp/trace $KVO_FLAGS"
SMALL="--kv-cache-memory $((32 * BB))"   # 32 blocks = 128 tokens a rank; one request needs up to 80

# load OUT: LOAD_N concurrent requests; their texts as JSON lines in OUT
load() {
  "$PY" - "$url" "$1" "$LOAD_N" <<'PYEOF'
import json, sys, threading, urllib.request
url, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
def req(i):
    body = {"model": "m", "prompt": " ".join(words[: 1 + i % 12] * (1 + i % 2)), "max_tokens": 12 + (i * 7) % 29,
            "temperature": 0, "ignore_eos": True}
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                                      {"Content-Type": "application/json"}), timeout=300)
    return json.load(r)["choices"][0]["text"]
res = [None] * n
def run(i):
    try: res[i] = req(i)
    except Exception as e: res[i] = "ERROR %r" % e
th = [threading.Thread(target=run, args=(i,)) for i in range(n)]
[t.start() for t in th]; [t.join() for t in th]
with open(out, "w") as f:
    for r in res: f.write(json.dumps(r) + "\n")
PYEOF
}
# stop: SIGTERM to every rank; the job must exit 0 within 30 s
stop() {
  for r in 0 1; do p=$(rank_pid $r "$tmp/trace") && kill -TERM "$p"; done
  for _ in $(seq 300); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
  if kill -0 $srv 2>/dev/null; then bad "$1: still running 30 s after SIGTERM"; tail -5 "$tmp/err"; kill -9 $srv; wait $srv 2>/dev/null
  else wait $srv; local rc=$?; [ $rc -eq 0 ] && ok "$1: job exits 0 on SIGTERM" || { bad "$1: exit $rc"; tail -5 "$tmp/err"; }; fi
  srv=
}
# same NAME FILE [REF]: FILE's texts equal REF's (default the --tp 2 reference). KVO_MIN_SAME=F (GPU
# runs): at least the fraction F of them equal, the rest only complete -- bf16 GEMMs round
# differently for each batch shape, and swapping changes which sequences share a step, so a near tie
# can flip a later token; on the CPU (fp32, exact per row) every text must be equal.
same() {
  local ref=${3:-$tmp/ref.jsonl}
  if grep -q ERROR "$2"; then bad "$1: a request failed: $(grep -m1 ERROR "$2")"; tail -8 "$tmp/err"
  elif cmp -s "$ref" "$2"; then ok "$1: $LOAD_N outputs equal the reference"
  elif [ -n "${KVO_MIN_SAME:-}" ]; then
    local n_same
    n_same=$(paste -d '\n' "$ref" "$2" | awk 'NR % 2 { a = $0; next } a == $0 { n++ } END { print n + 0 }')
    if awk -v s="$n_same" -v n="$LOAD_N" -v f="$KVO_MIN_SAME" 'BEGIN { exit !(s >= f * n) }'; then
      ok "$1: $n_same of $LOAD_N outputs equal the reference (bf16 batch shapes; at least $KVO_MIN_SAME required)"
    else bad "$1: only $n_same of $LOAD_N outputs equal the reference"; diff "$ref" "$2" | head -6; fi
  else bad "$1: outputs differ from the reference"; diff "$ref" "$2" | head -6; tail -8 "$tmp/err"; fi
}
# swaps NAME: reads the swap counters; sets so si sf pf ob_host ob_disk
swaps() {
  curl -s "$url/metrics" > "$tmp/metrics"
  get() { awk -v m="$1" '$1 == m { print $2 }' "$tmp/metrics"; }
  so=$(get sits_kv_swapped_out_total); si=$(get sits_kv_swapped_in_total); sf=$(get sits_kv_swap_failures_total)
  pf=$(get sits_kv_swap_prefetched_total)
  ob_host=$(get 'sits_kv_swap_out_bytes_total{tier="host"}'); ob_disk=$(get 'sits_kv_swap_out_bytes_total{tier="disk"}')
  ib_host=$(get 'sits_kv_swap_in_bytes_total{tier="host"}'); ib_disk=$(get 'sits_kv_swap_in_bytes_total{tier="disk"}')
  echo "     $1: swapped out $so, in $si ($pf prefetched), failed $sf; bytes out host $ob_host disk $ob_disk, in host $ib_host disk $ib_disk; preemptions $(get sits_preemptions_total)"
}
# idle: every sequence done, nothing left swapped out, every block free
idle_check() {
  for _ in $(seq 50); do [ "$(metric sits_num_requests_running)" = 0 ] && break; sleep 0.1; done
  local sw free total
  sw=$(metric sits_num_requests_swapped); free=$(metric sits_kv_blocks_free); total=$(( free + $(metric sits_kv_blocks_used) ))
  [ "$sw" = 0 ] && [ "$free" = "$total" ] && ok "$1: afterwards nothing swapped out, all $total KV blocks free" \
    || bad "$1: afterwards $sw swapped out, $free of $total blocks free"
}

# reference: plenty of KV, no offload
serve_start "$MODEL" $COMMON --kv-host-bytes 0 || finish
load "$tmp/ref.jsonl"
grep -q ERROR "$tmp/ref.jsonl" && bad "reference: a request failed: $(grep -m1 ERROR "$tmp/ref.jsonl")"
swaps reference
[ "${so:-x}" = 0 ] && [ "$(metric sits_preemptions_total)" = 0 ] && ok "reference: no swap, no preemption" || bad "reference: swapped $so"
stop reference

# host tier only
serve_start "$MODEL" $COMMON $SMALL --kv-host-bytes 1M || finish
load "$tmp/host.jsonl"
same host "$tmp/host.jsonl"
swaps host
[ "${so:-0}" -gt 0 ] && [ "${si:-0}" -gt 0 ] && [ "${ob_host:-0}" -gt 0 ] && [ "${ib_host:-0}" -gt 0 ] && [ "${ob_disk:-1}" = 0 ] && [ "${sf:-1}" = 0 ] \
  && ok "host: $so swapped out, $si back in, $ob_host bytes through the host tier, none failed" || bad "host: swap counters"
[ "$so" = "$si" ] && ok "host: every swapped-out sequence came back" || bad "host: $so out, $si in"
[ "${pf:-0}" -gt 0 ] && [ "$pf" -le "$si" ] && ok "host: $pf of the $si restores were prefetched" || bad "host: prefetched ${pf:-none} of $si"
idle_check host
stop host

# disk tier: a host tier of 2 blocks' bytes
serve_start "$MODEL" $COMMON $SMALL --kv-host-bytes $((2 * BB)) --kv-offload-dir "$tmp/kv" || finish
load "$tmp/disk.jsonl"
same disk "$tmp/disk.jsonl"
swaps disk
[ "${si:-0}" -gt 0 ] && [ "${ob_disk:-0}" -gt 0 ] && [ "${ib_disk:-0}" -gt 0 ] && [ "${sf:-1}" = 0 ] \
  && ok "disk: $so swapped out, $ob_disk bytes to the disk tier and $ib_disk back, none failed" || bad "disk: swap counters"
[ "${pf:-0}" -gt 0 ] && [ "$pf" -le "$si" ] && ok "disk: $pf of the $si restores were prefetched" || bad "disk: prefetched ${pf:-none} of $si"
idle_check disk
[ -z "$(ls -A "$tmp/kv" 2>/dev/null)" ] && ok "disk: no file left in the offload directory" || bad "disk: files left: $(ls "$tmp/kv" | head -3)"
stop disk

# LZ4 on (host tier)
serve_start "$MODEL" $COMMON $SMALL --kv-host-bytes 1M --kv-offload-lz4 on || finish
load "$tmp/lz4.jsonl"
same lz4 "$tmp/lz4.jsonl"
swaps lz4
[ "${si:-0}" -gt 0 ] && [ "${sf:-1}" = 0 ] && ok "lz4: $so swapped out and $si back in through LZ4 frames" || bad "lz4: swap counters"
stop lz4

# pipeline: each stage swaps its own layer (a stage's block holds its layers only: 32 x BB is 32
# blocks here too)
pp_ref=$tmp/ref.jsonl
if [ -n "${KVO_PP_REFERENCE:-}" ]; then
  # bf16 on GPUs: --pp 2 rounds differently from --tp 2, so the pipeline has its own no-swap reference
  serve_start "$MODEL" $COMMON --pp 2 --kv-host-bytes 0 || finish
  load "$tmp/ref_pp.jsonl"
  stop "pp 2 reference"
  pp_ref=$tmp/ref_pp.jsonl
fi
serve_start "$MODEL" $COMMON --pp 2 --kv-cache-memory $((32 * BB)) --kv-host-bytes 1M || finish
load "$tmp/pp.jsonl"
same "pp 2" "$tmp/pp.jsonl" "$pp_ref"
swaps "pp 2"
[ "${si:-0}" -gt 0 ] && [ "${sf:-1}" = 0 ] && ok "pp 2: $so swapped out and $si back in" || bad "pp 2: swap counters"
stop "pp 2"

# restore faults: rank 1's offload files vanish while the load runs (a background loop deletes
# them): a swap-in that misses its file on rank 1 fails there, both ranks agree, the sequence
# recomputes -- the outputs stay the reference's (how many restores the loop hit is timing)
serve_start "$MODEL" $COMMON $SMALL --kv-host-bytes 0 --kv-offload-dir "$tmp/kvdel" || finish
( while :; do rm -f "$tmp"/kvdel/sits-kv-*-r1-*.bin; sleep 0.02; done ) &
del=$!
load "$tmp/del.jsonl"
kill $del; wait $del 2>/dev/null
same "vanishing files" "$tmp/del.jsonl"
swaps "vanishing files"
[ "${so:-0}" -gt 0 ] && ok "vanishing files: $so swapped out, $si restored, $sf failed on some rank and recomputed" || bad "vanishing files: no swap"
idle_check "vanishing files"
[ -z "$(ls -A "$tmp/kvdel" 2>/dev/null)" ] && ok "vanishing files: no file left" || bad "vanishing files: files left: $(ls "$tmp/kvdel" | head -3)"
stop "vanishing files"

# full disk (issue 13): rank 1 may write files of at most 1 KiB (an offload file needs more), rank
# 0 writes freely -- a failure on one rank only; the ranks agree, rank 0 drops its copy, the
# sequence recomputes. SIGXFSZ is ignored from the start (the server ignores it too, once it
# serves) so the write fails with EFBIG.
if [ "${KVO_SKIP_FULL_DISK:-0}" = 1 ]; then echo "skip full disk (KVO_SKIP_FULL_DISK=1)"; finish; fi
cat > "$tmp/fsz.sh" <<EOF
#!/bin/bash
trap '' XFSZ
[ "\$OMPI_COMM_WORLD_RANK" = 1 ] && ulimit -f 1
exec "$SITS" "\$@"
EOF
chmod +x "$tmp/fsz.sh"
SITS_REAL=$SITS
SITS="$tmp/fsz.sh"
serve_start "$MODEL" $COMMON $SMALL --kv-host-bytes 0 --kv-offload-dir "$tmp/kvfull" || finish
SITS=$SITS_REAL
t0=$(date +%s)
load "$tmp/full.jsonl"   # (each request times out after 300 s: a hang fails the comparison)
dt=$(( $(date +%s) - t0 ))
same "full disk" "$tmp/full.jsonl"
swaps "full disk"
[ "${sf:-0}" -gt 0 ] && [ "${so:-1}" = 0 ] && ok "full disk: $sf swap-outs failed and recomputed instead (load done in ${dt}s)" || bad "full disk: swap counters"
grep -q "kv offload: writing .* failed: File too large" "$tmp/err" && ok "full disk warned: $(grep -m1 'kv offload: writing' "$tmp/err" | sed 's/.*WARN //' | cut -c1-150)" \
  || { bad "full disk: no warning"; tail -5 "$tmp/err"; }
grep -q "swap-out failed on 1 rank(s)" "$tmp/err" && ok "full disk: the leader saw it: $(grep -m1 'swap-out failed' "$tmp/err" | sed 's/.*WARN //' | cut -c1-120)" \
  || bad "full disk: no leader warning"
curl -sf "$url/health" > /dev/null && ok "full disk: server healthy" || bad "full disk: /health"
[ -z "$(ls -A "$tmp/kvfull" 2>/dev/null)" ] && ok "full disk: no file left (rank 0 dropped its copies)" || bad "full disk: files left: $(ls "$tmp/kvfull" | head -3)"
idle_check "full disk"
stop "full disk"
finish
