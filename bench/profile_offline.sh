#!/usr/bin/env bash
# bench/profile_offline.sh BUILD_DIR OUT_DIR [sits-bench-offline args...] -- where an offline run's GPU time goes
# (e.g. TensorRT-LLM's 2048/128 row: `--input 2048 --output 128 --requests 32 --max-num-seqs 32 --quant fp8
# --kv-cache-dtype fp8`). Runs bench/sits-bench-offline under Nsight Compute (the device image has ncu, not nsys:
# .library/device/KINDS.md), kernel duration only, each CUDA graph timed as one item (decode steps replay as
# graphs; mixed and prefill steps run eagerly, kernel by kernel), and prints the GPU time summed over the run by
# class -- GEMMs (cuBLASLt) and GEMVs, prefill attention, decode attention, norms + activation quantisation, RoPE +
# KV writes, SiLU, sampling, MoE, whole decode graphs, other -- then the 15 largest items. ncu serialises and times
# every launch, so the bench's own tok/s line is meaningless here; keep runs small (every launch costs ~10-30 ms
# of profiling). NCU_SKIP / NCU_COUNT: --launch-skip / --launch-count (default: all). OFFPROF_STEPS=KIND:N[@SKIP]
# (prompt:N or decode:N): only N timed steps of that kind, after SKIP of them, are profiled (sits-bench-offline
# --profile-steps starts and stops the CUDA profiler around them, ncu --profile-from-start off): the rest of the
# run -- loading, warm-up, graph captures, the other steps -- goes at nearly full speed, so a whole row's
# request count fits (unwindowed, 8 requests of 2048/128 did not finish in 200 s on the H200). OFFPROF_GRAPHS=node
# times a graph's kernels one by one (decode steps), default graph (each graph one item). NCU_CACHE=all flushes the
# caches before every kernel (ncu's own default); default none, each kernel finds the caches as the one before left
# them, nearer a real run. Either way kernel times under ncu are inflated (2026-12-03, a 2048/128 mixed step: 226 ms
# of kernels flushed, 234 unflushed, 154 ms real): compare shares, and take real times from SITS_CUDA_OP_TIMES=1
# (bench/README.md). Defaults: the
# 8B-shaped dummy model. Not a test; exits 77 without ncu. Writes OUT_DIR/bench.txt, ncu.csv, profile.txt.
set -uo pipefail
build=${1:?usage: profile_offline.sh BUILD_DIR OUT_DIR [sits-bench-offline args]}; out=${2:?}; shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$NCU" ] || { echo "profile_offline.sh: ncu not found" >&2; exit 77; }
args=(--model "$src/bench/configs/llama3-8b" --load-format dummy --device cuda "$@")
range=()
[ -n "${NCU_SKIP:-}" ] && range+=(--launch-skip "$NCU_SKIP")
[ -n "${NCU_COUNT:-}" ] && range+=(--launch-count "$NCU_COUNT")
if [ -n "${OFFPROF_STEPS:-}" ]; then
  range+=(--profile-from-start off)
  args+=(--profile-steps "$OFFPROF_STEPS")
fi
"$NCU" --clock-control none --cache-control "${NCU_CACHE:-none}" --graph-profiling "${OFFPROF_GRAPHS:-graph}" "${range[@]}" --metrics gpu__time_duration.sum --csv --print-units base \
  "$build/bench/sits-bench-offline" "${args[@]}" > "$out/ncu.csv" 2> "$out/bench.txt" || { tail -20 "$out/bench.txt"; exit 1; }
python3 - "$out/ncu.csv" <<'PYEOF' | tee "$out/profile.txt"
import csv, re, sys, collections
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
h0 = next(i for i, r in enumerate(rows) if "Metric Name" in r)   # the program's own stdout comes first
hdr, rows = rows[h0], rows[h0 + 1:]
iname, imet, ival = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
ks = [(r[iname], float(r[ival].replace(",", ""))) for r in rows if len(r) == len(hdr) and r[imet] == "gpu__time_duration.sum"]
# classes by name: our kernels (kernels/*.cu) by theirs, cuBLASLt's by its naming (sm90_xmma / nvjet / cutlass / gemm);
# the first pattern that matches wins
classes = [("attention prefill", r"att_prefill"), ("attention decode", r"att_decode|att_reduce|att_combine"),
           ("GEMV (one-token kernels)", r"gemv|w4_"), ("GEMM (cuBLASLt)", r"gemm|xmma|nvjet|cutlass|sm90_|Kernel2"),
           ("FP8 scale-out pass", r"fp8_scale_out"), ("norms + activation quant", r"rmsnorm|quant_fp8|norm"),
           ("RoPE + KV write", r"rope|kv_write"), ("SiLU * mul", r"silu"), ("MoE routing / combine", r"moe_"),
           ("sampling / logits", r"logit|sample|argmax|topk|softcap|scale_kernel"),
           ("embedding / gather / copies", r"embed|gather|kv_block_copy"), ("CUDA graphs (decode steps)", r"graph")]
agg = collections.defaultdict(lambda: [0.0, 0])
per = collections.defaultdict(lambda: [0.0, 0])
for n, t in ks:
    cls = next((name for name, pat in classes if re.search(pat, n, re.I)), "other")
    agg[cls][0] += t
    agg[cls][1] += 1
    k = re.sub(r"\(.*", "", n)[:80]
    per[k][0] += t
    per[k][1] += 1
tot = sum(v[0] for v in agg.values()) or 1.0
print("%-30s %12s %9s %7s" % ("class (whole run, GPU time)", "ms", "items", "share"))
for k, (t, c) in sorted(agg.items(), key=lambda x: -x[1][0]):
    print("%-30s %12.1f %9d %6.1f%%" % (k, t / 1e6, c, 100 * t / tot))
print("%-30s %12.1f %9d" % ("SUM", tot / 1e6, sum(v[1] for v in agg.values())))
print()
print("%-80s %10s %7s" % ("largest items", "ms", "count"))
for k, (t, c) in sorted(per.items(), key=lambda x: -x[1][0])[:15]:
    print("%-80s %10.1f %7d" % (k, t / 1e6, c))
PYEOF
