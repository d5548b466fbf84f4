#!/bin/bash
# [moe] /metrics load balance of a mixture-of-experts model: the server (mpirun -np 2, --ep 2, random
# Qwen2-MoE-shaped weights, the byte-level fixture tokenizer) reports sits_moe_expert_tokens_total
# for each of the 8 experts, and after one request they add up to tokens forwarded x layers x top-k:
# (prompt_tokens + completion_tokens - 1) x 2 x 2, the usage the server answered. [moe dev] The same with
# TP-sliced experts, whose small steps route on the device (counted there), and with host routing only.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
serve_tmp
serve_setup "$tmp/m"
cat > "$tmp/m/config.json" <<'JSON'
{"model_type": "qwen2_moe", "vocab_size": 3013, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
 "hidden_act": "silu", "bos_token_id": 3000, "eos_token_id": 3001, "num_experts": 8, "num_experts_per_tok": 2,
 "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "norm_topk_prob": false}
JSON
# one request to a server of 2 ranks with FLAGS; the 8 series and their sum ((pt + ct - 1) x 2 layers x top 2)
check() {
  serve_np 2 "$tmp/m" --load-format dummy "$@" || return
  local r pt ct m series sum want
  r=$(curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model":"m","prompt":"Hello mixture of experts","max_tokens":6,"temperature":0}')
  read -r pt ct <<< "$($PY -c 'import json,sys; u=json.loads(sys.argv[1])["usage"]; print(u["prompt_tokens"], u["completion_tokens"])' "$r")"
  [ -n "$ct" ] && ok "$*: completion: $pt prompt tokens, $ct generated" || bad "$*: completion failed: $r"
  want=$(( (pt + ct - 1) * 2 * 2 ))
  # the device path's counters are read back at most 4 times a second: the metric may lag the answer by that
  for _ in $(seq 30); do
    m=$(curl -s "$url/metrics")
    sum=$(echo "$m" | awk '/^sits_moe_expert_tokens_total\{/ { s += $2 } END { print s + 0 }')
    [ "$sum" = "$want" ] && break
    sleep 0.1
  done
  series=$(echo "$m" | grep -c '^sits_moe_expert_tokens_total{expert="[0-7]"}')
  [ "$series" = 8 ] && ok "$*: 8 expert series" || bad "$*: expert series: $series (want 8)"
  [ "$sum" = "$want" ] && ok "$*: routed tokens $sum = ($pt + $ct - 1) x 2 layers x top 2" || bad "$*: routed tokens $sum, want $want"
  last=$(echo "$m" | grep '^sits_moe_expert_tokens_total{' | head -8 | tr '\n' ' ')
  echo "$last"
  kill -TERM $srv; wait $srv; srv=
}
check --ep 2                          # host routing (expert parallelism)
check --tp 2                          # [moe dev] every step of the request has at most 256 tokens: device routing
dev=$last
check --tp 2 --moe-device-max-tokens 0    # host routing for every step
# on the cpu both paths make the same floats, so the same experts: the same counts expert by expert
[ "$dev" = "$last" ] && ok "device and host routing count the same tokens for each expert" || bad "per-expert counts differ: device $dev, host $last"
finish
