#!/bin/bash
# [logprobs] [sampling controls] completions echo + logprobs against HF transformers (tests/fixtures/logprobs, written by
# tests/ref/gen_logprob_fixtures.py) on the fixture checkpoints and the demo model, served at TP 1, 2
# (and 4 for llama_small) on the CPU: prompt and generated tokens' logprobs within 1e-4 (+1e-4 rel),
# greedy tokens identical, top-5 alternatives; the TP sizes against each other; bad logprob
# parameters answered 400 naming the parameter; the sampling controls (controls_check.py: penalties,
# logit_bias, min_tokens vs HF logits processors, min_p, stop_token_ids, include_stop_str_in_output)
# on llama_small and the demo model; a batch of seeded sampled requests mixing them gives the same
# tokens (and logprobs within 2e-5) at every TP size, with --pp 2 and with --dp 2 (a remote replica).
# All of it runs on the device path (the backend's logprob_reduce / logit_process / logit_pick on each
# rank's vocabulary shard): /metrics shows steps with device logprobs and no download of a step's
# whole logits to the host.
. "$top_srcdir/tests/integration/lib.sh"
PY=${PYTHON:-python3}
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; rm -rf "$tmp"' EXIT
CHECK="$top_srcdir/tests/integration/logprobs_check.py"
REF="$top_srcdir/tests/fixtures/logprobs"

stop() { kill -TERM $srv 2>/dev/null; wait $srv; srv=; }

# no_downloads LABEL: the leader's engine reduced logprobs on the device and never downloaded a step's logits
no_downloads() {
  local mt dl lp
  mt=$(curl -s "$url/metrics")
  dl=$(echo "$mt" | sed -n 's/^sits_logits_host_downloads_total //p')
  lp=$(echo "$mt" | sed -n 's/^sits_logprob_device_steps_total //p')
  [ "$dl" = 0 ] && [ -n "$lp" ] && [ "$lp" -gt 0 ] && ok "$1: $lp steps with device logprobs, $dl host logits downloads" ||
    bad "$1: host logits downloads '$dl' (want 0), device logprob steps '$lp' (want > 0)"
}

# same_ctl A B LABEL: the seeded mixed-controls batch of controls_check.py gave the same tokens
same_ctl() {
  "$PY" - "$1" "$2" <<'PYEOF' && ok "$3" || bad "$3"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
tok = sum(x[0] != y[0] for x, y in zip(a, b))
d = max(abs(u - v) for x, y in zip(a, b) if x[0] == y[0] for u, v in zip(x[1], y[1]))
print(f"  {len(a)} seeded requests: {tok} token sequences differ, max |logprob diff| {d:.2e}")
sys.exit(0 if tok == 0 and len(a) == len(b) == 16 and d <= 2e-5 else 1)
PYEOF
}

# api_extras DIR: /tokenize and /detokenize against HF tokenizers (when importable), and
# usage.prompt_tokens_details.cached_tokens of a repeated prompt (the prefix cache's full blocks), n > 1
# sharing the prompt's blocks
api_extras() {
  if "$PY" -c 'import tokenizers' 2>/dev/null; then
    "$PY" - "$url" "$1/tokenizer.json" <<'PYEOF' && ok "/tokenize, /detokenize equal HF tokenizers" || bad "/tokenize, /detokenize"
import json, sys, urllib.request, tokenizers
url, tok = sys.argv[1], tokenizers.Tokenizer.from_file(sys.argv[2])
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
for text in ["Hello world", "def f(x):\n    return x * 2  # doubled", "caf\u00e9 \u2014 na\u00efve \U0001F600", ""]:
    for special in (True, False):
        r = post("/tokenize", {"prompt": text, "add_special_tokens": special})
        want = tok.encode(text, add_special_tokens=special).ids
        assert r["tokens"] == want and r["count"] == len(want), (text, special, r, want)
    ids = tok.encode(text).ids
    assert post("/detokenize", {"tokens": ids})["prompt"] == tok.decode(ids, skip_special_tokens=False), text
PYEOF
  else echo "  (no python tokenizers: /tokenize not compared)"; fi
  local p='{"prompt":"'$(printf 'word %.0s' $(seq 60))'","max_tokens":1}' c1 c2
  c1=$(curl -s "$url/v1/completions" -d "$p" | sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p')
  c2=$(curl -s "$url/v1/completions" -d "$p" | sed -n 's/.*"cached_tokens":\([0-9]*\).*/\1/p')
  [ "$c1" = 0 ] && [ -n "$c2" ] && [ "$c2" -ge 48 ] && ok "cached_tokens: $c1 then $c2" || bad "cached_tokens: $c1 then $c2 (want 0 then >= 48)"
  # n = 4 over a 70-token prompt: computed once; choices 1..3 fork off it (sharing its 5 blocks, the partial
  # last one copied on write by 3 of its 4 holders)
  local m0 m1 ids texts
  m0=$(curl -s "$url/metrics" | awk '$1 ~ /^sits_(prompt_tokens_computed|forked_sequences|kv_blocks_copied)_total$/ { printf "%s ", $2 }')
  ids=$(seq -s, 300 369)
  texts=$(curl -s "$url/v1/completions" -d '{"prompt":['"$ids"'],"max_tokens":4,"n":4,"temperature":0}' |
          "$PY" -c 'import json,sys; print(len(set(c["text"] for c in json.load(sys.stdin)["choices"])))')
  m1=$(curl -s "$url/metrics" | awk '$1 ~ /^sits_(prompt_tokens_computed|forked_sequences|kv_blocks_copied)_total$/ { printf "%s ", $2 }')
  local d; d=$(echo "$m0 $m1" | awk '{ print $4 - $1, $5 - $2, $6 - $3 }')
  [ "$texts" = 1 ] && [ "$d" = "70 3 3" ] && ok "n = 4: the prompt computed once, 3 forks, 3 blocks copied ($d)" ||
    bad "n = 4: $texts distinct greedy texts; computed, forked, copied: $d (want 1; 70 3 3)"
}

for m in llama_small llama3 qwen2 mistral_sharded demo; do
  if [ $m = demo ]; then dir="$top_srcdir/models/demo"; else
    dir="$tmp/$m"; mkdir -p "$dir"; cp "$FIX/$m"/*.json "$FIX/$m"/*.safetensors "$dir/"
    cp "$top_srcdir/tests/fixtures/tokenizers/bytelevel/tokenizer.json" "$dir/"   # prompts go in as ids
  fi
  nps="1 2"; [ $m = llama_small ] && nps="1 2 4"
  for np in $nps; do
    serve_np $np "$dir" || continue
    if "$PY" "$CHECK" "$url" "$REF/$m.json" "$tmp/$m.$np.json"; then ok "$m tp $np: logprobs vs HF"; else bad "$m tp $np: logprobs vs HF"; fi
    if [ $m = llama_small ] || [ $m = demo ]; then
      if "$PY" "$top_srcdir/tests/integration/controls_check.py" "$url" "$REF/$m.json" "$tmp/$m.$np.ctl.json"; then
        ok "$m tp $np: sampling controls vs HF processors"
      else bad "$m tp $np: sampling controls vs HF processors"; fi
      [ $np = 1 ] || same_ctl "$tmp/$m.1.ctl.json" "$tmp/$m.$np.ctl.json" "$m: tp $np samples what tp 1 samples under the controls"
    fi
    no_downloads "$m tp $np"
    if [ $m = demo ] && [ $np = 1 ]; then api_extras "$dir"; fi
    if [ $m = llama_small ] && [ $np = 2 ]; then
      for body in '{"prompt":"a","logprobs":21}:logprobs' '{"prompt":"a","logprobs":-1}:logprobs' \
                  '{"prompt":"a","logprobs":"x"}:logprobs' '{"prompt":"a","echo":1}:echo' \
                  '{"prompt":"a","max_tokens":0}:max_tokens' \
                  '{"messages":[{"role":"user","content":"a"}],"logprobs":true,"top_logprobs":21}:top_logprobs' \
                  '{"messages":[{"role":"user","content":"a"}],"top_logprobs":2}:top_logprobs' \
                  '{"prompt":"a","logit_bias":{"512":1}}:logit_bias' '{"prompt":"a","logit_bias":{"5":101}}:logit_bias' \
                  '{"prompt":"a","logit_bias":{"x":1}}:logit_bias' '{"prompt":"a","min_tokens":5,"max_tokens":2}:min_tokens' \
                  '{"prompt":"a","repetition_penalty":0}:repetition_penalty' '{"prompt":"a","presence_penalty":3}:presence_penalty' \
                  '{"prompt":"a","frequency_penalty":-2.5}:frequency_penalty' '{"prompt":"a","min_p":1.5}:min_p' \
                  '{"prompt":"a","stop_token_ids":[512]}:stop_token_ids' '{"prompt":"a","n":0}:n'; do
        b=${body%:*}; want=${body##*:}
        ep=completions; case $b in *messages*) ep=chat/completions;; esac
        r=$(curl -s -w ' %{http_code}' "$url/v1/$ep" -d "$b")
        case $r in *"\"param\":\"$want\""*" 400") ok "400 naming $want: $b";; *) bad "want 400 naming $want for $b, got $r";; esac
      done
    fi
    stop
  done
  for np in $nps; do
    [ $np = 1 ] && continue
    "$PY" - "$tmp/$m.1.json" "$tmp/$m.$np.json" <<'PYEOF' && ok "$m: tp $np equals tp 1 (within 2e-5)" || bad "$m: tp $np vs tp 1"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
d = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
print(f"  max |tp1 - tpN| = {d:.2e}")
sys.exit(0 if d <= 2e-5 else 1)
PYEOF
  done
done
# pipeline parallelism: the last stage reduces the logprobs on its device and broadcasts them with the
# sampled tokens; the same values as TP 1 and HF, the same seeded samples under the controls
serve_np 2 "$tmp/llama_small" --pp 2 && {
  if "$PY" "$CHECK" "$url" "$REF/llama_small.json" "$tmp/pp.json"; then ok "llama_small pp 2: logprobs vs HF"; else bad "llama_small pp 2: logprobs vs HF"; fi
  "$PY" - "$tmp/llama_small.1.json" "$tmp/pp.json" <<'PYEOF' && ok "llama_small: pp 2 equals tp 1 (within 2e-5)" || bad "llama_small: pp 2 vs tp 1"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
d = max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))
print(f"  max |tp1 - pp2| = {d:.2e}")
sys.exit(0 if d <= 2e-5 and len(a) == len(b) else 1)
PYEOF
  if "$PY" "$top_srcdir/tests/integration/controls_check.py" "$url" "$REF/llama_small.json" "$tmp/pp.ctl.json"; then
    ok "llama_small pp 2: sampling controls vs HF processors"
  else bad "llama_small pp 2: sampling controls vs HF processors"; fi
  same_ctl "$tmp/llama_small.1.ctl.json" "$tmp/pp.ctl.json" "llama_small: pp 2 samples what tp 1 samples under the controls"
  stop
}
# data parallelism: a burst spreads over the replicas; the remote one's last stage broadcasts its logprobs
serve_np 2 "$tmp/llama_small" --dp 2 && {
  if "$PY" "$top_srcdir/tests/integration/controls_check.py" "$url" "$REF/llama_small.json" "$tmp/dp.ctl.json"; then
    ok "llama_small dp 2: sampling controls vs HF processors"
  else bad "llama_small dp 2: sampling controls vs HF processors"; fi
  same_ctl "$tmp/llama_small.1.ctl.json" "$tmp/dp.ctl.json" "llama_small: dp 2 (a remote replica) samples and scores what tp 1 does"
  stop
}
finish
