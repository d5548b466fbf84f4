#!/usr/bin/env bash
# bench/commit_ab.sh -- whole decode steps of several commits in one run (a regression's bisection, a change against
# its parent), as bench/env_ab.py does for environment switches. Not a test.
#
#   bench/commit_ab.sh [--reps N] [--out DIR] [--json FILE] [--build-root DIR] REV|NAME=BINARY ... -- SITS-BENCH-DECODE ARGS...
#
# Each REV (anything `git rev-parse` takes) is checked out as a detached git worktree under BUILD-ROOT/<sha> (default
# ${TMPDIR:-/tmp}/sits-commit-ab; kept, so a second run reuses the build) and its bench/sits-bench-decode built there
# (autoreconf, configure -- CUDA where nvcc is found, as for the checkout; $COMMIT_AB_CONFIGURE adds flags, e.g.
# --without-cuda --, make); NAME=BINARY names a binary already
# built (e.g. cur=build-gpu/bench/sits-bench-decode for the working tree). Then bench/env_ab.py runs them with the same
# arguments, interleaved over --reps repetitions (variant BENCH=...), and prints its table (ms a step, median, change
# against the first) and JSON. Run from the checkout root (the bench arguments' paths are the caller's), e.g.
#   bench/commit_ab.sh 9276d44 13eda74^ 13eda74 cur=build-gpu/bench/sits-bench-decode -- \
#       --model bench/configs/qwen3-30b-a3b --load-format dummy --device cuda --fill none --batch 32 --context 128
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
reps=2 out= json= root=${TMPDIR:-/tmp}/sits-commit-ab
revs=()
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --json) json=${2:?}; shift 2 ;;
    --build-root) root=${2:?}; shift 2 ;;
    --) shift; break ;;
    -*) usage ;;
    *) revs+=("$1"); shift ;;
  esac
done
[ ${#revs[@]} -ge 1 ] && [ $# -ge 1 ] || usage
mkdir -p "$root"
variants=()
for r in "${revs[@]}"; do
  if [[ $r == *=* ]]; then   # NAME=BINARY: built already
    name=${r%%=*} bin=${r#*=}
    [ -x "$bin" ] || { echo "commit_ab.sh: $bin is not an executable" >&2; exit 1; }
    variants+=(--variant "$name:BENCH=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")")
    continue
  fi
  sha=$(git -C "$top" rev-parse --short=10 "$r^{commit}") || { echo "commit_ab.sh: no commit $r here" >&2; exit 1; }
  wt=$root/$sha bin=$root/$sha/build/bench/sits-bench-decode
  if [ ! -x "$bin" ]; then
    [ -d "$wt" ] || git -C "$top" worktree add -f --detach "$wt" "$sha" > /dev/null
    echo "commit_ab.sh: building $r ($sha) in $wt/build" >&2
    (cd "$wt" && autoreconf -fi > "$root/$sha.autoreconf.log" 2>&1 && mkdir -p build && cd build &&
       { [ -f Makefile ] || ../configure -q ${COMMIT_AB_CONFIGURE:-} > "$root/$sha.configure.log" 2>&1; } &&
       make -j"$(nproc)" bench/sits-bench-decode > "$root/$sha.make.log" 2>&1) ||
      { echo "commit_ab.sh: the build of $sha failed; the end of $root/$sha.make.log (or configure.log):" >&2
        tail -20 "$root/$sha.make.log" "$root/$sha.configure.log" 2> /dev/null >&2; exit 1; }
  fi
  variants+=(--variant "$(printf '%s' "$r" | tr -c 'A-Za-z0-9_.^~-' _ | cut -c1-12):BENCH=$bin")
done
args=(--bench "$(echo "${variants[1]}" | sed 's/^[^:]*:BENCH=//')" --reps "$reps" "${variants[@]}")
[ -n "$out" ] && args+=(--out "$out")
[ -n "$json" ] && args+=(--json "$json")
exec python3 "$here/env_ab.py" "${args[@]}" -- "$@"
