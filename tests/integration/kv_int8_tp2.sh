#!/bin/sh
# [int8 kv] --kv-cache-dtype int8 through the CLI: the greedy tokens of TP = 2 (mpirun -np 2, heads
# split over the ranks, each rank quantising its own KV heads) equal those of TP = 1 on every
# fixture model (the CPU path is exact per rank); the engine reports an I8 cache; an unknown dtype
# name is refused with a message; bf16 KV runs on the CPU.
# [fp8 kv] KV_TP2_DTYPE=fp8 (tests/integration/kv_fp8_tp2.sh) runs the same with --kv-cache-dtype fp8,
# expecting an F8_E4M3 cache.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dt=${KV_TP2_DTYPE:-int8}
case $dt in int8) name=I8 ;; fp8) name=F8_E4M3 ;; *) echo "KV_TP2_DTYPE: int8 or fp8"; exit 1 ;; esac
for model in llama3 qwen2 mistral_sharded llama_small; do
  for row in 2 3; do
    ids=$(ref_row "$FIX/$model/reference.json" prompts $row)
    flags="--model $FIX/$model --prompt-ids $ids --max-tokens 16 --temperature 0 --ignore-eos --kv-cache-dtype $dt --device cpu"
    SITS_LOG_LEVEL=info timeout 120 "$SITS" $flags > "$tmp/tp1" 2> "$tmp/err1" || { bad "$model prompt $row: tp 1 failed"; cat "$tmp/err1"; continue; }
    timeout 120 $SITS_MPIRUN -np 2 "$SITS" $flags > "$tmp/tp2" 2> "$tmp/err2" || { bad "$model prompt $row: tp 2 failed"; cat "$tmp/err2"; continue; }
    grep -q "KV blocks of .*$name" "$tmp/err1" || bad "$model: the engine did not report an $name KV cache"
    if [ -s "$tmp/tp1" ] && cmp -s "$tmp/tp1" "$tmp/tp2"; then ok "$model prompt $row: tp 2 = tp 1 with $dt KV ($(head -c 60 "$tmp/tp1"))"
    else bad "$model prompt $row: tp 1 '$(cat "$tmp/tp1")' vs tp 2 '$(cat "$tmp/tp2")'"; fi
  done
done
ids=$(ref_row "$FIX/llama3/reference.json" prompts 2)
"$SITS" --model "$FIX/llama3" --prompt-ids "$ids" --max-tokens 2 --kv-cache-dtype int4 --device cpu > /dev/null 2> "$tmp/e" \
  && bad "--kv-cache-dtype int4 accepted" || { grep -q "kv-cache-dtype" "$tmp/e" && ok "--kv-cache-dtype int4 refused" || bad "no message for int4: $(cat "$tmp/e")"; }
"$SITS" --model "$FIX/llama3" --prompt-ids "$ids" --max-tokens 4 --temperature 0 --kv-cache-dtype bf16 --device cpu > "$tmp/b" 2>&1 \
  && ok "--kv-cache-dtype bf16 on the cpu" || bad "--kv-cache-dtype bf16 failed: $(cat "$tmp/b")"
finish
