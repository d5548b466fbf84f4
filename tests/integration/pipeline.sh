#!/bin/bash
# Pipeline parallelism on the CPU under mpirun: --pp 2, --pp 4 and --tp 2 --pp 2 give HF's greedy
# tokens (the same as TP = 1) on the fixture models, including tied embeddings (qwen2); a layout
# with more stages than layers is refused; the server runs with --pp 2 and answers as with --tp 2;
# killing a rank of the second stage ends the job with a message.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'pkill -9 -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
for m in llama_small:4:4 llama_small:4:2 llama_small:3:3 mistral_sharded:3:3 qwen2:4:2 llama3:2:2; do
  IFS=: read -r name np pp <<< "$m"
  for i in 1 3; do
    ids=$(ref_row "$FIX/$name/reference.json" prompts $i); want=$(ref_row "$FIX/$name/reference.json" greedy $i)
    got=$(timeout 120 $SITS_MPIRUN -np "$np" "$SITS" --model "$FIX/$name" --pp "$pp" --prompt-ids "$ids" --max-tokens 16 \
          --temperature 0 --ignore-eos 2> "$tmp/e")
    [ "$got" = "$want" ] && ok "$name: $np ranks, pp $pp (tp $((np / pp))), prompt $i == HF" || { bad "$name np $np pp $pp prompt $i: '$got' want '$want'"; tail -3 "$tmp/e"; }
  done
done
timeout 60 $SITS_MPIRUN -np 4 "$SITS" --model "$FIX/llama3" --pp 4 --prompt-ids 1,2 > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "4 pipeline stages for 2 layers" "$tmp/e" && ok "more stages than layers refused" || bad "pp 4 on 2 layers (rc $rc)"
# seeded sampling through a pipeline equals TP = 1
args=(--model "$FIX/llama_small" --prompt-ids 5,6,7 --max-tokens 20 --temperature 0.8 --top-p 0.9 --seed 3 --ignore-eos)
s1=$("$SITS" "${args[@]}" 2>/dev/null); s2=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" "${args[@]}" --pp 2 2>/dev/null)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && ok "seeded sampling: pp 2 == tp 1" || bad "seeded sampling pp 2: '$s2' vs '$s1'"

# the server with two stages answers like the server with two TP ranks
command -v curl >/dev/null && command -v "${PYTHON:-python3}" >/dev/null || { finish; }
serve_setup "$tmp/m"
ask() { curl -s "$url/v1/completions" -H 'Content-Type: application/json' -d '{"model":"m","prompt":"Once upon a time","max_tokens":12,"temperature":0}'; }
stop() { for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done; wait $srv; srv=; }
serve_start "$tmp/m" --pp 2 || finish
a=$(ask | sed 's/"id":"[^"]*","object":"text_completion","created":[0-9]*,//'); stop
serve_start "$tmp/m" --tp 2 || finish
b=$(ask | sed 's/"id":"[^"]*","object":"text_completion","created":[0-9]*,//'); stop
[ -n "$a" ] && [ "$a" = "$b" ] && echo "$a" | grep -q '"finish_reason":"length"' && ok "server with --pp 2 answers as with --tp 2" || bad "server pp: '$a' vs '$b'"

# data-parallel replicas behind the one front-end: --dp 2 --tp 2 (4 ranks) answers a burst exactly as
# --tp 2, both replicas serve (trace file), and SIGTERM stops every rank cleanly
burst() { "${PYTHON:-python3}" - "$url" <<'PYEOF'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
def go(i):
    b = {"model": "m", "prompt": "word %d " % i * 3, "max_tokens": 10, "temperature": 0}
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/completions", json.dumps(b).encode(),
                                                      {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["choices"][0]["text"]
with ThreadPoolExecutor(8) as ex:
    print(json.dumps(list(ex.map(go, range(16)))))
PYEOF
}
stop4() { for r in 0 1 2 3; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done; wait $srv; rc=$?; srv=; return $rc; }
serve_start "$tmp/m" --tp 2 || finish
one=$(burst); stop
$SITS_MPIRUN -np 4 "$SITS" --model "$tmp/m" --load-format dummy --port 0 --dp 2 --tp 2 --trace-file "$tmp/dp.trace" > "$tmp/out" 2> "$tmp/err" &
srv=$!
for _ in $(seq 200); do port=$(sed -n 's|^sits-dist: serving .* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/err" | head -1)
  [ -n "$port" ] && url=http://127.0.0.1:$port && curl -sf "$url/health" >/dev/null && break; sleep 0.1; done
grep -q "tp 2 x pp 1 x dp 2" "$tmp/err" && ok "layout printed: tp 2 x pp 1 x dp 2" || bad "dp layout line"
two=$(burst)
stop4; rc=$?
[ -n "$one" ] && [ "$one" = "$two" ] && ok "--dp 2 --tp 2 answers a burst exactly as --tp 2" || bad "dp 2 outputs differ: $two vs $one"
[ $rc -eq 0 ] && ok "SIGTERM stops the four ranks cleanly" || bad "dp 2 exit $rc"
"${PYTHON:-python3}" -c 'import json,sys; r=[json.loads(l)["replica"] for l in open(sys.argv[1])]; assert len(r)==16 and set(r)=={0,1}, r' "$tmp/dp.trace" \
  && ok "both replicas served (trace file)" || bad "replicas used: $(cut -c1-80 "$tmp/dp.trace" | head -3)"

# kill -9 a rank of the last stage mid-run: the job ends with a message
mkdir -p "$tmp/big"
sed 's/"hidden_size": 64, "intermediate_size": 128/"hidden_size": 256, "intermediate_size": 1024/; s/"max_position_embeddings": 512/"max_position_embeddings": 8192/' "$tmp/m/config.json" > "$tmp/big/config.json"
$SITS_MPIRUN -np 2 "$SITS" --model "$tmp/big" --load-format dummy --pp 2 --prompt-ids 1,2,3 --max-tokens 8000 --ignore-eos \
  --temperature 0 > /dev/null 2> "$tmp/e" &
job=$!
for _ in $(seq 50); do pid1=$(rank_pid 1 "$tmp/big") && break; sleep 0.2; done
sleep 1
if [ -n "${pid1:-}" ]; then
  kill -9 "$pid1"
  for _ in $(seq 200); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then bad "pipeline job still running 20 s after kill -9"; kill -9 $job
  else wait $job; rc=$?; [ $rc -ne 0 ] && grep -qiE "signal 9|killed|exited" "$tmp/e" && ok "kill -9 of stage 1: job ended ($rc) with a message" || bad "kill -9 stage 1: rc $rc"; fi
else bad "stage-1 rank not found"; kill -9 $job; fi
finish
