#!/usr/bin/env bash
# bench/run_layouts.sh -- issue 11's layout comparison on N GPUs (default 2): the same model served as
# --tp N, --pp N (with and without pipeline micro-batches when the build has --pp-microbatches) and
# --dp N, each driven by bench/sits-bench closed-loop at concurrency 1 and 32 (prompt 128, output 128
# tokens, ignore_eos, greedy). Prints one table (output tok/s, TPOT P50, TTFT P50 per layout and
# concurrency) and writes OUT/layouts.json + OUT/layouts.md; server logs and sits-bench reports in OUT.
#
#   bench/run_layouts.sh --build DIR [--out DIR] [--config DIR] [--np N] [--device cuda|cpu]
#       [--requests-per-conc "1:16 32:128"] [--layouts "tp pp ppmb dp"]
#
# --config DIR: random weights of DIR/config.json's shape (default bench/configs/llama3-8b), its
# vocabulary cut to the models/demo tokenizer (8192) so every sampled id detokenizes.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build= out= config=$src/bench/configs/llama3-8b np=2 device=cuda reqs="1:16 32:128" layouts="tp pp ppmb dp"
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=$2; shift ;; --out) out=$2; shift ;; --config) config=$2; shift ;; --np) np=$2; shift ;;
    --device) device=$2; shift ;; --requests-per-conc) reqs=$2; shift ;; --layouts) layouts=$2; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "run_layouts.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$build" ] || { echo "run_layouts.sh: --build DIR is required" >&2; exit 2; }
build=$(cd "$build" && pwd)
SITS=$build/sits-dist BENCH=$build/bench/sits-bench
[ -x "$SITS" ] && [ -x "$BENCH" ] || { echo "build $build lacks sits-dist or bench/sits-bench" >&2; exit 2; }
out=${out:-$build/bench/layouts-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_pcompress_base_silence_warning=1
MPIRUN="${MPIRUN:-mpirun} --bind-to none"
[ "$device" = cpu ] && MPIRUN="$MPIRUN --oversubscribe"

model=$out/model
mkdir -p "$model"
cp "$src/models/demo/tokenizer.json" "$src/models/demo/tokenizer_config.json" "$model/"
python3 - "$config/config.json" "$model/config.json" <<'PYEOF' || exit 1
import json, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=8192, bos_token_id=8181, eos_token_id=[8182, 8190], tie_word_embeddings=False)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
srv=
stop_server() {
  [ -n "$srv" ] || return 0
  kill -TERM "$srv" 2>/dev/null
  for _ in $(seq 300); do kill -0 "$srv" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; srv=
}
trap stop_server EXIT
start_server() { # NAME FLAGS...: sets $url
  local name=$1; shift
  echo "== server $name: mpirun -np $np sits-dist --model MODEL --load-format dummy --device $device --port 0 $*" | tee -a "$out/commands.txt"
  $MPIRUN -np "$np" "$SITS" --model "$model" --load-format dummy --device "$device" --port 0 --max-num-seqs 64 "$@" \
    > "$out/server-$name.out" 2> "$out/server-$name.err" &
  srv=$!
  for _ in $(seq 1800); do
    local port
    port=$(sed -n 's|^sits-dist: serving .* on http://[^:]*:\([0-9]*\) .*|\1|p' "$out/server-$name.err" | head -1)
    if [ -n "$port" ]; then url=http://127.0.0.1:$port; curl -sf "$url/health" > /dev/null 2>&1 && return 0; fi
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.1
  done
  echo "server $name did not start:"; tail -20 "$out/server-$name.err"; return 1
}
has_mb=0
"$SITS" --help 2>&1 | grep -c -- '--pp-microbatches' > /dev/null && has_mb=1   # -c, not -q: under pipefail an early exit kills the writer (SIGPIPE)
rows=()
for l in $layouts; do
  case $l in
    tp) flags=(--tp "$np") ;;
    pp) flags=(--pp "$np") ;;   # the defaults (micro-batches only where a step has the tokens for them)
    ppmb) [ $has_mb = 1 ] || { echo "(no --pp-microbatches in this build: ppmb skipped)"; continue; }
          flags=(--pp "$np" --pp-microbatches "$np" --pp-microbatch-min-tokens 1) ;;   # every step split
    dp) flags=(--dp "$np") ;;
    *) echo "unknown layout $l" >&2; continue ;;
  esac
  start_server "$l" "${flags[@]}" || continue
  for cr in $reqs; do
    c=${cr%%:*} n=${cr##*:}
    # warm-up (graphs, GEMM tuning) then the measured run
    "$BENCH" --url "$url" --rate 0 --concurrency "$c" --requests "$c" --prompt-len fixed:128 --output-len fixed:16 \
      --vocab-range 100:8181 --quiet > /dev/null 2>&1
    "$BENCH" --url "$url" --rate 0 --concurrency "$c" --requests "$n" --prompt-len fixed:128 --output-len fixed:128 \
      --vocab-range 100:8181 --seed 1 --json "$out/$l-c$c.json" > "$out/$l-c$c.txt" 2> "$out/$l-c$c.err" \
      || { echo "sits-bench $l c$c failed"; tail -3 "$out/$l-c$c.err"; continue; }
    rows+=("$l $c ${flags[*]}")
  done
  stop_server
done
python3 - "$out" "${rows[@]}" <<'PYEOF'
import json, sys, os
out = sys.argv[1]
res = []
print("%-6s %-28s %5s %12s %10s %10s" % ("layout", "flags", "conc", "out tok/s", "TPOT p50", "TTFT p50"))
lines = ["| layout | flags | concurrency | output tok/s | TPOT P50 ms | TTFT P50 ms |", "|---|---|---|---|---|---|"]
for r in sys.argv[2:]:
    l, c, flags = r.split(" ", 2)
    j = json.load(open(os.path.join(out, "%s-c%s.json" % (l, c))))
    o = j["overall"]
    tps, tpot, ttft = o["output_throughput"], o["tpot_ms"]["p50"], o["ttft_ms"]["p50"]
    if o["failed"]: print("  (%s c%s: %d requests failed)" % (l, c, o["failed"]))
    res.append({"layout": l, "flags": flags, "concurrency": int(c), "output_tok_s": tps, "tpot_p50_ms": tpot, "ttft_p50_ms": ttft})
    f = lambda x: "%.1f" % x if isinstance(x, (int, float)) else str(x)
    print("%-6s %-28s %5s %12s %10s %10s" % (l, flags, c, f(tps), f(tpot), f(ttft)))
    lines.append("| %s | `%s` | %s | %s | %s | %s |" % (l, flags, c, f(tps), f(tpot), f(ttft)))
json.dump(res, open(os.path.join(out, "layouts.json"), "w"), indent=1)
open(os.path.join(out, "layouts.md"), "w").write("\n".join(lines) + "\n")
PYEOF
