#!/bin/bash
# [reasoning] --reasoning-parser through the real server (mpirun -np 1, CPU, random weights, the byte-level
# fixture tokenizer: it spells "<think>" / "</think>" in several tokens) and the official openai client.
# A guided choice (structured_outputs {"choice": [...]}) forces the model's exact text, so the split is known
# (the checks: reasoning_check.py):
#   qwen3 on Qwen3's template: message.reasoning (== reasoning_content) / content (read through model_extra), the "\n\n"
#     after </think> kept in content; streamed: delta.reasoning_content chunks (more than one: the 8-layer
#     model streams token by token), then content, no marker in any delta, joined equal to the whole
#     response; logprobs ride on the chunks (their tokens spell the whole output, markers included);
#     include_reasoning false -> reasoning null, no reasoning chunk, the same content ("no" -> 400);
#     enable_thinking false -> content only; hermes tool calls parsed from the content part only (a call
#     written inside the reasoning is no call), whole and streamed; /v1/completions untouched;
#   deepseek_r1 picked by auto from DeepSeek-R1-Distill-Qwen-32B's template (the choice logged at start):
#     reasoning until </think>; cut at max_tokens: all reasoning, content null; a prompt the template
#     closed itself (this llama.cpp copy writes </think> unless enable_thinking) -> content only;
#   mistral picked by auto from Ministral 3 Reasoning's template: [THINK] ... [/THINK] apart, a [THINK] never closed all
#     reasoning, no [THINK] all content (vLLM's MistralReasoningParser), whole and streamed; with [THINK] a control token
#     (as in Mistral's tokenizers) the parser still reads it;
#   an unknown parser name refuses to start, naming the choices.
. "$top_srcdir/tests/integration/lib.sh"
need_py_curl
"$PY" -c 'import openai' 2>/dev/null || { echo "SKIP: python openai is needed"; exit 77; }
serve_tmp
# the 8-layer test model: a step takes milliseconds, so the pump meets the tokens as they come and the
# reasoning streams in several chunks (markers cut between passes of the pump)
serve_setup_slow "$tmp/m"
T=$top_srcdir/tests/fixtures/templates
CHECK=$top_srcdir/tests/integration/reasoning_check.py

# ---- qwen3 (Qwen3-0.6B's template; --reasoning-parser auto picks qwen3 there too) ----
if serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T/Qwen-Qwen3-0.6B.jinja" --reasoning-parser qwen3 \
     --tool-call-parser hermes; then
  "$PY" "$CHECK" "$url" qwen3 && ok "qwen3: reasoning_content apart, whole and streamed, tools on the content part" || bad "qwen3"
  stop_np "$tmp/m" || bad "qwen3 server did not stop cleanly"
fi

# ---- deepseek_r1 by auto (DeepSeek-R1-Distill-Qwen-32B's template opens "<think>\n" when thinking) ----
if SITS_LOG_LEVEL=info serve_np 1 "$tmp/m" --load-format dummy --chat-template "$T/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja" \
     --reasoning-parser auto; then
  grep -q "reasoning: the chat template's parser is deepseek_r1" "$tmp/err" && ok "auto: deepseek_r1 from the R1 template (logged)" ||
    bad "auto did not log deepseek_r1: $(grep -i reasoning "$tmp/err")"
  "$PY" "$CHECK" "$url" deepseek_r1 && ok "deepseek_r1: reasoning until </think>, truncated -> all reasoning, closed prompt -> content" ||
    bad "deepseek_r1"
  stop_np "$tmp/m" || bad "deepseek_r1 server did not stop cleanly"
fi

# ---- mistral by auto (Ministral 3 Reasoning's template: [THINK] ... [/THINK]); the tokenizer's [THINK] / [/THINK] are control
# tokens as in Mistral's tokenizers (two reserved special tokens of the fixture renamed), which the parser must see ----
cp -r "$tmp/m" "$tmp/mi"
rename_special "$tmp/mi" "3002=[THINK]" "3003=[/THINK]" || bad "tokenizer patch"
if SITS_LOG_LEVEL=info serve_np 1 "$tmp/mi" --load-format dummy --chat-template "$T/mistralai-Ministral-3-14B-Reasoning-2512.jinja" \
     --reasoning-parser auto --served-model-name m; then
  grep -q "reasoning: the chat template's parser is mistral" "$tmp/err" && ok "auto: mistral from Ministral 3 Reasoning's template (logged)" ||
    bad "auto did not log mistral: $(grep -i reasoning "$tmp/err" | head -2)"
  "$PY" - "$url" "$top_srcdir/tests/integration" <<'PYEOF' && ok "mistral: [THINK] ... [/THINK] apart, whole and streamed; [THINK] control tokens reach the parser" || bad "mistral"
import sys, openai
sys.path.insert(0, sys.argv[2])
from stream_checks import Checker
c = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none")
check = Checker("mistral")
ask = [{"role": "user", "content": "Hello"}]
def rc(m):
    return (m.model_extra or {}).get("reasoning_content")
for text, r, ct in (("[THINK]Let me think.[/THINK]The answer.", "Let me think.", "The answer."),
                    ("[THINK]Still thinking", "Still thinking", None), ("No thoughts.", None, "No thoughts.")):
    kw = dict(model="m", messages=ask, max_tokens=60, temperature=0, extra_body={"structured_outputs": {"choice": [text]}})
    w = c.chat.completions.create(**kw).choices[0].message
    check(rc(w) == r and w.content == ct, "whole %r: %r / %r" % (text, rc(w), w.content))
    sr, sc = "", ""
    for ev in c.chat.completions.create(stream=True, **kw):
        if ev.choices:
            sr += rc(ev.choices[0].delta) or ""
            sc += ev.choices[0].delta.content or ""
    check((sr or None) == r and (sc or None) == ct, "streamed %r: %r / %r" % (text, sr, sc))
# the control token 3002 ([THINK]) at every step: the parser reads it (the rest is reasoning), not dropped as special
w = c.chat.completions.create(model="m", messages=ask, max_tokens=3, temperature=0, logit_bias={"3002": 100}).choices[0].message
check(rc(w) == "[THINK][THINK]" and w.content is None, "special [THINK]: %r / %r" % (rc(w), w.content))
check.done()
PYEOF
  stop_np "$tmp/mi" || bad "mistral server did not stop cleanly"
fi

# ---- an unknown name: refused at start, with the list ----
timeout 120 $SITS_MPIRUN -np 1 "$SITS" --model "$tmp/m" --load-format dummy --port 0 --reasoning-parser granite \
  > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "reasoning-parser 'granite' is not one of deepseek_r1, qwen3, mistral, openai_gptoss, auto" "$tmp/err"; then
  ok "unknown --reasoning-parser refused at start (exit $rc)"
else
  bad "unknown --reasoning-parser: exit $rc"; tail -5 "$tmp/err"
fi
finish
