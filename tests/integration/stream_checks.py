"""stream_checks.py -- checks that the tests of the APIs translated into chat requests share (responses_check.py,
anthropic_check.py): their tools, a named-event stream's wire, a client leaving mid-stream, the request trace's counts.
Each check returns what went wrong (None / [] when nothing did). Checker: the counting check() of the servers' inline
test scripts (tool_xml.sh, tool_mistral.sh, reasoning.sh)."""
import json
import socket
import sys
import time
import urllib.request


class Checker:
    """check(cond, what): a mismatch is printed (with the label) and counted; done() exits 1 when any was"""

    def __init__(self, label=""):
        self.fails, self.label = 0, label

    def __call__(self, cond, what):
        if not cond:
            self.fails += 1
            print("MISMATCH%s:" % (" " + self.label if self.label else ""), what)

    def done(self):
        sys.exit(1 if self.fails else 0)

# two function tools in chat's shape (the tests give them to the other APIs in theirs)
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "current weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                              "required": ["city"]}}},
              {"type": "function", "function": {"name": "get_time", "description": "local time",
               "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 8}},
                              "required": ["tz"]}}}]


def metric(url, name):
    """one /metrics scrape's value of name (a series with its labels), 0 when absent"""
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def settle(url, timeout=30.0):
    """wait until no generation request is in flight (sits_num_requests_inflight 0): a stream the client has read to its
    end is counted in /metrics when the server completes its connection, which can be a moment later"""
    end = time.time() + timeout
    while metric(url, "sits_num_requests_inflight") > 0 and time.time() < end:
        time.sleep(0.05)


def wire(url, path, body):
    """(the SSE blocks of a raw stream, what is wrong with them): each "event: T" with data whose type is T, no [DONE]"""
    raw = urllib.request.urlopen(urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                                        headers={"Content-Type": "application/json"}), timeout=60).read().decode()
    blocks = [b for b in raw.split("\n\n") if b]
    good = all(b.startswith("event: ") and json.loads(b.split("\ndata: ", 1)[1])["type"] == b[7:b.index("\n")] for b in blocks)
    return blocks, None if good and "[DONE]" not in raw else "the wire: %r" % raw[-300:]


def leave_mid_stream(url, path, body, marker, scrape):
    """a client that leaves a stream once marker arrived: its request is cancelled (finish abort), nothing is left
    running, the KV blocks come back (scrape: name -> the metric's value)"""
    abort = 'sits_request_finished_total{finish_reason="abort"}'
    blocks, aborted = scrape("sits_kv_blocks_free"), scrape(abort)
    text = json.dumps(body)
    s = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
    s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (path, len(text), text)).encode())
    buf = b""
    while marker.encode() not in buf:
        got = s.recv(4096)
        if not got:
            return "the stream ended before its first delta: %r" % buf[-300:]
        buf += got
    s.close()
    t0 = time.time()
    while time.time() - t0 < 10 and (scrape("sits_num_requests_running") or scrape(abort) == aborted):
        time.sleep(0.1)
    got = (scrape(abort) - aborted, scrape("sits_num_requests_running"), scrape("sits_kv_blocks_free"))
    return None if got == (1, 0, blocks) else "disconnect: abort %s running %s blocks %s of %s" % (got + (blocks,))


def trace_counts(trace, ids):
    """the request trace names each request by its id with its (prompt, generated) tokens: ids [(id, n_in, n_out)]"""
    for _ in range(50):
        lines = {}
        for line in open(trace):
            rec = json.loads(line)
            lines[rec["request"]] = rec
        if all(i in lines for i, _, _ in ids):
            break
        time.sleep(0.1)
    return ["trace of %s: %s, usage %d + %d" % (i, lines.get(i), n_in, n_out) for i, n_in, n_out in ids
            if lines.get(i) is None or (lines[i]["prompt_tokens"], lines[i]["generated_tokens"]) != (n_in, n_out)]
