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

# ---- an unknown name: refused at start, with the list ----
timeout 120 $SITS_MPIRUN -np 1 "$SITS" --model "$tmp/m" --load-format dummy --port 0 --reasoning-parser granite \
  > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "reasoning-parser 'granite' is not one of deepseek_r1, qwen3, openai_gptoss, auto" "$tmp/err"; then
  ok "unknown --reasoning-parser refused at start (exit $rc)"
else
  bad "unknown --reasoning-parser: exit $rc"; tail -5 "$tmp/err"
fi
finish
