#!/bin/bash
# Prefix caching on the real server (mpirun -np 2, CPU): a shared-system-prompt workload hits the
# cache (seen in /metrics) and every output equals the output of a server without the cache.
# PC_FLAGS: more server flags for both runs ([fp8 kv] tests/integration/prefix_cache_fp8.sh: an fp8 KV cache).
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
stop() { for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done; wait $srv; srv=; }
workload() { # OUT: 12 chats sharing a long system prompt, greedy, 4 at a time
  "$PY" - "$url" "$1" <<'PYEOF'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
url, out = sys.argv[1], sys.argv[2]
system = "You are a careful assistant for a high performance computing centre. " * 6
def ask(i):
    body = {"model": "m", "temperature": 0, "max_tokens": 12, "messages": [
        {"role": "system", "content": system}, {"role": "user", "content": "Question number %d about MPI?" % i}]}
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["choices"][0]["message"]["content"]
with ThreadPoolExecutor(4) as ex:
    res = list(ex.map(ask, range(12)))
json.dump(res, open(out, "w"))
PYEOF
}
serve_start "$tmp/m" --block-size 8 ${PC_FLAGS:-} || finish
workload "$tmp/on.json" || bad "workload with the prefix cache"
hits=$(curl -s "$url/metrics" | awk '$1 == "sits_prefix_cache_hits_total" { print $2 }')
rate=$(curl -s "$url/metrics" | awk '$1 == "sits_prefix_cache_hit_rate" { print $2 }')
[ "${hits:-0}" -gt 0 ] && ok "prefix cache hits: $hits tokens (hit rate $rate)" || bad "no prefix cache hits"
# [cache_salt] vLLM's: a salted request starts only from blocks of the same salt (usage's cached_tokens says), the
# output is the same; an empty salt is refused
"$PY" - "$url" <<'PYEOF' && ok "cache_salt: only the same salt hits, outputs unchanged, '' refused" || bad "cache_salt"
import json, sys, urllib.error, urllib.request
url = sys.argv[1]
doc = "Slurm partitions, QOS limits and fair-share factors decide who runs first on the cluster. " * 4
def ask(salt, code=200):
    body = {"model": "m", "temperature": 0, "max_tokens": 4, "messages": [{"role": "user", "content": doc}]}
    if salt is not None:
        body["cache_salt"] = salt
    try:
        r = json.load(urllib.request.urlopen(urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                                                    {"Content-Type": "application/json"}), timeout=120))
    except urllib.error.HTTPError as e:
        assert e.code == code and json.load(e)["error"]["param"] == "cache_salt", e.code
        return None, None
    assert code == 200
    return r["usage"]["prompt_tokens_details"]["cached_tokens"], r["choices"][0]["message"]["content"]
got = [ask("alice"), ask("alice"), ask("bob"), ask(None), ask(None), ask("alice")]
cached = [g[0] for g in got]
assert cached[0] == 0 and cached[1] > 0 and cached[2] == 0 and cached[3] == 0 and cached[4] > 0 and cached[5] > 0, cached
assert len({g[1] for g in got}) == 1, got
ask("", 400)
ask(7, 400)
PYEOF
stop
serve_start "$tmp/m" --block-size 8 --no-enable-prefix-caching ${PC_FLAGS:-} || finish
workload "$tmp/off.json" || bad "workload without the prefix cache"
hits=$(curl -s "$url/metrics" | awk '$1 == "sits_prefix_cache_hits_total" { print $2 }')
[ "${hits:-0}" -eq 0 ] && ok "no hits with --no-enable-prefix-caching" || bad "hits while disabled: $hits"
stop
cmp -s "$tmp/on.json" "$tmp/off.json" && ok "outputs identical with and without the prefix cache" || { bad "outputs differ"; cat "$tmp/on.json" "$tmp/off.json"; }
finish
