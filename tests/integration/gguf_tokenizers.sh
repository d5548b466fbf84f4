#!/bin/bash
# [gguf] Tokenizers rebuilt from a GGUF's metadata (src/model/gguf_dir.c) against transformers' own rebuild of the same
# files (tests/ref/gen_gguf_tokenizers.py -> tests/unit/data/gguf/tokenizers/expected.json:
# AutoTokenizer.from_pretrained(dir, gguf_file=...)):
#   tok_spm.gguf  sentencepiece ("llama": Llama 2 / Mistral 7B files): merges derived from the scores (no merges in the
#                 file), Metaspace, byte fallback, BOS added by default;
#   tok_bpe.gguf  byte-level BPE ("gpt2") with tokenizer.ggml.pre "llama-bpe" (Llama 3's split regex), control tokens,
#                 a user-defined token, add_bos_token;
#   tok_gemma.gguf  a gemma2 sentencepiece file (GemmaTokenizer: tokens of spaces respelled, merges by file order while
#                 the scores say otherwise, no prefix space).
# For each of 13 texts (spaces, tabs, digits, accents, CJK, emoji, special-token spellings, empty): sits-dist --model
# FILE.gguf --tokenize == transformers' ids (special tokens added), and --detokenize of them == transformers' decode.
# A WordPiece file (tok_bert.gguf, tokenizer.ggml.model "bert") is refused naming tokenizer.ggml.model.
. "$top_srcdir/tests/integration/lib.sh"
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is needed to read expected.json"; exit 77; }
D="$top_srcdir/tests/unit/data/gguf/tokenizers"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp
for f in tok_spm tok_bpe tok_gemma; do
  python3 - "$D/expected.json" "$SITS" "$D/$f.gguf" "$f.gguf" <<'PYEOF' && ok "$f.gguf: --tokenize / --detokenize == transformers for every case" || bad "$f.gguf differs from transformers"
import json, subprocess, sys
exp, sits, path, name = sys.argv[1:5]
cases = json.load(open(exp, encoding="utf-8"))["files"][name]
bad = 0
for c in cases:
    r = subprocess.run([sits, "--model", path, "--tokenize", c["text"]], capture_output=True, text=True)
    got = r.stdout.strip()
    want = ",".join(map(str, c["ids"]))
    if got != want:
        bad += 1
        print("  %r: ids %s\n  %r: want %s\n  %s" % (c["text"], got, c["text"], want, r.stderr.strip()[-300:]))
        continue
    if not c["ids"]:
        continue
    r = subprocess.run([sits, "--model", path, "--detokenize", want], capture_output=True, text=True)
    if r.stdout.rstrip("\n") != c["decoded"]:
        bad += 1
        print("  %r: decoded %r, want %r" % (c["text"], r.stdout, c["decoded"]))
print("  %d cases" % len(cases))
sys.exit(1 if bad else 0)
PYEOF
done
"$SITS" --model "$D/tok_bert.gguf" --tokenize x > /dev/null 2> "$tmp/e"; rc=$?
[ $rc -ne 0 ] && grep -q 'tokenizer.ggml.model "bert"' "$tmp/e" \
  && ok "a WordPiece GGUF: refused ($(grep -m1 -o 'tokenizer.ggml.model.*' "$tmp/e" | cut -c1-80))" || { bad "WordPiece GGUF (rc $rc)"; cat "$tmp/e"; }
[ -z "$(ls "$tmp" | grep sits-gguf-)" ] && ok "no rebuilt directory left in \$TMPDIR" || bad "sits-gguf-* left in \$TMPDIR"
finish
