#!/usr/bin/env bash
# bench/run_pp_mb.sh -- pipeline micro-batches (issue 11 item 2): decode ms/step and tok/s of the
# offline generator (its own rate line on stderr) for --pp P with and without --pp-microbatches,
# and --tp P beside them, at each batch, one mpirun per cell. Runs are interleaved (every layout at
# a batch, then again for --reps) and the table keeps the best ms/step of the reps, so a shared
# machine's noise hurts less. Not a test.
#   bench/run_pp_mb.sh [--build DIR] [--model DIR] [--device cuda|cpu] [--np P] [--batch 1,32]
#       [--mb 1,2] [--max-tokens 64] [--reps 1] [--no-tp] [--args "extra sits-dist flags"]
# GPU (2 x H200, 8B shape, dummy weights):   bench/run_pp_mb.sh --build build-gpu
# CPU (small dummy model, one core a rank):  bench/run_pp_mb.sh --build BUILD --device cpu --model M \
#       --batch 32 --mb 1,2,4 --max-tokens 12 --reps 3 --no-tp --args "--threads 1"
set -uo pipefail
build=build-gpu model=bench/configs/llama3-8b device=cuda np=2 batches=1,32 mbs=1,2 max_tokens=64 reps=1 tp=1 extra=
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --batch) batches=$2; shift 2 ;;
    --mb) mbs=$2; shift 2 ;;
    --max-tokens) max_tokens=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --no-tp) tp=0; shift ;;
    --args) extra=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--model DIR] [--device cuda|cpu] [--np P] [--batch 1,32] [--mb 1,2] [--max-tokens N] [--reps N] [--no-tp] [--args \"...\"]" >&2; exit 2 ;;
  esac
done
[ "$device" != cuda ] || [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -ge "$np" ] || { echo "need $np GPUs" >&2; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# CPU (CI machine): loopback only, as tests/integration/mpi_env.sh
[ "$device" = cuda ] || export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader,tcp}" OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_pml=ob1
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
layouts=()
[ $tp -eq 1 ] && layouts+=("--tp $np")
for m in ${mbs//,/ }; do layouts+=("--pp $np --pp-microbatches $m"); done
declare -A best
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "model $model, device $device, $np ranks, $max_tokens tokens a sequence (context 4 -> $((4 + max_tokens))), greedy; best of $reps"
for b in ${batches//,/ }; do
  for r in $(seq "$reps"); do
    for L in "${layouts[@]}"; do
      # shellcheck disable=SC2086
      timeout 600 mpirun --oversubscribe --bind-to none -np "$np" "$build/sits-dist" --model "$model" --load-format dummy \
        --device "$device" $L --prompt-ids 1,2,3,4 --batch "$b" --max-tokens "$max_tokens" --temperature 0 --ignore-eos \
        $extra > /dev/null 2> "$log"
      ms=$(sed -n 's/.*tok\/s, \([0-9.]*\) ms\/step).*/\1/p' "$log" | tail -1)
      [ -n "$ms" ] || { echo "run failed: $L batch $b" >&2; tail -5 "$log" >&2; continue; }
      echo "  batch $b, $L: $ms ms/step (rep $r)"
      k="$b|$L"
      if [ -z "${best[$k]:-}" ] || awk -v a="$ms" -v b="${best[$k]}" 'BEGIN { exit !(a < b) }'; then best[$k]=$ms; fi
    done
  done
done
echo
echo "| layout | batch | decode ms/step | tok/s |"
echo "|---|---|---|---|"
for b in ${batches//,/ }; do
  for L in "${layouts[@]}"; do
    ms=${best["$b|$L"]:-}
    [ -n "$ms" ] && awk -v l="$L" -v b="$b" -v ms="$ms" 'BEGIN { printf "| %s | %d | %.2f | %.0f |\n", l, b, ms, b * 1000 / ms }'
  done
done
