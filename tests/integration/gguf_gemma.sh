#!/bin/bash
# [gguf gemma] A Gemma 2 GGUF served on its own: `sits-dist --model gemma2_model.gguf` with nothing beside it -- config
# (Gemma2Config's defaults for what the file does not state: soft-capping, query_pre_attn_scalar), Gemma's
# sentencepiece tokenizer (gguf_dir.c's gemma_tokenizer) and weights (F16 / Q8_0 / Q4_0, norms stored as 1 + w) all from
# the file. Reference: tests/unit/data/gguf/gemma2_model.json, transformers' from_pretrained(dir, gguf_file=...) of the
# same file (tests/ref/gen_gguf_gemma.py: fp32, eager, 12 greedy tokens a text). Checks: --tokenize == HF's ids;
# --prompt-ids greedy == HF's 12 tokens for every text at TP 1, and for the first at TP 2; the rebuilt directory gone.
. "$top_srcdir/tests/integration/lib.sh"
. "$top_srcdir/tests/integration/mpi_env.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed to read the reference"; exit 77; }
D="$top_srcdir/tests/unit/data/gguf"
m="$D/gemma2_model.gguf"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp
python3 - "$D/gemma2_model.json" > "$tmp/cases" <<'PYEOF'
import json, sys
for c in json.load(open(sys.argv[1], encoding="utf-8"))["cases"]:
    print("\t".join([c["text"], ",".join(map(str, c["ids"])), ",".join(map(str, c["greedy"])), str(len(c["greedy"]))]))
PYEOF
n=0; n_tok=0; n_gen=0
while IFS=$'\t' read -r text ids want nnew; do
  n=$((n + 1))
  got=$("$SITS" --model "$m" --tokenize "$text" 2> "$tmp/e" < /dev/null)
  [ "$got" = "$ids" ] && n_tok=$((n_tok + 1)) || { echo "  '$text': ids $got, want $ids"; tail -2 "$tmp/e"; }
  got=$(timeout 120 "$SITS" --model "$m" --prompt-ids "$ids" --temperature 0 --max-tokens "$nnew" 2> "$tmp/e" < /dev/null | tail -1)
  [ "$got" = "$want" ] && n_gen=$((n_gen + 1)) || { echo "  '$text': greedy $got, want $want"; tail -2 "$tmp/e"; }
done < "$tmp/cases"
[ "$n" -gt 0 ] && [ "$n_tok" = "$n" ] && ok "--tokenize == HF's ids for $n of $n texts" || bad "--tokenize: $n_tok of $n texts == HF"
[ "$n" -gt 0 ] && [ "$n_gen" = "$n" ] && ok "TP 1: HF's 12 greedy tokens for $n of $n texts" || bad "TP 1: $n_gen of $n texts give HF's greedy tokens"
IFS=$'\t' read -r text ids want nnew < "$tmp/cases"
got=$(timeout 300 $SITS_MPIRUN -np 2 -x TMPDIR "$SITS" --model "$m" --prompt-ids "$ids" --temperature 0 --max-tokens "$nnew" 2> "$tmp/e" < /dev/null | tail -1)
[ "$got" = "$want" ] && ok "TP 2: HF's greedy tokens" || { bad "TP 2: '$got' want '$want'"; tail -3 "$tmp/e"; }
[ -z "$(ls "$tmp" | grep sits-gguf-)" ] && ok "no rebuilt directory left in \$TMPDIR" || bad "sits-gguf-* left in \$TMPDIR"
finish
