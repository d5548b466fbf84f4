#!/usr/bin/env python3
"""logprobs_check.py URL REF.json -- the server's completions logprobs (echo + logprobs 5, greedy,
return_tokens_as_token_ids) against HF's log_softmax in REF.json (tests/ref/gen_logprob_fixtures.py).
Checks: every prompt token's and generated token's logprob within ATOL + RTOL*|ref|, the first
prompt token scored null, the greedy tokens identical, each row's top-5 values within tolerance and
each returned id's value equal to HF's value for that id. Prints the first mismatches and the max
error; writes the values it got to OUT (argv[3], optional) for the TP-size comparison. Exit 0/1."""
import json
import sys
import urllib.request

ATOL, RTOL = 1e-4, 1e-4
url, ref = sys.argv[1], json.load(open(sys.argv[2]))
fails, maxerr, got_all = [], 0.0, []


def close(a, b, what):
    global maxerr
    e = abs(a - b)
    maxerr = max(maxerr, e)
    if e > ATOL + RTOL * abs(b):
        fails.append(f"{what}: got {a:.6f} want {b:.6f}")


def tid(s):
    assert s.startswith("token_id:"), s
    return int(s[9:])


def check_top(got, want, what):
    if got is None or want is None:
        if got is not want:
            fails.append(f"{what}: top {got} vs {want}")
        return
    g = sorted(got.values(), reverse=True)[:len(want)]
    for i, (a, (_, b)) in enumerate(zip(g, want)):
        close(a, b, f"{what} top[{i}]")
    wmap = {i: v for i, v in want}
    for k, v in got.items():
        if tid(k) in wmap:
            close(v, wmap[tid(k)], f"{what} top id {tid(k)}")


for n, it in enumerate(ref["items"]):
    body = {"prompt": it["prompt"], "max_tokens": len(it["greedy"]), "temperature": 0, "logprobs": ref["n_top"],
            "echo": True, "ignore_eos": True, "return_tokens_as_token_ids": True}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req))
    lp = r["choices"][0]["logprobs"]
    np_, ng = len(it["prompt"]), len(it["greedy"])
    toks = [tid(t) for t in lp["tokens"]]
    if toks[:np_] != it["prompt"]:
        fails.append(f"item {n}: echoed tokens {toks[:np_]} != prompt")
    if toks[np_:] != it["greedy"]:
        fails.append(f"item {n}: greedy {toks[np_:]} != HF {it['greedy']}")
    if lp["token_logprobs"][0] is not None:
        fails.append(f"item {n}: first prompt token scored {lp['token_logprobs'][0]}")
    for i in range(1, np_):
        close(lp["token_logprobs"][i], it["prompt_logprobs"][i], f"item {n} prompt[{i}]")
        check_top(lp["top_logprobs"][i], it["prompt_top"][i], f"item {n} prompt[{i}]")
    for j in range(ng):
        close(lp["token_logprobs"][np_ + j], it["greedy_logprobs"][j], f"item {n} gen[{j}]")
        check_top(lp["top_logprobs"][np_ + j], it["greedy_top"][j], f"item {n} gen[{j}]")
    got_all.append(lp["token_logprobs"][1:])
for f in fails[:10]:
    print("  mismatch", f)
print(f"{ref['model']}: {len(ref['items'])} prompts, max |err| {maxerr:.2e}, {len(fails)} mismatches")
if len(sys.argv) > 3:
    json.dump(got_all, open(sys.argv[3], "w"))
sys.exit(1 if fails else 0)
