#!/bin/bash
# run.sh TIME_PER_TARGET [TARGET...] -- runs each fuzz target (default: all) for TIME_PER_TARGET
# seconds, one at a time, at nice 19, one job, from a copy of its committed seed corpus
# (tests/fuzz/corpus/<target>; new inputs go to the work dir, not into the repository).
# Env: FUZZ_BUILD (default /tmp/sits-fuzz-build, built by build.sh when missing), FUZZ_WORK (default
# /tmp/sits-fuzz-work), FUZZ_RSS_MB (default 2048). Prints one summary line per target:
#   target seconds execs exec/s corpus coverage findings
# and exits 1 when any target found a crash, leak, timeout or broken invariant (artifacts in the work dir).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t=${1:?usage: run.sh TIME_PER_TARGET [TARGET...]}
shift
targets=${*:-safetensors gguf st_index config tokenizer request plan kv_shard kv_move template}
b=${FUZZ_BUILD:-/tmp/sits-fuzz-build}
w=${FUZZ_WORK:-/tmp/sits-fuzz-work}
[ -x "$b/fuzz_plan" ] || "$here/build.sh" "$b" || exit $?
mkdir -p "$w"
found=0
printf '%-12s %6s %12s %8s %7s %6s %s\n' target secs execs exec/s corpus cov findings
for x in $targets; do
  rm -rf "$w/$x"; mkdir -p "$w/$x/corpus" "$w/$x/art"
  cp "$here/corpus/$x"/* "$w/$x/corpus/"
  dict=()
  [ -f "$here/$x.dict" ] && dict=(-dict="$here/$x.dict")
  ( cd "$w/$x" && nice -n 19 "$b/fuzz_$x" -max_total_time="$t" -timeout=10 -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$w/$x/art/" "${dict[@]}" "$w/$x/corpus" > "$w/$x/log" 2>&1 )
  rc=$?
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$w/$x/log")
  eps=$(awk '/stat::average_exec_per_sec/ {print $2}' "$w/$x/log")
  cov=$(grep -oE 'cov: [0-9]+' "$w/$x/log" | tail -1 | awk '{print $2}')
  ncorp=$(ls "$w/$x/corpus" | wc -l)
  arts=$(ls "$w/$x/art" | wc -l)
  res="none"
  if [ $rc -ne 0 ] || [ "$arts" -gt 0 ]; then res="FOUND rc=$rc ($(ls "$w/$x/art" | tr '\n' ' '))"; found=1; fi
  printf '%-12s %6s %12s %8s %7s %6s %s\n' "$x" "$t" "${execs:-?}" "${eps:-?}" "$ncorp" "${cov:-?}" "$res"
done
exit $found
