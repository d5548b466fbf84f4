#!/usr/bin/env python3
"""serve_client.py -- loopback clients for tests/integration/lifecycle.sh and conn_flood.sh.

  drain  --port P --pids P0,P1 --n N --max-tokens K [--signals 1|2] [--expect-finish length|abort|any]
         [--choices C]
      N requests in flight (half streamed: completions and chat, some with include_usage; half whole
      responses), then SIGTERM to every pid (as Slurm does at a job's end). Right after the signal:
      /health and a new completion must answer 503 (with Retry-After). Then every client must receive a
      complete response:
        whole:  HTTP 200, a JSON body with choices[0].finish_reason and usage; "length" carries exactly
                K completion tokens;
        stream: HTTP 200, every event "data: <json>" or "data: [DONE]", a chunk with a finish_reason (or
                an {"error"} event), the usage chunk when include_usage was asked, [DONE] last, and the
                chunked body terminated (http.client raises IncompleteRead otherwise).
      --signals 2 sends a second SIGTERM 0.3 s after the first (immediate stop): then only the bounded
      exit is judged by the caller, and responses are counted, not required.
      --choices C: every request asks n = C choices, and a complete response has all C: whole bodies
      C choices (indexes 0..C-1) each with the finish reason ("length": C * K completion tokens),
      streams a finish chunk for every index.
      Prints a JSON summary; exits 1 on a violation.

  flood  --port P --idle N --slow M [--over K]
      N idle TCP connections (from source addresses 127.0.0.2.. , 500 each) and M clients that send a
      completion's headers and then one body byte every second (from 127.0.0.200), then /health and a
      completion from 127.0.0.1 must each be answered within 1 s, and the idle connections must still
      be open (not reset). --over K: afterwards K more connections from one address beyond the
      server's per-client limit (the server runs with --max-connections-per-client 500 in the test)
      must each get 503 with Retry-After to a /health request, never a reset. --slow-cut S: then every
      slow body must be cut by the server (its read timeout) within S seconds, none before the checks.
      Prints a JSON summary; exits 1 on a violation.
  full   --port P --held N [--over K]
      N idle connections (the server's --max-connections), then K more that each ask /health: every
      one must get 503 with Retry-After, never a reset; after the N close, /health answers 200 again.

  burst  --port P --n N [--prompt-len L] [--max-tokens K]
      N completions at once (token-id prompts, greedy, ignore_eos): each must answer 200 with
      finish_reason "length" and K tokens (tests/gpu/memory_plan_cuda.sh: a burst at --max-num-seqs).

  streams --port P --n N [--max-tokens K] [--max-metrics-s S]
      N streamed completions at once while /metrics is polled (tests/integration/stream_admission.sh):
      all N must be in flight (sits_num_requests_inflight) before the first stream ends, /metrics must
      answer within S seconds throughout, every stream must end with K tokens (usage) and [DONE].
All traffic goes to 127.0.0.1 only, and every wait is bounded."""
import argparse
import asyncio
import errno
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time

HOST = "127.0.0.1"
PROMPT = "Hello there, tell me a story"


def fail(summary, msg):
    summary.setdefault("violations", []).append(msg)


def metric(port, name):
    c = http.client.HTTPConnection(HOST, port, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return float(parts[1])
    return None


def one_finish(fins, n_choices):
    """The finish reason of a response whose choice i ended with fins[i] (None: missing or mixed)."""
    if len(fins) != n_choices or None in fins or len(set(fins)) != 1:
        return None
    return fins[0]


def one_request(port, kind, stream, usage, max_tokens, res, n_choices=1):
    """Runs one request (n_choices choices) to its end; fills res (a dict)."""
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
    body = {"model": "m", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    if n_choices > 1:
        body["n"] = n_choices
        body["temperature"] = 1.0
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": PROMPT}]
    else:
        body["prompt"] = PROMPT
    if stream:
        body["stream"] = True
        if usage:
            body["stream_options"] = {"include_usage": True}
    res.update(kind=kind, stream=stream, usage=usage, complete=False, first=False)
    try:
        c = http.client.HTTPConnection(HOST, port, timeout=120)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        res["status"] = r.status
        if not stream:
            raw = r.read()
            res["first"] = True
            o = json.loads(raw)
            chs = sorted(o["choices"], key=lambda ch: ch["index"])
            fins = [ch.get("finish_reason") for ch in chs]
            fin = one_finish(fins, n_choices)
            res["finish"] = fin if fin else "choices %s" % fins
            n = o["usage"]["completion_tokens"]
            res["tokens"] = n
            ok = r.status == 200 and fin in ("stop", "length", "abort")
            if [ch["index"] for ch in chs] != list(range(n_choices)):
                ok = False
                res["why"] = "choice indexes %s" % [ch["index"] for ch in chs]
            if fin == "length" and n != max_tokens * n_choices:
                ok = False
                res["why"] = "finish length with %d of %d tokens" % (n, max_tokens * n_choices)
            res["complete"] = ok
            return
        buf, events = b"", []
        while True:
            piece = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not piece:
                break
            buf += piece
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                events.append(ev.decode("utf-8"))
                res["first"] = True
        if buf.strip():
            res["why"] = "unterminated event at the end: %r" % buf[:80]
            return
        fins, err, usage_seen, done_last = {}, None, None, False
        for i, ev in enumerate(events):
            if not ev.startswith("data: "):
                res["why"] = "not an SSE data event: %r" % ev[:80]
                return
            d = ev[6:]
            if d == "[DONE]":
                done_last = i == len(events) - 1
                continue
            o = json.loads(d)
            if "error" in o:
                err = o["error"]
                continue
            if o.get("usage"):
                usage_seen = o["usage"]
            for ch in o.get("choices", []):
                if ch.get("finish_reason"):
                    fins[ch["index"]] = ch["finish_reason"]
        fin = one_finish([fins.get(i) for i in range(n_choices)], n_choices) if len(fins) == n_choices else None
        res["finish"] = fin if fin else ("error-event" if err else ("choices %s" % fins if fins else None))
        if usage_seen:
            res["tokens"] = usage_seen["completion_tokens"]
        ok = r.status == 200 and done_last and (fin or err)
        if usage and not usage_seen and not err:
            ok = False
            res["why"] = "no usage chunk"
        if fin == "length" and usage_seen and usage_seen["completion_tokens"] != max_tokens * n_choices:
            ok = False
            res["why"] = "finish length with %d of %d tokens" % (usage_seen["completion_tokens"], max_tokens * n_choices)
        if not done_last:
            res["why"] = "no [DONE] at the end"
        res["complete"] = bool(ok)
    except Exception as e:   # a cut stream, a reset, a bad body: the request is not complete
        res["why"] = "%s: %s" % (type(e).__name__, e)


def quick(port, method, path, body=None, timeout=5):
    """(status, retry_after, seconds) of one request on a fresh connection; status -1 on a socket error."""
    t0 = time.time()
    try:
        c = http.client.HTTPConnection(HOST, port, timeout=timeout)
        hdr = {"Content-Type": "application/json"} if body else {}
        c.request(method, path, body, hdr)
        r = c.getresponse()
        r.read()
        ra = r.getheader("Retry-After")
        c.close()
        return r.status, ra, time.time() - t0
    except Exception as e:
        return -1, str(e), time.time() - t0


def cmd_drain(a):
    s = {"n": a.n, "choices": a.choices}
    res = [dict() for _ in range(a.n)]
    shapes = []
    for i in range(a.n):
        if i % 2 == 0:
            shapes.append(("completions" if i % 4 == 0 else "chat", True, i % 8 != 4))   # streams, most with usage
        else:
            shapes.append(("completions" if i % 4 == 1 else "chat", False, False))
    th = [threading.Thread(target=one_request, args=(a.port, k, st, u, a.max_tokens, res[i], a.choices), daemon=True)
          for i, (k, st, u) in enumerate(shapes)]
    for t in th:
        t.start()
    # in flight: every request admitted (the server's gauge) and every stream past its first event
    t_end = time.time() + 60
    while time.time() < t_end:
        inf = metric(a.port, "sits_num_requests_inflight") or 0
        if inf >= a.n and all(r.get("first") for r, sh in zip(res, shapes) if sh[1]):
            break
        time.sleep(0.05)
    s["inflight_at_signal"] = int(metric(a.port, "sits_num_requests_inflight") or 0)
    s["finished_before_signal"] = sum(1 for r in res if r.get("complete"))
    for p in a.pids:
        os.kill(p, signal.SIGTERM)
    t_sig = time.time()
    st, ra, dt = quick(a.port, "GET", "/health")
    s["health_after_signal"] = st
    s["health_after_signal_ms"] = round(1000 * (time.time() - t_sig), 1)
    if st != 503:
        fail(s, "/health right after SIGTERM answered %s, not 503" % st)
    st, ra, _ = quick(a.port, "POST", "/v1/completions",
                      json.dumps({"model": "m", "prompt": "x", "max_tokens": 2}))
    s["new_request_after_signal"] = st
    if st != 503 or ra is None:
        fail(s, "a new completion right after SIGTERM answered %s (Retry-After %s), not 503 with Retry-After" % (st, ra))
    if a.signals >= 2:
        time.sleep(0.3)
        for p in a.pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for t in th:
        t.join(timeout=a.join_timeout)
    s["seconds_to_last_response"] = round(time.time() - t_sig, 2)
    s["complete"] = sum(1 for r in res if r.get("complete"))
    s["finish"] = {}
    for r in res:
        f = str(r.get("finish"))
        s["finish"][f] = s["finish"].get(f, 0) + 1
    s["not_complete"] = [r for r in res if not r.get("complete")][:5]
    if a.signals < 2:
        if s["inflight_at_signal"] != a.n:
            fail(s, "%d requests in flight at the signal, wanted %d" % (s["inflight_at_signal"], a.n))
        if s["complete"] != a.n:
            fail(s, "%d of %d clients received a complete response" % (s["complete"], a.n))
        if a.expect_finish != "any":
            bad = [r.get("finish") for r in res if r.get("finish") != a.expect_finish]
            if bad:
                fail(s, "finish reasons %s, wanted all %s" % (bad, a.expect_finish))
    print(json.dumps(s))
    return 1 if s.get("violations") else 0


async def open_idle(src, port, n, socks):
    for _ in range(n):
        sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sk.setblocking(False)
        sk.bind((src, 0))
        try:
            sk.connect((HOST, port))
        except BlockingIOError:
            pass
        socks.append(sk)
    await asyncio.sleep(0)


async def slow_body(port, stop, stats):
    """Headers of a completion with a 400-byte body, then one byte a second until stopped."""
    try:
        r, w = await asyncio.open_connection(HOST, port, local_addr=("127.0.0.200", 0))
    except OSError as e:
        stats["slow_connect_errors"] = stats.get("slow_connect_errors", 0) + 1
        return
    w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{")
    try:
        await w.drain()
        while not stop.is_set():
            try:
                d = await asyncio.wait_for(r.read(256), 1.0)
                # the server closed (b"") or answered: either way it cut the slow body
                if d is not None:
                    stats["slow_cut_by_server"] = stats.get("slow_cut_by_server", 0) + 1
                    break
            except asyncio.TimeoutError:
                pass
            w.write(b" ")
            await w.drain()
    except OSError:
        stats["slow_cut_by_server"] = stats.get("slow_cut_by_server", 0) + 1
    w.close()


async def timed_request(port, raw, src="127.0.0.1", timeout=5.0):
    """(status line, headers text, seconds) of one raw request; ('ERR ...', '', s) on a socket error."""
    t0 = time.time()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(HOST, port, local_addr=(src, 0)), timeout)
        w.write(raw)
        await w.drain()
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), timeout)
        w.close()
        txt = head.decode("latin-1")
        return txt.split("\r\n", 1)[0], txt, time.time() - t0
    except Exception as e:
        return "ERR %s %s" % (type(e).__name__, e), "", time.time() - t0


def still_open(sk):
    try:
        d = sk.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return len(d) > 0   # data would be a server reply (unexpected for an idle connection, but open)
    except BlockingIOError:
        return True
    except OSError:
        return False


async def flood(a):
    s = {"idle": a.idle, "slow": a.slow}
    socks = []
    per = 500
    for k in range((a.idle + per - 1) // per):
        await open_idle("127.0.0.%d" % (2 + k), a.port, min(per, a.idle - k * per), socks)
    stop = asyncio.Event()
    stats = {}
    slow = [asyncio.create_task(slow_body(a.port, stop, stats)) for _ in range(a.slow)]
    await asyncio.sleep(3.0)   # every connection accepted, the slow bodies trickling
    s["idle_open_before"] = sum(1 for sk in socks if still_open(sk))
    h, _, th = await timed_request(a.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    body = json.dumps({"model": "m", "prompt": "Hello", "max_tokens": 4, "temperature": 0}).encode()
    c, _, tc = await timed_request(a.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                   b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    s["health"] = h
    s["health_s"] = round(th, 3)
    s["completion"] = c
    s["completion_s"] = round(tc, 3)
    if " 200 " not in h + " " or th > 1.0:
        fail(s, "/health with %d idle + %d slow connections: %r in %.3f s" % (a.idle, a.slow, h, th))
    if " 200 " not in c + " " or tc > 1.0:
        fail(s, "a completion with %d idle + %d slow connections: %r in %.3f s" % (a.idle, a.slow, c, tc))
    s["idle_open_after"] = sum(1 for sk in socks if still_open(sk))
    if s["idle_open_after"] != a.idle:
        fail(s, "%d of %d idle connections still open (the others were reset or closed)" % (s["idle_open_after"], a.idle))
    s.update(stats)
    if a.over:
        # 500 (the per-client limit) from one address, then `over` more: each of those must get 503
        extra = []
        await open_idle("127.0.0.201", a.port, 500, extra)
        await asyncio.sleep(1.0)
        res = await asyncio.gather(*[timed_request(a.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", src="127.0.0.201")
                                     for _ in range(a.over)])
        n503 = sum(1 for st, hd, _ in res if " 503 " in st + " " and "retry-after" in hd.lower())
        s["over_limit_503"] = n503
        s["over_limit_other"] = [st for st, _, _ in res if " 503 " not in st + " "][:3]
        if n503 != a.over:
            fail(s, "%d of %d connections over the per-client limit got 503 + Retry-After" % (n503, a.over))
        for sk in extra:
            sk.close()
    if a.slow_cut:
        # the server's read timeout must cut every slow body (it was still trickling)
        s["slow_cut_before_check"] = stats.get("slow_cut_by_server", 0)
        t_end = time.time() + a.slow_cut
        while time.time() < t_end and not all(t.done() for t in slow):
            await asyncio.sleep(0.2)
        s["slow_cut_by_server"] = stats.get("slow_cut_by_server", 0)
        if s["slow_cut_by_server"] != a.slow or s["slow_cut_before_check"] != 0:
            fail(s, "slow bodies cut by the server: %d before the check (want 0), %d of %d in the end"
                 % (s["slow_cut_before_check"], s["slow_cut_by_server"], a.slow))
    stop.set()
    await asyncio.gather(*slow, return_exceptions=True)
    for sk in socks:
        sk.close()
    print(json.dumps(s))
    return 1 if s.get("violations") else 0


async def one_burst(port, model, i, prompt_len, max_tokens, vocab, res):
    ids = [(7919 * (i + 1) * (k + 3)) % min(vocab, 3000) + 1 for k in range(prompt_len)]
    body = json.dumps({"model": model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True}).encode()
    try:
        r, w = await asyncio.open_connection(HOST, port)
        w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await w.drain()
        raw = await asyncio.wait_for(r.read(), 600)
        w.close()
        head, _, payload = raw.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        o = json.loads(payload)
        res.append((status, o["choices"][0]["finish_reason"], o["usage"]["completion_tokens"]))
    except Exception as e:
        res.append((-1, "%s: %s" % (type(e).__name__, e), 0))


async def burst(a):
    res = []
    t0 = time.time()
    await asyncio.gather(*[one_burst(a.port, a.model, i, a.prompt_len, a.max_tokens, a.vocab, res) for i in range(a.n)])
    ok = sum(1 for st, fin, n in res if st == 200 and fin == "length" and n == a.max_tokens)
    s = {"n": a.n, "ok": ok, "seconds": round(time.time() - t0, 2),
         "bad": [r for r in res if not (r[0] == 200 and r[1] == "length")][:3]}
    if ok != a.n:
        fail(s, "%d of %d requests gave HTTP 200 with finish_reason length and %d tokens" % (ok, a.n, a.max_tokens))
    print(json.dumps(s))
    return 1 if s.get("violations") else 0


async def metrics_get(port, timeout):
    """(/metrics as {name: value}, seconds) of one request; (None, s) when it did not answer in time."""
    t0 = time.time()
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(HOST, port), timeout)
        w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await w.drain()
        raw = await asyncio.wait_for(r.read(), timeout)
        w.close()
    except Exception:
        return None, time.time() - t0
    m = {}
    for line in raw.partition(b"\r\n\r\n")[2].decode("latin-1").splitlines():
        f = line.split()
        if len(f) == 2 and not line.startswith("#"):
            try:
                m[f[0]] = float(f[1])
            except ValueError:
                pass
    return m, time.time() - t0


async def one_stream(port, model, i, max_tokens, res):
    body = json.dumps({"model": model, "prompt": "stream number %d" % i, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}).encode()
    try:
        r, w = await asyncio.open_connection(HOST, port)
        w.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await w.drain()
        raw = await asyncio.wait_for(r.read(), 900)
        w.close()
        events = [ln[6:] for ln in raw.decode("utf-8", "replace").split("\n") if ln.startswith("data: ")]
        usage = [json.loads(e)["usage"] for e in events if e.startswith("{") and json.loads(e).get("usage")]
        ok = bool(events) and events[-1].strip() == "[DONE]" and usage and usage[-1]["completion_tokens"] == max_tokens
        res.append((time.time(), ok, events[-1][:80] if events else raw[:80]))
    except Exception as e:
        res.append((time.time(), False, "%s: %s" % (type(e).__name__, e)))


async def streams(a):
    """n streamed requests at once while /metrics is polled: every one must be admitted (counted in flight)
    before the first of them ends, /metrics must answer within --max-metrics-s throughout, and every stream
    must end with max_tokens tokens and [DONE]."""
    res = []
    t0 = time.time()
    tasks = [asyncio.ensure_future(one_stream(a.port, a.model, i, a.max_tokens, res)) for i in range(a.n)]
    s = {"n": a.n, "max_tokens": a.max_tokens, "polls": 0, "metrics_max_s": 0.0, "all_admitted_s": None}
    while not all(t.done() for t in tasks):
        m, dt = await metrics_get(a.port, a.max_metrics_s)
        s["polls"] += 1
        s["metrics_max_s"] = round(max(s["metrics_max_s"], dt), 3)
        if m is None:
            fail(s, "/metrics did not answer within %.0f s while %d streams ran" % (a.max_metrics_s, a.n))
        elif s["all_admitted_s"] is None and m.get("sits_num_requests_inflight", 0) >= a.n and not res:
            s["all_admitted_s"] = round(time.time() - t0, 2)
        await asyncio.sleep(0.2)
    first_end = min(t for t, _, _ in res) - t0
    s["first_end_s"] = round(first_end, 2)
    s["seconds"] = round(time.time() - t0, 2)
    s["ok"] = sum(1 for _, ok, _ in res if ok)
    if s["all_admitted_s"] is None:
        fail(s, "the %d requests were never all in flight before the first one ended (admissions trickled)" % a.n)
    if s["ok"] != a.n:
        fail(s, "%d of %d streams ended with %d tokens and [DONE]; e.g. %r" % (s["ok"], a.n, a.max_tokens,
                                                                             [x for _, ok, x in res if not ok][:2]))
    print(json.dumps(s))
    return 1 if s.get("violations") else 0


async def full(a):
    """--max-connections N on the server: N + extra connections, then a /health request on each of the
    last `over`: every one must get 503 with Retry-After (never a reset)."""
    s = {"held": a.held, "over": a.over}
    socks = []
    per = 500
    for k in range((a.held + per - 1) // per):
        await open_idle("127.0.0.%d" % (2 + k), a.port, min(per, a.held - k * per), socks)
    await asyncio.sleep(1.0)
    res = await asyncio.gather(*[timed_request(a.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", src="127.0.0.202")
                                 for _ in range(a.over)])
    s["503_retry_after"] = sum(1 for st, hd, _ in res if " 503 " in st + " " and "retry-after" in hd.lower())
    s["other"] = [st for st, _, _ in res if " 503 " not in st + " "][:3]
    if s["503_retry_after"] != a.over:
        fail(s, "%d of %d connections beyond --max-connections got 503 + Retry-After" % (s["503_retry_after"], a.over))
    for sk in socks:
        sk.close()
    await asyncio.sleep(1.0)
    st, _, t = await timed_request(a.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    s["health_after_release"] = st
    if " 200 " not in st + " ":
        fail(s, "/health after the connections closed: %r" % st)
    print(json.dumps(s))
    return 1 if s.get("violations") else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("drain")
    d.add_argument("--port", type=int, required=True)
    d.add_argument("--pids", type=lambda x: [int(p) for p in x.split(",")], required=True)
    d.add_argument("--n", type=int, default=8)
    d.add_argument("--max-tokens", type=int, default=64)
    d.add_argument("--signals", type=int, default=1)
    d.add_argument("--expect-finish", default="any")
    d.add_argument("--join-timeout", type=float, default=120)
    d.add_argument("--choices", type=int, default=1)
    f = sub.add_parser("flood")
    f.add_argument("--port", type=int, required=True)
    f.add_argument("--idle", type=int, default=5000)
    f.add_argument("--slow", type=int, default=100)
    f.add_argument("--over", type=int, default=0)
    f.add_argument("--slow-cut", type=float, default=0,
                   help="then wait up to this many seconds for the server to cut every slow body")
    b = sub.add_parser("burst")
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--n", type=int, default=1024)
    b.add_argument("--prompt-len", type=int, default=32)
    b.add_argument("--max-tokens", type=int, default=16)
    b.add_argument("--vocab", type=int, default=3000)
    b.add_argument("--model", default="m")
    st = sub.add_parser("streams")
    st.add_argument("--port", type=int, required=True)
    st.add_argument("--model", default="m")
    st.add_argument("--n", type=int, default=256)
    st.add_argument("--max-tokens", type=int, default=300)
    st.add_argument("--max-metrics-s", type=float, default=10.0)
    u = sub.add_parser("full")
    u.add_argument("--port", type=int, required=True)
    u.add_argument("--held", type=int, required=True)
    u.add_argument("--over", type=int, default=20)
    a = ap.parse_args()
    if a.cmd == "full":
        return asyncio.run(asyncio.wait_for(full(a), 60))
    if a.cmd == "burst":
        return asyncio.run(burst(a))
    if a.cmd == "streams":
        return asyncio.run(asyncio.wait_for(streams(a), 900))
    if a.cmd == "drain":
        return cmd_drain(a)
    return asyncio.run(asyncio.wait_for(flood(a), 120))


if __name__ == "__main__":
    sys.exit(main())
