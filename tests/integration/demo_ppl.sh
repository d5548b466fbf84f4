#!/bin/bash
# The embedded demo model (models/demo/, trained by launch/train_demo/train_demo.py):
#   1. held-out perplexity from sits-dist's forward pass (fp32 CPU backend) equals PyTorch's fp32
#      evaluation of the same bf16 weights (tests/integration/demo_ppl_ref.json) within 1 %, per
#      sequence and overall -- as a singleton (TP 1) and under mpirun -np 2 (TP 2);
#   2. `sits-dist --prompt "The" --max-tokens 30 --temperature 0` prints English words: >= 15 words,
#      >= 80 % of them whole words of the model's vocabulary (learned from the English corpus), and
#      the greedy ids of <|begin_of_text|>The equal PyTorch's (same reference file);
#   3. the chat path (--chat, Llama-3 template from tokenizer_config.json) answers in words and stops.
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
M="$top_srcdir/models/demo"
REF="$top_srcdir/tests/integration/demo_ppl_ref.json"
PPL="$top_builddir/tests/integration/ppl"
[ -f "$M/model.safetensors" ] || { echo "SKIP: $M/model.safetensors missing"; exit 77; }

"$PPL" "$M" "$REF" > "$tmp/p1" 2>&1 && ok "TP 1: $(tail -1 "$tmp/p1")" || { bad "TP 1 perplexity"; cat "$tmp/p1"; }
timeout 300 $SITS_MPIRUN -np 2 "$PPL" "$M" "$REF" > "$tmp/p2" 2>&1 && ok "TP 2: $(grep -E '^(PASS|FAIL)' "$tmp/p2")" \
  || { bad "TP 2 perplexity"; cat "$tmp/p2"; }

"$SITS" --model "$M" --prompt "The" --max-tokens 30 --temperature 0 > "$tmp/gen" 2> "$tmp/err"; rc=$?
words=$(tr -c "A-Za-z'" '\n' < "$tmp/gen" | grep -E '^[A-Za-z]+$' || true)
n=$(printf '%s\n' "$words" | grep -c . || true)
known=0
for w in $words; do
  grep -qF "\"Ġ$w\":" "$M/tokenizer.json" || grep -qF "\"$w\":" "$M/tokenizer.json" && known=$((known + 1))
done
if [ $rc -eq 0 ] && [ "$n" -ge 15 ] && [ $((known * 100)) -ge $((n * 80)) ]; then
  ok "greedy 'The': $n words, $known in the vocabulary: $(tr '\n' ' ' < "$tmp/gen")"
else
  bad "greedy 'The' (rc $rc, $n words, $known known): $(cat "$tmp/gen")"; cat "$tmp/err"
fi
want=$(grep -o '"greedy_the":{"prompt_ids":\[[0-9,]*\],"ids":\[[0-9,]*\]' "$REF" | sed 's/.*"ids":\[\([0-9,]*\)\]/\1/')
pids=$(grep -o '"greedy_the":{"prompt_ids":\[[0-9,]*\]' "$REF" | sed 's/.*\[\([0-9,]*\)\]/\1/')
got=$("$SITS" --model "$M" --prompt-ids "$pids" --max-tokens 30 --temperature 0 2>/dev/null)
[ -n "$want" ] && [ "$got" = "$want" ] && ok "greedy ids equal PyTorch's" || bad "greedy ids: got '$got' want '$want'"

"$SITS" --model "$M" --chat --prompt "What is a list comprehension?" --max-tokens 64 --temperature 0 > "$tmp/chat" 2> "$tmp/err"; rc=$?
cw=$(tr -c "A-Za-z" '\n' < "$tmp/chat" | grep -c -E '^[A-Za-z]{2,}$' || true)
nd=$(sed -n 's/.*decode: \([0-9]*\) tokens.*/\1/p' "$tmp/err")   # 63 decode tokens = ran to --max-tokens
if [ $rc -eq 0 ] && [ "$cw" -ge 5 ] && ! grep -q '<|' "$tmp/chat" && [ -n "$nd" ] && [ "$nd" -lt 63 ]; then
  ok "chat reply ($cw words, stopped at <|eot_id|>): $(tr '\n' ' ' < "$tmp/chat")"
else
  bad "chat reply (rc $rc, $cw words, ${nd:-?} decode tokens): $(cat "$tmp/chat")"; cat "$tmp/err"
fi
finish
