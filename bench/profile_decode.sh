#!/usr/bin/env bash
# bench/profile_decode.sh BUILD_DIR OUT_DIR [bench_decode args...] -- where one decode step's time goes
# on the GPU: runs bench/sits-bench-decode under Nsight Compute (ncu --clock-control none, kernel
# duration only, CUDA graph nodes profiled one by one) and prints the per-kernel table of one step
# (total GPU time per kernel name / steps, count per step, share) plus the step's kernel-time sum, to
# compare with the bench's wall-clock ms/step (the difference is launch / graph gaps and host time).
# Defaults: the 8B-shaped dummy model, batch 1, context 128, 3 timed steps. PICK=prefill: the table of the
# three longest steps instead (with --prefill N: a prefill of N tokens). Not a test.
set -uo pipefail
build=${1:?usage: profile_decode.sh BUILD_DIR OUT_DIR [args]}; out=${2:?}; shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$NCU" ] || { echo "profile_decode.sh: ncu not found" >&2; exit 77; }
args=(--model "$src/bench/configs/llama3-8b" --load-format dummy --batch 1 --context 128 --fill none --iters 3 --warmup 1
      --prefill 0 "$@")
"$build/bench/sits-bench-decode" "${args[@]}" > "$out/plain.txt" 2>&1
# the timed steps are the last 4 (warmup + iters) engine steps: profile everything after the fill
# the dummy weights' fill kernels are not profiled (thousands of launches for an MoE model: minutes under ncu)
"$NCU" --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv --print-units base -k 'regex:^(?!dummy_)' \
  "$build/bench/sits-bench-decode" "${args[@]}" > "$out/ncu.csv" 2> "$out/ncu.err"
python3 - "$out/ncu.csv" <<'PYEOF' | tee "$out/profile.txt"
import csv, sys, collections, re, os
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
iname, imet, ival = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
ks = [(r[iname], float(r[ival].replace(",", ""))) for r in rows if r[imet] == "gpu__time_duration.sum"]
# every forward starts with the embedding gather (a decode step's sampling kernels close it; a prefill
# forward of the bench samples nothing): split the sequence there
steps, cur = [], []
for n, t in ks:
    if "embed" in n.lower() and cur:
        steps.append(cur); cur = []
    cur.append((n, t))
steps.append(cur)
dec = [s for s in steps if len(s) > 20 and any("sample" in n.lower() for n, _ in s)][-3:]   # the last timed decode steps
if os.environ.get("PICK") == "prefill":        # the 3 longest steps: the prefill forwards (--prefill N)
    dec = sorted([s for s in steps if len(s) > 20], key=lambda s: -sum(t for _, t in s))[:3]
agg = collections.defaultdict(lambda: [0.0, 0])
for s in dec:
    for n, t in s:
        k = re.sub(r"\(.*", "", n)[:70]
        agg[k][0] += t / len(dec); agg[k][1] += 1 / len(dec)
tot = sum(v[0] for v in agg.values())
print("%-72s %10s %6s %6s" % ("kernel (per step)", "us", "count", "share"))
for k, (t, c) in sorted(agg.items(), key=lambda x: -x[1][0]):
    print("%-72s %10.1f %6.0f %5.1f%%" % (k, t / 1e3, c, 100 * t / tot))
print("%-72s %10.1f %6.0f" % ("SUM of kernel time per step", tot / 1e3, sum(v[1] for v in agg.values())))
PYEOF
grep -E "decode|floor" "$out/plain.txt" | head -5
