#!/bin/sh
# The custom IPC all-reduce on 2 GPUs (tests/gpu/test_custom_ar under mpirun -np 2): bf16 sums of
# every size class bit-exact against the fp32 sum rounded once and against NCCL, eager and under
# CUDA graph replay, the fused all-reduce + add + RMSNorm; then the fault path (--stall: a stalled
# custom all-reduce must abort the job after its 3 s deadline, with a message, not hang). Skips (77)
# without NCCL, with fewer than 2 usable GPUs (the CI machine has none) or without P2P between them.
. "$top_srcdir/tests/integration/mpi_env.sh"
prog="$top_builddir/tests/gpu/test_custom_ar"
gpus=$("$prog" --gpus) || { echo "$gpus"; exit 77; }
if [ "${gpus:-0}" -lt 2 ]; then
  echo "SKIP: custom_ar_tp2 needs 2 GPUs, ${gpus:-0} usable"
  exit 77
fi
# One host: NCCL's bootstrap over loopback; NVLink SHARP (NVLS) stays off on the lent machines.
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}" NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
timeout 300 $SITS_MPIRUN -np 2 "$prog"
rc=$?
if [ "$rc" -ne 0 ]; then
  [ "$rc" -eq 77 ] && exit 77
  exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout 60 $SITS_MPIRUN -np 2 "$prog" --stall >"$log" 2>&1
rc=$?
cat "$log"
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: the stalled custom all-reduce gave exit status $rc (want the job aborted, not 0 or a timeout)"
  exit 1
fi
if ! grep -Eq "did not (finish|complete) within 3.0 s" "$log"; then
  echo "FAIL: the abort did not say which rank and what stalled"
  exit 1
fi
echo "PASS: the stalled custom all-reduce aborted the job (exit status $rc)"
