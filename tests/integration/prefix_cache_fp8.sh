#!/bin/sh
# [fp8 kv] tests/integration/prefix_cache.sh with --kv-cache-dtype fp8: cached prefix blocks hold E4M3
# bytes + scales and are shared read-only; the outputs must equal those of an fp8 server without the
# prefix cache (on the CPU each token's quantised KV depends only on its own row, so reuse is exact).
PC_FLAGS="--kv-cache-dtype fp8" exec "$top_srcdir/tests/integration/prefix_cache.sh"
