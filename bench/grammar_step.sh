#!/bin/bash
# grammar_step.sh -- [structured output] mean scheduler step time of a batch of B concurrent requests,
# unconstrained vs constrained (a JSON schema with free strings; a counted regex whose every step is a new
# grammar state), from the server's sits_step_seconds histogram (a step's time includes its masks).
# usage (from the build dir): ../bench/grammar_step.sh MODEL_DIR [B=32] [MAX_TOKENS=48] [extra sits-dist flags...]
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
def steps():
    s = c = 0.0
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line.startswith("sits_step_seconds_sum"): s = float(line.split()[-1])
        if line.startswith("sits_step_seconds_count"): c = float(line.split()[-1])
    return s, c
schema = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["name", "city", "n"]}
phases = [("unconstrained", {"ignore_eos": True}),
          ("json_schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
          ("regex [a-z ]{1000}", {"guided_regex": "[a-z ]{1000}"})]
post({"prompt": "warm up", "max_tokens": 4})
res = {}
for name, extra in phases:
    s0, c0 = steps()
    out = []
    def one(i):
        body = {"prompt": "Write a record number %d:" % i, "max_tokens": N, "temperature": 1.0, "seed": i}
        body.update(extra)
        out.append(post(body)["usage"]["completion_tokens"])
    t0 = time.time()
    th = [threading.Thread(target=one, args=(i,)) for i in range(B)]
    [t.start() for t in th]; [t.join() for t in th]
    wall = time.time() - t0
    s1, c1 = steps()
    res[name] = {"steps": c1 - c0, "mean_step_ms": 1e3 * (s1 - s0) / max(c1 - c0, 1), "tokens": sum(out), "wall_s": wall}
    print("%-20s %6d steps  mean step %8.3f ms  %6d tokens  %6.2f s" % (name, c1 - c0, res[name]["mean_step_ms"], sum(out), wall))
base = res["unconstrained"]["mean_step_ms"]
for name in res:
    print("%-20s %+6.1f%% per step vs unconstrained" % (name, 100 * (res[name]["mean_step_ms"] / base - 1)))
if os.environ.get("OUT_JSON"):
    json.dump(res, open(os.environ["OUT_JSON"], "w"), indent=1)
PY
