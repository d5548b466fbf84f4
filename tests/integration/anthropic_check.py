#!/usr/bin/env python3
"""anthropic_check.py URL [TRACE] | auth URL KEY -- [anthropic] what anthropic.sh asks of POST /v1/messages (Anthropic's
Messages API), through the official anthropic SDK (client.messages.create, client.messages.stream,
client.messages.count_tokens). The oracle is the chat endpoint: the same conversation sent to /v1/chat/completions at
temperature 0 (that path is checked against HF transformers and vLLM's parsers elsewhere) must give the same text,
thinking, tool calls (input == json.loads(arguments)), stop reasons and token counts as /v1/messages, whole and
streamed. A guided choice (vLLM's structured_outputs, passed to both) forces the model's exact text where a split must
be known; free greedy text (random weights) checks that both render the same prompt.
Prints the mismatches; exit 0 / 1."""
import json
import sys
import time
import urllib.error
import urllib.request

import anthropic

import stream_checks

fails = 0


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH:", what)


def post(url, path, body, headers=None):
    """(status, parsed JSON body) of a POST (body: an object, or bytes sent as they are)"""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as ex:
        return ex.code, json.loads(ex.read())


def anthropic_error(status, body, want_status, want_type, words=()):
    """an error in Anthropic's shape: {"type": "error", "error": {"type", "message"}} naming words"""
    e = body.get("error") if isinstance(body, dict) else None
    return (status == want_status and body.get("type") == "error" and isinstance(e, dict) and e.get("type") == want_type and
            isinstance(e.get("message"), str) and all(w in e["message"] for w in words))


if sys.argv[1] == "auth":   # a server with --api-key: x-api-key (Anthropic's clients) and Bearer both pass
    url, key = sys.argv[2], sys.argv[3]
    ask = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "Hello"}]}
    m = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0).messages.create(**ask)   # (2.x sends Bearer)
    check(m.type == "message" and m.usage.output_tokens > 0, "the SDK's key: %s" % m)
    for hdr in ({"x-api-key": key}, {"Authorization": "Bearer " + key}):   # x-api-key: Claude Code's, older SDKs'
        st, b = post(url, "/v1/messages", ask, hdr)
        check(st == 200 and b["type"] == "message", "%s: %d %s" % (hdr, st, b))
        st, b = post(url, "/v1/messages/count_tokens", {"model": "m", "messages": ask["messages"]}, hdr)
        check(st == 200 and b["input_tokens"] > 0, "count_tokens, %s: %d %s" % (hdr, st, b))
    for hdr in ({}, {"x-api-key": "wrong"}, {"Authorization": "Bearer wrong"}):
        st, b = post(url, "/v1/messages", ask, hdr)
        check(anthropic_error(st, b, 401, "authentication_error"), "key %s: %d %s" % (hdr, st, b))
        st, b = post(url, "/v1/messages/count_tokens", {"model": "m", "messages": ask["messages"]}, hdr)
        check(anthropic_error(st, b, 401, "authentication_error"), "count_tokens, key %s: %d %s" % (hdr, st, b))
    try:
        anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0).messages.create(**ask)
        check(False, "a wrong key was accepted")
    except anthropic.AuthenticationError as ex:
        check(ex.status_code == 401 and ex.body["error"]["type"] == "authentication_error", "SDK 401: %s" % ex.body)
    print("%d mismatch(es)" % fails if fails else "ok")
    sys.exit(1 if fails else 0)

url = sys.argv[1]
trace = sys.argv[2] if len(sys.argv) > 2 else None
client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0)
ids = []   # (message id, input_tokens, output_tokens) for the trace check

# the same tools in chat's shape and in Anthropic's
CHAT_TOOLS = stream_checks.CHAT_TOOLS
TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
          "input_schema": t["function"]["parameters"]} for t in CHAT_TOOLS]
# Anthropic's tool_choice -> chat's, written out by hand
CHOICE = {"auto": "auto", "any": "required", "none": "none"}
STOP_REASON = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def chat(body, stream):
    """the chat endpoint's answer: thinking, text, calls [(name, input)], stop_reason, (prompt, completion) tokens"""
    if not stream:
        st, w = post(url, "/v1/chat/completions", body)
        check(st == 200, "the chat oracle answered %d %s" % (st, w))
        m, fin = w["choices"][0]["message"], w["choices"][0]["finish_reason"]
        calls = [(t["function"]["name"], json.loads(t["function"]["arguments"])) for t in m.get("tool_calls") or []]
        return dict(thinking=m.get("reasoning_content") or "", text=m.get("content") or "", calls=calls, fin=fin,
                    usage=(w["usage"]["prompt_tokens"], w["usage"]["completion_tokens"]))
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    thinking, text, calls, fin, usage = "", "", {}, None, None
    for line in urllib.request.urlopen(req, timeout=120).read().decode().split("\n"):
        if not line.startswith("data: {"):
            continue
        ev = json.loads(line[6:])
        usage = ev.get("usage") or usage
        for ch in ev["choices"]:
            d = ch["delta"]
            thinking += d.get("reasoning_content") or ""
            text += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                e = calls.setdefault(tc["index"], ["", ""])
                e[0] += tc["function"].get("name") or ""
                e[1] += tc["function"].get("arguments") or ""
            fin = ch.get("finish_reason") or fin
    return dict(thinking=thinking, text=text, calls=[(n, json.loads(a)) for n, a in (calls[k] for k in sorted(calls))],
                fin=fin, usage=(usage["prompt_tokens"], usage["completion_tokens"]))


def summary(m):
    """what a Message says, its shape checked on the way"""
    thinking, text, calls, kinds = "", "", [], []
    for b in m.content:
        kinds.append(b.type)
        if b.type == "thinking":
            thinking += b.thinking
            check(b.signature == "", "thinking signature %r" % b.signature)
        elif b.type == "text":
            text += b.text
        elif b.type == "tool_use":
            check(b.id.startswith("call_") and isinstance(b.input, dict), "tool_use block %s" % b)
            calls.append((b.name, b.input))
        else:
            check(False, "a block of type %s" % b.type)
    check(kinds == sorted(kinds, key=["thinking", "text", "tool_use"].index) and kinds.count("thinking") <= 1 and
          kinds.count("text") <= 1, "blocks out of order: %s" % kinds)
    check(m.id.startswith("msg_") and m.type == "message" and m.role == "assistant" and m.model == "m",
          "message head %s %s %s %s" % (m.id, m.type, m.role, m.model))
    check((m.stop_sequence is not None) == (m.stop_reason == "stop_sequence"), "stop_sequence %r with %s" %
          (m.stop_sequence, m.stop_reason))
    if m.stop_reason != "stop_sequence":   # (a stop string's sequence is cancelled: the trace may count a token more)
        ids.append((m.id, m.usage.input_tokens, m.usage.output_tokens))
    return dict(thinking=thinking, text=text, calls=calls, stop=m.stop_reason, seq=m.stop_sequence,
                usage=(m.usage.input_tokens, m.usage.output_tokens))


def streamed(kw):
    """client.messages.stream: the final message's summary; the events' order and indices checked, and the deltas
    joined per block == the final blocks"""
    raw, joined = [], {}
    with client.messages.stream(**kw) as s:
        for ev in s:
            if ev.type in ("text", "thinking", "input_json", "signature", "citation"):   # the helper's own events
                continue
            raw.append((ev.type, getattr(ev, "index", None)))
            if ev.type == "content_block_delta":
                d = ev.delta
                joined[ev.index] = joined.get(ev.index, "") + (d.text if d.type == "text_delta" else d.thinking
                                                               if d.type == "thinking_delta" else d.partial_json)
        final = s.get_final_message()
    types = [t for t, _ in raw]
    n = len(final.content)
    want = ["message_start"]
    for i in range(n):
        want += ["content_block_start"] + ["content_block_delta"] * sum(1 for t, k in raw if t == "content_block_delta" and k == i)
        want += ["content_block_stop"]
    check(types == want + ["message_delta", "message_stop"], "event order %s" % types)
    check([k for t, k in raw if t == "content_block_start"] == list(range(n)), "block indices %s" % raw)
    for i, b in enumerate(final.content):
        text = {"text": getattr(b, "text", None), "thinking": getattr(b, "thinking", None)}.get(b.type)
        if b.type == "tool_use":
            check(json.loads(joined.get(i, "{}")) == b.input, "block %d: input_json deltas %r != %s" % (i, joined.get(i), b.input))
        else:
            check(joined.get(i) == text, "block %d: deltas %r != %r" % (i, joined.get(i), text))
    return summary(final), final


def want_of(e, stop=None):
    reason = STOP_REASON.get(e["fin"])
    if e["calls"] and reason == "end_turn":
        reason = "tool_use"   # a forced call ends with chat's "stop": Anthropic's tool_use
    if reason == "end_turn" and stop:
        reason = "stop_sequence"
    return dict(thinking=e["thinking"], text=e["text"], calls=e["calls"], stop=reason,
                seq=stop if reason == "stop_sequence" else None, usage=e["usage"])


def same(what, chat_messages, messages, max_tokens=40, extra=None, system=None, tools=False, tool_choice=None,
         stop_sequences=None, thinking=None, stop_hit=None, output=None):
    """/v1/messages (whole, and the stream helper) == /v1/chat/completions on the same conversation; the streamed final
    message == the whole one where the chat oracle's stream == its whole answer"""
    extra = extra or {}
    body = dict(model="m", messages=chat_messages, temperature=0, max_completion_tokens=max_tokens, **extra)
    # temperature goes in the body: the SDK (2.x) has no argument for it
    kw = dict(model="m", messages=messages, max_tokens=max_tokens, extra_body=dict(extra, temperature=0))
    if system is not None:
        kw["system"] = system
    if tools:
        body["tools"] = CHAT_TOOLS
        kw["tools"] = TOOLS
    if tool_choice is not None:
        kw["tool_choice"] = tool_choice
        t = tool_choice["type"]
        body["tool_choice"] = {"type": "function", "function": {"name": tool_choice["name"]}} if t == "tool" else CHOICE[t]
        if tool_choice.get("disable_parallel_tool_use"):
            body["parallel_tool_calls"] = False
    if stop_sequences:
        kw["stop_sequences"] = body["stop"] = stop_sequences
    if thinking is not None:
        kw["thinking"] = thinking
        body["chat_template_kwargs"] = {"enable_thinking": thinking["type"] == "enabled"}
    if output is not None:   # (name, value): output_config or the beta's output_format; the oracle's response_format
        kw["extra_body"][output[0]] = output[1]
        fmt = output[1].get("format") if output[0] == "output_config" else output[1]
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
        if output[0] == "output_config" and "effort" in output[1]:
            body["reasoning_effort"] = output[1]["effort"]
    e, es = chat(body, False), chat(body, True)
    w = summary(client.messages.create(**kw))
    check(w == want_of(e, stop_hit), "%s whole:\n  got  %s\n  want %s" % (what, w, want_of(e, stop_hit)))
    s, final = streamed(kw)
    check(s == want_of(es, stop_hit), "%s streamed:\n  got  %s\n  want %s" % (what, s, want_of(es, stop_hit)))
    if e == es:
        check(s == w, "%s: the streamed message %s != the whole one %s" % (what, s, w))
    return e


SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}, "ok": {"type": "boolean"}},
          "required": ["city", "ok"], "additionalProperties": False}


def forced(text):
    return {"structured_outputs": {"choice": [text]}}


def errors():
    ok = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "Hello"}]}
    cases = [  # (body, status, error type, words the message names)
        (b'{"model": "m", "max_tokens": 4,', 400, "invalid_request_error", ["malformed JSON"]),
        (b'[1]', 400, "invalid_request_error", ["JSON object"]),
        (dict(ok, max_tokens=None), 400, "invalid_request_error", ["max_tokens"]),
        ({"model": "m", "messages": ok["messages"]}, 400, "invalid_request_error", ["max_tokens"]),
        (dict(ok, max_tokens=0), 400, "invalid_request_error", ["max_tokens"]),
        (dict(ok, max_tokens=10 ** 6), 400, "invalid_request_error", ["max_tokens"]),
        ({"max_tokens": 4, "messages": ok["messages"]}, 400, "invalid_request_error", ["model"]),
        (dict(ok, model="claude-sonnet-4-5"), 404, "not_found_error", ["claude-sonnet-4-5"]),
        (dict(ok, messages=[]), 400, "invalid_request_error", ["messages"]),
        (dict(ok, messages="Hello"), 400, "invalid_request_error", ["messages"]),
        (dict(ok, messages=[{"role": "system", "content": "x"}]), 400, "invalid_request_error", ["role"]),
        (dict(ok, messages=[{"role": "user", "content": 5}]), 400, "invalid_request_error", ["content"]),
        (dict(ok, messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type":
                                                                                     "image/png", "data": "AA=="}}]}]),
         400, "invalid_request_error", ["image"]),
        (dict(ok, messages=[{"role": "user", "content": [{"type": "document", "source": {"type": "text", "media_type":
                                                                                        "text/plain", "data": "x"}}]}]),
         400, "invalid_request_error", ["document"]),
        (dict(ok, messages=[{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]),
         400, "invalid_request_error", ["tool_use"]),
        (dict(ok, messages=[{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]),
         400, "invalid_request_error", ["tool_result"]),
        (dict(ok, messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                                          "content": [{"type": "image"}]}]}]), 400, "invalid_request_error",
         ["tool_result"]),
        (dict(ok, messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x",
                                                          "is_error": "yes"}]}]), 400, "invalid_request_error", ["is_error"]),
        (dict(ok, system=7), 400, "invalid_request_error", ["system"]),
        (dict(ok, system=[{"type": "image"}]), 400, "invalid_request_error", ["system"]),
        (dict(ok, tools=[{"type": "web_search_20250305", "name": "web_search"}]), 400, "invalid_request_error",
         ["web_search_20250305"]),
        (dict(ok, tools=[{"name": "f"}]), 400, "invalid_request_error", ["input_schema"]),
        (dict(ok, tools={"name": "f"}), 400, "invalid_request_error", ["tools"]),
        (dict(ok, tools=TOOLS, tool_choice={"type": "required"}), 400, "invalid_request_error", ["tool_choice"]),
        (dict(ok, tools=TOOLS, tool_choice={"type": "tool"}), 400, "invalid_request_error", ["tool_choice"]),
        (dict(ok, tools=TOOLS, tool_choice={"type": "tool", "name": "nope"}), 400, "invalid_request_error", ["nope"]),
        (dict(ok, tools=TOOLS, tool_choice={"type": "auto", "disable_parallel_tool_use": 1}), 400, "invalid_request_error",
         ["disable_parallel_tool_use"]),
        (dict(ok, thinking={"type": "enabled"}), 400, "invalid_request_error", ["budget_tokens"]),
        (dict(ok, thinking={"type": "sometimes"}), 400, "invalid_request_error", ["thinking"]),
        (dict(ok, stop_sequences="x"), 400, "invalid_request_error", ["stop_sequences"]),
        (dict(ok, stop_sequences=["a", "b", "c", "d", "e"]), 400, "invalid_request_error", ["stop_sequences"]),
        (dict(ok, temperature=3), 400, "invalid_request_error", ["temperature"]),
        (dict(ok, top_p="x"), 400, "invalid_request_error", ["top_p"]),
        (dict(ok, stream="yes"), 400, "invalid_request_error", ["stream"]),
        (dict(ok, metadata=[1]), 400, "invalid_request_error", ["metadata"]),
        (dict(ok, output_config="high"), 400, "invalid_request_error", ["output_config"]),
        (dict(ok, output_config={"format": {"type": "xml"}}), 400, "invalid_request_error", ["output_config.format"]),
        (dict(ok, output_config={"format": {"type": "json_schema"}}), 400, "invalid_request_error", ["schema"]),
        (dict(ok, output_format={"type": "json_schema", "schema": 1}), 400, "invalid_request_error", ["output_format"]),
        (dict(ok, output_config={"format": {"type": "json_schema", "schema": {}}},
              output_format={"type": "json_schema", "schema": {}}), 400, "invalid_request_error", ["once"]),
        (dict(ok, output_config={"effort": "extreme"}), 400, "invalid_request_error", ["output_config.effort"]),
        # a schema the grammar refuses: named as the request named its format (the chat request's response_format never)
        (dict(ok, output_config={"format": {"type": "json_schema", "schema": {"type": "array", "uniqueItems": True}}}), 400,
         "invalid_request_error", ["output_config.format:", "uniqueItems"]),
        (dict(ok, output_format={"type": "json_schema", "schema": {"type": "array", "uniqueItems": True}}), 400,
         "invalid_request_error", ["output_format:", "uniqueItems"]),
        (dict(ok, messages=[{"role": "user", "content": "x " * 5000}]), 400, "invalid_request_error", []),   # > context
    ]
    for body, status, etype, words in cases:
        st, b = post(url, "/v1/messages", body)
        check(anthropic_error(st, b, status, etype, words), "%.200r: %d %s" % (body, st, b))
        check("response_format" not in json.dumps(b), "%.200r: the chat request's name in the error: %s" % (body, b))
    st, b = post(url, "/v1/messages/count_tokens", b'{"model": "m",')
    check(anthropic_error(st, b, 400, "invalid_request_error", ["malformed JSON"]), "count_tokens malformed: %d %s" % (st, b))
    st, b = post(url, "/v1/messages/count_tokens", {"model": "x", "messages": ok["messages"]})
    check(anthropic_error(st, b, 404, "not_found_error", ["'x'"]), "count_tokens model: %d %s" % (st, b))
    st, b = post(url, "/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": [{"type": "image"}]}]})
    check(anthropic_error(st, b, 400, "invalid_request_error", ["image"]), "count_tokens image: %d %s" % (st, b))
    # the wrong method: 405 in Anthropic's shape
    r = urllib.request.Request(url + "/v1/messages", method="GET")
    try:
        urllib.request.urlopen(r, timeout=30)
        check(False, "GET /v1/messages answered")
    except urllib.error.HTTPError as ex:
        check(anthropic_error(ex.code, json.loads(ex.read()), 405, "invalid_request_error"), "GET /v1/messages: %d" % ex.code)
    # the SDK raises the matching errors
    for kw, exc in ((dict(ok, model="nope"), anthropic.NotFoundError), (dict(ok, max_tokens=0), anthropic.BadRequestError)):
        try:
            client.messages.create(**kw)
            check(False, "%s was accepted" % kw)
        except exc as ex:
            check(ex.body["type"] == "error" and ex.body["error"]["message"], "SDK error %s" % ex.body)


def count_tokens():
    """count_tokens == the chat prompt's token count (its usage, and /tokenize of the same messages)"""
    for what, chat_messages, kw in (
            ("one message", [{"role": "user", "content": "Hello"}], {"messages": [{"role": "user", "content": "Hello"}]}),
            ("system + blocks + tools", [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": [{"type": "text", "text": "Weather"},
                                                                      {"type": "text", "text": "in Paris?"}]}],
             {"system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}], "tools": TOOLS,
              "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather"}, {"type": "text", "text": "in Paris?"}]}]})):
        body = {"model": "m", "messages": chat_messages}
        if "tools" in kw:
            body["tools"] = CHAT_TOOLS
        got = client.messages.count_tokens(model="m", **kw).input_tokens
        st, tok = post(url, "/tokenize", body)
        usage = chat(dict(body, max_completion_tokens=1), False)["usage"][0]
        check(st == 200 and got == tok["count"] == usage, "%s: count_tokens %d, /tokenize %s, chat usage %d" %
              (what, got, tok.get("count"), usage))
    # thinking disabled renders another prompt (Qwen3's closed <think>), as chat's enable_thinking false
    ask = [{"role": "user", "content": "Hello"}]
    got = client.messages.count_tokens(model="m", messages=ask, thinking={"type": "disabled"}).input_tokens
    st, tok = post(url, "/tokenize", {"model": "m", "messages": ask, "chat_template_kwargs": {"enable_thinking": False}})
    check(got == tok["count"] and got > client.messages.count_tokens(model="m", messages=ask).input_tokens,
          "count_tokens with thinking disabled: %d, /tokenize %s" % (got, tok))
    st, tok = post(url, "/tokenize", {"model": "m", "messages": ask, "chat_template_kwargs": {"enable_thinking": True}})
    for th in ({"type": "adaptive"}, {"type": "enabled", "budget_tokens": 2048}):
        got = client.messages.count_tokens(model="m", messages=ask, thinking=th).input_tokens
        check(got == tok["count"], "count_tokens with thinking %s: %d, /tokenize %s" % (th, got, tok))


def conversations():
    ask = [{"role": "user", "content": "Hello"}]
    # free greedy text: the prompt rendered from messages / system is the chat one
    same("a string content", ask, ask, max_tokens=12)
    # a NUL character in the output (a byte-level token): the chat JSON's \u0000 survives the translation
    same("a NUL character in the output", ask, ask, max_tokens=3, extra={"logit_bias": {"188": 100}})   # 188: byte 0x00
    same("system as a string", [{"role": "system", "content": "Be brief."}] + ask, ask, system="Be brief.", max_tokens=12)
    same("system as text blocks", [{"role": "system", "content": "Be brief."}] + ask, ask,
         system=[{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}], max_tokens=12)
    same("text blocks", [{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}],
         [{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}], max_tokens=12)
    same("turns", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey."}, {"role": "user", "content": "Again"}],
         [{"role": "user", "content": [{"type": "text", "text": "Hi"}]},
          {"role": "assistant", "content": [{"type": "text", "text": "Hey."}]}, {"role": "user", "content": "Again"}],
         max_tokens=12)
    # output_config.format (and the beta's output_format): the chat oracle with that response_format; its text is the schema's
    for name, value in (("output_config", {"format": {"type": "json_schema", "schema": SCHEMA}, "effort": "high"}),
                        ("output_format", {"type": "json_schema", "schema": SCHEMA})):
        e = same(name, ask, ask, max_tokens=60, output=(name, value))
        try:
            doc = json.loads(e["text"])
            check(e["fin"] == "stop" and doc["city"] in ("Paris", "Rome") and isinstance(doc["ok"], bool) and len(doc) == 2,
                  "%s: the constrained answer %r" % (name, e["text"]))
        except (ValueError, KeyError, TypeError) as ex:
            check(False, "%s: the answer %r is not the schema's JSON (%s)" % (name, e["text"], ex))
    # max_tokens -> stop_reason max_tokens
    e = same("cut at max_tokens", ask, ask, max_tokens=5, extra={"ignore_eos": True})
    check(e["fin"] == "length", "the chat oracle did not cut: %s" % e)
    # thinking split (qwen3's parser): a thinking block, then the text; cut inside the thinking: thinking only
    t1 = "<think>\nThe user greets me.\n</think>\n\nHello there! How are you?"
    e = same("thinking + text", ask, ask, max_tokens=80, extra=forced(t1))
    check(e["thinking"] == "\nThe user greets me.\n" and e["text"] == "\n\nHello there! How are you?", "the chat oracle split %s" % e)
    same("cut in the thinking", ask, ask, max_tokens=9, extra=forced(t1))
    # stop_sequences: the first that appears ends the text (stop_reason stop_sequence, stop_sequence the one matched); none
    # matched: end_turn
    e = same("a stop sequence", ask, ask, max_tokens=80, extra=forced(t1), stop_sequences=["zzz", "How"], stop_hit="How")
    check(e["fin"] == "stop" and e["text"] == "\n\nHello there! ", "stop: the chat oracle %s" % e)
    same("another stop sequence", ask, ask, max_tokens=80, extra=forced(t1), stop_sequences=["there", "How"], stop_hit="there")
    e = same("stop sequences not met", ask, ask, max_tokens=80, extra=forced(t1), stop_sequences=["zzz"])
    check(e["fin"] == "stop" and e["text"].endswith("you?"), "no stop: the chat oracle %s" % e)
    # thinking enabled / disabled = the template's enable_thinking
    e = same("thinking disabled", ask, ask, max_tokens=12, thinking={"type": "disabled"})
    check(e["usage"][0] > chat(dict(model="m", messages=ask, max_completion_tokens=1), False)["usage"][0],
          "thinking disabled rendered no other prompt: %s" % (e,))
    same("thinking enabled", ask, ask, max_tokens=12, thinking={"type": "enabled", "budget_tokens": 1024})


def tools():
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    e = same("tool_choice tool", ask, ask, max_tokens=60, tools=True, tool_choice={"type": "tool", "name": "get_weather"})
    check(len(e["calls"]) == 1 and e["calls"][0][0] == "get_weather", "named: the chat oracle %s" % e)
    same("tool_choice any", ask, ask, max_tokens=120, tools=True, tool_choice={"type": "any"})
    same("any, one call", ask, ask, max_tokens=120, tools=True, tool_choice={"type": "any", "disable_parallel_tool_use": True})
    same("tool_choice none", ask, ask, max_tokens=12, tools=True, tool_choice={"type": "none"})
    call = ('<think>\nI need the weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            '</tool_call>')
    e = same("auto: thinking then a call", ask, ask, max_tokens=120, tools=True, extra=forced(call))
    check(e["thinking"] and e["calls"] == [("get_weather", {"city": "Paris"})] and e["fin"] == "tool_calls",
          "auto call: the chat oracle %s" % e)
    two = call.replace("</tool_call>", '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>')
    e = same("auto: two calls", ask, ask, max_tokens=160, tools=True, extra=forced(two))
    check([n for n, _ in e["calls"]] == ["get_weather", "get_time"], "two calls: the chat oracle %s" % e)
    e = same("auto, disable_parallel_tool_use: the first call", ask, ask, max_tokens=160, tools=True, extra=forced(two),
             tool_choice={"type": "auto", "disable_parallel_tool_use": True})
    check(e["calls"] == [("get_weather", {"city": "Paris"})], "one call: the chat oracle %s" % e)
    # the round trip: the whole message sent back as the assistant's turn, the tool's result in a user turn
    m = client.messages.create(model="m", messages=ask, max_tokens=120, tools=TOOLS, extra_body=dict(forced(call), temperature=0))
    check(m.stop_reason == "tool_use" and m.content[-1].type == "tool_use", "round trip: %s" % m)
    tu = m.content[-1]
    back = ask + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu.id, "content": "sunny"},
                                               {"type": "text", "text": "And now?"}]}]
    hist = ask + [{"role": "assistant", "content": "", "reasoning": "\nI need the weather.\n",
                   "tool_calls": [{"id": tu.id, "type": "function",
                                   "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                  {"role": "tool", "content": "sunny", "tool_call_id": tu.id},
                  {"role": "user", "content": "And now?"}]
    same("the tool round trip", hist, back, max_tokens=12, tools=True)
    # two calls, results as text blocks and an error, thinking given back
    back2 = ask + [{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I need both.", "signature": "s"}, {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {"tz": "CET"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": [{"type": "text", "text": "sunny"}]},
                                     {"type": "tool_result", "tool_use_id": "call_2", "content": "no clock", "is_error": True}]}]
    hist2 = ask + [{"role": "assistant", "content": "Checking.", "reasoning": "I need both.",
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                                   {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "CET"}'}}]},
                   {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
                   {"role": "tool", "content": "no clock", "tool_call_id": "call_2"}]
    same("two calls and their results", hist2, back2, max_tokens=12, tools=True)


def wire():
    """a raw look at the stream: named events, each data's type its event's, no [DONE]; message_start first"""
    blocks, wrong = stream_checks.wire(url, "/v1/messages", {"model": "m", "max_tokens": 3, "stream": True,
                                                             "messages": [{"role": "user", "content": "Hello"}]})
    check(wrong is None and blocks[0].startswith("event: message_start") and blocks[-1].startswith("event: message_stop"),
          wrong or "the wire: %s" % blocks)
    start = json.loads(blocks[0].split("\ndata: ", 1)[1])["message"]
    check(start["content"] == [] and start["stop_reason"] is None and start["usage"]["output_tokens"] == 0 and
          start["usage"]["input_tokens"] > 0, "message_start: %s" % start)


def metrics_and_disconnect():
    def metric(name):
        return stream_checks.metric(url, name)
    # /metrics counts a Messages request as a chat one: its prompt and generated tokens (the earlier streams all counted)
    stream_checks.settle(url)
    mp, mg = metric("sits_prompt_tokens_total"), metric("sits_generation_tokens_total")
    m = client.messages.create(model="m", max_tokens=7, messages=[{"role": "user", "content": "Hello"}],
                               extra_body={"ignore_eos": True, "temperature": 0})
    for _ in range(50):
        if metric("sits_generation_tokens_total") >= mg + 7:
            break
        time.sleep(0.1)
    got = (metric("sits_prompt_tokens_total") - mp, metric("sits_generation_tokens_total") - mg)
    check(got == (m.usage.input_tokens, m.usage.output_tokens) == (got[0], 7), "/metrics moved by %s for %s" % (got, m.usage))
    # a client that leaves mid-stream: its request is cancelled (finish abort), nothing left running, blocks back
    wrong = stream_checks.leave_mid_stream(url, "/v1/messages", {"model": "m", "max_tokens": 3000, "stream": True, "ignore_eos": True,
                                                                 "messages": [{"role": "user", "content": "Hello"}]},
                                           "content_block_delta", metric)
    check(wrong is None, wrong)


errors()
count_tokens()
conversations()
tools()
wire()
metrics_and_disconnect()
if trace:   # the request trace names each message by its id, with the same token counts
    for wrong in stream_checks.trace_counts(trace, ids):
        check(False, wrong)
print("%d mismatch(es)" % fails if fails else "ok")
sys.exit(1 if fails else 0)
