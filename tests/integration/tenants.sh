#!/bin/bash
# Tenants on the real server (mpirun -np 2, CPU): keys map to tenants (unknown key -> 401), a
# tenant's max_concurrent gives 429, per-tenant metrics and SLO attainment are exported, and a
# flood from a low-priority tenant cannot starve a high-priority one: the gold requests sent in
# the middle of a bronze flood finish long before the flood does.
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
# a model slow enough (a few ms a step) that the flood lasts seconds
sed -i 's/"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2/"hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 4/' "$tmp/m/config.json"
cat > "$tmp/tenants.json" <<'JSON'
{"tenants": [
  {"name": "gold", "api_keys": ["k-gold"], "weight": 4, "priority": 0, "slo": {"ttft_ms": 2000, "tpot_ms": 500}},
  {"name": "bronze", "api_keys": ["k-bronze"], "weight": 1, "priority": 1, "max_concurrent": 40},
  {"name": "tiny", "api_keys": ["k-tiny"], "max_concurrent": 1}
]}
JSON
echo '{"tenants": [{"name": "a", "api_keys": ["x"], "weight": 0}]}' > "$tmp/bad.json"
timeout 60 $SITS_MPIRUN -np 2 "$SITS" --model "$tmp/m" --load-format dummy --port $port --tenants "$tmp/bad.json" > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -ne 0 ] && grep -q "weight must be a number > 0" "$tmp/e" && ok "bad tenants file refused with the reason" || bad "bad tenants file (rc $rc)"

serve_start "$tmp/m" --tenants "$tmp/tenants.json" --max-num-seqs 4 --max-num-batched-tokens 64 || finish
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/models")
[ "$code" = 401 ] && ok "no key: 401" || bad "no key: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer nope' "$url/v1/models")
[ "$code" = 401 ] && ok "unknown key: 401" || bad "unknown key: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer k-gold' "$url/v1/models")
[ "$code" = 200 ] && ok "tenant key: 200" || bad "tenant key: $code"

"$PY" - "$url" <<'PYEOF' && ok "gold requests are not starved by a bronze flood" || bad "priority/fair share"
import json, sys, threading, time, urllib.request, urllib.error
url = sys.argv[1]
def call(key, i, n, out):
    body = {"model": "m", "prompt": "flood %d " % i * 4, "max_tokens": n, "temperature": 0, "ignore_eos": True}
    t0 = time.time()
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
        {"Content-Type": "application/json", "Authorization": "Bearer " + key}), timeout=300)
    assert json.load(r)["usage"]["completion_tokens"] == n
    out.append((t0, time.time()))
bronze, gold = [], []
start = time.time()
th = [threading.Thread(target=call, args=("k-bronze", i, 40, bronze)) for i in range(24)]
[t.start() for t in th]
time.sleep(0.5)
gold_start = time.time()
g = [threading.Thread(target=call, args=("k-gold", 100 + i, 8, gold)) for i in range(4)]
[t.start() for t in g]
[t.join() for t in g + th]
flood_end = max(e for _, e in bronze)
gold_end = max(e for _, e in gold)
gold_lat = max(e - s for s, e in gold)
print("flood %.2f s, gold sent at %.2f s, done at %.2f s, gold max latency %.2f s" % (flood_end - start,
      gold_start - start, gold_end - start, gold_lat))
assert len(bronze) == 24 and len(gold) == 4
# without priority the gold requests would queue behind ~28 bronze requests (most of the flood)
assert gold_end < flood_end and gold_lat < 0.25 * (flood_end - gold_start), "gold finished too late"
PYEOF

# tenant concurrency limit: two simultaneous requests from "tiny" -> one gets 429. The first streams, and the
# second goes once its first chunk is out (a fixed 0.2 s wait raced it: on an idle machine its 300 tokens were
# done sooner, 4 failures in 6 runs)
curl -sN -o "$tmp/a" -H 'Authorization: Bearer k-tiny' -H 'Content-Type: application/json' "$url/v1/completions" \
  -d '{"model":"m","prompt":"x","max_tokens":300,"ignore_eos":true,"stream":true}' &
cpid=$!
for _ in $(seq 500); do [ -s "$tmp/a" ] && break; sleep 0.01; done
code=$(curl -s -o "$tmp/b" -w '%{http_code}' -H 'Authorization: Bearer k-tiny' -H 'Content-Type: application/json' "$url/v1/completions" -d '{"model":"m","prompt":"y","max_tokens":2}')
wait $cpid
[ "$code" = 429 ] && grep -q tenant_concurrency_limit "$tmp/b" && ok "tenant max_concurrent: 429" || bad "tenant concurrency: $code $(cat "$tmp/b")"

curl -s "$url/metrics" > "$tmp/metrics"
grep -q 'sits_tenant_requests_total{tenant="gold"} 4' "$tmp/metrics" && grep -q 'sits_tenant_requests_total{tenant="bronze"} 24' "$tmp/metrics" \
  && grep -q 'sits_tenant_slo_attainment{tenant="gold"}' "$tmp/metrics" && ok "per-tenant metrics" || { bad "per-tenant metrics"; grep tenant "$tmp/metrics"; }
for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done; wait $srv; srv=
finish
