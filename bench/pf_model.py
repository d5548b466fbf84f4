#!/usr/bin/env python3
"""pf_model.py -- a model of the prefill attention kernel's time: each CTA (a 128-row tile of one head) costs
c0 + u x its causal 64-key tiles, and the CTAs, heaviest first (att_pf_order_kernel), go one at a time to the first
SM that is free (one CTA an SM: the wgmma kernel). Fits c0 and u (grid search, least squares of relative errors) to
measured kernel times of single prompts, prints the fit beside the measurements and what it predicts for a batch of
several prompts (a mixed step's), with and without c0. Not a test.

  bench/pf_model.py [--sms 132] [--heads 32] [--mix 4x2048] P:US [P:US ...]
  e.g. bench/pf_model.py 1024:84.1 2048:234.6 4096:729.6 8192:2504.4   (bench/RESULTS.md 2026-12-03T15:00Z)
"""
import argparse
import heapq


def makespan(prompts, c0, u, sms, heads, rows=128, kt=64):
    jobs = []
    for p in prompts:
        for i in range(p // rows):
            jobs += [((i + 1) * rows + kt - 1) // kt * u + c0] * heads
    jobs.sort(reverse=True)
    free = [0.0] * sms
    for j in jobs:
        heapq.heappush(free, heapq.heappop(free) + j)
    return max(free)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--mix", default="4x2048", help="NxL: the batch to predict")
    ap.add_argument("meas", nargs="+", help="P:US (prompt tokens: measured kernel us)")
    a = ap.parse_args()
    meas = [(int(m.split(":")[0]), float(m.split(":")[1])) for m in a.meas]
    best = None
    for c0 in [x * 0.5 for x in range(0, 121)]:
        for u in [0.5 + x * 0.01 for x in range(0, 451)]:
            err = sum((makespan([p], c0, u, a.sms, a.heads) / t - 1) ** 2 for p, t in meas)
            if best is None or err < best[0]:
                best = (err, c0, u)
    _, c0, u = best
    print(f"fit: c0 = {c0:.1f} us a CTA, u = {u:.2f} us a 64-key tile ({a.sms} SMs, {a.heads} heads, 128-row tiles)")
    print(f"{'prompt':>8} {'measured us':>12} {'model us':>10} {'model, c0 = 0':>14}")
    for p, t in meas:
        print(f"{p:>8} {t:>12.1f} {makespan([p], c0, u, a.sms, a.heads):>10.1f} {makespan([p], 0, u, a.sms, a.heads):>14.1f}")
    n, l = (int(x) for x in a.mix.split("x"))
    print(f"batch of {n} x {l}: model {makespan([l] * n, c0, u, a.sms, a.heads):.1f} us, "
          f"with c0 = 0 {makespan([l] * n, 0, u, a.sms, a.heads):.1f} us")


if __name__ == "__main__":
    main()
