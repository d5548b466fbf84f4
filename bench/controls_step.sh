#!/bin/bash
# controls_step.sh -- [sampling controls] [logprobs] mean scheduler step time of a batch of B concurrent
# requests: plain sampling, with penalties + logit_bias + min_p, with logprobs (top 5), and with both,
# from the server's sits_step_seconds histogram; also the host logits downloads the server counted
# (sits_logits_host_downloads_total, 0 on the device path). Not a test.
# usage (from the build dir): ../bench/controls_step.sh MODEL_DIR [B=32] [MAX_TOKENS=48] [extra sits-dist flags...]
# MODEL_DIR may hold a config.json only (then --load-format dummy is used). Prints a table; JSON to $OUT_JSON if set.
set -u
M=$1; B=${2:-32}; N=${3:-48}; shift; shift; shift
[ -f "$M/model.safetensors" ] || [ -f "$M/model.safetensors.index.json" ] && LOAD=auto || LOAD=dummy
tmp=$(mktemp -d)
trap '[ -n "${pid:-}" ] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
./sits-dist --model "$M" --load-format $LOAD --port 0 --max-num-seqs $B "$@" > "$tmp/out" 2> "$tmp/err" &
pid=$!
for _ in $(seq 600); do
  port=$(sed -n 's|^sits-dist: serving .* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/err" | head -1)
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 $pid 2>/dev/null || { cat "$tmp/err"; exit 1; }
  sleep 0.2
done
python3 - "http://127.0.0.1:$port" "$B" "$N" <<'PY'
import json, sys, threading, time, urllib.request, os
url, B, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def post(body):
    r = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r))
def metrics():
    m = {}
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        for k in ("sits_step_seconds_sum", "sits_step_seconds_count", "sits_logits_host_downloads_total"):
            if line.startswith(k + " "): m[k] = float(line.split()[-1])
    return m
controls = {"presence_penalty": 0.5, "frequency_penalty": 0.3, "repetition_penalty": 1.1, "min_p": 0.05,
            "logit_bias": {str(i): 1.0 for i in range(1, 65)}}
phases = [("plain", {}), ("controls", controls), ("logprobs 5", {"logprobs": 5}), ("controls + logprobs", dict(controls, logprobs=5))]
post({"prompt": "warm up", "max_tokens": 4})
res = {}
for name, extra in phases:
    m0 = metrics()
    out = []
    def one(i):
        body = {"prompt": "Write a record number %d:" % i, "max_tokens": N, "temperature": 1.0, "seed": i, "ignore_eos": True}
        body.update(extra)
        out.append(post(body)["usage"]["completion_tokens"])
    t0 = time.time()
    th = [threading.Thread(target=one, args=(i,)) for i in range(B)]
    [t.start() for t in th]; [t.join() for t in th]
    wall = time.time() - t0
    m1 = metrics()
    c = m1["sits_step_seconds_count"] - m0["sits_step_seconds_count"]
    res[name] = {"steps": c, "mean_step_ms": 1e3 * (m1["sits_step_seconds_sum"] - m0["sits_step_seconds_sum"]) / max(c, 1),
                 "tokens": sum(out), "wall_s": wall,
                 "host_logits_downloads": m1.get("sits_logits_host_downloads_total", -1) - m0.get("sits_logits_host_downloads_total", 0)}
    r = res[name]
    print("%-20s %6d steps  mean step %8.3f ms  %6d tokens  %6.2f s  %d host logits downloads" % (name, c, r["mean_step_ms"], r["tokens"], wall, r["host_logits_downloads"]))
base = res["plain"]["mean_step_ms"]
for name in res:
    print("%-20s %+6.1f%% per step vs plain" % (name, 100 * (res[name]["mean_step_ms"] / base - 1)))
if os.environ.get("OUT_JSON"):
    json.dump(res, open(os.environ["OUT_JSON"], "w"), indent=1)
PY
