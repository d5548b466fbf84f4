#!/bin/sh
# [bench] bench/sits-bench-attention on the cpu backend (small shapes; the GPU A/Bs of the attention kernels use it):
# for each KV type a mixed step (prompts after a cached prefix + decode rows) runs, prints its three rows and writes
# JSON whose accounting matches the attention it timed, derived here from the shapes alone:
#  - prompts: causal attention of L tokens after P cached, H heads of head_dim D: QK^T and P V are 2 D flops each per
#    (query, key) pair and head, query i of a prompt sees P + i + 1 keys -> flops = 4 D H sum_i (P + i + 1);
#  - decode rows: every row reads its context's K and V rows of every KV head: 8-bit KV a row is D codes + a 4-byte
#    fp32 scale (the per-token, per-head scale of the fp8 / int8 caches), bf16 KV 2 D bytes;
#  - TFLOP/s x ms and GB/s x ms give those totals back; floor ms = bytes / the copy bandwidth the run measured.
# And what it must refuse: --trace without the cuda backend, a malformed --prompts.
. "$top_srcdir/tests/integration/lib.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the JSON"; exit 77; }
b="$top_builddir/bench/sits-bench-attention"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
H=4 KVH=2 D=64 NP=2 L=48 P=16 ND=3 C=70
for kv in fp8 int8 bf16; do
  if timeout 120 "$b" --device cpu --threads 2 --kv-cache-dtype $kv --heads $H --kv-heads $KVH --head-dim $D \
      --prompts ${NP}x$L --prefix $P --decodes ${ND}x$C --iters 2 --warmup 1 --json "$tmp/$kv.json" > "$tmp/$kv.txt" 2>&1; then
    ok "$kv: ran"
  else
    bad "$kv: rc $?"; cat "$tmp/$kv.txt"; continue
  fi
  for r in mixed prompts decodes; do grep -q "^$r " "$tmp/$kv.txt" && ok "$kv: table row $r" || bad "$kv: no table row $r"; done
  python3 - "$tmp/$kv.json" $kv $H $KVH $D $NP $L $P $ND $C <<'PY' && ok "$kv: JSON accounting (tokens, flops, KV bytes, floor)" || bad "$kv: JSON accounting"
import json, sys
j = json.load(open(sys.argv[1])); kv = sys.argv[2]
H, KVH, D, NP, L, P, ND, C = map(int, sys.argv[3:])
flops = NP * 4.0 * D * H * sum(P + i + 1 for i in range(L))
row = KVH * (D + 4 if kv in ("fp8", "int8") else 2 * D)
kvb = ND * C * 2.0 * row
want = {"mixed": (NP * L + ND, flops, kvb), "prompts": (NP * L, flops, 0.0), "decodes": (ND, 0.0, kvb)}
rows = {r["batch"]: r for r in j["rows"]}
assert j["bench"] == "attention" and j["settings"]["kv_cache_dtype"] == kv, j["settings"]
assert j["copy_gbs"] > 0, j.get("copy_gbs")
for name, (tok, fl, by) in want.items():
    r = rows[name]; s = r["ms"] * 1e-3
    assert r["tokens"] == tok, (name, r["tokens"], tok)
    assert r["ms"] > 0, (name, r)
    assert abs(r["tflops"] * 1e12 * s - fl) <= 1e-6 * max(fl, 1.0), (name, r["tflops"] * 1e12 * s, fl)
    assert abs(r["kv_gbs"] * 1e9 * s - by) <= 1e-6 * max(by, 1.0), (name, r["kv_gbs"] * 1e9 * s, by)
    assert abs(r["floor_ms"] * 1e-3 - by / (j["copy_gbs"] * 1e9)) <= 1e-6 * max(r["floor_ms"] * 1e-3, 1e-12), (name, r["floor_ms"])
PY
done
"$b" --device cpu --threads 2 --heads $H --kv-heads $KVH --head-dim $D --prompts 1x16 --decodes 0x1 --iters 1 --trace > "$tmp/tr.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "needs the cuda backend" "$tmp/tr.txt" && ok "--trace on the cpu backend refused (rc $rc)" || { bad "--trace on cpu: rc $rc"; cat "$tmp/tr.txt"; }
"$b" --device cpu --prompts 2y48 > "$tmp/bad.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "^usage:" "$tmp/bad.txt" && ok "malformed --prompts refused with the usage (rc $rc)" || { bad "--prompts 2y48: rc $rc"; cat "$tmp/bad.txt"; }
finish
