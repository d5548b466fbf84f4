#!/bin/sh
# [fp8 kv] --kv-cache-dtype fp8 (E4M3) through the CLI: tests/integration/kv_int8_tp2.sh with
# KV_TP2_DTYPE=fp8 -- greedy tokens of TP = 2 (mpirun -np 2, each rank quantising its own KV heads)
# equal those of TP = 1 on every fixture model, the engine reports an F8_E4M3 cache, an unknown
# dtype is refused with a message.
KV_TP2_DTYPE=fp8 exec "$top_srcdir/tests/integration/kv_int8_tp2.sh"
