#!/usr/bin/env python3
"""loadgen.py -- a bounded OpenAI-API load generator for the soak test (python3 stdlib only, loopback
only, bounded in requests and in time).

  loadgen.py capacity --url URL --seconds S --concurrency C [...]
      closed loop: C clients back to back for S seconds; prints {"capacity_rps": ...}
  loadgen.py soak --url URL --seconds S --rate R [--pids P1,P2] [--windows W] [...]
      open loop: Poisson arrivals at R requests/s (fixed seed) for S seconds, at most --max-inflight in
      flight (an arrival beyond that is counted as "shed" by the client, never queued); samples the RSS
      of the given pids every second; writes a JSON summary (--out) and prints it.

Requests: completions and (with --chat) chat completions, half streamed, prompts of 3..40 words,
max_tokens 8..48 with ignore_eos, so every answer must report exactly max_tokens completion tokens --
a cheap integrity check (a short, malformed or mis-framed answer counts as "bad").
The summary holds: counts by status, 5xx, connection errors, bad answers, latency P50/P99 overall and
per window (with the longest latency and the host's longest stall: how late a 10 ms sleep woke), RSS per
window per pid, RSS growth (last window vs the first window after warm-up), and the 10 slowest requests (start,
latency, endpoint, stream, max_tokens)."""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
         "upsilon phi chi psi omega the a of and to in is was for on with as by at from").split()


def make_request(rng, chat):
    n_words = rng.randint(3, 40)
    prompt = " ".join(rng.choice(WORDS) for _ in range(n_words))
    max_tokens = rng.randint(8, 48)
    stream = rng.random() < 0.5
    body = {"model": "m", "max_tokens": max_tokens, "temperature": 0.7, "seed": rng.randint(0, 1 << 30),
            "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if chat and rng.random() < 0.5:
        body["messages"] = [{"role": "user", "content": prompt}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt
        path = "/v1/completions"
    return path, body


def one_request(host, port, path, body, timeout):
    """Returns (status or None, latency_s, ok_answer, error_text)."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        dt = time.monotonic() - t0
        if r.status != 200:
            return r.status, dt, False, data[:200].decode("utf-8", "replace")
        want = body["max_tokens"]
        if body["stream"]:
            text = data.decode("utf-8")
            ev = [l[6:] for l in text.split("\n") if l.startswith("data: ")]
            if not ev or ev[-1] != "[DONE]":
                return r.status, dt, False, "stream without [DONE]"
            chunks = [json.loads(e) for e in ev[:-1]]
            usage = chunks[-1].get("usage") or {}
            finish = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
            ok = usage.get("completion_tokens") == want and "length" in finish
        else:
            d = json.loads(data)
            ok = d["usage"]["completion_tokens"] == want and d["choices"][0]["finish_reason"] == "length"
        return r.status, dt, ok, "" if ok else "bad answer: " + data[:200].decode("utf-8", "replace")
    except Exception as e:  # connection refused/reset, timeout, malformed JSON
        return None, time.monotonic() - t0, False, "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def rss_kb(pid):
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def cmd_capacity(a, host, port):
    stop = time.monotonic() + a.seconds
    lock = threading.Lock()
    done, errors = [0], [0]

    def worker(i):
        rng = random.Random(1000 + i)
        while time.monotonic() < stop:
            path, body = make_request(rng, a.chat)
            st, dt, ok, err = one_request(host, port, path, body, a.timeout)
            with lock:
                if st == 200 and ok:
                    done[0] += 1
                else:
                    errors[0] += 1
    t0 = time.monotonic()
    th = [threading.Thread(target=worker, args=(i,)) for i in range(a.concurrency)]
    [t.start() for t in th]
    [t.join() for t in th]
    el = time.monotonic() - t0
    res = {"capacity_rps": done[0] / el, "completed": done[0], "errors": errors[0], "seconds": el,
           "concurrency": a.concurrency}
    print(json.dumps(res))
    return 0 if errors[0] == 0 else 1


def cmd_soak(a, host, port):
    rng = random.Random(a.seed)
    pids = [int(p) for p in a.pids.split(",") if p] if a.pids else []
    lock = threading.Lock()
    recs = []          # (t_start_rel, status, latency, ok)
    errs = []
    inflight = [0]
    shed = [0]
    rss = []           # (t_rel, [kb per pid])
    t0 = time.monotonic()
    end = t0 + a.seconds
    stop_sampling = threading.Event()

    def sampler():
        while not stop_sampling.is_set():
            rss.append((time.monotonic() - t0, [rss_kb(p) for p in pids]))
            stop_sampling.wait(1.0)
    samp = threading.Thread(target=sampler)
    samp.start()

    # The machine's own stalls, as a reader of the latencies needs them: a thread that asks for 10 ms of
    # sleep and records by how much each wake-up came late (on a shared 2-core host a neighbour can hold
    # every core for a second; the requests in flight then all carry that second).
    stalls = []        # (t_rel, seconds late)

    def prober():
        while not stop_sampling.is_set():
            t = time.monotonic()
            stop_sampling.wait(0.01)
            stalls.append((t - t0, max(0.0, time.monotonic() - t - 0.01)))
    probe = threading.Thread(target=prober)
    probe.start()

    def run(ts, path, body):
        st, dt, ok, err = one_request(host, port, path, body, a.timeout)
        with lock:
            recs.append((ts, st, dt, ok, path, body["stream"], body["max_tokens"]))
            if err and len(errs) < 20:
                errs.append("%s %s" % (st, err))
            inflight[0] -= 1

    threads = []
    next_t = t0
    n_sent = 0
    while True:
        next_t += rng.expovariate(a.rate)
        if next_t >= end or n_sent >= a.max_requests:
            break
        now = time.monotonic()
        if next_t > now:
            time.sleep(next_t - now)
        path, body = make_request(rng, a.chat)
        with lock:
            if inflight[0] >= a.max_inflight:
                shed[0] += 1
                continue
            inflight[0] += 1
        th = threading.Thread(target=run, args=(time.monotonic() - t0, path, body))
        th.start()
        threads.append(th)
        n_sent += 1
        threads = [t for t in threads if t.is_alive()]
    for t in threads:
        t.join(a.timeout + 5)
    stop_sampling.set()
    samp.join()
    probe.join()

    W = a.windows
    win = a.seconds / W
    warm = int(a.warmup * W + 0.999)   # windows excluded from the RSS baseline
    windows = []
    for w in range(W):
        lat = [r[2] for r in recs if w * win <= r[0] < (w + 1) * win and r[1] == 200]
        rs = [x[1] for x in rss if w * win <= x[0] < (w + 1) * win]
        per_pid = []
        for i in range(len(pids)):
            v = [x[i] for x in rs if x[i] is not None]
            per_pid.append(max(v) if v else None)
        late = [x[1] for x in stalls if w * win <= x[0] < (w + 1) * win]
        windows.append({"t0": round(w * win, 1), "requests": len(lat), "p50_s": pct(lat, 0.5),
                        "p99_s": pct(lat, 0.99), "max_s": max(lat) if lat else None,
                        "host_stall_max_s": round(max(late), 3) if late else None, "rss_kb_max": per_pid})
    status = {}
    for r in recs:
        k = str(r[1]) if r[1] is not None else "conn_error"
        status[k] = status.get(k, 0) + 1
    lat_all = [r[2] for r in recs if r[1] == 200]
    growth = []
    for i in range(len(pids)):
        base = windows[min(warm, W - 1)]["rss_kb_max"][i]
        last = windows[-1]["rss_kb_max"][i]
        growth.append(None if not base or not last else (last - base) / base)
    p99s = [w["p99_s"] for w in windows[warm:] if w["p99_s"] is not None]
    res = {
        "seconds": a.seconds, "rate_rps": a.rate, "sent": n_sent, "shed_by_client": shed[0],
        "completed_ok": sum(1 for r in recs if r[1] == 200 and r[3]),
        "status": status, "n_5xx": sum(v for k, v in status.items() if k.startswith("5")),
        "conn_errors": status.get("conn_error", 0), "bad_answers": sum(1 for r in recs if r[1] == 200 and not r[3]),
        "p50_s": pct(lat_all, 0.5), "p99_s": pct(lat_all, 0.99),
        "p99_first_s": p99s[0] if p99s else None, "p99_last_s": p99s[-1] if p99s else None,
        "p99_max_over_min": (max(p99s) / min(p99s)) if p99s and min(p99s) > 0 else None,
        "rss_growth": growth, "warmup_windows": warm, "windows": windows, "first_errors": errs,
        "slowest": [{"t0": round(r[0], 3), "latency_s": round(r[2], 3), "path": r[4], "stream": r[5], "max_tokens": r[6]}
                    for r in sorted(recs, key=lambda r: -r[2])[:10]],
    }
    txt = json.dumps(res, indent=1)
    if a.out:
        open(a.out, "w").write(txt + "\n")
    print(txt)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["capacity", "soak"])
    p.add_argument("--url", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--rate", type=float, default=1.0)
    p.add_argument("--max-inflight", type=int, default=64)
    p.add_argument("--max-requests", type=int, default=200000)
    p.add_argument("--pids", default="")
    p.add_argument("--windows", type=int, default=6)
    p.add_argument("--warmup", type=float, default=0.2, help="fraction of the run excluded from the RSS baseline")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--chat", action="store_true")
    p.add_argument("--out", default="")
    a = p.parse_args()
    u = urllib.parse.urlparse(a.url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("loadgen.py: loopback URLs only (got %s)" % u.hostname)
    if a.seconds <= 0 or a.seconds > 7200:
        sys.exit("loadgen.py: --seconds must be in (0, 7200]")
    return cmd_capacity(a, u.hostname, u.port) if a.mode == "capacity" else cmd_soak(a, u.hostname, u.port)


if __name__ == "__main__":
    sys.exit(main())
