#!/bin/bash
# Structured output on every layout (CPU, random weights, mpirun): 16 concurrent guided_regex requests
# (temperature 1, a seed each) give texts that fully match the regex (Python's re) and are identical at
# TP 1, TP 2, PP 2, DP 2 and DP 2 x TP 2. The masks are made while the device runs the step's forward pass
# and sent after the plan (sits_grammar_masks_overlapped_total) wherever the leader runs the replica's
# forward pass; a remote replica's masks go in its plan, so with --dp only replica 0's are overlapped.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
tmp=$(mktemp -d); trap 'pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
burst() { "${PYTHON:-python3}" - "$url" <<'PYEOF'
import json, re, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
rx = "[a-z]{3,9}-[0-9]{2,6}"
def go(i):
    b = {"model": "m", "prompt": "code %d:" % i, "max_tokens": 30, "temperature": 1.0, "seed": i, "guided_regex": rx}
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps(b).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["choices"][0]["text"]
with ThreadPoolExecutor(8) as ex:
    texts = list(ex.map(go, range(16)))
bad = [t for t in texts if not re.fullmatch(rx, t)]
print(json.dumps(texts) if not bad else "NOMATCH %r" % bad)
PYEOF
}
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
ref=
for cfg in "1" "2 --tp 2" "2 --pp 2" "2 --dp 2" "4 --dp 2 --tp 2"; do
  set -- $cfg; np=$1; shift
  name="${*:-TP 1}"
  serve_np "$np" "$tmp/m" --load-format dummy --step-timeout 30 "$@" || { bad "$name: server did not start"; continue; }
  got=$(burst); mo=$(metric sits_grammar_masks_overlapped_total); mt=$(metric sits_grammar_masks_total)
  stop_np "$tmp/m" || bad "$name: the job did not stop cleanly"
  case "$got" in \[*) ;; *) bad "$name: $got"; continue ;; esac
  [ -z "$ref" ] && ref=$got
  [ "$got" = "$ref" ] && ok "$name: 16 texts match the regex and equal TP 1's" || bad "$name: texts differ from TP 1's: $(echo "$got" | cut -c1-160)"
  case "$name" in
    *dp*) [ "${mo:-0}" -gt 0 ] && [ "$mo" -lt "${mt:-0}" ] && ok "$name: $mo of $mt masks overlapped (replica 0's)" || bad "$name: $mo of $mt masks overlapped" ;;
    *)    [ "${mt:-0}" -gt 0 ] && [ "$mo" = "$mt" ] && ok "$name: all $mt masks made during the forward pass" || bad "$name: $mo of $mt masks overlapped" ;;
  esac
done
finish
