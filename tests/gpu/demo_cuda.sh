#!/bin/bash
# The embedded demo model (a trained model, so greedy choices have real margins) on the GPU (bf16)
# gives the same greedy tokens as the fp32 CPU backend, which itself matches PyTorch (demo_ppl.sh).
# Exit 77 where there is no GPU.
. "$top_srcdir/tests/integration/lib.sh"
m="$top_srcdir/models/demo"
n=$(sits_gpu_count)
[ "${n:-0}" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
for p in "The" "A list comprehension" "Python is a programming language that"; do
  c=$("$SITS" --model "$m" --device cpu --prompt "$p" --max-tokens 24 --temperature 0 --ignore-eos 2>/dev/null)
  g=$("$SITS" --model "$m" --device cuda --prompt "$p" --max-tokens 24 --temperature 0 --ignore-eos 2>/dev/null)
  [ -n "$c" ] && [ "$c" = "$g" ] && ok "demo greedy GPU == CPU: '$p'" || bad "demo greedy '$p': cpu '$c' gpu '$g'"
done
if [ "$n" -ge 2 ]; then
  g2=$(timeout 120 $SITS_MPIRUN -np 2 "$SITS" --model "$m" --device cuda --prompt "The" --max-tokens 24 --temperature 0 --ignore-eos 2>/dev/null)
  g1=$("$SITS" --model "$m" --device cuda --prompt "The" --max-tokens 24 --temperature 0 --ignore-eos 2>/dev/null)
  [ "$g1" = "$g2" ] && ok "demo greedy GPU TP 2 == TP 1" || bad "demo TP 2: '$g2' vs '$g1'"
fi
finish
