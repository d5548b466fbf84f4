#!/bin/sh
# mpi_topo.sh -- 2 MPI ranks: discover + place + bind + report, on the 8-GPU XML machine and on
# this machine; JSON output parsed back; a refused layout (tp x pp x dp != 2) must fail.
# Needs top_builddir/top_srcdir/MPIRUN from the test environment (Makefile.am).
set -u
: "${top_builddir:=.}" "${top_srcdir:=.}" "${MPIRUN:=mpirun}"
prog="$top_builddir/tests/topology/mpi_topo"
xml="$top_srcdir/tests/topology/dgx8.xml"
command -v "$MPIRUN" >/dev/null 2>&1 || { echo "SKIP: no mpirun"; exit 77; }
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
# --bind-to none: the binding checked below must be ours, not mpirun's
run() { timeout 60 "$MPIRUN" $root --oversubscribe --bind-to none -np 2 "$prog" "$@" 2>&1; }
fail=0
expect() {  # expect OUTPUT PATTERN...
    out=$1; shift
    for p in "$@"; do
        if ! printf '%s\n' "$out" | grep -qF -- "$p"; then
            echo "FAIL: output lacks: $p"; fail=1
        fi
    done
}

out=$(run "$xml" 0 1 1 text); st=$?
echo "$out"
[ $st -eq 0 ] || { echo "FAIL: dgx8 run exited $st"; fail=1; }
expect "$out" "topology: 2 ranks on 1 node: tp 2 x pp 1 x dp 1" \
    "rank 0: host dgx8 local 0/2, gpu 0 0000:18:00.0" "cores 0-15 (pus 0-15,64-79)" \
    "rank 1: host dgx8 local 1/2, gpu 1 0000:2a:00.0" "cores 16-31 (pus 16-31,80-95)" \
    "tp groups (1): [0 1]" "rank 0 bound_cores 16 gpu 0" "rank 1 bound_cores 16 gpu 1"

out=$(run - 2 1 1 text); st=$?
echo "$out"
[ $st -eq 0 ] || { echo "FAIL: live run exited $st"; fail=1; }
expect "$out" "topology: 2 ranks on 1 node: tp 2 x pp 1 x dp 1" "rank 0: host" "rank 1: host" \
    "rank 0 bound_cores" "rank 1 bound_cores"
# each rank runs on exactly the PUs it was given
for r in 0 1; do
    line=$(printf '%s\n' "$out" | grep "^rank $r pus ")
    set -- $line
    if [ "$#" -ne 6 ] || [ "$4" != "$6" ]; then echo "FAIL: rank $r binding: '$line'"; fail=1; fi
done

out=$(run "$xml" 1 1 2 json); st=$?
[ $st -eq 0 ] || { echo "FAIL: json run exited $st"; echo "$out"; fail=1; }
if [ -n "${PYTHON:-}" ] && command -v "$PYTHON" >/dev/null 2>&1; then
    printf '%s\n' "$out" | "$PYTHON" -c '
import json, sys
d = json.load(sys.stdin)
assert d["world_size"] == 2 and d["dp"] == 2 and d["tp"] == 1, d
assert [r["rank"] for r in d["ranks"]] == [0, 1]
assert [r["gpu"]["pci_bus_id"] for r in d["ranks"]] == ["0000:18:00.0", "0000:2a:00.0"]
assert d["groups"]["dp"] == [[0, 1]], d["groups"]
' || { echo "FAIL: json map"; echo "$out"; fail=1; }
else
    expect "$out" '"world_size": 2' '"pci_bus_id": "0000:2a:00.0"'
fi

out=$(run "$xml" 3 1 1 text); st=$?
[ $st -ne 0 ] || { echo "FAIL: tp 3 on 2 ranks was accepted"; fail=1; }
expect "$out" "tp x pp x dp = 3 x 1 x 1 = 3, but the job has 2 ranks"

[ $fail -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
