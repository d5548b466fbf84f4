#!/bin/bash
# trtllm_table.sh -- TensorRT-LLM's published throughput table, measured the way they measure it, with
# sits-bench-offline beside each of their figures (issue #22, deliverable 5). Not a test.
#
# TensorRT-LLM's method (docs/source/performance/perf-overview.md, "Reproducing Benchmarked Results"):
# prepare_dataset.py token-norm-dist with --input-stdev 0 --output-stdev 0 (every request exactly ISL
# random token ids in, OSL out), $num_requests per row from their table, all queued at once
# (trtllm-bench throughput: offline, maximum load), reported metric: output tokens/s. sits-bench-offline
# is that: N requests of IN random ids each generating exactly OUT tokens (eos ignored), all queued,
# continuous batching with chunked prefill, output tok/s from the first step to the last token.
#
#   bench/trtllm_table.sh [--shape 8b|70b] [--quant fp8] [--kv-cache-dtype fp8] [--scale 1] [--rows 128/128,2048/128]
#                         [--max-num-seqs 512] [--max-num-batched-tokens 8192] [--gpu-memory-utilization 0.9]
#                         [--out DIR] [-- extra offline args]
# --kv-cache-dtype (default fp8, as TensorRT-LLM's FP8 rows; bf16 KV of 512 sequences of 2176 tokens, 136 GiB
# for 8B, does not fit an H200 beside the weights)
#   (--device cpu --model DIR: a smoke run of the script itself on a small model)
#
# The KV cache takes what --gpu-memory-utilization (default 0.9, as trtllm-bench's free-memory fraction and vLLM's
# default) of the GPU leaves after the weights; --max-num-seqs is then an upper bound and the free KV blocks set
# the batch of the long rows (5000/500: ~320 sequences of FP8 KV on an H200 for 8B). --gpu-memory-utilization 0
# sizes the KV for --max-num-seqs whole sequences instead (refused where that does not fit).
# --scale F runs F x their request count per row (at least --max-num-seqs x 2 requests, so the batch
# still fills and drains twice; the row's "requests" column says what ran). The full table at scale 1
# is about 40 minutes of H200 time for 8B; a device session has 30, hence the option -- a scaled row
# includes proportionally more ramp-up and tail and understates the steady state.
# Environment: B (build dir, default ./build), top (source dir, default this script's parent).
# Output: a markdown table on stdout and $OUT/trtllm-table-<shape>.json (rows + settings + commit).
set -u
top=${top:-$(cd "$(dirname "$0")/.." && pwd)}
B=${B:-$PWD}
shape=8b quant=fp8 kvdt=fp8 scale=1 rows='' seqs=512 budget=8192 out=${OUT:-$PWD} device=cuda model='' gmu=0.9
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --shape) shape=$2; shift 2 ;;
    --quant) quant=$2; shift 2 ;;
    --kv-cache-dtype) kvdt=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --max-num-seqs) seqs=$2; shift 2 ;;
    --max-num-batched-tokens) budget=$2; shift 2 ;;
    --gpu-memory-utilization) gmu=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "trtllm_table.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $shape in   # their models: Llama-3.1-8B and Llama-3.3-70B (128k context: the 20000/2000 row fits)
  8b) cfg=$top/bench/configs/llama3.1-8b ;;
  70b) cfg=$top/bench/configs/llama3.3-70b ;;
  *) echo "trtllm_table.sh: --shape 8b or 70b" >&2; exit 2 ;;
esac
[ -n "$model" ] && cfg=$model
off=$B/bench/sits-bench-offline
[ -x "$off" ] || { echo "trtllm_table.sh: $off not built (make -C \$B bench/sits-bench-offline)" >&2; exit 2; }
mkdir -p "$out"

# ISL/OSL, TensorRT-LLM's $num_requests, their H200 FP8 TP1 output tok/s for Llama-3.1-8B and
# Llama-3.3-70B ("-": not published for that row)
table="128/128 30000 27911 3803
128/2048 3000 26221 4336
128/4096 1500 18027 -
500/2000 3000 20770 3666
1000/1000 3000 17744 2909
1000/2000 1500 16828 -
2048/128 3000 3538 442
2048/2048 1500 12194 2003
5000/500 1500 3902 566
20000/2000 1000 1804 -"

commit=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)
json="$out/trtllm-table-$shape.json"
printf '| ISL / OSL | requests (theirs) | sits-dist output tok/s | mean decode batch | TensorRT-LLM output tok/s | ratio |\n|---|---|---|---|---|---|\n'
entries=()
while read -r io nreq t8 t70; do
  [ -n "$rows" ] && case ",$rows," in *",$io,"*) ;; *) continue ;; esac
  in=${io%/*} o=${io#*/}
  theirs=$t8; [ "$shape" = 70b ] && theirs=$t70
  n=$(awk -v n="$nreq" -v s="$scale" -v m="$seqs" 'BEGIN { r = int(n * s + 0.5); if (r < 2 * m) r = 2 * m; if (r > n) r = n; print r }')
  log=$out/trtllm-$shape-$in-$o.log
  rj=$out/trtllm-$shape-$in-$o.json
  "$off" --model "$cfg" --load-format dummy --device "$device" --quant "$quant" --kv-cache-dtype "$kvdt" --input "$in" --output "$o" --requests "$n" \
    --max-num-seqs "$seqs" --max-num-batched-tokens "$budget" --gpu-memory-utilization "$gmu" --commit "$commit" --json "$rj" \
    "${extra[@]}" > "$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || [ ! -f "$rj" ]; then
    printf '| %s | %s (%s) | failed (rc %s, %s) | | %s | |\n' "$io" "$n" "$nreq" "$rc" "$(tail -1 "$log" | cut -c1-80)" "$theirs"
    entries+=("{\"isl\": $in, \"osl\": $o, \"requests\": $n, \"their_requests\": $nreq, \"failed\": true, \"trtllm_output_tok_s\": \"$theirs\"}")
    continue
  fi
  tok=$(python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["output_tok_s"])' "$rj")
  mb=$(sed -n 's/.*mean decode batch \([0-9.]*\).*/\1/p' "$log" | tail -1)
  ratio=-; [ "$theirs" != - ] && ratio=$(awk -v a="$tok" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')
  printf '| %s | %s (%s) | %s | %s | %s | %s |\n' "$io" "$n" "$nreq" "$tok" "$mb" "$theirs" "$ratio"
  entries+=("{\"isl\": $in, \"osl\": $o, \"requests\": $n, \"their_requests\": $nreq, \"output_tok_s\": $tok, \"mean_decode_batch\": ${mb:-null}, \"trtllm_output_tok_s\": \"$theirs\", \"ratio\": \"$ratio\"}")
done <<< "$table"
{
  printf '{"bench": "trtllm_table", "shape": "%s", "quant": "%s", "kv_cache_dtype": "%s", "scale": %s, "max_num_seqs": %s, "max_num_batched_tokens": %s, "gpu_memory_utilization": %s, "commit": "%s", "rows": [' \
    "$shape" "$quant" "$kvdt" "$scale" "$seqs" "$budget" "$gmu" "$commit"
  (IFS=,; printf '%s' "${entries[*]}")
  printf ']}\n'
} > "$json"
python3 -m json.tool "$json" > /dev/null && echo "wrote $json"
