#!/bin/sh
# [moe] Mixture-of-Experts fixtures (tests/ref/gen_moe_fixtures.py: Mixtral, Qwen2-MoE with a shared
# expert; 8 experts, top 2) against HF transformers on the CPU backend: logits within 1e-4 and the
# same greedy tokens at TP 1, 2 and 4 with the experts TP-sharded, and with expert parallelism over 2
# and 4 ranks (experts split whole, tokens dispatched and combined with all-to-all-v). The first
# failing configuration is named.
. "$top_srcdir/tests/integration/mpi_env.sh"
m="$top_srcdir/tests/fixtures/models"
t="$top_builddir/tests/integration/test_fixtures"
run() {   # ranks ep
  echo "moe: tp $1 ep $2"
  SITS_TEST_EP=$2 timeout 300 $SITS_MPIRUN -np "$1" "$t" "$m/mixtral" "$m/qwen2_moe" || { echo "FAIL: moe fixtures at tp $1 ep $2"; exit 1; }
}
"$t" "$m/mixtral" "$m/qwen2_moe" || { echo "FAIL: moe fixtures at tp 1"; exit 1; }
run 2 1
run 4 1
run 2 2
run 4 4
# E % ep != 0 and ep != tp are refused at load, naming --ep
out=$(SITS_TEST_EP=3 timeout 120 $SITS_MPIRUN -np 2 "$t" "$m/mixtral" 2>&1)
echo "$out" | grep -q -- "--ep 3" || { echo "FAIL: --ep 3 at tp 2 was not refused with a message naming --ep"; echo "$out" | tail -5; exit 1; }
echo "moe: PASS"
