#!/bin/bash
# The CPU side of serving (issue 20), on the real binary with random weights:
#   1. threads = the cores of the rank's binding divided among the ranks sharing them (reference: nproc,
#      the launcher's affinity, on a machine with one thread per core): one rank -> nproc; two unbound
#      ranks -> nproc / 2; two ranks under `taskset -c 0` -> 1 each; --threads N wins.
#   2. KV reserved by need: serving a 135M-shaped model (30 layers, 3 KV heads of 64, 8192 positions) with
#      64 sequences would need 22.5 GiB of fp32 KV; without --kv-cache-memory the server takes at most 25 %
#      of MemAvailable (read here from /proc/meminfo), and its address space stays below the 22.5 GiB.
#   3. per-step overhead: the 5-token prefill of a 3-layer hidden-96 model (~100 ms before: OpenMP
#      barriers on tiny ops) takes under PREFILL_MAX_MS (best of 3), with one and with two threads.
. "$top_srcdir/tests/integration/lib.sh"
[ -x "$SITS" ] || { echo "SKIP: $SITS not built"; exit 77; }
command -v nproc >/dev/null && command -v lscpu >/dev/null || { echo "SKIP: nproc and lscpu are needed"; exit 77; }
[ "$(lscpu | awk -F: '/^Thread\(s\) per core/ { gsub(/ /, "", $2); print $2 }')" = 1 ] || { echo "SKIP: SMT machine (nproc counts threads, the server cores)"; exit 77; }
PREFILL_MAX_MS=${PREFILL_MAX_MS:-30}
serve_tmp
# model DIR LAYERS HIDDEN FFN HEADS KV_HEADS POSITIONS: a model directory with random weights of that shape
model() {
  serve_setup "$1"
  printf '{"model_type": "llama", "vocab_size": 3013, "hidden_size": %d, "intermediate_size": %d, "num_hidden_layers": %d, "num_attention_heads": %d, "num_key_value_heads": %d, "max_position_embeddings": %d, "rms_norm_eps": 1e-5, "hidden_act": "silu", "bos_token_id": 3000, "eos_token_id": 3001}\n' \
    "$3" "$4" "$2" "$5" "$6" "$7" > "$1/config.json"
}
model "$tmp/m3" 3 96 256 4 2 512
N=$(nproc)
RUN="$SITS --model $tmp/m3 --load-format dummy --prompt-ids 1,2,3,4,5 --max-tokens 4 --log-level info"
# threads_of OUT: the thread counts of the "cpu backend with N threads" lines, sorted, space-separated
threads_of() { sed -n 's/.*cpu backend with \([0-9]*\) threads.*/\1/p' "$1" | sort -n | tr '\n' ' ' | sed 's/ $//'; }
check_threads() { # name want out
  local got; got=$(threads_of "$3")
  [ "$got" = "$2" ] && ok "threads, $1: $got" || { bad "threads, $1: got '$got', want '$2'"; grep -E "threads|error" "$3" | head -3; }
}
$SITS_MPIRUN -np 1 $RUN --no-bind > "$tmp/o" 2>&1; check_threads "1 rank on $N cores" "$N" "$tmp/o"
h=$((N / 2)); [ $h -lt 1 ] && h=1
$SITS_MPIRUN -np 2 $RUN --no-bind > "$tmp/o" 2>&1; check_threads "2 unbound ranks on $N cores" "$h $h" "$tmp/o"
if command -v taskset >/dev/null; then
  taskset -c 0 $SITS_MPIRUN -np 2 $RUN --no-bind > "$tmp/o" 2>&1; check_threads "2 ranks under taskset -c 0" "1 1" "$tmp/o"
fi
$SITS_MPIRUN -np 2 $RUN --no-bind --threads 3 > "$tmp/o" 2>&1; check_threads "--threads 3" "3 3" "$tmp/o"

# 2. KV by need
model "$tmp/m" 30 576 1536 9 3 8192
need=$((30 * 2 * 3 * 64 * 4 * 8192 * 64))   # layers x K,V x kv heads x head_dim x fp32 x positions x sequences
avail_kb=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
$SITS --model "$tmp/m" --load-format dummy --port 0 --max-num-seqs 64 --log-level info > "$tmp/out" 2> "$tmp/err" &
srv=$!
for _ in $(seq 300); do grep -q "^sits-dist: serving" "$tmp/err" && break; kill -0 $srv 2>/dev/null || break; sleep 0.1; done
vm_kb=$(awk '/^VmSize:/ { print $2 }' /proc/$srv/status 2>/dev/null)
kv_mib=$(sed -n 's/.*engine: [0-9]* KV blocks of [0-9]* tokens (\([0-9.]*\) MiB.*/\1/p' "$tmp/err" | head -1)
kill -TERM $srv 2>/dev/null; wait $srv; srv=
if [ -z "$kv_mib" ] || [ -z "$vm_kb" ]; then bad "kv by need: the server did not start"; tail -3 "$tmp/err"
else
  awk -v kv="$kv_mib" -v av="$avail_kb" -v need="$need" -v vm="$vm_kb" 'BEGIN {
    kvb = kv * 1048576; cap = 0.25 * av * 1024;
    printf "%s kv by need: %.2f GiB of KV (need %.2f GiB, cap 25%% of %.2f GiB available = %.2f GiB), address space %.2f GiB\n",
      (kvb <= cap * 1.05 + 1048576 && vm * 1024 < need) ? "ok  " : "FAIL", kvb / 2^30, need / 2^30, av / 2^20, cap / 2^30, vm / 2^20 }' > "$tmp/v"
  cat "$tmp/v"; grep -q '^FAIL' "$tmp/v" && n_fail=$((n_fail + 1))
fi

# 3. per-step overhead
for t in 1 2; do
  best=
  for _ in 1 2 3; do
    ms=$($SITS --model "$tmp/m3" --load-format dummy --prompt-ids 1,2,3,4,5 --max-tokens 20 --threads $t 2>&1 |
         sed -n 's/^prefill: 5 tokens in \([0-9.]*\) ms.*/\1/p')
    [ -n "$ms" ] && { [ -z "$best" ] || awk -v a="$ms" -v b="$best" 'BEGIN { exit !(a < b) }'; } && best=$ms
  done
  if [ -n "$best" ] && awk -v a="$best" -v m="$PREFILL_MAX_MS" 'BEGIN { exit !(a < m) }'; then ok "5-token prefill, 3 layers hidden 96, $t threads: $best ms (best of 3)"
  else bad "5-token prefill with $t threads: ${best:-no result} ms (limit $PREFILL_MAX_MS)"; fi
done
finish
