#!/bin/bash
# slurm.sh -- issue 26: launch/sits-dist.sbatch under a real Slurm (Debian 12's slurm-wlm 22.05 with
# munge), as a site's user would run it. The test starts a one-node cluster of its own and stops it:
#   munged (a fresh key, its own socket), slurmctld and slurmd for this host (2 CPUs, MpiDefault=pmix,
#   proctrack/linuxproc, task/none: no cgroups, which a container-like VM may not give), every file
#   and port private to the test; at the end every job is cancelled and the daemons are stopped, and
#   the test fails if a process started under its folder is still alive.
# Then, with the demo model and Open MPI started through Slurm's PMIx plugin (srun --mpi=pmix):
#   - sbatch of the recipe (1 node x 2 tasks, --port 0): the URL comes from the job's output, a chat
#     completion answers; a long request is in flight when `scancel --signal=TERM` reaches the step:
#     its answer arrives in full, sits-dist drains and exits 0, the job ends COMPLETED 0:0;
#   - the same with a plain `scancel` (SIGTERM to the batch script too): full answer, exit 0
#     reported by the recipe, job CANCELLED;
#   - broken set-ups end with the reason in the job's output within their Slurm time limit, never a
#     hang: 2 tasks for a model with 3 heads (sits-dist's "does not divide"), a missing model path
#     (the recipe's check), srun without PMIx (--mpi=none: Open MPI's message);
#   - `srun -n 2 sits-dist --prompt ...` offline prints what `mpirun -np 2` prints (greedy).
# Skips (77) without root, without the Slurm / munge programs or without Slurm's PMIx plugin.
. "$top_srcdir/tests/integration/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: slurmd runs the test's jobs as root: run as root"; exit 77; }
for c in slurmctld slurmd sbatch srun scancel squeue scontrol munged mungekey curl; do
  command -v $c >/dev/null 2>&1 || { echo "SKIP: no $c (apt-get install slurmctld slurmd slurm-client munge curl)"; exit 77; }
done
DEMO="$top_srcdir/models/demo"
RECIPE="$top_srcdir/launch/sits-dist.sbatch"
tmp=$(mktemp -d /tmp/sits-slurm.XXXXXX)
chmod 755 "$tmp"                     # munged wants its socket's folder searchable by all
node=$(hostname -s)
export SLURM_CONF="$tmp/slurm.conf"
ctld='' slurmd_pid=''
# Slurm's clients retry for a long time when the controller is gone: bound each call
sq() { timeout 15 squeue "$@"; }

stop_cluster() {
  local ids
  if [ -n "$slurmd_pid" ] && [ -n "$ctld" ] && kill -0 "$ctld" 2>/dev/null; then
    ids=$(sq -h -o %i 2>/dev/null)
    # shellcheck disable=SC2086
    [ -n "$ids" ] && timeout 15 scancel $ids 2>/dev/null
    for _ in $(seq 150); do [ -z "$(sq -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  [ -n "$slurmd_pid" ] && { kill -TERM "$slurmd_pid" 2>/dev/null; wait "$slurmd_pid" 2>/dev/null; }
  [ -n "$ctld" ] && { kill -TERM "$ctld" 2>/dev/null; wait "$ctld" 2>/dev/null; }
  [ -f "$tmp/munged.pid" ] && munged --stop --socket="$tmp/munge.sock" >/dev/null 2>&1
  slurmd_pid= ctld=
}
# processes whose command line or working directory is under the test's folder
leftovers() {
  local p
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = $$ ] && continue
    if tr '\0' ' ' 2>/dev/null < "$p/cmdline" | grep -qF "$tmp" || [ "$(readlink "$p/cwd" 2>/dev/null)" = "$tmp/work" ]; then
      echo "${p#/proc/}"
    fi
  done
}
cleanup() {
  stop_cluster
  local left; left=$(leftovers)
  # shellcheck disable=SC2086
  [ -n "$left" ] && kill -9 $left 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- the cluster -----------------------------------------------------------------------------------
mkdir -p "$tmp/state" "$tmp/spool" "$tmp/work/logs"
mungekey -c -k "$tmp/munge.key" -b 1024 && chmod 600 "$tmp/munge.key"
munged -f --socket="$tmp/munge.sock" --key-file="$tmp/munge.key" --log-file="$tmp/munged.log" \
       --pid-file="$tmp/munged.pid" --seed-file="$tmp/munged.seed" \
  || { echo "SKIP: munged does not start here: $(tail -3 "$tmp/munged.log" 2>/dev/null)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed (free ports)"; exit 77; }
# write_conf CTLD_PORT SLURMD_PORT
write_conf() {
cat > "$SLURM_CONF" <<EOF
ClusterName=sitstest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
MessageTimeout=5
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
ReturnToService=2
KillWait=30
MinJobAge=600
MailProg=/bin/true
NodeName=$node NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=10 State=UP
EOF
}
write_conf 6817 6818   # for srun --mpi=list only: the daemons get free ports below
srun --mpi=list 2>&1 | grep -qw pmix || { echo "SKIP: Slurm has no PMIx plugin (srun --mpi=list: $(srun --mpi=list 2>&1 | tr '\n\t' '  '))"; exit 77; }
# start_cluster: slurmctld + slurmd on fresh free ports; 0 once the node is idle (within 20 s),
# 1 with both stopped when a daemon died (a port taken meanwhile) or the node did not come up
start_cluster() {
  write_conf "$(free_port)" "$(free_port)"
  slurmctld -D -i -f "$SLURM_CONF" > "$tmp/slurmctld.out" 2>&1 &
  ctld=$!
  slurmd -D -f "$SLURM_CONF" -N "$node" > "$tmp/slurmd.out" 2>&1 &
  slurmd_pid=$!
  for _ in $(seq 100); do
    kill -0 "$ctld" 2>/dev/null && kill -0 "$slurmd_pid" 2>/dev/null || break
    timeout 10 sinfo -h -o %T 2>/dev/null | grep -qx idle && return 0
    sleep 0.2
  done
  echo "cluster start failed: $(tail -n 2 "$tmp/slurmctld.out" "$tmp/slurmd.out" 2>&1 | tr '\n' ' ')"
  kill -TERM "$slurmd_pid" "$ctld" 2>/dev/null; wait "$slurmd_pid" "$ctld" 2>/dev/null
  slurmd_pid='' ctld=''
  return 1
}
up=0
for _ in 1 2 3; do start_cluster && { up=1; break; }; done
if [ $up -ne 1 ]; then
  bad "the one-node cluster did not come up in 3 tries"; tail -5 "$tmp/slurmctld.log" "$tmp/slurmd.log" 2>&1
  finish
fi
ok "slurmctld + slurmd up: $(timeout 10 sinfo -h -o '%P %D node(s) %c CPUs %T' | head -1)"

# --- helpers ---------------------------------------------------------------------------------------
# The job environment: the built binary, loopback transports (no UCX / InfiniBand here: mpi_env.sh's
# OMPI_MCA_* reach the job through sbatch's --export=ALL), the test's own port
export SITS_BIN="$SITS" SITS_HOST=127.0.0.1 SITS_PORT=0
cd "$tmp/work" || exit 1
# submit ARGS...: sbatch the recipe from the work folder; prints the job id
submit() { timeout 30 sbatch --parsable --gpus-per-node=0 "$@" 2>"$tmp/sbatch.err" | cut -d';' -f1; }
job_out() { echo "$tmp/work/logs/sits-dist-$1.out"; }
job_state() { timeout 15 scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
job_exit() { timeout 15 scontrol show job "$1" 2>/dev/null | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p'; }
# wait_done JOB SECONDS: 0 once the job has left the queue (ended), 1 if it is still there
wait_done() {

  for _ in $(seq $(($2 * 5))); do
    case $(job_state "$1") in PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED|'') sleep 0.2 ;; *) return 0 ;; esac
  done
  return 1
}
# serve_job: sbatch the recipe serving the demo model (1 node x 2 tasks); sets $job and $url from
# the ready line in the job's output
serve_job() {
  url=
  job=$(submit --ntasks-per-node=2 --time=3 "$RECIPE" "$DEMO")
  [ -n "$job" ] || { bad "sbatch failed: $(cat "$tmp/sbatch.err")"; return 1; }
  for _ in $(seq 300); do
    url=$(sed -n 's|^sits-dist: serving .* on \(http://[0-9.]*:[0-9]*\) .*|\1|p' "$(job_out "$job")" 2>/dev/null | head -1)
    [ -n "$url" ] && curl -sf "$url/health" >/dev/null 2>&1 && return 0
    case $(job_state "$job") in PENDING|RUNNING|CONFIGURING) sleep 0.2 ;; *) break ;; esac
  done
  bad "job $job did not serve (state $(job_state "$job"))"; cat "$(job_out "$job")" 2>/dev/null | head -30; return 1
}
chat() {   # chat MAX_TOKENS: a greedy chat completion with ignore_eos (exactly MAX_TOKENS tokens)
  curl -s --max-time 120 "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"What is a list?\"}],\"max_tokens\":$1,\"temperature\":0,\"ignore_eos\":true}"
}
# drain_check HOW: a 160-token request in flight when scancel (HOW: --signal=TERM or plain) reaches the
# job; the answer must be complete (finish length, 160 completion tokens) and sits-dist exit 0
drain_check() {
  local how=$1 resp=$tmp/resp.$1 out
  serve_job || return
  r=$(chat 8)
  if printf '%s' "$r" | grep -q '"content":"[^"]*[A-Za-z][A-Za-z]'; then
    text=${r#*\"content\":\"}
    ok "sbatch (1 node x 2 tasks, srun --mpi=pmix): $url from the job's output answers: \"${text%%\"*}\""
  else
    bad "no chat answer from job $job: $r"
  fi
  chat 160 > "$resp" &
  local c=$!
  for _ in $(seq 50); do   # until the server has it (up to 5 s)
    [ "$(curl -s "$url/metrics" | sed -n 's/^sits_num_requests_inflight //p')" = 1 ] && break; sleep 0.1
  done
  if [ "$how" = plain ]; then timeout 15 scancel "$job"; else timeout 15 scancel --signal=TERM "$job"; fi
  wait $c
  if grep -q '"finish_reason":"length"' "$resp" && grep -q '"completion_tokens":160' "$resp"; then
    ok "scancel ($how) with a request in flight: its full answer (160 tokens, finish length)"
  else
    bad "scancel ($how): in-flight request got: $(head -c 300 "$resp")"
  fi
  if ! wait_done "$job" 60; then bad "scancel ($how): job $job still $(job_state "$job") after 60 s"; return; fi
  out=$(cat "$(job_out "$job")")
  local want_state=COMPLETED; [ "$how" = plain ] && want_state=CANCELLED
  if [ "$(job_state "$job")" = "$want_state" ] && printf '%s\n' "$out" | grep -q '^sits-dist: stopped' \
     && printf '%s\n' "$out" | grep -q '^sits-dist.sbatch: srun exited with 0$' && ! printf '%s\n' "$out" | grep -q 'Exited with exit code'; then
    ok "scancel ($how): sits-dist drained and exited 0, job $want_state (exit $(job_exit "$job"))"
  else
    bad "scancel ($how): job $(job_state "$job") exit $(job_exit "$job"), want $want_state and srun exit 0"; printf '%s\n' "$out" | tail -15
  fi
}
# fail_check NAME PATTERN SBATCH_ARGS...: the job ends FAILED within its time limit and its output
# has PATTERN (grep -E)
fail_check() {
  local name=$1 pat=$2; shift 2
  local j; j=$(submit --time=1 "$@")
  [ -n "$j" ] || { bad "$name: sbatch failed: $(cat "$tmp/sbatch.err")"; return; }
  if ! wait_done "$j" 90; then bad "$name: job $j still $(job_state "$j") after 90 s (a hang)"; timeout 15 scancel "$j"; return; fi
  local st; st=$(job_state "$j")
  if [ "$st" = FAILED ] && grep -qE -- "$pat" "$(job_out "$j")"; then
    ok "$name: job FAILED (exit $(job_exit "$j")) with \"$(grep -oE -m1 -- "$pat" "$(job_out "$j")")\" in its output"
  else
    bad "$name: job $st exit $(job_exit "$j"), output:"; cat "$(job_out "$j")" 2>/dev/null | tail -15
  fi
}

# --- serving, and draining on scancel ------------------------------------------------------------
drain_check signal
drain_check plain

# --- broken set-ups: a clear message, no hang ------------------------------------------------------
# (Slurm refuses more tasks per node than the node's 2 CPUs, even with --overcommit: the model has
# fewer heads instead -- 3, random weights -- so that the recipe's 2 ranks are too many)
serve_setup "$tmp/heads3" && sed -i 's/"hidden_size": 64/"hidden_size": 48/; s/"num_attention_heads": 4, "num_key_value_heads": 2/"num_attention_heads": 3, "num_key_value_heads": 1/' "$tmp/heads3/config.json"
fail_check "2 tasks for a model with 3 heads" 'tensor parallel size 2 does not divide num_attention_heads 3' \
  --ntasks-per-node=2 "$RECIPE" "$tmp/heads3" --load-format dummy
fail_check "missing model path" "sits-dist.sbatch: no model at '$tmp/no-such-model'" \
  --ntasks-per-node=2 "$RECIPE" "$tmp/no-such-model"
SITS_SRUN_MPI=none fail_check "srun without PMIx (--mpi=none)" "not built with SLURM's PMI support" \
  --ntasks-per-node=2 "$RECIPE" "$DEMO"
SITS_SRUN_MPI=pmix_v99 fail_check "an MPI plugin this Slurm lacks" "sits-dist.sbatch: this Slurm has no 'pmix_v99' MPI plugin" \
  --ntasks-per-node=2 "$RECIPE" "$DEMO"

# --- offline under srun: the same text as under mpirun -------------------------------------------
args=(--model "$DEMO" --prompt "What is a list?" --max-tokens 12 --temperature 0)
s_out=$(timeout 120 srun -n 2 --time=2 "$SITS" "${args[@]}" 2>"$tmp/srun.err"); s_rc=$?
m_out=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" "${args[@]}" 2>/dev/null)
if [ $s_rc -eq 0 ] && [ -n "$s_out" ] && [ "$s_out" = "$m_out" ]; then
  ok "srun -n 2 sits-dist --prompt (MpiDefault=pmix): the text mpirun -np 2 gives: \"$(printf '%s' "$s_out" | tr '\n' ' ' | head -c 80)\""
else
  bad "srun offline (exit $s_rc): '$s_out' vs mpirun '$m_out'"; tail -5 "$tmp/srun.err"
fi

# --- nothing left behind -----------------------------------------------------------------------------
cd / || exit 1
stop_cluster
left=$(leftovers)
if [ -z "$left" ]; then ok "cluster stopped: no job, daemon or task left"
else bad "left running after the cluster stopped: $(for p in $left; do tr '\0' ' ' < /proc/$p/cmdline; echo; done)"; fi
finish
