#!/bin/bash
# The real server (HTTP + scheduler + engine) under mpirun -np 2 on the CPU, on random weights with
# the byte-level fixture tokenizer:
#   - curl: chat and completions, streaming and not (the openai client: openai_client.sh)
#   - 32 concurrent requests of mixed lengths give exactly the greedy tokens each gives alone
#   - KV exhaustion forces preemption (seen in /metrics) and outputs stay the same
#   - a client that disconnects mid-stream gets its KV blocks back (via /metrics)
#   - bad requests are answered 4xx and the server keeps serving
#   - SIGTERM drains a running request, then every rank exits 0
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
serve_setup "$tmp/m"
url=http://127.0.0.1:$port
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

serve_start "$tmp/m" --max-num-seqs 8 --max-num-batched-tokens 64 --block-size 4 --kv-cache-memory 40K --trace-file "$tmp/trace.jsonl" || finish
grep -q "curl http://127.0.0.1:$port/v1/chat/completions" "$tmp/err" && ok "ready line with a curl example" || bad "no curl example"
blocks=$(metric sits_kv_blocks_free)

r=$(curl -s "$url/v1/chat/completions" -H 'Content-Type: application/json' -d '{"model":"m","messages":[{"role":"user","content":"Hello!"}],"max_tokens":8,"temperature":0}')
echo "$r" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); c=d["choices"][0]; assert d["object"]=="chat.completion" and c["message"]["role"]=="assistant" and c["finish_reason"]=="length" and d["usage"]["completion_tokens"]==8' \
  && ok "chat completion (curl)" || bad "chat completion: $r"
curl -sN "$url/v1/completions" -H 'Content-Type: application/json' -d '{"model":"m","prompt":"Hello","max_tokens":6,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' > "$tmp/sse"
"$PY" - "$tmp/sse" <<'PYEOF' && ok "streamed completion (curl): chunks, usage, [DONE]" || { bad "streamed completion"; cat "$tmp/sse"; }
import json, sys
ev = [l[6:] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert ev[-1] == "[DONE]", ev[-1]
chunks = [json.loads(e) for e in ev[:-1]]
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
assert any(c["choices"] and c["choices"][0]["finish_reason"] == "length" for c in chunks)
PYEOF

# 32 concurrent requests of mixed lengths == each alone (greedy); the small KV pool forces preemption
"$PY" - "$url" "$tmp" <<'PYEOF' && ok "32 concurrent requests equal their solo outputs" || bad "concurrency"
import json, sys, threading, urllib.request
url, tmp = sys.argv[1], sys.argv[2]
words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
def req(i):
    body = {"model": "m", "prompt": " ".join(words[: 1 + i % 12] * (1 + i % 3)), "max_tokens": 4 + (i * 7) % 20,
            "temperature": 0}
    r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["choices"][0]["text"]
solo = [req(i) for i in range(32)]
out = [None] * 32
th = [threading.Thread(target=lambda i=i: out.__setitem__(i, req(i))) for i in range(32)]
[t.start() for t in th]; [t.join() for t in th]
bad = [i for i in range(32) if out[i] != solo[i]]
assert not bad, [(i, solo[i], out[i]) for i in bad[:3]]
PYEOF
pre=$(metric sits_preemptions_total)
[ "${pre:-0}" -gt 0 ] && ok "KV exhaustion preempted $pre sequence(s)" || bad "no preemption seen (pool too large?)"

# disconnect mid-stream: the blocks come back, of every choice with n = 3 (a whole response too)
disconnect() { # N STREAM: send a completion of N choices, hang up after the first streamed event (or at once)
  "$PY" - "$port" "$1" "$2" <<'PYEOF'
import json, socket, sys, time
port, n, stream = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
body = json.dumps({"model": "m", "prompt": "Hello", "max_tokens": 120 if stream else 400, "temperature": 0 if n == 1 else 1.0, "n": n,
                   "stream": stream, "ignore_eos": True})
s = socket.create_connection(("127.0.0.1", port))
s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
           % (len(body), body)).encode())
buf = b""
while stream and b"data: " not in buf:
    buf += s.recv(4096)
if not stream:
    time.sleep(0.3)   # generating
s.close()
PYEOF
  for _ in $(seq 50); do [ "$(metric sits_num_requests_running)" = 0 ] && break; sleep 0.1; done
  [ "$(metric sits_kv_blocks_free)" = "$blocks" ] && ok "disconnect (n=$1, stream $2) frees the KV blocks ($blocks free)" \
    || bad "blocks after disconnect (n=$1, stream $2): $(metric sits_kv_blocks_free) of $blocks"
}
disconnect 1 1
disconnect 3 1
disconnect 3 0

# bad requests, then a good one
n_ok=0
check() { # status body...
  code=$(curl -s -o "$tmp/b" -w '%{http_code}' "$url/v1/completions" -H 'Content-Type: application/json' -d "$2")
  if [ "$code" = "$1" ] && grep -q '"error"' "$tmp/b"; then n_ok=$((n_ok + 1)); else bad "expected $1 for $2, got $code $(head -c 200 "$tmp/b")"; fi
}
check 400 '{"model":"m","prompt":"x","max_tokens":0}'
check 400 '{"model":"m","prompt":"x","max_tokens":100000}'
check 400 '{"model":"m","prompt":"x","temperature":-1}'
check 400 '{"model":"m","prompt":"x","top_p":1.5}'
check 400 '{"model":"m"}'
check 400 '{"model":"m","prompt":[1,2,99999]}'
check 400 '{"model":"m","prompt":"x",'
check 404 '{"model":"other","prompt":"x"}'
[ $n_ok -eq 8 ] && ok "bad requests answered 4xx" || true
curl -s -m 60 "$url/v1/completions" -H 'Content-Type: application/json' -d '{"model":"m","prompt":"x","max_tokens":3,"ignore_eos":true}' > "$tmp/b" 2>&1
grep -q '"finish_reason":"length"' "$tmp/b" && ok "server healthy after bad input" || { bad "server after bad input"; cat "$tmp/b"; }

# SIGTERM (to every rank, as Slurm sends it) with a request running: it completes, every rank exits 0
curl -s "$url/v1/completions" -H 'Content-Type: application/json' -d '{"model":"m","prompt":"Hello","max_tokens":60,"temperature":0,"ignore_eos":true}' > "$tmp/drain" &
cpid=$!
sleep 0.3
for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done
wait $cpid
grep -q '"completion_tokens":60' "$tmp/drain" && ok "running request completed during drain" || bad "drain: $(head -c 300 "$tmp/drain")"
for _ in $(seq 100); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
if kill -0 $srv 2>/dev/null; then bad "server still running 10 s after SIGTERM"; else wait $srv; rc=$?; [ $rc -eq 0 ] && ok "SIGTERM: job exits 0" || { bad "SIGTERM exit $rc"; tail -5 "$tmp/err"; }; fi
srv=
# the trace file: one line per request that reached the scheduler, a consistent timeline
"$PY" - "$tmp/trace.jsonl" <<'PYEOF' && ok "trace file: one consistent JSON line per request" || bad "trace file"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) >= 66, len(lines)   # 2 + 32 solo + 32 concurrent + disconnect + good + drain
for r in lines:
    assert r["request"].startswith(("cmpl-", "chatcmpl-")), r
    if r["generated_tokens"] > 0:
        assert r["queued"] <= r["first_scheduled"] <= r["first_token"] <= r["finished"], r
assert any(r["preemptions"] > 0 for r in lines)
assert any(r["finish_reason"] == "cancelled" for r in lines)
assert sum(r["finish_reason"] == "length" for r in lines) >= 60
PYEOF
finish
