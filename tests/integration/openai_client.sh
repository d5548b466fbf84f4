#!/bin/bash
# The official openai Python client against the real server (mpirun -np 2, CPU, random weights):
# models, chat, streaming chat (same text as non-streaming), completions, a 404 error.
. "$top_srcdir/tests/integration/lib.sh"
PY=${PYTHON:-python3}
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
"$PY" -c 'import openai' 2>/dev/null || { echo "SKIP: the python openai package is not installed (pip install openai)"; exit 77; }
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
port=$((port + 1)); url=http://127.0.0.1:$port
serve_start "$tmp/m" || finish
  "$PY" - "$url" <<'PYEOF' && ok "openai client: models, chat, streaming chat, completions" || bad "openai client"
import sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
assert [m.id for m in c.models.list().data] == ["m"]
r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0)
assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
text = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
    model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=5, temperature=0, stream=True) if ch.choices)
assert text == r.choices[0].message.content, (text, r.choices[0].message.content)
r = c.completions.create(model="m", prompt="Once upon", max_tokens=4, temperature=0)
assert r.choices[0].finish_reason == "length"
try:
    c.chat.completions.create(model="nope", messages=[{"role": "user", "content": "Hi"}])
    raise SystemExit("unknown model accepted")
except openai.NotFoundError:
    pass
PYEOF

for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done
wait $srv; rc=$?; srv=
[ $rc -eq 0 ] && ok "server stopped cleanly" || bad "server exit $rc"
finish
