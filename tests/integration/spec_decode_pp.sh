#!/bin/bash
# Speculative decoding with pipeline parallelism (mpirun -np 2 --pp 2, CPU, demo model): the last
# stage samples every verification row and sends the tokens back like any step; the texts, usage and
# finish reasons equal those of the same pipeline without speculation (logprobs are not served with
# --pp, so the workload compares texts), and stops land inside accepted runs.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
serve_tmp
DEMO="$top_srcdir/models/demo"
[ -f "$DEMO/model.safetensors" ] || { echo "SKIP: models/demo is missing"; exit 77; }
W="$top_srcdir/tests/integration/spec_decode.py"
stop() { kill -TERM $srv; wait $srv; srv=; }
serve_np 2 "$DEMO" --pp 2 --block-size 8 || finish
"$PY" "$W" run "$url" "$tmp/off.json" --text-only || bad "pp 2: workload without speculation"
stop
SITS_LOG_LEVEL=debug SITS_LOG_SUBSYS=sched serve_np 2 "$DEMO" --pp 2 --block-size 8 \
  --speculative-config '{"method": "ngram", "num_speculative_tokens": 5}' || finish
"$PY" "$W" run "$url" "$tmp/on.json" --opt-out-odd --text-only || bad "pp 2: workload with speculation"
accepted=$("$PY" "$W" metric "$url" sits_spec_accepted_tokens_total)
[ "${accepted:-0}" -gt 0 ] && ok "pp 2: $accepted drafted tokens accepted" || bad "pp 2: nothing accepted"
stop
"$PY" "$W" compare "$tmp/off.json" "$tmp/on.json" && ok "pp 2: outputs identical with and without speculation" \
  || bad "pp 2: speculation changed the output"
n=$(grep -c "inside an accepted run" "$tmp/err")
[ "$n" -gt 0 ] && ok "pp 2: $n request(s) stopped inside an accepted run" || bad "pp 2: no stop inside an accepted run"
finish
