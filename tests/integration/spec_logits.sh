#!/bin/bash
# The premise of bit-exact speculative decoding on the CPU backend (tests/integration/spec_logits.c):
# a verification step's logits equal, bit for bit, those of one position per step -- alone, in a mixed
# step, and after a rollback over stale KV -- on the demo model at TP 1 and TP 2.
. "$top_srcdir/tests/integration/lib.sh"
DEMO="$top_srcdir/models/demo"
[ -f "$DEMO/model.safetensors" ] || { echo "SKIP: models/demo is missing"; exit 77; }
for np in 1 2; do
  timeout 300 $SITS_MPIRUN -np $np "$top_builddir/tests/integration/spec_logits" "$DEMO" && ok "tp $np: bit-identical logits" \
    || bad "tp $np: logits differ"
done
finish
