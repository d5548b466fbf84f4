#!/bin/bash
# sits-bench, the load generator (bench/sits_bench.c, src/util/http_client.c):
# 1. against a fake server (python, raw socket) that streams SSE with CRLF lines, multi-line data,
#    comments and chunk boundaries every few bytes (with chunk extensions), and answers 429 to some
#    requests: the token counts, text-chunk counts and failure classes in the JSON report equal what
#    the fake server sent;
# 2. against the real server (mpirun -np 2, CPU, two tenants) for a few seconds at a fixed rate with
#    streaming: every request OK, completion_tokens == max_tokens (ignore_eos), TTFT <= E2E, the
#    request count is rate x duration, and the per-tenant counts equal the server's own /metrics;
#    a wrong key gives http_401 failures.
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
BENCH="$top_builddir/bench/sits-bench"
[ -x "$BENCH" ] || { echo "SKIP: $BENCH not built"; exit 77; }
tmp=$(mktemp -d)
srv=
fake=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; [ -n "$fake" ] && kill $fake 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
fport=

# ---- 1. fake server: the client's chunked/SSE parsing and failure accounting ----
cat > "$tmp/fake.py" <<'PYEOF'
import json, random, socket, sys, threading, time
rnd = random.Random(7)
def handle(c):
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += c.recv(65536)
    head, body = buf.split(b"\r\n\r\n", 1)
    n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
    while len(body) < n:
        body += c.recv(65536)
    req = json.loads(body)
    mt = req["max_tokens"]
    if mt == 7:
        b = b'{"error": {"message": "too many", "type": "rate_limit"}}'
        c.sendall(b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
        c.close()
        return
    ev = [b": keep-alive comment\r\n\r\n"]
    for k in range(mt):
        if k == 1:   # one event split over two data lines (joined by \n it is still valid JSON)
            ev.append(b'data: {"choices":\r\ndata: [{"index":0,"text":"b","finish_reason":null}]}\r\n\r\n')
        else:
            ev.append(b'data: {"choices":[{"index":0,"text":"t%d","finish_reason":null}]}\r\n\r\n' % k)
    ev.append(b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}]}\n\n')   # no text: not a chunk
    ev.append(b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (mt, mt + 5))
    ev.append(b"data: [DONE]\n\n")
    payload = b"".join(ev)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    i = 0
    while i < len(payload):
        k = rnd.randint(1, 9)
        piece = payload[i:i + k]
        ext = b";x=1" if rnd.random() < 0.2 else b""
        c.sendall(b"%x%s\r\n%s\r\n" % (len(piece), ext, piece))
        if rnd.random() < 0.1:
            time.sleep(0.002)
        i += k
    c.sendall(b"0\r\n\r\n")
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))   # a free port, printed: a fixed one may be taken on a busy machine
s.listen(16)
print("ready", s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
PYEOF
"$PY" "$tmp/fake.py" > "$tmp/fake.out" 2>&1 &
fake=$!
# up to 120 s by the clock (not a count of polls: under distcheck's load on 2 cores a CI run saw the server print its
# port just after 300 polls of 0.1 s), less if it exits
deadline=$((SECONDS + 120))
until grep -q ready "$tmp/fake.out" || [ $SECONDS -ge $deadline ] || ! kill -0 $fake 2>/dev/null; do sleep 0.1; done
fport=$(awk '/^ready/ {print $2}' "$tmp/fake.out")
[ -n "$fport" ] || { bad "the fake server did not start in 120 s (or exited)"; cat "$tmp/fake.out"; }
printf '%s\n' '{"prompt": "a", "max_tokens": 5}' '{"prompt": "b", "max_tokens": 7}' '{"prompt": [1, 2, 3], "max_tokens": 9}' \
  '{"prompt": "d", "max_tokens": 3}' > "$tmp/ds.jsonl"
timeout 60 "$BENCH" --url http://127.0.0.1:$fport --model fake --dataset "$tmp/ds.jsonl" --requests 8 --rate 0 --concurrency 3 \
  --json "$tmp/fake.json" > "$tmp/fake.txt" 2>&1 || { bad "sits-bench against the fake server (rc $?)"; cat "$tmp/fake.txt"; }
"$PY" - "$tmp/fake.json" <<'PYEOF' && ok "fake server: chunked SSE parsed, counts and failures exact" || bad "fake server report"
import json, sys
d = json.load(open(sys.argv[1]))
errs = []
reqs = d["requests"]
if len(reqs) != 8: errs.append("requests %d != 8" % len(reqs))
for r in reqs:
    mt = r["max_tokens"]
    want = [5, 7, 9, 3][r["index"] % 4]
    if mt != want: errs.append("request %d: max_tokens %d, dataset says %d" % (r["index"], mt, want))
    if mt == 7:
        if r["outcome"] != "http_429" or r["status"] != 429: errs.append("request %d: %s, want http_429" % (r["index"], r["outcome"]))
    elif (r["outcome"], r["completion_tokens"], r["prompt_tokens"], r["chunks"]) != ("ok", mt, 5, mt):
        errs.append("request %d: outcome %s completion %d prompt %d chunks %d, want ok %d 5 %d" % (
            r["index"], r["outcome"], r["completion_tokens"], r["prompt_tokens"], r["chunks"], mt, mt))
o = d["overall"]
if (o["ok"], o["failed"], o["failed_by_outcome"]) != (6, 2, {"http_429": 2}):
    errs.append("overall ok %d failed %d %s, want 6 2 {http_429: 2}" % (o["ok"], o["failed"], o["failed_by_outcome"]))
if o["completion_tokens"] != 2 * (5 + 9 + 3): errs.append("completion_tokens %d != 34" % o["completion_tokens"])
if abs(o["goodput"]["share"] - 0.75) > 1e-9: errs.append("goodput share %g != 0.75 (no SLO: ok/all)" % o["goodput"]["share"])
for e in errs[:10]: print(e)
sys.exit(1 if errs else 0)
PYEOF
kill $fake 2>/dev/null; wait $fake 2>/dev/null; fake=

# ---- 2. the real server, two tenants ----
cat > "$tmp/tenants.json" <<'JSON'
{"tenants": [{"name": "alpha", "api_keys": ["k-alpha"]}, {"name": "beta", "api_keys": ["k-beta"], "priority": 1}]}
JSON
serve_start "$tmp/m" --tenants "$tmp/tenants.json" || finish
timeout 120 "$BENCH" --url "$url" --tenant alpha=k-alpha:1 --tenant beta=k-beta:1:100000:100000 --rate 20 --arrival fixed \
  --duration 3 --stream --prompt-len uniform:8:24 --output-len uniform:4:16 --vocab-range 10:3000 --seed 3 --progress \
  --json "$tmp/real.json" > "$tmp/real.txt" 2> "$tmp/real.err"
rc=$?
[ $rc -eq 0 ] && ok "sits-bench ran against the server" || { bad "sits-bench rc $rc"; cat "$tmp/real.txt" "$tmp/real.err"; }
grep -q "goodput share" "$tmp/real.txt" && grep -q "alpha" "$tmp/real.txt" && ok "table printed with per-tenant columns" || bad "table"
grep -q "%.*done" "$tmp/real.err" && ok "progress bar forced on stderr" || bad "no progress line on stderr"
curl -s -H 'Authorization: Bearer k-alpha' "$url/metrics" > "$tmp/metrics"
"$PY" - "$tmp/real.json" "$tmp/metrics" <<'PYEOF' && ok "real server: all OK, tokens == max_tokens, TTFT <= E2E, counts match /metrics" || bad "real server report"
import json, re, sys
d = json.load(open(sys.argv[1]))
met = open(sys.argv[2]).read()
errs = []
reqs = d["requests"]
# fixed arrivals every 50 ms from t = 0, none at or after 3 s
if len(reqs) != 60: errs.append("%d requests sent, want 20/s x 3 s = 60" % len(reqs))
for r in reqs:
    if r["outcome"] != "ok": errs.append("request %d: %s %s" % (r["index"], r["outcome"], r.get("error", "")))
    elif r["completion_tokens"] != r["max_tokens"] or not 4 <= r["max_tokens"] <= 16:
        errs.append("request %d: completion_tokens %d, max_tokens %d" % (r["index"], r["completion_tokens"], r["max_tokens"]))
    elif not 8 <= r["prompt_tokens"] <= 24:
        errs.append("request %d: prompt_tokens %d not in [8, 24]" % (r["index"], r["prompt_tokens"]))
    elif not 0 < r["ttft_ms"] <= r["e2e_ms"]:
        errs.append("request %d: ttft %g e2e %g" % (r["index"], r["ttft_ms"], r["e2e_ms"]))
    if abs(r["sched_s"] - 0.05 * r["index"]) > 1e-9: errs.append("request %d scheduled at %g" % (r["index"], r["sched_s"]))
o = d["overall"]
if o["ok"] != len(reqs) or o["failed"] != 0: errs.append("overall ok %d failed %d" % (o["ok"], o["failed"]))
if o["completion_tokens"] != sum(r["max_tokens"] for r in reqs): errs.append("completion token total")
for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
    s = o[k]
    if not (s and 0 <= s["p50"] <= s["p90"] <= s["p99"] <= s["max"]): errs.append("%s percentiles %s" % (k, s))
if not o["ttft_ms"]["p50"] <= o["e2e_ms"]["p50"]: errs.append("ttft p50 > e2e p50")
if not 0.5 * 20 < o["request_throughput"] <= 20 * 60 / 59 * 1.001: errs.append("request_throughput %g" % o["request_throughput"])
by = {t["name"]: t for t in d["tenants"]}
if by["alpha"]["ok"] + by["beta"]["ok"] != o["ok"] or min(by["alpha"]["ok"], by["beta"]["ok"]) < 10:
    errs.append("tenant split %d + %d" % (by["alpha"]["ok"], by["beta"]["ok"]))
if by["beta"]["goodput"]["share"] != 1.0: errs.append("beta (loose SLO) goodput %g" % by["beta"]["goodput"]["share"])
for name in ("alpha", "beta"):
    m = re.search(r'sits_tenant_requests_total\{tenant="%s"\} (\d+)' % name, met)
    if not m or int(m.group(1)) != by[name]["ok"]:
        errs.append("server counted %s requests for %s, sits-bench %d" % (m and m.group(1), name, by[name]["ok"]))
for e in errs[:10]: print(e)
print("requests %d, ttft p50 %.1f ms, tpot p50 %.2f ms, e2e p99 %.1f ms" % (len(reqs), o["ttft_ms"]["p50"],
      o["tpot_ms"]["p50"], o["e2e_ms"]["p99"]))
sys.exit(1 if errs else 0)
PYEOF
timeout 60 "$BENCH" --url "$url" --model m --api-key wrong --requests 3 --rate 0 --json "$tmp/bad.json" > /dev/null 2>&1
"$PY" -c "import json,sys; o=json.load(open(sys.argv[1]))['overall']; sys.exit(0 if (o['ok'], o['failed_by_outcome']) == (0, {'http_401': 3}) else 1)" "$tmp/bad.json" \
  && ok "wrong key: 3 x http_401 reported" || bad "wrong key report"
for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done; wait $srv; srv=
finish
