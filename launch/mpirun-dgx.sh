#!/usr/bin/env bash
# launch/mpirun-dgx.sh -- serve a model with sits-dist on one DGX-class node (8 GPUs on NVLink):
# one rank per GPU, TP over all of them.
#
#   launch/mpirun-dgx.sh /models/Meta-Llama-3-70B-Instruct                   # TP 8, port 8000
#   SITS_NP=4 launch/mpirun-dgx.sh MODEL --port 9000 --api-key "$KEY"        # 4 GPUs, TP 4
#   launch/mpirun-dgx.sh MODEL --topology                                    # print the map, exit
#
# Several nodes: SITS_HOSTFILE=launch/hosts.example (one "host slots=N" line per node) and
# SITS_NP = nodes x GPUs; ranks fill a node before the next (--map-by ppr:N:node), so each TP
# group of N ranks stays inside a node, and SITS_PP = nodes gives the TP x PP layout.
#
# Environment (all optional):
#   SITS_BIN        sits-dist binary (default: sits-dist on PATH)
#   SITS_NP         ranks per node = GPUs used per node (default: nvidia-smi's GPU count, else 8)
#   SITS_HOSTFILE   Open MPI hostfile for several nodes (default: this node only)
#   SITS_TP         tensor-parallel size (default SITS_NP); SITS_PP pipeline stages (default: nodes)
#   SITS_PML        Open MPI point-to-point layer (default ucx; ob1 on a machine without UCX devices)
#   SITS_LOG_DIR    log folder (default logs/sits-dist-<date>-<pid>): rank-N.log per rank + nccl-*.log
#   MPIRUN          the mpirun to use (default mpirun); SITS_MPIRUN_FLAGS extra mpirun flags
#                   (e.g. --oversubscribe on a machine with fewer cores than ranks)
#
# Mapping and binding: mpirun places ranks (ppr:N:node, ranks in node order) and does NOT bind
# (--bind-to none): sits-dist binds rank L to GPU L and to the cores of that GPU's NUMA node itself
# (hwloc). --report-bindings would show mpirun's (absent) binding; `--topology` shows sits-dist's.
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: launch/mpirun-dgx.sh MODEL_DIR [sits-dist flags...]" >&2
    exit 2
fi
model=$1
shift

gpus=8
if command -v nvidia-smi >/dev/null 2>&1; then
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    [ "${n:-0}" -gt 0 ] && gpus=$n
fi
np=${SITS_NP:-$gpus}
bin=${SITS_BIN:-sits-dist}
mpirun=${MPIRUN:-mpirun}
hostfile_args=()
nodes=1
if [ -n "${SITS_HOSTFILE:-}" ]; then
    hostfile_args=(--hostfile "$SITS_HOSTFILE")
    nodes=$(grep -cE '^[[:space:]]*[^#[:space:]]' "$SITS_HOSTFILE")
fi
tp=${SITS_TP:-$np}
pp=${SITS_PP:-$nodes}
log_dir=${SITS_LOG_DIR:-logs/sits-dist-$(date +%Y%m%d-%H%M%S)-$$}
mkdir -p "$log_dir"

root_args=()
[ "$(id -u)" -eq 0 ] && root_args=(--allow-run-as-root)
read -r -a extra_args <<< "${SITS_MPIRUN_FLAGS:-}"

echo "sits-dist: $nodes node(s) x $np rank(s), tp $tp x pp $pp; logs in $log_dir" >&2
# -x NAME exports NAME to every rank (needed on remote nodes; harmless on one).
exec "$mpirun" "${root_args[@]}" "${hostfile_args[@]}" "${extra_args[@]}" -np $((nodes * np)) \
    --map-by "ppr:$np:node" --rank-by slot --bind-to none \
    --mca pml "${SITS_PML:-ucx}" \
    -x NCCL_DEBUG="${NCCL_DEBUG:-WARN}" -x NCCL_DEBUG_FILE="$log_dir/nccl-%h-%p.log" \
    -x SITS_LOG_LEVEL="${SITS_LOG_LEVEL:-INFO}" -x SITS_LOG_FILE="$log_dir/rank-%r.log" \
    -x PATH ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} \
    "$bin" --model "$model" --tp "$tp" --pp "$pp" "$@"
