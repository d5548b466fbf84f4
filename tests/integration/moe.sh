#!/bin/sh
# [moe] Mixture-of-Experts fixtures (tests/ref/gen_moe_fixtures.py: Mixtral, Qwen3-MoE, Qwen2-MoE with a shared
# expert; 8 experts, top 2) against HF transformers on the CPU backend: logits within 1e-4 and the
# same greedy tokens at TP 1, 2 and 4 with the experts TP-sharded, and with expert parallelism over 2
# and 4 ranks (experts split whole, tokens dispatched and combined with all-to-all-v); --ep refusals;
# sits-dist's greedy tokens under --ep 2, --pp 2 and --pp 2 --tp 2 --ep 2 equal HF's (reference.json).
# [moe dev] Both routings (device: small steps; host: the rest) at TP 1 and 2 and EP 2 and 4, and the flag.
# The first failing configuration is named.
. "$top_srcdir/tests/integration/mpi_env.sh"
m="$top_srcdir/tests/fixtures/models"
t="$top_builddir/tests/integration/test_fixtures"
run() {   # ranks ep
  echo "moe: tp $1 ep $2"
  SITS_TEST_EP=$2 timeout 300 $SITS_MPIRUN -np "$1" "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" || { echo "FAIL: moe fixtures at tp $1 ep $2"; exit 1; }
}
"$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" || { echo "FAIL: moe fixtures at tp 1"; exit 1; }
# [moe dev] steps of up to 256 tokens (the default: every step above) route on the device (moe_route / moe_experts /
# moe_combine_slots); here every step takes the host path, then steps of up to 4 tokens the device one (the decode
# steps) and the prompts the host one
echo "moe: tp 1, host routing for every step"
SITS_TEST_MOE_DEV=-1 "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" || { echo "FAIL: moe fixtures at tp 1, host routing"; exit 1; }
echo "moe: tp 2, device routing up to 4 tokens a step"
SITS_TEST_MOE_DEV=4 timeout 300 $SITS_MPIRUN -np 2 "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" \
  || { echo "FAIL: moe fixtures at tp 2, device routing up to 4 tokens"; exit 1; }
run 2 1
run 4 1
run 2 2
run 4 4
# [moe dev] with EP the runs above route on the device (each rank its own experts' slots, the all-reduce sums the
# ranks); the host path's all-to-all-v dispatch for every step, and the two mixed (decode steps on the device)
echo "moe: tp 2 ep 2, host routing for every step"
SITS_TEST_EP=2 SITS_TEST_MOE_DEV=-1 timeout 300 $SITS_MPIRUN -np 2 "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" \
  || { echo "FAIL: moe fixtures at tp 2 ep 2, host routing"; exit 1; }
echo "moe: tp 4 ep 4, device routing up to 4 tokens a step"
SITS_TEST_EP=4 SITS_TEST_MOE_DEV=4 timeout 300 $SITS_MPIRUN -np 4 "$t" "$m/mixtral" "$m/qwen2_moe" "$m/qwen3_moe" \
  || { echo "FAIL: moe fixtures at tp 4 ep 4, device routing up to 4 tokens"; exit 1; }
# E % ep != 0 and ep != tp are refused at load, naming --ep
out=$(SITS_TEST_EP=3 timeout 120 $SITS_MPIRUN -np 2 "$t" "$m/mixtral" 2>&1)
echo "$out" | grep -q -- "--ep 3" || { echo "FAIL: --ep 3 at tp 2 was not refused with a message naming --ep"; echo "$out" | tail -5; exit 1; }
# the CLI: sits-dist --ep 2 over 2 ranks, greedy, continues prompt 1 of the Qwen2-MoE fixture as HF did
. "$top_srcdir/tests/integration/lib.sh"
prompt=$(ref_row "$m/qwen2_moe/reference.json" prompts 1)
want=$(ref_row "$m/qwen2_moe/reference.json" greedy 1 | cut -d, -f1-8)
got=$(timeout 120 $SITS_MPIRUN -np 2 "$top_builddir/sits-dist" --model "$m/qwen2_moe" --prompt-ids "$prompt" --max-tokens 8 \
  --temperature 0 --ignore-eos --ep 2 2>/dev/null | head -1)
[ "$got" = "$want" ] || { echo "FAIL: sits-dist --ep 2: $got, HF $want"; exit 1; }
echo "moe: sits-dist --ep 2 greedy $got (HF $want)"
# pipeline stages with experts: --pp 2, and --pp 2 --tp 2 --ep 2 (4 ranks), Mixtral prompt 2, 16 tokens
p=$(ref_row "$m/mixtral/reference.json" prompts 2)
want=$(ref_row "$m/mixtral/reference.json" greedy 2)
for flags in "-np 2 --pp 2" "-np 4 --pp 2 --tp 2 --ep 2"; do
  np=${flags%% --*}
  got=$(timeout 120 $SITS_MPIRUN $np "$top_builddir/sits-dist" --model "$m/mixtral" --prompt-ids "$p" --max-tokens 16 \
    --temperature 0 --ignore-eos ${flags#"$np "} 2>/dev/null | head -1)
  [ "$got" = "$want" ] || { echo "FAIL: sits-dist $flags: $got, HF $want"; exit 1; }
  echo "moe: sits-dist $flags greedy = HF"
done
# [moe dev] the flag: --moe-device-max-tokens 0 (host routing always) and 64 give HF's tokens; out of range is refused
p=$(ref_row "$m/qwen2_moe/reference.json" prompts 2)
want=$(ref_row "$m/qwen2_moe/reference.json" greedy 2)
for v in 0 64; do
  got=$(timeout 120 "$top_builddir/sits-dist" --model "$m/qwen2_moe" --prompt-ids "$p" --max-tokens 16 --temperature 0 --ignore-eos \
    --moe-device-max-tokens $v 2>/dev/null | head -1)
  [ "$got" = "$want" ] || { echo "FAIL: sits-dist --moe-device-max-tokens $v: $got, HF $want"; exit 1; }
  echo "moe: sits-dist --moe-device-max-tokens $v greedy = HF"
done
out=$(timeout 60 "$top_builddir/sits-dist" --model "$m/qwen2_moe" --prompt-ids "$p" --max-tokens 1 --moe-device-max-tokens 4096 2>&1)
echo "$out" | grep -q -- "--moe-device-max-tokens 4096" || { echo "FAIL: --moe-device-max-tokens 4096 was not refused by name"; echo "$out" | tail -3; exit 1; }
echo "moe: PASS"
