#!/bin/bash
# grammar_step.sh -- [structured output] mean scheduler step time of a batch of B concurrent requests,
# unconstrained vs constrained (a JSON schema with free strings; a counted regex whose every step is a new
# grammar state, shared by the batch and one of its own per request), from the server's sits_step_seconds
# histogram (a step's time includes its masks), with the host time of the masks and the share of them made
# while the device ran the forward pass (sits_grammar_mask_seconds_total, sits_grammar_masks_overlapped_total):
# issue 21's budget is a constrained batch of 32 at most 10 % slower a step than an unconstrained one.
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
    m = {}
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        f = line.split()
        if len(f) == 2 and f[0] in ("sits_step_seconds_sum", "sits_step_seconds_count", "sits_grammar_mask_seconds_total",
                                    "sits_grammar_masks_total", "sits_grammar_masks_overlapped_total"):
            m[f[0]] = float(f[1])
        elif len(f) == 2 and f[0].startswith("sits_step_phase_seconds_total{"):
            m[f[0].split('"')[1]] = float(f[1])
    return m
schema = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["name", "city", "n"]}
phases = [("unconstrained", {"ignore_eos": True}),
          ("json_schema", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
          ("regex [a-z ]{1000}", {"guided_regex": "[a-z ]{1000}"}),
          ("32 regexes (r<i>)[a-z ]{1000}", None)]
post({"prompt": "warm up", "max_tokens": 4})
res = {}
for name, extra in phases:
    m0 = steps()
    out = []
    def one(i):
        body = {"prompt": "Write a record number %d:" % i, "max_tokens": N, "temperature": 1.0, "seed": i}
        body.update(extra if extra is not None else {"guided_regex": "(r%d )[a-z ]{1000}" % i})   # a grammar of its own
        out.append(post(body)["usage"]["completion_tokens"])
    t0 = time.time()
    th = [threading.Thread(target=one, args=(i,)) for i in range(B)]
    [t.start() for t in th]; [t.join() for t in th]
    wall = time.time() - t0
    m1 = steps()
    d = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in m1}
    n = max(d["sits_step_seconds_count"], 1)
    res[name] = {"steps": d["sits_step_seconds_count"], "mean_step_ms": 1e3 * d["sits_step_seconds_sum"] / n, "tokens": sum(out),
                 "wall_s": wall, "mask_ms_per_step": 1e3 * d.get("sits_grammar_mask_seconds_total", 0) / n,
                 "masks": d.get("sits_grammar_masks_total", 0), "masks_overlapped": d.get("sits_grammar_masks_overlapped_total", 0)}
    for ph in ("schedule", "plan", "forward", "deliver"): res[name][ph + "_ms_per_step"] = 1e3 * d.get(ph, 0) / n
base = res["unconstrained"]["mean_step_ms"]
print("| requests | steps | mean step ms | vs unconstrained | forward ms | plan + deliver ms | mask host ms/step | masks made during the forward pass | tokens | wall s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name, r in res.items():
    r["overhead_pct"] = 100 * (r["mean_step_ms"] / base - 1)
    print("| %s | %d | %.3f | %+.1f %% | %.3f | %.3f | %.3f | %d of %d | %d | %.2f |" % (name, r["steps"], r["mean_step_ms"], r["overhead_pct"],
          r["forward_ms_per_step"], r["plan_ms_per_step"] + r["deliver_ms_per_step"], r["mask_ms_per_step"], r["masks_overlapped"],
          r["masks"], r["tokens"], r["wall_s"]))
if os.environ.get("OUT_JSON"):
    json.dump(res, open(os.environ["OUT_JSON"], "w"), indent=1)
PY
