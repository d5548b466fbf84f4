#!/bin/bash
# launch_recipes.sh -- the launch recipes of launch/ run here, without Slurm or a second node:
#   - launch/sits-dist.sbatch runs with a stand-in `srun` on PATH that translates the recipe's srun
#     flags to mpirun with a hostfile (localhost slots=4: the 2 "nodes" x 2 tasks of the simulated
#     job fold onto this machine; Open MPI cannot name one machine twice in a hostfile). The shim
#     refuses any srun flag it does not know, so a changed recipe must update this test.
#     --topology shows the TP x PP layout the recipe asks for (tp 2 x pp 2: TP groups are consecutive
#     ranks, i.e. inside a node under block distribution; PP groups cross them).
#   - the same recipe with 1 node x 2 tasks serves the demo model (what this release can run): a chat
#     request answers, each rank wrote its log file under the job's log folder.
#   - a 2-node x 8-GPU job and launch/hosts.example (MPIRUN/srun replaced by echo) give the intended
#     command lines: 16 ranks, tp 8 x pp 2, the binding/mapping flags, pml ucx.
#   - launch/mpirun-dgx.sh with 2 ranks prints its topology (tp 2).
#   - the leader's loading progress line (on a pseudo-terminal): group total == what the ranks hold.
#   - shellcheck on every launch script (skipped part, and exit 77 if all else passed, without it).
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
MPIRUN_BIN=${MPIRUN:-mpirun}
command -v "$MPIRUN_BIN" >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
L="$top_srcdir/launch"
DEMO="$top_srcdir/models/demo"
tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill -9 -- "-$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# --- the srun stand-in --------------------------------------------------------------------------
mkdir -p "$tmp/bin"
printf 'localhost slots=4\n' > "$tmp/hosts"
cat > "$tmp/bin/srun" <<'SH'
#!/bin/bash
# srun -> mpirun (test stand-in). SRUN_ECHO=1: print the srun command line instead.
[ "$*" = --mpi=list ] && { printf 'MPI plugin types are...\n\tpmix\n\tnone\n'; exit 0; }
[ -n "${SRUN_ECHO:-}" ] && { echo "srun $*"; exit 0; }
nodes=1 per_node=1 mapping=
while [ $# -gt 0 ]; do
  case $1 in
    --mpi=pmix) ;;                          # mpirun brings its own PMIx server
    --nodes=*) nodes=${1#*=} ;;
    --ntasks-per-node=*) per_node=${1#*=} ;;
    --distribution=block) mapping=slot ;;   # fill a node before the next
    --cpu-bind=none|--gpu-bind=none) ;;     # -> --bind-to none below
    --kill-on-bad-exit=1) ;;                # mpirun ends the job when a rank fails
    -*) echo "srun stand-in: unexpected flag $1" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
[ "$mapping" = slot ] || { echo "srun stand-in: no --distribution=block" >&2; exit 2; }
exec $SRUN_MPIRUN --hostfile "$SRUN_HOSTFILE" -np $((nodes * per_node)) --map-by slot --bind-to none "$@"
SH
chmod +x "$tmp/bin/srun"
export SRUN_HOSTFILE="$tmp/hosts" SRUN_MPIRUN="$MPIRUN_BIN"
[ "$(id -u)" = 0 ] && SRUN_MPIRUN="$MPIRUN_BIN --allow-run-as-root"
# a simulated Slurm job: 2 nodes x 2 tasks (OMPI_MCA_pml=ob1 from mpi_env.sh overrides the recipe's ucx)
# sbatch_run NODES PER_NODE ARGS...: in a new session (setsid, no fork: not a group leader), so that the
# test can end the whole job (kill -- -PID) when started in the background
sbatch_run() {
  local n=$1 p=$2; shift 2
  cd "$tmp" && PATH="$tmp/bin:$PATH" SLURM_JOB_NUM_NODES=$n SLURM_NTASKS_PER_NODE=$p SLURM_JOB_NAME=recipe \
     SLURM_JOB_ID=42 SITS_BIN="$SITS" exec setsid timeout 120 bash "$L/sits-dist.sbatch" "$DEMO" "$@"
}
has() { printf '%s\n' "$1" | grep -qF -- "$2"; }

# --- sbatch: the TP x PP layout of a 2-node job -----------------------------------------------
out=$(sbatch_run 2 2 --topology 2>&1); st=$?
if [ $st -eq 0 ] && has "$out" "topology: 4 ranks on 1 node: tp 2 x pp 2 x dp 1" && has "$out" "tp groups (2): [0 1] [2 3]" \
   && has "$out" "pp groups (2): [0 2] [1 3]" && has "$out" "rank 3: host $(hostname -s) local 3/4" \
   && has "$out" "tp 1 pp 1 dp 0"; then
  ok "sbatch recipe under mpirun (2 nodes x 2 tasks): tp 2 x pp 2 layout"
else
  bad "sbatch recipe --topology (exit $st)"; echo "$out"
fi

# --- sbatch: 2 nodes x 8 GPUs, the intended command line ---------------------------------------
mkdir -p "$tmp/models/big" && echo '{}' > "$tmp/models/big/config.json"   # the recipe checks the path
out=$(cd "$tmp" && PATH="$tmp/bin:$PATH" SRUN_ECHO=1 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS_PER_NODE='8(x2)' \
      SLURM_JOB_ID=7 bash "$L/sits-dist.sbatch" "$tmp/models/big" --api-key k 2>&1)
if has "$out" "srun --mpi=pmix --nodes=2 --ntasks-per-node=8 --distribution=block --cpu-bind=none --gpu-bind=none" \
   && has "$out" "--model $tmp/models/big --tp 8 --pp 2 --host 0.0.0.0 --port 8000 --api-key k" \
   && has "$out" "sits-dist.sbatch: srun exited with 0"; then
  ok "sbatch recipe, 2 x 8 GPUs: srun line with tp 8 x pp 2"
else
  bad "sbatch 2 x 8 command line"; echo "$out"
fi

# --- sbatch: 1 node x 2 tasks serves the demo model ----------------------------------------------
port=$(free_port); url=http://127.0.0.1:$port
(SITS_PORT=$port SITS_HOST=127.0.0.1 sbatch_run 1 2) > "$tmp/serve.out" 2> "$tmp/serve.err" &
srv=$!
for _ in $(seq 300); do curl -sf "$url/health" >/dev/null 2>&1 && break; sleep 0.1; done
r=$(curl -s --max-time 60 "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"model":"demo","messages":[{"role":"user","content":"What is a list?"}],"max_tokens":16,"temperature":0}')
if printf '%s' "$r" | grep -q '"content":"[^"]*[A-Za-z][A-Za-z]'; then
  text=${r#*\"content\":\"}
  ok "sbatch recipe (1 node x 2 tasks) serves the demo model: \"${text%%\"*}\""
else
  bad "sbatch serve: no chat answer: $r"; tail -20 "$tmp/serve.err"
fi
kill -TERM -- "-$srv" 2>/dev/null; wait "$srv" 2>/dev/null; srv=
if [ -s "$tmp/logs/recipe-42/rank-0.log" ] && [ -s "$tmp/logs/recipe-42/rank-1.log" ]; then
  ok "per-job log folder with one log per rank"
else
  bad "log files: $(ls -R "$tmp/logs" 2>&1 | tr '\n' ' ')"
fi
grep -q "serving $DEMO on http://127.0.0.1:$port" "$tmp/serve.err" && ok "ready line in the job output" \
  || { bad "no ready line"; tail -5 "$tmp/serve.err"; }

# --- mpirun-dgx.sh -------------------------------------------------------------------------------
out=$(cd "$tmp" && SITS_NP=2 SITS_PML=ob1 SITS_MPIRUN_FLAGS=--oversubscribe SITS_BIN="$SITS" MPIRUN="$MPIRUN_BIN" \
      timeout 60 bash "$L/mpirun-dgx.sh" "$DEMO" --topology 2>&1); st=$?
if [ $st -eq 0 ] && has "$out" "topology: 2 ranks on 1 node: tp 2 x pp 1 x dp 1" && has "$out" "tp groups (1): [0 1]"; then
  ok "mpirun-dgx.sh (2 ranks): tp 2 topology"
else
  bad "mpirun-dgx.sh --topology (exit $st)"; echo "$out"
fi
out=$(cd "$tmp" && SITS_NP=8 SITS_HOSTFILE="$L/hosts.example" MPIRUN=echo bash "$L/mpirun-dgx.sh" /models/big 2>&1)
if has "$out" "-np 16 --map-by ppr:8:node --rank-by slot --bind-to none --mca pml ucx" \
   && has "$out" "--hostfile $L/hosts.example" && has "$out" "--model /models/big --tp 8 --pp 2"; then
  ok "mpirun-dgx.sh with hosts.example: 16 ranks, tp 8 x pp 2, map by node, no binding, pml ucx"
else
  bad "mpirun-dgx.sh hostfile command line"; echo "$out"
fi

# --- loading progress (leader, one line) -----------------------------------------------------------
# Each rank's stderr is a pseudo-terminal (script(1) inside mpirun), so the leader draws its \r line;
# the group total it prints must equal the sum of what the ranks say they hold (INFO log lines).
if command -v script >/dev/null 2>&1; then
  out=$(SITS_LOG_LEVEL=INFO timeout 120 $SITS_MPIRUN -np 2 script -qec \
        "'$SITS' --model '$DEMO' --prompt 'What is a list?' --max-tokens 2" /dev/null 2>&1 | tr '\r' '\n')
  last=$(printf '%s\n' "$out" | grep 'loading weights: .*(100%) on 2 ranks' | tail -n 1)
  total=$(printf '%s\n' "$last" | sed -n 's|.* / \([0-9.]*\) MiB .*|\1|p')
  held=$(printf '%s\n' "$out" | sed -n 's/.*tp rank [01]\/2 holds \([0-9.]*\) MiB.*/\1/p' | awk '{ s += $1; n++ } END { if (n == 2) print s }')
  if [ -n "$total" ] && [ -n "$held" ] && awk -v a="$total" -v b="$held" 'BEGIN { d = a - b; exit !(d <= 0.1 && d >= -0.1) }'; then
    ok "loading progress on a TTY: '$last' (ranks hold $held MiB)"
  else
    bad "loading progress: total '$total' vs held '$held'"; printf '%s\n' "$out" | grep -a 'loading\|holds'
  fi
  out=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" --model "$DEMO" --prompt 'What is a list?' --max-tokens 2 2>&1)
  if printf '%s\n' "$out" | grep -q 'loading weights'; then bad "progress lines without a TTY for a fast load: $out"
  else ok "no progress lines without a TTY when the load is fast"; fi
else
  echo "skip loading progress: no script(1)"
fi

# --- shellcheck ----------------------------------------------------------------------------------
skip_sc=0
if command -v shellcheck >/dev/null 2>&1; then
  scripts=$(grep -rlE '^#!.*(ba)?sh' "$L")
  # shellcheck disable=SC2086
  if sc=$(shellcheck $scripts 2>&1); then ok "shellcheck clean: $(echo $scripts | wc -w) launch scripts"
  else bad "shellcheck"; echo "$sc"; fi
else
  echo "skip shellcheck: not installed (apt-get install shellcheck)"; skip_sc=1
fi
[ "$n_fail" -eq 0 ] && [ $skip_sc -eq 1 ] && { echo "SKIP: everything but shellcheck passed"; exit 77; }
finish
