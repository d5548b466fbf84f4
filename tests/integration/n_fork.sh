#!/bin/bash
# n > 1 shares the prompt (issue 21): on the real server (mpirun -np 2, CPU, prefix cache off so that
# only the fork can share), a prompt of a partial last block asked with n = 4 is computed once
# (/metrics: sits_prompt_tokens_computed_total grows by the prompt's tokens, 3 choices forked, 3 KV
# blocks copied on write: every holder of the shared partial block but the last), and each choice
# equals the same prompt served alone (n = 1) with that choice's seed -- choice 0 the request's seed,
# choice i mix64(seed + i) (server.c) -- in text, tokens and log-probabilities. Streamed too. Then with room for
# two sequences only (--max-num-seqs 2): one choice forks, and the others start later -- from the leader's blocks
# (computing the last prompt token only) while it runs, from scratch once it is gone; a stop string ends choice 1
# early so that choice 2 finds the leader running. Every choice still equals n = 1 with its seed.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import openai' 2>/dev/null || { echo "SKIP: python openai is needed"; exit 77; }
serve_tmp
serve_setup "$tmp/m"
serve_start "$tmp/m" --block-size 8 --no-enable-prefix-caching || finish
PYTHONPATH="$top_srcdir/tests/integration" "$PY" - "$url" <<'PYEOF' && ok "n = 4 forks off one prefill, each choice equals n = 1 with its seed" || bad "n = 4 fork"
import sys, urllib.request, openai, choices
url = sys.argv[1]
c = openai.OpenAI(base_url=url + "/v1", api_key="none")
fails = 0
def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH", what)
def metric(name):
    return choices.metric(url, name)
prompt = "A partial block: the prompt of this request is shared by four choices"
seed, n = 1234, 4
names = ("sits_prompt_tokens_computed_total", "sits_forked_sequences_total", "sits_kv_blocks_copied_total")
before = [metric(x) for x in names]
r = c.completions.create(model="m", prompt=prompt, max_tokens=10, n=n, temperature=1.0, seed=seed, logprobs=1,
                         extra_body={"ignore_eos": True})
after = [metric(x) for x in names]
P = r.usage.prompt_tokens
print("prompt %d tokens; computed %d, forked %d, copied %d" % (P, after[0] - before[0], after[1] - before[1], after[2] - before[2]))
check(P % 8 != 0, "the prompt (%d tokens) must end in a partial block of 8" % P)
check(after[0] - before[0] == P, "prompt tokens computed: %d, want %d (once)" % (after[0] - before[0], P))
check(after[1] - before[1] == n - 1, "forked: %d, want %d" % (after[1] - before[1], n - 1))
check(after[2] - before[2] == n - 1, "blocks copied on write: %d, want %d" % (after[2] - before[2], n - 1))
check(sorted(ch.index for ch in r.choices) == list(range(n)), "indices %s" % [ch.index for ch in r.choices])
check(len(set(ch.text for ch in r.choices)) > 1, "the choices are all equal: %r" % [ch.text for ch in r.choices])
for ch in sorted(r.choices, key=lambda ch: ch.index):
    s = choices.choice_seed(seed, ch.index)
    one = c.completions.create(model="m", prompt=prompt, max_tokens=10, temperature=1.0, seed=s, logprobs=1,
                               extra_body={"ignore_eos": True}).choices[0]
    check(ch.text == one.text and ch.logprobs.tokens == one.logprobs.tokens,
          "choice %d: %r vs n=1 %r" % (ch.index, ch.text, one.text))
    lp = [abs(a - b) for a, b in zip(ch.logprobs.token_logprobs, one.logprobs.token_logprobs)]
    check(len(lp) == 10 and max(lp) <= 1e-5, "choice %d logprobs differ by %s" % (ch.index, max(lp) if lp else None))
# streamed: the same choices
st = list(c.completions.create(model="m", prompt=prompt, max_tokens=10, n=n, temperature=1.0, seed=seed, stream=True,
                               extra_body={"ignore_eos": True}))
texts = ["".join(x.choices[0].text for x in st if x.choices and x.choices[0].index == i) for i in range(n)]
check(texts == [ch.text for ch in sorted(r.choices, key=lambda ch: ch.index)], "streamed %r" % texts)
# a prompt of whole blocks: nothing to copy; greedy choices all equal
before = [metric(x) for x in names]
g = c.completions.create(model="m", prompt=[list(range(10, 26))], max_tokens=5, n=3, temperature=0, extra_body={"ignore_eos": True})
after = [metric(x) for x in names]
check(after[0] - before[0] == 16 and after[1] - before[1] == 2 and after[2] - before[2] == 0,
      "16-token prompt: computed %d forked %d copied %d" % tuple(a - b for a, b in zip(after, before)))
check(len(set(ch.text for ch in g.choices)) == 1, "greedy choices differ: %r" % [ch.text for ch in g.choices])
sys.exit(1 if fails else 0)
PYEOF
for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done
wait $srv; srv=
serve_start "$tmp/m" --block-size 8 --no-enable-prefix-caching --max-num-seqs 2 || finish
PYTHONPATH="$top_srcdir/tests/integration" "$PY" - "$url" <<'PYEOF' && ok "n = 4 with room for 2 sequences: forked, started from the leader's blocks, recomputed" || bad "n = 4, 2 sequences"
import sys, urllib.request, openai, choices
url = sys.argv[1]
c = openai.OpenAI(base_url=url + "/v1", api_key="none")
def seed_of(i):
    return choices.choice_seed(1234, i)
def metric(name):
    return choices.metric(url, name)
prompt = "A partial block: the prompt of this request is shared by four choices"
kw = dict(model="m", prompt=prompt, max_tokens=40, temperature=1.0, extra_body={"ignore_eos": True})
alone = [c.completions.create(seed=seed_of(i), **kw).choices[0].text for i in range(4)]
stop = next((alone[1][k:k + 3] for k in range(12) if alone[1][k:k + 3].strip() and alone[1][k:k + 3] not in alone[0]), None)
fails = 0
p0, f0 = metric("sits_prompt_tokens_computed_total"), metric("sits_forked_sequences_total")
r = c.completions.create(n=4, seed=1234, stop=[stop] if stop else None, **kw)
p1, f1 = metric("sits_prompt_tokens_computed_total"), metric("sits_forked_sequences_total")
P = r.usage.prompt_tokens
print("stop %r: prompt tokens computed %d (prompt %d), forked %d" % (stop, p1 - p0, P, f1 - f0))
if not (f1 - f0 == 1 and P < p1 - p0 < 4 * P):
    fails += 1
    print("MISMATCH: want 1 fork and fewer than %d prompt tokens computed" % (4 * P))
for ch in sorted(r.choices, key=lambda ch: ch.index):
    w = c.completions.create(seed=seed_of(ch.index), stop=[stop] if stop else None, **kw).choices[0].text
    if w != ch.text:
        fails += 1
        print("MISMATCH choice %d: %r, alone %r" % (ch.index, ch.text, w))
sys.exit(1 if fails else 0)
PYEOF
for r in 0 1; do p=$(rank_pid $r "$tmp/m") && kill -TERM "$p"; done
wait $srv; srv=
finish
