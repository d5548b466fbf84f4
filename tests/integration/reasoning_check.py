#!/usr/bin/env python3
"""reasoning_check.py URL qwen3|deepseek_r1 -- [reasoning] what reasoning.sh asks of a server started with that
--reasoning-parser (see reasoning.sh), through the official openai client: message.reasoning / reasoning_content and
delta.reasoning / reasoning_content (vLLM's field and its older name, always equal here) are not in the client's
types and are read through model_extra. A guided choice forces the model's text, so each split is known in advance.
Prints the mismatches; exit 0 / 1."""
import json
import sys

import openai

url, mode = sys.argv[1], sys.argv[2]
c = openai.OpenAI(base_url=url + "/v1", api_key="none")
fails = 0
ask = [{"role": "user", "content": "Hello"}]


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


def forced(text, max_tokens=80, kwargs=None, extra_body_add=None, **kw):
    """request arguments whose output is text (cut at max_tokens)"""
    body = {"structured_outputs": {"choice": [text]}}
    if kwargs is not None:
        body["chat_template_kwargs"] = kwargs
    body.update(extra_body_add or {})
    return dict(model="m", messages=ask, max_tokens=max_tokens, temperature=0, extra_body=body, **kw)


def streamed(**kw):
    """a stream joined: reasoning, content (None when absent), tool calls, logprob tokens, finish, reasoning
    chunks; checks that no chunk carries both kinds, that reasoning never follows the answer and that no
    reasoning delta shows a marker"""
    reasoning, content, calls, toks, fin, n_r = "", "", {}, [], None, 0
    for ev in c.chat.completions.create(stream=True, **kw):
        if not ev.choices:
            continue
        ch = ev.choices[0]
        d = ch.delta
        r = rc(d)
        check(not (r and d.content), "a chunk with both reasoning and content: %s" % d)
        if r:
            check(not content and not calls, "reasoning after the answer began: %r" % r)
            check("<think>" not in r and "</think>" not in r, "a marker in a reasoning delta: %r" % r)
            reasoning += r
            n_r += 1
        content += d.content or ""
        for tc in d.tool_calls or []:
            e = calls.setdefault(tc.index, {"name": "", "args": ""})
            e["name"] += tc.function.name or ""
            e["args"] += tc.function.arguments or ""
        if ch.logprobs and ch.logprobs.content:
            toks += [t.token for t in ch.logprobs.content]
        fin = ch.finish_reason or fin
    return reasoning or None, content or None, calls, toks, fin, n_r


def spelled(toks):
    """the tokens' text, the end-of-text token that closed the choice aside"""
    return "".join(toks[:-1] if toks and toks[-1] == "<|end_of_text|>" else toks)


def qwen3():
    # Qwen3's own shape: the newlines after </think> stay in content; logprobs spell the whole output
    t1 = "<think>\nThe user greets me.\n</think>\n\nHello there!"
    w = c.chat.completions.create(logprobs=True, **forced(t1)).choices[0]
    check(rc(w.message) == "\nThe user greets me.\n" and w.message.content == "\n\nHello there!" and w.finish_reason == "stop",
          "whole: %r %r %s" % (rc(w.message), w.message.content, w.finish_reason))
    check(spelled([t.token for t in w.logprobs.content]) == t1, "whole logprobs spell %r" % [t.token for t in w.logprobs.content])
    r, ct, calls, toks, fin, n_r = streamed(logprobs=True, **forced(t1))
    check((r, ct, fin) == (rc(w.message), w.message.content, "stop"), "streamed: %r %r %s" % (r, ct, fin))
    check(spelled(toks) == t1, "streamed logprobs spell %r" % toks)
    check(n_r > 1, "the reasoning came in %d chunk(s), not as it was written" % n_r)

    # include_reasoning false (vLLM's): the same split, the reasoning dropped -- null whole, no reasoning chunk streamed
    w = c.chat.completions.create(**forced(t1, extra_body_add={"include_reasoning": False})).choices[0]
    check(rc(w.message) is None and w.message.content == "\n\nHello there!" and
          (w.message.model_extra or {}).get("reasoning", 1) is None, "include_reasoning false: %s" % w.message)
    r, ct, calls, toks, fin, n_r = streamed(**forced(t1, extra_body_add={"include_reasoning": False}))
    check((r, ct, fin, n_r) == (None, "\n\nHello there!", "stop", 0), "include_reasoning false streamed: %r %r %s %d" %
          (r, ct, fin, n_r))
    try:
        c.chat.completions.create(**forced(t1, extra_body_add={"include_reasoning": "no"}))
        check(False, "include_reasoning \"no\" was taken")
    except openai.BadRequestError as e:
        check("include_reasoning" in str(e), "include_reasoning \"no\": %s" % e)

    # enable_thinking false: the template closes the thinking, the model answers: content only
    kw = forced("Just an answer.", kwargs={"enable_thinking": False})
    w = c.chat.completions.create(**kw).choices[0]
    check(rc(w.message) is None and w.message.content == "Just an answer.", "enable_thinking false: %r %r" % (rc(w.message), w.message.content))
    r, ct = streamed(**kw)[:2]
    check(r is None and ct == "Just an answer.", "enable_thinking false streamed: %r %r" % (r, ct))

    # reasoning_effort "none" (vLLM): enable_thinking false unless chat_template_kwargs says otherwise -- the same prompt
    def prompt_tokens(**kw):
        return c.chat.completions.create(model="m", messages=ask, max_tokens=1, temperature=0, **kw).usage.prompt_tokens
    off, on = (prompt_tokens(extra_body={"chat_template_kwargs": {"enable_thinking": v}}) for v in (False, True))
    check(off != on and prompt_tokens(reasoning_effort="none") == off and prompt_tokens(reasoning_effort="high") == on and
          prompt_tokens(reasoning_effort="none", extra_body={"chat_template_kwargs": {"enable_thinking": True}}) == on,
          "reasoning_effort: none %d high %d, enable_thinking false %d true %d" %
          (prompt_tokens(reasoning_effort="none"), prompt_tokens(reasoning_effort="high"), off, on))

    # the thinking sent back in the history (vLLM takes reasoning, or reasoning_content): Qwen3's template writes an
    # assistant turn's reasoning_content after the last user message -- the same prompt under either name, another
    # without; a non-string is refused
    def hist(**extra):
        return [{"role": "user", "content": "Hello"}, dict({"role": "assistant", "content": "Hi there."}, **extra)]
    def hist_tokens(msgs):
        return c.chat.completions.create(model="m", messages=msgs, max_tokens=1, temperature=0,
                                         extra_body={"add_generation_prompt": False, "continue_final_message": True}).usage.prompt_tokens
    a, b, plain = hist_tokens(hist(reasoning="I greet back.")), hist_tokens(hist(reasoning_content="I greet back.")), hist_tokens(hist())
    check(a == b and a != plain, "history reasoning: %d (reasoning) %d (reasoning_content) %d (none)" % (a, b, plain))
    try:
        hist_tokens(hist(reasoning=5))
        check(False, "a numeric reasoning was accepted")
    except openai.BadRequestError as e:
        check("reasoning" in str(e), "numeric reasoning: %s" % e)

    # tools: the hermes parser reads the content part only
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
              "properties": {"location": {"type": "string"}}, "required": ["location"]}}},
             {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
              "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}]
    t2 = ("<think>\nI need the weather.\n</think>\n\n<tool_call>\n"
          "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>")
    kw = forced(t2, max_tokens=120, tools=tools, tool_choice="auto")
    w = c.chat.completions.create(**kw).choices[0]
    tc = w.message.tool_calls or []
    check(rc(w.message) == "\nI need the weather.\n" and w.message.content is None and w.finish_reason == "tool_calls" and
          len(tc) == 1 and tc[0].function.name == "get_weather" and json.loads(tc[0].function.arguments) == {"location": "Paris"},
          "tools whole: %s" % w)
    r, ct, calls, toks, fin, n_r = streamed(**kw)
    check(r == rc(w.message) and ct is None and fin == "tool_calls" and list(calls) == [0] and calls[0]["name"] == "get_weather"
          and json.loads(calls[0]["args"]) == {"location": "Paris"}, "tools streamed: %r %r %s %s" % (r, ct, calls, fin))
    # a call written inside the reasoning is no call
    t3 = "<think>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n</tool_call>\n</think>\n\nIt is sunny."
    kw = forced(t3, max_tokens=120, tools=tools, tool_choice="auto")
    w = c.chat.completions.create(**kw).choices[0]
    check(not w.message.tool_calls and w.finish_reason == "stop" and w.message.content == "\n\nIt is sunny." and
          rc(w.message) == t3[len("<think>"):t3.index("</think>")], "a call inside the reasoning was parsed: %s" % w)
    r, ct, calls, toks, fin, n_r = streamed(**kw)
    check(not calls and fin == "stop" and ct == "\n\nIt is sunny." and r == rc(w.message), "streamed: %r %r %s %s" % (r, ct, calls, fin))

    # completions: no parser there
    t = c.completions.create(model="m", prompt="Hello", max_tokens=80, temperature=0,
                             extra_body={"structured_outputs": {"choice": [t1]}}).choices[0]
    check(t.text == t1 and "reasoning_content" not in (t.model_extra or {}), "completions: %r" % t)


def deepseek_r1():
    # DeepSeek-R1-Distill-Qwen-32B's template (llama.cpp's copy) opens "<think>\n" with enable_thinking and
    # closes it ("</think>") without: then the whole output is the answer, markers and all
    t4 = "The user greets me.\n</think>\n\nHello there!"
    on = {"enable_thinking": True}
    for kwargs, want in ((on, ("The user greets me.\n", "\n\nHello there!")), (None, (None, t4))):
        kw = forced(t4, kwargs=kwargs)
        w = c.chat.completions.create(**kw).choices[0]
        check((rc(w.message), w.message.content) == want, "kwargs %s whole: %r %r" % (kwargs, rc(w.message), w.message.content))
        got = streamed(**kw)[:2]
        check(got == want, "kwargs %s streamed: %r" % (kwargs, got))
    # cut at max_tokens before </think>: everything is reasoning, content null (vLLM's THINK_NO_END)
    t5 = "A long line of thought that does not end here"
    kw = forced(t5, max_tokens=6, kwargs=on)
    w = c.chat.completions.create(**kw).choices[0]
    check(w.finish_reason == "length" and w.message.content is None and rc(w.message) and t5.startswith(rc(w.message)),
          "truncated: %r %r %s" % (rc(w.message), w.message.content, w.finish_reason))
    got = streamed(**kw)[:2]
    check(got == (rc(w.message), None), "truncated streamed: %r" % (got,))


{"qwen3": qwen3, "deepseek_r1": deepseek_r1}[mode]()
sys.exit(1 if fails else 0)
