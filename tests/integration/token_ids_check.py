#!/usr/bin/env python3
"""token_ids_check.py URL MODEL_DIR TEMPLATE -- [token ids] vLLM's return_token_ids through the official openai client
(extra_body; the fields are read through model_extra), on a server started by token_ids.sh (Qwen3's template, the
qwen3 reasoning parser, hermes tool calls). The expected values are not the server's own:
  - prompt_token_ids: HF transformers' tokenizer on the same tokenizer.json (apply_chat_template with the same
    template for chat, the tokenizer's own encoding with special tokens for completions);
  - token_ids: HF's decode of them (special tokens kept) is the forced output (a guided choice forces the text, so it
    is known in advance) followed by the end-of-text token; their count is usage.completion_tokens; with logprobs and
    return_tokens_as_token_ids the scored tokens are the same ids (the scheduler's logprob path);
  - streamed: the chunks' token_ids joined are the whole response's, the prompt's ids only in a choice's first chunk.
Prints the mismatches; exit 0 / 1."""
import json
import sys

import openai
import requests
from transformers import AutoTokenizer

url, model_dir, template = sys.argv[1], sys.argv[2], sys.argv[3]
c = openai.OpenAI(base_url=url + "/v1", api_key="none")
hf = AutoTokenizer.from_pretrained(model_dir)
tmpl = open(template).read()
fails = 0
ask = [{"role": "user", "content": "Hello"}]
IDS = {"return_token_ids": True}


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH:", what)


def ex(o, k):
    return (o.model_extra or {}).get(k)


def decoded(ids):
    return hf.decode(ids, skip_special_tokens=False)


def chat_prompt_ids(msgs, tools=None, **kwargs):
    r = hf.apply_chat_template(msgs, tools=tools, chat_template=tmpl, add_generation_prompt=True, tokenize=True, **kwargs)
    return list(r["input_ids"] if isinstance(r, dict) or hasattr(r, "keys") else r)


def forced(text, **extra):
    return dict(model="m", messages=ask, max_tokens=120, temperature=0,
                extra_body=dict(IDS, structured_outputs={"choice": [text]}, **extra))


# ---- chat, whole: prompt ids at the top, the output's ids in the choice ----
t1 = "<think>\nLet me think.\n</think>\n\nParis is the capital."
p_ids = chat_prompt_ids(ask)
w = c.chat.completions.create(logprobs=True, **forced(t1, return_tokens_as_token_ids=True))
ch = w.choices[0]
ids = ex(ch, "token_ids")
check(ex(w, "prompt_token_ids") == p_ids, "chat prompt_token_ids %s != HF %s" % (ex(w, "prompt_token_ids"), p_ids))
check(isinstance(ids, list) and len(ids) == w.usage.completion_tokens, "chat token_ids %s vs usage %s" % (ids, w.usage))
check(ids and decoded(ids[:-1]) == t1 and ids[-1] in (hf.eos_token_id, hf.convert_tokens_to_ids("<|end_of_text|>")),
      "chat token_ids decode to %r (want %r + end of text)" % (decoded(ids or []), t1))
check([t.token for t in ch.logprobs.content] == ["token_id:%d" % i for i in ids], "chat logprob ids != token_ids")
check(ex(ch.message, "reasoning_content") == "\nLet me think.\n" and ch.message.content == "\n\nParis is the capital.",
      "chat split changed: %s" % ch.message)
whole_ids = ids

# ---- chat, streamed: reasoning then content chunks; ids per chunk; prompt ids once, at the top of the first ----
got, heads, n_chunks, text = [], [], 0, ""
for ev in c.chat.completions.create(stream=True, **forced(t1)):
    heads.append(ex(ev, "prompt_token_ids"))
    if not ev.choices:
        continue
    n_chunks += 1
    got += ex(ev.choices[0], "token_ids") or []
    d = ev.choices[0].delta
    text += (ex(d, "reasoning_content") or "") + (d.content or "")
check(heads[0] == p_ids and all(h is None for h in heads[1:]), "chat stream prompt ids: %s" % heads[:3])
check(got == whole_ids and n_chunks > 3, "chat stream ids %s != whole %s (%d chunks)" % (got, whole_ids, n_chunks))
check(text == t1.replace("<think>", "").replace("</think>", ""), "chat stream text %r" % text)

# ---- chat with tools: the call's ids ride on the tool-call chunks too ----
tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
          "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}]
t2 = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>"
kw = forced(t2, chat_template_kwargs={"enable_thinking": False})
kw["tools"] = tools
w = c.chat.completions.create(**kw)
ids = ex(w.choices[0], "token_ids")
check(w.choices[0].finish_reason == "tool_calls" and ids and decoded(ids[:-1]) == t2, "tools whole: %s" % w.choices[0])
tp_ids = chat_prompt_ids(ask, tools=tools, enable_thinking=False)
check(ex(w, "prompt_token_ids") == tp_ids, "tools prompt ids differ from HF (%d vs %d ids)" %
      (len(ex(w, "prompt_token_ids") or []), len(tp_ids)))
got, fin = [], None
for ev in c.chat.completions.create(stream=True, **kw):
    if ev.choices:
        got += ex(ev.choices[0], "token_ids") or []
        fin = ev.choices[0].finish_reason or fin
check(got == ids and fin == "tool_calls", "tools stream ids %s != %s (%s)" % (got, ids, fin))

# ---- completions: each choice its prompt's ids (two prompts, n 2) ----
prompts = ["Once upon a time", "The quick brown fox"]
want = [hf(p)["input_ids"] for p in prompts]
r = c.completions.create(model="m", prompt=prompts, n=2, max_tokens=6, temperature=0, extra_body=IDS)
check(len(r.choices) == 4, "completions choices: %d" % len(r.choices))
total = 0
for ch in r.choices:
    ids = ex(ch, "token_ids") or []
    total += len(ids)
    check(ex(ch, "prompt_token_ids") == want[ch.index // 2], "completions choice %d prompt ids %s != HF %s" %
          (ch.index, ex(ch, "prompt_token_ids"), want[ch.index // 2]))
    check(len(ids) == 6 and hf.decode(ids, skip_special_tokens=True) == ch.text,
          "completions choice %d: decode(%s) = %r != %r" % (ch.index, ids, hf.decode(ids, skip_special_tokens=True), ch.text))
    check("prompt_token_ids" not in (r.model_extra or {}), "completions: prompt ids at the top")
check(total == r.usage.completion_tokens, "completions: %d ids vs usage %s" % (total, r.usage))
whole = {ch.index: ex(ch, "token_ids") for ch in r.choices}
got, heads = {}, {}
for ev in c.completions.create(model="m", prompt=prompts, n=2, max_tokens=6, temperature=0, stream=True, extra_body=IDS):
    for ch in ev.choices:
        got.setdefault(ch.index, []).extend(ex(ch, "token_ids") or [])
        if ex(ch, "prompt_token_ids") is not None:
            heads.setdefault(ch.index, []).append(ex(ch, "prompt_token_ids"))
check(got == whole, "completions stream ids %s != whole %s" % (got, whole))

# ---- stream_options.continuous_usage_stats (vLLM): every chunk carries its choice's usage so far, which counts the ids
# the chunks carried up to it; the last usage chunk is the totals ----
seen, last = {}, None
for ev in c.completions.create(model="m", prompt=prompts, n=2, max_tokens=6, temperature=0, stream=True, extra_body=IDS,
                               stream_options={"include_usage": True, "continuous_usage_stats": True}):
    if not ev.choices:
        last = ev.usage
        continue
    for ch in ev.choices:
        seen[ch.index] = seen.get(ch.index, 0) + len(ex(ch, "token_ids") or [])
        u = ev.usage
        check(u is not None and u.completion_tokens == seen[ch.index] and u.prompt_tokens == len(want[ch.index // 2]) and
              u.total_tokens == u.prompt_tokens + u.completion_tokens, "continuous usage %s after %d ids" % (u, seen[ch.index]))
check(last is not None and last.completion_tokens == sum(seen.values()) == 24, "final usage %s (%s)" % (last, seen))
ev = next(iter(c.completions.create(model="m", prompt=prompts[0], max_tokens=2, temperature=0, stream=True,
                                    stream_options={"include_usage": True})))
check(ev.usage is None, "usage in a chunk without continuous_usage_stats: %s" % ev.usage)
check(heads == {i: [want[i // 2]] for i in range(4)}, "completions stream prompt ids: %s" % heads)

# ---- a stop token id ends the output and is the last id, counted in the usage ----
stop = whole[0][2]
r = c.completions.create(model="m", prompt=prompts[0], max_tokens=6, temperature=0,
                         extra_body=dict(IDS, stop_token_ids=[stop]))
ids = ex(r.choices[0], "token_ids")
check(r.choices[0].finish_reason == "stop" and ids == whole[0][:whole[0].index(stop) + 1] and
      len(ids) == r.usage.completion_tokens, "stop id %d: %s %s" % (stop, ids, r.choices[0]))
check(ex(r.choices[0], "stop_reason") == stop, "stop_reason of a stop id: %s" % ex(r.choices[0], "stop_reason"))

# ---- vLLM's stop_reason: the stop string, or the stop id -- null for the tokenizer's own eos (HF's eos_token_id),
# the id for the model's other eos ids (vLLM adds generation_config's, config.json's here, to the stop ids) -- and null
# at max_tokens; the stream's last chunk carries the same ----
cfg_eos = json.load(open(model_dir + "/config.json"))["eos_token_id"]
check(cfg_eos != hf.eos_token_id, "the fixture's eos ids must differ (config %s, tokenizer %s)" % (cfg_eos, hf.eos_token_id))
cases = [({"stop": ["beta"], "max_tokens": 30, "extra_body": {"structured_outputs": {"choice": ["alpha beta gamma"]}}}, "beta",
          "alpha "),
         ({"logit_bias": {str(hf.eos_token_id): 100}}, None, ""), ({"logit_bias": {str(cfg_eos): 100}}, cfg_eos, ""),
         ({}, None, None)]
for kw, want, text in cases:
    kw = dict({"max_tokens": 3}, **kw)
    r = c.completions.create(model="m", prompt="Once upon a time", temperature=0, **kw).choices[0]
    check(ex(r, "stop_reason") == want and (text is None or (r.text == text and r.finish_reason == "stop")),
          "stop_reason %s: %r (%r, %s)" % (kw, ex(r, "stop_reason"), r.text, r.finish_reason))
    last = [ev.choices[0] for ev in c.completions.create(model="m", prompt="Once upon a time", temperature=0, stream=True,
                                                         **kw) if ev.choices][-1]
    check(last.finish_reason == r.finish_reason and ex(last, "stop_reason") == want, "streamed stop_reason %s: %s" % (kw, last))
r = c.chat.completions.create(model="m", messages=ask, max_tokens=3, temperature=0, logit_bias={str(cfg_eos): 100})
check(ex(r.choices[0], "stop_reason") == cfg_eos and r.choices[0].finish_reason == "stop", "chat stop_reason: %s" % r.choices[0])

# ---- without the flag: no ids; a bad value: 400 naming it ----
r = c.completions.create(model="m", prompt=prompts[0], max_tokens=2, temperature=0)
check("token_ids" not in (r.choices[0].model_extra or {}), "ids without return_token_ids")
resp = requests.post(url + "/v1/chat/completions", json={"model": "m", "messages": ask, "return_token_ids": "yes"})
check(resp.status_code == 400 and resp.json()["error"]["param"] == "return_token_ids", "bad value: %s %s" %
      (resp.status_code, resp.text[:200]))

sys.exit(1 if fails else 0)
