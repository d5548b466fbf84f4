#!/usr/bin/env python3
"""harmony_check.py URL with|without -- [reasoning] what harmony.sh asks of a server started on gpt-oss's chat
template (see harmony.sh), through the official openai client; reasoning / reasoning_content (vLLM's field and its
older name, always equal here) are not in the client's types and are read through model_extra. A guided choice forces the model's text (the harmony markup spelled in
ordinary tokens), so each result is known in advance. `with`: --reasoning-parser openai_gptoss (by auto);
`without`: no reasoning parser. Prints the mismatches; exit 0 / 1."""
import json
import sys

import openai

url, mode = sys.argv[1], sys.argv[2]
c = openai.OpenAI(base_url=url + "/v1", api_key="none")
fails = 0
ask = [{"role": "user", "content": "What is the weather in Paris?"}]
MARKUP = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": {"type": "object",
          "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH %s:" % mode, what)


def rc(msg):
    """the reasoning of a message or delta: reasoning and reasoning_content must agree"""
    extra = msg.model_extra or {}
    check(extra.get("reasoning") == extra.get("reasoning_content"), "reasoning %r != reasoning_content %r" %
          (extra.get("reasoning"), extra.get("reasoning_content")))
    return extra.get("reasoning_content")


def forced(text, max_tokens=200, extra=None, **kw):
    """request arguments whose output is text (cut at max_tokens)"""
    return dict(model="m", messages=ask, max_tokens=max_tokens, temperature=0,
                extra_body=dict({"structured_outputs": {"choice": [text]}}, **(extra or {})), **kw)


def streamed(**kw):
    """a stream joined: reasoning, content (None when absent), calls {index: {id, name, args}}, logprob tokens,
    finish, reasoning chunks; checks that no delta shows markup and no chunk carries two kinds"""
    reasoning, content, calls, toks, fin, n_r = "", "", {}, [], None, 0
    for ev in c.chat.completions.create(stream=True, **kw):
        if not ev.choices:
            continue
        ch = ev.choices[0]
        d = ch.delta
        r = rc(d)
        kinds = [k for k in (r, d.content, d.tool_calls) if k]
        check(len(kinds) <= 1, "a chunk with two kinds: %s" % d)
        for t in (r or "", d.content or ""):
            check(not any(m in t for m in MARKUP), "markup in a delta: %r" % t)
        if r:
            reasoning += r
            n_r += 1
        content += d.content or ""
        for tc in d.tool_calls or []:
            e = calls.setdefault(tc.index, {"id": None, "name": "", "args": ""})
            if tc.id:
                check(e["id"] is None, "call %d's head twice" % tc.index)
                e["id"] = tc.id
            e["name"] += tc.function.name or ""
            e["args"] += tc.function.arguments or ""
        if ch.logprobs and ch.logprobs.content:
            toks += [t.token for t in ch.logprobs.content]
        fin = ch.finish_reason or fin
    return reasoning or None, content or None, calls, toks, fin, n_r


def spelled(toks):
    return "".join(toks[:-1] if toks and toks[-1] == "<|end_of_text|>" else toks)


def with_parser():
    # thinking, then the answer: reasoning_content / content, whole and streamed
    t1 = ("<|channel|>analysis<|message|>The user asks about the weather.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.")
    w = c.chat.completions.create(logprobs=True, **forced(t1)).choices[0]
    check((rc(w.message), w.message.content, w.finish_reason) == ("The user asks about the weather.", "It is sunny in Paris.", "stop"),
          "whole: %r %r %s" % (rc(w.message), w.message.content, w.finish_reason))
    check(spelled([t.token for t in w.logprobs.content]) == t1, "whole logprobs spell %r" % [t.token for t in w.logprobs.content])
    r, ct, calls, toks, fin, n_r = streamed(logprobs=True, **forced(t1))
    check((r, ct, fin, calls) == (rc(w.message), w.message.content, "stop", {}), "streamed: %r %r %s %s" % (r, ct, fin, calls))
    toks1 = toks
    check(spelled(toks) == t1, "streamed logprobs spell %r" % toks)
    check(n_r > 1, "the reasoning came in %d chunk(s), not as it was written" % n_r)
    # include_reasoning false (vLLM's harmony path: the analysis channel dropped): null whole, no reasoning chunk
    w = c.chat.completions.create(**forced(t1, extra={"include_reasoning": False})).choices[0]
    check((rc(w.message), w.message.content) == (None, "It is sunny in Paris."), "include_reasoning false: %s" % w.message)
    r, ct, calls, toks, fin, n_r = streamed(**forced(t1, extra={"include_reasoning": False}))
    check((r, ct, fin, n_r) == (None, "It is sunny in Paris.", "stop", 0), "include_reasoning false streamed: %r %r %s %d" %
          (r, ct, fin, n_r))

    # a tool call (the generation would stop at <|call|>): tool_calls, content null, finish tool_calls
    t2 = ("<|channel|>analysis<|message|>I need the weather tool.<|end|><|start|>assistant<|channel|>commentary "
          "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}")
    kw = forced(t2, tools=TOOLS, tool_choice="auto")
    w = c.chat.completions.create(**kw).choices[0]
    tc = w.message.tool_calls or []
    check(rc(w.message) == "I need the weather tool." and w.message.content is None and w.finish_reason == "tool_calls" and
          len(tc) == 1 and tc[0].id.startswith("call_") and tc[0].function.name == "get_weather" and
          tc[0].function.arguments == "{\"city\": \"Paris\"}", "tools whole: %s" % w)
    r, ct, calls, toks, fin, n_r = streamed(**kw)
    check(r == "I need the weather tool." and ct is None and fin == "tool_calls" and list(calls) == [0] and
          calls[0]["name"] == "get_weather" and json.loads(calls[0]["args"]) == {"city": "Paris"} and
          (calls[0]["id"] or "").startswith("call_"), "tools streamed: %r %r %s %s" % (r, ct, calls, fin))

    # a preamble (commentary without recipient) is content; the template's own call form (recipient first)
    t3 = ("<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant to=functions.get_weather"
          "<|channel|>commentary json<|message|>{\"city\": \"Lyon\"}")
    kw = forced(t3, tools=TOOLS)
    w = c.chat.completions.create(**kw).choices[0]
    tc = w.message.tool_calls or []
    check(rc(w.message) is None and w.message.content == "Let me check." and len(tc) == 1 and
          tc[0].function.arguments == "{\"city\": \"Lyon\"}", "preamble whole: %s" % w)
    r, ct, calls = streamed(**kw)[:3]
    check(r is None and ct == "Let me check." and len(calls) == 1 and calls[0]["args"] == "{\"city\": \"Lyon\"}",
          "preamble streamed: %r %r %s" % (r, ct, calls))

    # no tools in the request: a call message is no content, nothing of it shows
    w = c.chat.completions.create(**forced(t2)).choices[0]
    check(rc(w.message) == "I need the weather tool." and w.message.content is None and not w.message.tool_calls and
          w.finish_reason == "stop", "no tools: %s" % w)

    # cut at max_tokens inside the analysis (the token count from the logprobs above): all reasoning, content
    # null, finish length
    cut, spell = 0, ""
    while len(spell) < len("<|channel|>analysis<|message|>The user"):
        spell += toks1[cut]
        cut += 1
    w = c.chat.completions.create(**forced(t1, max_tokens=cut)).choices[0]
    check(w.finish_reason == "length" and w.message.content is None and rc(w.message) and
          "The user asks about the weather.".startswith(rc(w.message)), "truncated: %s" % w)
    got = streamed(**forced(t1, max_tokens=cut))[:2]
    check(got == (rc(w.message), None), "truncated streamed: %r" % (got,))

    # reasoning_effort (the openai client's own parameter) is the template's reasoning_effort ("Reasoning: low" in the
    # system message): the same prompt as passing it in chat_template_kwargs, another than the default (medium)
    def prompt_tokens(**kw):
        return c.chat.completions.create(model="m", messages=ask, max_tokens=1, temperature=0, **kw).usage.prompt_tokens
    low = prompt_tokens(reasoning_effort="low")
    check(low == prompt_tokens(extra_body={"chat_template_kwargs": {"reasoning_effort": "low", "enable_thinking": True}}) and
          low != prompt_tokens() and prompt_tokens(reasoning_effort="medium") == prompt_tokens(),
          "reasoning_effort low: %d prompt tokens, kwargs %d, default %d" %
          (low, prompt_tokens(extra_body={"chat_template_kwargs": {"reasoning_effort": "low"}}), prompt_tokens()))
    try:
        prompt_tokens(extra_body={"reasoning_effort": "extreme"})
        check(False, "reasoning_effort extreme was accepted")
    except openai.BadRequestError as e:
        check("reasoning_effort" in str(e), "reasoning_effort extreme: %s" % e)

    # tool_choice required cannot be forced in harmony: refused
    try:
        c.chat.completions.create(model="m", messages=ask, max_tokens=5, tools=TOOLS, tool_choice="required")
        check(False, "tool_choice required was accepted")
    except openai.BadRequestError as e:
        check("harmony" in str(e), "tool_choice required: %s" % e)

    # completions: no parser there
    t = c.completions.create(model="m", prompt="Hello", max_tokens=200, temperature=0,
                             extra_body={"structured_outputs": {"choice": [t1]}}).choices[0]
    check(t.text == t1, "completions: %r" % t.text)


def without_parser():
    # no reasoning parser: the markup is the content, as before; tools need the parser (400 naming it)
    t1 = "<|channel|>final<|message|>Hi"
    w = c.chat.completions.create(**forced(t1)).choices[0]
    check(w.message.content == t1 and rc(w.message) is None, "no parser: %s" % w)
    try:
        c.chat.completions.create(model="m", messages=ask, max_tokens=5, tools=TOOLS)
        check(False, "tools without the harmony parser were accepted")
    except openai.BadRequestError as e:
        check("openai_gptoss" in str(e), "tools without the parser: %s" % e)


{"with": with_parser, "without": without_parser}[mode]()
sys.exit(1 if fails else 0)
