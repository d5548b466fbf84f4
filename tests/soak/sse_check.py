#!/usr/bin/env python3
"""sse_check.py SSE_FILE REF_TEXT_FILE -- judge a (possibly cut) OpenAI completions SSE stream against the
text the same greedy request gives when it runs to completion.

Rules (what "no corrupted output" means for a stream that a fault interrupted):
  - the stream is a sequence of events "data: ...\\n\\n"; an unterminated last event (the connection was cut
    mid-write) is discarded, as an SSE client does; any other line is garbage;
  - every event is JSON or [DONE]; JSON events are completion chunks or an {"error": ...} event;
  - the concatenated text is a prefix of the reference text;
  - a stream that claims to have finished normally (finish_reason stop/length, or [DONE] without an error
    event) must carry the whole reference text.
Prints one line: "<state> <n_chunks> <n_chars>" where state is complete | error-event | cut, and exits 0;
exits 1 with the reason on a violation."""
import json
import sys

raw = open(sys.argv[1], "rb").read()
ref = open(sys.argv[2], encoding="utf-8").read()
try:
    text = raw.decode("utf-8")
except UnicodeDecodeError as e:
    # a cut in the middle of a multi-byte character can only be in the discarded last event
    head = raw[: raw.rfind(b"\n\n") + 2]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        print("FAIL: stream is not UTF-8: %s" % e)
        sys.exit(1)
events = text.split("\n\n")
events = events[:-1]        # the part after the last blank line is unterminated (or empty)
out, n_chunks, err, done, finish = [], 0, None, False, None
for ev in events:
    for line in ev.split("\n"):
        if not line.startswith("data: "):
            print("FAIL: garbage line in stream: %r" % line[:120])
            sys.exit(1)
        d = line[6:]
        if done:
            print("FAIL: event after [DONE]: %r" % d[:120])
            sys.exit(1)
        if d == "[DONE]":
            done = True
            continue
        try:
            o = json.loads(d)
        except ValueError:
            print("FAIL: event is not JSON: %r" % d[:120])
            sys.exit(1)
        if "error" in o:
            err = o["error"]
            if not isinstance(err, dict) or not err.get("message"):
                print("FAIL: error event without a message: %r" % d[:200])
                sys.exit(1)
            continue
        if o.get("object") != "text_completion" or "choices" not in o:
            print("FAIL: not a completion chunk: %r" % d[:200])
            sys.exit(1)
        for c in o["choices"]:
            out.append(c.get("text") or "")
            n_chunks += 1
            if c.get("finish_reason"):
                finish = c["finish_reason"]
got = "".join(out)
if not ref.startswith(got):
    i = next((k for k in range(min(len(got), len(ref))) if got[k] != ref[k]), min(len(got), len(ref)))
    print("FAIL: streamed text is not a prefix of the reference (first difference at char %d: %r vs %r)"
          % (i, got[i:i + 20], ref[i:i + 20]))
    sys.exit(1)
if err is None and (finish in ("stop", "length") or done) and got != ref:
    print("FAIL: stream claims a normal finish (%s, [DONE]=%s) with %d of %d chars" % (finish, done, len(got), len(ref)))
    sys.exit(1)
state = "error-event" if err is not None else ("complete" if got == ref and (done or finish) else "cut")
print("%s %d %d%s" % (state, n_chunks, len(got), (" (%s)" % err.get("message", "")[:100]) if err else ""))
