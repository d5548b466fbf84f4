#!/usr/bin/env python3
"""spec_project.py -- tokens/s per user at batch 1 with n-gram speculative decoding, PROJECTED for a model whose step
costs were measured on a GPU (sits-bench-decode --verify) from the drafting counts measured end to end on another model
(bench/spec_bench.py: tokens, accepted, drafted and verifications per config and prompt set). A projection, not a
measurement of the projected model's speculation: every line it prints says so. Not a test.

  bench/spec_project.py --spec SPEC.json (--decode DECODE.json [--batch 1] [--context 128] | --costs "plain=MS,K=MS,...")
                        [--source TEXT] [--json FILE]

--decode: sits-bench-decode's JSON (its decode row and verify rows at --batch / --context); --costs: the same numbers
by hand, ms a step (plain decode, then verification steps of K drafts), e.g. from bench/RESULTS.md; --source says where
they come from (printed and written with the result).

Per (n-gram config, set): decode steps S = tokens - requests (a request's first token comes from its prefill) -
accepted; V = verifications of them were verification steps of k = drafted / V drafts on average, the rest plain
steps. T = (S - V) t_plain + V t_verify(k), t_verify linear between the measured k (clamped to their range); projected
decode tok/s per user = (tokens - requests) / T, beside 1 / t_plain without speculation (prefill left out of both).
Draft-model configs (dK) are listed without a projection: the draft's own forward passes were not measured there."""
import argparse
import json
import sys


def load_costs(args):
    """{0: t_plain, k: t_verify(k)} in ms"""
    costs = {}
    if args.costs:
        for item in args.costs.split(","):
            name, _, ms = item.partition("=")
            if not ms:
                sys.exit("spec_project.py: --costs items are plain=MS or K=MS, got %r" % item)
            costs[0 if name.strip() == "plain" else int(name)] = float(ms)
    else:
        rows = json.load(open(args.decode))["rows"]
        for r in rows:
            if r["batch"] != args.batch or r["context"] != args.context:
                continue
            if r["kind"] == "decode":
                costs[0] = r["ms_median"]
            elif r["kind"] == "verify":
                costs[int(r["k"])] = r["ms_median"]
    if 0 not in costs or len(costs) < 2:
        sys.exit("spec_project.py: need the plain step and at least one verification step (batch %d, context %d)" %
                 (args.batch, args.context))
    return costs


def t_verify(costs, k):
    ks = sorted(x for x in costs if x > 0)
    if k <= ks[0]:
        return costs[ks[0]]
    if k >= ks[-1]:
        return costs[ks[-1]]
    for lo, hi in zip(ks, ks[1:]):
        if lo <= k <= hi:
            return costs[lo] + (costs[hi] - costs[lo]) * (k - lo) / (hi - lo)
    raise AssertionError("unreachable")


def project(row, costs):
    n_tok = row["tokens"] - row["requests"]
    steps = n_tok - row["accepted"]
    v = row.get("verifications")
    if v is None:
        return None
    if v > steps or steps <= 0:
        sys.exit("spec_project.py: %s / %s: %d verifications for %d decode steps" % (row["config"], row["set"], v, steps))
    k = row["drafted"] / v if v else 0.0
    t = (steps - v) * costs[0] + (v * t_verify(costs, k) if v else 0.0)
    return {"decode_tokens": n_tok, "steps": steps, "verifications": v, "k_mean": k, "ms_total": t,
            "tok_s_projected": 1000.0 * n_tok / t, "tok_s_plain": 1000.0 / costs[0], "speedup_projected": costs[0] * n_tok / t}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, help="bench/spec_bench.py --json output")
    ap.add_argument("--decode", help="sits-bench-decode --json output with --verify rows")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--costs", help="plain=MS,K=MS,...: the step costs by hand instead of --decode")
    ap.add_argument("--source", default="", help="where the costs come from (printed, written)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if bool(args.decode) == bool(args.costs):
        sys.exit("spec_project.py: give one of --decode and --costs")
    costs = load_costs(args)
    spec = json.load(open(args.spec))
    rows = spec["rows"] if isinstance(spec, dict) else spec
    print("PROJECTED (not measured): n-gram speculation at batch 1 with step costs %s%s" %
          (", ".join("%s %.3f ms" % ("plain" if k == 0 else "verify k=%d" % k, v) for k, v in sorted(costs.items())),
           " (" + args.source + ")" if args.source else ""))
    print("drafting counts: %s (measured end to end by spec_bench.py on its model)" % args.spec)
    print("%-6s %-5s %7s %8s %8s %6s %14s %11s %10s" % ("config", "set", "tokens", "accepted", "verifs", "k", "proj. tok/s",
                                                          "plain tok/s", "proj. x"))
    out = []
    for r in rows:
        if r["config"] == "off":
            continue
        if r["config"].startswith("d"):
            print("%-6s %-5s %7d %8d %8s %6s %14s %11s %10s" % (r["config"], r["set"], r["tokens"], r["accepted"],
                  r.get("verifications", "-"), "-", "n/a (draft)", "-", "-"))
            continue
        p = project(r, costs)
        if p is None:
            print("%-6s %-5s: no verification count in the spec JSON (spec_bench.py before it recorded them)" % (r["config"], r["set"]))
            continue
        out.append(dict(config=r["config"], set=r["set"], **p))
        print("%-6s %-5s %7d %8d %8d %6.2f %14.1f %11.1f %9.2fx" % (r["config"], r["set"], r["tokens"], r["accepted"],
              p["verifications"], p["k_mean"], p["tok_s_projected"], p["tok_s_plain"], p["speedup_projected"]))
    if args.json:
        json.dump({"bench": "spec_project", "projected": True, "costs_ms": {str(k): v for k, v in costs.items()},
                   "source": args.source, "spec": args.spec, "rows": out}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
