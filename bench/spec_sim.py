#!/usr/bin/env python3
"""spec_sim.py -- n-gram drafting policies replayed on recorded greedy outputs: how many verification steps, accepted
drafts and plain steps each policy would take on the same requests, and the tokens/s per user at batch 1 that gives
with measured step costs (PROJECTED). Greedy speculative decoding emits exactly the plain greedy tokens (the CPU
backend bit for bit: tests/integration/spec_decode.py), so a policy's counts follow from the plain outputs alone; the
server's policy (drafter "earliest", k rule "keep": src/spec/spec.c sits_spec_ngram_propose -- the earliest occurrence
of the longest suffix match of at most prompt_lookup_max tokens, at least prompt_lookup_min -- and sits_spec_k_next
for free drafts) must give spec_bench.py's measured counts (JSON server_policy). Not a test.

  (. tests/integration/mpi_env.sh; bench/spec_sim.py [--sits build/sits-dist] [--model models/demo] [--record FILE])
  bench/spec_sim.py --outputs FILE [--k 4,8] [--costs "plain=MS,1=MS,2=MS,4=MS,8=MS"] [--source TEXT] [--json FILE]

Without --outputs it starts the server without speculation and records spec_bench.py's prompt sets' greedy outputs
(token ids through logprobs with return_tokens_as_token_ids; --record keeps them). Policies: drafter "earliest" (the
server's) or "recent" (the latest occurrence of the longest match); k rule "keep" (the server's for n-gram drafts: K
after any accepted draft, k / 2 after none), "adaptive" (its rule for draft-model drafts, and for n-gram ones before
this script: k + 1 after a full accept, accepted + 1 after a partial one, k / 2 after none), "fixed" (always K). Per set it also counts "unseen": generated tokens that occur
nowhere before them (no n-gram drafter can propose those; each costs a step of its own). Costs: ms a step at batch 1,
plain then verification steps of K drafts (sits-bench-decode --verify), linear between the measured K, per verification
step by its own number of drafts (spec_project.py uses the set's mean: on the demo's sets the two differ by up to 3 %).
The n-gram settings are spec_bench.py's: prompt_lookup_min 1, prompt_lookup_max 4."""
import argparse
import json
import os
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import spec_bench  # noqa: E402  (start, stop, prompt_sets)
from spec_project import t_verify  # noqa: E402

SETS = ("copy", "loop", "code", "free", "chat")


def record(args):
    class A:
        pass
    a = A()
    a.mpirun, a.sits, a.model = args.mpirun, args.sits, args.model
    p, url, errf, _ = spec_bench.start(a, [])
    out = {}
    try:
        for name, prompts in spec_bench.prompt_sets(url).items():
            out[name] = []
            for ids in prompts:   # as spec_bench.py sends them (chat ends at <|eot_id|>)
                body = {"prompt": ids, "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": name != "chat", "logprobs": 0,
                        "return_tokens_as_token_ids": True}
                req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
                toks = json.load(urllib.request.urlopen(req, timeout=600))["choices"][0]["logprobs"]["tokens"]
                out[name].append({"prompt": ids, "gen": [int(t.split(":", 1)[1]) for t in toks]})
    finally:
        spec_bench.stop(p)
        os.unlink(errf)
    return {"model": os.path.abspath(args.model), "max_tokens": args.max_tokens, "sets": out}


def propose(t, k, recent, mn=1, mx=4):
    """sits_spec_ngram_propose (recent: the latest occurrence instead of the earliest)"""
    n, best_len, best_end = len(t), 0, -1
    for e in (range(n - 1, 0, -1) if recent else range(1, n)):
        lim, l = min(mx, e), 0
        while l < lim and t[e - 1 - l] == t[n - 1 - l]:
            l += 1
        if l > best_len:
            best_len, best_end = l, e
            if l == mx:
                break
    return t[best_end:best_end + min(n - best_end, k)] if best_len >= mn else []


def k_next(rule, k, kmax, accepted, drafted):
    """the next step's k (sits_spec_k_next: "keep" with free drafts, "adaptive" without)"""
    if rule == "fixed":
        return kmax
    nxt = k // 2 if accepted == 0 else kmax if rule == "keep" else k + 1 if accepted >= drafted else accepted + 1
    return max(1, min(nxt, kmax))


def replay(reqs, kmax, recent, rule, costs, max_tokens):
    """counts (and ms with costs) of one policy over a set's requests"""
    c = {"requests": len(reqs), "tokens": 0, "verifications": 0, "accepted": 0, "drafted": 0, "plain": 0, "unseen": 0, "ms": 0.0}
    for r in reqs:
        gen = r["gen"]
        t, ng, k = list(r["prompt"]) + gen[:1], 1, kmax   # the first token comes from the prefill
        seen = set(r["prompt"])
        for x in gen:
            c["unseen"] += x not in seen
            seen.add(x)
        c["tokens"] += len(gen)
        while ng < len(gen):
            kk = min(k, max_tokens - ng - 1)   # k + 1 tokens may come out
            d = propose(t, kk, recent) if kk >= 1 else []
            if not d:
                c["plain"] += 1
                c["ms"] += costs[0] if costs else 0.0
                t.append(gen[ng])
                ng += 1
                continue
            m = 0
            while m < len(d) and ng + m < len(gen) and d[m] == gen[ng + m]:
                m += 1
            out = min(m + 1, len(gen) - ng)
            t += gen[ng:ng + out]
            ng += out
            c["verifications"] += 1
            c["drafted"] += len(d)
            c["accepted"] += m
            c["ms"] += t_verify(costs, len(d)) if costs else 0.0
            k = k_next(rule, k, kmax, m, len(d))
    if costs:
        n = c["tokens"] - c["requests"]
        c["speedup_projected"] = costs[0] * n / c["ms"]
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sits", default=os.path.join(os.path.dirname(HERE), "build/sits-dist"))
    ap.add_argument("--model", default=os.path.join(os.path.dirname(HERE), "models/demo"))
    ap.add_argument("--mpirun", default="mpirun --oversubscribe --bind-to none -np 1")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--outputs", help="recorded greedy outputs (--record of an earlier run) instead of a server")
    ap.add_argument("--record", help="write the recorded outputs here")
    ap.add_argument("--k", default="4,8")
    ap.add_argument("--costs", help="plain=MS,K=MS,...: batch-1 step costs (PROJECTED speed-ups)")
    ap.add_argument("--source", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    rec = json.load(open(args.outputs)) if args.outputs else record(args)
    if args.record:
        json.dump(rec, open(args.record, "w"))
    costs = None
    if args.costs:
        costs = {}
        for item in args.costs.split(","):
            name, _, ms = item.partition("=")
            if not ms:
                sys.exit("spec_sim.py: --costs items are plain=MS or K=MS, got %r" % item)
            costs[0 if name.strip() == "plain" else int(name)] = float(ms)
        if 0 not in costs or len(costs) < 2:
            sys.exit("spec_sim.py: --costs needs plain= and at least one K=")
        print("PROJECTED speed-ups (not measured) from step costs %s%s" %
              (", ".join("%s %.3f ms" % ("plain" if k == 0 else "k=%d" % k, v) for k, v in sorted(costs.items())),
               " (" + args.source + ")" if args.source else ""))
    print("%-3s %-8s %-8s %-5s %7s %7s %8s %8s %7s %7s %8s" % ("K", "drafter", "k rule", "set", "tokens", "unseen", "verifs",
                                                               "accepted", "drafted", "plain", "proj. x"))
    rows = []
    for kmax in (int(x) for x in args.k.split(",")):
        for recent in (False, True):
            for rule in ("keep", "adaptive", "fixed"):
                for name in SETS:
                    if name not in rec["sets"]:
                        continue
                    c = replay(rec["sets"][name], kmax, recent, rule, costs, rec.get("max_tokens", args.max_tokens))
                    row = dict(k=kmax, drafter="recent" if recent else "earliest", k_rule=rule, set=name, **c)
                    row["server_policy"] = not recent and rule == "keep"
                    rows.append(row)
                    print("%-3d %-8s %-8s %-5s %7d %7d %8d %8d %7d %7d %8s" % (kmax, row["drafter"], rule, name, c["tokens"], c["unseen"],
                          c["verifications"], c["accepted"], c["drafted"], c["plain"],
                          "%.2fx" % c["speedup_projected"] if costs else "-"))
    if args.json:
        json.dump({"bench": "spec_sim", "model": rec.get("model"), "projected": bool(costs),
                   "costs_ms": {str(k): v for k, v in (costs or {}).items()}, "source": args.source, "rows": rows},
                  open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
