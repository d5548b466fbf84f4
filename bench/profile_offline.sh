#!/usr/bin/env bash
# bench/profile_offline.sh BUILD_DIR OUT_DIR [sits-bench-offline args...] -- where an offline run's GPU time goes
# (e.g. TensorRT-LLM's 2048/128 row: `--input 2048 --output 128 --requests 256 --max-num-seqs 256 --quant fp8
# --kv-cache-dtype fp8`). Runs bench/sits-bench-offline under Nsight Systems (CUDA trace, graph nodes traced one by
# one) and prints the kernel time summed over the whole run by class -- FP8 / bf16 GEMMs and GEMVs, prefill
# attention, decode attention, norms + activation quantisation, RoPE + KV writes, SiLU, sampling, MoE, other --
# beside the bench's own timed span and output tok/s, then the 15 largest kernels. The kernel sums cover the whole
# process (the engine's warm-up and graph captures too), the span only the timed requests: compare shares, and
# the span with the sum only when the run is long. Defaults: the 8B-shaped dummy model. Not a test; exits 77
# without nsys. Writes OUT_DIR/bench.txt, OUT_DIR/kern.csv, OUT_DIR/profile.txt.
set -uo pipefail
build=${1:?usage: profile_offline.sh BUILD_DIR OUT_DIR [sits-bench-offline args]}; out=${2:?}; shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
[ -n "$NSYS" ] && [ -x "$NSYS" ] || { echo "profile_offline.sh: nsys not found" >&2; exit 77; }
args=(--model "$src/bench/configs/llama3-8b" --load-format dummy --device cuda "$@")
"$NSYS" profile -t cuda --cuda-graph-trace node -o "$out/offline" -f true \
  "$build/bench/sits-bench-offline" "${args[@]}" > "$out/bench.txt" 2>&1 || { tail -20 "$out/bench.txt"; exit 1; }
"$NSYS" stats -q -r cuda_gpu_kern_sum -f csv "$out/offline.nsys-rep" > "$out/kern.csv" 2> "$out/stats.err" ||
  { cat "$out/stats.err"; exit 1; }
python3 - "$out/kern.csv" "$out/bench.txt" <<'PYEOF' | tee "$out/profile.txt"
import csv, re, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
h0 = next(i for i, r in enumerate(rows) if "Total Time (ns)" in r)   # lines before the table: nsys notices
hdr, rows = rows[h0], rows[h0:]
it, iname, icnt = hdr.index("Total Time (ns)"), hdr.index("Name"), hdr.index("Instances")
ks = [(r[iname], float(r[it]), int(r[icnt])) for r in rows[1:] if len(r) == len(hdr)]
# classes by kernel name: our kernels (kernels/*.cu) by their names, cuBLASLt's by its naming (sm90_xmma / nvjet /
# cutlass / gemm); the first pattern that matches wins
classes = [("attention prefill", r"att_prefill"), ("attention decode", r"att_decode|att_reduce|att_combine"),
           ("GEMV (one-token kernels)", r"gemv|w4_"), ("GEMM (cuBLASLt)", r"gemm|xmma|nvjet|cutlass|sm90_|Kernel2"),
           ("FP8 scale-out pass", r"fp8_scale_out"), ("norms + activation quant", r"rmsnorm|quant_fp8|norm"),
           ("RoPE + KV write", r"rope|kv_write"), ("SiLU * mul", r"silu"), ("MoE routing / combine", r"moe_"),
           ("sampling / logits", r"logit|sample|argmax|topk|softcap|scale_kernel"),
           ("embedding / gather / copies", r"embed|gather|kv_block_copy|memcpy|memset")]
agg = collections.defaultdict(lambda: [0.0, 0])
for n, t, c in ks:
    cls = next((name for name, pat in classes if re.search(pat, n, re.I)), "other")
    agg[cls][0] += t
    agg[cls][1] += c
tot = sum(v[0] for v in agg.values())
bench = open(sys.argv[2], errors="replace").read()
wall = re.search(r"requests in ([0-9.]+) s", bench)         # bench_offline.c's result line
tput = re.search(r"([0-9.]+) output tok/s", bench)
print("%-30s %12s %10s %7s" % ("class (whole run)", "kernel ms", "launches", "share"))
for k, (t, c) in sorted(agg.items(), key=lambda x: -x[1][0]):
    print("%-30s %12.1f %10d %6.1f%%" % (k, t / 1e6, c, 100 * t / tot))
print("%-30s %12.1f %10d" % ("SUM of kernel time", tot / 1e6, sum(v[1] for v in agg.values())))
if wall: print("%-30s %12.1f   (the bench's timed span; the sums above include warm-up)" % ("timed span", float(wall.group(1)) * 1e3))
if tput: print("output tok/s (the bench): %s" % tput.group(1))
print()
print("%-80s %10s %9s" % ("largest kernels", "ms", "count"))
for n, t, c in sorted(ks, key=lambda x: -x[1])[:15]:
    print("%-80s %10.1f %9d" % (re.sub(r"\(.*", "", n)[:80], t / 1e6, c))
PYEOF
