#!/bin/bash
# LeakSanitizer after a server session (only in an --enable-asan build; skips otherwise): mpirun -np 2
# serves completions and chat, streamed and not, some requests cut by the client mid-stream, some bad
# requests, then SIGTERM. Every rank must exit 0 and LSan must report no leak on either rank, with the
# third-party suppressions of tests/lsan.supp (Open MPI, PMIx, hwloc, libgomp -- never our code).
. "$top_srcdir/tests/integration/lib.sh"
case " ${SITS_SAN_FLAGS:-} " in *sanitize=address*) ;; *)
  nm "$SITS" 2>/dev/null | grep -q __asan_init || { echo "SKIP: not an --enable-asan build"; exit 77; } ;; esac
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
serve_setup "$tmp/m"
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
# full stacks so the suppressions see the library frames; one report file per process
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:malloc_context_size=40:log_path=$tmp/lsan"
export LSAN_OPTIONS="suppressions=$top_srcdir/tests/lsan.supp:print_suppressions=1"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$tmp/ubsan"
serve_start "$tmp/m" --max-num-seqs 4 --block-size 4 --kv-cache-memory 40K || finish
blocks=$(metric sits_kv_blocks_free)
post() { curl -s -o /dev/null -w '%{http_code}' "$url$1" -H 'Content-Type: application/json' -d "$2"; }
n=0
for i in 1 2 3; do
  [ "$(post /v1/completions '{"model":"m","prompt":"Hello world","max_tokens":8,"temperature":0.5,"seed":'$i'}')" = 200 ] && n=$((n + 1))
  [ "$(post /v1/completions '{"prompt":"Hi","max_tokens":6,"stream":true,"stop":["x"]}')" = 200 ] && n=$((n + 1))
  [ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hey"}],"max_tokens":5}')" = 200 ] && n=$((n + 1))
  [ "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Yo"}],"max_tokens":5,"stream":true}')" = 200 ] && n=$((n + 1))
done
[ $n -eq 12 ] && ok "12 requests served under ASan" || bad "$n of 12 requests served"
cpids=
for i in 1 2 3 4 5; do   # cancelled by the client mid-stream / mid-wait
  curl -s -m 0.$((i + 2)) "$url/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Hello","max_tokens":200,"ignore_eos":true,"stream":'$([ $((i % 2)) = 0 ] && echo true || echo false)'}' > /dev/null 2>&1 &
  cpids="$cpids $!"
done
wait $cpids
for b in '{"prompt":"x","max_tokens":0}' '{"prompt":"x",' '{"messages":[]}' '{"model":"other","prompt":"x"}'; do
  post /v1/completions "$b" > /dev/null
done
curl -s "$url/metrics" > /dev/null
for _ in $(seq 100); do [ "$(metric sits_num_requests_running)" = 0 ] && break; sleep 0.1; done
[ "$(metric sits_kv_blocks_free)" = "$blocks" ] && ok "KV blocks all free after cancellations" || bad "KV blocks free: $(metric sits_kv_blocks_free) of $blocks"
for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done
for _ in $(seq 300); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
if kill -0 $srv 2>/dev/null; then bad "still running 30 s after SIGTERM"; else wait $srv; rc=$?
  [ $rc -eq 0 ] && ok "SIGTERM: every rank exits 0 (LSan found nothing to fail on)" || { bad "exit $rc"; tail -5 "$tmp/err"; }; fi
srv=
reports=$(ls "$tmp"/lsan.* 2>/dev/null | wc -l)
if grep -l "detected memory leaks" "$tmp"/lsan.* > /dev/null 2>&1; then
  bad "LeakSanitizer reports:"; grep -h -A12 "Direct leak\|Indirect leak" "$tmp"/lsan.* | head -60
elif [ "$(grep -l "Suppressions used" "$tmp"/lsan.* 2>/dev/null | wc -l)" -ge 2 ]; then
  # LSan ran its exit-time check on both ranks (it found, and suppressed, the Open MPI allocations)
  ok "LeakSanitizer: no leak in our code on either rank; suppressed (third-party): $(awk '/Suppressions used/ {on=1; next} on && NF == 3 && $1 ~ /^[0-9]+$/ {n += $1; b += $2} END {printf "%d allocations, %d bytes", n, b}' "$tmp"/lsan.*)"
  [ -n "${LSAN_KEEP:-}" ] && cp "$tmp"/lsan.* "$LSAN_KEEP"/
else bad "LeakSanitizer did not report on both ranks ($reports report file(s)): was the check skipped?"; head -20 "$tmp"/lsan.* 2>/dev/null; fi
if grep -lE "ERROR: AddressSanitizer|runtime error|LeakSanitizer has encountered a fatal error" "$tmp"/lsan.* "$tmp"/ubsan.* > /dev/null 2>&1; then
  bad "sanitizer errors:"; grep -hE -A8 "ERROR: AddressSanitizer|runtime error|fatal error" "$tmp"/lsan.* "$tmp"/ubsan.* 2>/dev/null | head -40
else ok "no ASan/UBSan error in the session"; fi
finish
