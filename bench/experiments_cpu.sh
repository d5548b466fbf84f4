#!/usr/bin/env bash
# bench/experiments_cpu.sh -- the three serving experiments of bench/RESULTS.md, end to end: starts
# sits-dist servers under mpirun on loopback, drives them with bench/sits-bench, stops them, and
# writes a Markdown section (results.md) plus every sits-bench JSON report to --out.
#
#   1. goodput vs request rate, without and with the adaptive batch controller (--target-tpot-p99-ms)
#   2. two tenants with different SLOs under overload: priority + weights (--tenants) vs one FCFS queue
#   3. prefix-cache speedup on a shared-system-prompt chat workload (bench/workloads/shared_system_prompt.jsonl)
#
#   bench/experiments_cpu.sh --build BUILD_DIR [--out DIR] [--model DIR | --config DIR] [--np N] [--device cpu|cuda]
#       [--rates "0.5 1 2"] [--duration S] [--target-tpot-ms MS] [--slo-ttft-ms MS] [--slo-tpot-ms MS]
#       [--overload-rate R] [--prompt-len D] [--output-len D] [--prefix-requests N] [--prefix-concurrency N]
#       [--server-args "..."] [--only 1,2,3]
#
# --model DIR serves a real model (default models/demo: trained weights, real text). --config DIR serves
# random weights (--load-format dummy) with the shape of DIR/config.json, its vocabulary cut to the
# models/demo tokenizer (8192) so every sampled id detokenizes -- e.g. bench/configs/llama3-8b on a GPU.
# Bounded: every sits-bench run stops sending after --duration (or a fixed request count) and has a
# per-request timeout; every server is stopped with SIGTERM (then SIGKILL after 30 s).
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build= out= model=$src/models/demo config= np=2 device=cpu
rates="0.5 1 2" duration=20 target_tpot=40 slo_ttft=2000 slo_tpot=60 overload_rate=3
prompt_len=uniform:16:64 output_len=fixed:32 prefix_requests=24 prefix_conc=4 server_args= only=1,2,3
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift ;; --out) out=$2; shift ;; --model) model=$2; shift ;; --config) config=$2; shift ;;
    --np) np=$2; shift ;; --device) device=$2; shift ;; --rates) rates=$2; shift ;; --duration) duration=$2; shift ;;
    --target-tpot-ms) target_tpot=$2; shift ;; --slo-ttft-ms) slo_ttft=$2; shift ;; --slo-tpot-ms) slo_tpot=$2; shift ;;
    --overload-rate) overload_rate=$2; shift ;; --prompt-len) prompt_len=$2; shift ;; --output-len) output_len=$2; shift ;;
    --prefix-requests) prefix_requests=$2; shift ;; --prefix-concurrency) prefix_conc=$2; shift ;;
    --server-args) server_args=$2; shift ;; --only) only=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "experiments_cpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$build" ] || { echo "experiments_cpu.sh: --build BUILD_DIR is required" >&2; exit 2; }
build=$(cd "$build" && pwd)
SITS=$build/sits-dist BENCH=$build/bench/sits-bench
[ -x "$SITS" ] && [ -x "$BENCH" ] || { echo "build $build lacks sits-dist or bench/sits-bench (make bench/sits-bench)" >&2; exit 2; }
out=${out:-$build/bench/serving-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# loopback MPI as in the tests (tests/integration/mpi_env.sh)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_pml=ob1
MPIRUN="${MPIRUN:-mpirun} --oversubscribe --bind-to none"

load_args=()
if [ -n "$config" ]; then
  model=$out/model
  mkdir -p "$model"
  cp "$src/models/demo/tokenizer.json" "$src/models/demo/tokenizer_config.json" "$model/"
  python3 - "$config/config.json" "$model/config.json" <<'PYEOF' || exit 1
import json, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=8192, bos_token_id=8181, eos_token_id=[8182, 8190], tie_word_embeddings=False)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
  load_args=(--load-format dummy)
fi
vocab_hi=$(python3 -c "import json,sys; print(min(json.load(open(sys.argv[1]))['vocab_size'], 8181))" "$model/config.json")
port=$((21000 + $$ % 20000))
url=http://127.0.0.1:$port
srv=
stop_server() {
  [ -n "$srv" ] || return 0
  kill -TERM "$srv" 2>/dev/null
  for _ in $(seq 300); do kill -0 "$srv" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  srv=
}
trap stop_server EXIT
# start_server NAME [flags...]
start_server() {
  local name=$1; shift
  port=$((port + 1)); url=http://127.0.0.1:$port
  echo "== server $name: mpirun -np $np sits-dist --model $model ${load_args[*]} --device $device --port $port $server_args $*" | tee -a "$out/commands.txt"
  # shellcheck disable=SC2086
  $MPIRUN -np "$np" "$SITS" --model "$model" "${load_args[@]}" --device "$device" --port "$port" $server_args "$@" \
    > "$out/server-$name.out" 2> "$out/server-$name.err" &
  srv=$!
  for _ in $(seq 1200); do
    curl -sf "$url/health" > /dev/null 2>&1 && return 0
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.1
  done
  echo "server $name did not start:"; tail -20 "$out/server-$name.err"; exit 1
}
# bench NAME [sits-bench flags...]
bench() {
  local name=$1; shift
  echo "== bench $name: sits-bench --url URL $*" | tee -a "$out/commands.txt"
  "$BENCH" --url "$url" --timeout 300 --json "$out/$name.json" "$@" > "$out/$name.txt" 2> "$out/$name.err" \
    || { echo "sits-bench $name failed:"; cat "$out/$name.err"; exit 1; }
  curl -s "$url/metrics" -H "Authorization: Bearer k-gold" > "$out/$name.metrics"
  sed -n '4,100p' "$out/$name.txt"
}
t_start=$(date +%s)
common=(--prompt-len "$prompt_len" --output-len "$output_len" --vocab-range "100:$vocab_hi" --seed 1)

if [[ $only == *1* ]]; then
  for ctl in off on; do
    if [ $ctl = on ]; then start_server ctl-on --target-tpot-p99-ms "$target_tpot"; else start_server ctl-off; fi
    for r in $rates; do
      bench "goodput-ctl$ctl-rate$r" --rate "$r" --duration "$duration" "${common[@]}" \
        --slo-ttft-ms "$slo_ttft" --slo-tpot-ms "$slo_tpot"
    done
    stop_server
  done
fi

if [[ $only == *2* ]]; then
  cat > "$out/tenants.json" <<'JSON'
{"tenants": [
  {"name": "gold", "api_keys": ["k-gold"], "weight": 4, "priority": 0},
  {"name": "bronze", "api_keys": ["k-bronze"], "weight": 1, "priority": 1}
]}
JSON
  # gold: interactive, tight SLO, a quarter of the requests; bronze: batch-like, loose SLO
  tmix=(--tenant "gold=k-gold:1:$slo_ttft:$slo_tpot" --tenant "bronze=k-bronze:3:$((slo_ttft * 10)):$((slo_tpot * 5))")
  start_server tenants-fcfs
  bench tenants-fcfs --rate "$overload_rate" --duration "$duration" "${common[@]}" "${tmix[@]}"
  stop_server
  start_server tenants-prio --tenants "$out/tenants.json"
  bench tenants-prio --rate "$overload_rate" --duration "$duration" "${common[@]}" "${tmix[@]}"
  stop_server
fi

if [[ $only == *3* ]]; then
  for pc in on off; do
    if [ $pc = on ]; then start_server prefix-on; else start_server prefix-off --no-enable-prefix-caching; fi
    bench "prefix-$pc" --endpoint chat --dataset "$src/bench/workloads/shared_system_prompt.jsonl" --rate 0 \
      --concurrency "$prefix_conc" --requests "$prefix_requests" --seed 1
    stop_server
  done
fi
t_end=$(date +%s)

# ---- the RESULTS.md section ----
commit=${SITS_COMMIT:-$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)}
dirty=$(git -C "$src" status --porcelain 2>/dev/null | grep -q . && echo " + working tree" || true)
export SITS_SRC=$src
machine="$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
[ "$device" = cuda ] && machine="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | sed 's/$/ x'"$np"'/') + $machine"
python3 - "$out" "$only" "$rates" "$(date -u +%Y-%m-%dT%H:%MZ)" "$machine" "$commit$dirty" "$model" "$np" "$device" \
  "$((t_end - t_start))" "$target_tpot" "$slo_ttft" "$slo_tpot" "$overload_rate" "$duration" > "$out/results.md" <<'PYEOF'
import json, os, re, sys
out, only, rates, date, machine, commit, model, np, device, wall, target, sttft, stpot, orate, dur = sys.argv[1:]
def J(n): return json.load(open(os.path.join(out, n + ".json")))
def metric(n, name):
    p = os.path.join(out, n + ".metrics")
    m = re.search(r"^%s (\S+)" % re.escape(name), open(p).read(), re.M) if os.path.exists(p) else None
    return float(m.group(1)) if m else float("nan")
def f(x, d=0): return "-" if x is None else ("%.*f" % (d, x))
def pc(s, k): return s[k] if s else None
model = model.replace(out, "$OUT").replace(os.environ["SITS_SRC"] + "/", "")
print("### %s -- %s, commit %s\n" % (date, machine, commit))
print("`bench/experiments_cpu.sh` (this section is its `results.md`), model `%s`, `mpirun -np %s` on loopback, "
      "device %s, %s s wall in all. The exact server and sits-bench commands are listed after the tables."
      % (model, np, device, wall))
print()
cols = "| ok / sent | req/s | out tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms | E2E p50 / p99 ms | goodput |"
sep = "|---|---|---|---|---|---|---|"
def row(s):
    return "| %d / %d | %.2f | %.1f | %s / %s | %s / %s | %s / %s | %.0f%% (%.2f req/s) |" % (
        s["ok"], s["requests"], s["request_throughput"], s["output_throughput"],
        f(pc(s["ttft_ms"], "p50")), f(pc(s["ttft_ms"], "p99")), f(pc(s["tpot_ms"], "p50"), 1), f(pc(s["tpot_ms"], "p99"), 1),
        f(pc(s["e2e_ms"], "p50")), f(pc(s["e2e_ms"], "p99")), 100 * s["goodput"]["share"], s["goodput"]["rate"])
if "1" in only:
    print("**1. Goodput vs request rate, adaptive batch controller off / on** (`--target-tpot-p99-ms %s`). "
          "Poisson arrivals for %s s per rate; SLO TTFT <= %s ms and TPOT <= %s ms.\n" % (target, dur, sttft, stpot))
    print("| rate req/s | controller " + cols)
    print("|---|---" + sep)
    for r in rates.split():
        for c in ("off", "on"):
            n = "goodput-ctl%s-rate%s" % (c, r)
            if os.path.exists(os.path.join(out, n + ".json")):
                print("| %s | %s " % (r, c) + row(J(n)["overall"]))
    print()
if "2" in only:
    print("**2. Two tenants under overload** (%s req/s Poisson for %s s; gold = 1/4 of the requests, SLO TTFT <= %s ms / "
          "TPOT <= %s ms; bronze = 3/4, SLO 10x / 5x looser). *FCFS*: one server queue, no tenants file; *priority*: "
          "`--tenants` with gold priority 0 weight 4, bronze priority 1 weight 1.\n" % (orate, dur, sttft, stpot))
    print("| server | tenant " + cols)
    print("|---|---" + sep)
    for n, label in (("tenants-fcfs", "FCFS"), ("tenants-prio", "priority")):
        if os.path.exists(os.path.join(out, n + ".json")):
            d = J(n)
            for t in d["tenants"]:
                print("| %s | %s " % (label, t["name"]) + row(t))
            print("| %s | all " % label + row(d["overall"]))
    print()
if "3" in only:
    print("**3. Prefix cache on a shared-system-prompt chat workload** (`bench/workloads/shared_system_prompt.jsonl`: "
          "one ~280-token system prompt, 24 different questions, max_tokens 24; closed loop).\n")
    print("| prefix cache | ok | prompt tok | req/s | TTFT mean / p50 / p99 ms | E2E mean / p50 ms | cache hit rate (server) |")
    print("|---|---|---|---|---|---|---|")
    tt = {}
    for c in ("on", "off"):
        n = "prefix-" + c
        if os.path.exists(os.path.join(out, n + ".json")):
            s = J(n)["overall"]
            tt[c] = s["ttft_ms"]["mean"]
            print("| %s | %d | %d | %.2f | %.0f / %.0f / %.0f | %.0f / %.0f | %s |" % (
                c, s["ok"], s["prompt_tokens"], s["request_throughput"], s["ttft_ms"]["mean"], s["ttft_ms"]["p50"],
                s["ttft_ms"]["p99"], s["e2e_ms"]["mean"], s["e2e_ms"]["p50"], f(metric(n, "sits_prefix_cache_hit_rate"), 3)))
    if len(tt) == 2:
        print("\nMean TTFT speedup with the prefix cache: %.2fx." % (tt["off"] / tt["on"]))
    print()
print("Commands (server lines are one `mpirun`; bench lines add `--url URL --timeout 300 --json NAME.json`):\n")
print("```")
src = os.environ["SITS_SRC"]
print(open(os.path.join(out, "commands.txt")).read().rstrip().replace(out, "$OUT").replace(src + "/", ""))
print("```")
PYEOF
cat "$out/results.md"
echo "(written to $out/results.md)"
