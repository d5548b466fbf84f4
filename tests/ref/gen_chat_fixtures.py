#!/usr/bin/env python3
"""gen_chat_fixtures.py -- expected chat prompts from transformers' apply_chat_template for sits-dist's chat
layer (src/tokenizer/chat.c: how a model directory's templates are found and chosen, and what transformers
does to the conversation around the Jinja render).

Writes tests/fixtures/chat/:
  <model>/tokenizer_config.json (+ chat_template.jinja, additional_chat_templates/*.jinja): model directories
      built from real templates (tests/fixtures/templates/, llama.cpp's models/templates from the
      llama-cpp-python sdist on PyPI) in each form transformers reads: a tokenizer_config.json string, a
      list of named templates ({name, template}: "default" and "tool_use"), chat_template.jinja beside a
      tokenizer_config.json that holds another one (the file wins), additional_chat_templates/NAME.jinja;
      the special tokens of each family (strings and AddedToken objects)
  cases.json: [{"model", "input": {messages, tools?, documents?, add_generation_prompt, continue_final_message?,
      chat_template_kwargs?, chat_template_name?}, "expected": text | null, "error": message | null}]
The same inputs go to `sits-dist --model DIR --render-chat INPUT` (tests/unit/test_chat.c renders them
through the library, tests/integration/render_chat.sh through the CLI).

Reference: AutoTokenizer.from_pretrained(dir).apply_chat_template(messages, tokenize=False, ...) with the
pinned transformers (tests/ref/requirements.txt); strftime_now is pinned to NOW (UTC) as the C test does.
The tokenizer.json needed to construct the tokenizer is copied in at generation time only (not committed:
the chat layer reads only the template files).

Usage:  python3 tests/ref/gen_chat_fixtures.py            # regenerate into a temp dir and compare (default)
        python3 tests/ref/gen_chat_fixtures.py --write    # rewrite tests/fixtures/chat/
"""
import argparse, datetime, filecmp, json, os, shutil, sys, tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "templates")
TOKJSON = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "bytelevel", "tokenizer.json")
NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)   # strftime_now's clock, UTC: 1721995200

LLAMA3_SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|finetune_right_pad_id|>"}
QWEN_SPECIAL = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
                "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}
MISTRAL_SPECIAL = {"bos_token": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
                                 "single_word": False, "__type": "AddedToken"},
                   "eos_token": "</s>", "unk_token": "<unk>"}
GEMMA_SPECIAL = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}
GPTOSS_SPECIAL = {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"}

# model dir -> (special tokens, how the templates are stored)
MODELS = {
    "llama31_string": (LLAMA3_SPECIAL, {"config": "meta-llama-Llama-3.1-8B-Instruct.jinja"}),
    "llama32_jinja_file": (LLAMA3_SPECIAL, {"config": "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                            "file": "meta-llama-Llama-3.2-3B-Instruct.jinja"}),
    "qwen25": (QWEN_SPECIAL, {"config": "Qwen-Qwen2.5-7B-Instruct.jinja"}),
    "qwen3": (QWEN_SPECIAL, {"config": "Qwen-Qwen3-0.6B.jinja"}),
    "hermes_named": (LLAMA3_SPECIAL, {"named": {"default": "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                                "tool_use": "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"}}),
    "mistral_nemo_additional": (MISTRAL_SPECIAL, {"file": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                                  "additional": {"tool_use": "unsloth-mistral-Devstral-Small-2507.jinja"}}),
    "gemma2": (GEMMA_SPECIAL, {"config": "google-gemma-2-2b-it.jinja"}),
    "gpt_oss": (GPTOSS_SPECIAL, {"file": "openai-gpt-oss-120b.jinja"}),
}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Zürich"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}
TOOL_TURNS = [
    {"role": "user", "content": "What's the weather in Zürich?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9f3A1b2C3", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "call_9f3A1b2C3", "name": "get_weather", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
]


def cases_for(model):
    """(input dict) list; every model gets the same conversations, the reference decides what each gives."""
    sys_msg = {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."}
    u1 = {"role": "user", "content": "  Hello! \"Quotes\", 'single', {braces} and\ttabs  "}
    a1 = {"role": "assistant", "content": "Hi. ✓ Unicode: 日本語, emoji 👍🏽"}
    u2 = {"role": "user", "content": "And 2+2?"}
    out = [
        {"messages": [u1], "add_generation_prompt": True},
        {"messages": [u1], "add_generation_prompt": False},
        {"messages": [sys_msg, u1, a1, u2], "add_generation_prompt": True},
        {"messages": [sys_msg, u1, a1], "add_generation_prompt": False},
        # None-valued keys are dropped before the template sees them
        {"messages": [sys_msg, {"role": "user", "content": "hi", "name": None}], "add_generation_prompt": True},
        # assistant prefill
        {"messages": [u1, {"role": "assistant", "content": "Sure, the answer is "}], "add_generation_prompt": False,
         "continue_final_message": True},
        {"messages": [u1, {"role": "assistant", "content": "Trailing space trimmed   "}], "add_generation_prompt": False,
         "continue_final_message": True},
        # both at once is an error
        {"messages": [u1, a1], "add_generation_prompt": True, "continue_final_message": True},
        # content parts
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}],
         "add_generation_prompt": True},
        # reasoning under another name is aliased to thinking / reasoning_content
        {"messages": [u1, {"role": "assistant", "content": "42", "reasoning": "Adding up."}, u2], "add_generation_prompt": True},
        # tools, tool calls, tool results
        {"messages": [sys_msg] + TOOL_TURNS, "tools": [WEATHER_TOOL], "add_generation_prompt": True},
        {"messages": TOOL_TURNS[:1], "tools": [WEATHER_TOOL], "add_generation_prompt": True},
        # template variables from the caller
        {"messages": [u1], "add_generation_prompt": True, "chat_template_kwargs": {"enable_thinking": False,
                                                                                   "date_string": "01 Dec 2026"}},
        # a user-first conversation with roles out of order (some templates raise)
        {"messages": [u1, u2], "add_generation_prompt": True},
    ]
    if model == "hermes_named":   # (transformers takes an unknown name as template source; sits-dist refuses it)
        out.append({"messages": [u1], "add_generation_prompt": True, "chat_template_name": "tool_use"})
        out.append({"messages": [u1], "tools": [WEATHER_TOOL], "add_generation_prompt": True,
                    "chat_template_name": "default"})
    return out


def write_model(d, special, form, templates):
    os.makedirs(d, exist_ok=True)
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072}
    cfg.update({k: v for k, v in special.items() if v is not None})
    rd = lambda name: open(os.path.join(templates, name), encoding="utf-8").read()
    if "config" in form:
        cfg["chat_template"] = rd(form["config"])
    if "named" in form:
        cfg["chat_template"] = [{"name": n, "template": rd(t)} for n, t in form["named"].items()]
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")
    if "file" in form:
        with open(os.path.join(d, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(rd(form["file"]))
    for n, t in form.get("additional", {}).items():
        os.makedirs(os.path.join(d, "additional_chat_templates"), exist_ok=True)
        with open(os.path.join(d, "additional_chat_templates", n + ".jinja"), "w", encoding="utf-8") as f:
            f.write(rd(t))


def render(d, inp):
    import transformers
    from transformers import AutoTokenizer
    tmp = tempfile.mkdtemp()
    try:
        shutil.copytree(d, tmp, dirs_exist_ok=True)
        shutil.copy(TOKJSON, os.path.join(tmp, "tokenizer.json"))
        tok = AutoTokenizer.from_pretrained(tmp)
        kw = dict(inp.get("chat_template_kwargs", {}))
        try:
            txt = tok.apply_chat_template(inp["messages"], tools=inp.get("tools"), documents=inp.get("documents"),
                                          chat_template=inp.get("chat_template_name"),
                                          add_generation_prompt=inp.get("add_generation_prompt", False),
                                          continue_final_message=inp.get("continue_final_message", False),
                                          tokenize=False, **kw)
            return txt, None
        except Exception as e:   # what the template (or transformers around it) raised
            return None, "%s: %s" % (type(e).__name__, str(e).split("\n")[0])
    finally:
        shutil.rmtree(tmp)


def generate(out_dir, templates):
    import transformers, jinja2
    import transformers.utils.chat_template_utils as ctu

    class FixedNow(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return NOW
    ctu.datetime = FixedNow   # strftime_now() reads datetime.now()
    ctu._compile_jinja_template.cache_clear()
    cases = []
    for name, (special, form) in MODELS.items():
        write_model(os.path.join(out_dir, name), special, form, templates)
        for inp in cases_for(name):
            txt, err = render(os.path.join(out_dir, name), inp)
            cases.append({"model": name, "input": inp, "expected": txt, "error": err})
    doc = {"generator": {"script": "tests/ref/gen_chat_fixtures.py", "transformers": transformers.__version__,
                         "jinja2": jinja2.__version__, "now_utc": NOW.isoformat(), "now_epoch": 1721995200},
           "cases": cases}
    with open(os.path.join(out_dir, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    n_err = sum(1 for c in cases if c["error"])
    print("%d cases over %d model dirs (%d raise)" % (len(cases), len(MODELS), n_err))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="rewrite tests/fixtures/chat/")
    ap.add_argument("--templates", default=TEMPLATES, help="directory of the real .jinja templates")
    a = ap.parse_args()
    dest = os.path.join(ROOT, "tests", "fixtures", "chat")
    if a.write:
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        generate(dest, a.templates)
        return 0
    tmp = tempfile.mkdtemp()
    try:
        generate(tmp, a.templates)
        diff = filecmp.dircmp(tmp, dest)
        bad = diff.left_only + diff.right_only + diff.diff_files
        for sub in diff.subdirs.values():
            bad += sub.left_only + sub.right_only + sub.diff_files
        print("identical to the committed fixtures" if not bad else "differs: %s" % bad)
        return 1 if bad else 0
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
