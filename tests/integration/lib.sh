# lib.sh -- helpers for the shell tests: results, reference lookups, rank pids.
. "$top_srcdir/tests/integration/mpi_env.sh"
SITS="$top_builddir/sits-dist"
FIX="$top_srcdir/tests/fixtures/models"
n_fail=0
ok()   { echo "ok   $*"; }
bad()  { echo "FAIL $*"; n_fail=$((n_fail + 1)); }
finish() { [ "$n_fail" -eq 0 ] && { echo "PASS"; exit 0; }; echo "$n_fail check(s) failed"; exit 1; }
# ref_row FILE KEY I: row I of a list-of-lists KEY in a reference.json written by gen_fixtures.py
# (one row per line), as comma-separated ids without spaces.
ref_row() { awk -v key="\"$2\": [" -v i="$3" 'index($0, key) { on = 1; n = -1; next } on { n++; if (n == i) { gsub(/[][ ]/, ""); sub(/,$/, ""); print; exit } }' "$1"; }
# pid of world rank R among the running processes of command line pattern P
rank_pid() {
  for p in $(pgrep -f "$2"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo "$p"; return 0; fi
  done
  return 1
}
