#!/bin/bash
# [gguf] A GGUF served on its own, as llama.cpp serves it: `sits-dist --model SmolLM2-135M-Instruct.Q4_1.gguf` with
# nothing beside the file -- config, tokenizer and chat template rebuilt from its metadata (src/model/gguf_dir.c).
# Model: the real GGUF of real_model.sh (not committed; skip 77 without it). Reference: that test's reference.json
# (tests/ref/gen_real_model.py: transformers from_pretrained(gguf_file=...), its GGUF tokenizer conversion with the
# pre-tokenizer llama.cpp uses for tokenizer.ggml.pre "smollm", fp32 greedy), so the file alone must do what the
# fixture directory does:
#   (a) --tokenize of each rendered chat prompt == HF's prompt ids; the digit probes == HF's "smollm" ids
#   (b) --prompt-ids greedy == HF's ids (TP 1, and TP 3 for one chat)
#   (c) the server renders the GGUF's own chat template: content and prompt_tokens == HF for every chat; /v1/models
#       names the file (without .gguf); a directory holding only the GGUF serves the same
#   (d) the rebuilt files go into a private directory under $TMPDIR that is gone after exit; a GGUF without a
#       vocabulary (tests/unit/data/gguf/qwen3.gguf: tokenizer.ggml.model only) is refused naming the keys
. "$top_srcdir/tests/integration/lib.sh"
. "$top_srcdir/tests/integration/real_gguf.sh"   # PY, FIXD, NAME, gguf; skip 77 without them

tmp=$(mktemp -d)
srv=
cleanup() { [ -n "$srv" ] && kill -9 "$srv" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
export TMPDIR=$tmp/t
mkdir -p "$TMPDIR" "$tmp/only"
cp "$gguf" "$tmp/$NAME" 2>/dev/null || ln -s "$gguf" "$tmp/$NAME"
ln -s "$tmp/$NAME" "$tmp/only/model.gguf"
m=$tmp/$NAME
REF=$FIXD/reference.json

# (a) tokenization
"$PY" - "$REF" "$SITS" "$m" <<'PYEOF' && ok "(a) --tokenize: every chat prompt and digit probe == HF's ids" || bad "(a) --tokenize differs from HF"
import json, subprocess, sys
ref, sits, m = sys.argv[1:4]
doc = json.load(open(ref))
cases = [(c["name"], c["prompt_text"], c["prompt_ids"]) for c in doc["chats"]]
cases += [("probe %r" % p["text"], p["text"], p["smollm_ids"]) for p in doc["digit_probes"]]
bad = 0
for name, text, ids in cases:
    r = subprocess.run([sits, "--model", m, "--tokenize", text], capture_output=True, text=True)
    if r.stdout.strip() != ",".join(map(str, ids)):
        bad += 1
        print("  %s: got  %s\n  %s: want %s\n  %s" % (name, r.stdout.strip(), name, ",".join(map(str, ids)), r.stderr.strip()[-300:]))
print("  %d cases" % len(cases))
sys.exit(1 if bad else 0)
PYEOF

# (b) greedy ids
"$PY" - "$REF" > "$tmp/cases" <<'PYEOF'
import json, sys
for c in json.load(open(sys.argv[1]))["chats"]:
    print("\t".join([c["name"], ",".join(map(str, c["prompt_ids"])), ",".join(map(str, c["greedy_ids"])), str(len(c["greedy_ids"]))]))
PYEOF
n=0; n_ok=0
while IFS=$'\t' read -r name ids want nnew; do
  n=$((n + 1))
  got=$(timeout 600 "$SITS" --model "$m" --prompt-ids "$ids" --temperature 0 --max-tokens "$nnew" 2> "$tmp/e" < /dev/null | tail -1)
  [ "$got" = "$want" ] && n_ok=$((n_ok + 1)) || { echo "  $name: got  $got"; echo "  $name: want $want"; tail -3 "$tmp/e"; }
done < "$tmp/cases"
[ "$n_ok" = "$n" ] && ok "(b) TP 1: HF's greedy ids for $n of $n chats" || bad "(b) TP 1: $n_ok of $n chats give HF's greedy ids"
IFS=$'\t' read -r name ids want nnew < "$tmp/cases"
got=$(timeout 900 $SITS_MPIRUN -np 3 -x TMPDIR "$SITS" --model "$m" --prompt-ids "$ids" --temperature 0 --max-tokens "$nnew" 2> "$tmp/e" < /dev/null | tail -1)
[ "$got" = "$want" ] && ok "(b) TP 3 ($name): HF's greedy ids" || { bad "(b) TP 3 $name: '$got' want '$want'"; tail -3 "$tmp/e"; }

# (c) the server, from the file and from a directory holding only the file
serve() { # MODEL -> $port, $srv
  "$SITS" --model "$1" --port 0 > "$tmp/out" 2> "$tmp/err" &
  srv=$!; port=
  for _ in $(seq 600); do
    port=$(sed -n 's|^sits-dist: serving .* on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$tmp/err" | head -1)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.2
  done
}
for what in file dir; do
  [ "$what" = file ] && serve "$m" || serve "$tmp/only"
  if [ -z "$port" ]; then bad "(c) $what: the server did not start"; tail -5 "$tmp/err"; continue; fi
  "$PY" - "$REF" "http://127.0.0.1:$port" "$what" <<'PYEOF' && ok "(c) $what: /v1/chat/completions == HF's text and prompt length for every chat; /v1/models names the file" || bad "(c) $what: served chats differ from HF"
import json, sys, urllib.request
ref, url, what = sys.argv[1:4]
doc = json.load(open(ref))
bad = 0
models = json.load(urllib.request.urlopen(url + "/v1/models", timeout=60))
want_id = "SmolLM2-135M-Instruct.Q4_1" if what == "file" else "only"
if models["data"][0]["id"] != want_id:
    print("  /v1/models: %r, want %r" % (models["data"][0]["id"], want_id))
    bad += 1
for c in doc["chats"][: len(doc["chats"]) if what == "file" else 1]:
    body = {"model": want_id, "messages": c["messages"], "temperature": 0, "max_tokens": doc["max_new_tokens"]}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    d = json.load(urllib.request.urlopen(req, timeout=600))
    text, pt = d["choices"][0]["message"]["content"], d["usage"]["prompt_tokens"]
    if text != c["greedy_text"] or pt != len(c["prompt_ids"]):
        bad += 1
        print("  %s: content %r\n  %s: want    %r\n  prompt_tokens %d (HF %d)" % (c["name"], text, c["name"], c["greedy_text"], pt,
                                                                              len(c["prompt_ids"])))
sys.exit(1 if bad else 0)
PYEOF
  kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; srv=
done

# (d) nothing left behind; a GGUF without a tokenizer refused by key
left=$(find "$TMPDIR" -maxdepth 1 -name 'sits-gguf-*' | wc -l)
[ "$left" -eq 0 ] && ok "(d) the rebuilt files' directories are gone after exit" || { bad "(d) $left sits-gguf-* directories left in \$TMPDIR"; ls -la "$TMPDIR"; }
"$SITS" --model "$top_srcdir/tests/unit/data/gguf/qwen3.gguf" --prompt-ids 1 --max-tokens 1 > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -ne 0 ] && grep -q 'tokenizer.ggml.tokens / merges (or scores) / token_type: missing' "$tmp/e" \
  && ok "(d) a GGUF without a vocabulary: refused ($(grep -m1 -o 'tokenizer.ggml.tokens.*' "$tmp/e" | cut -c1-90))" \
  || { bad "(d) a GGUF without a vocabulary (rc $rc)"; tail -3 "$tmp/e"; }
finish
