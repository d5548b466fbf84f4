#!/bin/bash
# [gguf gemma] [gguf phi3] [gguf moe] GGUFs served on their own: `sits-dist --model NAME.gguf` with nothing beside it -- config (the
# class's defaults for what the file does not state: Gemma's soft-capping and query_pre_attn_scalar), tokenizer
# (gguf_dir.c's gemma_tokenizer / phi3_tokenizer) and weights (F16 / Q8_0 / Q4_0; Gemma's norms stored as 1 + w,
# Phi-3's fused attn_qkv and gate/up ffn_up, Qwen3-MoE's ffn_*_exps) all from the file:
#   gemma2_model.gguf  Gemma 2 with a sliding-window layer and Gemma's sentencepiece vocabulary;
#   gemma3_model.gguf  Gemma 3: five sliding layers and a global one (their two RoPE bases), q / k norms;
#   phi3_model.gguf    Phi-3 with a Llama sentencepiece vocabulary (prefix space by the normalizer), its chat tokens;
#   qwen3moe_model.gguf  Qwen3-MoE (4 experts, top 2, 3D expert tensors split per expert) with a byte-level vocabulary
#                      and Qwen's split regex; also at EP 2.
# Reference: tests/unit/data/gguf/NAME.json, transformers' from_pretrained(dir, gguf_file=...) of the same file
# (tests/ref/gen_gguf_models.py: fp32, eager, 12 greedy tokens a text). Checks for each: --tokenize == HF's ids;
# --prompt-ids greedy == HF's 12 tokens for every text at TP 1, and for the first at TP 2; the rebuilt directory gone.
. "$top_srcdir/tests/integration/lib.sh"
. "$top_srcdir/tests/integration/mpi_env.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed to read the reference"; exit 77; }
D="$top_srcdir/tests/unit/data/gguf"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp
for name in gemma2_model gemma3_model phi3_model qwen3moe_model; do
  m="$D/$name.gguf"
  python3 - "$D/$name.json" "$SITS" "$m" > "$tmp/cases" 2> "$tmp/tok" <<'PYEOF'
import json, subprocess, sys
ref, sits, m = sys.argv[1:4]
for c in json.load(open(ref, encoding="utf-8"))["cases"]:
    ids = ",".join(map(str, c["ids"]))
    r = subprocess.run([sits, "--model", m, "--tokenize", c["text"]], capture_output=True, text=True)
    print("\t".join([ids, ",".join(map(str, c["greedy"])), str(len(c["greedy"])), str(int(r.stdout.strip() == ids))]))
    if r.stdout.strip() != ids:
        print("  %r: ids %s, want %s\n  %s" % (c["text"], r.stdout.strip(), ids, r.stderr.strip()[-300:]), file=sys.stderr)
PYEOF
  cat "$tmp/tok"
  n=0; n_tok=0; n_gen=0
  while IFS=$'\t' read -r ids want nnew tok_ok; do
    n=$((n + 1)); n_tok=$((n_tok + tok_ok))
    got=$(timeout 120 "$SITS" --model "$m" --prompt-ids "$ids" --temperature 0 --max-tokens "$nnew" --ignore-eos 2> "$tmp/e" < /dev/null | tail -1)
    [ "$got" = "$want" ] && n_gen=$((n_gen + 1)) || { echo "  case $n: greedy $got, want $want"; tail -2 "$tmp/e"; }
  done < "$tmp/cases"
  [ "$n" -gt 0 ] && [ "$n_tok" = "$n" ] && ok "$name: --tokenize == HF's ids for $n of $n texts" || bad "$name: --tokenize: $n_tok of $n texts == HF"
  [ "$n" -gt 0 ] && [ "$n_gen" = "$n" ] && ok "$name: TP 1: HF's 12 greedy tokens for $n of $n texts" || bad "$name: TP 1: $n_gen of $n texts give HF's greedy tokens"
  IFS=$'\t' read -r ids want nnew tok_ok < "$tmp/cases"
  got=$(timeout 300 $SITS_MPIRUN -np 2 -x TMPDIR "$SITS" --model "$m" --prompt-ids "$ids" --temperature 0 --max-tokens "$nnew" --ignore-eos 2> "$tmp/e" < /dev/null | tail -1)
  [ "$got" = "$want" ] && ok "$name: TP 2: HF's greedy tokens" || { bad "$name: TP 2: '$got' want '$want'"; tail -3 "$tmp/e"; }
  [ "$name" = qwen3moe_model ] || continue   # [gguf moe] the experts split over the ranks too
  got=$(timeout 300 $SITS_MPIRUN -np 2 -x TMPDIR "$SITS" --model "$m" --ep 2 --prompt-ids "$ids" --temperature 0 --max-tokens "$nnew" --ignore-eos 2> "$tmp/e" < /dev/null | tail -1)
  [ "$got" = "$want" ] && ok "$name: EP 2: HF's greedy tokens" || { bad "$name: EP 2: '$got' want '$want'"; tail -3 "$tmp/e"; }
done
[ -z "$(ls "$tmp" | grep sits-gguf-)" ] && ok "no rebuilt directory left in \$TMPDIR" || bad "sits-gguf-* left in \$TMPDIR"
finish
