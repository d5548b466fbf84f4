#!/bin/bash
# chat_page.sh -- the chat page on GET / (src/server/chat_page.html, embedded as chat_page.c):
#   - chat_page.c is what gen_chat_page.py makes of chat_page.html (the embed is not stale)
#   - GET / answers 200 text/html with the page, without the API key; /v1/ still needs the key
#   - headless Chromium (tests/integration/cdp_chat.py, DevTools over a pipe) loads the page from the
#     real server (models/demo, mpirun -np 1, --api-key), is asked for the key, sends a typed message,
#     gets a streamed answer with words and a tokens/s figure, then the same through /?q=...; then, from a second
#     server (--reasoning-parser deepseek_r1 on DeepSeek-R1's template), /?q=...&thinking=on: the reasoning
#     streams into the message's thinking block;
#     the screenshot goes to $OUT_DIR/chat_page.png (default: the build directory).
# Exit 77 without chromium (apt-get install chromium) or python3.
. "$top_srcdir/tests/integration/lib.sh"
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || { echo "SKIP: python3 is needed"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }

"$PY" "$top_srcdir/src/server/gen_chat_page.py" --check && ok "chat_page.c is up to date with chat_page.html" \
  || bad "chat_page.c is stale"

CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -z "$CHROMIUM" ]; then
  [ "$n_fail" -eq 0 ] && { echo "SKIP: no chromium (apt-get install chromium)"; exit 77; }
  finish
fi

tmp=$(mktemp -d)
srv=
srv2=
cleanup() { [ -n "$srv" ] && kill -9 "$srv" 2>/dev/null; [ -n "$srv2" ] && kill -9 "$srv2" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
key=page-test-key
$SITS_MPIRUN -np 1 "$SITS" --model "$top_srcdir/models/demo" --port "$port" --api-key "$key" \
  > "$tmp/out" 2> "$tmp/err" &
srv=$!
for _ in $(seq 300); do curl -sf "$url/health" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "$url/health" >/dev/null || { bad "server did not start"; cat "$tmp/err"; finish; }

# --- GET / over plain HTTP ------------------------------------------------------------------------
code=$(curl -s -o "$tmp/page.html" -D "$tmp/page.hdr" -w '%{http_code}' "$url/")
if [ "$code" = 200 ] && grep -qi '^content-type: text/html' "$tmp/page.hdr" \
   && cmp -s "$tmp/page.html" "$top_srcdir/src/server/chat_page.html"; then
  ok "GET / without a key: 200 text/html, the page byte for byte"
else
  bad "GET /: $code $(head -c 200 "$tmp/page.html")"
fi
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/models")
[ "$code" = 401 ] && ok "/v1/models without the key: 401" || bad "/v1/models without the key: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url/")
[ "$code" = 405 ] && ok "POST /: 405" || bad "POST /: $code"

# --- the page in headless Chromium ----------------------------------------------------------------
shot_dir=${OUT_DIR:-$top_builddir}
mkdir -p "$shot_dir"
shot="$shot_dir/chat_page.png"
rm -f "$shot"
# [reasoning] a second server, no key, that splits the thinking out
port2=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
$SITS_MPIRUN -np 1 "$SITS" --model "$top_srcdir/models/demo" --port "$port2" --reasoning-parser deepseek_r1 \
  --chat-template "$top_srcdir/tests/fixtures/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja" \
  > "$tmp/out2" 2> "$tmp/err2" &
srv2=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port2/health" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$port2/health" >/dev/null || { bad "reasoning server did not start"; cat "$tmp/err2"; }
THINK_URL=http://127.0.0.1:$port2 timeout 240 "$PY" "$top_srcdir/tests/integration/cdp_chat.py" "$CHROMIUM" "$url" "$key" "$shot"; st=$?
kill -TERM "$srv2" 2>/dev/null; wait "$srv2" 2>/dev/null; srv2=
case $st in
  0) ok "chat page in headless Chromium: key prompt, streamed answers, tokens/s, the thinking block; screenshot $shot" ;;
  77) [ "$n_fail" -eq 0 ] && { echo "SKIP: chromium does not run here"; exit 77; } ;;
  *) bad "chat page in headless Chromium (exit $st)"; tail -20 "$tmp/err" ;;
esac
kill -TERM "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; srv=
finish
