#!/bin/bash
# The official openai Python client against the real server (mpirun -np 2, CPU, random weights):
# models, chat, streaming chat (same text as non-streaming), completions, a 404 error; [logprobs] logprobs
# (chat, completions, echo, streamed, echo streamed), n > 1 (indexed, seeded per choice, streamed), sampling controls.
. "$top_srcdir/tests/integration/lib.sh"
PY=${PYTHON:-python3}
command -v curl >/dev/null || { echo "SKIP: curl is needed"; exit 77; }
"$PY" -c 'import openai' 2>/dev/null || { echo "SKIP: the python openai package is not installed (pip install openai)"; exit 77; }
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill -9 $srv 2>/dev/null; pkill -9 -f "$tmp/m" 2>/dev/null; rm -rf "$tmp"' EXIT
serve_setup "$tmp/m"
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

  "$PY" - "$url" <<'PYEOF' && ok "openai client: logprobs (chat, completions, echo, streamed), n, batched prompts, sampling controls" || bad "openai client: logprobs / n"
import math, sys, openai
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
# chat: logprobs + top_logprobs through the client's types
r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0,
                              logprobs=True, top_logprobs=3)
lp = r.choices[0].logprobs.content
assert len(lp) == 4 and all(len(e.top_logprobs) == 3 for e in lp), lp
for e in lp:   # greedy: the chosen token is the best alternative; probabilities sum to at most 1
    assert abs(e.logprob - e.top_logprobs[0].logprob) < 1e-6 and e.logprob <= 0, e
    assert sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-5
assert "".join(e.token for e in lp) == r.choices[0].message.content
# completions: logprobs N, echo with max_tokens 0 scores the prompt (first token null)
r = c.completions.create(model="m", prompt="Once upon a time", max_tokens=3, temperature=0, logprobs=2)
l = r.choices[0].logprobs
assert len(l.tokens) == len(l.token_logprobs) == len(l.top_logprobs) == len(l.text_offset) == 3, l
e = c.completions.create(model="m", prompt="Once upon a time", max_tokens=0, echo=True, logprobs=1)
le = e.choices[0].logprobs
assert e.choices[0].text == "Once upon a time" and le.token_logprobs[0] is None and le.top_logprobs[0] is None
assert len(le.tokens) == e.usage.prompt_tokens and e.usage.completion_tokens == 0 and all(x <= 0 for x in le.token_logprobs[1:])
e2 = c.completions.create(model="m", prompt="Once upon a time", max_tokens=3, temperature=0, echo=True, logprobs=2)
l2 = e2.choices[0].logprobs   # the same numbers whether the prompt is echoed or not
assert e2.choices[0].text.startswith("Once upon a time") and l2.token_logprobs[-3:] == l.token_logprobs, (l2, l)
assert le.token_logprobs == l2.token_logprobs[:len(le.token_logprobs)]
# streamed logprobs: the same values as the whole response
s = [ch for ch in c.completions.create(model="m", prompt="Once upon a time", max_tokens=3, temperature=0, logprobs=2,
                                         stream=True)]
vals = [x for ch in s if ch.choices and ch.choices[0].logprobs for x in ch.choices[0].logprobs.token_logprobs]
assert vals == l.token_logprobs, (vals, l.token_logprobs)
# echo + stream (vLLM's shape): the first chunk of each choice is its prompt with the prompt's logprobs; joined,
# the chunks are the whole response (text, tokens, logprobs, text offsets); max_tokens 0 streams the prompt only
def joined(chunks, i=0):
    ch = [x.choices[0] for x in chunks if x.choices and x.choices[0].index == i]
    lp = [x.logprobs for x in ch if x.logprobs]
    return ("".join(x.text for x in ch), [t for x in lp for t in x.tokens], [t for x in lp for t in x.token_logprobs],
            [t for x in lp for t in x.text_offset], [t for x in lp for t in x.top_logprobs])
def whole(r, i=0):
    x = r.choices[i]
    return (x.text, x.logprobs.tokens, x.logprobs.token_logprobs, x.logprobs.text_offset, x.logprobs.top_logprobs)
for kw, want in (({"max_tokens": 3, "logprobs": 2}, e2), ({"max_tokens": 0, "logprobs": 1}, e)):
    s = list(c.completions.create(model="m", prompt="Once upon a time", temperature=0, echo=True, stream=True, **kw))
    first = [x for x in s if x.choices][0].choices[0]
    assert first.text == "Once upon a time" and first.logprobs.token_logprobs[0] is None, first
    assert joined(s) == whole(want), (kw, joined(s), whole(want))
s = list(c.completions.create(model="m", prompt=["Once upon a time", "The list"], n=2, max_tokens=3, temperature=0, echo=True,
                              stream=True))
w = c.completions.create(model="m", prompt=["Once upon a time", "The list"], n=2, max_tokens=3, temperature=0, echo=True)
for i in range(4):
    t = "".join(x.choices[0].text for x in s if x.choices and x.choices[0].index == i)
    assert t == w.choices[i].text and t.startswith(("Once upon a time", "The list")[i // 2]), (i, t, w.choices[i].text)
# n: indexed choices, seeded per choice (same seed: same choices), greedy choices equal
r = c.completions.create(model="m", prompt="Once upon a time", max_tokens=6, n=3, temperature=1.0, seed=7)
assert sorted(ch.index for ch in r.choices) == [0, 1, 2] and r.usage.completion_tokens == 18, r
r2 = c.completions.create(model="m", prompt="Once upon a time", max_tokens=6, n=3, temperature=1.0, seed=7)
assert [ch.text for ch in r.choices] == [ch.text for ch in r2.choices]
assert len(set(ch.text for ch in r.choices)) > 1, [ch.text for ch in r.choices]
g = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, n=2, temperature=0)
assert len(g.choices) == 2 and g.choices[0].message.content == g.choices[1].message.content
st = [ch for ch in c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}], max_tokens=4, n=2,
                                              temperature=0, stream=True) if ch.choices]
texts = ["".join(ch.choices[0].delta.content or "" for ch in st if ch.choices[0].index == i) for i in (0, 1)]
assert texts == [g.choices[0].message.content] * 2, texts
# a batch of prompts: one choice set per prompt (choice i: prompt i // n), each as if sent alone
single = [c.completions.create(model="m", prompt=pr, max_tokens=3, temperature=0, echo=True, logprobs=1) for pr in ("Once upon a time", "The list")]
b = c.completions.create(model="m", prompt=["Once upon a time", "The list"], n=2, max_tokens=3, temperature=0, echo=True, logprobs=1)
assert [ch.index for ch in b.choices] == [0, 1, 2, 3], b
for ch in b.choices:
    want = single[ch.index // 2].choices[0]
    assert ch.text == want.text and ch.logprobs.token_logprobs == want.logprobs.token_logprobs, (ch, want)
assert b.usage.prompt_tokens == sum(x.usage.prompt_tokens for x in single) and b.usage.completion_tokens == 12, b.usage
ids = c.completions.create(model="m", prompt=[[5, 6, 7], [8, 9]], max_tokens=2, temperature=0)
assert len(ids.choices) == 2 and ids.usage.prompt_tokens == 5, ids
# vLLM's add_special_tokens: completions add the tokenizer's special tokens (BOS) unless false; chat adds none (the
# template writes BOS) unless true; counts as /tokenize gives them (checked against HF tokenizers in logprobs.sh)
import json as _json, urllib.request as _ur
def ntok(body):
    return _json.load(_ur.urlopen(_ur.Request(sys.argv[1] + "/tokenize", _json.dumps(body).encode(),
                                              {"Content-Type": "application/json"})))["count"]
with_bos, without = ntok({"prompt": "Once upon a time"}), ntok({"prompt": "Once upon a time", "add_special_tokens": False})
assert with_bos == without + 1, (with_bos, without)
for flag, want in ((None, with_bos), (False, without), (True, with_bos)):
    eb = {} if flag is None else {"add_special_tokens": flag}
    r = c.completions.create(model="m", prompt="Once upon a time", max_tokens=1, temperature=0, extra_body=eb)
    assert r.usage.prompt_tokens == want, (flag, r.usage, want)
msgs = [{"role": "user", "content": "Hi"}]
plain = c.chat.completions.create(model="m", messages=msgs, max_tokens=1, temperature=0).usage.prompt_tokens
assert plain == ntok({"messages": msgs}), plain
extra = c.chat.completions.create(model="m", messages=msgs, max_tokens=1, temperature=0,
                                  extra_body={"add_special_tokens": True}).usage.prompt_tokens
assert extra == plain + 1 == ntok({"messages": msgs, "add_special_tokens": True}), (extra, plain)
# vLLM's truncate_prompt_tokens: the last k tokens of each prompt, as if sent alone (-1: the whole context)
t = c.completions.create(model="m", prompt=[list(range(5, 21)), [8, 9]], max_tokens=3, temperature=0, echo=True,
                         extra_body={"truncate_prompt_tokens": 4})
alone = c.completions.create(model="m", prompt=[list(range(17, 21)), [8, 9]], max_tokens=3, temperature=0, echo=True)
assert t.usage.prompt_tokens == 4 + 2 and [x.text for x in t.choices] == [x.text for x in alone.choices], (t, alone)
t = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi there, a longer message"}], max_tokens=2,
                              temperature=0, extra_body={"truncate_prompt_tokens": -1})
assert t.usage.prompt_tokens > 8, t.usage
t = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi there, a longer message"}], max_tokens=2,
                              temperature=0, extra_body={"truncate_prompt_tokens": 8})
assert t.usage.prompt_tokens == 8, t.usage
try:   # vLLM without priority scheduling: priority 0 only
    c.completions.create(model="m", prompt="x", max_tokens=1, extra_body={"priority": 3})
    raise SystemExit("priority 3 accepted")
except openai.BadRequestError as ex:
    assert ex.body["param"] == "priority", ex.body
c.completions.create(model="m", prompt="x", max_tokens=1, extra_body={"priority": 0})
for k in (0, -2, 10 ** 6):
    try:
        c.completions.create(model="m", prompt="x", max_tokens=1, extra_body={"truncate_prompt_tokens": k})
        raise SystemExit(f"truncate_prompt_tokens {k} accepted")
    except openai.BadRequestError as ex:
        assert ex.body["param"] == "truncate_prompt_tokens", ex.body
# sampling controls pass through the client (extra_body for vLLM's names); bad values name the parameter
c.completions.create(model="m", prompt="Once", max_tokens=3, presence_penalty=0.5, frequency_penalty=0.5, logit_bias={"5": 3},
                     extra_body={"repetition_penalty": 1.2, "min_p": 0.1, "min_tokens": 1, "stop_token_ids": [7]})
for kw in ({"n": 0}, {"logprobs": 21}, {"logit_bias": {"99999": 1}}, {"extra_body": {"top_logprobs": 21, "logprobs": True}}):
    try:
        c.completions.create(model="m", prompt="x", max_tokens=1, **kw) if "extra_body" not in kw else \
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=1, **kw)
        raise SystemExit(f"{kw} accepted")
    except openai.BadRequestError as ex:
        want = list(kw)[0] if "extra_body" not in kw else "top_logprobs"
        assert ex.body["param"] == want, (kw, ex.body)
PYEOF

for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done
wait $srv; rc=$?; srv=
[ $rc -eq 0 ] && ok "server stopped cleanly" || bad "server exit $rc"

# a served name with JSON's special characters (--served-model-name takes any string): /v1/models stays JSON, the
# client lists and addresses it
name='org/a "quoted" \ name'
serve_np 1 "$tmp/m" --load-format dummy --served-model-name "$name" || finish
  "$PY" - "$url" "$name" <<'PYEOF' && ok "a served name with quotes and a backslash: /v1/models lists it, chat answers to it" || bad "served name"
import sys, urllib.parse, urllib.request, json, openai
url, name = sys.argv[1], sys.argv[2]
c = openai.OpenAI(base_url=url + "/v1", api_key="none")
assert [m.id for m in c.models.list().data] == [name]
card = json.load(urllib.request.urlopen(url + "/v1/models/" + urllib.parse.quote(name, safe="")))
assert card["id"] == name and card["object"] == "model", card
r = c.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=2, temperature=0)
assert r.model == name, r.model
PYEOF
stop_np "$tmp/m" || bad "server did not stop cleanly"
finish
