#!/bin/bash
# sched_scale.sh -- the scheduler at scale (issue #22, deliverable 4): a server with --max-num-seqs S
# (default 1024) gets thousands of streamed requests at once (sits-bench, closed loop, concurrency =
# requests up to 4096); from the leader's sits_step_phase_seconds_total (src/sched/sched.h
# SITS_PHASE_*) it reports where a step's time goes -- schedule (admission, batch choice), plan (inputs
# and their broadcast), forward (forward pass + sampling), deliver (tokens to requests) -- the host share
# (everything but forward) and the mean decode batch. Not a test.
#
#   bench/sched_scale.sh [--model DIR] [--config DIR] [--np N] [--seqs 1024] [--requests 4096]
#                        [--prompt 32] [--output 128] [--out DIR] [-- server flags, e.g. --device cuda]
# --model: the tokenizer and, without --config, the weights (default models/demo); --config DIR: run
# that config.json with random weights (--load-format dummy) and --model's tokenizer, e.g.
# --config bench/configs/llama3-8b for the 8B shape on a GPU.
# Environment: B (build dir, default .), MPIRUN. Output: a table on stdout, $OUT/sched-scale.json.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
B=${B:-$PWD}
model=$top/models/demo config='' np=1 seqs=1024 requests=4096 plen=32 olen=128 out=${OUT:-$PWD}
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --seqs) seqs=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --prompt) plen=$2; shift 2 ;;
    --output) olen=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "sched_scale.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
tmp=$(mktemp -d)
srv=''
cleanup() { [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
dir=$model
load=()
if [ -n "$config" ]; then
  dir=$tmp/m
  mkdir -p "$dir"
  cp "$config/config.json" "$dir/"
  cp "$model"/tokenizer.json "$dir/"
  [ -f "$model/tokenizer_config.json" ] && cp "$model/tokenizer_config.json" "$dir/"
  load=(--load-format dummy)
fi
MPIRUN=${MPIRUN:-mpirun}
conc=$requests; [ "$conc" -gt 4096 ] && conc=4096
budget=$((seqs > 8192 ? seqs : 8192))
$MPIRUN --allow-run-as-root --oversubscribe -np "$np" "$B/sits-dist" --model "$dir" --port 0 "${load[@]}" \
  --max-num-seqs "$seqs" --max-num-batched-tokens "$budget" --max-waiting $((requests + 16)) \
  --max-connections $((conc + 64)) --max-connections-per-client $((conc + 64)) "${extra[@]}" \
  > "$tmp/out" 2> "$out/sched-scale-server.log" &
srv=$!
url=''
for _ in $(seq 1200); do
  port=$(sed -n 's|^sits-dist: serving .* on http://[^:]*:\([0-9]*\) .*|\1|p' "$out/sched-scale-server.log" | head -1)
  if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" > /dev/null; then url=http://127.0.0.1:$port; break; fi
  kill -0 "$srv" 2>/dev/null || break
  sleep 0.25
done
[ -n "$url" ] || { echo "sched_scale.sh: the server did not start:" >&2; tail -20 "$out/sched-scale-server.log" >&2; exit 1; }
metrics() { curl -s "$url/metrics" > "$1"; }
metrics "$tmp/m0"
"$B/bench/sits-bench" --url "$url" --rate 0 --concurrency "$conc" --requests "$requests" --prompt-len "fixed:$plen" \
  --output-len "fixed:$olen" --ignore-eos --stream --no-progress --quiet --json "$out/sched-scale-client.json" \
  > "$out/sched-scale-client.log" 2>&1 || { echo "sched_scale.sh: sits-bench failed" >&2; tail -20 "$out/sched-scale-client.log" >&2; exit 1; }
metrics "$tmp/m1"
python3 - "$tmp/m0" "$tmp/m1" "$out/sched-scale.json" "$out/sched-scale-client.json" "$seqs" "$requests" "$plen" "$olen" "$np" \
  "$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import json, re, sys
def read(path):
    d = {}
    for line in open(path):
        m = re.match(r'^(\w+)(\{[^}]*\})? ([-0-9.e+]+)$', line.strip())
        if m: d[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return d
a, b = read(sys.argv[1]), read(sys.argv[2])
delta = lambda k: b.get(k, 0.0) - a.get(k, 0.0)
steps = delta("sits_step_seconds_count")
phases = ["schedule", "plan", "forward", "deliver"]
sec = {p: delta('sits_step_phase_seconds_total{phase="%s"}' % p) for p in phases}
total = sum(sec.values())
gen = delta("sits_generation_tokens_total")
client = json.load(open(sys.argv[4]))
ov = client.get("overall", client)
host = total - sec["forward"]
res = {"bench": "sched_scale", "max_num_seqs": int(sys.argv[5]), "requests": int(sys.argv[6]), "prompt": int(sys.argv[7]),
       "output": int(sys.argv[8]), "np": int(sys.argv[9]), "commit": sys.argv[10], "steps": steps,
       "mean_tokens_per_step": gen / steps if steps else None,
       "phase_ms_per_step": {p: 1e3 * sec[p] / steps if steps else None for p in phases},
       "host_share": host / total if total else None, "client": ov}
json.dump(res, open(sys.argv[3], "w"), indent=2)
print("| phase | ms per step | share |\n|---|---|---|")
for p in phases:
    print("| %s | %.3f | %.1f %% |" % (p, res["phase_ms_per_step"][p] or 0, 100 * sec[p] / total if total else 0))
print("| host (all but forward) | %.3f | **%.1f %%** |" % (1e3 * host / steps if steps else 0, 100 * (res["host_share"] or 0)))
print("steps %d, mean generated tokens per step %.1f (max-num-seqs %s), %s requests (%s failed), output tok/s %s" %
      (steps, res["mean_tokens_per_step"] or 0, sys.argv[5], sys.argv[6], ov.get("failed", "?"), "%.0f" % ov.get("output_throughput", 0)))
ttft = ov.get("ttft_ms") or {}
print("client: TTFT p50 %.1f ms, p99 %.1f ms; send delay p99 %.1f ms (a TTFT far above the step time with a small send delay:"
      " requests reach the scheduler slowly)" % (ttft.get("p50") or 0, ttft.get("p99") or 0, (ov.get("send_delay_ms") or {}).get("p99") or 0))
print("wrote %s" % sys.argv[3])
PY
