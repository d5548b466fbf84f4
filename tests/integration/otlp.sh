#!/bin/bash
# OTLP/HTTP JSON export (--otlp-endpoint) on the real server (mpirun -np 2, CPU): a small collector
# (python http.server) receives POST /v1/traces; every finished request arrives as one trace of
# request/queue/prefill/decode spans whose times and attributes equal the --trace-file line of the
# same request; a collector that is down costs nothing but dropped spans (counted in /metrics,
# requests still answered).
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
tmp=$(mktemp -d)
srv=
col=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; [ -n "$col" ] && kill $col 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
stop() { for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done; wait $srv; srv=; }

# the collector: appends each body to $tmp/otlp.jsonl, answers 200 {} (port in $tmp/col.port)
"$PY" - "$tmp" <<'PYEOF' &
import http.server, sys, os
d = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        ok = self.path == "/v1/traces" and self.headers.get("Content-Type", "").startswith("application/json")
        with open(os.path.join(d, "otlp.jsonl"), "ab") as f:
            f.write((body if ok else b'{"bad_request": "%s"}' % self.path.encode()) + b"\n")
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(os.path.join(d, "col.port.tmp"), "w").write(str(s.server_address[1]))
os.rename(os.path.join(d, "col.port.tmp"), os.path.join(d, "col.port"))
s.serve_forever()
PYEOF
col=$!
for _ in $(seq 100); do [ -f "$tmp/col.port" ] && break; sleep 0.1; done
cport=$(cat "$tmp/col.port" 2>/dev/null) || { bad "collector did not start"; finish; }

requests() { # N: N completions, greedy, 3 at a time
  "$PY" - "$url" "$1" <<'PYEOF'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
url, n = sys.argv[1], int(sys.argv[2])
def ask(i):
    body = {"model": "m", "temperature": 0, "max_tokens": 6 + i % 5, "prompt": "request number %d" % i}
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["choices"][0]["text"]
with ThreadPoolExecutor(3) as ex:
    list(ex.map(ask, range(n)))
PYEOF
}

serve_start "$tmp/m" --otlp-endpoint "http://127.0.0.1:$cport" --trace-file "$tmp/trace.jsonl" || finish
requests 10 && ok "10 requests served with OTLP export on" || bad "requests failed"
stop   # shutdown flushes the exporter
"$PY" - "$tmp/otlp.jsonl" "$tmp/trace.jsonl" <<'PYEOF' && ok "OTLP spans match the trace file" || bad "OTLP spans"
import json, sys
posts = [json.loads(l) for l in open(sys.argv[1])]
assert posts and not any("bad_request" in p for p in posts), "bad posts: %r" % posts[:1]
trace = {}
for l in open(sys.argv[2]):
    t = json.loads(l); trace[t["request"]] = t
spans = []
for p in posts:
    (rs,) = p["resourceSpans"]
    attrs = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
    assert attrs["service.name"] == {"stringValue": "sits-dist"}, attrs
    for ss in rs["scopeSpans"]:
        spans += ss["spans"]
roots = [s for s in spans if "parentSpanId" not in s]
assert len(roots) == len(trace) == 10, (len(roots), len(trace))
for r in roots:
    a = {x["key"]: x["value"] for x in r["attributes"]}
    rid = a["sits.request_id"]["stringValue"]
    t = trace[rid]
    assert r["name"] == "request" and r["kind"] == 2, r
    assert len(r["traceId"]) == 32 and len(r["spanId"]) == 16 and int(r["traceId"], 16) != 0
    ns = lambda x: int(round(x * 1e9))
    assert abs(int(r["startTimeUnixNano"]) - ns(t["queued"])) < 2000, (r, t)
    assert abs(int(r["endTimeUnixNano"]) - ns(t["finished"])) < 2000, (r, t)
    for k, tk in (("sits.prompt_tokens", "prompt_tokens"), ("sits.generated_tokens", "generated_tokens"),
                  ("sits.preemptions", "preemptions"), ("sits.prefix_cached_tokens", "prefix_cached_tokens")):
        assert int(a[k]["intValue"]) == t[tk], (k, a[k], t[tk])
    assert a["sits.finish_reason"]["stringValue"] == t["finish_reason"]
    kids = {s["name"]: s for s in spans if s.get("parentSpanId") == r["spanId"]}
    assert set(kids) == {"queue", "prefill", "decode"}, kids.keys()
    assert all(k["traceId"] == r["traceId"] and k["kind"] == 1 for k in kids.values())
    bounds = [t["queued"], t["first_scheduled"], t["first_token"], t["finished"]]
    for i, n in enumerate(("queue", "prefill", "decode")):
        assert abs(int(kids[n]["startTimeUnixNano"]) - ns(bounds[i])) < 2000, (n, kids[n], t)
        assert abs(int(kids[n]["endTimeUnixNano"]) - ns(bounds[i + 1])) < 2000, (n, kids[n], t)
        assert int(kids[n]["startTimeUnixNano"]) <= int(kids[n]["endTimeUnixNano"])
print("%d posts, %d spans for %d requests" % (len(posts), len(spans), len(roots)))
PYEOF

# collector gone: requests still answered, failures counted, a warning logged
kill $col; wait $col 2>/dev/null; col=
serve_start "$tmp/m" --otlp-endpoint "http://127.0.0.1:$cport" || finish
requests 4 && ok "requests answered with the collector down" || bad "requests failed with the collector down"
for _ in $(seq 50); do  # the exporter posts at least every second
  failed=$(curl -s "$url/metrics" | awk '$1 == "sits_otlp_failed_exports_total" { print $2 }')
  [ "${failed:-0}" -gt 0 ] && break; sleep 0.1
done
dropped=$(curl -s "$url/metrics" | awk '$1 == "sits_otlp_dropped_requests_total" { print $2 }')
[ "${failed:-0}" -gt 0 ] && [ "${dropped:-0}" -ge 1 ] && ok "collector down: $failed failed post(s), $dropped request(s) dropped" \
  || bad "collector down: failed=$failed dropped=$dropped"
stop
grep -q "otlp: export to .* failed" "$tmp/err" && ok "failure logged" || { bad "no warning logged"; tail -5 "$tmp/err"; }

# a bad endpoint is refused at start
$SITS_MPIRUN -np 1 "$SITS" --model "$tmp/m" --load-format dummy --port 0 --otlp-endpoint "https://x:1" > /dev/null 2> "$tmp/err2"
rc=$?
[ $rc -ne 0 ] && grep -q "otlp-endpoint" "$tmp/err2" && ok "https endpoint refused (rc $rc)" || { bad "https endpoint: rc $rc"; cat "$tmp/err2"; }
finish
