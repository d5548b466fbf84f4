#!/bin/bash
# --tokenize / --detokenize / --prompt on the command line, against HF tokenizers' ids
# (tests/fixtures/tokenizers/bytelevel/cases.json, written by tests/ref/gen_tokenizer_fixtures.py).
. "$top_srcdir/tests/integration/lib.sh"
command -v "${PYTHON:-python3}" >/dev/null 2>&1 || { echo "SKIP: python3 is needed to read the fixture cases"; exit 77; }
PY=${PYTHON:-python3}
T="$top_srcdir/tests/fixtures/tokenizers/bytelevel"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# 40 fixture strings without NUL/newline trouble: ids with BOS must match HF exactly
"$PY" - "$T/cases.json" > "$tmp/cases" <<'PYEOF'
import json, sys
n = 0
for c in json.load(open(sys.argv[1])):
    t = c["text"]
    if not t or "\n" in t or "\r" in t or "\0" in t or t.startswith("-"): continue
    print(json.dumps(t) + "\t" + ",".join(map(str, c["ids_bos"])))
    n += 1
    if n == 40: break
PYEOF
bad_n=0; total=0
while IFS=$'\t' read -r jtext want; do
  text=$("$PY" -c 'import json,sys; sys.stdout.write(json.loads(sys.argv[1]))' "$jtext")
  got=$("$SITS" --model "$T" --tokenize "$text" 2>/dev/null)
  total=$((total + 1))
  [ "$got" = "$want" ] || { bad_n=$((bad_n + 1)); echo "  $jtext: got $got want $want"; }
  back=$("$SITS" --model "$T" --detokenize "$got" 2>/dev/null)
  [ "$back" = "<|begin_of_text|>$text" ] || { bad_n=$((bad_n + 1)); echo "  detokenize $jtext: got '$back'"; }
done < "$tmp/cases"
[ $total -ge 30 ] && [ $bad_n -eq 0 ] && ok "--tokenize/--detokenize on $total HF cases" || bad "$bad_n of $total tokenizer CLI cases"

"$SITS" --model "$T" --tokenize "$(printf 'ab\377cd')" 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "not valid UTF-8" "$tmp/e" && ok "invalid UTF-8 refused" || bad "invalid UTF-8 (rc $rc)"
"$SITS" --model "$T" --detokenize 1,99999 2> "$tmp/e"; rc=$?
[ $rc -eq 1 ] && ok "ids outside the vocabulary refused" || bad "detokenize out of range (rc $rc)"

# --prompt end to end on random weights whose vocabulary is the tokenizer's
mkdir -p "$tmp/m" && cp "$T"/tokenizer.json "$T"/tokenizer_config.json "$tmp/m/"
cat > "$tmp/m/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 3013, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
 "hidden_act": "silu", "bos_token_id": 3000, "eos_token_id": 3001}
JSON
out=$("$SITS" --model "$tmp/m" --load-format dummy --prompt "The quick brown fox" --max-tokens 8 --temperature 0 --ignore-eos 2> "$tmp/e"); rc=$?
[ $rc -eq 0 ] && [ -n "$out" ] && ok "--prompt prints text" || { bad "--prompt (rc $rc)"; cat "$tmp/e"; }
out2=$(timeout 60 $SITS_MPIRUN -np 2 "$SITS" --model "$tmp/m" --load-format dummy --seed 3 --prompt "The quick brown fox" --max-tokens 8 --temperature 0 --ignore-eos 2>/dev/null)
[ "$out" = "$out2" ] && ok "--prompt same text at TP 2" || bad "--prompt TP 2 differs: '$out' vs '$out2'"
"$SITS" --model "$tmp/m" --load-format dummy --prompt "Hi" --chat --max-tokens 4 --temperature 0 > /dev/null 2> "$tmp/e" && ok "--chat renders the llama3 template" || { bad "--chat"; cat "$tmp/e"; }
"$SITS" --model "$tmp/m" --load-format dummy --prompt "Hi" --chat-template nosuch --max-tokens 4 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && ok "unknown chat template refused" || { bad "unknown chat template (rc $rc)"; cat "$tmp/e"; }
"$SITS" --model "$tmp/m" --load-format dummy --prompt "$(printf '\300\200')" 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "not valid UTF-8" "$tmp/e" && ok "invalid UTF-8 prompt refused" || bad "invalid UTF-8 prompt (rc $rc)"
finish
