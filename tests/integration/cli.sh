#!/bin/bash
# The sits-dist command line: modes, bad input, offline generation as a singleton and under
# mpirun (TP 1/2/4 give HF's greedy tokens; seeded sampling is the same for every TP size).
. "$top_srcdir/tests/integration/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

"$SITS" --help > "$tmp/help" && grep -q -- '--prompt-ids' "$tmp/help" && ok "--help" || bad "--help"
"$SITS" --version | grep -q '^sits-dist ' && ok "--version" || bad "--version"
"$SITS" --print-config --max-tokens 7 > "$tmp/pc" && grep -Eq -- '^--max-tokens +7 .*\[set\]' "$tmp/pc" && ok "--print-config" || bad "--print-config"
SITS_BLOCK_SIZE=32 "$SITS" --print-config | grep -Eq -- '^--block-size +32 ' && ok "env var read" || bad "env var read"
"$SITS" --no-such-flag 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "unknown flag '--no-such-flag'" "$tmp/e" && ok "unknown flag -> 2" || bad "unknown flag (rc $rc)"
"$SITS" --max-tokens abc 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "invalid value 'abc' for --max-tokens" "$tmp/e" && ok "bad value -> 2" || bad "bad value (rc $rc)"
"$SITS" --prompt-ids 1,2 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q -- "--model DIR is required" "$tmp/e" && ok "missing --model -> 2" || bad "missing --model (rc $rc)"
"$SITS" --model "$FIX/llama3" --prompt-ids 1,x,3 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && grep -q "bad token id list" "$tmp/e" && ok "bad ids -> 2" || bad "bad ids (rc $rc)"
"$SITS" --model "$FIX/llama3" --prompt-ids 1,999 --temperature 0 2> "$tmp/e"; rc=$?
[ $rc -eq 1 ] && grep -q "outside the vocabulary" "$tmp/e" && ok "id outside vocab -> 1" || bad "id outside vocab (rc $rc)"
"$SITS" --model "$tmp/nowhere" --prompt-ids 1 2> "$tmp/e"; rc=$?
[ $rc -eq 1 ] && grep -q "nowhere" "$tmp/e" && ok "missing model dir -> 1" || bad "missing model dir (rc $rc)"
"$SITS" --model "$FIX/llama3" --prompt-ids 1 --max-tokens 300 2> "$tmp/e"; rc=$?
[ $rc -eq 1 ] && grep -q "exceed the model length" "$tmp/e" && ok "too long -> 1" || bad "too long (rc $rc)"

# corrupt checkpoint: refused with the file and the reason
mkdir -p "$tmp/corrupt" && cp "$FIX/llama3/config.json" "$tmp/corrupt/"
head -c 100000 "$FIX/llama3/model.safetensors" > "$tmp/corrupt/model.safetensors"
"$SITS" --model "$tmp/corrupt" --prompt-ids 1 2> "$tmp/e"; rc=$?
[ $rc -eq 1 ] && grep -q "model.safetensors" "$tmp/e" && ok "truncated safetensors refused" || { bad "truncated safetensors (rc $rc)"; cat "$tmp/e"; }

# greedy generation equals HF's for every launch shape
for i in 1 3; do
  ids=$(ref_row "$FIX/llama3/reference.json" prompts $i); want=$(ref_row "$FIX/llama3/reference.json" greedy $i)
  got=$("$SITS" --model "$FIX/llama3" --prompt-ids "$ids" --max-tokens 16 --temperature 0 --ignore-eos 2>/dev/null)
  [ "$got" = "$want" ] && ok "singleton greedy prompt $i" || bad "singleton greedy prompt $i: got $got want $want"
  for np in 1 2 4; do
    got=$(timeout 120 $SITS_MPIRUN -np $np "$SITS" --model "$FIX/llama3" --prompt-ids "$ids" --max-tokens 16 --temperature 0 --ignore-eos 2>/dev/null)
    [ "$got" = "$want" ] && ok "mpirun -np $np greedy prompt $i" || bad "mpirun -np $np greedy prompt $i: got '$got' want '$want'"
  done
done

# seeded sampling does not depend on the TP size; batch copies use seed+i
args=(--model "$FIX/qwen2" --prompt-ids 5,6,7,8 --max-tokens 24 --temperature 0.9 --top-p 0.9 --top-k 50 --seed 11 --batch 3 --ignore-eos)
s1=$("$SITS" "${args[@]}" 2>/dev/null)
s2=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" "${args[@]}" 2>/dev/null)
s4=$(timeout 120 $SITS_MPIRUN -np 4 "$SITS" "${args[@]}" 2>/dev/null)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && [ "$s1" = "$s4" ] && ok "seeded sampling equal at TP 1/2/4" || bad "seeded sampling: '$s1' vs '$s2' vs '$s4'"
[ "$(echo "$s1" | wc -l)" -eq 3 ] && [ "$(echo "$s1" | sort -u | wc -l)" -eq 3 ] && ok "batch of 3 gives 3 different samples" || bad "batch rows: $s1"
s5=$("$SITS" "${args[@]}" 2>/dev/null)
[ "$s1" = "$s5" ] && ok "same seed, same output" || bad "same seed differs"

# dummy weights: config.json only
d1=$("$SITS" --model "$FIX/llama_small" --load-format dummy --prompt-ids 1,2,3 --max-tokens 6 --temperature 0 2>/dev/null)
d4=$(timeout 120 $SITS_MPIRUN -np 4 "$SITS" --model "$FIX/llama_small" --load-format dummy --prompt-ids 1,2,3 --max-tokens 6 --temperature 0 2>/dev/null)
[ -n "$d1" ] && [ "$d1" = "$d4" ] && ok "dummy weights: same model at TP 1 and 4" || bad "dummy load format: '$d1' vs '$d4'"
# tp that cannot split the heads is refused on every rank, with the reason
timeout 60 $SITS_MPIRUN -np 3 "$SITS" --model "$FIX/llama3" --prompt-ids 1 > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "does not divide num_attention_heads" "$tmp/e" && ok "tp 3 refused" || bad "tp 3 (rc $rc)"
# --topology: the map of this machine and of the committed 8-GPU machine
"$SITS" --topology > "$tmp/t" 2>&1 && grep -q "^rank 0: host" "$tmp/t" && grep -q "^tp groups (1): \[0\]" "$tmp/t" && ok "--topology" || { bad "--topology"; cat "$tmp/t"; }
timeout 60 $SITS_MPIRUN -np 4 "$SITS" --topology=json --topology-xml "$top_srcdir/tests/topology/dgx8.xml" --tp 2 --dp 2 > "$tmp/t" 2>&1
grep -q '"world_size": *4' "$tmp/t" && grep -q '"gpu": *3' "$tmp/t" && ok "--topology=json on dgx8 (tp 2 dp 2)" || { bad "--topology=json"; head -20 "$tmp/t"; }
timeout 60 $SITS_MPIRUN -np 2 "$SITS" --model "$FIX/llama3" --prompt-ids 1 --tp 4 > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -eq 2 ] && ok "--tp 4 on 2 ranks refused" || { bad "--tp 4 on 2 ranks (rc $rc)"; cat "$tmp/e"; }
finish
