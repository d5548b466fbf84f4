#!/bin/bash
# soak.sh -- bounded load test of the real server (mpirun -np 2, CPU, random weights, byte-level
# fixture tokenizer), loopback only:
#   1. measure capacity: 8 closed-loop clients for CAP_S seconds -> completed requests/s
#   2. hold LOAD (default 0.8) x capacity as Poisson arrivals for SOAK_SECONDS, sampling the RSS of both
#      ranks every second (tests/soak/loadgen.py)
#   3. pass when: zero 5xx, zero connection errors, zero malformed/short answers, nothing shed by the
#      client, RSS growth < RSS_MAX (5 %) per rank (last window vs the first window after warm-up),
#      P99 latency stable (last window <= P99_RATIO (2) x first window after warm-up; a last window over
#      it is judged again on up to three more runs of two windows, see below), and afterwards all KV
#      blocks free and a clean SIGTERM exit.
# CI mode (make check): SOAK_SECONDS=60, at half the capacity (see below). Long mode, by hand:
#   top_builddir=BUILD SOAK_SECONDS=1800 nice -n 19 tests/soak/soak.sh
# The JSON summary goes to $SOAK_OUT (default: tests/soak/soak-<seconds>s.json in the build dir).
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$PWD}
. "$top_srcdir/tests/integration/lib.sh"
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
[ -x "$SITS" ] || { echo "SKIP: $SITS not built"; exit 77; }
# launch/quickstart sets this for make distcheck's second make check: the soak measures the machine, not
# the tarball, and it already had to pass in the same run's make check
[ -n "${SOAK_SKIP_REASON:-}" ] && { echo "SKIP: $SOAK_SKIP_REASON"; exit 77; }
SOAK_SECONDS=${SOAK_SECONDS:-60}
RSS_MAX=${RSS_MAX:-0.05}
# The long soak holds 80 % of capacity with P99 within 2x. The short CI version runs beside the other
# tests on a shared 2-core machine, where the capacity measured in its first seconds does not hold
# for the next minute: it holds half of it and allows P99 to move 3x (its point is 5xx, leaks, RSS).
# It also lets the client hold more requests in flight (256 instead of 64) before it sheds arrivals: a
# neighbouring test can stall the machine for seconds, and at 30 req/s that alone fills 64 slots.
# And it adds P99_SLACK (0.1 s) to the P99 bound: the P99 of a 15-second window of ~0.05 s requests is a
# handful of requests, and one stall of a neighbour put a clean run's last window at 3.1x the first
# (0.16 s vs 0.05 s; alone the same commit passes at 1.0x); a real degradation -- a leak, a growing
# queue -- keeps growing past any fixed slack.
if [ "${SOAK_SECONDS%.*}" -ge 600 ]; then CAP_S=${CAP_S:-60}; WIN=${WIN:-10}; WARM=${WARM:-0.1}; LOAD=${LOAD:-0.8}; P99_RATIO=${P99_RATIO:-2.0}; INFLIGHT=${INFLIGHT:-64}; P99_SLACK=${P99_SLACK:-0}
else CAP_S=${CAP_S:-15}; WIN=${WIN:-4}; WARM=${WARM:-0.25}; LOAD=${LOAD:-0.5}; P99_RATIO=${P99_RATIO:-3.0}; INFLIGHT=${INFLIGHT:-256}; P99_SLACK=${P99_SLACK:-0.1}; fi
mkdir -p "$top_builddir/tests/soak"
OUTJ=${SOAK_OUT:-$top_builddir/tests/soak/soak-${SOAK_SECONDS}s.json}
LG="$top_srcdir/tests/soak/loadgen.py"
tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
serve_setup "$tmp/m"
metric() { curl -s "$url/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

serve_start "$tmp/m" --max-num-seqs 8 --block-size 16 --kv-cache-memory 2M --seed 1 || finish
blocks=$(metric sits_kv_blocks_free)
p0=$(rank_pid 0 "$tmp/m"); p1=$(rank_pid 1 "$tmp/m")

cap=$("$PY" "$LG" capacity --url "$url" --seconds "$CAP_S" --concurrency 8 --chat) || { bad "capacity run had errors: $cap"; finish; }
rps=$(echo "$cap" | "$PY" -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["capacity_rps"])')
rate=$("$PY" -c "print('%.3f' % ($rps * $LOAD))")
ok "capacity: $rps req/s with 8 closed-loop clients over ${CAP_S}s; soak at $rate req/s ($LOAD x) for ${SOAK_SECONDS}s"

"$PY" "$LG" soak --url "$url" --seconds "$SOAK_SECONDS" --rate "$rate" --pids "$p0,$p1" --windows "$WIN" \
  --warmup "$WARM" --chat --max-inflight "$INFLIGHT" --out "$OUTJ" > /dev/null || bad "load generator failed"
# Under ASan, RSS mostly measures the allocator's quarantine of freed blocks (256 MiB by default) filling
# up: the RSS figure is then reported, not judged.
asan=0
case " ${SITS_SAN_FLAGS:-} " in *sanitize=address*) asan=1;; *) nm "$SITS" 2>/dev/null | grep -q __asan_init && asan=1;; esac
"$PY" - "$OUTJ" "$RSS_MAX" "$P99_RATIO" "$asan" "$INFLIGHT" "$P99_SLACK" <<'PYEOF' > "$tmp/verdict"
import json, sys
r = json.load(open(sys.argv[1])); rss_max = float(sys.argv[2]); ratio = float(sys.argv[3]); asan = sys.argv[4] == "1"
def line(good, msg): print(("ok   " if good else "FAIL ") + msg)
line(r["sent"] > 0 and r["completed_ok"] == r["sent"], "requests: %d sent, %d answered correctly, status %s"
     % (r["sent"], r["completed_ok"], r["status"]))
line(r["n_5xx"] == 0, "5xx responses: %d" % r["n_5xx"])
line(r["conn_errors"] == 0, "connection errors: %d" % r["conn_errors"])
line(r["bad_answers"] == 0, "malformed or short answers: %d" % r["bad_answers"])
line(r["shed_by_client"] == 0, "arrivals shed (more than %s in flight): %d" % (sys.argv[5], r["shed_by_client"]))
for i, g in enumerate(r["rss_growth"]):
    w = [x["rss_kb_max"][i] for x in r["windows"]]
    line(asan or (g is not None and g < rss_max), "rank %d RSS growth %s (limit %.0f %%%s), per window (KiB) %s"
         % (i, "n/a" if g is None else "%.2f %%" % (100 * g), 100 * rss_max,
            "; not judged under ASan: its quarantine holds freed memory" if asan else "", w))
f, l, slack = r["p99_first_s"], r["p99_last_s"], float(sys.argv[6])
print("info per window after warm-up (P50 / P99 / longest request / the host's longest stall, s): "
      + ", ".join("%.3f / %.3f / %.3f / %.3f" % tuple(x.get(k) or 0 for k in ("p50_s", "p99_s", "max_s", "host_stall_max_s"))
                  for x in r["windows"][r["warmup_windows"]:]))
msg = ("P99 latency: first window after warm-up %.3f s, last %.3f s (limit %.1fx + %.2f s); overall P50 %.3f s P99 %.3f s"
       % (f or 0, l or 0, ratio, slack, r["p50_s"] or 0, r["p99_s"] or 0))
if f is None or l is None:
    line(False, msg)
elif l <= ratio * f + slack:
    line(True, msg)
else:
    # judged again on a fresh window below: a stall of the machine passes, a real degradation stays
    print("RECHECK %.6f %s" % (ratio * f + slack, msg))
PYEOF
recheck=
while read -r line; do
  case "$line" in ok*) ok "${line#ok   }";; info*) echo "$line";; RECHECK*) recheck=${line#RECHECK };; *) bad "${line#FAIL }";; esac
done < "$tmp/verdict"
# The last window's P99 over its bound: a window of a 60-second soak on this shared machine can hold a
# slowdown of the host that lasts a minute (seen: P50 2 s for 60 s at half the capacity, the loadgen's own
# wake-ups on time, no TCP drops -- the neighbours' CPU, or the kernel reclaiming our pages). A degradation
# of the server -- a leak, a queue that grows, a slow path that stays -- is still there later, so the same
# load runs again, two windows at a time, up to three times; the last window of a run within the same
# bound passes, with each look's numbers printed.
if [ -n "$recheck" ]; then
  bound=${recheck%% *}
  echo "info ${recheck#* } -- over the bound: two more windows at the same rate, up to 3 times"
  for look in 1 2 3; do
    "$PY" "$LG" soak --url "$url" --seconds "$(awk -v s="$SOAK_SECONDS" -v w="$WIN" 'BEGIN { print 2 * s / w }')" \
      --rate "$rate" --windows 2 --warmup 0 --chat --max-inflight "$INFLIGHT" --seed $((42 + look)) --out "$tmp/again.json" \
      > /dev/null || { bad "load generator failed (look $look)"; break; }
    "$PY" - "$tmp/again.json" "$bound" "$look" <<'PYEOF' > "$tmp/verdict2"
import json, sys
r = json.load(open(sys.argv[1])); bound = float(sys.argv[2]); w = r["windows"]
l = w[-1]["p99_s"]
bad = r["n_5xx"] + r["conn_errors"] + r["bad_answers"] + r["shed_by_client"] + r["sent"] - r["completed_ok"]
good = l is not None and l <= bound
print("%s %d P99 latency, look %s: %.3f s (bound %.3f s; windows' P50 %s, P99 %s, host's longest stall %s s; %d requests)"
      % ("ok" if good else "over", bad, sys.argv[3], l or 0, bound, [round(x["p50_s"] or 0, 3) for x in w],
         [round(x["p99_s"] or 0, 3) for x in w], [x["host_stall_max_s"] for x in w], r["sent"]))
PYEOF
    read -r verdict nbad msg < "$tmp/verdict2"
    [ "$nbad" = 0 ] || { bad "look $look: $nbad requests not answered correctly"; break; }
    if [ "$verdict" = ok ]; then ok "$msg"; break; fi
    if [ $look = 3 ]; then bad "$msg"; else echo "info $msg"; fi
  done
fi

for _ in $(seq 300); do [ "$(metric sits_num_requests_running)" = 0 ] && break; sleep 0.1; done
[ "$(metric sits_kv_blocks_free)" = "$blocks" ] && ok "all $blocks KV blocks free after the soak" \
  || bad "KV blocks after the soak: $(metric sits_kv_blocks_free) of $blocks free"
kill -TERM "$p0" "$p1"
for _ in $(seq 300); do kill -0 $srv 2>/dev/null || break; sleep 0.1; done
if kill -0 $srv 2>/dev/null; then bad "server still running 30 s after SIGTERM"
else wait $srv; rc=$?; [ $rc -eq 0 ] && ok "SIGTERM after the soak: job exits 0" || bad "SIGTERM exit $rc"; fi
srv=
echo "summary: $OUTJ"
finish
