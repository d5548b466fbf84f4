#!/bin/sh
# [bench] [int4] bench/sits-bench-w4 on the cpu backend (the two tiny linears; the GPU A/Bs of kernels/w4a16.cu use it):
# every (linear, tokens) row is printed and written to JSON whose accounting matches the linear it timed, derived here
# from the shapes alone: a call reads out * in / 2 bytes of nibbles and out * (in / group) fp32 scales and zeros;
# GB/s x us gives those bytes back; floor us = bytes / the copy bandwidth the run measured.
# And what it must refuse: --compare without the cuda backend, a malformed --tokens or --compare-env, a group that does
# not divide in.
. "$top_srcdir/tests/integration/lib.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 is needed to read the JSON"; exit 77; }
b="$top_builddir/bench/sits-bench-w4"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for g in 128 64; do
  if timeout 120 "$b" --device cpu --threads 2 --shapes tiny --tokens 1,3 --group $g --iters 2 --warmup 1 --pool-mib 4 \
      --json "$tmp/$g.json" > "$tmp/$g.txt" 2>&1; then
    ok "group $g: ran"
  else
    bad "group $g: rc $?"; cat "$tmp/$g.txt"; continue
  fi
  for r in "a *256 *1024 *1 " "a *256 *1024 *3 " "b *512 *2048 *1 " "b *512 *2048 *3 "; do
    grep -q "^$r" "$tmp/$g.txt" && ok "group $g: table row '$r'" || bad "group $g: no table row '$r'"
  done
  python3 - "$tmp/$g.json" $g <<'PY' && ok "group $g: JSON accounting (bytes, GB/s, floor)" || bad "group $g: JSON accounting"
import json, sys
j = json.load(open(sys.argv[1])); g = int(sys.argv[2])
assert j["bench"] == "w4" and j["settings"]["group"] == g and j["settings"]["backend"] == "cpu", j["settings"]
assert j["copy_gbs"] > 0, j.get("copy_gbs")
want = {("a", 1), ("a", 3), ("b", 1), ("b", 3)}
got = {(r["shape"], r["tokens"]) for r in j["rows"]}
assert got == want, got
for r in j["rows"]:
    by = r["out"] * r["in"] / 2 + 2 * 4 * r["out"] * (r["in"] // g)
    assert r["us"] > 0, r
    assert abs(r["gbs"] * 1e3 * r["us"] - by) <= 1e-6 * by, (r, by)
    assert abs(r["floor_us"] - 1e6 * by / (j["copy_gbs"] * 1e9)) <= 1e-6 * r["floor_us"], (r, by)
    assert "us_no_pgemv" not in r and "us_compare" not in r, r
PY
done
"$b" --device cpu --shapes tiny --compare --iters 1 > "$tmp/cmp.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "needs the cuda backend" "$tmp/cmp.txt" && ok "--compare on the cpu backend refused (rc $rc)" || { bad "--compare on cpu: rc $rc"; cat "$tmp/cmp.txt"; }
"$b" --device cpu --shapes tiny --tokens 1,x > "$tmp/bad.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "^usage:" "$tmp/bad.txt" && ok "malformed --tokens refused with the usage (rc $rc)" || { bad "--tokens 1,x: rc $rc"; cat "$tmp/bad.txt"; }
"$b" --device cpu --shapes tiny --compare-env SITS_W4_PG_MAX_N > "$tmp/env.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "wants VAR=VALUE" "$tmp/env.txt" && ok "--compare-env without '=' refused (rc $rc)" || { bad "--compare-env SITS_W4_PG_MAX_N: rc $rc"; cat "$tmp/env.txt"; }
"$b" --device cpu --shapes tiny --group 96 > "$tmp/grp.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "does not divide" "$tmp/grp.txt" && ok "--group 96 (not dividing in 1024) refused (rc $rc)" || { bad "--group 96: rc $rc"; cat "$tmp/grp.txt"; }
finish
