#!/bin/bash
# The adaptive batch controller on the real server (mpirun -np 2, CPU): with an unreachable
# inter-token target it halves the allowed batch down to one sequence, with a loose one it keeps
# the maximum; requests complete either way; the state is in /metrics.
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
stop() { for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done; wait $srv; srv=; }
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
load() { # 16 concurrent requests of 40 tokens; prints how many completed with 40 tokens
  "$PY" - "$url" <<'PYEOF'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
def go(i):
    body = {"model": "m", "prompt": "word %d " % i * 5, "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps(body).encode(),
                                                      {"Content-Type": "application/json"}), timeout=300)
    return json.load(r)["usage"]["completion_tokens"] == 40
with ThreadPoolExecutor(16) as ex:
    print(sum(ex.map(go, range(16))))
PYEOF
}
serve_start "$tmp/m" --max-num-seqs 16 --target-tpot-p99-ms 0.001 --controller-interval 0.05 || finish
[ "$(metric sits_sched_allowed_num_seqs)" = 16 ] && ok "controller starts at --max-num-seqs" || bad "initial allowance $(metric sits_sched_allowed_num_seqs)"
# load until the controller has halved all the way (each tick needs 10 samples in its window; on a
# busy machine one round may not give it enough ticks)
for round in 1 2 3 4 5; do
  done_n=$(load)
  [ "$done_n" = 16 ] || break
  [ "$(metric sits_sched_allowed_num_seqs)" = 1 ] && break
done
[ "$done_n" = 16 ] && ok "16 requests complete under a shrinking batch ($round round(s))" || bad "completed $done_n of 16"
a=$(metric sits_sched_allowed_num_seqs); p=$(metric sits_sched_itl_p99_seconds)
[ "$a" = 1 ] && ok "unreachable target: allowance halved to $a (itl p99 $p s)" || bad "allowance $a with an unreachable target"
stop
serve_start "$tmp/m" --max-num-seqs 16 --target-tpot-p99-ms 100000 --controller-interval 0.05 || finish
done_n=$(load)
a=$(metric sits_sched_allowed_num_seqs)
[ "$done_n" = 16 ] && [ "$a" = 16 ] && ok "loose target: allowance stays 16" || bad "loose target: allowance $a, completed $done_n"
stop
finish
