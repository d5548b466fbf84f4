#!/bin/bash
# prometheus.sh -- issue 26: the server's /metrics under Prometheus's own tools (Debian 12's
# prometheus 2.42 and promtool).
#   - `promtool check metrics` on the live /metrics of a 2-rank server with tenants, after requests
#     (every family, histograms filled): no finding (names, units, _total, HELP/TYPE, buckets). A
#     control: promtool does flag a counter without _total, so the check can fail.
#   - launch/prometheus.yml and launch/sits-dist.rules.yml pass `promtool check config` / `check
#     rules`; `promtool test rules` with prometheus_rules_test.yml: TTFT / TPOT percentiles and the
#     token rate equal the values worked out by hand there (and a wrong expectation fails).
#   - a real Prometheus (localhost, its own port and data folder, stopped at the end) runs the shipped
#     config with the target and intervals rewritten: it scrapes the server (up == 1), the series
#     sits_generation_tokens_total it stores equals the server's own count, and the recording rule
#     job:sits_time_to_first_token_seconds:p50_5m has a value inside the TTFT histogram's range.
# Skips (77) without prometheus / promtool (apt-get install prometheus).
. "$top_srcdir/tests/integration/lib.sh"
for c in prometheus promtool curl; do
  command -v $c >/dev/null 2>&1 || { echo "SKIP: no $c (apt-get install prometheus curl)"; exit 77; }
done
L="$top_srcdir/launch"
tmp=$(mktemp -d)
srv= prom=
cleanup() {
  [ -n "$prom" ] && { kill -TERM "$prom" 2>/dev/null; wait "$prom" 2>/dev/null; }
  [ -n "$srv" ] && { kill -9 "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; }
  rm -rf "$tmp"
}
trap cleanup EXIT

# --- the server, with tenants (their series too), and some requests ---------------------------------
serve_setup "$tmp/m"
cat > "$tmp/tenants.json" <<'JSON'
{"tenants": [
  {"name": "gold", "api_keys": ["k-gold"], "weight": 4, "slo": {"ttft_ms": 2000, "tpot_ms": 500}},
  {"name": "bronze", "api_keys": ["k-bronze"], "weight": 1}
]}
JSON
serve_start "$tmp/m" --tenants "$tmp/tenants.json" || finish
ask() {   # ask KEY: one chat completion
  curl -s --max-time 60 "$url/v1/chat/completions" -H 'Content-Type: application/json' -H "Authorization: Bearer $1" \
    -d '{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":8,"ignore_eos":true}' > /dev/null
}
for _ in 1 2 3; do ask k-gold; ask k-bronze; done
curl -s "$url/v1/models" > /dev/null                                  # no key: a 401 in the status counter
curl -s "$url/metrics" > "$tmp/metrics.txt"
if ! grep -q '^sits_time_to_first_token_seconds_count 6$' "$tmp/metrics.txt"; then
  bad "/metrics after 6 requests: $(grep '^sits_time_to_first_token_seconds_count' "$tmp/metrics.txt")"
fi
if lint=$(promtool check metrics < "$tmp/metrics.txt" 2>&1) && [ -z "$lint" ]; then
  ok "promtool check metrics: no finding on /metrics ($(grep -c '^# TYPE' "$tmp/metrics.txt") families, $(grep -vc '^#' "$tmp/metrics.txt") samples)"
else
  bad "promtool check metrics:"; printf '%s\n' "$lint" | head -20
fi
printf '# HELP sits_x Control.\n# TYPE sits_x counter\nsits_x 1\n' > "$tmp/control.txt"
if promtool check metrics < "$tmp/control.txt" 2>&1 | grep -q '_total'; then
  ok "control: promtool flags a counter without _total"
else
  bad "control: promtool did not flag a counter without _total"
fi

# --- the shipped configuration and rules -----------------------------------------------------------
if out=$(promtool check config "$L/prometheus.yml" 2>&1); then ok "promtool check config launch/prometheus.yml"
else bad "promtool check config"; echo "$out"; fi
if out=$(promtool check rules "$L/sits-dist.rules.yml" 2>&1); then ok "promtool check rules: $(printf '%s\n' "$out" | grep -o '[0-9]* rules found' | head -1)"
else bad "promtool check rules"; echo "$out"; fi
sed "s|^  - RULES$|  - $L/sits-dist.rules.yml|" "$top_srcdir/tests/integration/prometheus_rules_test.yml" > "$tmp/rules_test.yml"
if out=$(promtool test rules "$tmp/rules_test.yml" 2>&1); then
  ok "promtool test rules: TTFT / TPOT p50 p90 p99 and the token rate as worked out by hand"
else
  bad "promtool test rules"; printf '%s\n' "$out" | head -20
fi
sed 's/value: 175000$/value: 175001/' "$tmp/rules_test.yml" > "$tmp/rules_wrong.yml"
if promtool test rules "$tmp/rules_wrong.yml" >/dev/null 2>&1; then bad "control: a wrong expected p50 passed promtool test rules"
else ok "control: a wrong expected p50 fails promtool test rules"; fi

# --- a real Prometheus scraping the server ---------------------------------------------------------
sed -e 's/scrape_interval: 15s/scrape_interval: 1s/' -e 's/evaluation_interval: 15s/evaluation_interval: 1s/' \
    -e "s|\"localhost:8000\"|\"127.0.0.1:$port\"|" -e "s|^  - sits-dist.rules.yml .*|  - $L/sits-dist.rules.yml|" \
    "$L/prometheus.yml" > "$tmp/prometheus.yml"
# its port: one the kernel just handed out, and another try if something took it meanwhile (CI once saw
# "bind: address already in use" on a port made from the PID, with the other tests running beside this one)
for try in 1 2 3; do
  pport=$("${PYTHON:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" --web.listen-address="127.0.0.1:$pport" \
    > "$tmp/prom.log" 2>&1 &
  prom=$!
  P=http://127.0.0.1:$pport
  for _ in $(seq 100); do curl -sf "$P/-/ready" >/dev/null 2>&1 && break; kill -0 $prom 2>/dev/null || break; sleep 0.2; done
  curl -sf "$P/-/ready" >/dev/null 2>&1 && break
  grep -q "address already in use" "$tmp/prom.log" || break
  kill $prom 2>/dev/null; wait $prom 2>/dev/null
done
curl -sf "$P/-/ready" >/dev/null 2>&1 || { bad "prometheus did not start"; tail -5 "$tmp/prom.log"; finish; }
# query EXPR: the first sample's value of an instant query ("" when none)
query() { curl -s "$P/api/v1/query" --data-urlencode "query=$1" | sed -n 's/.*"value":\[[0-9.]*,"\([^"]*\)"\].*/\1/p'; }
# requests once Prometheus has scraped (up is 1), so that the rates of the histograms are not zero
for _ in $(seq 100); do [ "$(query 'up{job="sits-dist"}')" = 1 ] && break; sleep 0.2; done
for _ in 1 2 3 4 5 6; do ask k-gold; sleep 0.5; done
want=$(curl -s "$url/metrics" | sed -n 's/^sits_generation_tokens_total //p')
up= got= p50=
for _ in $(seq 60); do
  up=$(query 'up{job="sits-dist"}')
  got=$(query 'sits_generation_tokens_total{job="sits-dist"}')
  p50=$(query 'job:sits_time_to_first_token_seconds:p50_5m')
  [ "$up" = 1 ] && [ "$got" = "$want" ] && [ -n "$p50" ] && [ "$p50" != NaN ] && break
  sleep 0.5
done
if [ "$up" = 1 ] && [ -n "$want" ] && [ "$got" = "$want" ]; then
  ok "prometheus scrapes the server (up 1): sits_generation_tokens_total $got == the server's $want"
else
  bad "prometheus: up '$up', sits_generation_tokens_total '$got' vs the server's '$want'"; tail -5 "$tmp/prom.log"
fi
# the TTFT buckets' range: 0 .. the last finite bound
hi=$(curl -s "$url/metrics" | sed -n 's/^sits_time_to_first_token_seconds_bucket{le="\([0-9.e+-]*\)"}.*/\1/p' | tail -1)
if [ -n "$p50" ] && awk -v v="$p50" -v h="$hi" 'BEGIN { exit !(v + 0 > 0 && v + 0 <= h + 0) }'; then
  ok "recording rule job:sits_time_to_first_token_seconds:p50_5m = $p50 s (in (0, $hi])"
else
  bad "recording rule p50: '$p50' (bucket range 0..$hi)"
  curl -s "$P/api/v1/query" --data-urlencode 'query=sits_time_to_first_token_seconds_bucket{le="+Inf"}[30s]' | head -c 1500; echo
fi
finish
