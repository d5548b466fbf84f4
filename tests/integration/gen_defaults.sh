#!/bin/bash
# generation_config.json as the model ships it (vLLM's --generation-config auto): its temperature / top_p /
# top_k are the defaults of requests that leave them unset; a request's own values win; eos_token_id lists
# stop generation on every id; --generation-config vllm ignores the file. Offline and served, on random
# weights with the fixture tokenizer.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'kill $srv 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
gen() { "$SITS" --model "$tmp/m" --load-format dummy --prompt-ids 3000,72,101,108 --max-tokens 12 --ignore-eos --seed 5 "$@" 2>/dev/null; }

printf '{"bos_token_id": 3000, "eos_token_id": [3001, 3009], "temperature": 0.0, "max_new_tokens": 3}\n' > "$tmp/m/generation_config.json"
greedy=$(gen --temperature 0)
[ -n "$greedy" ] && [ "$(gen)" = "$greedy" ] && ok "offline: generation_config temperature 0 makes the default greedy" ||
  bad "offline default: '$(gen)' vs greedy '$greedy'"
[ "$(echo "$greedy" | tr ',' '\n' | wc -l)" -eq 12 ] && ok "max_new_tokens of generation_config is ignored" || bad "max_new_tokens applied"
s1=$(gen --temperature 1.5); s2=$(gen --temperature 1.5 --seed 6)
[ "$s1" != "$greedy" ] || [ "$s2" != "$greedy" ] && ok "an explicit --temperature wins" || bad "--temperature ignored"
[ "$(gen --generation-config vllm)" != "$greedy" ] || [ "$(gen --generation-config vllm --seed 9)" != "$greedy" ] &&
  ok "--generation-config vllm ignores the file" || bad "--generation-config vllm"
mkdir -p "$tmp/bad" && printf '{"temperature": "hot"}\n' > "$tmp/bad/generation_config.json"
"$SITS" --model "$tmp/m" --load-format dummy --prompt-ids 1,2 --generation-config "$tmp/bad" 2> "$tmp/e" >/dev/null; rc=$?
[ $rc -ne 0 ] && grep -q "generation_config.json: temperature" "$tmp/e" && ok "a malformed generation_config.json is refused naming the key" ||
  { bad "bad generation_config (rc $rc)"; cat "$tmp/e"; }

# served: a request without temperature samples greedily; one with temperature 1.5 and seeds differs
printf '{"bos_token_id": 3000, "eos_token_id": [3001, 3009], "temperature": 0.0, "top_k": 1}\n' > "$tmp/m/generation_config.json"
serve_start "$tmp/m" || finish
body='"prompt": [3000, 72, 101, 108], "max_tokens": 10, "ignore_eos": true'
text() { curl -s "$url/v1/completions" -H 'Content-Type: application/json' -d "{$body$1}" |
         sed -n 's/.*"text": *"\(\([^"\\]\|\\.\)*\)".*/\1/p'; }
a=$(text ""); b=$(text ', "seed": 11'); g=$(text ', "temperature": 0')
[ -n "$a" ] && [ "$a" = "$g" ] && [ "$b" = "$g" ] && ok "served: default sampling is the model's (greedy here)" ||
  bad "served defaults: '$a' '$b' vs greedy '$g'"
d1=$(text ', "temperature": 1.5, "top_k": 0, "seed": 1'); d2=$(text ', "temperature": 1.5, "top_k": 0, "seed": 2')
[ "$d1" != "$g" ] || [ "$d2" != "$g" ] && ok "served: the request's own temperature / top_k win" || bad "request sampling ignored"
kill $srv; wait $srv 2>/dev/null
finish
