#!/bin/sh
# lock-run.sh -- the test harness's wrapper (LOG_COMPILER / SH_LOG_COMPILER): every test holds a
# shared lock on one file in the build tree while it runs; a load test holds it exclusively, so it
# measures the server and not the tests beside it under `make -jN check` (it waits for the running
# ones to end, and the others wait for it). Exit status: the test's own (77 included).
#   lock-run.sh TEST [ARGS...]
lock=${top_builddir:-.}/tests/.run-lock
mkdir -p "$(dirname "$lock")"
case "$1" in
  */soak/soak.sh | soak.sh) mode=-x ;;
  *) mode=-s ;;
esac
command -v flock >/dev/null 2>&1 || exec "$@"
exec flock "$mode" "$lock" "$@"
