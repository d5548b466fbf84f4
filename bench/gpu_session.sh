#!/usr/bin/env bash
# bench/gpu_session.sh -- one call on the lent GPU machine: build, the GPU tests, TP=2 on two GPUs,
# then the decode benchmark beside HF transformers. Run from the checkout root after
# `source .dev/setup.sh` (see ../shared/device/README.md); logs go to $OUT (default ./gpu-out).
#   bench/gpu_session.sh [tests|bench|all] [extra run_decode.sh args...]
set -uo pipefail
what=${1:-all}; shift || true
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
top=$PWD
summary=$out/summary.txt
: > "$summary"
row() { printf '%-44s %s\n' "$1" "$2" | tee -a "$summary"; }

autoreconf -fi >/dev/null 2>&1
mkdir -p build-gpu && cd build-gpu
[ -f Makefile ] || ../configure -q > "$out/configure.log" 2>&1 || { row configure FAIL; cat "$out/configure.log"; exit 1; }
if make -j16 > "$out/make.log" 2>&1 && make -j16 check TESTS= > "$out/make-check.log" 2>&1; then row build ok; else row build FAIL; tail -30 "$out/make.log" "$out/make-check.log"; exit 1; fi
export top_srcdir=$top top_builddir=$PWD PYTHON=python3 MPIRUN=mpirun
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')

if [ "$what" != bench ]; then
  for t in tests/gpu/test_op_parity tests/gpu/test_engine_step tests/gpu/fixtures_cuda.sh tests/gpu/demo_cuda.sh tests/gpu/nccl_tp2.sh tests/gpu/custom_ar_tp2.sh tests/gpu/pp_mb_cuda.sh; do
    [ -e "$t" ] || [ -e "$top/$t" ] || continue
    if [ -x "$t" ] && [ "${t%.sh}" = "$t" ]; then cmd=$t; else cmd="bash $top/$t"; fi
    $cmd > "$out/$(basename "$t").log" 2>&1; rc=$?
    case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL ($rc)" ;; esac
    row "$t" "$r"
  done
  # greedy tokens: GPU TP=1 vs TP=2 vs HF (fixture reference)
  m=$top/tests/fixtures/models/llama_small
  ids=$(awk 'index($0, "\"prompts\": [") {on=1; n=-1; next} on {n++; if (n==3) {gsub(/[][ ]/,""); sub(/,$/,""); print; exit}}' "$m/reference.json")
  want=$(awk 'index($0, "\"greedy\": [") {on=1; n=-1; next} on {n++; if (n==3) {gsub(/[][ ]/,""); sub(/,$/,""); print; exit}}' "$m/reference.json")
  g1=$(./sits-dist --model "$m" --device cuda --prompt-ids "$ids" --max-tokens 16 --temperature 0 --ignore-eos 2> "$out/tp1.err")
  row "llama_small greedy, GPU TP=1 == HF" "$([ "$g1" = "$want" ] && echo yes || echo "NO: $g1 vs $want")"
  if [ "$ngpu" -ge 2 ]; then
    g2=$(mpirun -np 2 ./sits-dist --model "$m" --device cuda --prompt-ids "$ids" --max-tokens 16 --temperature 0 --ignore-eos 2> "$out/tp2.err")
    row "llama_small greedy, GPU TP=2 == TP=1" "$([ "$g2" = "$g1" ] && echo yes || echo "NO: $g2")"
  fi
fi
if [ "$what" != tests ] && [ "$ngpu" -ge 2 ] && [ -x bench/sits-bench-allreduce ]; then
  mpirun -np 2 --bind-to none bench/sits-bench-allreduce --json "$out/allreduce.json" > "$out/allreduce.log" 2>&1
  row "bench/sits-bench-allreduce (2 GPUs)" "rc $?"
  tail -40 "$out/allreduce.log"
fi
if [ "$what" != tests ]; then
  SITS_COMMIT=${SITS_COMMIT:-unknown} bash "$top/bench/run_decode.sh" --build "$PWD" --out "$out/decode" "$@" > "$out/decode.log" 2>&1
  row "bench/run_decode.sh" "rc $?"
  [ -f "$out/decode/decode.md" ] && cat "$out/decode/decode.md"
fi
echo; cat "$summary"
