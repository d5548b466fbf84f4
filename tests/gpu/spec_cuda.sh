#!/bin/bash
# [speculative] Greedy speculative decoding on the GPU (issue #23: "same tokens on GPUs where bf16 batch-shape
# noise allows: say how often it differs"): the demo model served on cuda without and with the n-gram drafter
# (tests/integration/spec_decode.py's workload: copy prompts in a batch, prefix-cache extensions, loops,
# max_tokens, stop ids / strings, eos). A verification step computes a token's logits from sums in another order
# than the decode step (more query rows in attention; linears of k + 1 tokens on the tensor-core GEMV, one token on
# the ring GEMV), so a greedy request may depart -- but only where its two candidate tokens were a near tie
# (logprobs within 0.05 nats). Prints how many requests are identical. Then the same with SITS_GEMV_MMA=2 (one
# token on the tensor-core GEMV too: decode and verification linears of the same bits).
# SPEC_DEVICE=cpu runs it on the CPU backend (every request must then be identical). Exit 77 without a GPU.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
dev=${SPEC_DEVICE:-cuda}
if [ "$dev" = cuda ]; then
  n=$(sits_gpu_count)
  [ "${n:-0}" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
fi
serve_tmp
DEMO="$top_srcdir/models/demo"
[ -f "$DEMO/model.safetensors" ] || { echo "SKIP: models/demo is missing"; exit 77; }
W="$top_srcdir/tests/integration/spec_decode.py"
SPEC='{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}'
stop() { kill -TERM $srv; wait $srv; srv=; }
for mma in 1 2; do
  export SITS_GEMV_MMA=$mma
  serve_np 1 "$DEMO" --device "$dev" --block-size 8 || finish
  "$PY" "$W" run "$url" "$tmp/off$mma.json" || bad "SITS_GEMV_MMA=$mma: workload without speculation"
  stop
  serve_np 1 "$DEMO" --device "$dev" --block-size 8 --speculative-config "$SPEC" || finish
  "$PY" "$W" run "$url" "$tmp/on$mma.json" || bad "SITS_GEMV_MMA=$mma: workload with speculation"
  accepted=$("$PY" "$W" metric "$url" sits_spec_accepted_tokens_total)
  [ "${accepted:-0}" -gt 0 ] && ok "SITS_GEMV_MMA=$mma: $accepted drafted tokens accepted" || bad "SITS_GEMV_MMA=$mma: nothing accepted"
  stop
  "$PY" "$W" ties "$tmp/off$mma.json" "$tmp/on$mma.json" > "$tmp/ties" 2>&1
  rc=$?
  sed 's/^/  /' "$tmp/ties"
  summary=$(tail -1 "$tmp/ties")
  if [ "$dev" = cpu ]; then
    case "$summary" in *", 0 departed at a near tie"*", 0 otherwise") ok "cpu: every greedy request identical ($summary)" ;;
      *) bad "cpu: speculation changed greedy output: $summary" ;; esac
  else
    [ $rc = 0 ] && ok "SITS_GEMV_MMA=$mma: greedy speculative == plain but at near ties: $summary" \
      || bad "SITS_GEMV_MMA=$mma: a departure without a tie: $summary"
  fi
done
unset SITS_GEMV_MMA
finish
