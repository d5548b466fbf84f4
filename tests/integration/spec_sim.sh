#!/bin/bash
# [speculative] bench/spec_sim.py replays the server's n-gram drafting policy exactly: its counts for the server's
# policy (drafter "earliest", k rule "keep"), computed from the plain greedy outputs it records, equal what the server
# running with n-gram speculation reports in /metrics (bench/spec_bench.py: verifications, accepted and drafted
# tokens) on the same prompt sets, at k 4 -- so its other rows (other drafters and k rules) are the counts those
# policies would get. Demo model, CPU backend, batch 1.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
DEMO="$top_srcdir/models/demo"
[ -f "$DEMO/model.safetensors" ] || { echo "SKIP: models/demo is missing"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
sits="$top_builddir/sits-dist"
mpi="$SITS_MPIRUN -np 1"
if timeout 300 "$PY" "$top_srcdir/bench/spec_sim.py" --sits "$sits" --model "$DEMO" --mpirun "$mpi" --k 4 --max-tokens 48 \
     --costs "plain=3,1=3.1,4=3.3" --record "$tmp/rec.json" --json "$tmp/sim.json" > "$tmp/sim.txt" 2>&1; then
  ok "spec_sim.py recorded the greedy outputs and replayed the policies"
else
  bad "spec_sim.py: rc $?"; tail -20 "$tmp/sim.txt"; finish
fi
if timeout 300 "$PY" "$top_srcdir/bench/spec_bench.py" --sits "$sits" --model "$DEMO" --mpirun "$mpi" --configs 4 --max-tokens 48 \
     --sets copy,loop,code,chat --json "$tmp/bench.json" > "$tmp/bench.txt" 2>&1; then
  ok "spec_bench.py ran the server with n-gram k 4"
else
  bad "spec_bench.py: rc $?"; tail -20 "$tmp/bench.txt"; finish
fi
"$PY" - "$tmp/sim.json" "$tmp/bench.json" > "$tmp/cmp.txt" 2>&1 <<'PY'
import json, sys
sim = {r["set"]: r for r in json.load(open(sys.argv[1]))["rows"] if r["server_policy"] and r["k"] == 4}
bench = json.load(open(sys.argv[2]))["rows"]
bad = 0
for b in bench:
    s = sim[b["set"]]
    got = (s["tokens"], s["verifications"], s["accepted"], s["drafted"])
    want = (b["tokens"], b["verifications"], b["accepted"], b["drafted"])
    print("%-5s server tokens/verifications/accepted/drafted %s, replay %s" % (b["set"], want, got))
    bad += got != want or b["verifications"] == 0
others = [r for r in json.load(open(sys.argv[1]))["rows"] if not r["server_policy"]]
assert {(r["drafter"], r["k_rule"]) for r in others} == {("earliest", "adaptive"), ("earliest", "fixed"), ("recent", "keep"),
                                                         ("recent", "adaptive"), ("recent", "fixed")}, others
assert all(r["speedup_projected"] > 0 for r in json.load(open(sys.argv[1]))["rows"])
sys.exit(1 if bad else 0)
PY
rc=$?
sed 's/^/  /' "$tmp/cmp.txt"
[ $rc -eq 0 ] && ok "the replay of the server's policy equals the server's counts in every set" || bad "replay != server"
finish
