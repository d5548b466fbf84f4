#!/bin/bash
# [api] n > 1 on the GPU (issue 21): the demo model (trained: greedy choices have real margins) served on
# one GPU with the prefix cache off, so that only the fork can share. A prompt ending in a partial block
# asked with n = 4 is computed once, 3 choices fork and 3 blocks are copied on write (the copy kernel,
# kv_block_copy, on the device); every choice then equals the same prompt served alone (n = 1) with that
# choice's seed (choice 0 the request's seed, choice i mix64(seed + i), server.c), greedy and sampled, so
# the copied block holds the prompt's K/V. tests/integration/n_fork.sh is the CPU twin. Exit 77 without a GPU.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
n=$(sits_gpu_count)
[ "${n:-0}" -ge 1 ] || { echo "SKIP: no GPU"; exit 77; }
serve_tmp
serve_np 1 "$top_srcdir/models/demo" --device cuda --block-size 16 --no-enable-prefix-caching || finish
PYTHONPATH="$top_srcdir/tests/integration" "$PY" - "$url" <<'PYEOF' && ok "GPU: n = 4 forks off one prefill (blocks copied on write), each choice equals n = 1" || bad "GPU n = 4 fork"
import json, sys, urllib.request, choices
url = sys.argv[1]
fails = 0
def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH", what)
def post(body):
    rq = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(rq, timeout=120).read())
from choices import choice_seed as seed_of
def metric(name):
    return choices.metric(url, name)
prompt = "A list comprehension is a compact way to build a list from an iterable. For example,"
names = ("sits_prompt_tokens_computed_total", "sits_forked_sequences_total", "sits_kv_blocks_copied_total")
n = 4
for temp, seed in ((0.0, 7), (0.8, 1234)):
    kw = dict(prompt=prompt, max_tokens=48, temperature=temp, ignore_eos=True, logprobs=1)
    before = [metric(x) for x in names]
    r = post(dict(n=n, seed=seed, **kw))
    after = [metric(x) for x in names]
    P = r["usage"]["prompt_tokens"]
    d = [a - b for a, b in zip(after, before)]
    print("temperature %.1f: prompt %d tokens; computed %d, forked %d, copied %d" % (temp, P, d[0], d[1], d[2]))
    check(P % 16 != 0, "the prompt (%d tokens) must end in a partial block of 16" % P)
    check(d == [P, n - 1, n - 1], "computed / forked / copied %s, want [%d, %d, %d]" % (d, P, n - 1, n - 1))
    ch = sorted(r["choices"], key=lambda c: c["index"])
    check([c["index"] for c in ch] == list(range(n)), "indices %s" % [c["index"] for c in ch])
    if temp == 0:
        check(len(set(c["text"] for c in ch)) == 1, "greedy choices differ: %r" % [c["text"] for c in ch])
    else:
        check(len(set(c["text"] for c in ch)) > 1, "sampled choices all equal: %r" % [c["text"] for c in ch])
    for c in ch:
        one = post(dict(seed=seed_of(seed, c["index"]), **kw))["choices"][0]
        same = c["text"] == one["text"]
        lp = []
        for a, b, ta, tb in zip(c["logprobs"]["token_logprobs"], one["logprobs"]["token_logprobs"],
                                c["logprobs"]["tokens"], one["logprobs"]["tokens"]):
            lp.append(abs(a - b))
            if ta != tb:
                break
        print("  choice %d: %s n = 1 (max |logprob diff| over the common tokens %.2e)" %
              (c["index"], "==" if same else "!=", max(lp) if lp else -1))
        check(same, "choice %d: %r vs n = 1 %r" % (c["index"], c["text"], one["text"]))
sys.exit(1 if fails else 0)
PYEOF
stop_np "$top_srcdir/models/demo" || bad "server did not stop on SIGTERM"
finish
