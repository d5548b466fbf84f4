#!/bin/bash
# No hangs: a rank that fails at start-up, dies mid-run (kill -9) or stalls (SIGSTOP) -- mid-run, or before
# MPI start-up completes -- ends the whole job with a message and a non-zero status, within a bound.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'pkill -KILL -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT

# 1. start-up failure on rank 1 only (MPMD: rank 1 gets a truncated checkpoint)
mkdir -p "$tmp/corrupt" && cp "$FIX/llama3/config.json" "$tmp/corrupt/"
head -c 50000 "$FIX/llama3/model.safetensors" > "$tmp/corrupt/model.safetensors"
t0=$(date +%s)
timeout 60 $SITS_MPIRUN -np 1 "$SITS" --model "$FIX/llama3" --prompt-ids 1,2 --temperature 0 : \
  -np 1 "$SITS" --model "$tmp/corrupt" --prompt-ids 1,2 --temperature 0 > "$tmp/o" 2> "$tmp/e"; rc=$?
dt=$(( $(date +%s) - t0 ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $dt -le 10 ] && grep -q "model load failed on rank 1" "$tmp/e"; then
  ok "start-up failure on rank 1: job exits ($rc) in ${dt}s naming rank 1"
else bad "start-up failure: rc $rc after ${dt}s"; cat "$tmp/e"; fi

# a model big enough to keep decoding for a while (random weights)
mkdir -p "$tmp/big"
cat > "$tmp/big/config.json" <<'JSON'
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "hidden_size": 256,
 "intermediate_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 4,
 "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2}
JSON
run_long() { # extra args...
  $SITS_MPIRUN -np 2 "$SITS" --model "$tmp/big" --load-format dummy --prompt-ids 1,2,3 --max-tokens 8000 \
    --ignore-eos --temperature 0 "$@" > "$tmp/o" 2> "$tmp/e" &
  job=$!
  for _ in $(seq 50); do pid1=$(rank_pid 1 "$tmp/big") && break; sleep 0.2; done
  # past start-up (rank 0 prints "loaded ..." after the load's collectives, which have no step deadline): on a
  # loaded machine a SIGSTOP before then left the job waiting in start-up
  for _ in $(seq 300); do grep -q "^loaded " "$tmp/e" 2>/dev/null && break; sleep 0.1; done
  sleep 1
}

# 2. kill -9 of rank 1 mid-run
run_long
if [ -n "${pid1:-}" ]; then
  t0=$(date +%s); kill -9 "$pid1"
  for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  dt=$(( $(date +%s) - t0 ))
  if kill -0 $job 2>/dev/null; then bad "kill -9: job still running after ${dt}s"; kill -9 $job
  else wait $job; rc=$?; [ $rc -ne 0 ] && ok "kill -9 rank 1: job ended ($rc) in ${dt}s" || bad "kill -9: rc 0"; fi
else bad "kill -9: rank 1 not found"; kill $job; fi
grep -qiE "signal 9|killed|exited" "$tmp/e" && ok "kill -9 reported" || { bad "kill -9 not reported"; tail -5 "$tmp/e"; }

# 3. SIGSTOP of rank 1: rank 0's collective deadline (3 s) aborts the job
run_long --step-timeout 3
if [ -n "${pid1:-}" ]; then
  t0=$(date +%s); kill -STOP "$pid1"
  for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  dt=$(( $(date +%s) - t0 ))
  if kill -0 $job 2>/dev/null; then bad "SIGSTOP: job still running after ${dt}s"; kill -CONT "$pid1"; kill -9 $job
  else wait $job; rc=$?; [ $rc -ne 0 ] && ok "SIGSTOP rank 1: job ended ($rc) in ${dt}s" || bad "SIGSTOP: rc 0"; fi
  kill -9 "$pid1" 2>/dev/null
else bad "SIGSTOP: rank 1 not found"; kill $job; fi
grep -q "did not complete within 3.0 s" "$tmp/e" && ok "stall reported by the deadline" || { bad "stall not reported"; tail -5 "$tmp/e"; }

# 4. SIGSTOP of rank 1 as soon as it exists (before MPI start-up completes: Open MPI's MPI_Init has no deadline of
#    its own): --startup-timeout 4 ends rank 0, and with it the job (should the stop land after MPI start-up, the
#    3 s deadline of the collectives after it does)
$SITS_MPIRUN -np 2 "$SITS" --model "$tmp/big" --load-format dummy --prompt-ids 1,2,3 --max-tokens 8 --startup-timeout 4 --step-timeout 3 \
  > "$tmp/o" 2> "$tmp/e" &
job=$!
pid1=
for _ in $(seq 200); do pid1=$(rank_pid 1 "$tmp/big") && break; sleep 0.01; done
if [ -n "$pid1" ]; then
  kill -STOP "$pid1"; t0=$(date +%s)
  for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  dt=$(( $(date +%s) - t0 ))
  if kill -0 $job 2>/dev/null; then bad "SIGSTOP at start-up: job still running after ${dt}s"; kill -CONT "$pid1"; kill -9 $job
  else wait $job; rc=$?
    if [ $rc -ne 0 ] && grep -q "MPI start-up did not complete within 4.0 s" "$tmp/e"; then ok "SIGSTOP at start-up: job ended ($rc) in ${dt}s with the start-up deadline's message"
    elif [ $rc -ne 0 ] && grep -q "did not complete within 3.0 s" "$tmp/e"; then ok "SIGSTOP at start-up came after MPI start-up: a collective's deadline ended the job ($rc) in ${dt}s"
    else bad "SIGSTOP at start-up: rc $rc after ${dt}s"; tail -5 "$tmp/e"; fi
  fi
  kill -9 "$pid1" 2>/dev/null
else bad "SIGSTOP at start-up: rank 1 not found"; kill $job; fi
finish
