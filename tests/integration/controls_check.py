#!/usr/bin/env python3
"""controls_check.py URL REF.json [OUT] -- the sampling controls of /v1/completions against HF logits
processors (REF["controls"], tests/ref/gen_logprob_fixtures.py): greedy tokens under
repetition / presence / frequency penalties, logit_bias, min_tokens must equal HF's, token for token.
Then min_p: with temperature 1 every sampled token's logprob (raw logits, checked against HF by
logprobs_check.py) is >= the row's best + log(min_p); the same seeds without min_p break that bound
at least once (so the check can fail). OUT (optional): a batch of seeded sampled requests mixing the
controls (sent at once, so they share steps) written as their token ids and logprobs, for the
comparison across TP sizes (the same tokens on any TP size). Prints the first mismatches. Exit 0/1."""
import concurrent.futures
import json
import math
import sys
import urllib.request

url, ref = sys.argv[1], json.load(open(sys.argv[2]))
fails = []


def post(body):
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))


def ids(r):
    return [int(t[9:]) for t in r["choices"][0]["logprobs"]["tokens"]]


for c in ref["controls"]:
    body = {"prompt": c["prompt"], "max_tokens": 8, "temperature": 0, "logprobs": 0, "return_tokens_as_token_ids": True}
    body.update(c["params"])
    got = ids(post(body))
    if got != c["greedy"]:
        fails.append(f"{c['params']}: got {got}, HF {c['greedy']}")
prompt = ref["items"][-1]["prompt"]


def min_p_violations(min_p, seeds):
    v = 0
    for seed in seeds:
        r = post({"prompt": prompt, "max_tokens": 8, "temperature": 1.0, "min_p": min_p, "seed": seed, "logprobs": 20,
                  "ignore_eos": True})
        lp = r["choices"][0]["logprobs"]
        for tok_lp, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
            if tok_lp < max(top.values()) + math.log(0.3) - 1e-5:
                v += 1
    return v


seeds = list(range(1, 9))
with_min_p, without = min_p_violations(0.3, seeds), min_p_violations(0.0, seeds)
if with_min_p:
    fails.append(f"min_p 0.3: {with_min_p} sampled tokens below min_p * p_max")
if not without:
    fails.append("without min_p no sampled token fell below 0.3 * p_max: the min_p check cannot fail")
# stop_token_ids: HF's greedy continuation of the last prompt ends at its 4th token when that id stops it
g = ref["items"][-1]["greedy"]
r = post({"prompt": prompt, "max_tokens": 8, "temperature": 0, "stop_token_ids": [g[3]]})
if r["choices"][0]["finish_reason"] != "stop" or r["usage"]["completion_tokens"] != g.index(g[3]) + 1:
    fails.append(f"stop_token_ids [{g[3]}]: {r['choices'][0]['finish_reason']} after {r['usage']['completion_tokens']} tokens")
# include_stop_str_in_output: the text up to a stop string, then with the stop string
full = post({"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True})["choices"][0]["text"]
stop = full[len(full) // 2:len(full) // 2 + 2]
for inc in (False, True):
    t = post({"prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "stop": [stop],
              "include_stop_str_in_output": inc})["choices"][0]["text"]
    want = full[:full.index(stop) + (len(stop) if inc else 0)]
    if t != want:
        fails.append(f"stop {stop!r} include_stop_str_in_output {inc}: {t!r}, want {want!r}")
if len(sys.argv) > 3:
    eos = str(ref["eos"][0])
    mixes = [{"presence_penalty": 1.5, "frequency_penalty": 0.5}, {"repetition_penalty": 1.4, "min_p": 0.1},
             {"logit_bias": {"5": 6.0, "7": -100.0, eos: 30.0}, "min_tokens": 3}, {"min_p": 0.2, "top_k": 40},
             {"frequency_penalty": -1.0, "top_k": 50, "top_p": 0.9}, {}, {"repetition_penalty": 0.8, "presence_penalty": -1.0},
             {"min_p": 0.05, "repetition_penalty": 1.2, "frequency_penalty": 1.0, "logit_bias": {"9": 3.0}}]
    bodies = []
    for i, m in enumerate(mixes * 2):
        b = {"prompt": ref["items"][i % len(ref["items"])]["prompt"], "max_tokens": 8, "temperature": 0.9, "seed": 100 + i,
             "logprobs": 3, "return_tokens_as_token_ids": True}
        b.update(m)
        bodies.append(b)
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as ex:
        rs = list(ex.map(post, bodies))
    json.dump([[ids(r), r["choices"][0]["logprobs"]["token_logprobs"]] for r in rs], open(sys.argv[3], "w"))
for f in fails[:10]:
    print("  mismatch", f)
print(f"{ref['model']}: {len(ref['controls'])} control cases; min_p violations {with_min_p} (min_p 0.3) vs {without} (off)")
sys.exit(1 if fails else 0)
