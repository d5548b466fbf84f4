#!/usr/bin/env python3
"""env_ab.py -- A/B of environment switches (SITS_GEMV_RING=0/1, SITS_GEMV_MMA=0/1, ...) on whole steps: sits-bench-decode
once per (repetition, variant), the variants interleaved within each repetition so drift over the call hits them alike.
Prints one table (each row's ms a step per repetition, their median, and the change against the first variant) and
writes one JSON. Not a test.

  bench/env_ab.py --bench BUILD/bench/sits-bench-decode [--reps 2] [--out DIR] [--json FILE]
                  --variant "NAME:VAR=VALUE VAR=VALUE" --variant "NAME:..." [...] -- SITS-BENCH-DECODE ARGS...

e.g. bench/env_ab.py --bench build-gpu/bench/sits-bench-decode --variant "plain:SITS_GEMV_RING=0" --variant ring: -- \\
         --model bench/configs/llama3-8b --load-format dummy --device cuda --fill none --batch 1 --context 128,2048 --quant fp8

A variant's settings are added to the caller's environment (an empty list: the caller's as is); BENCH=PATH among them
is not a variable but that variant's own sits-bench-decode (another build: bench/commit_ab.sh times commits so). Each run writes its
output to OUT/NAME.repR.txt and its JSON beside it; a run that fails stops the A/B with its output's tail. Rows are
sits-bench-decode's (kind, batch, context[, k]); the median is over the repetitions' medians."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def parse_variant(text):
    name, sep, rest = text.partition(":")
    if not sep or not name or "/" in name:
        sys.exit("env_ab.py: --variant is NAME:VAR=VALUE ..., got %r" % text)
    env = {}
    for item in rest.split():
        var, eq, val = item.partition("=")
        if not eq or not var:
            sys.exit("env_ab.py: --variant %s: %r is not VAR=VALUE" % (name, item))
        env[var] = val
    return name, env


def row_key(r):
    return (r["kind"], r["batch"], r["context"], r.get("k", 0))


def main():
    argv = sys.argv[1:]
    bench_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, bench_args = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="the sits-bench-decode binary")
    ap.add_argument("--variant", action="append", required=True, help="NAME:VAR=VALUE ... (repeat; the first is the base)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", help="directory for each run's output and JSON (default: a temporary one, removed)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.reps < 1:
        sys.exit("env_ab.py: --reps must be >= 1")
    variants = [parse_variant(v) for v in args.variant]
    benches = {n: e.pop("BENCH", args.bench) for n, e in variants}   # BENCH=PATH: the variant's own binary
    if len({n for n, _ in variants}) != len(variants):
        sys.exit("env_ab.py: variant names must differ")
    if "--json" in bench_args:
        sys.exit("env_ab.py: the sits-bench-decode arguments must not set --json (env_ab.py gives each run its own)")
    tmp = None
    out = args.out
    if not out:
        tmp = tempfile.TemporaryDirectory()
        out = tmp.name
    os.makedirs(out, exist_ok=True)
    ms = {n: {} for n, _ in variants}   # name -> row key -> [ms_median per repetition]
    order = []
    for rep in range(args.reps):
        for name, env in variants:
            base = os.path.join(out, "%s.rep%d" % (name, rep + 1))
            cmd = [benches[name]] + bench_args + ["--json", base + ".json"]
            with open(base + ".txt", "w") as f:
                rc = subprocess.run(cmd, env=dict(os.environ, **env), stdout=f, stderr=subprocess.STDOUT).returncode
            if rc != 0:
                tail = open(base + ".txt").read().splitlines()[-8:]
                sys.exit("env_ab.py: %s (rep %d) failed, rc %d:\n  %s" % (name, rep + 1, rc, "\n  ".join(tail)))
            for r in json.load(open(base + ".json"))["rows"]:
                k = row_key(r)
                if k not in order:
                    order.append(k)
                ms[name].setdefault(k, []).append(r["ms_median"])
            print("ran %s rep %d" % (name, rep + 1), file=sys.stderr, flush=True)
    first = variants[0][0]
    print("sits-bench-decode %s" % " ".join(bench_args))
    for name, env in variants:
        print("  %-12s %s%s" % (name, " ".join("%s=%s" % kv for kv in env.items()) or "(the caller's environment)",
                                "" if benches[name] == args.bench else "  [" + benches[name] + "]"))
    print("%-8s %6s %8s %3s %-12s %-24s %10s %9s" % ("kind", "batch", "context", "k", "variant", "ms (each rep)", "median ms",
                                                        "vs " + first))
    rows = []
    for key in order:
        base_med = statistics.median(ms[first][key]) if key in ms[first] else None
        for name, _ in variants:
            vals = ms[name].get(key)
            if not vals:
                continue
            med = statistics.median(vals)
            change = (med / base_med - 1.0) if base_med else None
            print("%-8s %6d %8d %3s %-12s %-24s %10.3f %9s" % (key[0], key[1], key[2], key[3] or "-", name,
                  ", ".join("%.3f" % v for v in vals), med, "%+.1f%%" % (100 * change) if change is not None else "-"))
            rows.append({"kind": key[0], "batch": key[1], "context": key[2], "k": key[3], "variant": name, "ms": vals,
                         "ms_median": med, "vs_first": change})
    if args.json:
        json.dump({"bench": "env_ab", "bench_args": bench_args, "reps": args.reps,
                   "variants": [{"name": n, "env": e, "bench": benches[n]} for n, e in variants], "rows": rows},
                  open(args.json, "w"), indent=1)
        print("wrote " + args.json)
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
