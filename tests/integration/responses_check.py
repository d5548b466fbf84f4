#!/usr/bin/env python3
"""responses_check.py URL qwen3|harmony [TRACE] -- [responses] what responses.sh asks of POST /v1/responses, through the
official openai client (c.responses.create, create(stream=True), c.responses.stream). The oracle is the chat endpoint:
the same conversation sent to /v1/chat/completions at temperature 0 (that path is checked against HF transformers and
vLLM's parsers elsewhere) must give the same text, reasoning, tool calls, finish and token counts as /v1/responses,
whole and streamed. A guided choice (vLLM's structured_outputs, passed to both) forces the model's exact text where
a split must be known; free greedy text (random weights) checks that both render the same prompt.
Prints the mismatches; exit 0 / 1."""
import json
import sys
import time
import urllib.error
import urllib.request

import jsonschema
import openai

import stream_checks

url, mode = sys.argv[1], sys.argv[2]
trace = sys.argv[3] if len(sys.argv) > 3 else None
c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
fails = 0
ids = []   # (response id, input_tokens, output_tokens) for the trace check

CHAT_TOOLS = stream_checks.CHAT_TOOLS
# the same tools in the Responses API's flat shape
TOOLS = [dict({"type": "function", "strict": False}, **t["function"]) for t in CHAT_TOOLS]


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("MISMATCH %s:" % mode, what)


def chat_tool_choice(tc):
    return {"type": "function", "function": {"name": tc["name"]}} if isinstance(tc, dict) else tc


def expect(messages, max_tokens, extra, tools=None, tool_choice=None, effort=None, parallel=None, stream=False):
    """the chat endpoint's answer: reasoning, content, [(name, arguments)], finish, prompt / completion tokens (stream:
    its stream joined, as the client joins it; a qwen3 <think> never closed streams as reasoning, as vLLM streams it)"""
    kw = dict(model="m", messages=messages, temperature=0, max_completion_tokens=max_tokens, extra_body=extra)
    if tools:
        kw["tools"] = CHAT_TOOLS
    if tool_choice is not None:
        kw["tool_choice"] = chat_tool_choice(tool_choice)
    if effort:
        kw["reasoning_effort"] = effort
    if parallel is not None:
        kw["parallel_tool_calls"] = parallel
    if stream:
        reasoning, text, calls, fin, usage = "", "", {}, None, None
        for ev in c.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
            usage = ev.usage or usage
            for ch in ev.choices:
                reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
                text += ch.delta.content or ""
                for tc in ch.delta.tool_calls or []:
                    e = calls.setdefault(tc.index, ["", ""])
                    e[0] += tc.function.name or ""
                    e[1] += tc.function.arguments or ""
                fin = ch.finish_reason or fin
        return dict(reasoning=reasoning, text=text, calls=[tuple(calls[k]) for k in sorted(calls)], finish=fin,
                    usage=(usage.prompt_tokens, usage.completion_tokens))
    w = c.chat.completions.create(**kw)
    m = w.choices[0].message
    calls = [(t.function.name, t.function.arguments) for t in m.tool_calls or []]
    return dict(reasoning=(m.model_extra or {}).get("reasoning_content") or "", text=m.content or "", calls=calls,
                finish=w.choices[0].finish_reason, usage=(w.usage.prompt_tokens, w.usage.completion_tokens))


def summary(r):
    """what a Response says: reasoning, output_text, calls, status, usage; checks its shape on the way"""
    reasoning, calls, kinds = "", [], []
    for it in r.output:
        kinds.append(it.type)
        if it.type == "reasoning":
            reasoning += "".join(p.text for p in it.content or [])
            check(it.id.startswith("rs_") and it.summary == [], "reasoning item %s" % it)
        elif it.type == "message":
            check(it.id.startswith("msg_") and it.role == "assistant" and [p.type for p in it.content] == ["output_text"],
                  "message item %s" % it)
        elif it.type == "function_call":
            check(it.id.startswith("fc_") and it.call_id.startswith("call_"), "function_call item %s" % it)
            calls.append((it.name, it.arguments))
        else:
            check(False, "an item of type %s" % it.type)
    check(kinds == sorted(kinds, key=["reasoning", "message", "function_call"].index) or mode == "harmony",
          "items out of order: %s" % kinds)
    u = r.usage
    check(u.total_tokens == u.input_tokens + u.output_tokens, "usage total %s" % u)
    check(0 <= u.output_tokens_details.reasoning_tokens <= u.output_tokens and
          (u.output_tokens_details.reasoning_tokens > 0) == bool(reasoning), "reasoning_tokens %s for %r" % (u, reasoning))
    check(r.id.startswith("resp_") and r.object == "response" and r.model == "m", "response head %s %s %s" % (r.id, r.object, r.model))
    ids.append((r.id, u.input_tokens, u.output_tokens))
    return dict(reasoning=reasoning, text=r.output_text, calls=calls, status=r.status, usage=(u.input_tokens, u.output_tokens),
                incomplete=r.incomplete_details.reason if r.incomplete_details else None)


def streamed(kw):
    """a create(stream=True) joined: the final response's summary, and the deltas joined per item"""
    seq, types, deltas, final, items_done = [], [], {}, None, {}
    for ev in c.responses.create(stream=True, **kw):
        seq.append(ev.sequence_number)
        types.append(ev.type)
        if ev.type in ("response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta"):
            deltas.setdefault(ev.output_index, []).append(ev.delta)
        elif ev.type == "response.output_item.done":
            items_done[ev.output_index] = ev.item
        elif ev.type in ("response.completed", "response.incomplete", "response.failed"):
            final = ev.response
    check(seq == list(range(len(seq))), "sequence numbers %s" % seq)
    check(types[:2] == ["response.created", "response.in_progress"] and final is not None and
          types[-1] == "response.%s" % ("completed" if final.status == "completed" else "incomplete"), "event order %s" % types)
    s = summary(final)
    for i, it in enumerate(final.output):   # the deltas, joined, are each item's final text; output_item.done has it too
        text = it.arguments if it.type == "function_call" else "".join(p.text for p in it.content)
        check("".join(deltas.get(i, [])) == text, "item %d: deltas %r != %r" % (i, deltas.get(i), text))
        check(items_done.get(i) is not None and items_done[i].model_dump() == it.model_dump(), "item %d done %s != %s" %
              (i, items_done.get(i), it))
    check(sorted(items_done) == list(range(len(final.output))), "items done %s of %d" % (sorted(items_done), len(final.output)))
    return s


def same(what, messages, inp, max_tokens=40, extra=None, instructions=None, tools=False, tool_choice=None, effort=None,
         parallel=None):
    """/v1/responses (whole, streamed, the stream helper) == /v1/chat/completions on the same conversation"""
    extra = extra or {}
    e = expect(messages, max_tokens, extra, tools, tool_choice, effort, parallel)
    kw = dict(model="m", input=inp, temperature=0, max_output_tokens=max_tokens, extra_body=extra)
    if instructions is not None:
        kw["instructions"] = instructions
    if tools:
        kw["tools"] = TOOLS
    if tool_choice is not None:
        kw["tool_choice"] = tool_choice
    if effort:
        kw["reasoning"] = {"effort": effort}
    if parallel is not None:
        kw["parallel_tool_calls"] = parallel
    def want(e):
        status = "incomplete" if e["finish"] == "length" else "completed"
        return dict(reasoning=e["reasoning"], text=e["text"], calls=e["calls"], status=status, usage=e["usage"],
                    incomplete="max_output_tokens" if status == "incomplete" else None)
    w = summary(c.responses.create(**kw))
    check(w == want(e), "%s whole:\n  got  %s\n  want %s" % (what, w, want(e)))
    s = streamed(kw)
    es = expect(messages, max_tokens, extra, tools, tool_choice, effort, parallel, stream=True)
    check(s == want(es), "%s streamed:\n  got  %s\n  want %s" % (what, s, want(es)))
    status = want(e)["status"]
    if status == "completed":   # the openai stream helper accumulates the events into its own Response
        with c.responses.stream(**kw) as st:
            text = "".join(ev.delta for ev in st if ev.type == "response.output_text.delta")
            fin = st.get_final_response()
        check(text == fin.output_text == e["text"], "%s stream helper: %r / %r != %r" % (what, text, fin.output_text, e["text"]))
    return e


def forced(text):
    return {"structured_outputs": {"choice": [text]}}


def status_param(kw, status, param, raw=None):
    """a request refused with status and error.param (raw: the body as bytes, sent without the client)"""
    if raw is not None:
        req = urllib.request.Request(url + "/v1/responses", data=raw, headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=30)
            check(False, "%r was accepted" % raw)
        except urllib.error.HTTPError as ex:
            body = json.loads(ex.read())
            check(ex.code == status and body["error"]["param"] == param and body["error"]["message"],
                  "%r: %d %s" % (raw, ex.code, body))
        return
    try:
        c.responses.create(**dict(dict(model="m", input="Hello", max_output_tokens=4), **kw))
        check(False, "%s was accepted" % kw)
    except openai.APIStatusError as ex:
        check(ex.status_code == status and isinstance(ex.body, dict) and ex.body.get("param") == param,
              "%s: %d %s" % (kw, ex.status_code, ex.body))


scrapes = 0


def metric(name):
    """one /metrics scrape's value of name (a series with its labels), 0 when absent; counts the scrapes (each is a 200)"""
    global scrapes
    scrapes += 1
    return stream_checks.metric(url, name)


def errors():
    status_param({}, 400, None, raw=b'{"model": "m", "input": "Hello",')                  # malformed JSON
    status_param({}, 400, "input", raw=b'{"model": "m"}')                                  # no input
    status_param({"input": 5}, 400, "input")
    status_param({"input": []}, 400, "input")
    status_param({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, 400, "input")
    status_param({"input": [{"type": "item_reference", "id": "x"}]}, 400, "input")
    status_param({"input": [{"role": "wizard", "content": "hi"}]}, 400, "input")
    status_param({"input": [{"type": "function_call", "call_id": "call_1", "name": "get_weather"}]}, 400, "input")
    status_param({"model": "gpt-5"}, 404, "model")
    status_param({"tools": [{"type": "function", "parameters": {"type": "object"}}]}, 400, "tools")
    status_param({"tools": [{"type": "web_search"}]}, 400, "tools")
    status_param({"tools": {"type": "function", "name": "f"}}, 400, "tools")
    status_param({"tools": TOOLS, "tool_choice": {"type": "web_search_preview"}}, 400, "tool_choice")
    status_param({"tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}}, 400, "tool_choice")
    status_param({"tool_choice": "required"}, 400, "tool_choice")
    status_param({"temperature": 3}, 400, "temperature")
    status_param({"top_p": "x"}, 400, "top_p")
    status_param({"max_output_tokens": 0}, 400, "max_output_tokens")
    status_param({"max_output_tokens": 10 ** 6}, 400, "max_output_tokens")
    status_param({"instructions": 7}, 400, "instructions")
    status_param({"text": {"format": {"type": "xml"}}}, 400, "text.format")
    status_param({"text": {"format": {"type": "json_schema", "name": "x"}}}, 400, "text.format")
    status_param({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object", "propertyNames": {}}}}},
                 400, "text.format")
    status_param({"reasoning": {"effort": "huge"}}, 400, "reasoning.effort")
    status_param({"previous_response_id": "resp_123"}, 404, "previous_response_id")
    status_param({"background": True}, 400, "background")
    status_param({"include": ["message.output_text.logprobs"]}, 400, "include")
    status_param({"truncation": "auto"}, 400, "truncation")
    status_param({"conversation": "conv_1"}, 400, "conversation")
    status_param({"store": "yes"}, 400, "store")
    status_param({"metadata": {"k": 1}}, 400, "metadata")
    status_param({"stream": "yes"}, 400, "stream")
    status_param({"input": "x " * 5000}, 400, "input")                                    # longer than the context
    # nothing is stored: GET /v1/responses/{id} answers 404, even for a response just made
    rid = c.responses.create(model="m", input="Hello", max_output_tokens=2, store=True).id
    try:
        c.responses.retrieve(rid)
        check(False, "GET %s answered" % rid)
    except openai.NotFoundError as ex:
        check(rid in str(ex.body.get("message")), "GET: %s" % ex.body)
    for what, call in (("cancel", c.responses.cancel), ("delete", c.responses.delete)):   # nor cancelled or deleted
        try:
            call(rid)
            check(False, "%s %s answered" % (what, rid))
        except openai.NotFoundError as ex:
            check(rid in str(ex.body.get("message")), "%s: %s" % (what, ex.body))


def common():
    # free greedy text (no split needed): the prompt rendered from input / instructions is the chat one
    ask = [{"role": "user", "content": "Hello"}]
    same("a string input", ask, "Hello", max_tokens=12)
    same("instructions first", [{"role": "system", "content": "Be brief."}] + ask, "Hello", instructions="Be brief.",
         max_tokens=12)
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": "there"}]}]
    same("input_text parts", [{"role": "user", "content": "Hello\nthere"}], parts, max_tokens=12)
    same("developer and easy messages", [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Hi"},
                                         {"role": "assistant", "content": "Hey."}, {"role": "user", "content": "Again"}],
         [{"role": "developer", "content": "Rules."}, {"type": "message", "role": "user", "content": "Hi"},
          {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hey.", "annotations": []}]},
          {"role": "user", "content": "Again"}], max_tokens=12)
    # cut at max_output_tokens: status incomplete, incomplete_details.reason max_output_tokens (the chat's "length")
    e = expect(ask, 5, {"ignore_eos": True})
    check(e["finish"] == "length", "the chat oracle did not cut: %s" % e)
    same("cut at max_output_tokens", ask, "Hello", max_tokens=5, extra={"ignore_eos": True})
    # a NUL character in the output (a byte-level token): the chat JSON's \u0000 survives the translation
    same("a NUL character in the output", ask, "Hello", max_tokens=3, extra={"logit_bias": {"188": 100}})   # 188: byte 0x00



def structured():
    """structured output (a model whose output is text: not harmony, which reads no header in JSON): text.format
    json_schema / json_object == response_format, the text parses and validates"""
    ask = [{"role": "user", "content": "Hello"}]
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "ok": {"type": "boolean"}},
              "required": ["city", "ok"], "additionalProperties": False}
    w = c.chat.completions.create(model="m", messages=ask, temperature=0, max_completion_tokens=200,
                                  response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    r = c.responses.create(model="m", input="Hello", temperature=0, max_output_tokens=200,
                           text={"format": {"type": "json_schema", "name": "x", "schema": schema, "strict": True}})
    check(r.output_text == w.choices[0].message.content and r.text.format.type == "json_schema", "json_schema: %r != %r" %
          (r.output_text, w.choices[0].message.content))
    try:
        jsonschema.validate(json.loads(r.output_text), schema)
    except Exception as ex:   # noqa: BLE001 -- any failure to parse or validate is the mismatch
        check(False, "json_schema output %r: %s" % (r.output_text, ex))
    # json_object: random weights never close their first string, so the output is cut: the chat's, opened as an object
    w = c.chat.completions.create(model="m", messages=ask, temperature=0, max_completion_tokens=30, response_format={"type": "json_object"})
    r = c.responses.create(model="m", input="Hello", temperature=0, max_output_tokens=30, text={"format": {"type": "json_object"}})
    check(r.output_text == w.choices[0].message.content and r.output_text.startswith("{") and
          (r.status == "incomplete") == (w.choices[0].finish_reason == "length"), "json_object: %r %s != %r %s" %
          (r.output_text, r.status, w.choices[0].message.content, w.choices[0].finish_reason))


def echo_and_wire():
    # the echo of the request: sampling as run, metadata, tools, text
    r = c.responses.create(model="m", input="Hello", temperature=0.5, top_p=0.9, max_output_tokens=3, metadata={"k": "v"},
                           user="u1", store=False, tools=TOOLS, tool_choice="none")
    check((r.temperature, r.top_p, r.max_output_tokens, r.metadata, r.user, r.tool_choice, r.parallel_tool_calls,
           [t.name for t in r.tools], r.text.format.type) ==
          (0.5, 0.9, 3, {"k": "v"}, "u1", "none", True, ["get_weather", "get_time"], "text"), "echo: %s" % r)
    # streams end with the terminal event and no [DONE]; a raw look at the wire
    _, wrong = stream_checks.wire(url, "/v1/responses", {"model": "m", "input": "Hello", "max_output_tokens": 3, "stream": True})
    check(wrong is None, wrong)


def metrics_and_disconnect():
    # /metrics counts a Responses request as a chat one: a 200, its prompt and generated tokens (the earlier streams all
    # counted first)
    stream_checks.settle(url)
    s0 = scrapes   # every scrape from this one on is a 200 the later ones count
    m200 = metric('sits_requests_total{status="200"}')
    mp, mg = metric("sits_prompt_tokens_total"), metric("sits_generation_tokens_total")
    r = c.responses.create(model="m", input="Hello", temperature=0, max_output_tokens=7, extra_body={"ignore_eos": True})
    for _ in range(50):
        if metric("sits_generation_tokens_total") >= mg + 7:
            break
        time.sleep(0.1)
    n = scrapes - s0
    got = (metric('sits_requests_total{status="200"}') - m200 - n, metric("sits_prompt_tokens_total") - mp,
           metric("sits_generation_tokens_total") - mg)
    check(got == (1, r.usage.input_tokens, r.usage.output_tokens), "/metrics moved by %s for %s" % (got, r.usage))
    # a client that leaves mid-stream: its request is cancelled (finish abort), nothing left running, blocks back
    wrong = stream_checks.leave_mid_stream(url, "/v1/responses", {"model": "m", "input": "Hello", "max_output_tokens": 3000,
                                                                  "stream": True, "ignore_eos": True},
                                           "response.output_text.delta", metric)
    check(wrong is None, wrong)


def qwen3():
    ask = [{"role": "user", "content": "Hello"}]
    # reasoning apart (qwen3's parser): a reasoning item, then the message; cut inside the thinking: reasoning only
    t1 = "<think>\nThe user greets me.\n</think>\n\nHello there!"
    e = same("reasoning + answer", ask, "Hello", max_tokens=80, extra=forced(t1))
    check(e["reasoning"] == "\nThe user greets me.\n" and e["text"] == "\n\nHello there!", "the chat oracle split %s" % e)
    same("cut in the reasoning", ask, "Hello", max_tokens=14, extra=forced(t1))
    # reasoning.effort = chat's reasoning_effort ("none": Qwen3's template closes the thinking in the prompt)
    e = same("effort none", ask, "Hello", max_tokens=12, effort="none")
    check(e["usage"][0] > expect(ask, 12, {})["usage"][0], "effort none rendered no other prompt: %s" % (e,))
    same("effort low", ask, "Hello", max_tokens=12, effort="low")
    # tool calls (hermes, on the content part): forced by a named tool_choice, required (parallel), auto with a call
    ask_w = [{"role": "user", "content": "Weather in Paris?"}]
    e = same("named tool_choice", ask_w, "Weather in Paris?", max_tokens=60, tools=True,
             tool_choice={"type": "function", "name": "get_weather"})
    check(len(e["calls"]) == 1 and e["calls"][0][0] == "get_weather", "named: the chat oracle %s" % e)
    same("required, parallel", ask_w, "Weather in Paris?", max_tokens=120, tools=True, tool_choice="required")
    same("required, one call", ask_w, "Weather in Paris?", max_tokens=120, tools=True, tool_choice="required", parallel=False)
    call = '<think>\nI need the weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    e = same("auto: reasoning then a call", ask_w, "Weather in Paris?", max_tokens=120, tools=True, extra=forced(call))
    check(e["reasoning"] and e["calls"] == [("get_weather", '{"city": "Paris"}')], "auto call: the chat oracle %s" % e)
    # a conversation with the call and its output sent back: items joined into the chat messages vLLM makes
    hist = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "reasoning": "I need the weather.",
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "CET"}'}}]},
            {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
            {"role": "tool", "content": "noon", "tool_call_id": "call_2"}]
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "I need the weather."}]},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
             {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": '{"tz": "CET"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
             {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]}]
    same("tool history", hist, items, max_tokens=12, tools=True)
    # the whole response's output sent back as input (what a client loop does) == the chat history of it
    r = c.responses.create(model="m", input="Weather in Paris?", temperature=0, max_output_tokens=120, tools=TOOLS,
                           extra_body=forced(call))
    back = [{"role": "user", "content": "Weather in Paris?"}] + [it.model_dump(exclude_none=True) for it in r.output] + \
           [{"type": "function_call_output", "call_id": r.output[-1].call_id, "output": "sunny"}]
    said = "".join(p.text for it in r.output if it.type == "message" for p in it.content)
    hist2 = [{"role": "user", "content": "Weather in Paris?"},
             {"role": "assistant", "content": said, "reasoning": "\nI need the weather.\n",
              "tool_calls": [{"id": r.output[-1].call_id, "type": "function",
                              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
             {"role": "tool", "content": "sunny", "tool_call_id": r.output[-1].call_id}]
    same("output sent back", hist2, back, max_tokens=12, tools=True)


def harmony():
    ask = [{"role": "user", "content": "Hello"}]
    t1 = ("<|channel|>analysis<|message|>The user asks about the weather.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris.")
    e = same("analysis + final", ask, "Hello", max_tokens=120, extra=forced(t1))
    check(e["reasoning"] == "The user asks about the weather." and e["text"] == "It is sunny in Paris.", "the chat oracle %s" % e)
    t2 = ("<|channel|>analysis<|message|>I need the weather tool.<|end|><|start|>assistant<|channel|>commentary "
          "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}")
    e = same("a call", [{"role": "user", "content": "Weather?"}], "Weather?", max_tokens=160, tools=True, extra=forced(t2))
    check(e["calls"] == [("get_weather", '{"city": "Paris"}')], "the chat oracle %s" % e)
    same("effort low", ask, "Hello", max_tokens=12, effort="low")
    same("cut in the analysis", ask, "Hello", max_tokens=8, extra=forced(t1))


def agents_sdk():
    """the OpenAI Agents SDK (when installed) runs an agent on the server, whole and streamed: its forced call's
    arguments are the chat endpoint's for the same conversation, the tool runs, its result is the final output"""
    import asyncio
    from agents import Agent, FunctionTool, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
    set_tracing_disabled(True)
    got = []

    async def invoke(ctx, args):
        got.append(args)
        return "sunny"
    fn = CHAT_TOOLS[0]["function"]
    tool = FunctionTool(name=fn["name"], description=fn["description"], params_json_schema=fn["parameters"],
                        on_invoke_tool=invoke, strict_json_schema=False)
    agent = Agent(name="a", instructions="Be brief.", tools=[tool], tool_use_behavior="stop_on_first_tool",
                  model=OpenAIResponsesModel(model="m", openai_client=openai.AsyncOpenAI(base_url=url + "/v1", api_key="none")),
                  model_settings=ModelSettings(tool_choice=fn["name"], max_tokens=120, temperature=0))
    want = c.chat.completions.create(model="m", messages=[{"role": "system", "content": "Be brief."},
                                                          {"role": "user", "content": "Weather in Paris?"}],
                                     tools=CHAT_TOOLS[:1], tool_choice=chat_tool_choice({"name": fn["name"]}), temperature=0,
                                     max_completion_tokens=120).choices[0].message.tool_calls[0].function.arguments

    async def run():
        whole = await Runner.run(agent, "Weather in Paris?", max_turns=2)
        st = Runner.run_streamed(agent, "Weather in Paris?", max_turns=2)
        async for _ in st.stream_events():
            pass
        return whole.final_output, st.final_output
    outs = asyncio.run(run())
    check(got == [want, want] and outs == ("sunny", "sunny"), "agents sdk: calls %s (chat: %s), outputs %s" % (got, want, outs))


errors()
common()
echo_and_wire()
{"qwen3": qwen3, "harmony": harmony}[mode]()
if mode == "qwen3":
    structured()
    metrics_and_disconnect()
    try:
        import agents  # noqa: F401 -- optional: the OpenAI Agents SDK, a client of /v1/responses
    except ImportError:
        print("(the OpenAI Agents SDK is not installed: its check skipped)")
    else:
        agents_sdk()
if trace:   # the request trace names each response by its id, with the same token counts
    for wrong in stream_checks.trace_counts(trace, ids):
        check(False, wrong)
print("%d mismatch(es)" % fails if fails else "ok")
sys.exit(1 if fails else 0)
