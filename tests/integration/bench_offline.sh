#!/bin/sh
# [bench] bench/sits-bench-offline and bench/trtllm_table.sh on the cpu backend, on a tiny model with the shape
# family of bench/configs/llama3.1-8b (its llama3 RoPE scaling, 128k positions, the eos list; sizes cut down here):
# every request ends with exactly --output tokens (output tok/s x seconds = requests x output), the JSON carries the
# settings and the KV size (--max-num-seqs sequences of input + output tokens in 16-token blocks when the KV is not
# sized by --gpu-memory-utilization); trtllm_table.sh prints its row beside TensorRT-LLM's figure, writes JSON and
# passes its --gpu-memory-utilization. Refused: --gpu-memory-utilization outside [0, 1]; bench/run_decode.sh
# --peer gpt-fast without a gpt-fast checkout, and an unknown peer.
. "$top_srcdir/tests/integration/lib.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to write the config and read the JSON"; exit 77; }
b="$top_builddir/bench/sits-bench-offline"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/m"
python3 - "$top_srcdir/bench/configs/llama3.1-8b/config.json" "$tmp/m/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
         vocab_size=512)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
if timeout 300 "$b" --model "$tmp/m" --load-format dummy --device cpu --threads 2 --input 40 --output 8 --requests 7 \
    --max-num-seqs 3 --max-num-batched-tokens 64 --json "$tmp/o.json" > "$tmp/o.txt" 2>&1; then
  ok "sits-bench-offline ran (7 requests of 40 + 8, 3 at a time)"
else
  bad "sits-bench-offline: rc $?"; cat "$tmp/o.txt"
fi
grep -q "^7 requests in" "$tmp/o.txt" && ok "its summary line" || bad "no summary line"
python3 - "$tmp/o.json" <<'PY' && ok "JSON: every output token counted, the settings, the KV for 3 sequences" || bad "JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["bench"] == "offline" and j["requests"] == 7 and j["input"] == 40 and j["output"] == 8, j
assert j["max_num_seqs"] == 3 and j["gpu_memory_utilization"] == 0.0, j
assert abs(j["output_tok_s"] * j["seconds"] - 7 * 8) <= 1e-6 * 56, (j["output_tok_s"], j["seconds"])
assert j["kv_blocks"] == 3 * ((40 + 8 + 15) // 16), j["kv_blocks"]
PY
for v in 1.5 -0.1 x; do
  timeout 60 "$b" --model "$tmp/m" --device cpu --input 8 --output 1 --requests 1 --gpu-memory-utilization "$v" > "$tmp/bad.txt" 2>&1
  rc=$?
  [ $rc -ne 0 ] && grep -q "gpu-memory-utilization in \[0, 1\]" "$tmp/bad.txt" && ok "--gpu-memory-utilization $v refused (rc $rc)" ||
    { bad "--gpu-memory-utilization $v: rc $rc"; cat "$tmp/bad.txt"; }
done
if B="$top_builddir" OUT="$tmp/t" timeout 300 bash "$top_srcdir/bench/trtllm_table.sh" --device cpu --model "$tmp/m" --rows 128/128 \
    --scale 0.0005 --max-num-seqs 4 --max-num-batched-tokens 256 --gpu-memory-utilization 0.5 -- --threads 2 > "$tmp/t.txt" 2>&1; then
  ok "trtllm_table.sh ran one row"
else
  bad "trtllm_table.sh: rc $?"; cat "$tmp/t.txt"
fi
grep -q "^| 128/128 | 15 (30000) | [0-9]* | [0-9.]* | 27911 | [0-9.]* |$" "$tmp/t.txt" && ok "its row beside TensorRT-LLM's 27,911" ||
  { bad "no 128/128 row"; cat "$tmp/t.txt"; }
python3 - "$tmp/t/trtllm-table-8b.json" "$tmp/t/trtllm-8b-128-128.json" <<'PY' && ok "table JSON and the row's offline JSON" || bad "trtllm_table JSON"
import json, sys
t, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert t["bench"] == "trtllm_table" and t["gpu_memory_utilization"] == 0.5 and len(t["rows"]) == 1, t
row = t["rows"][0]
assert row["isl"] == 128 and row["osl"] == 128 and row["requests"] == 15 and row["trtllm_output_tok_s"] == "27911", row
assert r["gpu_memory_utilization"] == 0.5 and r["requests"] == 15 and r["max_num_seqs"] == 4, r
assert abs(row["output_tok_s"] - r["output_tok_s"]) <= 0.5, (row, r["output_tok_s"])
PY
rd="$top_srcdir/bench/run_decode.sh"
bash "$rd" --build "$top_builddir" --peer gpt-fast --device cpu > "$tmp/p.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "needs --gpt-fast DIR" "$tmp/p.txt" && ok "run_decode.sh --peer gpt-fast without a checkout refused" ||
  { bad "--peer gpt-fast without --gpt-fast: rc $rc"; cat "$tmp/p.txt"; }
bash "$rd" --build "$top_builddir" --peer vllm --device cpu > "$tmp/p.txt" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "peer hf or gpt-fast" "$tmp/p.txt" && ok "run_decode.sh --peer vllm refused" || { bad "--peer vllm: rc $rc"; cat "$tmp/p.txt"; }
finish
