#!/bin/sh
# [bench] bench/env_ab.py on the cpu backend (the GPU A/Bs of environment switches use it): two variants of
# sits-bench-decode on the llama_small fixture, twice each, interleaved; every (row, variant) gets one time a repetition,
# their median, and its change against the first variant (0 for the first itself); each variant's settings reach its
# runs and only its runs (SITS_LOG_LEVEL=debug: DEBUG lines in that variant's logs, none in the other's); verification
# rows keep their k. Refused: a malformed --variant, --json among the bench's arguments, a run that fails (its tail shown).
. "$top_srcdir/tests/integration/lib.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 runs bench/env_ab.py"; exit 77; }
ab="$top_srcdir/bench/env_ab.py"
b="$top_builddir/bench/sits-bench-decode"
m="$top_srcdir/tests/fixtures/models/llama_small"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
args="--model $m --device cpu --threads 1 --batch 1,2 --context 16 --iters 2 --warmup 1 --prefill 0 --verify 2"
if timeout 300 python3 "$ab" --bench "$b" --reps 2 --out "$tmp/runs" --json "$tmp/ab.json" \
    --variant "quiet:SITS_LOG_LEVEL=error" --variant "debug:SITS_LOG_LEVEL=debug" -- $args > "$tmp/ab.txt" 2>&1; then
  ok "env_ab.py ran 2 variants x 2 repetitions"
else
  bad "env_ab.py: rc $?"; cat "$tmp/ab.txt"
fi
grep -q "^decode  *1  *16  *- quiet " "$tmp/ab.txt" && grep -q "^verify  *2  *16  *2 debug " "$tmp/ab.txt" &&
  ok "table rows (decode batch 1, verify k 2)" || { bad "table rows"; cat "$tmp/ab.txt"; }
python3 - "$tmp/ab.json" <<'PY' && ok "JSON: every row x variant, a time a repetition, median, change vs the first" || bad "JSON"
import json, statistics, sys
j = json.load(open(sys.argv[1]))
assert j["bench"] == "env_ab" and j["reps"] == 2, j
assert [v["name"] for v in j["variants"]] == ["quiet", "debug"] and j["variants"][1]["env"] == {"SITS_LOG_LEVEL": "debug"}, j["variants"]
keys = {(r["kind"], r["batch"], r["context"], r["k"]) for r in j["rows"]}
assert keys == {("decode", 1, 16, 0), ("decode", 2, 16, 0), ("verify", 1, 16, 2), ("verify", 2, 16, 2)}, keys
by = {}
for r in j["rows"]:
    assert len(r["ms"]) == 2 and all(v > 0 for v in r["ms"]), r
    assert abs(r["ms_median"] - statistics.median(r["ms"])) < 1e-12, r
    by[(r["kind"], r["batch"], r["k"], r["variant"])] = r
for (kind, batch, k, v), r in by.items():
    base = by[(kind, batch, k, "quiet")]["ms_median"]
    assert abs(r["vs_first"] - (r["ms_median"] / base - 1.0)) < 1e-9, r
    if v == "quiet":
        assert r["vs_first"] == 0.0, r
PY
n_dbg=$(cat "$tmp"/runs/debug.rep*.txt | grep -c DEBUG); n_q=$(cat "$tmp"/runs/quiet.rep*.txt | grep -c DEBUG)
[ "$n_dbg" -gt 0 ] && [ "$n_q" -eq 0 ] && ok "each variant's environment reached its runs only ($n_dbg DEBUG lines vs $n_q)" ||
  bad "variant environments: $n_dbg DEBUG lines in debug's runs, $n_q in quiet's"
python3 "$ab" --bench "$b" --variant "nocolon" -- $args > "$tmp/v.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "is NAME:VAR=VALUE" "$tmp/v.txt" && ok "malformed --variant refused (rc $rc)" || { bad "--variant nocolon: rc $rc"; cat "$tmp/v.txt"; }
python3 "$ab" --bench "$b" --variant "a:" -- $args --json "$tmp/x.json" > "$tmp/j.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "must not set --json" "$tmp/j.txt" && ok "--json among the bench's arguments refused (rc $rc)" || { bad "--json: rc $rc"; cat "$tmp/j.txt"; }
python3 "$ab" --bench "$b" --variant "a:" -- --model "$tmp/no-such-model" --device cpu --iters 1 > "$tmp/f.txt" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "a (rep 1) failed" "$tmp/f.txt" && ok "a failing run stops the A/B with its tail (rc $rc)" || { bad "failing run: rc $rc"; cat "$tmp/f.txt"; }
finish
