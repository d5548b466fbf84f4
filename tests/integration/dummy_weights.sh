#!/bin/bash
# [dummy] --load-format dummy draws the weights where they live (be->ops->dummy_rows / dummy_rows_fp8: the cpu
# backend's own memory, kernels/dummy.cu on a GPU) instead of on the host; SITS_DUMMY_ON_HOST=1 keeps the host
# generator. Both must hold the same model (util/dummy.h): greedy tokens of a few prompts equal, in 16-bit weights
# (fp32 on the cpu, bf16 on cuda) and with --quant fp8, at --tp 1 and --tp 2 (each rank draws its slice; a row's fp8
# scale comes from the whole row), on a dense model and a Qwen3-MoE-shaped one (experts: the loader's MoE paths). The load
# times of both ways are printed.
# DUMMY_DEVICE=cuda (tests/gpu/dummy_cuda.sh): on one GPU, an 8B-shaped model of 4 layers.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
dev=${DUMMY_DEVICE:-cpu}
mkdir -p "$tmp/m"
if [ "$dev" = cuda ]; then
  sed 's/"num_hidden_layers": 32/"num_hidden_layers": 4/' "$top_srcdir/bench/configs/llama3-8b/config.json" > "$tmp/m/config.json"
  tps="1"
else
  cat > "$tmp/m/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 3013, "hidden_size": 256, "intermediate_size": 704, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
 "hidden_act": "silu", "bos_token_id": 3000, "eos_token_id": 3001}
JSON
  tps="1 2"
fi
# a Qwen3-MoE-shaped model too (the fixture's config, 112 tokens): its experts go through the loader's MoE paths
mkdir -p "$tmp/moe" && cp "$FIX/qwen3_moe/config.json" "$tmp/moe/"
for model in m moe; do
if [ $model = m ]; then prompts="1,2,3 17,400,5,99,1000,7 2000,2001,2002,2003,2004,2005,2006,2007,2008,2009,2010,2011"
else prompts="1,2,3 17,40,5,99,100,7 20,21,22,23,24,25,26,27,28,29,30,31"; fi
for tp in $tps; do
  for q in bf16 fp8; do
    qa=(); [ $q = fp8 ] && qa=(--quant fp8)
    for where in host dev; do
      h=0; [ $where = host ] && h=1
      : > "$tmp/$where.out"
      for p in $prompts; do
        SITS_DUMMY_ON_HOST=$h timeout 300 $SITS_MPIRUN -np $tp "$SITS" --model "$tmp/$model" --device "$dev" --tp $tp --load-format dummy \
          "${qa[@]}" --prompt-ids "$p" --max-tokens 12 --temperature 0 --seed 3 >> "$tmp/$where.out" 2> "$tmp/$where.err" \
          || { bad "$model tp $tp $q $where: exit $?"; tail -5 "$tmp/$where.err"; }
      done
      sed -n 's/.*loaded .* in \([0-9.]*\) s.*/\1/p' "$tmp/$where.err" | head -1 > "$tmp/$where.t"
    done
    n=$(wc -l < "$tmp/host.out")
    if [ "$n" -eq 3 ] && cmp -s "$tmp/host.out" "$tmp/dev.out"; then
      ok "$model $dev tp $tp $q: drawn where they live = drawn on the host ($n prompts' greedy tokens; last load $(cat "$tmp/host.t") s on the host, $(cat "$tmp/dev.t") s in place)"
    else bad "$model $dev tp $tp $q: tokens differ"; paste -d '|' "$tmp/host.out" "$tmp/dev.out" | head -3; fi
  done
done
done
finish
