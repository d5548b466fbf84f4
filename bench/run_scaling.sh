#!/usr/bin/env bash
# bench/run_scaling.sh -- the multi-GPU runs (issues 7 and 14), for whatever GPUs the machine has:
#   1. Llama-3-70B shape, bf16, TP = NGPU (8 on a DGX; 2 on the lent 2-GPU machine): decode ms/step at
#      batch 1, 8, 32, 64 with context 2048, including the seed workload (input 2048, batch 32:
#      median / mean / P99 step latency, memory per GPU), beside the floor measured in the same call.
#   2. Scaling: Llama-3-8B shape decode at batch 1 and 32 for TP = 1, 2, 4, 8 (up to NGPU), with the
#      custom all-reduce and with NCCL only (--custom-allreduce 0).
#   3. All-reduce table, 8 KiB - 64 MiB, custom vs NCCL (when bench/sits-bench-allreduce is built).
# Run from the checkout root on the GPU machine after `source .dev/setup.sh` and a build in BUILD
# (default build-gpu, as bench/gpu_session.sh makes it):
#   bench/run_scaling.sh [--build DIR] [--out DIR] [--iters N] [--skip-70b] [--skip-8b] [--skip-ar]
set -uo pipefail
build=build-gpu out=${OUT:-$PWD/scaling-out} iters=10 skip70=0 skip8=0 skipar=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --skip-70b) skip70=1; shift ;;
    --skip-8b) skip8=1; shift ;;
    --skip-ar) skipar=1; shift ;;
    *) echo "usage: $0 [--build DIR] [--out DIR] [--iters N] [--skip-70b] [--skip-8b] [--skip-ar]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ "$ngpu" -ge 1 ] || { echo "no GPU" >&2; exit 77; }
bd=$build/bench/sits-bench-decode
commit=${SITS_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
run() { # NP NAME ARGS...: one bench_decode run under mpirun, JSON in $out/NAME.json
  local np=$1 name=$2; shift 2
  echo "== $name (tp $np)"
  mpirun -np "$np" --bind-to none "$bd" --device cuda --iters "$iters" --warmup 2 --commit "$commit" \
    --json "$out/$name.json" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  grep -E '^(decode|prefill|gpu memory)' "$out/$name.log"
  [ $rc -eq 0 ] || { echo "   (rc $rc; see $out/$name.log)"; tail -5 "$out/$name.log"; }
}
if [ $skip70 -eq 0 ]; then
  run "$ngpu" "llama70b_tp$ngpu" --model bench/configs/llama3-70b --batch 1,8,16,32,64 --context 128,2048 --prefill 0
  run "$ngpu" "llama70b_tp${ngpu}_nccl" --model bench/configs/llama3-70b --batch 1,16 --context 2048 --prefill 0 --custom-allreduce 0
fi
if [ $skip8 -eq 0 ]; then
  for tp in 1 2 4 8; do
    [ "$tp" -le "$ngpu" ] || break
    run "$tp" "llama8b_tp$tp" --model bench/configs/llama3-8b --batch 1,32 --context 128,2048 --prefill 0
    [ "$tp" -gt 1 ] && run "$tp" "llama8b_tp${tp}_nccl" --model bench/configs/llama3-8b --batch 1,32 --context 128,2048 \
      --prefill 0 --custom-allreduce 0
  done
fi
if [ $skipar -eq 0 ] && [ -x "$build/bench/sits-bench-allreduce" ] && [ "$ngpu" -ge 2 ]; then
  echo "== all-reduce, $ngpu GPUs"
  mpirun -np "$ngpu" --bind-to none "$build/bench/sits-bench-allreduce" --json "$out/allreduce_$ngpu.json" \
    > "$out/allreduce_$ngpu.log" 2>&1
  cat "$out/allreduce_$ngpu.log"
fi
# one summary table from the JSON files
python3 - "$out" <<'PYEOF'
import glob, json, os, sys
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "llama*.json"))):
    d = json.load(open(f))
    for r in d.get("rows", []):
        rows.append((os.path.basename(f)[:-5], d.get("tp"), r["batch"], r["context"], r["ms_median"], r["ms_mean"],
                     r.get("ms_p99", 0), r["tok_s"], r["floor_ms"], d.get("gpu_mem_used_gb", 0)))
print("\n| run | tp | batch | context | ms median | ms mean | ms p99 | tok/s | floor ms | GB/GPU |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %s | %d | %d | %.3f | %.3f | %.3f | %.1f | %.3f | %.1f |" % r)
PYEOF
