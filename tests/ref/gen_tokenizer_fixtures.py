#!/usr/bin/env python3
"""gen_tokenizer_fixtures.py -- train small HF tokenizers and write the tokenizer + chat-template fixtures.

Writes, under tests/fixtures/tokenizers/ (committed; CI does not regenerate):
  bytelevel/   byte-level BPE with Llama-3's split regex, ignore_merges, Llama-3 special tokens, merges in the
               [a, b] pair form, TemplateProcessing BOS, chat_template = Llama-3 Instruct.
  spm/         SentencePiece-style BPE: byte_fallback, <0xXX> byte tokens, Metaspace(prepend_scheme first,
               split false), decoder Sequence[Replace, ByteFallback, Fuse, Strip], merges in "a b" string
               form, chat_template = Llama-2-chat.
  bytelevel_nfc/ the byte-level model behind a normalizer NFC (as Qwen2), chat_template = Qwen2 ChatML.
  gpt2/        the byte-level model behind ByteLevel(add_prefix_space, use_regex) only (a third of the strings).
  spm_metadec/ the SentencePiece model with Metaspace(always, split) pre-tokenizer and decoder (a third).
  spm_legacy/  the same model with the legacy normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] and no
               pre-tokenizer, chat_template = Mistral-Instruct.
  each dir: tokenizer.json, tokenizer_config.json, config.json, generation_config.json, cases.json
            (cases: text, ids (no specials), ids_bos (add_special_tokens), decoded, decoded_skip,
            cut_ids = ids[1:-1] and its decode cut_decoded)
  chat/cases.json: Llama-3 / Llama-2 / Mistral / Qwen2-ChatML renders from transformers apply_chat_template.

Training corpus: the Debian package `debian-reference-en` (Debian Reference, English original, by Osamu Aoki
et al., licence GPL-2+), file /usr/share/debian-reference/debian-reference.en.txt.gz
(`apt-get install debian-reference-en`).

Run: python3 tests/ref/gen_tokenizer_fixtures.py [OUTDIR]   (needs tokenizers and transformers from PyPI)
"""
import copy
import gzip
import json
import os
import random
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

CORPUS = "/usr/share/debian-reference/debian-reference.en.txt.gz"
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "fixtures", "tokenizers")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Real chat_template strings of tokenizer_config.json (pasted; no hub access here).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}")
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]


NFC_STRINGS = ["e\u0301", "A\u030a and \u212b", "\u1100\u1161\u11a8", "o\u0308\u0304", "\u2126 ohm", "q\u0307\u0323",
               "e\u0301<|eot_id|>e\u0301", "\u0301 leading mark", "ﬁ ligature stays", "\u0344"]


def corpus_lines():
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        return [ln.rstrip("\n") for ln in f]


def write_json(path, obj, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def train_bytelevel(lines):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(LLAMA3_SPECIALS)
    # A special token that eats whitespace on both sides and a non-special added token with lstrip.
    tok.add_special_tokens([AddedToken("<|mask|>", lstrip=True, rstrip=True, normalized=False, special=True)])
    tok.add_tokens([AddedToken("[[tool]]", lstrip=True, rstrip=False, normalized=False, special=False)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    j = json.loads(tok.to_str())
    # merges as [a, b] pairs (tokenizers >= 0.20 form)
    j["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in j["model"]["merges"]]
    return j


def train_spm(lines):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=2600, min_frequency=2, show_progress=False, limit_alphabet=120,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(lines, trainer)
    j = json.loads(tok.to_str())
    old = j["model"]["vocab"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for t, _ in sorted(old.items(), key=lambda kv: kv[1]):
        if t not in vocab:
            vocab[t] = len(vocab)
    merges = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]  # legacy "a b" form
    j["model"].update({"vocab": vocab, "merges": merges, "byte_fallback": True, "fuse_unk": True,
                       "unk_token": "<unk>", "ignore_merges": False})
    j["added_tokens"] = [
        {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return j


def spm_legacy(j):
    j = copy.deepcopy(j)
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    j["pre_tokenizer"] = None
    return j


def test_strings(lines):
    rnd = random.Random(1234)
    s = ["", " ", "  ", "\t", "\n", "\r\n", "a", "A", "Hello world", "Hello, world!", " leading space",
         "trailing space ", "   three leading", "multiple   inner    spaces", "tab\tseparated\tvalues",
         "line one\nline two\n", "windows\r\nline\r\nendings\r\n", "\n\n\nblank lines\n\n", "\t\t  \t mixed",
         "1", "12", "123", "1234", "12345678901234567890", "3.14159265", "v1.2.3-rc4", "0x7fffffff", "1,000,000",
         "I'm", "I'M", "you're", "YOU'RE", "we've", "WE'VE", "he'll", "HE'LL", "she'd", "SHE'D", "it's", "IT'S",
         "don't", "DON'T", "Don'T", "o'clock", "rock 'n' roll", "'s 't 're 've 'm 'll 'd", "''", "'''quoted'''",
         "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "naïve café résumé",
         "Ünïcödé", "e\u0301 a\u0300 o\u0308", "combining: n\u0303o\u0302\u0323", "\u00a0nbsp\u00a0here\u00a0",
         "en\u2002space em\u2003space thin\u2009space", "ideographic\u3000space", "narrow\u202fnbsp",
         "mongolian\u180evowel\u180eseparator", "\u180e\u180e", "a\u180e\u180e b", "1 \u180e\u180e\n", "x  \u180e y", "\u180e \u180e", "zero\u200bwidth\u200bspace", "line\u2028sep\u2029para",
         "next\u0085line", "日本語のテキスト", "中文测试，标点。", "한국어 텍스트", "混合 mixed 文字 text",
         "emoji 😀 😃 😄", "👨‍👩‍👧‍👦 family", "👍🏽 thumbs", "🏳️‍🌈 flag", "❤️ heart", "🇫🇷🇩🇪 flags",
         "Ελληνικά κείμενο", "Русский текст", "עברית", "العربية", "हिन्दी", "ไทย", "math: ∑∫∂√∞ ≤ ≥ ≠",
         "arrows → ← ↑ ↓", "quotes “smart” ‘single’ «guillemets»", "dash – — ‐", "ellipsis…", "€100 £50 ¥1000",
         "<|begin_of_text|>", "<|eot_id|>", "<|begin_of_text|>Hello", "Hello<|eot_id|>",
         "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "a<|eot_id|>b<|eot_id|>c",
         "<|eot_id|><|eot_id|>", "<|eot_id", "<|unknown_token|>", "< |eot_id| >", "x <|mask|> y", "x<|mask|>y",
         "  <|mask|>  ", "call [[tool]] now", "call[[tool]]now", "   [[tool]]   ", "<s>", "</s>", "<unk>",
         "<s>Hello</s>", " <s> spaced </s> ", "<0x41>", "<0x41><0x42>", "▁", "▁▁x", "a▁b", "def foo(x):\n    return x + 1\n",
         "int main(void) {\n\treturn 0;\n}\n", "for (int i = 0; i < n; ++i) { a[i] = b[i] * 2; }",
         "if x == 1 and y != 2:\n        pass", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
         "SELECT * FROM t WHERE id = 42;", "$ ls -la /usr/share | grep doc", "#include <stdio.h>",
         "https://www.debian.org/doc/manuals/debian-reference/", "user@example.com", "C:\\Windows\\System32",
         "a\u0000b", "\x7f\x01\x02", "ctrl\x1bchars", "~!@#$%^&*()_+`-=[]{}|;':\",./<>?", "!!!???...",
         "----------", "==========", "__init__", "CamelCaseIdentifier", "snake_case_identifier", "UPPER_CASE",
         "x" * 200, " " * 50, "\n" * 20, "ab" * 60, "🙂" * 10, "é" * 30]
    # whitespace runs of every kind before/after words
    spaces = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2003", " \n ", "\n\n", "\t\n", " \t "]
    words = ["word", "Word", "123", "don't", "日本", "😀", "<|eot_id|>", "x", "'s", "...", "é"]
    for _ in range(150):
        n = rnd.randint(1, 6)
        t = ""
        for _ in range(n):
            t += rnd.choice(spaces) if rnd.random() < 0.5 else ""
            t += rnd.choice(words)
        if rnd.random() < 0.5:
            t += rnd.choice(spaces)
        s.append(t)
    # digit runs
    for n in range(1, 25):
        s.append("".join(rnd.choice("0123456789") for _ in range(n)))
        s.append("x" + "".join(rnd.choice("0123456789") for _ in range(n)) + " y")
    # contractions in mixed case
    for c in ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]:
        for w in ["it", "IT", "It"]:
            s.append(w + c + " " + w.upper() + c.upper() + " " + w + c.title())
    # prose lines from the corpus (ASCII and otherwise)
    pick = [ln for ln in lines if len(ln.strip()) > 20]
    for ln in rnd.sample(pick, 150):
        s.append(ln)
    for _ in range(25):
        i = rnd.randrange(len(lines) - 8)
        s.append("\n".join(lines[i:i + 8]))
    # random Unicode soup from a safe repertoire
    rep = ("abcXYZ019 \t\n\u00a0\u3000éñüßø日本語中文한국😀👍🏽‍️ÅΩЖ\u0301\u0308-_.,!?'\"<>|" + "\u180e\u2028")
    for _ in range(40):
        s.append("".join(rnd.choice(rep) for _ in range(rnd.randint(1, 40))))
    return s


def run_cases(tok, strings):
    out = []
    for t in strings:
        ids = tok.encode(t, add_special_tokens=False).ids
        ids_bos = tok.encode(t, add_special_tokens=True).ids
        cut = ids[1:-1]  # usually splits a multi-byte character: exercises lossy decoding
        out.append({"text": t, "ids": ids, "ids_bos": ids_bos,
                    "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip": tok.decode(ids, skip_special_tokens=True),
                    "cut_ids": cut, "cut_decoded": tok.decode(cut, skip_special_tokens=False)})
    return out


def write_model_dir(name, j, strings, tcfg, gcfg, cfg):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "tokenizer.json"), j, compact=True)
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))  # the reference is what HF reads back
    write_json(os.path.join(d, "tokenizer_config.json"), tcfg)
    write_json(os.path.join(d, "generation_config.json"), gcfg)
    write_json(os.path.join(d, "config.json"), cfg)
    cases = run_cases(tok, strings)
    write_json(os.path.join(d, "cases.json"), cases, compact=True)
    print(name, "vocab", tok.get_vocab_size(), "cases", len(cases), "merges", len(j["model"]["merges"]))
    return tok


CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "  padded question \n"}, {"role": "assistant", "content": " An answer. "},
     {"role": "user", "content": "Follow-up?"}],
    [{"role": "system", "content": "Be kind.\nAlways."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello, how can I help?"}, {"role": "user", "content": "日本語で答えて 😀"}],
    [{"role": "user", "content": "One"}, {"role": "assistant", "content": "Two"}],
]


def chat_fixtures():
    from transformers import PreTrainedTokenizerFast
    fams = [("llama3", LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>"),
            ("llama2", LLAMA2_TEMPLATE, "<s>", "</s>"),
            ("mistral", MISTRAL_TEMPLATE, "<s>", "</s>"),
            ("chatml", CHATML_TEMPLATE, None, "<|im_end|>")]
    base = Tokenizer(models.BPE())
    out = []
    for name, tmpl, bos, eos in fams:
        kw = {"eos_token": eos}
        if bos:
            kw["bos_token"] = bos
        t = PreTrainedTokenizerFast(tokenizer_object=base, **kw)
        t.chat_template = tmpl
        for conv in CONVERSATIONS:
            for gen in (False, True):
                try:
                    r = t.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
                    err = False
                except Exception:  # roles the template refuses (raise_exception)
                    r, err = None, True
                out.append({"family": name, "template": tmpl, "bos_token": bos or "", "eos_token": eos,
                            "messages": conv, "add_generation_prompt": gen, "expected": r, "error": err})
    d = os.path.join(OUT, "chat")
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "cases.json"), out)
    print("chat cases", len(out))


def main():
    lines = corpus_lines()
    strings = test_strings(lines)
    bl = train_bytelevel(lines)
    bos_id = [t["id"] for t in bl["added_tokens"] if t["content"] == "<|begin_of_text|>"][0]
    ids = {t["content"]: t["id"] for t in bl["added_tokens"]}
    write_model_dir("bytelevel", bl, strings,
                    {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE,
                     "tokenizer_class": "PreTrainedTokenizerFast"},
                    {"bos_token_id": bos_id, "eos_token_id": [ids["<|end_of_text|>"], ids["<|eot_id|>"]]},
                    {"model_type": "llama", "bos_token_id": bos_id, "eos_token_id": ids["<|end_of_text|>"],
                     "vocab_size": max(ids.values()) + 1})
    # Qwen2-style: the same byte-level model behind an NFC normalizer (needs utf8proc in sits-dist).
    nfc = copy.deepcopy(bl)
    nfc["normalizer"] = {"type": "NFC"}
    write_model_dir("bytelevel_nfc", nfc, strings + NFC_STRINGS,
                    {"bos_token": None, "eos_token": "<|eot_id|>", "chat_template": CHATML_TEMPLATE},
                    {"eos_token_id": ids["<|eot_id|>"]}, {"model_type": "qwen2", "eos_token_id": ids["<|eot_id|>"]})
    # GPT-2 style: the same model behind ByteLevel(add_prefix_space, use_regex) alone (subset of strings).
    g2 = copy.deepcopy(bl)
    g2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    g2["post_processor"] = None
    write_model_dir("gpt2", g2, strings[::3], {"eos_token": "<|end_of_text|>"}, {}, {"model_type": "gpt2"})
    sp = train_spm(lines)
    # Metaspace decoder (newer Llama/Mistral exports) over byte fallback tokens (subset of strings).
    md = copy.deepcopy(sp)
    md["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    md["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    write_model_dir("spm_metadec", md, strings[::3], {"eos_token": "</s>"}, {}, {"model_type": "llama"})
    for name, j, tmpl in (("spm", sp, LLAMA2_TEMPLATE), ("spm_legacy", spm_legacy(sp), MISTRAL_TEMPLATE)):
        write_model_dir(name, j, strings,
                        {"bos_token": {"content": "<s>", "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False}, "eos_token": "</s>", "unk_token": "<unk>",
                         "chat_template": tmpl, "add_bos_token": True, "add_eos_token": False},
                        {"bos_token_id": 1, "eos_token_id": 2},
                        {"model_type": "llama", "bos_token_id": 1, "eos_token_id": 2,
                         "vocab_size": len(j["model"]["vocab"])})
    chat_fixtures()


if __name__ == "__main__":
    main()
